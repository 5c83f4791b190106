"""The plan's speed section: what one instance of a variant serves, and the concurrency at which it
meets each latency SLO of the config (``monitoring.slo_*``), from sizing.speed_model.

Printed by ``make synth`` beside the KV-cache bound; the simulator's default speed is the same
model (simulator/capacity.py), so the plan and the simulator quote one figure.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from sizing import speed_model
from sizing.scaling_target import (
    SLO_LIMITS,
    concurrency_target,
    target_basis,
    typical_request,
)
from sizing.serving_speed import PLANNING_EDGE, Edge, describe, efficiency
from typed_config import VARIANT_NAMES, DeploymentConfig, ModelArchitecture, VariantName
from typed_config.catalog import INSTANCE_CATALOG


def speed_section(cfg: DeploymentConfig, variant: VariantName) -> dict[str, Any]:
    """The typical request on one instance at the KV-cache bound, the SLO bounds and the one that
    sets the scaling target (sizing.scaling_target)."""
    basis = target_basis(cfg, variant)  # the binding pool's (the only one without pools)
    inst = INSTANCE_CATALOG[basis.instance_type]
    req = typical_request(_pool_cfg(cfg, variant, basis.instance_type))
    kv_bound = basis.kv_bound
    arch, quant = cfg.architecture, cfg.model.quantization
    full = speed_model.closed_loop(
        arch, quant, inst.gpu, concurrency=kv_bound, eff=efficiency(cfg, inst.gpu), **req
    )
    tt = cfg.scaling.variants[variant].target_tracking
    tracks_concurrency = tt is not None and tt.metric == "concurrency"
    return {
        "instance_type": basis.instance_type,
        "source": describe(cfg, inst.gpu),
        "shape": f"{req['prompt']}+{req['output']} tokens, {req['cached']} cached "
        f"({req['shared']} shared)",
        "kv_bound": kv_bound,
        "at_kv_bound": {
            # Little's law, as the simulator serves it (simulator/capacity.py): C / S
            "requests_per_minute": round(60 * kv_bound / full.e2e_p50_s),
            "ttft_p50_s": round(full.ttft_p50_s, 3),
            "e2e_p50_s": round(full.e2e_p50_s, 2),
            "decode_tokens_per_second": round(full.decode_tps, 1),
        },
        "slo": [
            {
                "slo": b.slo,
                "limit_ms": b.limit,
                "max_in_flight": b.concurrency,
                "max_in_flight_central": c.concurrency,
                "best_ms": round(b.best),
                "at_kv_bound_ms": round(b.at_ceiling),
                "binds_target": b.slo in {SLO_LIMITS[k][0] for k in basis.binding_slos}
                and basis.reachable(_key(b.slo)),
                "why_not": (
                    "not reachable at the central estimate"
                    if not basis.reachable(_key(b.slo))
                    else "not in target_tracking.slos"
                ),
            }
            for b, c in zip(basis.slo, basis.central, strict=True)
        ],
        "at_target": at_target(cfg, variant),
        "binding": basis.binding,
        "binding_in_flight": basis.concurrency,
        "target": {
            "concurrency": concurrency_target(cfg, variant) if tracks_concurrency else None,
            "fraction": tt.target_fraction_of_concurrency
            if tt is not None and tracks_concurrency
            else None,
        },
        "rollback_latency": {
            "threshold_ms": cfg.deployment.rollback_model_latency_p99_ms,
            "healthy_p99_ms": round(healthy_latency_p99_ms(cfg, variant))
            if tt is not None
            else None,
        },
        "high_ttft": {
            "threshold_ms": cfg.monitoring.ttft_p95_ms,
            "healthy_p95_ms": round(healthy_ttft_p95_ms(cfg, variant)[0])
            if tt is not None
            else None,
        },
    }


def _key(bound_name: str) -> str:
    return next(k for k, (name, _) in SLO_LIMITS.items() if name == bound_name)


def render_speed(s: dict[str, Any]) -> list[str]:
    full = s["at_kv_bound"]
    lines = [
        f"          speed: {full['requests_per_minute']:,} requests/minute at {s['kv_bound']} in "
        f"flight (what one instance runs; {s['shape']}): TTFT p50 {full['ttft_p50_s']} s, "
        f"end-to-end p50 {full['e2e_p50_s']} s, {full['decode_tokens_per_second']} tok/s per "
        "sequence",
        f"            ({s['source']})",
    ]
    for b in s["slo"]:
        central = b.get("max_in_flight_central")
        at_central = "" if central is None else f" ({central} at the central estimate)"
        if b["max_in_flight"]:
            verdict = f"holds up to {b['max_in_flight']} in flight{at_central}"
        else:
            verdict = (
                f"NOT MET at any concurrency for this shape: best {b['best_ms']:,} ms with one "
                f"request in flight{at_central}"
            )
        role = "" if b["binds_target"] else f" (not a scaling bound: {b['why_not']})"
        lines.append(
            f"          SLO {b['slo']} < {b['limit_ms']:g} ms (Poisson arrivals): {verdict}; "
            f"{b['at_kv_bound_ms']:,} ms at {s['kv_bound']}{role}"
        )
    tgt = s["target"]
    why = {
        "KV cache": "the KV cache holds no more typical requests",
        "max_num_seqs": "engine.max_num_seqs: vLLM runs no more sequences",
    }.get(s["binding"], f"above it the {s['binding']} SLO fails")
    lines.append(
        f"          binding bound: {s['binding']} at {s['binding_in_flight']} in flight ({why})"
        + (
            f"; target tracking {tgt['fraction']:g} x {s['binding_in_flight']} = "
            f"{tgt['concurrency']:g}"
            if tgt["concurrency"] is not None
            else ""
        )
    )
    lines += render_at_target(s.get("at_target"))
    # The watched alarms a healthy instance at its target must stay under (sizing.alarm_headroom)
    for key, label, healthy, note in (
        ("rollback_latency", "rollback ModelLatency p99", "healthy_p99_ms", ""),
        ("high_ttft", "high TTFT p95", "healthy_p95_ms", "the speed model's p99; "),
    ):
        alarm = s.get(key) or {}
        if alarm.get(healthy) is not None:
            lines.append(
                f"          {label} > {alarm['threshold_ms']:,.0f} ms; a healthy instance at its "
                f"scaling target: {alarm[healthy]:,} ms ({note}x{ROLLBACK_LATENCY_HEADROOM:g} "
                "headroom checked at synth)"
            )
    return lines


#: Headroom of the ModelLatency rollback threshold over the healthy fleet's predicted p99: the
#: speed model's worst end-to-end p99 error against the measurements it is fitted to (24 %,
#: tests/infra/test_speed_model.py), rounded up.
ROLLBACK_LATENCY_HEADROOM = 1.25


def _pool_cfg(cfg: DeploymentConfig, variant: VariantName, itype: str) -> DeploymentConfig:
    """The config ``variant``'s pool of type ``itype`` runs (its engine settings)."""
    pool = next(p for p in cfg.variants[variant].pools if p.instance_type == itype)
    return cfg.for_pool(pool)


def healthy_latency_p99_ms(cfg: DeploymentConfig, variant: VariantName) -> float:
    """ModelLatency p99 a healthy instance of ``variant`` shows at its scaling target (the
    concurrency target tracking holds it at, under Poisson arrivals), for the typical request,
    by the speed model; with instance pools, on the slowest pool (:func:`slowest_pool_p99`).

    ModelLatency is "the interval of time taken by a model to respond as viewed from SageMaker
    ... the local communication times taken to send the request and to fetch the response from
    the container ... and the time taken to complete the inference in the container" (SageMaker
    API reference, ScalingPolicyMetric; CloudWatch metrics for SageMaker AI). For a whole
    (non-streamed) answer that is the request's end-to-end time: prefill and every output token.
    AWS documents no other meaning for InvokeEndpointWithResponseStream, so a streamed answer is
    taken the same way, which can only make the threshold safer."""
    return slowest_pool_p99(cfg, variant)[0]


def slowest_pool_p99(cfg: DeploymentConfig, variant: VariantName) -> tuple[float, str]:
    """(ModelLatency p99 ms, instance type) of the pool slowest at the variant's target: the
    rollback alarm reads ModelLatency over every instance of the variant (its InstanceType
    dimension is per-type only: developer guide, "Monitor instance pools"), so a deploy that
    lands on the fallback pool must stay under the threshold too."""
    return _slowest_pool(cfg, variant, lambda speed: speed.e2e_p99_s)


def healthy_ttft_p95_ms(cfg: DeploymentConfig, variant: VariantName) -> tuple[float, str]:
    """(TTFT p95 ms, instance type) a healthy ``variant`` shows at its scaling target, on its
    slowest pool: the speed model's TTFT p99 (it has no p95; the next percentile up is the
    pessimistic edge for a threshold that must stay above it: sizing.alarm_headroom)."""
    return _slowest_pool(cfg, variant, lambda speed: speed.ttft_p99_s)


def _slowest_pool(
    cfg: DeploymentConfig, variant: VariantName, figure: Callable[[speed_model.Speed], float]
) -> tuple[float, str]:
    """(``figure`` ms, instance type) of ``variant``'s pool with the largest ``figure`` at the
    variant's scaling target."""
    in_flight = max(1, math.ceil(concurrency_target(cfg, variant)))
    worst = (0.0, cfg.variants[variant].instance_type)
    for pool in cfg.variants[variant].pools:
        # Poisson arrivals at the rate that keeps the target in flight: what target tracking
        # holds an instance at, with the tails a closed loop does not have.
        speed = speed_at(cfg.for_pool(pool), pool.instance_type, in_flight)
        worst = max(worst, (1000 * figure(speed), pool.instance_type))
    return worst


def speed_at(
    cfg: DeploymentConfig, instance_type: str, in_flight: int, edge: Edge = PLANNING_EDGE
) -> speed_model.Speed:
    """The typical request on one ``instance_type`` instance of ``cfg`` (a pool's config) under
    Poisson arrivals holding ``in_flight`` in flight, at ``edge`` (the planning edge unless
    said); computed once per distinct input (synth asks for it from several rules)."""
    gpu = INSTANCE_CATALOG[instance_type].gpu
    req = typical_request(cfg)
    return _open_loop_at(
        cfg.architecture, cfg.model.quantization, gpu, in_flight, efficiency(cfg, gpu, edge),
        tuple(sorted(req.items())),
    )  # fmt: skip


def at_target(cfg: DeploymentConfig, variant: VariantName) -> dict[str, Any] | None:
    """What a user of ``variant`` sees while target tracking holds an instance at its target
    (Poisson arrivals, the typical request; the binding pool): TTFT p50/p95, tokens per second
    per user (the median stream), TPOT p95 and the typical answer's end-to-end p50, at the
    planning edge and at the central estimate. None without a concurrency target."""
    tt = cfg.scaling.variants[variant].target_tracking
    if tt is None or tt.metric != "concurrency":
        return None
    target = concurrency_target(cfg, variant)
    itype = target_basis(cfg, variant).instance_type
    pool_cfg = _pool_cfg(cfg, variant, itype)
    output = pool_cfg.engine.typical_output_tokens
    out: dict[str, Any] = {"in_flight": target, "output_tokens": output}
    for edge in (PLANNING_EDGE, "central"):
        s = speed_at(pool_cfg, itype, max(1, math.ceil(target)), edge)
        out[edge] = {
            "ttft_p50_s": round(s.ttft_p50_s, 3),
            "ttft_p95_s": round(s.ttft_p95_s, 3),
            "tokens_per_second_per_user": round(s.decode_tps, 1),
            "tpot_p95_ms": round(1000 * s.tpot_p95_s),
            "e2e_p50_s": round(s.e2e_p50_s, 2),
        }
    return out


def render_at_target(t: dict[str, Any] | None) -> list[str]:
    if t is None:
        return []

    def one(f: dict[str, Any]) -> str:
        return (
            f"TTFT p50 {f['ttft_p50_s']} s / p95 {f['ttft_p95_s']} s, "
            f"{f['tokens_per_second_per_user']} tok/s per user (TPOT p95 {f['tpot_p95_ms']:,} ms), "
            f"the typical answer ({t['output_tokens']} tokens) in {f['e2e_p50_s']} s end-to-end p50"
        )

    return [
        f"          at the scaling target ({t['in_flight']:g} in flight, Poisson arrivals), "
        f"{PLANNING_EDGE} edge: {one(t[PLANNING_EDGE])}",
        f"            central estimate: {one(t['central'])}",
    ]


@functools.lru_cache(maxsize=64)
def _open_loop_at(
    arch: ModelArchitecture,
    quant: str,
    gpu: str,
    in_flight: int,
    eff: speed_model.Efficiency,
    req: tuple[tuple[str, int], ...],
) -> speed_model.Speed:
    return speed_model.open_loop_at(arch, quant, gpu, in_flight=in_flight, eff=eff, **dict(req))


def rollback_latency_problems(cfg: DeploymentConfig) -> list[str]:
    """Each variant whose healthy fleet would cross ``deployment.rollback_model_latency_p99_ms``
    (with :data:`ROLLBACK_LATENCY_HEADROOM`): SageMaker would roll back every blue/green deploy
    during its bake, the smoke gate would fail it and canary-start would be refused. The message
    names the field (and says so when the file does not set it), the rule, both figures as the
    plan rounds them, where the healthy figure comes from (the slowest pool) and the fix."""
    limit = cfg.deployment.rollback_model_latency_p99_ms
    written = "rollback_model_latency_p99_ms" in cfg.deployment.model_fields_set
    problems = []
    for variant in VARIANT_NAMES:
        if cfg.scaling.variants[variant].target_tracking is None:
            continue
        healthy, itype = slowest_pool_p99(cfg, variant)
        rule = healthy * ROLLBACK_LATENCY_HEADROOM
        if limit >= rule:
            continue
        need = math.ceil(rule / 1000) * 1000
        target = concurrency_target(cfg, variant)
        v = cfg.variants[variant]
        pool = next((p for p in v.instance_pools or () if p.instance_type == itype), None)
        where = (
            f"{itype}, instance pool priority {pool.priority} of variants.{variant}."
            "instance_pools (the slowest: the alarm reads every pool's instances)"
            if pool is not None and len(v.pools) > 1
            else itype
        )
        problems.append(
            f"deployment.rollback_model_latency_p99_ms: {limit:,} ms"
            f"{'' if written else ' (not in the file: the default)'} is below the rule's "
            f"{rule:,.0f} ms: the threshold must be at least {ROLLBACK_LATENCY_HEADROOM:g} x the "
            f"ModelLatency p99 a healthy {variant} shows at its scaling target, and that p99 is "
            f"{healthy:,.0f} ms for the typical request ({cfg.engine.typical_prompt_tokens}+"
            f"{cfg.engine.typical_output_tokens} tokens) at the target of {target:g} in flight "
            f"(the plan's figure; taken at {max(1, math.ceil(target))} requests) on {where}. "
            f"Below it SageMaker rolls back every blue/green deploy. Set "
            f"deployment.rollback_model_latency_p99_ms: {need} or more"
            + (", or drop that pool" if pool is not None and len(v.pools) > 1 else "")
            + f". Speed: {describe(cfg, INSTANCE_CATALOG[itype].gpu)}"
        )
    return problems
