"""The shadow stage replayed: a build answers copies of ``sample_percent`` % of live requests,
and every ``compare_interval_minutes`` the comparison (lambdas/canary_controller/shadow_compare.py,
the controller's own function) judges every answer captured since the stage began.

The stage's rule, as ``typed_config.shadow.ShadowStage`` states it: a ``fail`` ends the release at
once (nothing reached a user); a ``pass`` counts once ``min_minutes`` have passed (before that the
stage goes on); ``insufficient`` goes on; no pass by ``max_minutes`` fails the release (no
evidence is never a pass).

The answers are synthesized, per adapter (its traffic share, :func:`simulator.bad_builds.
adapter_shares`), for the primary and the build under test from the same models:

- latency: log-normal, median and tail from the speed model at each variant's load (p50 and p99
  end to end, p50 and p90 TTFT), times the build's factor. The primary runs at its scaling target
  (target tracking holds it there). The shadow variant (``shadow_load``): ``peak-sized`` (the
  default), a fixed fleet sized for its sampled share at the day's peak at the same target (issue
  33 item 3), so off-peak it runs below the target and answers faster than the primary; or
  ``target``, scaled like the primary on the same concurrency target, at the same load per
  instance (what a latency comparison needs to compare builds rather than loads);
- length: log-normal around the engine's typical answer (``engine.typical_output_tokens``) with
  :data:`LENGTH_SIGMA` (an assumption: no measured answer-length distribution is on file), cut at
  the answer reserve (``engine.context_budget.generation_reserve_tokens``, the max_tokens a request
  gets) where it counts as truncated (finish reason ``length``); a truncating build keeps its share
  of each answer and says ``stop``;
- errors: the build's error share on each adapter.

The primary side holds as many answers per adapter as the shadow side (data capture samples the
primary's own traffic, which would give it more): fewer answers, less power to see a difference,
the pessimistic edge. One seeded generator per replay: the same run gives the same verdicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from lambdas.canary_controller.shadow_compare import Answer, Verdict, compare
from simulator.bad_builds import Build, LatencyCurve, Percentiles, lognormal_sigma
from simulator.traces import Trace
from sizing.scaling_target import concurrency_target
from typed_config import DeploymentConfig
from typed_config.shadow import ShadowStage

#: Spread (log-normal sigma) of the answers' lengths in tokens around the typical answer.
LENGTH_SIGMA = 0.5
#: How the shadow variant's fleet follows the load (the module docstring).
ShadowLoad = Literal["peak-sized", "target"]
SHADOW_LOADS: tuple[ShadowLoad, ...] = get_args(ShadowLoad)
#: Standard normal quantiles of p99 and p90.
Z99, Z90 = 2.3263, 1.2816


@dataclass
class ShadowResult:
    """How a shadow stage ended: ``outcome`` pass or fail, at ``end_minute`` (trace minute)."""

    outcome: str
    start_minute: int
    end_minute: int
    reason: str
    #: (minute, outcome) of every comparison run.
    comparisons: list[tuple[int, str]] = field(default_factory=list)
    shadow_answers: int = 0

    @property
    def minutes(self) -> int:
        return self.end_minute - self.start_minute


def _answers(
    rng: np.random.Generator,
    build: Build,
    adapter: str,
    n: int,
    speed: Percentiles,
    cfg: DeploymentConfig,
    shares: Mapping[str, float],
) -> list[Answer]:
    if n <= 0:
        return []
    eng = cfg.engine
    cap = eng.context_budget.generation_reserve_tokens
    fails = 1.0 if build.failing_adapter == adapter else build.error_percent / 100
    ok = rng.random(n) >= fails
    ttft = speed.ttft_p50 * np.exp(
        rng.normal(0, lognormal_sigma(speed.ttft_p50, speed.ttft_p90, Z90), n)
    )
    e2e = speed.e2e_p50 * np.exp(
        rng.normal(0, lognormal_sigma(speed.e2e_p50, speed.e2e_p99, Z99), n)
    )
    e2e = np.maximum(e2e, ttft)
    length = np.minimum(
        cap, np.round(eng.typical_output_tokens * np.exp(rng.normal(0, LENGTH_SIGMA, n)))
    )
    length = np.maximum(1, length)
    cut = length >= cap
    if build.length_factor != 1.0:
        length = np.maximum(1, np.round(length * build.length_factor))
        e2e = ttft + (e2e - ttft) * build.length_factor
        cut = np.zeros(n, dtype=bool)  # silently: finish reason stop
    ttft, e2e = ttft * build.latency_factor, e2e * build.latency_factor
    return [
        Answer(adapter, bool(ok[i]), float(e2e[i] * 1000), float(ttft[i] * 1000),
               int(length[i]), bool(cut[i]) and bool(ok[i]))
        for i in range(n)
    ]  # fmt: skip


def replay_shadow(
    cfg: DeploymentConfig,
    stage: ShadowStage,
    build: Build,
    shares: Mapping[str, float],
    trace: Trace,
    curve: LatencyCurve,
    *,
    start_minute: int,
    shadow_load: ShadowLoad = "peak-sized",
    seed: int = 33,
) -> ShadowResult:
    """The stage from ``start_minute`` until its verdict (or the trace's end: fail)."""
    rng = np.random.default_rng(seed)
    target = concurrency_target(cfg, "primary")
    peak = float(max(trace.rpm))
    primary_speed = curve.at(target)
    primary: list[Answer] = []
    shadow: list[Answer] = []
    thresholds = stage.thresholds
    adapters = list(shares)
    result = ShadowResult("fail", start_minute, start_minute, "")
    interval = stage.compare_interval_minutes
    last = min(trace.minutes, start_minute + stage.max_minutes)
    for minute in range(start_minute, last):
        rpm = float(trace.rpm[minute])
        shadow_speed = curve.at(target * rpm / peak if shadow_load == "peak-sized" else target)
        for adapter in adapters:
            n = int(rng.poisson(rpm * shares[adapter] * stage.sample_percent / 100))
            shadow += _answers(rng, build, adapter, n, shadow_speed, cfg, shares)
            primary += _answers(rng, Build("primary", ""), adapter, n, primary_speed, cfg, shares)
        elapsed = minute + 1 - start_minute
        if elapsed % interval:
            continue
        verdict: Verdict = compare(primary, shadow, thresholds, adapters)
        result.comparisons.append((minute + 1, verdict.outcome))
        if verdict.outcome == "fail" or (
            verdict.outcome == "pass" and elapsed >= stage.min_minutes
        ):
            result.outcome, result.end_minute = verdict.outcome, minute + 1
            result.reason, result.shadow_answers = verdict.summary(), len(shadow)
            return result
    result.end_minute, result.shadow_answers = last, len(shadow)
    result.reason = (
        f"no pass within max_minutes ({stage.max_minutes}) or the trace's end: "
        "no evidence is never a pass"
    )
    return result
