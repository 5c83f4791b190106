"""The plan's speed section: what one instance of a variant serves, and the concurrency at which it
meets each latency SLO of the config (``monitoring.slo_*``), from stacks.speed_model.

Printed by ``make synth`` beside the KV-cache bound; the simulator's default speed is the same
model (simulator/capacity.py), so the plan and the simulator quote one figure.
"""

from __future__ import annotations

import math
from typing import Any

from stacks import speed_model
from stacks.capacity import concurrency_target, estimate
from stacks.catalog import INSTANCE_CATALOG
from stacks.config import VARIANT_NAMES, DeploymentConfig, VariantName

#: Share of prompt tokens served from vLLM's prefix cache: the original team's measured ~72%
#: (the simulator's --prefix-cache-hit-rate default). The config's system prompt
#: (engine.context_budget.system_tokens) is taken as shared by every request.
TYPICAL_PREFIX_HIT_RATE = 0.72
BLOCK = 16


def cached_tokens(cfg: DeploymentConfig, prompt: int, hit_rate: float) -> tuple[int, int]:
    """(cached, shared) prompt tokens: whole blocks of the hit rate's share, of which the system
    prompt is common to every request."""
    cached = int(prompt * hit_rate) // BLOCK * BLOCK
    return cached, min(cached, cfg.engine.context_budget.system_tokens)


def speed_section(
    cfg: DeploymentConfig, variant: VariantName, hit_rate: float = TYPICAL_PREFIX_HIT_RATE
) -> dict[str, Any]:
    """The typical request on one instance at the KV-cache bound, and the SLO bounds."""
    inst = INSTANCE_CATALOG[cfg.variants[variant].instance_type]
    eng, mon = cfg.engine, cfg.monitoring
    prompt, output = eng.typical_prompt_tokens, eng.typical_output_tokens
    cached, shared = cached_tokens(cfg, prompt, hit_rate)
    kv_bound = max(1, estimate(cfg, inst.name).concurrency_at_typical_length)
    kw: dict[str, Any] = {
        "prompt": prompt,
        "output": output,
        "cached": cached,
        "shared": shared,
        "max_num_seqs": eng.max_num_seqs,
        "max_num_batched_tokens": eng.max_num_batched_tokens,
    }
    arch, quant = cfg.architecture, cfg.model.quantization
    full = speed_model.closed_loop(arch, quant, inst.gpu, concurrency=kv_bound, **kw)
    bounds = speed_model.slo_bounds(
        arch,
        quant,
        inst.gpu,
        ceiling=kv_bound,
        ttft_p50_ms=mon.slo_ttft_p50_ms,
        latency_p99_ms=mon.slo_latency_p99_ms,
        **kw,
    )
    binding = min(bounds, key=lambda b: b.concurrency)
    return {
        "source": speed_model.source(inst.gpu),
        "shape": f"{prompt}+{output} tokens, {cached} cached ({shared} shared)",
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
                "best_ms": round(b.best),
                "at_kv_bound_ms": round(b.at_ceiling),
            }
            for b in bounds
        ],
        "binding": binding.slo if binding.concurrency < kv_bound else "KV cache",
        "rollback_latency": {
            "threshold_ms": cfg.deployment.rollback_model_latency_p99_ms,
            "healthy_p99_ms": round(healthy_latency_p99_ms(cfg, variant))
            if cfg.scaling.variants[variant].target_tracking is not None
            else None,
        },
    }


def render_speed(s: dict[str, Any]) -> list[str]:
    full = s["at_kv_bound"]
    lines = [
        f"          speed: {full['requests_per_minute']:,} requests/minute at {s['kv_bound']} in "
        f"flight (the KV bound; {s['shape']}): TTFT p50 {full['ttft_p50_s']} s, end-to-end p50 "
        f"{full['e2e_p50_s']} s, {full['decode_tokens_per_second']} tok/s per sequence",
        f"            ({s['source']})",
    ]
    for b in s["slo"]:
        if b["max_in_flight"]:
            verdict = f"holds up to {b['max_in_flight']} in flight"
        else:
            verdict = (
                f"NOT MET at any concurrency for this shape: best {b['best_ms']:,} ms with one "
                "request in flight"
            )
        lines.append(
            f"          SLO {b['slo']} < {b['limit_ms']:g} ms (Poisson arrivals): {verdict}; "
            f"{b['at_kv_bound_ms']:,} ms at {s['kv_bound']}"
        )
    lines.append(f"          binding bound: {s['binding']} (target tracking unchanged: KV bound)")
    rb = s.get("rollback_latency") or {}
    if rb.get("healthy_p99_ms") is not None:
        lines.append(
            f"          rollback ModelLatency p99 > {rb['threshold_ms']:,} ms; a healthy "
            f"instance at its scaling target: {rb['healthy_p99_ms']:,} ms "
            f"(x{ROLLBACK_LATENCY_HEADROOM:g} headroom checked at synth)"
        )
    return lines


#: Headroom of the ModelLatency rollback threshold over the healthy fleet's predicted p99: the
#: speed model's worst end-to-end p99 error against the measurements it is fitted to (24 %,
#: tests/infra/test_speed_model.py), rounded up.
ROLLBACK_LATENCY_HEADROOM = 1.25


def healthy_latency_p99_ms(cfg: DeploymentConfig, variant: VariantName) -> float:
    """ModelLatency p99 a healthy instance of ``variant`` shows at its scaling target (the
    concurrency target tracking holds it at, under Poisson arrivals), for the typical request,
    by the speed model.

    ModelLatency is "the interval of time taken by a model to respond as viewed from SageMaker
    ... the local communication times taken to send the request and to fetch the response from
    the container ... and the time taken to complete the inference in the container" (SageMaker
    API reference, ScalingPolicyMetric; CloudWatch metrics for SageMaker AI). For a whole
    (non-streamed) answer that is the request's end-to-end time: prefill and every output token.
    AWS documents no other meaning for InvokeEndpointWithResponseStream, so a streamed answer is
    taken the same way, which can only make the threshold safer."""
    inst = INSTANCE_CATALOG[cfg.variants[variant].instance_type]
    eng = cfg.engine
    prompt, output = eng.typical_prompt_tokens, eng.typical_output_tokens
    cached, shared = cached_tokens(cfg, prompt, TYPICAL_PREFIX_HIT_RATE)
    in_flight = max(1, math.ceil(concurrency_target(cfg, variant)))
    # Poisson arrivals at the rate that keeps the target in flight: what target tracking holds
    # an instance at, with the tails a closed loop does not have.
    speed = speed_model.open_loop_at(
        cfg.architecture, cfg.model.quantization, inst.gpu, in_flight=in_flight,
        prompt=prompt, output=output, cached=cached, shared=shared,
        max_num_seqs=eng.max_num_seqs, max_num_batched_tokens=eng.max_num_batched_tokens,
    )  # fmt: skip
    return 1000 * speed.e2e_p99_s


def rollback_latency_problems(cfg: DeploymentConfig) -> list[str]:
    """Each variant whose healthy fleet would cross ``deployment.rollback_model_latency_p99_ms``
    (with :data:`ROLLBACK_LATENCY_HEADROOM`): SageMaker would roll back every blue/green deploy
    during its bake, the smoke gate would fail it and canary-start would be refused."""
    limit = cfg.deployment.rollback_model_latency_p99_ms
    problems = []
    for variant in VARIANT_NAMES:
        if cfg.scaling.variants[variant].target_tracking is None:
            continue
        healthy = healthy_latency_p99_ms(cfg, variant)
        if limit < healthy * ROLLBACK_LATENCY_HEADROOM:
            need = math.ceil(healthy * ROLLBACK_LATENCY_HEADROOM / 1000) * 1000
            problems.append(
                f"deployment.rollback_model_latency_p99_ms: {limit} ms is below what a healthy "
                f"{variant} answers in: ModelLatency p99 {healthy:,.0f} ms for the typical request "
                f"({cfg.engine.typical_prompt_tokens}+{cfg.engine.typical_output_tokens} tokens) "
                f"at its scaling target of {math.ceil(concurrency_target(cfg, variant))} in flight "
                f"on {cfg.variants[variant].instance_type} "
                f"({speed_model.source(INSTANCE_CATALOG[cfg.variants[variant].instance_type].gpu)}"
                f"), so every blue/green deploy would roll back. Set at least {need} ms "
                f"({ROLLBACK_LATENCY_HEADROOM:g} x the prediction: the model's p99 error)"
            )
    return problems
