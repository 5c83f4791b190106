"""The speed a config plans on: the speed model at the edge of the plan's stated error, with
LoRA's cost and the prefix-cache hit rate of the configured routing.

One place for every caller that sizes or times the fleet: the scaling target and its SLO bounds
(sizing.scaling_target), the plan's speed section and rollback-latency check (sizing.speed_plan),
the simulator (simulator/capacity.py), the capacity gate and the fleet solver. So the template's
target, the plan, the gate and ``make simulate`` quote one figure and can never disagree.

- **LoRA** (:func:`with_lora`, sizing/lora_cost.py): every request of a config with adapters
  runs through one (the serving image selects the default adapter when a request names none),
  and LoRA adds its own time to each engine step, per step and per running sequence; the
  KV-cache reads, weight reads and host costs are untouched.
- **The band is the plan's error, not each input's worst case** (:func:`planned_band`). Each
  input states its error as a relative error of the planned throughput: the speed model's carry
  to the instance's GPU (``speed_model.speed_band``), the LoRA form's (``lora_cost.LORA_ERROR``)
  and the prefix-cache hit rate's (``prefix_hit_rate.hit_rate_error``, turned into throughput by
  running the speed model at the rate +- its error). The inputs are independent (a GPU's speed,
  LoRA's kernels and the traffic's reuse of prompts), so the plan's error is their root sum of
  squares, per side; the pessimistic edge (:data:`PLANNING_EDGE`) is one minus it. Multiplying
  every input's pessimistic end instead (0.70 x 0.85 x ... for an L40S) is the case where every
  input is at its worst at once, which is not an edge of the plan's error but a rarer event.
- **GPU and host apart.** The combined band multiplies the GPU terms of a step only (the shares of
  peak bandwidth and compute, through which LoRA's kernel time is read too: :func:`scaled`). The
  host's per-step, per-sequence and per-request CPU work (and LoRA's host part) take the host's
  own band (``speed_model.HOST_BAND``, :func:`host_scaled`): a GPU without a published point
  says nothing about the instance's CPU.
- **Prefix-cache hit rate** (:func:`planned_hit_rate`): the config's measured rate when it states
  one (``fleet.prefix_cache_hit_rate``), else what the routing simulation finds for the configured
  strategy (sizing/prefix_hit_rate.py), no longer the brief's 72 %.

``python -m sizing.speed_evidence`` prints every measured point against the model and each
catalog GPU's band for a config.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal, get_args

from sizing import speed_model
from sizing.lora_cost import (
    LORA_ERROR,
    LORA_GPU_SHARE,
    LORA_SEQ_S,
    LORA_SOURCE,
    LORA_STEP_S,
)
from sizing.prefix_hit_rate import hit_rate_error, routing_hit_rate
from typed_config import DeploymentConfig, ModelArchitecture

Edge = Literal["pessimistic", "central", "optimistic"]
EDGES: tuple[Edge, ...] = get_args(Edge)
#: The edge every sizing decision uses (the gate, the solver, the scaling target, make simulate).
PLANNING_EDGE: Edge = "pessimistic"
#: vLLM's KV-cache block: a prefix is cached in whole blocks.
BLOCK = 16


def scaled(eff: speed_model.Efficiency, factor: float) -> speed_model.Efficiency:
    """``eff`` with every GPU term of a step ``1 / factor`` as long: the shares of peak bandwidth
    and compute times ``factor`` (LoRA's kernel time is read at the bandwidth share, so it
    follows). The host terms are left alone (:func:`host_scaled`)."""
    if factor <= 0:
        raise ValueError(f"throughput factor must be positive, got {factor}")
    return replace(
        eff, **{f: getattr(eff, f) * factor for f in speed_model.GPU_FIELDS}
    )  # fmt: skip


def host_scaled(eff: speed_model.Efficiency, factor: float) -> speed_model.Efficiency:
    """``eff`` with every host term ``1 / factor`` as long: per step, per running sequence, per
    request, and LoRA's host part. The GPU terms are left alone."""
    if factor <= 0:
        raise ValueError(f"host speed factor must be positive, got {factor}")
    return replace(
        eff, **{f: getattr(eff, f) / factor for f in speed_model.HOST_FIELDS}
    )  # fmt: skip


def with_lora(eff: speed_model.Efficiency) -> speed_model.Efficiency:
    """``eff`` serving through LoRA adapters (sizing/lora_cost.py): LoRA's added time per step and
    per running sequence, :data:`~sizing.lora_cost.LORA_GPU_SHARE` of it kernel time (read at
    the bandwidth share, so carried to another GPU by its bandwidth), the rest host time. No
    other term changes."""
    g = LORA_GPU_SHARE
    return replace(
        eff,
        lora_gpu_step_s=LORA_STEP_S * g,
        lora_gpu_seq_s=LORA_SEQ_S * g,
        lora_host_step_s=LORA_STEP_S * (1 - g),
        lora_host_seq_s=LORA_SEQ_S * (1 - g),
    )


def serves_adapters(cfg: DeploymentConfig) -> bool:
    return bool(cfg.adapters)


def band_factor(gpu: str, edge: Edge = PLANNING_EDGE) -> float:
    """The speed model's carry to ``gpu`` alone at ``edge``, as a throughput multiplier (one input
    of :func:`planned_band`)."""
    low, high = speed_model.speed_band(gpu)
    return {"pessimistic": low, "central": 1.0, "optimistic": high}[edge]


@dataclass(frozen=True)
class BandInput:
    """One input's error, as relative errors of the planned throughput on each side."""

    name: str
    low: float  # the throughput may be this much lower (0.30: -30 %)
    high: float  # or this much higher
    source: str


@dataclass(frozen=True)
class PlanBand:
    """The plan's error for one config on one GPU: the inputs, combined by root sum of squares
    into one band on the GPU terms, and the host's own band."""

    gpu: str
    inputs: tuple[BandInput, ...]
    host_low: float
    host_high: float
    #: Share of a representative step (a decode step at ``engine.max_num_seqs`` with the typical
    #: context) spent in GPU terms; the rest is host terms. Weighs the two bands (:meth:`_k`).
    gpu_share: float = 1.0

    @property
    def low(self) -> float:
        """The pessimistic edge: a throughput multiplier on the GPU terms."""
        return 1 - math.sqrt(sum(i.low**2 for i in self.inputs))

    @property
    def high(self) -> float:
        return 1 + math.sqrt(sum(i.high**2 for i in self.inputs))

    @property
    def worst_case_product(self) -> float:
        """Every input at its pessimistic end at once (what the band replaces): for comparison."""
        return math.prod(1 - i.low for i in self.inputs)

    def _k(self, edge: Edge) -> float:
        """The GPU and host errors are independent too: at an edge, each side's step-time
        stretch is taken at ``k`` x its own band, ``k`` making the stretch of the representative
        step their root sum of squares (k = 1 where one side is the whole step)."""
        if edge == "central":
            return 0.0
        g, h = (self.low, self.host_low) if edge == "pessimistic" else (self.high, self.host_high)
        eg, eh = 1 / g - 1, 1 / h - 1  # relative stretch of each side's time
        a, b = self.gpu_share * abs(eg), (1 - self.gpu_share) * abs(eh)
        return 1.0 if a + b == 0 else math.hypot(a, b) / (a + b)

    def factor(self, edge: Edge) -> float:
        """Multiplier on the GPU terms' speed at ``edge``."""
        g = {"pessimistic": self.low, "central": 1.0, "optimistic": self.high}[edge]
        return 1 / (1 + self._k(edge) * (1 / g - 1))

    def host_factor(self, edge: Edge) -> float:
        """Multiplier on the host terms' speed at ``edge``."""
        h = {"pessimistic": self.host_low, "central": 1.0, "optimistic": self.host_high}[edge]
        return 1 / (1 + self._k(edge) * (1 / h - 1))

    def describe(self) -> str:
        parts = ", ".join(f"{i.name} -{i.low:.0%}/+{i.high:.0%}" for i in self.inputs)
        return (
            f"plan band x{self.low:.2f}..x{self.high:.2f} on GPU terms (root sum of squares of "
            f"{parts}; every input at its worst at once would be x{self.worst_case_product:.2f}); "
            f"host terms x{self.host_low:.2f}..x{self.host_high:.2f} "
            f"({speed_model.HOST_BAND_SOURCE}); the two combined by root sum of squares over a "
            f"step {self.gpu_share:.0%} GPU: x{self.factor('pessimistic'):.2f} GPU, "
            f"x{self.host_factor('pessimistic'):.2f} host at the pessimistic edge"
        )


def hit_rate_throughput_error(cfg: DeploymentConfig, gpu: str) -> tuple[float, float]:
    """(lower, higher) relative throughput at the planned hit rate minus and plus its error
    (prefix_hit_rate.hit_rate_error), by the speed model at the central estimate, for the
    typical request in a closed loop at ``engine.max_num_seqs``."""
    eng = cfg.engine
    strategy = cfg.variants.primary.routing.strategy if cfg.variants.primary.routing else None
    return _hit_rate_throughput_error(
        cfg.architecture,
        cfg.model.quantization,
        gpu,
        serves_adapters(cfg),
        eng.typical_prompt_tokens,
        eng.typical_output_tokens,
        eng.context_budget.system_tokens,
        eng.max_num_seqs,
        eng.max_num_batched_tokens,
        planned_hit_rate(cfg),
        hit_rate_error(strategy),
    )


@lru_cache(maxsize=256)
def _hit_rate_throughput_error(
    arch: ModelArchitecture,
    quant: str,
    gpu: str,
    lora: bool,
    prompt: int,
    output: int,
    system: int,
    max_num_seqs: int,
    max_num_batched_tokens: int,
    hit: float,
    error: float,
) -> tuple[float, float]:
    eff = with_lora(speed_model.FITTED) if lora else speed_model.FITTED

    def rpm(h: float) -> float:
        cached = int(prompt * min(max(h, 0.0), 0.99)) // BLOCK * BLOCK
        return speed_model.closed_loop(
            arch, quant, gpu, concurrency=max_num_seqs, prompt=prompt, output=output,
            cached=cached, shared=min(cached, system), max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens, eff=eff,
        ).requests_per_minute  # fmt: skip

    mid = rpm(hit)
    return max(0.0, 1 - rpm(hit - error) / mid), max(0.0, rpm(hit + error) / mid - 1)


def planned_band(cfg: DeploymentConfig, gpu: str) -> PlanBand:
    """The plan's error for ``cfg`` on ``gpu`` (see the module docstring)."""
    low, high = speed_model.speed_band(gpu)
    carry = BandInput(f"{gpu} speed carry", 1 - low, high - 1, speed_model.speed_band_source(gpu))
    inputs = [carry]
    if serves_adapters(cfg):
        inputs.append(BandInput("LoRA form", LORA_ERROR, LORA_ERROR, LORA_SOURCE))
    if cfg.fleet.prefix_cache_hit_rate is None:  # a measured live rate is taken as exact
        h_low, h_high = hit_rate_throughput_error(cfg, gpu)
        inputs.append(BandInput("prefix hit rate", h_low, h_high, hit_rate_source(cfg)))
    host_low, host_high = speed_model.HOST_BAND
    return PlanBand(gpu, tuple(inputs), host_low, host_high, gpu_step_share(cfg, gpu))


def gpu_step_share(cfg: DeploymentConfig, gpu: str) -> float:
    """Share of a decode step at ``engine.max_num_seqs`` (every sequence at the typical prompt
    plus half the typical answer, LoRA's terms where the config serves adapters) spent in GPU
    terms, at the central estimate."""
    eng = cfg.engine
    eff = with_lora(speed_model.FITTED) if serves_adapters(cfg) else speed_model.FITTED
    cost = speed_model.step_cost(cfg.architecture, cfg.model.quantization, gpu, eff)
    n = eng.max_num_seqs
    ctx = n * (eng.typical_prompt_tokens + eng.typical_output_tokens / 2)
    full = cost.seconds(n, ctx, n, 0.0)
    gpu_only = replace(cost, eff=replace(eff, **dict.fromkeys(speed_model.HOST_FIELDS, 0.0)))
    return gpu_only.seconds(n, ctx, n, 0.0) / full


def efficiency(
    cfg: DeploymentConfig, gpu: str, edge: Edge = PLANNING_EDGE
) -> speed_model.Efficiency:
    """The step-cost constants a config plans on for ``gpu`` at ``edge``: LoRA's terms where it
    serves adapters, the plan band's factor on the GPU terms and the host band's on the host's."""
    eff = with_lora(speed_model.FITTED) if serves_adapters(cfg) else speed_model.FITTED
    if edge == "central":
        return eff
    band = planned_band(cfg, gpu)
    return host_scaled(scaled(eff, band.factor(edge)), band.host_factor(edge))


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
    band = planned_band(cfg, gpu)
    parts = [
        speed_model.source(gpu),
        f"{edge} edge x{band.factor(edge):.2f} on GPU terms, x{band.host_factor(edge):.2f} on "
        f"host terms ({band.describe()})",
    ]
    if serves_adapters(cfg):
        parts.append(LORA_SOURCE)
    return "; ".join(parts)
