"""The model's error against every measured point, in one command: ``python -m
sizing.speed_evidence [--fit] [--env prod]`` (``make speed-evidence``). It prints the H100 fit's
figures (sizing.speed_calibration), the published points on other GPUs (below), every LoRA run's
points (sizing.lora_fit), each measured against the model with its error, and the plan's combined
band per GPU for a config (sizing.serving_speed.planned_band).

The published points:
Reads ``docs/measurements/published_gpu_points.json`` (published vLLM figures of Llama-3-8B-class
models on the A10G, L4, A100, ..., each with its source and settings), runs the model's own
workload simulation (:func:`sizing.speed_model.simulate`) at each point's settings and prints the
error of each. With ``--fit`` it first searches, per GPU, the :attr:`Gpu.efficiency
<sizing.speed_model.Gpu.efficiency>` that minimises the squared log-errors of that GPU's ``fit``
points (golden-section search over one factor), to be copied into ``GPUS``. The tests
(tests/infra/test_speed_model.py) hold the committed efficiencies to :data:`FIT_BOUND` and the
committed :data:`sizing.speed_model.SPEED_BANDS` to covering every point's error.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from sizing import capacity
from sizing.speed_calibration import LLAMA3_8B
from sizing.speed_model import GPUS, EngineLimits, Speed, StepCost, Workload, simulate, step_cost
from typed_config.catalog import INSTANCE_CATALOG

POINTS = (
    Path(__file__).resolve().parent.parent / "docs" / "measurements" / "published_gpu_points.json"
)
#: Largest relative error (model / published - 1) a fitted point may show after the correction.
FIT_BOUND = 0.15
#: The engine settings of the published runs, where the sources name none: the vLLM defaults of
#: their time (V0 engine: max_num_seqs 256, no chunked prefill so the batch is one model length,
#: gpu_memory_utilization 0.9, 16-token blocks, the sampler outside the memory profile).
V0_LIMITS = {"max_num_seqs": 256, "max_num_batched_tokens": 8192}
V0_GPU_MEMORY_UTILIZATION = 0.9
#: vLLM of 2025 (0.23 in the A100 source): V1 engine, chunked prefill with 8,192 tokens a step.
V1_LIMITS = {"max_num_seqs": 256, "max_num_batched_tokens": 8192}
#: A burst of N requests sent at once (request rate inf) is run as a closed loop this wide: the
#: queue never empties, so what binds is max_num_seqs or the KV cache, as in the burst.
BURST_CLIENTS = 256


@dataclass(frozen=True)
class Point:
    id: str
    gpu: str
    use: str  # "fit" or "context"
    engine: str
    figure: str  # decode_tps, output_tok_s or e2e_p50_s
    published: float
    prompt: int
    output: int
    concurrency: int | None  # None: a burst
    url: str | None
    source: str
    settings: str
    uncertain: str
    #: Another point of the same harness on the H100 (the fitted GPU): the model's error there is
    #: the harness's, divided out of this point's (see :func:`harness_factor`).
    reference: str | None = None

    @property
    def v0(self) -> bool:
        """A vLLM of 2024 (V0 engine): its KV cache and limits, not today's."""
        return "0.23" not in self.engine and "SGLang" not in self.engine


def load(path: Path = POINTS) -> list[Point]:
    """The points with a figure the model can be compared with."""
    out: list[Point] = []
    for p in json.loads(path.read_text())["points"]:
        cmp: dict[str, Any] | None = p.get("compare")
        if not cmp:
            continue
        w = p["workload"]
        out.append(
            Point(
                id=p["id"],
                gpu=p["gpu"],
                use=p["use"],
                engine=p["engine"],
                figure=cmp["figure"],
                published=float(cmp["value"]),
                prompt=int(w["prompt"]),
                output=int(w["output"]),
                concurrency=w.get("concurrency"),
                url=p.get("url"),
                source=p["source"],
                settings=f"{p['precision']}; {w['prompt']} + {w['output']} tokens; "
                + (f"{w['concurrency']} in flight" if w.get("concurrency") else w["arrivals"]),
                uncertain=p.get("uncertain", ""),
                reference=cmp.get("reference"),
            )
        )
    return out


def kv_tokens_v0(gpu: str) -> int:
    """KV-cache tokens a 2024 vLLM (V0) gives the 16-bit 8B model on one of ``gpu``'s cards, by
    the project's own memory model (sizing.capacity) at that engine's defaults."""
    inst = next(i for i in INSTANCE_CATALOG.values() if i.gpu == gpu)
    terms = capacity.memory_terms(
        LLAMA3_8B,
        quantization="none",
        lora_rank=0,
        max_loras=0,
        max_num_batched_tokens=V0_LIMITS["max_num_batched_tokens"],
        max_num_seqs=V0_LIMITS["max_num_seqs"],
        enforce_eager=False,
        cuda_graphs_in_kv_budget=False,
        sampler_in_profile=False,
    )
    return capacity.kv_cache_tokens(
        inst.cuda_memory_gib,
        V0_GPU_MEMORY_UTILIZATION,
        terms,
        capacity.kv_bytes_per_token(LLAMA3_8B),
        16,
    )


def _cost(gpu: str, efficiency: float | None) -> StepCost:
    cost = step_cost(LLAMA3_8B, "none", gpu)
    if efficiency is None:
        return cost
    return replace(cost, gpu=replace(cost.gpu, efficiency=efficiency))


@lru_cache(maxsize=512)
def _run(point: Point, efficiency: float | None) -> Speed:
    limits = V0_LIMITS if point.v0 else V1_LIMITS
    kv = kv_tokens_v0(point.gpu) if point.v0 and point.gpu != "H100" else None
    clients = point.concurrency or BURST_CLIENTS
    return simulate(
        _cost(point.gpu, efficiency),
        Workload(point.prompt, point.output, concurrency=clients),
        EngineLimits(limits["max_num_seqs"], limits["max_num_batched_tokens"], kv),
    )


def predict(point: Point, efficiency: float | None = None) -> float:
    """The model's figure at ``point``'s settings (``efficiency``: instead of the GPU's own)."""
    s = _run(point, efficiency)
    if point.figure == "decode_tps":
        return s.decode_tps
    if point.figure == "output_tok_s":
        return s.requests_per_minute / 60 * point.output
    if point.figure == "e2e_p50_s":
        return s.e2e_p50_s
    raise ValueError(f"unknown figure {point.figure!r}")


def _raw_ratio(point: Point, predicted: float) -> float:
    if point.figure.endswith("_s") and not point.figure.endswith("tok_s"):
        return predicted / point.published
    return point.published / predicted


@lru_cache(maxsize=16)
def harness_factor(reference: str) -> float:
    """Published over modelled on the H100 for the reference point: what the harness (its
    length spread, its burst) does to the comparison on the GPU the model was fitted to."""
    ref = next(p for p in load() if p.id == reference)
    return _raw_ratio(ref, predict(ref))


def speed_ratio(point: Point, predicted: float) -> float:
    """Published speed over the model's (above 1: the GPU is faster than modelled), after the
    harness factor where the point has a reference; a latency figure is inverted, so the ratio
    always multiplies the model's throughput."""
    r = _raw_ratio(point, predicted)
    return r / harness_factor(point.reference) if point.reference else r


@dataclass(frozen=True)
class PointError:
    point: Point
    predicted: float
    #: What the model predicted with efficiency 1.0 (the bare carry by nominal peaks).
    carried: float

    @property
    def relative(self) -> float:
        """Model's speed over the published one, minus 1 (positive: the model is optimistic)."""
        return 1 / speed_ratio(self.point, self.predicted) - 1

    @property
    def relative_carried(self) -> float:
        return 1 / speed_ratio(self.point, self.carried) - 1

    @property
    def ratio(self) -> float:
        return speed_ratio(self.point, self.predicted)


def errors(points: list[Point] | None = None) -> list[PointError]:
    return [
        PointError(p, predict(p), predict(p, 1.0))
        for p in (points if points is not None else load())
    ]


def fit_gpu(gpu: str, points: list[Point]) -> float:
    """The efficiency minimising the squared log-errors of ``gpu``'s fitted points."""
    pts = [p for p in points if p.gpu == gpu and p.use == "fit"]

    def loss(x: float) -> float:
        return sum(math.log(speed_ratio(p, predict(p, x))) ** 2 for p in pts)

    lo, hi = 0.4, 1.6
    g = (math.sqrt(5) - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = loss(a), loss(b)
    for _ in range(30):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = loss(b)
    return round((lo + hi) / 2, 3)


#: Half-width a GPU's band is widened to: three or more fitted points that agree, or fewer.
BAND_FLOOR_POINTS = 3
BAND_FLOOR = {True: 0.15, False: 0.25}


def band(gpu: str, errs: list[PointError]) -> tuple[float, float]:
    """(pessimistic, optimistic) throughput multipliers for ``gpu`` from its fitted points: their
    spread of published over modelled speed, widened to :data:`BAND_FLOOR` (rounded outward)."""
    r = [e.ratio for e in errs if e.point.gpu == gpu and e.point.use == "fit"]
    if not r:
        raise ValueError(f"no fitted point for {gpu}")
    w = BAND_FLOOR[len(r) >= BAND_FLOOR_POINTS]
    return (
        math.floor(min(min(r), 1 - w) * 100) / 100,
        math.ceil(max(max(r), 1 + w) * 100) / 100,
    )


def report(errs: list[PointError]) -> str:
    lines = [
        f"{'point':26}{'use':9}{'figure':13}{'published':>10}{'carried':>9}{'err':>6}"
        f"{'model':>9}{'err':>6}"
    ]
    for e in errs:
        lines.append(
            f"{e.point.id:26}{e.point.use:9}{e.point.figure:13}{e.point.published:>10.4g}"
            f"{e.carried:>9.4g}{e.relative_carried:>+6.0%}{e.predicted:>9.4g}{e.relative:>+6.0%}"
        )
    return "\n".join(lines)


def plan_bands(env: str) -> str:
    """The plan's band (sizing.serving_speed.planned_band) for ``config/<env>.yaml`` on each
    catalog GPU: each input's error, the combined band, the host band and the edges."""
    from sizing.fit_checks import load_config  # the config floor: only for this report
    from sizing.serving_speed import planned_band

    cfg = load_config(POINTS.parents[2] / "config" / f"{env}.yaml", env=env)
    lines = [f"the plan's band for config/{env}.yaml (throughput multipliers):"]
    for gpu in GPUS:
        b = planned_band(cfg, gpu)
        ins = ", ".join(f"{i.name} -{i.low:.1%}/+{i.high:.1%}" for i in b.inputs)
        lines.append(
            f"  {gpu:10} GPU terms x{b.low:.3f}..x{b.high:.3f} (root sum of squares of {ins}; "
            f"worst cases multiplied x{b.worst_case_product:.3f}); host x{b.host_low:.2f}.."
            f"x{b.host_high:.2f}; pessimistic edge x{b.factor('pessimistic'):.3f} GPU, "
            f"x{b.host_factor('pessimistic'):.3f} host (step {b.gpu_share:.0%} GPU)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sizing.speed_evidence", description=__doc__)
    ap.add_argument("--fit", action="store_true", help="fit each GPU's efficiency first")
    ap.add_argument("--env", default="prod", help="config whose plan band is printed [%(default)s]")
    args = ap.parse_args(argv)
    from sizing import lora_fit, speed_calibration  # the H100 fit and the LoRA runs

    print("== the speed model against the H100 measurements (python -m sizing.speed_calibration)")
    print(speed_calibration.report(speed_calibration.errors()))
    points = load()
    print("\n== the speed model against published points on other GPUs")
    if args.fit:
        for gpu in sorted({p.gpu for p in points if p.use == "fit"}):
            print(f"{gpu}: efficiency={fit_gpu(gpu, points)} (committed {GPUS[gpu].efficiency})")
    errs = errors(points)
    print(report(errs))
    for gpu in sorted({p.gpu for p in points if p.use == "fit"}):
        print(f"{gpu}: band {band(gpu, errs)}")
    print("\n== LoRA's added time per step against every LoRA run (python -m sizing.lora_fit)")
    print(lora_fit.render(lora_fit.analyse_runs()))
    print("\n== " + plan_bands(args.env))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
