"""The one metrics contract shared by the serving container and the CDK stacks.

The container's metrics task writes these metrics as CloudWatch embedded-metric-format
(EMF) log lines; the stacks' alarms, step-scaling policies and dashboard read them, and the
simulator models them under the same names. All import this module, so an alarm can never watch
a metric nobody emits. Each metric also names the Prometheus series it is derived from and how
(:class:`Source`): the metrics task derives every metric from that and nothing else.

Standard library only: it is imported by the stacks (``container.serving.metrics_contract``)
and inside the image (``serving.metrics_contract``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: CloudWatch namespace of every metric the container publishes.
NAMESPACE = "VllmServing"

#: Dimension names. Every metric carries EndpointName and VariantName; per-adapter metrics add
#: Adapter. The container learns the first two from ENDPOINT_NAME / VARIANT_NAME (set by the
#: EndpointStack on each variant's Model).
DIM_ENDPOINT = "EndpointName"
DIM_VARIANT = "VariantName"
DIM_ADAPTER = "Adapter"
#: The adapter's version (the config's ``adapters[].version``): per-adapter metrics are also
#: published under this second dimension set, so a version change is visible per adapter while
#: the alarms keep watching the stable (Endpoint, Variant, Adapter) series across versions.
DIM_ADAPTER_VERSION = "AdapterVersion"

VARIANT_DIMENSIONS: tuple[str, ...] = (DIM_ENDPOINT, DIM_VARIANT)
ADAPTER_DIMENSIONS: tuple[str, ...] = (DIM_ENDPOINT, DIM_VARIANT, DIM_ADAPTER)
ADAPTER_VERSION_DIMENSIONS: tuple[str, ...] = (*ADAPTER_DIMENSIONS, DIM_ADAPTER_VERSION)


# --- Prometheus series the metrics task reads from vLLM's /metrics (one scrape) ---------------
#: vLLM V1 engine series (labels model_name, engine; the task sums over them), as vLLM's metrics
#: design lists them (docs/design/metrics.md in vllm-project/vllm, "v1 Metrics").
VLLM_REQUESTS_WAITING = "vllm:num_requests_waiting"
VLLM_REQUESTS_RUNNING = "vllm:num_requests_running"
VLLM_KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"  # 0..1
VLLM_PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
VLLM_PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
VLLM_TIME_TO_FIRST_TOKEN = "vllm:time_to_first_token_seconds"  # histogram
VLLM_QUEUE_TIME = "vllm:request_queue_time_seconds"  # histogram
#: Each finished request's mean time per output token after the first (histogram): vLLM 0.32's
#: ``FinishedRequestStats.mean_time_per_output_token`` = decode time (first to last new token) /
#: (generated tokens - 1), observed once per request when it finishes (vllm/v1/metrics/stats.py,
#: loggers.py). That is TPOT as the SLO (``monitoring.slo_tpot_p95_ms``: a percentile *over
#: requests*) and MLPerf define it. Not ``vllm:inter_token_latency_seconds``: that observes every
#: gap between two tokens, so its percentile is over tokens (long answers weigh more) and one
#: batch stall shows as a tail no user's average stream sees. A request that generated one token
#: observes 0 (vLLM's convention), which pulls the percentile down only where such requests are
#: over 5% of the interval's. Its buckets (vLLM's inter-token ones) have an edge at 0.1 s, the
#: default SLO, so the p95 is interpolated inside (75, 100] or (100, 150] ms around it.
VLLM_TIME_PER_OUTPUT_TOKEN = "vllm:request_time_per_output_token_seconds"
#: The hooks' own series, registered in the same process (container/serving/counters.py;
#: prometheus_client adds ``_total`` to a counter's name).
HOOKS_ADMISSION_REJECTIONS = "serving_admission_rejections_total"
HOOKS_BUDGET_TRIMS = "serving_budget_trims_total"
HOOKS_ADAPTER_REQUESTS = "serving_adapter_requests_total"  # label adapter
HOOKS_ADAPTER_LATENCY = "serving_adapter_latency_seconds"  # histogram, label adapter
#: The label per-adapter series carry.
ADAPTER_LABEL = "adapter"

SECONDS_TO_MS = 1000.0
FRACTION_TO_PERCENT = 100.0


@dataclass(frozen=True)
class Source:
    """How the metrics task derives a metric from this interval's scrape and the previous one.

    - ``gauge``: the series' current value x ``scale``.
    - ``delta``: the counter's increase over the interval x ``scale``.
    - ``ratio``: the increase of ``series`` over the increase of ``per`` x ``scale`` (nothing
      when ``per`` did not move).
    - ``quantile``: the ``quantile`` of the observations the histogram gained over the
      interval x ``scale`` (nothing when it gained none).
    - ``entrypoint``: not scraped; the entrypoint counts it itself.
    """

    kind: Literal["gauge", "delta", "ratio", "quantile", "entrypoint"]
    series: str = ""
    scale: float = 1.0
    per: str = ""
    quantile: float = 0.0


@dataclass(frozen=True)
class Metric:
    """One published metric: its name, CloudWatch unit, dimension set and where it comes from."""

    name: str
    unit: str  # a CloudWatch StandardUnit string ("Count", "Percent", "Milliseconds")
    dimensions: tuple[str, ...]
    source: Source


def _count(name: str, source: Source, dimensions: tuple[str, ...] = VARIANT_DIMENSIONS) -> Metric:
    return Metric(name, "Count", dimensions, source)


def _percentile_ms(
    name: str, series: str, quantile: float, dimensions: tuple[str, ...] = VARIANT_DIMENSIONS
) -> Metric:
    return Metric(
        name,
        "Milliseconds",
        dimensions,
        Source("quantile", series, SECONDS_TO_MS, quantile=quantile),
    )


QUEUE_DEPTH = _count("QueueDepth", Source("gauge", VLLM_REQUESTS_WAITING))
RUNNING_REQUESTS = _count("RunningRequests", Source("gauge", VLLM_REQUESTS_RUNNING))
KV_CACHE_USAGE = Metric(
    "KVCacheUsage",
    "Percent",
    VARIANT_DIMENSIONS,
    Source("gauge", VLLM_KV_CACHE_USAGE, FRACTION_TO_PERCENT),
)
PREFIX_CACHE_HIT_RATE = Metric(
    "PrefixCacheHitRate",
    "Percent",
    VARIANT_DIMENSIONS,
    Source("ratio", VLLM_PREFIX_CACHE_HITS, FRACTION_TO_PERCENT, per=VLLM_PREFIX_CACHE_QUERIES),
)
TTFT_P50 = _percentile_ms("TimeToFirstTokenP50", VLLM_TIME_TO_FIRST_TOKEN, 0.5)
TTFT_P95 = _percentile_ms("TimeToFirstTokenP95", VLLM_TIME_TO_FIRST_TOKEN, 0.95)
QUEUE_TIME_P50 = _percentile_ms("QueueTimeP50", VLLM_QUEUE_TIME, 0.5)
QUEUE_TIME_P95 = _percentile_ms("QueueTimeP95", VLLM_QUEUE_TIME, 0.95)
#: p95 over the interval's finished requests of each one's time per output token after the
#: first (TPOT); the SLO alarm ``slo-tpot-p95`` reads it.
TPOT_P95 = _percentile_ms("TimePerOutputTokenP95", VLLM_TIME_PER_OUTPUT_TOKEN, 0.95)
PREEMPTIONS = _count("Preemptions", Source("delta", VLLM_PREEMPTIONS))
#: Requests answered 429 by the admission hook.
ADMISSION_REJECTIONS = _count("AdmissionRejections", Source("delta", HOOKS_ADMISSION_REJECTIONS))
#: Conversations the shaping hook trimmed to the context budget.
BUDGET_TRIMS = _count("BudgetTrims", Source("delta", HOOKS_BUDGET_TRIMS))
#: Engine deaths (e.g. a CUDA OOM killing EngineCore) the entrypoint restarted in-container.
ENGINE_RESTARTS = _count("EngineRestarts", Source("entrypoint"))
#: Requests served per adapter.
ADAPTER_REQUESTS = _count(
    "AdapterRequests", Source("delta", HOOKS_ADAPTER_REQUESTS), ADAPTER_DIMENSIONS
)
#: p95 end-to-end latency per adapter over the interval, measured in the shaping hook.
ADAPTER_LATENCY_P95 = _percentile_ms(
    "AdapterLatencyP95", HOOKS_ADAPTER_LATENCY, 0.95, ADAPTER_DIMENSIONS
)

ALL_METRICS: tuple[Metric, ...] = (
    QUEUE_DEPTH,
    RUNNING_REQUESTS,
    KV_CACHE_USAGE,
    PREFIX_CACHE_HIT_RATE,
    TTFT_P50,
    TTFT_P95,
    QUEUE_TIME_P50,
    QUEUE_TIME_P95,
    TPOT_P95,
    PREEMPTIONS,
    ADMISSION_REJECTIONS,
    BUDGET_TRIMS,
    ENGINE_RESTARTS,
    ADAPTER_REQUESTS,
    ADAPTER_LATENCY_P95,
)

BY_NAME: dict[str, Metric] = {m.name: m for m in ALL_METRICS}

# Metrics SageMaker itself publishes for a real-time endpoint ("Amazon SageMaker AI metrics in
# Amazon CloudWatch", https://docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html).
# Alarms may watch these or the contract above, nothing else. ApproximateBacklogSizePerInstance is
# deliberately absent: it is published for asynchronous endpoints only.
SAGEMAKER_INVOCATION_NAMESPACE = "AWS/SageMaker"
INVOCATIONS = "Invocations"
INVOCATIONS_PER_INSTANCE = "InvocationsPerInstance"
INVOCATION_4XX_ERRORS = "Invocation4XXErrors"
INVOCATION_5XX_ERRORS = "Invocation5XXErrors"
#: Published at 10-second resolution (the high-resolution metric target tracking can use).
CONCURRENT_REQUESTS_PER_MODEL = "ConcurrentRequestsPerModel"
SAGEMAKER_INVOCATION_METRICS: frozenset[str] = frozenset(
    {
        INVOCATIONS,
        INVOCATIONS_PER_INSTANCE,
        "ModelLatency",
        "OverheadLatency",
        INVOCATION_4XX_ERRORS,
        INVOCATION_5XX_ERRORS,
        CONCURRENT_REQUESTS_PER_MODEL,
        "ModelSetupTime",
    }
)
SAGEMAKER_INSTANCE_NAMESPACE = "/aws/sagemaker/Endpoints"
GPU_UTILIZATION = "GPUUtilization"
GPU_MEMORY_UTILIZATION = "GPUMemoryUtilization"
SAGEMAKER_INSTANCE_METRICS: frozenset[str] = frozenset(
    {
        "CPUUtilization",
        "MemoryUtilization",
        GPU_UTILIZATION,
        GPU_MEMORY_UTILIZATION,
        "DiskUtilization",
    }
)
