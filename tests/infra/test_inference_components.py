"""The component shape (issue 45): the config's refusals, the synthesized components and their
scaling, and the plan's lines for it. Templates are built once per module (dev-components)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Match, Template

from sizing.component_plan import components_section, render_components
from sizing.fit_checks import load_config
from sizing.scaling_target import concurrency_target
from stacks.constructs.inference_components import COPY_DIMENSION, COPY_METRIC
from tools.authorization.aws_iam import Request
from tools.authorization.check import denials
from tools.authorization.runtime import role_policies
from tools.authorization.templates import Deployment, Ref
from typed_config import ConfigError, DeploymentConfig, artifact_bucket_name, stack_name
from typed_config.catalog import HOURS_PER_MONTH, INSTANCE_CATALOG
from typed_config.generated_names import (
    adapter_artifact_key,
    adapter_component_name,
    base_component_name,
)
from typed_config.loader import parse_config_data

from .conftest import REPO_ROOT, synth_templates

DEV_IC = REPO_ROOT / "config" / "examples" / "dev-components.yaml"
PROD_IC = REPO_ROOT / "config" / "examples" / "prod-components.yaml"


def _raw(path: Path = DEV_IC) -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load(path.read_text()))


def _parse(raw: dict[str, Any]) -> DeploymentConfig:
    from sizing.fit_checks import FIT_CHECKS

    return parse_config_data(
        raw, env=raw["env"], source=DEV_IC, base_dir=DEV_IC.parent, fit_checks=FIT_CHECKS
    )


def _refused(raw: dict[str, Any], field: str, why: str) -> None:
    with pytest.raises(ConfigError) as err:
        _parse(raw)
    lines = [line for line in str(err.value).splitlines() if f"{field}:" in line]
    assert any(why in line for line in lines), str(err.value)


# --- the config's refusals ---------------------------------------------------------------------


def test_an_adapter_component_name_over_63_characters_is_refused() -> None:
    raw = _raw()
    long = "a" + "b" * 60
    raw["adapters"][1]["name"] = long  # the report names list items by their name
    _refused(raw, f"adapters[{long}].name", "which SageMaker refuses")
    _refused(raw, f"adapters[{long}].name", "shorten the adapter name to at most 42")


def test_zero_instances_with_copies_at_their_floor_is_refused() -> None:
    raw = _raw()
    raw["inference_components"]["base"]["copies"]["min"] = 1
    _refused(raw, "inference_components.instances.min", "set base.copies.min 0 for scale to zero")


def test_zero_copies_on_instances_kept_is_refused() -> None:
    raw = _raw()
    raw["inference_components"]["instances"]["min"] = 1
    _refused(raw, "inference_components.base.copies.min", "billed and serve nothing")


def test_more_copies_than_the_instances_hold_is_refused() -> None:
    raw = _raw()
    raw["inference_components"]["base"]["copies"]["max"] = 3
    _refused(raw, "inference_components.base.copies.max", "raise instances.max")


def test_a_canary_with_traffic_beside_components_is_refused() -> None:
    raw = _raw()
    raw["variants"]["canary"]["initial_weight"] = 10
    _refused(raw, "variants.canary.initial_weight", "has no canary variant")


def test_schedules_beside_components_are_refused() -> None:
    raw = _raw(REPO_ROOT / "config" / "dev.yaml")
    raw["variants"]["canary"]["initial_weight"] = 0
    raw["inference_components"] = _raw()["inference_components"]
    _refused(raw, "scaling.schedules", "managed instance scaling owns the instances")


def test_another_instance_type_than_the_primary_is_refused() -> None:
    raw = _raw()
    raw["inference_components"]["instance_type"] = "ml.g6.xlarge"
    _refused(raw, "inference_components.instance_type", "name the same type in both")


def test_an_adapter_without_a_version_is_refused() -> None:
    raw = _raw()
    del raw["adapters"][2]["version"]
    _refused(raw, "adapters[jp_style].version", "required with inference_components")


def test_a_target_above_what_a_copy_admits_is_refused() -> None:
    raw = _raw()
    raw["inference_components"]["base"]["target_requests_per_copy"] = 1000
    raw.setdefault("engine", {})["admission_max_inflight"] = 64
    _refused(raw, "inference_components.base.target_requests_per_copy", "exceeds engine")


def test_instance_bounds_out_of_range_name_the_field() -> None:
    raw = _raw()
    raw["inference_components"]["instances"]["max"] = 0
    _refused(raw, "inference_components.instances.max", "greater than or equal to 1")


# --- the template ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev_ic() -> DeploymentConfig:
    return load_config(DEV_IC, env="dev")


@pytest.fixture(scope="module")
def templates(dev_ic: DeploymentConfig) -> dict[str, Template]:
    return synth_templates(dev_ic)


@pytest.fixture(scope="module")
def endpoint(templates: dict[str, Template]) -> Template:
    return templates["endpoint"]


def _components(t: Template) -> dict[str, dict[str, Any]]:
    return {
        r["Properties"]["InferenceComponentName"]: r["Properties"]
        for r in t.find_resources("AWS::SageMaker::InferenceComponent").values()
    }


def test_the_endpoint_config_has_one_variant_without_a_model(
    endpoint: Template, dev_ic: DeploymentConfig
) -> None:
    ic = dev_ic.inference_components
    assert ic is not None
    (config,) = endpoint.find_resources("AWS::SageMaker::EndpointConfig").values()
    props = config["Properties"]
    (variant,) = props["ProductionVariants"]
    assert "ModelName" not in variant and variant["VariantName"] == "primary"
    assert variant["ManagedInstanceScaling"] == {
        "Status": "ENABLED",
        "MinInstanceCount": ic.instances.min,
        "MaxInstanceCount": ic.instances.max,
    }
    assert variant["InstanceType"] == ic.instance_type
    assert "ExecutionRoleArn" in props
    assert len(endpoint.find_resources("AWS::SageMaker::Model")) == 1


def test_each_adapter_component_names_the_base_and_its_published_version(
    endpoint: Template, dev_ic: DeploymentConfig
) -> None:
    comps = _components(endpoint)
    base = base_component_name(dev_ic.project, dev_ic.env)
    assert set(comps) == {
        base,
        *(adapter_component_name(dev_ic.project, dev_ic.env, a.name) for a in dev_ic.adapters),
    }
    for a in dev_ic.adapters:
        spec = comps[adapter_component_name(dev_ic.project, dev_ic.env, a.name)]["Specification"]
        assert spec["BaseInferenceComponentName"] == base
        url = spec["Container"]["ArtifactUrl"]
        joined = "".join(p if isinstance(p, str) else "<token>" for p in url["Fn::Join"][1])
        assert joined.startswith("s3://") and joined.endswith(
            "/" + adapter_artifact_key(a.name, a.version or "")
        )
        # "must point to a single gzip compressed tar archive (.tar.gz suffix)" (API reference)
        assert joined.endswith(f"/{a.version}/adapter.tar.gz")
        assert "ComputeResourceRequirements" not in spec  # the base's resources
    base_spec = comps[base]["Specification"]
    assert base_spec["ComputeResourceRequirements"]["NumberOfAcceleratorDevicesRequired"] == 1
    assert comps[base]["RuntimeConfig"]["CopyCount"] >= 1


def test_the_base_container_takes_adapters_at_run_time(endpoint: Template) -> None:
    (model,) = endpoint.find_resources("AWS::SageMaker::Model").values()
    env = model["Properties"]["PrimaryContainer"]["Environment"]
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "true"
    assert env["SERVING_ADAPTERS_AT_RUNTIME"] == "1"


def test_only_the_base_copies_scale_within_the_configured_bounds(
    endpoint: Template, dev_ic: DeploymentConfig
) -> None:
    ic = dev_ic.inference_components
    assert ic is not None
    targets = endpoint.find_resources("AWS::ApplicationAutoScaling::ScalableTarget")
    (target,) = targets.values()  # no variant target: managed instance scaling owns instances
    props = target["Properties"]
    assert props["ResourceId"] == f"inference-component/{base_component_name('mangaassist', 'dev')}"
    assert props["ScalableDimension"] == COPY_DIMENSION
    assert (props["MinCapacity"], props["MaxCapacity"]) == (ic.base.copies.min, ic.base.copies.max)
    endpoint.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {
            "PolicyType": "TargetTrackingScaling",
            "TargetTrackingScalingPolicyConfiguration": Match.object_like(
                {
                    "PredefinedMetricSpecification": {"PredefinedMetricType": COPY_METRIC},
                    "TargetValue": ic.base.target_requests_per_copy,
                }
            ),
        },
    )


def test_scale_to_zero_wakes_on_the_first_failed_request(
    endpoint: Template, dev_ic: DeploymentConfig
) -> None:
    base = base_component_name(dev_ic.project, dev_ic.env)
    step = endpoint.find_resources(
        "AWS::ApplicationAutoScaling::ScalingPolicy", {"Properties": {"PolicyType": "StepScaling"}}
    )
    ((step_id, policy),) = step.items()
    cfg = policy["Properties"]["StepScalingPolicyConfiguration"]
    assert cfg["AdjustmentType"] == "ChangeInCapacity"
    assert cfg["StepAdjustments"] == [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}]
    alarms = endpoint.find_resources(
        "AWS::CloudWatch::Alarm", {"Properties": {"MetricName": "NoCapacityInvocationFailures"}}
    )
    (alarm,) = alarms.values()
    props = alarm["Properties"]
    assert props["Dimensions"] == [{"Name": "InferenceComponentName", "Value": base}]
    assert props["AlarmActions"] == [{"Ref": step_id}]
    assert (props["Threshold"], props["ComparisonOperator"]) == (
        1,
        "GreaterThanOrEqualToThreshold",
    )


def _actions(statement: dict[str, Any]) -> list[str]:
    actions = statement["Action"]
    return [actions] if isinstance(actions, str) else list(actions)


def _ecr_only(statement: dict[str, Any]) -> bool:
    return all(a.startswith("ecr:") for a in _actions(statement))


def test_the_execution_role_reads_the_published_archives_and_nothing_else_there(
    templates: dict[str, Template], dev_ic: DeploymentConfig
) -> None:
    """SageMaker fetches an adapter component's ArtifactUrl as the endpoint config's
    ExecutionRoleArn. Its policies, judged by IAM's evaluator (tools/authorization), allow
    s3:GetObject on each published archive, not the model releases beside them nor another
    bucket; and kms:Decrypt of the SSE-KMS bucket's key only through S3 (``kms:ViaService``) for
    that bucket (the ``aws:s3:arn`` encryption context S3 sends). The pinned evaluator never
    matches a context key with colons after the variable (``kms:EncryptionContext:aws:s3:arn``),
    so that condition is read from the statement itself."""
    account = "123456789012"
    stacks = {stack_name(dev_ic, part): t.to_json() for part, t in templates.items()}
    d = Deployment(stacks, "aws", dev_ic.region, account)
    (config,) = templates["endpoint"].find_resources("AWS::SageMaker::EndpointConfig").values()
    role = Ref(
        stack_name(dev_ic, "endpoint"), config["Properties"]["ExecutionRoleArn"]["Fn::GetAtt"][0]
    )
    # the image pull's statements (ECR actions only) name the bootstrap asset repository through
    # an Fn::Sub the check does not render; none of them can allow S3 or KMS
    statements = [
        st for doc in role_policies(d, role) for st in doc["Statement"] if not _ecr_only(st)
    ]
    principal, bucket = "endpoint execution role", artifact_bucket_name(dev_ic, account)

    def get(resource: str) -> Request:
        return Request(principal, "s3:GetObject", f"arn:aws:s3:::{resource}", "adapter component")

    archives = [
        get(f"{bucket}/{adapter_artifact_key(a.name, a.version or '')}") for a in dev_ic.adapters
    ]
    outside = [
        get(f"{bucket}/prepared/m-0123456789abcdef/manifest.json"),
        get(f"another-bucket/{adapter_artifact_key('x', 'v1')}"),
    ]
    policies = {principal: [{"Version": "2012-10-17", "Statement": statements}]}
    denied = {x.request for x in denials([*archives, *outside], policies, account)}
    assert denied == set(outside)
    (decrypt,) = [
        st
        for st in statements
        if "kms:Decrypt" in _actions(st) and st["Resource"].endswith(":key/*")
    ]
    assert decrypt["Condition"] == {
        "StringEquals": {"kms:ViaService": f"s3.{dev_ic.region}.amazonaws.com"},
        "StringLike": {"kms:EncryptionContext:aws:s3:arn": f"arn:aws:s3:::{bucket}*"},
    }


def _alarm_names(t: Template) -> set[str]:
    """Each alarm by the name its description gives (``[LEVEL] <variant>/<rule>: why``)."""
    return {
        str(a["Properties"].get("AlarmDescription", "")).split("] ", 1)[-1].split(":", 1)[0]
        for a in t.find_resources("AWS::CloudWatch::Alarm").values()
    }


def test_monitoring_watches_the_one_variant_and_nothing_pages_while_at_zero(
    endpoint: Template,
) -> None:
    """No alarm on a canary the shape does not have; at scale to zero no alarm that breaches on
    missing data (no engine publishes while idle, by design): dev would page every night."""
    names = _alarm_names(endpoint)
    assert "primary/high-ttft" in names
    assert not [n for n in names if n.startswith("canary/")]
    assert "primary/no-healthy-capacity" not in names
    breaching = endpoint.find_resources(
        "AWS::CloudWatch::Alarm", {"Properties": {"TreatMissingData": "breaching"}}
    )
    assert breaching == {}


def test_the_variant_shape_has_no_components(prod_templates: dict[str, Template]) -> None:
    assert prod_templates["endpoint"].find_resources("AWS::SageMaker::InferenceComponent") == {}


def test_without_scale_to_zero_no_wake_alarm_is_built() -> None:
    t = synth_templates(load_config(PROD_IC, env="prod"))["endpoint"]
    assert len(t.find_resources("AWS::SageMaker::InferenceComponent")) == 4
    assert "primary/no-healthy-capacity" in _alarm_names(t)  # always a copy: its absence pages
    assert (
        t.find_resources(
            "AWS::CloudWatch::Alarm", {"Properties": {"MetricName": "NoCapacityInvocationFailures"}}
        )
        == {}
    )


# --- the plan ----------------------------------------------------------------------------------


def test_the_plan_prices_the_month_at_zero_below_the_variant_shape(
    dev_ic: DeploymentConfig,
) -> None:
    c = components_section(dev_ic)
    assert c is not None and c["scales_to_zero"]
    ic = dev_ic.inference_components
    assert ic is not None
    price = INSTANCE_CATALOG[ic.instance_type].price_per_hour
    zero = c["zero"]
    assert zero["monthly_at_zero"] == pytest.approx(zero["billed_hours_per_month"] * price, 0.01)
    assert zero["busy_hours_per_month"] < zero["billed_hours_per_month"] < HOURS_PER_MONTH
    assert zero["monthly_at_zero"] < c["variant_monthly_at_floors"]
    assert c["monthly_at_floor"] == 0  # nothing always on
    assert zero["wake_seconds"] > zero["alarm_seconds"]
    assert zero["wake_seconds"] <= zero["wake_edge_seconds"] <= zero["wake_uncached_seconds"]
    lines = "\n".join(render_components(c))
    assert "scale from zero" in lines and "a month at zero" in lines
    assert f"{ic.base.target_requests_per_copy:g} concurrent requests per copy" in lines


def test_the_plan_prints_copies_per_instance_and_both_targets() -> None:
    cfg = load_config(PROD_IC, env="prod")
    c = components_section(cfg)
    assert c is not None and not c["scales_to_zero"] and "zero" not in c
    inst = INSTANCE_CATALOG[c["instance_type"]]
    assert c["copies_per_instance"] == inst.gpu_count // c["gpus_per_copy"]
    assert c["variant_target_per_instance"] == concurrency_target(cfg, "primary")
    assert c["monthly_at_floor"] == pytest.approx(
        c["instances"]["min"] * inst.price_per_hour * HOURS_PER_MONTH, 0.01
    )
    assert c["copy_memory_mb"] <= c["instance_memory_mb_per_copy"]


def test_the_variant_shape_prints_no_component_lines() -> None:
    assert components_section(load_config(REPO_ROOT / "config" / "dev.yaml", env="dev")) is None


def test_the_plan_gives_the_adapter_release_rules_the_config_sets() -> None:
    """The shape's lines say how an adapter rolls out: inference_components.rollout's bake and
    watch, and each evidence figure it leaves unset taken from the canary's (rollout:)."""
    raw = _raw(PROD_IC)
    raw["inference_components"]["rollout"] = {"bake_minutes": 7, "min_invocations": 40}
    cfg = _parse(raw)
    c = components_section(cfg)
    assert c is not None
    assert c["adapter_rollout"] == {
        "bake_minutes": 7,
        "min_invocations": 40,
        "max_error_rate_increase_percent": cfg.rollout.max_error_rate_increase_percent,
        "watch_minutes": 10,
    }
    line = next(x for x in render_components(c) if "adapter releases" in x)
    assert "bakes 7 min, needs >= 40 invocations" in line
