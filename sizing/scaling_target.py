"""The concurrency target tracking holds each instance at, and which bound sets it.

An instance can only be held at a concurrency it can run and answer within its SLOs. Three
bounds, the lowest binds:

- ``engine.max_num_seqs``: vLLM never runs more sequences at once;
- the KV cache at the typical request length (sizing.capacity): a target above it is never
  reached by running requests, so the policy would scale in an overloaded fleet (simulator
  finding);
- each latency SLO the config lets bind (``target_tracking.slos``: ``monitoring.slo_ttft_p50_ms``,
  ``monitoring.slo_latency_p99_ms``): the most requests in flight at which the speed model
  (sizing.speed_model, fitted to GPU measurements) meets it under Poisson arrivals, for the
  typical request with the brief's prefix-cache hit rate.

The target is ``target_fraction_of_concurrency`` x the binding bound. The queue-wait SLO
(``monitoring.slo_queue_wait_p95_ms``) has no term of its own: below the KV bound vLLM schedules
an arriving request at once, and the speed model has no waiting-queue term to say more.

An SLO that cannot be met at any concurrency for the configured request shape (a 180-token answer
within 2 s p99 on an A10G: the best is one request alone) cannot bind; synth says so, naming the
SLO, the shape and the best the instance can do (:func:`unmet_slo_warnings`), and the plan prints
it once, under its variant (not as a CDK annotation: CDK's validation report would print it a
second time, with an acknowledgement id that means nothing in the config). Listing only the SLOs
that can bind (``target_tracking.slos``) is how a config accepts it; the SLO's alarm stays
either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from sizing import speed_model
from sizing.capacity import pool_capacities
from sizing.serving_speed import BLOCK, PLANNING_EDGE, Edge, efficiency, planned_hit_rate
from typed_config import VARIANT_NAMES, DeploymentConfig, VariantName
from typed_config.catalog import INSTANCE_CATALOG
from typed_config.deployment import Variants

#: The brief's measured prefix-cache hit rate (~72 %): no longer planned on (the routing simulation
#: finds 33-58 %, sizing/prefix_hit_rate.py); kept for ``--prefix-cache-hit-rate 0.72`` what-ifs.
BRIEF_PREFIX_HIT_RATE = 0.72

#: ``target_tracking.slos`` entries: the speed model's name for each and the monitoring field
#: that holds its limit.
SLO_LIMITS: dict[str, tuple[str, str]] = {
    "ttft_p50": ("TTFT p50", "slo_ttft_p50_ms"),
    "ttft_p95": ("TTFT p95", "slo_ttft_p95_ms"),
    "latency_p99": ("end-to-end p99", "slo_latency_p99_ms"),
    "tpot_p95": ("TPOT p95", "slo_tpot_p95_ms"),
}
#: The per-token SLO: how fast an answer streams to the user. It binds at whatever share of the
#: engine it holds (:data:`MIN_USEFUL_SHARE` does not apply): "cheapest" never means running every
#: GPU at a per-user speed nobody would accept.
PER_TOKEN_SLO = "tpot_p95"

#: An SLO other than the per-token one that holds, at the central estimate, only below this share
#: of the requests an instance runs (the lower of max_num_seqs and the KV cache) is not reachable:
#: a fleet would keep most of every GPU idle for it, and the solver would size the fleet on that
#: idle share. It is named instead, with what would reach it (sizing.slo_reach).
MIN_USEFUL_SHARE = 0.25


def cached_tokens(cfg: DeploymentConfig, prompt: int, hit_rate: float) -> tuple[int, int]:
    """(cached, shared) prompt tokens: whole blocks of the hit rate's share, of which the system
    prompt is common to every request."""
    cached = int(prompt * hit_rate) // BLOCK * BLOCK
    return cached, min(cached, cfg.engine.context_budget.system_tokens)


@dataclass(frozen=True)
class TargetBasis:
    """What sets one variant's concurrency target."""

    max_num_seqs: int
    kv_bound: int
    #: Every latency SLO of the config, met or not (the plan prints them all), at the planning
    #: edge of the speed model: where the target sits.
    slo: tuple[speed_model.SloBound, ...]
    #: Keys of :data:`SLO_LIMITS` the config lets bind (``target_tracking.slos``).
    binding_slos: tuple[str, ...]
    #: The bound that binds: "max_num_seqs", "KV cache" or an SLO's name.
    binding: str
    #: The binding bound, in requests in flight per instance.
    concurrency: int
    #: The instance type (pool) these bounds are for; for a variant, the pool that binds.
    instance_type: str = ""
    #: The same bounds at the central estimate of the speed model: whether an SLO is reachable
    #: is decided here, never because the pessimistic edge says so (:func:`reachable`).
    central: tuple[speed_model.SloBound, ...] = ()

    @property
    def engine_bound(self) -> int:
        """What one instance runs at once: the lower of max_num_seqs and the KV cache."""
        return min(self.max_num_seqs, self.kv_bound)

    def central_bound(self, key: str) -> speed_model.SloBound:
        return next(b for b in self.central if b.slo == SLO_LIMITS[key][0])

    def reachable(self, key: str) -> bool:
        """Whether SLO ``key`` holds at the central estimate at a useful load: at any
        concurrency for the per-token SLO, at :data:`MIN_USEFUL_SHARE` of the engine for the
        others."""
        c = self.central_bound(key).concurrency
        if key == PER_TOKEN_SLO:
            return c > 0
        return c > 0 and c >= MIN_USEFUL_SHARE * self.engine_bound

    @property
    def unmet(self) -> tuple[speed_model.SloBound, ...]:
        """SLOs allowed to bind that are not reachable at the central estimate (the central
        figures: what the speed model expects, not its pessimistic edge)."""
        return tuple(self.central_bound(k) for k in self.binding_slos if not self.reachable(k))


def typical_request(cfg: DeploymentConfig) -> dict[str, int]:
    """The speed model's keywords for the config's typical request on its engine, with the
    planned prefix-cache hit rate (sizing.serving_speed.planned_hit_rate)."""
    eng = cfg.engine
    prompt, output = eng.typical_prompt_tokens, eng.typical_output_tokens
    cached, shared = cached_tokens(cfg, prompt, planned_hit_rate(cfg))
    return {
        "prompt": prompt,
        "output": output,
        "cached": cached,
        "shared": shared,
        "max_num_seqs": eng.max_num_seqs,
        "max_num_batched_tokens": eng.max_num_batched_tokens,
    }


def target_basis(cfg: DeploymentConfig, variant: VariantName) -> TargetBasis:
    """The bounds of ``variant``'s concurrency target and the one that binds: the lowest over
    the variant's instance pools (:func:`pool_bases`; one pool without ``instance_pools``).

    Why the lowest: target tracking on ``ConcurrentRequestsPerModel`` reads one figure for the
    variant, "aggregate[d] across all instance types in the variant" (SageMaker developer guide,
    "Deploy to multiple instance types with instance pools", Auto-scaling with instance pools:
    predefined metrics "aggregate across all instance types in the variant, so the scaling
    behavior is the same as a standard endpoint. This is the simplest approach when all instance
    types in your pools have similar capacity"). SageMaker's routing gives every instance about
    the same share of requests (random by default; least outstanding requests and prefix-aware
    spill by requests in flight, not by what an instance can run), so the average it holds is
    what each instance runs. A target above the smallest pool's bound then holds the fallback
    instances past their KV cache or SLO whenever a scale-out lands there, and the average,
    met by the others, never asks for more. The guide's alternative, a weighted metric-math
    average per InstanceType dimension, still needs a target each pool can run; the lowest bound
    is the one target right on every mix of pools, at the cost of headroom on the larger pools
    (the plan prints each pool's bound, so the cost is visible).
    """
    bases = pool_bases(cfg, variant)
    return min(bases, key=lambda b: b.concurrency)


def pool_bases(cfg: DeploymentConfig, variant: VariantName) -> tuple[TargetBasis, ...]:
    """:class:`TargetBasis` of each of ``variant``'s pools, by priority."""
    return tuple(
        _basis(
            pc.cfg,
            variant,
            pc.pool.instance_type,
            max(1, pc.capacity.concurrency_at_typical_length),
        )
        for pc in pool_capacities(cfg, variant)
    )


def _basis(cfg: DeploymentConfig, variant: VariantName, itype: str, kv_bound: int) -> TargetBasis:
    """One instance type's bounds; ``cfg`` carries the engine that type runs."""
    inst = INSTANCE_CATALOG[itype]
    mon = cfg.monitoring

    def bounds_at(edge: Edge) -> tuple[speed_model.SloBound, ...]:
        return speed_model.slo_bounds(
            cfg.architecture,
            cfg.model.quantization,
            inst.gpu,
            ceiling=kv_bound,
            ttft_p50_ms=mon.slo_ttft_p50_ms,
            latency_p99_ms=mon.slo_latency_p99_ms,
            tpot_p95_ms=mon.slo_tpot_p95_ms,
            ttft_p95_ms=mon.slo_ttft_p95_ms,
            eff=efficiency(cfg, inst.gpu, edge),
            **typical_request(cfg),
        )

    bounds = bounds_at(PLANNING_EDGE)
    tt = cfg.scaling.variants[variant].target_tracking
    binding_slos = tuple(tt.slos) if tt is not None else tuple(SLO_LIMITS)
    basis = TargetBasis(
        max_num_seqs=cfg.engine.max_num_seqs,
        kv_bound=kv_bound,
        slo=bounds,
        binding_slos=binding_slos,
        binding="",
        concurrency=0,
        instance_type=itype,
        central=bounds if PLANNING_EDGE == "central" else bounds_at("central"),
    )
    candidates = [("max_num_seqs", cfg.engine.max_num_seqs), ("KV cache", kv_bound)]
    for key in binding_slos:
        if not basis.reachable(key):
            continue
        # reachable at the central estimate: it binds at the planning edge's bound, at least
        # one request in flight (where even one misses at that edge, the plan says so)
        b = next(x for x in bounds if x.slo == SLO_LIMITS[key][0])
        candidates.append((b.slo, max(1, b.concurrency)))
    # the lowest binds; on a tie the engine's own limits are named (they hold without a model)
    binding, concurrency = min(candidates, key=lambda c: c[1])
    return replace(basis, binding=binding, concurrency=concurrency)


def concurrency_target(cfg: DeploymentConfig, variant: VariantName) -> float:
    """Target of concurrency target tracking: ``target_fraction_of_concurrency`` x the binding
    bound of :func:`target_basis` (prod, Llama-3-8B AWQ on an L40S: max_num_seqs' 128; on an
    A10G the KV cache's 73 sequences at the typical length)."""
    tt = cfg.scaling.variants[variant].target_tracking
    assert tt is not None
    return round(tt.target_fraction_of_concurrency * target_basis(cfg, variant).concurrency, 2)


def spill_threshold(cfg: DeploymentConfig, variant: VariantName) -> int | None:
    """PREFIX_AWARE's ConcurrencyThreshold for ``variant`` (None: the variant does not route by
    prefix): the configured one, else the scaling target rounded up. Never below the target
    (sizing.fit_checks refuses a configured one below it): target tracking holds each instance's
    in-flight average at the target, so a threshold under it spills a conversation off the
    instance that caches it while that instance still has the room autoscaling wants it to use,
    and prefix routing turns into least-outstanding at exactly the fleet's working point (prod's
    64 under its 108.8: the routing simulation's hit rate fell to RANDOM's, issue 42). SageMaker:
    ``ConcurrencyThreshold`` 1-1024, "the maximum number of in-flight requests on the target
    instance before the endpoint routes to another instance" (API reference,
    PrefixAwareRoutingConfig)."""
    routing = cfg.variants[variant].routing
    if routing is None or routing.strategy != "PREFIX_AWARE":
        return None
    if routing.concurrency_threshold is not None:
        return routing.concurrency_threshold
    return least_spill_threshold(cfg, variant)


def routed_variants(cfg: DeploymentConfig) -> Variants:
    """``cfg.variants`` with each PREFIX_AWARE threshold the config leaves out filled in with
    :func:`spill_threshold` (what the template carries: the API requires it with PREFIX_AWARE)."""
    out: dict[str, Any] = {}
    for v in VARIANT_NAMES:
        var = cfg.variants[v]
        routing = var.routing
        if routing is not None and routing.strategy == "PREFIX_AWARE":
            routing = routing.model_copy(update={"concurrency_threshold": spill_threshold(cfg, v)})
            var = var.model_copy(update={"routing": routing})
        out[v] = var
    return cfg.variants.model_copy(update=out)


def least_spill_threshold(cfg: DeploymentConfig, variant: VariantName) -> int:
    """The lowest ConcurrencyThreshold ``variant`` may take: its concurrency target, rounded up
    (at least 1: the API's lower bound)."""
    if cfg.scaling.variants[variant].target_tracking is None:
        return max(1, target_basis(cfg, variant).concurrency)
    return max(1, math.ceil(concurrency_target(cfg, variant) - 1e-9))


#: What shortens each SLO's best figure, beside a faster instance type (said in its warning).
SLO_LEVERS: dict[str, str] = {
    "ttft_p50": "a shorter uncached prompt (engine.typical_prompt_tokens)",
    "ttft_p95": "a shorter uncached prompt (engine.typical_prompt_tokens)",
    "latency_p99": "a shorter typical answer (engine.typical_output_tokens)",
    "tpot_p95": "speculative decoding (fewer decode steps per token)",
}


def unmet_slo_warnings(cfg: DeploymentConfig, variant: VariantName) -> list[str]:
    """One warning per SLO that ``variant``'s ``target_tracking.slos`` lets bind and that is not
    reachable at the central estimate for the typical request, on any of its pools: the SLO and
    its limit, the best the instance can do, what binds instead, and what to do (meet it, or
    accept it by leaving it out of ``slos``: its alarm stays). The plan prints them, once."""
    vs = cfg.scaling.variants[variant]
    if vs.target_tracking is None or vs.target_tracking.metric != "concurrency":
        return []
    req = typical_request(cfg)
    field = f"scaling.variants.{variant}.target_tracking.slos"
    lines = []
    # every pool: a fallback pool that cannot meet an SLO is as much the operator's to know
    for basis in pool_bases(cfg, variant):
        for b in basis.unmet:
            key = next(k for k, (name, _) in SLO_LIMITS.items() if name == b.slo)
            reach = (
                "which no concurrency meets"
                if b.concurrency == 0
                else f"which holds only up to {b.concurrency} of the {basis.engine_bound} in "
                "flight it runs"
            )
            lines.append(
                f"{field} lists {key}, {reach} on {basis.instance_type} at the central estimate: "
                f"monitoring.{SLO_LIMITS[key][1]} is {b.limit:,.0f} ms, the best for the typical "
                f"request ({req['prompt']}+{req['output']} tokens, {req['cached']} cached) is "
                f"{b.best:,.0f} ms with one request in flight, so "
                f"the target follows the {basis.binding} ({basis.concurrency} in flight). To "
                f"meet it: a faster instance type (variants.{variant}.instance_type) or "
                f"{SLO_LEVERS[key]}. To accept it: remove {key} from {field} (its alarm stays)"
            )
    return lines
