"""How long the engine takes to serve once its container starts: vLLM 0.26 measured phase by
phase on a GPU (issue 46), and the brief's target beside it.

The measurement (docs/measurements/start_shipped_h100_vllm0.26.json, written by
``bench/serve_evidence.py start-cuts`` in three device calls on one H100 within one lease; the
table in start_shipped_h100_vllm0.26.md): ``vllm serve`` with prod's engine settings and three
LoRA adapters, from ``Popen`` to the first answer of the base model and of every adapter, in the
product's cache layout (container/serving/compile_cache.py ``cache_env``: VLLM_CACHE_ROOT, and
TRITON_CACHE_DIR inside it, so that the root a release ships carries Triton's JIT kernels):

- ``cold``: an empty root: 155.2 s (what the release job's first start does, producing the cache).
- ``warm``: the root the cold start left, the median of three warm starts (66.2, 75.2, 75.7 s):
  what a new instance does with the shipped cache (container/model_prep/compile_cache_step.py
  makes it; the image checks it was made for this GPU and these versions before using it).
- ``warm_vllm_cache_only`` (docs/measurements/start_triton_h100_vllm0.26.json, an earlier lease):
  the root without Triton's kernels, 122.6-139.4 s: every warm start compiled ~435 Triton files
  again. This is what releases shipped before TRITON_CACHE_DIR moved inside the root.

- **Error**: the phase before the model loads (imports, the model-class inspection, the engine
  process's spawn and imports) took 41-91 s over the twelve starts of the two leases (two
  machines, the same GPU model); half that range is the stated error of one start
  (:attr:`EngineStart.error_seconds`). The later phases varied by a few seconds.
- **The GPU difference**: the product deploys ml.g6e.xlarge (one L40S, compute capability 8.9; 4
  vCPUs), not an H100 (9.0; the measuring host had 16 cores). The GPU sat idle through the start:
  the start is host work (imports, process spawns, Dynamo and Inductor, the host side of graph
  capture), so a slower GPU does not lengthen it in proportion, and the figure is carried to the
  L40S unchanged. Its direction is optimistic: the L40S host has a quarter of the cores, and a
  compile cache is specific to the GPU it was made on (the release must produce its own on an
  L40S; the release manifest records that start's cold and warm seconds on that GPU).
- **Not in the figure**: the real checkpoint's read (the measurement used dummy weights: 2 s;
  the 5.7 GB AWQ weights read from the instance's disk, not measured here), and the product's own
  entrypoint (validation, the compile-cache copy, its warmup of every adapter and option probe:
  not measured on a GPU; the first answers there took 0.06-0.3 s each).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

MEASUREMENTS = Path(__file__).resolve().parents[1] / "docs" / "measurements"
#: The product's layout, cold and warm.
MEASUREMENT = MEASUREMENTS / "start_shipped_h100_vllm0.26.json"
#: The warm start from vLLM's cache root alone (Triton's kernels elsewhere), and more starts of
#: the same engine on another machine of the same GPU model (the error).
ROOT_ONLY_MEASUREMENT = MEASUREMENTS / "start_triton_h100_vllm0.26.json"
#: The brief's acceptance criterion (GPU architecture document, user story 3): "model loading
#: time < 30 s from instance started to first request served".
TARGET_SECONDS = 30.0
#: The measurement's spans, in start order, with the names the plan prints.
PHASES: tuple[tuple[str, str], ...] = (
    ("python_start_to_load", "imports, model inspection, engine process spawn"),
    ("weights_load", "weights (dummy)"),
    ("compile_and_profile_run", "torch.compile + profile run"),
    ("kv_cache_and_graph_capture", "KV cache + CUDA graph capture"),
    ("capture_to_engine_ready", "warm-up after capture (unnamed by vLLM)"),
    ("engine_ready_to_app_ready", "HTTP server + adapters"),
)
#: The phases a shipped compile cache leaves as they were (the measurement's warm start).
REMAIN_WITH_CACHE = (
    "python_start_to_load",
    "kv_cache_and_graph_capture",
    "capture_to_engine_ready",
)
#: The runs the figures come from: the production engine, cold and warm (the median warm start
#: from the whole cache a release ships), and the warm start from vLLM's cache root alone (what
#: releases shipped before; ROOT_ONLY_MEASUREMENT).
COLD, WARM, WARM_ROOT_ONLY = "cold", "warm", "warm_vllm_cache_only"


@dataclass(frozen=True)
class Phase:
    key: str
    name: str
    cold_seconds: float
    warm_seconds: float


@dataclass(frozen=True)
class EngineStart:
    """Container process start to the first answer of the base model and every adapter."""

    device: str
    vllm: str
    cold_seconds: float  # empty compile cache
    warm_seconds: float  # the compile cache a release ships (vLLM's root and Triton's JIT cache)
    warm_root_only_seconds: float  # vLLM's cache root without Triton's JIT cache
    error_seconds: float  # +- for one start (module docstring)
    phases: tuple[Phase, ...]
    source: str

    @property
    def saved_by_cache_seconds(self) -> float:
        return round(self.cold_seconds - self.warm_seconds, 1)


def _spans(run: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in run["phases"]["spans_s"].items()}


def _first_answers(run: dict[str, Any], spans: dict[str, float]) -> float:
    """App ready to the last adapter's first answer: what the spans leave of the total."""
    return round(float(run["all_adapters_answered_s"]) - sum(spans[k] for k, _ in PHASES), 1)


@lru_cache(maxsize=2)
def measured(path: Path = MEASUREMENT, root_only: Path = ROOT_ONLY_MEASUREMENT) -> EngineStart:
    """The committed start measurement (read once)."""
    data = json.loads(path.read_text())
    other = json.loads(root_only.read_text())
    runs = {r["run"]: r for r in data["runs"]}
    cold, warm = _spans(runs[COLD]), _spans(runs[WARM])
    pre_load = [_spans(r)["python_start_to_load"] for r in (*data["runs"], *other["runs"])]
    root_only_run = next(r for r in other["runs"] if r["run"] == WARM_ROOT_ONLY)
    dev = data["device"]
    return EngineStart(
        device=dev["nvidia_smi"]["name"],
        vllm=dev["vllm"],
        cold_seconds=round(float(runs[COLD]["all_adapters_answered_s"]), 1),
        warm_seconds=round(float(runs[WARM]["all_adapters_answered_s"]), 1),
        warm_root_only_seconds=round(float(root_only_run["all_adapters_answered_s"]), 1),
        error_seconds=round((max(pre_load) - min(pre_load)) / 2),
        phases=(
            *(Phase(k, n, round(cold[k], 1), round(warm[k], 1)) for k, n in PHASES),
            Phase(
                "first_answers",
                "first answers (base + every adapter)",
                _first_answers(runs[COLD], cold),
                _first_answers(runs[WARM], warm),
            ),
        ),
        source=f"docs/measurements/{path.name}",
    )


def start_section(
    gpus: list[str], health_check_timeout_seconds: float, m: EngineStart | None = None
) -> dict[str, Any]:
    """The plan's start figures (one engine configuration for every variant); ``gpus``: the
    GPUs the config deploys, which the figure is carried to; ``health_check_timeout_seconds``:
    the startup health check's bound (deployment.startup_health_check_timeout_seconds, also the
    entrypoint's STARTUP_TIMEOUT_SECONDS); ``m``: the committed measurement unless given."""
    m = m or measured()
    return {
        "health_check_timeout_seconds": health_check_timeout_seconds,
        "target_gpus": gpus,
        "device": m.device,
        "vllm": m.vllm,
        "cold_seconds": m.cold_seconds,
        "warm_seconds": m.warm_seconds,
        "warm_root_only_seconds": m.warm_root_only_seconds,
        "error_seconds": m.error_seconds,
        "target_seconds": TARGET_SECONDS,
        "phases": [p.__dict__ for p in m.phases],
        "source": m.source,
    }


def render_start(s: dict[str, Any]) -> list[str]:
    """The start phases beside the brief's 30 s target: met only at the pessimistic edge."""
    warm, err, target = float(s["warm_seconds"]), float(s["error_seconds"]), s["target_seconds"]
    verdict = "met" if warm + err <= target else "not met"
    gpus = " and ".join(s["target_gpus"]) or "target GPU"
    lines = [
        f"  start   container start to first answer (every adapter): {warm:g} s +- {err:g} s "
        f"with a matching compile cache, {s['cold_seconds']:g} s without; the brief's target is "
        f"{target:g} s: {verdict} (vLLM {s['vllm']} on one {s['device']}, {s['source']}; "
        f"carried to the {gpus} unchanged: the start is host work, the GPU idle; "
        "sizing/engine_start.py)",
        f"          {'phase':<48} {'cold s':>7}  {'warm s':>7}",
        *(
            f"          {p['name']:<48} {p['cold_seconds']:>7g}  {p['warm_seconds']:>7g}"
            for p in s["phases"]
        ),
    ]
    rest = sum(p["warm_seconds"] for p in s["phases"] if p["key"] in REMAIN_WITH_CACHE)
    lines.append(
        f"          with the cache, {rest:g} s of imports, graph capture and warm-up remain: "
        f"{rest / target:.1f}x the target before weights or adapters (the cache holds Triton's "
        "JIT kernels too, TRITON_CACHE_DIR inside it: from vLLM's cache root alone the warm "
        f"start took {s['warm_root_only_seconds']:g} s; container/serving/compile_cache.py)"
    )
    bound = float(s["health_check_timeout_seconds"])
    cold_edge = float(s["cold_seconds"]) + err
    if bound < cold_edge:
        lines.append(
            f"          WARNING: deployment.startup_health_check_timeout_seconds {bound:g} s is "
            f"below a start without the compile cache ({s['cold_seconds']:g} s + {err:g} s): such "
            "an instance fails its startup health check (the entrypoint exits at the same bound)"
        )
    return lines
