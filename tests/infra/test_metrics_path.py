"""One metrics path, set explicitly (issue 21 item 3): the EndpointConfig's MetricsConfig carries
every field (never AWS's date-dependent default, which turns SageMaker's second /metrics scrape
on for configs created after 2026-06-17), every alarm and scaling policy reads a classic metric
of the container's EMF namespace or SageMaker's, and the dashboard graphs each GPU."""

from __future__ import annotations

import json
from typing import Any

import pytest

from container.serving import metrics_contract as mc
from tests.infra.conftest import assert_names_yaml_path, parse, synth_templates

CLASSIC_NAMESPACES = {
    mc.NAMESPACE,
    mc.SAGEMAKER_INVOCATION_NAMESPACE,
    mc.SAGEMAKER_INSTANCE_NAMESPACE,
}


def _metrics_config(template) -> dict[str, Any]:
    """The endpoint configs' MetricsConfig: the serving config's and, with a shadow stage, the
    shadow config's, which must be the same."""
    found = [
        c["Properties"]["MetricsConfig"]
        for c in template.find_resources("AWS::SageMaker::EndpointConfig").values()
    ]
    assert found and all(m == found[0] for m in found), found
    return found[0]


def _dashboard_body(template) -> str:
    (dash,) = template.find_resources("AWS::CloudWatch::Dashboard").values()
    return json.dumps(dash["Properties"]["DashboardBody"])


def test_prod_sets_every_metrics_config_field_explicitly(prod_templates) -> None:
    assert _metrics_config(prod_templates["endpoint"]) == {
        "EnableDetailedObservability": False,
        "EnableEnhancedMetrics": True,
        "MetricPublishFrequencyInSeconds": 60,
    }


def test_every_alarm_and_scaling_metric_is_on_the_classic_path(prod_templates) -> None:
    """Nothing reads SageMaker's OTel metrics (PromQL only): alarms, the step policies' alarms
    and target tracking all name a classic namespace (or metric math over one)."""
    template = prod_templates["endpoint"]
    namespaces = set()
    for alarm in template.find_resources("AWS::CloudWatch::Alarm").values():
        props = alarm["Properties"]
        assert "PromQLCriteria" not in props
        if "Namespace" in props:
            namespaces.add(props["Namespace"])
        for query in props.get("Metrics", []):
            stat = query.get("MetricStat")
            if stat:
                namespaces.add(stat["Metric"]["Namespace"])
    for policy in template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").values():
        spec = (
            policy["Properties"]
            .get("TargetTrackingScalingPolicyConfiguration", {})
            .get("CustomizedMetricSpecification")
        )
        if spec:
            for m in spec.get("Metrics", [spec]):
                ns = m.get("Namespace") or m.get("MetricStat", {}).get("Metric", {}).get(
                    "Namespace"
                )
                if ns:
                    namespaces.add(ns)
    assert namespaces and namespaces <= CLASSIC_NAMESPACES, namespaces


def test_the_dashboard_graphs_memory_and_utilisation_of_each_gpu(prod_templates) -> None:
    body = _dashboard_body(prod_templates["endpoint"])
    for variant in ("primary", "canary"):
        for metric in ("GPUMemoryUtilization", "GPUUtilization"):
            assert (
                f'MetricName=\\\\\\"{metric}\\\\\\" EndpointName=\\\\\\"mangaassist-vllm-prod'
                f'\\\\\\" VariantName=\\\\\\"{variant}\\\\\\" AcceleratorId' in body
            ), (variant, metric)


def test_detailed_observability_is_a_choice_the_template_carries(prod_raw) -> None:
    prod_raw.setdefault("monitoring", {})["metrics_path"] = {
        "detailed_observability": True,
        "enhanced_metrics": False,
        "publish_frequency_seconds": 10,
    }
    templates = synth_templates(parse(prod_raw))
    assert _metrics_config(templates["endpoint"]) == {
        "EnableDetailedObservability": True,
        "EnableEnhancedMetrics": False,
        "MetricPublishFrequencyInSeconds": 10,
    }
    # without enhanced metrics there is no AcceleratorId dimension to graph
    assert "AcceleratorId" not in _dashboard_body(templates["endpoint"])


@pytest.mark.parametrize("frequency", [0, 5, 45, 600])
def test_a_publish_frequency_aws_refuses_fails_naming_the_field(prod_raw, frequency) -> None:
    prod_raw.setdefault("monitoring", {})["metrics_path"] = {"publish_frequency_seconds": frequency}
    assert_names_yaml_path(prod_raw, "monitoring.metrics_path.publish_frequency_seconds", "10")
