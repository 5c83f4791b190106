"""Every alarm the canary controller watches must stay quiet on a healthy variant at its scaling
target: a threshold a healthy build crosses rolls back every release (the blast-radius replay
found prod's 500 ms high-TTFT alarm and its latency ratio rolling back a healthy build).

The rule of ``deployment.rollback_model_latency_p99_ms`` (sizing.speed_plan), applied to the
other watched latency alarms (sizing/rollout_alarms.py ``watched_alarms``):

- ``monitoring.ttft_p95_ms`` (the high-TTFT alarm of each variant, the canary's watched): above
  what a healthy instance shows at its scaling target (Poisson arrivals at the concurrency
  target tracking holds it at), on the slowest pool, by :data:`HEADROOM`. The speed model has no
  p95: its p99 stands for it (the next percentile up, the pessimistic edge for a threshold that
  must stay above the healthy figure).
- ``rollout.max_latency_ratio`` (canary / primary ModelLatency p99 and TTFT p95): above what a
  healthy canary shows against the primary at the alarms' like-load bound (both at the same
  invocations per instance in primary instances, sizing.rollout_alarms.COMPARABLE_LOAD), the
  canary at its scaling target, by :data:`HEADROOM`. Same instance type and engine on both
  sides: exactly 1, so any ratio of 1.25 or more passes; another canary type answers at its own
  speed, computed here.

Each problem names the field, the rule and both figures; :func:`sizing.fit_checks.check_deployable`
refuses the config at synth with them.
"""

from __future__ import annotations

import math

from sizing import speed_model
from sizing.rollout_alarms import COMPARABLE_LOAD
from sizing.rollout_plan import rollout_capacity_plan
from sizing.scaling_target import concurrency_target, typical_request
from sizing.serving_speed import describe, efficiency
from sizing.speed_plan import (
    ROLLBACK_LATENCY_HEADROOM,
    healthy_ttft_p95_ms,
    rollback_latency_problems,
    speed_at,
)
from typed_config import VARIANT_NAMES, DeploymentConfig, VariantName
from typed_config.catalog import INSTANCE_CATALOG

#: The margin of every watched threshold over the healthy figure: the speed model's worst
#: end-to-end p99 error against its measurements, as for the rollback latency alarm.
HEADROOM = ROLLBACK_LATENCY_HEADROOM


def _target(cfg: DeploymentConfig, variant: VariantName) -> int:
    return max(1, math.ceil(concurrency_target(cfg, variant)))


def healthy_latency_ratio(cfg: DeploymentConfig) -> tuple[float, str]:
    """(ratio, what) a healthy canary at its scaling target shows against a healthy primary at
    the like-load bound: the larger of the ModelLatency p99 and TTFT ratios. 1 when both variants
    run the same instance type and engine (the same speed at the same load)."""
    canary, primary = cfg.variants.canary, cfg.variants.primary
    c_cfg, p_cfg = cfg.for_pool(canary.pools[0]), cfg.for_pool(primary.pools[0])
    c_type, p_type = canary.pools[0].instance_type, primary.pools[0].instance_type
    at_c = speed_at(c_cfg, c_type, _target(cfg, "canary"))
    if c_type == p_type and typical_request(c_cfg) == typical_request(p_cfg):
        return 1.0, f"the same instance type ({c_type}) and engine on both variants"
    # The canary's arrivals per instance in primary instances, times the like-load bound: the
    # most a primary instance may receive while the alarm still compares.
    rate = at_c.requests_per_minute * rollout_capacity_plan(cfg).canary_per_primary
    gpu = INSTANCE_CATALOG[p_type].gpu
    at_p = speed_model.open_loop_rate(
        p_cfg.architecture, p_cfg.model.quantization, gpu,
        rate_per_minute=rate / COMPARABLE_LOAD, eff=efficiency(p_cfg, gpu),
        **typical_request(p_cfg),
    )  # fmt: skip
    latency = at_c.e2e_p99_s / at_p.e2e_p99_s
    ttft = at_c.ttft_p99_s / at_p.ttft_p99_s
    return max(latency, ttft), (
        f"ModelLatency p99 {at_c.e2e_p99_s:.1f} s vs {at_p.e2e_p99_s:.1f} s, TTFT p95 "
        f"{1000 * at_c.ttft_p99_s:,.0f} vs {1000 * at_p.ttft_p99_s:,.0f} ms: the canary's "
        f"{c_type} at its target, the primary's {p_type} at the same load per instance"
    )


def ttft_problems(cfg: DeploymentConfig) -> list[str]:
    """Each variant whose healthy instances at their scaling target would hold the high-TTFT
    alarm (``monitoring.ttft_p95_ms``) in ALARM, with :data:`HEADROOM`."""
    limit = cfg.monitoring.ttft_p95_ms
    problems = []
    for variant in VARIANT_NAMES:
        if cfg.scaling.variants[variant].target_tracking is None:
            continue
        healthy, itype = healthy_ttft_p95_ms(cfg, variant)
        if limit < healthy * HEADROOM:
            need = math.ceil(healthy * HEADROOM / 100) * 100
            problems.append(
                f"monitoring.ttft_p95_ms: {limit:g} ms is below what a healthy {variant} answers "
                f"in at its scaling target: TTFT p95 {healthy:,.0f} ms (the speed model's p99, "
                f"the next percentile up) at {_target(cfg, variant)} in flight on {itype} "
                f"({describe(cfg, INSTANCE_CATALOG[itype].gpu)}); a watched alarm must sit "
                f"above the healthy figure by {HEADROOM:g} x ({healthy * HEADROOM:,.0f} ms), or "
                f"it rolls back a healthy canary. Set at least {need} ms"
            )
    return problems


def ratio_problems(cfg: DeploymentConfig) -> list[str]:
    """``rollout.max_latency_ratio`` below what a healthy canary shows against the primary at
    like loads, with :data:`HEADROOM`."""
    ratio = cfg.rollout.max_latency_ratio
    if ratio is None:
        return []
    healthy, what = healthy_latency_ratio(cfg)
    if ratio >= healthy * HEADROOM:
        return []
    need = math.ceil(healthy * HEADROOM * 100) / 100
    return [
        f"rollout.max_latency_ratio: {ratio:g} is below what a healthy canary shows against the "
        f"primary at like loads: {healthy:.2f} x ({what}); a watched alarm must sit above the "
        f"healthy figure by {HEADROOM:g} x ({healthy * HEADROOM:.2f}), or it rolls back a "
        f"healthy canary. Set at least {need:g}"
    ]


def watched_alarm_problems(cfg: DeploymentConfig) -> list[str]:
    """Every watched latency alarm a healthy variant at its scaling target would set off:
    ModelLatency p99 (sizing.speed_plan.rollback_latency_problems), high TTFT, the ratios."""
    return rollback_latency_problems(cfg) + ttft_problems(cfg) + ratio_problems(cfg)
