"""CloudWatch metrics of one variant, looked up by name in the one metrics contract.

Scaling, alarms and the dashboard build every metric here, so each one watches a metric the
serving container publishes (``container/serving/metrics_contract.py``) or SageMaker publishes for
a real-time endpoint; any other name raises ``KeyError`` at synth.
"""

from __future__ import annotations

from typing import TypedDict

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from container.serving import metrics_contract as mc
from typed_config import VariantName

#: ModelLatency and OverheadLatency are published in microseconds.
MICROSECONDS_PER_MS = 1000


class MetricOptions(TypedDict, total=False):
    """The keyword options of :func:`variant_metric`, for callers that pass them on."""

    statistic: str
    period: Duration | None
    adapter: str | None
    label: str | None


def namespace_of(name: str) -> str:
    """The namespace a metric is published in; ``KeyError`` for a name nobody publishes."""
    if name in mc.BY_NAME:
        return mc.NAMESPACE
    if name in mc.SAGEMAKER_INVOCATION_METRICS:
        return mc.SAGEMAKER_INVOCATION_NAMESPACE
    if name in mc.SAGEMAKER_INSTANCE_METRICS:
        return mc.SAGEMAKER_INSTANCE_NAMESPACE
    raise KeyError(f"{name!r} is neither in the metrics contract nor published by SageMaker")


def variant_metric(
    endpoint_name: str,
    variant: VariantName,
    name: str,
    *,
    statistic: str = "Average",
    period: Duration | None = None,
    adapter: str | None = None,
    label: str | None = None,
) -> cloudwatch.Metric:
    """``name`` for one variant (and one adapter, for the contract's per-adapter metrics)."""
    dims = {mc.DIM_ENDPOINT: endpoint_name, mc.DIM_VARIANT: variant}
    contract = mc.BY_NAME.get(name)
    wants_adapter = contract is not None and mc.DIM_ADAPTER in contract.dimensions
    if wants_adapter != (adapter is not None):
        raise ValueError(
            f"{name}: the adapter dimension is {'required' if wants_adapter else 'not published'}"
        )
    if adapter is not None:
        dims[mc.DIM_ADAPTER] = adapter
    return cloudwatch.Metric(
        namespace=namespace_of(name),
        metric_name=name,
        dimensions_map=dims,
        statistic=statistic,
        period=period or Duration.minutes(1),
        label=label,
    )
