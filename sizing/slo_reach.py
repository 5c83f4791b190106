"""Which SLOs of ``fleet.slos`` an instance type can hold at a useful load (no CDK, no simulator):
the capacity gate holds the rest, the fleet solver lets only these bind the scaling target, and the
plan prints both lists, with what would reach each one that is not held.

Reachable is decided at the central estimate of the speed model (sizing.scaling_target
``TargetBasis.reachable``), never because the pessimistic edge says so: the edge is where a
reachable SLO's target sits, not a reason to drop the SLO.
"""

from __future__ import annotations

import math

from sizing import speed_model
from sizing.capacity import CapacityError, estimate
from sizing.scaling_target import (
    MIN_USEFUL_SHARE,
    PER_TOKEN_SLO,
    SLO_LIMITS,
    TargetBasis,
    target_basis,
    typical_request,
)
from sizing.serving_speed import efficiency
from typed_config import VARIANT_NAMES, DeploymentConfig, GateSlo, VariantName
from typed_config.catalog import INSTANCE_CATALOG

#: Each gate SLO: its ``monitoring`` field.
SLO_FIELDS: dict[GateSlo, str] = {
    "rejected": "(none: 0 rejected)",
    "queue_wait_p95": "slo_queue_wait_p95_ms",
    "ttft_p50": "slo_ttft_p50_ms",
    "ttft_p95": "slo_ttft_p95_ms",
    "latency_p99": "slo_latency_p99_ms",
    "tpot_p95": "slo_tpot_p95_ms",
}

#: What speculative decoding offers and where the figure comes from (said where an SLO on decode
#: speed is not reachable).
SPECULATIVE_DECODING = (
    "speculative decoding (vLLM: EAGLE-3, n-gram, draft models; docs.vllm.ai/en/latest/features/"
    "spec_decode/) cuts decode steps at low load: 1.4-1.6x on Llama-3.1-8B in vLLM "
    "(jarvislabs-docs.vercel.app/blog, 'Speculative Decoding in vLLM: Complete Guide'); "
    "not measured on this product's engine, so the solver does not offer it"
)

__all__ = [
    "MIN_USEFUL_SHARE",
    "SLO_FIELDS",
    "SPECULATIVE_DECODING",
    "held",
    "left_out",
    "reaching_type",
    "unreachable",
    "what_would_reach",
]


def _why(cfg: DeploymentConfig, basis: TargetBasis, key: str) -> str:
    b = basis.central_bound(key)
    shape = f"{cfg.engine.typical_prompt_tokens}+{cfg.engine.typical_output_tokens} tokens"
    field = f"monitoring.{SLO_FIELDS[key]} {b.limit:,.0f} ms"  # type: ignore[index]
    if b.concurrency == 0:
        return (
            f"{field}: the best on {basis.instance_type} at the central estimate is "
            f"{b.best:,.0f} ms with one request in flight ({shape})"
        )
    return (
        f"{field}: holds on {basis.instance_type} at the central estimate only up to "
        f"{b.concurrency} in flight of the {basis.engine_bound} it runs (under "
        f"{MIN_USEFUL_SHARE:.0%}; best {b.best:,.0f} ms alone, {shape}): not planned on"
    )


def reaching_type(cfg: DeploymentConfig, key: str) -> str | None:
    """The cheapest catalog type (one per GPU, cheapest first) on which SLO ``key`` is reachable
    at the central estimate for the config's typical request, or None. One speed-model run per
    GPU: the figure at the least concurrency that counts as reachable (one request for the
    per-token SLO, :data:`MIN_USEFUL_SHARE` of what the type runs for the others), as
    ``TargetBasis.reachable`` decides (the figures grow with the load)."""
    limit = getattr(cfg.monitoring, SLO_LIMITS[key][1])
    req = typical_request(cfg)
    seen: set[str] = set()
    for name, inst in sorted(INSTANCE_CATALOG.items(), key=lambda kv: kv[1].price_per_hour):
        if inst.gpu in seen:
            continue
        try:
            cap = estimate(cfg, name)
        except CapacityError:
            continue
        seen.add(inst.gpu)
        runs = min(cfg.engine.max_num_seqs, max(1, cap.concurrency_at_typical_length))
        c = 1 if key == PER_TOKEN_SLO else max(1, math.ceil(MIN_USEFUL_SHARE * runs))
        if _figure_ms(cfg, inst.gpu, key, c, req) <= limit:
            return name
    return None


def _figure_ms(
    cfg: DeploymentConfig, gpu: str, key: str, in_flight: int, req: dict[str, int]
) -> float:
    """SLO ``key``'s figure (ms) at ``in_flight`` at the central estimate."""
    s = speed_model.open_loop_at(
        cfg.architecture, cfg.model.quantization, gpu, in_flight=in_flight,
        eff=efficiency(cfg, gpu, "central"), **req,
    )  # fmt: skip
    return (
        1000
        * {
            "ttft_p50": s.ttft_p50_s,
            "ttft_p95": s.ttft_p95_s,
            "latency_p99": s.e2e_p99_s,
            "tpot_p95": s.tpot_p95_s,
        }[key]
    )


def _longest_answer(cfg: DeploymentConfig, basis: TargetBasis, key: str) -> int:
    """The longest answer (output tokens) for which ``key`` holds with one request alone at the
    central estimate (1 where none does)."""
    gpu = INSTANCE_CATALOG[basis.instance_type].gpu
    req = typical_request(cfg)
    limit = basis.central_bound(key).limit
    lo, hi = 1, cfg.engine.typical_output_tokens
    while lo < hi:
        mid = (lo + hi + 1) // 2
        fits = _figure_ms(cfg, gpu, key, 1, {**req, "output": mid}) <= limit
        lo, hi = (mid, hi) if fits else (lo, mid - 1)
    return lo


def what_would_reach(cfg: DeploymentConfig, variant: VariantName, key: str) -> str:
    """What would reach an SLO that is not reachable on the variant's type: a catalog type on
    which it is, and the lever of the SLO (a shorter answer, speculative decoding)."""
    basis = target_basis(cfg, variant)
    other = reaching_type(cfg, key)
    parts = [
        f"on {other} (instance_type)" if other else "on no catalog instance type",
    ]
    if key == "latency_p99":
        n = _longest_answer(cfg, basis, key)
        parts.append(
            f"answers up to {n} output tokens (engine.typical_output_tokens is "
            f"{cfg.engine.typical_output_tokens})"
        )
    if key in ("latency_p99", PER_TOKEN_SLO):
        parts.append(SPECULATIVE_DECODING)
    if key in ("ttft_p50", "ttft_p95"):
        parts.append(
            "a higher prefix-cache hit rate (fleet.prefix_cache_hit_rate, measured) or a "
            "shorter uncached prompt (engine.typical_prompt_tokens)"
        )
    return "would reach it: " + "; ".join(parts)


def unreachable(cfg: DeploymentConfig) -> dict[str, str]:
    """SLOs of ``fleet.slos`` that a variant's instance type cannot hold at a useful load at the
    central estimate of the speed model (Poisson arrivals, the typical request): ``{slo: why}``."""
    out: dict[str, str] = {}
    for v in VARIANT_NAMES:
        basis = target_basis(cfg, v)
        for key in SLO_LIMITS:
            if key not in cfg.fleet.slos or key in out:
                continue
            if not basis.reachable(key):
                out[key] = _why(cfg, basis, key)
    return out


def left_out(cfg: DeploymentConfig) -> dict[str, str]:
    """Latency SLOs of ``monitoring`` that ``fleet.slos`` does not list (the gate does not hold
    them): ``{slo: where it holds}``, at the central estimate and at the planning edge."""
    basis = target_basis(cfg, "primary")
    out = {}
    for key in SLO_LIMITS:
        if key in cfg.fleet.slos:
            continue
        c = basis.central_bound(key)
        p = next(b for b in basis.slo if b.slo == c.slo)
        out[key] = (
            f"monitoring.{SLO_FIELDS[key]} {c.limit:,.0f} ms holds on {basis.instance_type} up "  # type: ignore[index]
            f"to {c.concurrency} in flight at the central estimate, {p.concurrency} at the "
            "planning edge"
        )
    return out


def held(cfg: DeploymentConfig) -> list[GateSlo]:
    """``fleet.slos`` less those :func:`unreachable` names."""
    gone = unreachable(cfg)
    return [s for s in cfg.fleet.slos if s not in gone]
