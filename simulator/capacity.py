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

from dataclasses import asdict, dataclass

from simulator.assumptions import Assumptions
from stacks.capacity import estimate, weight_bytes
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
class InstanceModel:
    instance_type: str
    price_per_hour: float
    kv_capacity_tokens: int
    max_num_seqs: int
    admission_limit: int
    gpu_memory_percent: float
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    prefill_seconds: float
    decode_seconds: float
    service_seconds: float
    requests_per_minute: float
    #: Memory-bandwidth bound on per-sequence decode speed at full batch (None: GPU not in table).
    roofline_decode_tokens_per_second: float | None
    roofline_requests_per_minute: float | None
    assumptions: Assumptions

    def at(self, prompt_tokens: float, output_tokens: float) -> tuple[int, float]:
        """(concurrency, service seconds) for requests of this mean shape."""
        return _shape(
            self.kv_capacity_tokens,
            self.max_num_seqs,
            prompt_tokens,
            output_tokens,
            self.assumptions,
        )

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data.pop("assumptions")
        return data


def _shape(
    kv_tokens: int, max_seqs: int, prompt: float, output: float, a: Assumptions
) -> tuple[int, float]:
    conc = max(1, min(int(kv_tokens // (prompt + output)), max_seqs))
    prefill = prompt * (1 - a.prefix_cache_hit_rate) / a.prefill_tokens_per_second
    return conc, prefill + output / a.decode_tokens_per_second


def instance_model(cfg: DeploymentConfig, instance_type: str, a: Assumptions) -> InstanceModel:
    cap = estimate(cfg, instance_type)
    eng = cfg.engine
    prompt, output = eng.typical_prompt_tokens, eng.typical_output_tokens
    conc, service = _shape(cap.kv_capacity_tokens, eng.max_num_seqs, prompt, output, a)
    # estimate() computes the same concurrency; keep them in lockstep.
    assert conc == max(1, cap.concurrency_at_typical_length)
    prefill = prompt * (1 - a.prefix_cache_hit_rate) / a.prefill_tokens_per_second
    inst = INSTANCE_CATALOG[instance_type]
    roof_tps = roof_rpm = None
    bw = GPU_BANDWIDTH_GBPS.get(inst.gpu)
    if bw:
        # One decode step reads every weight once plus the KV cache of every running sequence
        # (on average half-way through its output).
        step_bytes = (
            weight_bytes(cfg.architecture, cfg.model.quantization)
            + conc * (prompt + output / 2) * cap.kv_bytes_per_token
        )
        roof_tps = bw * 1e9 * BANDWIDTH_EFFICIENCY / step_bytes
        roof_rpm = 60 * conc / (prefill + output / roof_tps)
    return InstanceModel(
        instance_type=instance_type,
        price_per_hour=inst.price_per_hour,
        kv_capacity_tokens=cap.kv_capacity_tokens,
        max_num_seqs=eng.max_num_seqs,
        admission_limit=eng.admission_max_inflight,
        gpu_memory_percent=100 * eng.gpu_memory_utilization,
        prompt_tokens=prompt,
        output_tokens=output,
        concurrency=conc,
        prefill_seconds=prefill,
        decode_seconds=output / a.decode_tokens_per_second,
        service_seconds=service,
        requests_per_minute=60 * conc / service,
        roofline_decode_tokens_per_second=roof_tps,
        roofline_requests_per_minute=roof_rpm,
        assumptions=a,
    )
