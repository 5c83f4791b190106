"""What the simulated fleet publishes, under the names the stacks' alarms and policies read.

The names come from container/serving/metrics_contract.py: the container's own metrics and the
ones SageMaker publishes. Values are per in-service instance unless counted for the variant:
``ConcurrentRequestsPerModel`` (running + waiting), ``RunningRequests``, ``QueueDepth``
(waiting), ``KVCacheUsage`` (running sequences half-way through their output / KV capacity),
``GPUUtilization`` (running / C), ``GPUMemoryUtilization`` (vLLM preallocates
``gpu_memory_utilization`` of the GPU at start, so this is that fraction whatever the load),
``InvocationsPerInstance`` and ``Invocations`` (arrivals), ``Invocation4XXErrors`` and
``AdmissionRejections`` (429s), ``QueueTimeP50/P95`` and ``TimeToFirstTokenP50/P95`` (queue wait,
plus prefill for TTFT). Metric publication delay is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from container.serving import metrics_contract as mc
from simulator.capacity import InstanceModel

#: Metrics counted per minute (their per-tick value is a per-minute rate).
COUNT_METRICS = {
    mc.INVOCATIONS_PER_INSTANCE,
    mc.INVOCATIONS,
    mc.INVOCATION_4XX_ERRORS,
    mc.ADMISSION_REJECTIONS.name,
}
QUEUE_TIME = {mc.QUEUE_TIME_P50.name, mc.QUEUE_TIME_P95.name}
TIME_TO_FIRST_TOKEN = {mc.TTFT_P50.name, mc.TTFT_P95.name}
SUPPORTED_METRICS = (
    COUNT_METRICS
    | QUEUE_TIME
    | TIME_TO_FIRST_TOKEN
    | {
        mc.CONCURRENT_REQUESTS_PER_MODEL,
        mc.RUNNING_REQUESTS.name,
        mc.QUEUE_DEPTH.name,
        mc.KV_CACHE_USAGE.name,
        mc.GPU_UTILIZATION,
        mc.GPU_MEMORY_UTILIZATION,
    }
)
#: SageMaker publishes ConcurrentRequestsPerModel every 10 s, its other metrics every minute.
HIGH_RESOLUTION_SECONDS = 10.0
MINUTE_SECONDS = 60.0


@dataclass
class Series:
    """Per-tick records of one variant's run."""

    in_service: list[int] = field(default_factory=list)
    launched: list[int] = field(default_factory=list)  # in service + starting (billed)
    desired: list[int] = field(default_factory=list)
    min_cap: list[int] = field(default_factory=list)
    max_cap: list[int] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    served: list[float] = field(default_factory=list)
    rejected: list[float] = field(default_factory=list)
    running: list[float] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)
    wait_s: list[float] = field(default_factory=list)
    #: Time to first token and end-to-end of a request arriving in the tick (wait + speed model).
    ttft_s: list[float] = field(default_factory=list)
    e2e_s: list[float] = field(default_factory=list)
    capacity_rpm: list[float] = field(default_factory=list)
    conc: list[int] = field(default_factory=list)
    service_s: list[float] = field(default_factory=list)
    prefill_s: list[float] = field(default_factory=list)
    kv_per_seq: list[float] = field(default_factory=list)

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v, dtype=float) for k, v in vars(self).items()}


def statistic_of(values: list[float], statistic: str, sum_scale: float) -> float:
    """CloudWatch ``statistic`` of a period's datapoints (``Sum``: datapoints x ``sum_scale``)."""
    if statistic == "Average":
        return sum(values) / len(values)
    if statistic == "Maximum":
        return max(values)
    if statistic == "Minimum":
        return min(values)
    if statistic == "Sum":
        return sum(values) / len(values) * sum_scale
    return float(np.percentile(values, float(statistic[1:])))  # p50, p90, p95, p99


@dataclass
class FleetMetrics:
    """The metrics a variant's fleet publishes, read from its per-tick records."""

    series: Series
    instance: InstanceModel
    tick_seconds: int
    #: How often the container publishes its own metrics (engine.metrics_interval_seconds).
    container_interval_seconds: float

    def value(self, name: str, i: int) -> float | None:
        """``name`` at tick ``i`` (None: no instance in service, so no datapoint)."""
        s, n = self.series, self.series.in_service[i]
        if n == 0:
            return None
        per_min = 60 / self.tick_seconds
        if name == mc.CONCURRENT_REQUESTS_PER_MODEL:
            return (s.running[i] + s.waiting[i]) / n
        if name == mc.RUNNING_REQUESTS.name:
            return s.running[i] / n
        if name == mc.QUEUE_DEPTH.name:
            return s.waiting[i] / n
        if name == mc.KV_CACHE_USAGE.name:
            return 100 * s.running[i] / n * s.kv_per_seq[i] / self.instance.kv_capacity_tokens
        if name == mc.GPU_UTILIZATION:
            return 100 * min(1.0, s.running[i] / (n * s.conc[i]))
        if name == mc.GPU_MEMORY_UTILIZATION:
            return self.instance.gpu_memory_percent
        if name == mc.INVOCATIONS_PER_INSTANCE:
            return s.arrivals[i] * per_min / n
        if name == mc.INVOCATIONS:
            return s.arrivals[i] * per_min
        if name in (mc.INVOCATION_4XX_ERRORS, mc.ADMISSION_REJECTIONS.name):
            return s.rejected[i] * per_min
        if name in QUEUE_TIME:
            return 1000 * s.wait_s[i]
        if name in TIME_TO_FIRST_TOKEN:
            return 1000 * (s.wait_s[i] + s.prefill_s[i])
        raise ValueError(f"unsupported metric {name!r}")  # the engine checks SUPPORTED_METRICS

    def sample_seconds(self, name: str) -> float:
        """How often ``name`` gets a datapoint."""
        if name in COUNT_METRICS:
            return MINUTE_SECONDS
        if name == mc.CONCURRENT_REQUESTS_PER_MODEL:
            return HIGH_RESOLUTION_SECONDS
        if name in mc.SAGEMAKER_INSTANCE_METRICS:
            return MINUTE_SECONDS
        return self.container_interval_seconds

    def aggregate(self, name: str, statistic: str, last: int, ticks: int) -> float | None:
        """``statistic`` of ``name`` over the ``ticks`` ticks ending at tick ``last``."""
        values = [self.value(name, j) for j in range(last - ticks + 1, last + 1)]
        if any(v is None for v in values):
            return None  # missing data: the alarm keeps its state
        sum_scale = max(1.0, ticks * self.tick_seconds / self.sample_seconds(name))
        return statistic_of([v for v in values if v is not None], statistic, sum_scale)
