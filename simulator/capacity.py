"""Per-instance serving capacity, derived from the engine settings, sizing.capacity and the speed
model (sizing.speed_model).

- Concurrency ``C``: how many sequences of the typical length fit in the KV cache, capped at
  ``engine.max_num_seqs`` (``sizing.capacity.estimate(...).concurrency_at_typical_length``).
- Service time ``S``: the end-to-end time of one request of that shape while ``C`` run at once, and
  its time to first token, from the speed model on the instance's GPU (vLLM's scheduler on a step
  cost fitted to H100 measurements and carried by bandwidth and compute; ``--decode-tps`` swaps
  in the old constant arithmetic for what-ifs). :attr:`InstanceModel.speed_source` says which.
- Throughput: ``C / S`` requests per second while the batch is full (Little's law).
- Admission: ``engine.admission_max_inflight`` requests per instance; the next one gets a 429.

A trace may carry its own mean prompt/output tokens per minute: ``at(prompt, output)`` redoes the
same arithmetic for that shape (longer requests: fewer fit in the KV cache and each takes longer).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from simulator.assumptions import Assumptions
from sizing import speed_model
from sizing.capacity import Capacity, estimate, sequences_that_fit, weight_bytes
from sizing.scaling_target import cached_tokens, concurrency_target
from sizing.serving_speed import describe, efficiency
from typed_config import DeploymentConfig
from typed_config.catalog import INSTANCE_CATALOG

#: Peak memory bandwidth of each catalog GPU (GB/s, vendor spec sheets), for the roofline check.
GPU_BANDWIDTH_GBPS = {
    "T4": 320.0,
    "A10G": 600.0,
    "L4": 300.0,
    "L40S": 864.0,
    "A100 40GB": 1555.0,
    "H100": 3350.0,
}
#: Share of peak bandwidth a decode step reaches in practice.
BANDWIDTH_EFFICIENCY = 0.8


@dataclass(frozen=True)
class RequestShape:
    """What one instance does with requests of one mean shape."""

    #: Sequences of this length running at once (the KV cache's share, capped at max_num_seqs).
    concurrency: int
    #: Arrival to first token (prefill of the uncached prompt, behind the other requests' steps).
    prefill_seconds: float
    #: First token to last, while ``concurrency`` sequences decode together.
    decode_seconds: float

    @property
    def service_seconds(self) -> float:
        return self.prefill_seconds + self.decode_seconds

    @property
    def requests_per_minute(self) -> float:
        """Throughput while the batch is full (Little's law)."""
        return 60 * self.concurrency / self.service_seconds


@dataclass(frozen=True)
class SpeedSource:
    """The one place the simulator times a request: (time to first token, end-to-end) seconds of
    a request shape while ``concurrency`` requests run on one instance."""

    cfg: DeploymentConfig
    gpu: str
    a: Assumptions
    #: (concurrency, prompt, output) -> (TTFT, end-to-end) s of the speed model: a replay asks
    #: the same few shapes every tick, and deriving the model's inputs from the config (the
    #: architecture, the edge's efficiency, the hit rate) cost more than the cached model itself
    #: (a third of a normal-day replay; the plan replays it at three edges, simulator/
    #: user_figures.py). Keyed on everything :meth:`times` reads that varies per call.
    _memo: dict[tuple[int, int, int], tuple[float, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    @property
    def constant(self) -> bool:
        return self.a.decode_tokens_per_second is not None

    def cached_tokens(self, prompt: int) -> tuple[int, int]:
        """(cached, shared) prompt tokens: the hit rate's share in whole blocks, of which the
        config's system prompt is common to every request."""
        return cached_tokens(self.cfg, prompt, self.a.hit_rate(self.cfg))

    def times(self, concurrency: int, prompt: float, output: float) -> tuple[float, float]:
        a = self.a
        if a.decode_tokens_per_second is not None:
            prefill_tps = a.prefill_tokens_per_second or 10_000.0
            prefill = prompt * (1 - a.hit_rate(self.cfg)) / prefill_tps
            return prefill, prefill + output / a.decode_tokens_per_second
        p, o = max(1, round(prompt)), max(1, round(output))
        key = (max(1, concurrency), p, o)
        if key not in self._memo:
            self._memo[key] = self._model_times(*key)
        return self._memo[key]

    def _model_times(self, concurrency: int, p: int, o: int) -> tuple[float, float]:
        cached, shared = self.cached_tokens(p)
        eng = self.cfg.engine
        s = speed_model.closed_loop(
            self.cfg.architecture,
            self.cfg.model.quantization,
            self.gpu,
            concurrency=concurrency,
            prompt=p,
            output=o,
            cached=cached,
            shared=shared,
            max_num_seqs=eng.max_num_seqs,
            max_num_batched_tokens=eng.max_num_batched_tokens,
            eff=efficiency(self.cfg, self.gpu, self.a.speed_edge),
        )
        return s.ttft_p50_s, s.e2e_p50_s

    def describe(self) -> str:
        if self.a.decode_tokens_per_second is not None:
            return (
                f"assumed constants: decode {self.a.decode_tokens_per_second:g} tok/s per "
                f"sequence, prefill {self.a.prefill_tokens_per_second or 10_000.0:g} tok/s "
                "(--decode-tps/--prefill-tps)"
            )
        return describe(self.cfg, self.gpu, self.a.speed_edge)

    def shape(self, concurrency: int, prompt: float, output: float) -> RequestShape:
        ttft, e2e = self.times(concurrency, prompt, output)
        return RequestShape(concurrency, ttft, e2e - ttft)


@dataclass(frozen=True)
class Roofline:
    """What memory bandwidth allows at full batch: per-sequence decode speed and throughput."""

    decode_tokens_per_second: float
    requests_per_minute: float


def roofline(
    cfg: DeploymentConfig, gpu: str, cap: Capacity, typical: RequestShape
) -> Roofline | None:
    """One decode step reads every weight once plus the KV cache of every running sequence (on
    average half-way through its output), at ``BANDWIDTH_EFFICIENCY`` of the GPU's peak."""
    bw = GPU_BANDWIDTH_GBPS.get(gpu)
    if not bw:
        return None
    prompt, output = cfg.engine.typical_prompt_tokens, cfg.engine.typical_output_tokens
    conc = typical.concurrency
    step_bytes = (
        weight_bytes(cfg.architecture, cfg.model.quantization)
        + conc * (prompt + output / 2) * cap.kv_bytes_per_token
    )
    tps = bw * 1e9 * BANDWIDTH_EFFICIENCY / step_bytes
    return Roofline(tps, 60 * conc / (typical.prefill_seconds + output / tps))


@dataclass(frozen=True)
class InstanceModel:
    instance_type: str
    price_per_hour: float
    kv_capacity_tokens: int
    max_num_seqs: int
    admission_limit: int
    gpu_memory_percent: float
    prompt_tokens: int
    output_tokens: int
    #: The configured typical request: its concurrency is ``sizing.capacity.estimate``'s.
    typical: RequestShape
    #: Memory-bandwidth bound at full batch (None: GPU not in GPU_BANDWIDTH_GBPS).
    roofline: Roofline | None
    assumptions: Assumptions
    #: Where the service times come from (printed beside every speed).
    speed: SpeedSource

    @property
    def speed_source(self) -> str:
        return self.speed.describe()

    @property
    def concurrency(self) -> int:
        return self.typical.concurrency

    @property
    def service_seconds(self) -> float:
        return self.typical.service_seconds

    @property
    def requests_per_minute(self) -> float:
        return self.typical.requests_per_minute

    def at(self, prompt_tokens: float, output_tokens: float) -> RequestShape:
        """A trace minute's mean shape: longer requests, fewer fit in the KV cache (the rule
        ``estimate`` applies at the typical length, at this minute's length)."""
        length = prompt_tokens + output_tokens
        concurrency = max(1, sequences_that_fit(self.kv_capacity_tokens, length, self.max_num_seqs))
        return self.speed.shape(concurrency, prompt_tokens, output_tokens)

    def latency(self, concurrency: int, prompt_tokens: float, output_tokens: float) -> RequestShape:
        """Times of a request while ``concurrency`` (fewer than the batch holds, say) run."""
        return self.speed.shape(max(1, concurrency), prompt_tokens, output_tokens)


#: A figure or a series of them (per tick).
Figures = TypeVar("Figures", float, np.ndarray)


def full_queue_wait_s(admission_limit: float, running: Figures, service_s: Figures) -> Figures:
    """The wait in a full queue: an instance holds at most ``admission_limit`` requests
    (:func:`admit` answers 429 beyond), so ``admission_limit - running`` wait behind the
    ``running`` it serves, ``service_s`` each. Queue waits stop growing there: a percentile at
    it is the admission cap, not a measure of how long waits would grow."""
    return (admission_limit - running) * service_s / running


def admit(
    backlog: float, arrivals: float, can_serve: float, room: float
) -> tuple[float, float, float]:
    """One step of the pooled FIFO queue inside vLLM: (served, rejected with 429, new backlog).

    Up to ``can_serve`` requests complete; the rest wait, and what exceeds ``room`` waiting places
    (``n x (admission_max_inflight - running sequences)``) is rejected.
    """
    total = backlog + arrivals
    served = min(total, can_serve)
    left = total - served
    rejected = max(0.0, left - room)
    return served, rejected, left - rejected


def instance_model(cfg: DeploymentConfig, instance_type: str, a: Assumptions) -> InstanceModel:
    cap = estimate(cfg, instance_type)
    eng = cfg.engine
    prompt, output = eng.typical_prompt_tokens, eng.typical_output_tokens
    inst = INSTANCE_CATALOG[instance_type]
    speed = SpeedSource(cfg, inst.gpu, a)
    typical = speed.shape(max(1, cap.concurrency_at_typical_length), prompt, output)
    return InstanceModel(
        instance_type=instance_type,
        price_per_hour=inst.price_per_hour,
        kv_capacity_tokens=cap.kv_capacity_tokens,
        max_num_seqs=eng.max_num_seqs,
        admission_limit=eng.admission_max_inflight,
        gpu_memory_percent=100 * eng.gpu_memory_utilization,
        prompt_tokens=prompt,
        output_tokens=output,
        typical=typical,
        roofline=roofline(cfg, inst.gpu, cap, typical),
        assumptions=a,
        speed=speed,
    )


def warm_start_count(cfg: DeploymentConfig, variant: str, inst: InstanceModel, rpm: float) -> int:
    """Instances target tracking would hold for ``rpm`` requests/minute on ``variant``: what a
    live fleet already runs when a replay starts mid-traffic (Assumptions.warm_start). Without
    it every replay began at the config's initial count, and its first minutes measured the
    replay's own start, not the policy."""
    tt = cfg.scaling.variants[variant].target_tracking  # type: ignore[index]
    if tt is not None and tt.metric == "concurrency":
        target = concurrency_target(cfg, variant)  # type: ignore[arg-type]
    else:
        target = 0.85 * inst.concurrency
    return math.ceil(rpm / 60 * inst.service_seconds / max(target, 1e-9))
