"""The one metrics contract shared by the serving container and the CDK stacks.

The container's metrics task writes these metrics as CloudWatch embedded-metric-format
(EMF) log lines; the stacks' alarms, step-scaling policies and dashboard read them. Both sides
import this module, so an alarm can never watch a metric nobody emits.

Standard library only: it is imported by the stacks (``container.serving.metrics_contract``)
and inside the image (``serving.metrics_contract``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: CloudWatch namespace of every metric the container publishes.
NAMESPACE = "VllmServing"

#: Dimension names. Every metric carries EndpointName and VariantName; per-adapter metrics add
#: Adapter. The container learns the first two from ENDPOINT_NAME / VARIANT_NAME (set by the
#: EndpointStack on each variant's Model).
DIM_ENDPOINT = "EndpointName"
DIM_VARIANT = "VariantName"
DIM_ADAPTER = "Adapter"

VARIANT_DIMENSIONS: tuple[str, ...] = (DIM_ENDPOINT, DIM_VARIANT)
ADAPTER_DIMENSIONS: tuple[str, ...] = (DIM_ENDPOINT, DIM_VARIANT, DIM_ADAPTER)


@dataclass(frozen=True)
class Metric:
    """One published metric: its name, CloudWatch unit, dimension set and where it comes from."""

    name: str
    unit: str  # a CloudWatch StandardUnit string ("Count", "Percent", "Milliseconds")
    dimensions: tuple[str, ...]
    source: str


QUEUE_DEPTH = Metric("QueueDepth", "Count", VARIANT_DIMENSIONS, "gauge vllm:num_requests_waiting")
RUNNING_REQUESTS = Metric(
    "RunningRequests", "Count", VARIANT_DIMENSIONS, "gauge vllm:num_requests_running"
)
KV_CACHE_USAGE = Metric(
    "KVCacheUsage", "Percent", VARIANT_DIMENSIONS, "gauge vllm:kv_cache_usage_perc x 100"
)
PREFIX_CACHE_HIT_RATE = Metric(
    "PrefixCacheHitRate",
    "Percent",
    VARIANT_DIMENSIONS,
    "delta vllm:prefix_cache_hits_total / delta vllm:prefix_cache_queries_total x 100",
)
TTFT_P50 = Metric(
    "TimeToFirstTokenP50",
    "Milliseconds",
    VARIANT_DIMENSIONS,
    "p50 of the interval's vllm:time_to_first_token_seconds histogram delta",
)
TTFT_P95 = Metric(
    "TimeToFirstTokenP95",
    "Milliseconds",
    VARIANT_DIMENSIONS,
    "p95 of the interval's vllm:time_to_first_token_seconds histogram delta",
)
QUEUE_TIME_P50 = Metric(
    "QueueTimeP50",
    "Milliseconds",
    VARIANT_DIMENSIONS,
    "p50 of the interval's vllm:request_queue_time_seconds histogram delta",
)
QUEUE_TIME_P95 = Metric(
    "QueueTimeP95",
    "Milliseconds",
    VARIANT_DIMENSIONS,
    "p95 of the interval's vllm:request_queue_time_seconds histogram delta",
)
PREEMPTIONS = Metric("Preemptions", "Count", VARIANT_DIMENSIONS, "delta vllm:num_preemptions_total")
ADMISSION_REJECTIONS = Metric(
    "AdmissionRejections", "Count", VARIANT_DIMENSIONS, "hooks: requests answered 429"
)
BUDGET_TRIMS = Metric(
    "BudgetTrims", "Count", VARIANT_DIMENSIONS, "hooks: conversations trimmed to the context budget"
)
ENGINE_RESTARTS = Metric(
    "EngineRestarts",
    "Count",
    VARIANT_DIMENSIONS,
    "entrypoint: engine deaths (e.g. a CUDA OOM killing EngineCore) restarted in-container",
)
ADAPTER_REQUESTS = Metric(
    "AdapterRequests", "Count", ADAPTER_DIMENSIONS, "hooks: requests served per adapter"
)
ADAPTER_LATENCY_P95 = Metric(
    "AdapterLatencyP95",
    "Milliseconds",
    ADAPTER_DIMENSIONS,
    "hooks: p95 end-to-end latency per adapter over the interval",
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
    PREEMPTIONS,
    ADMISSION_REJECTIONS,
    BUDGET_TRIMS,
    ENGINE_RESTARTS,
    ADAPTER_REQUESTS,
    ADAPTER_LATENCY_P95,
)

BY_NAME: dict[str, Metric] = {m.name: m for m in ALL_METRICS}

# Metrics SageMaker itself publishes for a real-time endpoint (FACTS.md). Alarms may watch these
# or the contract above, nothing else. ApproximateBacklogSizePerInstance is deliberately absent:
# it is published for asynchronous endpoints only.
SAGEMAKER_INVOCATION_NAMESPACE = "AWS/SageMaker"
SAGEMAKER_INVOCATION_METRICS: frozenset[str] = frozenset(
    {
        "Invocations",
        "InvocationsPerInstance",
        "ModelLatency",
        "OverheadLatency",
        "Invocation4XXErrors",
        "Invocation5XXErrors",
        "ConcurrentRequestsPerModel",
        "ModelSetupTime",
    }
)
SAGEMAKER_INSTANCE_NAMESPACE = "/aws/sagemaker/Endpoints"
SAGEMAKER_INSTANCE_METRICS: frozenset[str] = frozenset(
    {
        "CPUUtilization",
        "MemoryUtilization",
        "GPUUtilization",
        "GPUMemoryUtilization",
        "DiskUtilization",
    }
)
