"""Constructs built alone from the config sections they take (no prod.yaml copy), and the
endpoint's grants and metrics (EndpointRef)."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk.assertions import Match, Template

from container.serving import metrics_contract as mc
from stacks.constructs.endpoint import ServingEndpoint
from stacks.constructs.endpoint_ref import EndpointRef
from stacks.constructs.image import ServingImage
from stacks.constructs.monitoring import Monitoring
from stacks.constructs.rollback_alarms import RollbackAlarms
from typed_config import (
    DeploymentPolicy,
    ImageConfig,
    MonitoringConfig,
    TrafficShift,
    VariantConfig,
    Variants,
    catalog,
)

NAME = "Shop-Chat"  # mixed case: SageMaker lowercases endpoint names in ARNs


def bare_stack() -> cdk.Stack:
    return cdk.Stack(
        cdk.App(), "T", env=cdk.Environment(account="123456789012", region="eu-west-1")
    )


def alarms_of(stack: cdk.Stack) -> dict[str, dict[str, Any]]:
    return {
        r["Properties"]["AlarmDescription"]: r["Properties"]
        for r in Template.from_stack(stack).find_resources("AWS::CloudWatch::Alarm").values()
    }


def test_rollback_alarms_take_their_thresholds_from_the_deployment_policy() -> None:
    stack = bare_stack()
    policy = DeploymentPolicy(rollback_5xx_errors_per_minute=3, rollback_model_latency_p99_ms=1500)
    RollbackAlarms(stack, "Rollback", endpoint=EndpointRef.of(stack, NAME), policy=policy)
    alarms = alarms_of(stack)
    assert len(alarms) == 4
    latency = alarms[
        "canary: ModelLatency p99 above 1500 ms in 3 of 5 minutes (rolls back a deployment)"
    ]
    assert (latency["Threshold"], latency["ExtendedStatistic"]) == (1_500_000, "p99")
    assert (latency["EvaluationPeriods"], latency["DatapointsToAlarm"]) == (5, 3)
    errors = alarms[
        "primary: more than 3 5XX errors a minute in 2 of 3 minutes (rolls back a deployment)"
    ]
    assert (errors["Threshold"], errors["Statistic"], errors["Period"]) == (3, "Sum", 60)
    assert errors["Dimensions"] == [
        {"Name": mc.DIM_ENDPOINT, "Value": NAME}, {"Name": mc.DIM_VARIANT, "Value": "primary"}
    ]  # fmt: skip


def test_monitoring_takes_thresholds_adapters_interval_and_emails_alone() -> None:
    stack = bare_stack()
    endpoint = EndpointRef.of(stack, NAME)
    key = kms.Key(stack, "Key")
    Monitoring(
        stack,
        "Monitoring",
        endpoint=endpoint,
        thresholds=MonitoringConfig(ttft_p95_ms=750),
        adapter_names=["only_one"],
        metrics_interval_seconds=120,
        emails=["oncall@example.com"],
        rollback_alarms=RollbackAlarms(
            stack, "Rollback", endpoint=endpoint, policy=DeploymentPolicy()
        ),
        key=key,
    )
    alarms = {d.split(":")[0]: a for d, a in alarms_of(stack).items()}
    ttft = alarms["[WARNING] canary/high-ttft"]
    # 5 minutes at the container's 2-minute publishing interval: 2 periods of 120 s
    assert (ttft["Threshold"], ttft["Period"], ttft["EvaluationPeriods"]) == (750, 120, 2)
    adapters = [d for d in alarms if "adapter-latency-" in d]
    assert sorted(adapters) == [
        f"[WARNING] {v}/adapter-latency-only_one" for v in ("canary", "primary")
    ]
    Template.from_stack(stack).has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "oncall@example.com"}
    )


def serving_endpoint(
    stack: cdk.Stack, *, instance_type: str = "ml.g5.xlarge", resets: tuple[Any, ...] = ()
) -> ServingEndpoint:
    variants = Variants(
        primary=VariantConfig(
            instance_type=instance_type, initial_instance_count=2, initial_weight=90
        ),
        canary=VariantConfig(
            instance_type=instance_type, initial_instance_count=2, initial_weight=10
        ),
    )
    return ServingEndpoint(
        stack,
        "Serving",
        endpoint_name=NAME,
        variants=variants,
        deployment=DeploymentPolicy(traffic_shift=TrafficShift(type="all_at_once")),
        environments={"primary": {"WHO": "primary"}, "canary": {"WHO": "canary"}},
        image_uris={"primary": "repo:1", "canary": "repo:2"},
        resets=resets,
        rollback_alarms=RollbackAlarms(
            stack, "Rollback", endpoint=EndpointRef.of(stack, NAME), policy=DeploymentPolicy()
        ).all,
        volume_key=kms.Key(stack, "Key"),
    )


def test_endpoint_takes_variants_deployment_environments_and_resets_alone() -> None:
    stack = bare_stack()
    serving_endpoint(stack, resets=("DesiredWeight",))
    tpl = Template.from_stack(stack)
    containers = {
        m["Properties"]["PrimaryContainer"]["Environment"]["WHO"]: m["Properties"][
            "PrimaryContainer"
        ]["Image"]
        for m in tpl.find_resources("AWS::SageMaker::Model").values()
    }
    assert containers == {"primary": "repo:1", "canary": "repo:2"}
    tpl.has_resource_properties(
        "AWS::SageMaker::Endpoint",
        {
            "EndpointName": NAME,
            "ExcludeRetainedVariantProperties": [{"VariantPropertyType": "DesiredWeight"}],
            "DeploymentConfig": Match.object_like(
                {
                    "BlueGreenUpdatePolicy": Match.object_like(
                        {
                            "TrafficRoutingConfiguration": {
                                "Type": "ALL_AT_ONCE",
                                "WaitIntervalInSeconds": 600,
                            }
                        }
                    )
                }
            ),
        },
    )


def test_volume_kms_key_is_set_when_instances_have_ebs_volumes(monkeypatch) -> None:
    g5 = catalog.INSTANCE_CATALOG["ml.g5.xlarge"]
    monkeypatch.setitem(
        catalog.INSTANCE_CATALOG, "ml.g5.xlarge", dataclasses.replace(g5, local_nvme=False)
    )
    stack = bare_stack()
    serving_endpoint(stack)
    Template.from_stack(stack).has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {"KmsKeyId": {"Fn::GetAtt": [Match.string_like_regexp("Key"), "Arn"]}},
    )


@pytest.mark.parametrize("mode", ["tag", "build"])
def test_image_takes_its_image_section_alone(mode: str) -> None:
    stack = bare_stack()
    config = (
        ImageConfig(mode="tag", tag="v1", keep_last_images=5)
        if mode == "tag"
        else ImageConfig(keep_last_images=5)
    )
    image = ServingImage(
        stack,
        "Image",
        image=config,
        build_args={"MODEL_ARTIFACT_VERSION": "m-0123456789abcdef"},
        name_prefix="shop-dev",
    )
    tpl = Template.from_stack(stack)
    tpl.has_resource_properties(
        "AWS::ECR::Repository",
        {
            "ImageScanningConfiguration": {"ScanOnPush": True},
            "ImageTagMutability": "IMMUTABLE_WITH_EXCLUSION",
            # the build cache is the one tag a push may replace (tools/push_image.py)
            "ImageTagMutabilityExclusionFilters": [
                {
                    "ImageTagMutabilityExclusionFilterType": "WILDCARD",
                    "ImageTagMutabilityExclusionFilterValue": "buildcache",
                }
            ],
            "EncryptionConfiguration": {"EncryptionType": "KMS", "KmsKey": Match.any_value()},
        },
    )
    [repo] = tpl.find_resources("AWS::ECR::Repository").values()
    rules = json.loads(repo["Properties"]["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
    assert rules[-1]["selection"]["countNumber"] == 5
    tpl.has_resource_properties(
        "AWS::KMS::Key", {"Description": "shop-dev serving image repository encryption"}
    )
    assert (image.asset is None) == (mode == "tag")
    assert "v2" in stack.resolve(image.image_uri("v2"))["Fn::Join"][1][-1]


def policy_statements(stack: cdk.Stack) -> list[dict[str, Any]]:
    [policy] = Template.from_stack(stack).find_resources("AWS::IAM::Policy").values()
    statements: list[dict[str, Any]] = policy["Properties"]["PolicyDocument"]["Statement"]
    return statements


def test_grant_invoke_allows_describe_and_invoke_on_this_endpoint_only() -> None:
    stack = bare_stack()
    role = iam.Role(stack, "Caller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    EndpointRef.of(stack, NAME).grant_invoke(role)
    [statement] = policy_statements(stack)
    assert statement["Action"] == [
        "sagemaker:DescribeEndpoint",
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithResponseStream",  # endpoint_ref.grant_invoke says why
    ]
    assert statement["Resource"]["Fn::Join"][1][-1].endswith(":endpoint/shop-chat")
    assert "Sid" not in statement


def test_grant_names_its_statement_when_asked() -> None:
    stack = bare_stack()
    role = iam.Role(stack, "Caller", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    EndpointRef.of(stack, NAME).grant(role, "sagemaker:DescribeEndpoint", sid="Endpoint")
    [statement] = policy_statements(stack)
    assert (statement["Sid"], statement["Action"]) == ("Endpoint", "sagemaker:DescribeEndpoint")


def test_endpoint_metrics_are_per_variant_and_refuse_unpublished_names() -> None:
    stack = bare_stack()
    endpoint = EndpointRef.of(stack, NAME)
    latency = endpoint.metric_model_latency("canary", "p99")
    assert (latency.namespace, latency.metric_name, latency.statistic) == (
        "AWS/SageMaker",
        "ModelLatency",
        "p99",
    )
    assert latency.dimensions == {mc.DIM_ENDPOINT: NAME, mc.DIM_VARIANT: "canary"}
    with pytest.raises(KeyError, match="GPUTemperature"):
        endpoint.metric("primary", "GPUTemperature")


def test_image_lifecycle_never_expires_a_tag_a_variant_runs() -> None:
    """ "Keep the last N of any tag" could expire the tag a variant runs; scale-out and instance
    replacement would then fail to pull it. Each in-use tag has a rule of its own ahead of it
    (stacks.constructs.image.lifecycle_rules cites ECR's evaluation order)."""
    stack = bare_stack()
    ServingImage(
        stack, "Image", image=ImageConfig(mode="tag", tag="abc123", keep_last_images=5),
        build_args={}, name_prefix="shop-dev", in_use_tags=["abc123", "def456", "abc123"],
    )  # fmt: skip
    [repo] = Template.from_stack(stack).find_resources("AWS::ECR::Repository").values()
    rules = json.loads(repo["Properties"]["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
    assert [r["rulePriority"] for r in rules] == [1, 2, 3, 4, 5, 6]
    # the model-prep job's images (tools/prepare_model.py) have a rule of their own, and the
    # build cache (tools/push_image.py) is never expired by "keep the last N"
    assert rules[1]["selection"]["tagPatternList"] == ["model-prep-*"]
    assert rules[2]["selection"]["tagPatternList"] == ["buildcache"]
    protected = [r["selection"] for r in rules[3:5]]
    assert [p["tagPatternList"] for p in protected] == [["abc123"], ["def456"]]
    assert all(p["tagStatus"] == "tagged" and p["countNumber"] == 9999 for p in protected)
    assert rules[-1]["selection"]["tagStatus"] == "any"  # ECR: the `any` rule comes last
    assert rules[-1]["selection"]["countNumber"] == 5


def test_the_image_stack_protects_every_tag_the_config_runs(prod_raw) -> None:  # type: ignore[no-untyped-def]
    from .conftest import parse, synth_templates

    raw = copy.deepcopy(prod_raw)
    raw["image"] = {**raw["image"], "mode": "tag", "tag": "sha-main"}
    raw["variants"]["canary"]["image_tag"] = "sha-canary"
    templates = synth_templates(parse(raw))
    [repo] = templates["image"].find_resources("AWS::ECR::Repository").values()
    rules = json.loads(repo["Properties"]["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
    protected = {t for r in rules for t in r["selection"].get("tagPatternList", [])}
    assert protected == {"sha-main", "sha-canary", "model-prep-*", "buildcache"}
