"""One metrics path for the endpoint, set explicitly: the EndpointConfig's ``MetricsConfig``.

What AWS documents (SageMaker API reference, MetricsConfig; CloudFormation
AWS::SageMaker::EndpointConfig MetricsConfig; SageMaker developer guide, "Getting started with
detailed observability" and "Amazon SageMaker AI enhanced metrics for inference endpoints";
CloudWatch user guide, "SageMaker AI Insights OpenTelemetry metrics reference", "PromQL alarms",
"Alarm actions", "OTel metrics pricing and storage"):

- ``EnableDetailedObservability`` defaults to true for endpoint configs created after
  2026-06-17 (false for older ones unless set). SageMaker's collector then scrapes the
  container's Prometheus endpoint (``/metrics`` on port 8080 for a bring-your-own container)
  plus per-GPU (DCGM) and host metrics, and publishes them **as OpenTelemetry metrics through
  OTLP**: "These are not Prometheus metrics ... queryable using PromQL syntax", with labels such
  as ``aws.sagemaker.endpoint.name`` and ``aws.sagemaker.variant.name``. They are not classic
  metrics with a namespace and dimensions.
- Who can read them: a CloudWatch **PromQL alarm** (an instant query; every returned series is a
  contributor; a pending and a recovery period, no threshold and no statistic). Application
  Auto Scaling cannot: target tracking's customized metric names a classic namespace, metric and
  dimensions (or metric math over them), and a step policy's steps are offsets from its alarm's
  threshold, which a PromQL alarm does not have. For the blue/green AutoRollbackConfiguration,
  no page read documents a PromQL alarm (its examples are classic metric alarms).
- Resolution: ``MetricPublishFrequencyInSeconds`` 10, 30, 60, 120, 180, 240 or 300 (default 60).
  With ``EnableEnhancedMetrics`` false it applies to utilisation metrics only (invocation
  metrics stay at 60 s); with it true, to both.
- Cost: OTel metrics are billed per GB ingested with 15 months of storage and no per-metric
  charge (PromQL querying and OTLP ingestion were announced as a free public preview; check
  CloudWatch pricing before relying on either). The pages read give no per-instance-month figure
  for the collector, and none for enhanced metrics.

So this product keeps its own path: the entrypoint scrapes vLLM's /metrics and prints EMF lines
that CloudWatch turns into classic metrics (container/serving/metrics_contract.py), which the
alarms, the step policies and the rollback alarms read. Detailed
observability is set **false** explicitly: left to AWS's default, every new EndpointConfig would
scrape /metrics a second time into a second store that none of the alarms or policies reads.
Enhanced metrics are set **true**: they add the ``InstanceId`` and ``AcceleratorId`` dimensions
to SageMaker's classic utilisation metrics, which is where the dashboard's per-GPU memory and
utilisation graphs come from (``per_gpu_search``). A config may turn detailed observability on
(``monitoring.metrics_path.detailed_observability``), e.g. for SageMaker AI Insights; nothing
the product alarms on moves to it.
"""

from __future__ import annotations

from aws_cdk import aws_sagemaker as sagemaker

from container.serving import metrics_contract as mc
from typed_config import MetricsPath


def metrics_config(path: MetricsPath) -> sagemaker.CfnEndpointConfig.MetricsConfigProperty:
    """The EndpointConfig's MetricsConfig, every field set (never AWS's date-dependent default)."""
    return sagemaker.CfnEndpointConfig.MetricsConfigProperty(
        enable_detailed_observability=path.detailed_observability,
        enable_enhanced_metrics=path.enhanced_metrics,
        metric_publish_frequency_in_seconds=path.publish_frequency_seconds,
    )


def per_gpu_search(endpoint_name: str, variant: str, metric_name: str, period: int) -> str:
    """A CloudWatch SEARCH expression for one line per GPU of ``variant``: enhanced metrics add
    ``InstanceId`` and ``AcceleratorId`` to SageMaker's GPU metrics, and instance ids are known
    only at run time, so a dashboard finds them by search. The bare term ``AcceleratorId``
    matches the dimension's name (CloudWatch user guide, "CloudWatch search expression
    syntax"), which keeps the variant-level series (no AcceleratorId) out."""
    query = (
        f'Namespace="{mc.SAGEMAKER_INSTANCE_NAMESPACE}" MetricName="{metric_name}" '
        f'EndpointName="{endpoint_name}" VariantName="{variant}" AcceleratorId'
    )
    return f"SEARCH('{query}', 'Average', {period})"
