"""The speed a config plans on: the speed model at the edge of its stated error, with LoRA's cost
and the prefix-cache hit rate of the configured routing.

One place for every caller that sizes or times the fleet: the scaling target and its SLO bounds
(sizing.scaling_target), the plan's speed section and rollback-latency check (sizing.speed_plan),
the simulator (simulator/capacity.py), the capacity gate and the fleet solver. So the template's
target, the plan, the gate and ``make simulate`` quote one figure and can never disagree.

- **Edge.** The speed model carries a per-GPU error band (``speed_model.speed_band``: throughput
  multipliers of its pessimistic and optimistic edges, from its error against published
  measurements, docs/speed-model.md). The product decides on the pessimistic edge
  (:data:`PLANNING_EDGE`); ``central`` and ``optimistic`` exist to print both edges.
- **LoRA.** Every request of a config with adapters runs through one (the serving image selects
  the default adapter when a request names none), and serving through LoRA costs throughput
  and time to first token, measured on the device (sizing/lora_cost.py, :func:`with_lora`).
- **The band enters as one throughput factor** ``f``: every term of an engine step is divided by
  ``f`` (:func:`scaled`), so TTFT, decode and end-to-end times grow by ``1 / f`` and
  requests/minute at a concurrency shrink by ``f``.
- **Prefix-cache hit rate** (:func:`planned_hit_rate`): the config's measured rate when it states
  one (``fleet.prefix_cache_hit_rate``), else what the routing simulation finds for the configured
  strategy (sizing/prefix_hit_rate.py), no longer the brief's 72 %.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, get_args

from sizing import speed_model
from sizing.lora_cost import LORA_DECODE_FACTOR, LORA_PREFILL_FACTOR, LORA_SOURCE
from sizing.prefix_hit_rate import routing_hit_rate
from typed_config import DeploymentConfig

Edge = Literal["pessimistic", "central", "optimistic"]
EDGES: tuple[Edge, ...] = get_args(Edge)
#: The edge every sizing decision uses (the gate, the solver, the scaling target, make simulate).
PLANNING_EDGE: Edge = "pessimistic"


def scaled(eff: speed_model.Efficiency, factor: float) -> speed_model.Efficiency:
    """``eff`` with every term of a step (and the per-request lag) ``1 / factor`` as long:
    bandwidth and compute shares times ``factor``, fixed costs divided by it."""
    if factor <= 0:
        raise ValueError(f"throughput factor must be positive, got {factor}")
    return replace(
        eff,
        bandwidth=eff.bandwidth * factor,
        w4_bandwidth=eff.w4_bandwidth * factor,
        compute=eff.compute * factor,
        compute_w4=eff.compute_w4 * factor,
        overhead_s=eff.overhead_s / factor,
        per_seq_s=eff.per_seq_s / factor,
        request_s=eff.request_s / factor,
    )


def with_lora(eff: speed_model.Efficiency) -> speed_model.Efficiency:
    """``eff`` serving through LoRA adapters (sizing/lora_cost.py): decode terms at
    LORA_DECODE_FACTOR, prefill terms at LORA_PREFILL_FACTOR."""
    d, p = LORA_DECODE_FACTOR, LORA_PREFILL_FACTOR
    return replace(
        eff,
        bandwidth=eff.bandwidth * d,
        w4_bandwidth=eff.w4_bandwidth * d,
        overhead_s=eff.overhead_s / d,
        per_seq_s=eff.per_seq_s / d,
        compute=eff.compute * p,
        compute_w4=eff.compute_w4 * p,
        request_s=eff.request_s / p,
    )


def serves_adapters(cfg: DeploymentConfig) -> bool:
    return bool(cfg.adapters)


def band_factor(gpu: str, edge: Edge = PLANNING_EDGE) -> float:
    """The speed model's error band at ``edge`` for ``gpu``, as a throughput multiplier."""
    low, high = speed_model.speed_band(gpu)
    return {"pessimistic": low, "central": 1.0, "optimistic": high}[edge]


def efficiency(
    cfg: DeploymentConfig, gpu: str, edge: Edge = PLANNING_EDGE
) -> speed_model.Efficiency:
    """The step-cost constants a config plans on for ``gpu`` at ``edge``."""
    eff = scaled(speed_model.FITTED, band_factor(gpu, edge))
    return with_lora(eff) if serves_adapters(cfg) else eff


def planned_hit_rate(cfg: DeploymentConfig) -> float:
    """The prefix-cache hit rate the sizing uses (see the module docstring)."""
    measured = cfg.fleet.prefix_cache_hit_rate
    if measured is not None:
        return measured.rate
    routing = cfg.variants.primary.routing
    return routing_hit_rate(routing.strategy if routing else None)


def hit_rate_source(cfg: DeploymentConfig) -> str:
    measured = cfg.fleet.prefix_cache_hit_rate
    if measured is not None:
        return f"{measured.rate:.0%} (fleet.prefix_cache_hit_rate: {measured.source})"
    routing = cfg.variants.primary.routing
    strategy = routing.strategy if routing else "RANDOM"
    return (
        f"{routing_hit_rate(strategy):.0%} (the routing simulation's lowest for {strategy}, "
        "sizing/prefix_hit_rate.py; not the brief's 72 %)"
    )


def describe(cfg: DeploymentConfig, gpu: str, edge: Edge = PLANNING_EDGE) -> str:
    """Where a planned speed comes from, in one line (printed beside every speed)."""
    band = band_factor(gpu, edge)
    parts = [
        speed_model.source(gpu),
        f"{edge} edge x{band:.2f} ({speed_model.speed_band_source(gpu)})",
    ]
    if serves_adapters(cfg):
        parts.append(LORA_SOURCE)
    return "; ".join(parts)
