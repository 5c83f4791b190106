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
  (target tracking holds it there). The shadow variant (``shadow_load``):

  - ``tracking`` (the default, what the controller does: lambdas/canary_controller/
    shadow_fleet.py): whole instances, round(sample x the primary's count x
    ``canary_per_primary``) within 1 and the peak size, set once when the stage starts (the
    config the stage enters is sized so; no documented call resizes a shadow variant) and kept
    to the stage's end. The primary's count is the whole number of instances target tracking
    holds at the minute's load (within its bounds), so both run near, not at, the target;
  - ``peak-sized``: a fixed fleet sized for its sampled share at the day's peak at the same
    target (issue 33 item 3), so off-peak it runs below the target and answers faster than the
    primary;
  - ``target``: scaled like the primary on the same concurrency target, at the same load per
    instance (no whole instances, no lag).

  The comparison judges latency at like loads only (shadow_compare, "Latency at like loads"): a
  peak-sized shadow's off-peak minutes are fail evidence only, and pass evidence needs minutes at
  the primary's load, which it reaches only at the peak; a tracking shadow's load straddles the
  primary's as the primary scales from its count at the start, so both kinds arrive;
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

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from lambdas.canary_controller.capacity import CapacityPlan
from lambdas.canary_controller.shadow_compare import (
    Answer,
    LikeLoads,
    MinuteLatency,
    compare,
    minute_loads,
    percentile,
)
from lambdas.canary_controller.shadow_fleet import tracking_count
from lambdas.canary_controller.shadow_stage import ShadowEvidence
from simulator.assumptions import Assumptions
from simulator.bad_builds import Build, LatencyCurve, Percentiles, lognormal_sigma
from simulator.traces import Trace
from sizing.scaling_target import concurrency_target
from sizing.shadow_plan import shadow_instances
from typed_config import DeploymentConfig
from typed_config.shadow import ShadowStage

#: Spread (log-normal sigma) of the answers' lengths in tokens around the typical answer.
LENGTH_SIGMA = 0.5
#: How the shadow variant's fleet follows the load (the module docstring).
ShadowLoad = Literal["tracking", "peak-sized", "target"]
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
    #: (minute, count): the shadow's count, set when the stage starts (``tracking`` only).
    shadow_counts: list[tuple[int, int]] = field(default_factory=list)

    @property
    def minutes(self) -> int:
        return self.end_minute - self.start_minute


class TrackingFleet:
    """Both fleets' whole instance counts minute by minute for ``tracking`` (module docstring)."""

    def __init__(
        self, cfg: DeploymentConfig, stage: ShadowStage, curve: LatencyCurve, plan: CapacityPlan
    ) -> None:
        target = concurrency_target(cfg, "primary")
        #: Requests a minute one primary instance takes at its target (Little's law with the
        #: speed model's median time at the target).
        self.per_instance_rpm = 60 * target / curve.at(target).e2e_p50
        bounds = cfg.scaling.variants["primary"]
        self.low, self.high = bounds.min_capacity, bounds.max_capacity
        self.sample = stage.sample_percent
        self.per_primary = plan.canary_per_primary
        self.peak = shadow_instances(cfg)
        self.primary, self.shadow = self.low, self.peak

    def minute(self, elapsed: int, rpm: float) -> tuple[float, float]:
        """The minute ``elapsed`` of the stage at ``rpm``: both loads per instance, in units of
        a primary instance at its target (the shadow's converted by ``canary_per_primary``)."""
        wanted = math.ceil(round(rpm / self.per_instance_rpm, 9))
        self.primary = min(self.high, max(self.low, wanted))
        if elapsed == 0:  # the stage starts on a config sized for the primary's count then
            self.shadow = tracking_count(self.sample, self.primary, self.per_primary, self.peak)
        capacity = self.per_instance_rpm
        primary = rpm / (self.primary * capacity)
        shadow = self.sample / 100 * rpm / (self.shadow / self.per_primary * capacity)
        return primary, shadow


def _answers(
    rng: np.random.Generator,
    build: Build,
    adapter: str,
    n: int,
    speed: Percentiles,
    cfg: DeploymentConfig,
    minute: int,
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
               int(length[i]), bool(cut[i]) and bool(ok[i]), minute=minute)
        for i in range(n)
    ]  # fmt: skip


def _minute_latency(
    primary: list[Answer], shadow: list[Answer], loads: tuple[float, float]
) -> MinuteLatency | None:
    """What CloudWatch would publish for one minute: each variant's ModelLatency p95 over its
    answers of the minute (end to end), and both loads; None when a side answered nothing."""
    p_ms = [a.latency_ms for a in primary if a.ok and a.latency_ms is not None]
    s_ms = [a.latency_ms for a in shadow if a.ok and a.latency_ms is not None]
    if not p_ms or not s_ms:
        return None
    return MinuteLatency(percentile(p_ms, 95), percentile(s_ms, 95), *loads)


def replay_shadow(
    cfg: DeploymentConfig,
    stage: ShadowStage,
    build: Build,
    shares: Mapping[str, float],
    trace: Trace,
    curve: LatencyCurve,
    plan: CapacityPlan,
    *,
    start_minute: int,
    shadow_load: ShadowLoad = "tracking",
    seed: int = 33,
    a: Assumptions | None = None,
) -> ShadowResult:
    """The stage from ``start_minute`` until its verdict (or the trace's end: fail).

    Each comparison is the controller's: ``shadow_compare.compare`` on the answers (their
    latencies judged at like loads only) and ``ShadowEvidence.judged`` with the per-minute
    ModelLatency p95s and loads CloudWatch would give it. The loads per instance are in units of
    the primary's at its scaling target: the primary 1 (target tracking holds it there), the
    peak-sized shadow ``rpm / peak`` (its share of the peak, on a fleet sized for that share), the
    ``target`` one 1, the ``tracking`` ones from :class:`TrackingFleet`'s whole counts (a
    comparison due while its endpoint updates waits, as the controller's does); the shadow's
    handed over in its own instances (``/ canary_per_primary`` of ``plan``, the capacity plan the
    caller derived once) and converted back by ``LikeLoads.of`` as the controller does."""
    rng = np.random.default_rng(seed)
    target = concurrency_target(cfg, "primary")
    peak = float(max(trace.rpm))
    per_primary = plan.canary_per_primary
    primary_speed = curve.at(target)
    primary: list[Answer] = []
    shadow: list[Answer] = []
    minutes: dict[int, MinuteLatency] = {}
    thresholds = stage.thresholds
    adapters = list(shares)
    result = ShadowResult("fail", start_minute, start_minute, "")
    interval = stage.compare_interval_minutes
    last = min(trace.minutes, start_minute + stage.max_minutes)
    fleet = TrackingFleet(cfg, stage, curve, plan)
    due = interval
    for minute in range(start_minute, last):
        rpm = float(trace.rpm[minute])
        primary_load, share = 1.0, rpm / peak if shadow_load == "peak-sized" else 1.0
        if shadow_load == "tracking":
            serving = fleet.shadow
            primary_load, share = fleet.minute(minute - start_minute, rpm)
            if fleet.shadow != serving or not result.shadow_counts:
                result.shadow_counts.append((minute, fleet.shadow))
            primary_speed = curve.at(target * primary_load)
        shadow_speed = curve.at(target * share)
        now_p: list[Answer] = []
        now_s: list[Answer] = []
        for adapter in adapters:
            n = int(rng.poisson(rpm * shares[adapter] * stage.sample_percent / 100))
            now_s += _answers(rng, build, adapter, n, shadow_speed, cfg, minute)
            now_p += _answers(rng, Build("primary", ""), adapter, n, primary_speed, cfg, minute)
        shadow += now_s
        primary += now_p
        if (at := _minute_latency(now_p, now_s, (primary_load, share / per_primary))) is not None:
            minutes[minute] = at
        elapsed = minute + 1 - start_minute
        if elapsed < due:
            continue
        due = elapsed + interval
        loads = LikeLoads.of(minute_loads(minutes), per_primary)
        verdict = compare(primary, shadow, thresholds, adapters, loads=loads)
        evidence = ShadowEvidence(verdict, minutes=minutes, loads=loads)
        outcome, summary = evidence.judged(thresholds.max_latency_p95_ratio)
        result.comparisons.append((minute + 1, outcome))
        if outcome == "fail" or (outcome == "pass" and elapsed >= stage.min_minutes):
            result.outcome, result.end_minute = outcome, minute + 1
            result.reason, result.shadow_answers = summary, len(shadow)
            return result
        result.reason = summary
    result.end_minute, result.shadow_answers = last, len(shadow)
    result.reason = (
        f"no pass within max_minutes ({stage.max_minutes}) or the trace's end: "
        f"no evidence is never a pass (last: {result.reason})"
    )
    return result
