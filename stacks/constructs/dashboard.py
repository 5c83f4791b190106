"""The serving dashboard: traffic, latency, TTFT, TPOT, engine load, caches, GPUs, capacity,
adapters.

Every graph reads a metric of the metrics contract or one SageMaker publishes
(``EndpointRef.metric``, i.e. ``variant_metric``).
SageMaker publishes no instance-count metric for a variant: the count shown is the number of
instances reporting ``CPUUtilization`` each minute (its SampleCount).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from container.serving import metrics_contract as mc
from stacks.constructs.endpoint_ref import EndpointRef
from stacks.constructs.metrics_path import per_gpu_search
from typed_config import VARIANT_NAMES, VariantName

# (title, metric, statistic, unit label); one line per variant.
PER_VARIANT_GRAPHS: tuple[tuple[str, str, str, str], ...] = (
    ("Traffic: invocations", "Invocations", "Sum", "count/min"),
    ("5XX errors", "Invocation5XXErrors", "Sum", "count/min"),
    ("Admission rejections (429)", mc.ADMISSION_REJECTIONS.name, "Sum", "count"),
    ("TTFT P50", mc.TTFT_P50.name, "Average", "ms"),
    ("TTFT P95", mc.TTFT_P95.name, "Average", "ms"),
    ("Time per output token P95", mc.TPOT_P95.name, "Average", "ms"),
    ("Queue depth (waiting requests)", mc.QUEUE_DEPTH.name, "Average", "requests"),
    ("Running sequences", mc.RUNNING_REQUESTS.name, "Average", "sequences"),
    ("KV cache usage", mc.KV_CACHE_USAGE.name, "Average", "%"),
    ("Prefix cache hit rate", mc.PREFIX_CACHE_HIT_RATE.name, "Average", "%"),
    ("GPU utilisation (summed over GPUs)", "GPUUtilization", "Average", "%"),
    ("GPU memory utilisation (summed over GPUs)", "GPUMemoryUtilization", "Average", "%"),
    ("Instances per variant (reporting CPUUtilization)", "CPUUtilization", "SampleCount", "n"),
)
LATENCY_PERCENTILES = ("p50", "p90", "p99")
#: SageMaker's GPU metrics per GPU (enhanced metrics' AcceleratorId dimension): memory and
#: utilisation of each GPU, where the per-variant sums above hide one GPU near its limit.
PER_GPU_GRAPHS: tuple[tuple[str, str], ...] = (
    ("GPU memory utilisation", "GPUMemoryUtilization"),
    ("GPU utilisation", "GPUUtilization"),
)


class ServingDashboard(Construct):
    """``dashboard``: one CloudWatch dashboard for the endpoint; ``widgets`` lists its graphs."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        endpoint: EndpointRef,
        adapter_names: Sequence[str],
        alarms: Sequence[cloudwatch.IAlarm],
        per_gpu_period_seconds: int | None = None,
    ) -> None:
        """``per_gpu_period_seconds``: with SageMaker's enhanced metrics on (their publish
        frequency), one graph per variant and GPU metric with a line per GPU
        (stacks.constructs.metrics_path); None: the per-variant sums only."""
        super().__init__(scope, construct_id)
        self._endpoint = endpoint
        self.widgets: list[cloudwatch.IWidget] = [
            self._latency_graph(),
            *self._per_variant_graphs(),
            *(
                self._per_gpu_graphs(per_gpu_period_seconds)
                if per_gpu_period_seconds is not None
                else []
            ),
            *self._per_adapter_graphs(adapter_names),
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(alarms), width=24),
        ]
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            default_interval=Duration.hours(3),
            widgets=[self.widgets[i : i + 2] for i in range(0, len(self.widgets), 2)],
        )

    def _metric(
        self, variant: VariantName, metric_name: str, stat: str, adapter: str | None = None
    ) -> cloudwatch.Metric:
        """A line of a graph, labelled with its variant, adapter and statistic."""
        label = " ".join(p for p in (variant, adapter, stat) if p)
        return self._endpoint.metric(
            variant, metric_name, statistic=stat, label=label, adapter=adapter
        )

    def _latency_graph(self) -> cloudwatch.GraphWidget:
        """SageMaker's ModelLatency at :data:`LATENCY_PERCENTILES`, a line per variant each."""
        return cloudwatch.GraphWidget(
            title="ModelLatency percentiles (microseconds)",
            left=[
                self._metric(v, "ModelLatency", p)
                for v in VARIANT_NAMES
                for p in LATENCY_PERCENTILES
            ],
            width=12,
        )

    def _per_variant_graphs(self) -> list[cloudwatch.IWidget]:
        """A graph per :data:`PER_VARIANT_GRAPHS` entry, a line per variant."""
        return [
            cloudwatch.GraphWidget(
                title=f"{title} ({unit})",
                left=[self._metric(v, metric_name, stat) for v in VARIANT_NAMES],
                width=12,
            )
            for title, metric_name, stat, unit in PER_VARIANT_GRAPHS
        ]

    def _per_gpu_graphs(self, period_seconds: int) -> list[cloudwatch.IWidget]:
        """A graph per :data:`PER_GPU_GRAPHS` entry and variant, a line per GPU (SageMaker's
        enhanced metrics, published every ``period_seconds``)."""
        return [
            cloudwatch.GraphWidget(
                title=f"{title}, per GPU: {v} (%)",
                left=[
                    cloudwatch.SearchExpression(
                        expression=per_gpu_search(
                            self._endpoint.endpoint_name, v, metric_name, max(60, period_seconds)
                        ),
                        label="",
                    )
                ],
                width=12,
            )
            for title, metric_name in PER_GPU_GRAPHS
            for v in VARIANT_NAMES
        ]

    def _per_adapter_graphs(self, adapter_names: Sequence[str]) -> list[cloudwatch.IWidget]:
        """The adapters' latency and requests, a line per variant and adapter."""
        return [
            cloudwatch.GraphWidget(
                title=f"Per adapter: {adapter_metric}",
                left=[
                    self._metric(v, adapter_metric, stat, adapter=a)
                    for v in VARIANT_NAMES
                    for a in adapter_names
                ],
                width=12,
            )
            for adapter_metric, stat in (
                (mc.ADAPTER_LATENCY_P95.name, "Average"),
                (mc.ADAPTER_REQUESTS.name, "Sum"),
            )
        ]
