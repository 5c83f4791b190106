"""Per-instance serving capacity, derived from the engine settings and stacks.capacity.

- Concurrency ``C``: how many sequences of the typical length fit in the KV cache, capped at
  ``engine.max_num_seqs`` (``stacks.capacity.estimate(...).concurrency_at_typical_length``).
- Service time ``S``: prefill of the uncached part of the prompt plus decode of the output, at the
  assumed per-sequence speeds (:class:`~simulator.assumptions.Assumptions`).
- Throughput: ``C / S`` requests per second while the batch is full (Little's law).
- Admission: ``engine.admission_max_inflight`` requests per instance; the next one gets a 429.

A trace may carry its own mean prompt/output tokens per minute: ``at(prompt, output)`` redoes the
same arithmetic for that shape (longer requests: fewer fit in the KV cache and each takes longer).
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.assumptions import Assumptions
from stacks.capacity import Capacity, estimate, sequences_that_fit, weight_bytes
from stacks.catalog import INSTANCE_CATALOG
from stacks.config import DeploymentConfig

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
    #: Prefill of the uncached part of the prompt.
    prefill_seconds: float
    #: Decode of the output at the assumed per-sequence speed.
    decode_seconds: float

    @property
    def service_seconds(self) -> float:
        return self.prefill_seconds + self.decode_seconds

    @property
    def requests_per_minute(self) -> float:
        """Throughput while the batch is full (Little's law)."""
        return 60 * self.concurrency / self.service_seconds


def service_times(prompt: float, output: float, a: Assumptions) -> tuple[float, float]:
    """(prefill, decode) seconds of one request: the one place the simulator times a request."""
    prefill = prompt * (1 - a.prefix_cache_hit_rate) / a.prefill_tokens_per_second
    return prefill, output / a.decode_tokens_per_second


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
    #: The configured typical request: its concurrency is ``stacks.capacity.estimate``'s.
    typical: RequestShape
    #: Memory-bandwidth bound at full batch (None: GPU not in GPU_BANDWIDTH_GBPS).
    roofline: Roofline | None
    assumptions: Assumptions

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
        return RequestShape(
            concurrency, *service_times(prompt_tokens, output_tokens, self.assumptions)
        )


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
    typical = RequestShape(
        max(1, cap.concurrency_at_typical_length), *service_times(prompt, output, a)
    )
    inst = INSTANCE_CATALOG[instance_type]
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
    )
