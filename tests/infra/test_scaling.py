"""EndpointScaling: targets, target tracking, GPU-aware step scaling, schedules and releases.

The prod template is synthesized once (session fixture); variations are checked on a bare stack
holding only the scaling construct, built from just the scaling section they vary (ScalingProps),
which synthesizes in well under a second.
"""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_sagemaker as sagemaker
from aws_cdk.assertions import Capture, Match, Template

from container.serving import metrics_contract as mc
from stacks.constructs.scaling import EndpointScaling, ScalingProps, controller_scaling
from typed_config import DeploymentConfig, ScalingConfig, VariantName, bounds_changes

from .conftest import parse, raw_config, synth_templates

ENDPOINT = "mangaassist-vllm-prod"
DIMS = [
    {"Name": mc.DIM_ENDPOINT, "Value": ENDPOINT},
    {"Name": mc.DIM_VARIANT, "Value": "primary"},
]


@pytest.fixture(scope="module")
def endpoint() -> Template:
    """prod's endpoint stack with the stack owning both variants' scaling: prod.yaml without its
    shadow stage (with it the canary's scaling is the controller's: the last tests here)."""
    raw = raw_config("prod")
    del raw["rollout"]["shadow"]
    raw["variants"]["canary"]["initial_weight"] = 5
    return synth_templates(parse(raw))["endpoint"]


def test_with_a_shadow_stage_the_controller_registers_what_the_stack_would(
    endpoint: Template, prod_templates: dict[str, Template], prod_cfg: DeploymentConfig
) -> None:
    """The canary's bounds and target tracking the controller is handed with rollout.shadow are
    the ones the stack registers without it, field for field; and prod's own stack registers
    none for the canary."""
    targets = endpoint.find_resources("AWS::ApplicationAutoScaling::ScalableTarget")
    (canary_id,) = [
        k for k, t in targets.items() if t["Properties"]["ResourceId"].endswith("/canary")
    ]
    (policy,) = [
        p["Properties"]
        for p in endpoint.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").values()
        if p["Properties"]["ScalingTargetId"]["Ref"] == canary_id
    ]
    spec = controller_scaling(ScalingProps.from_config(prod_cfg), "canary")
    tracking = dict(spec.tracking)
    if not tracking["DisableScaleIn"]:
        del tracking["DisableScaleIn"]  # CloudFormation's policy leaves false out
    assert policy["TargetTrackingScalingPolicyConfiguration"] == tracking
    bounds = targets[canary_id]["Properties"]
    assert (bounds["MinCapacity"], bounds["MaxCapacity"]) == (
        spec.min_capacity,
        spec.max_capacity,
    )
    live = prod_templates["endpoint"].find_resources("AWS::ApplicationAutoScaling::ScalableTarget")
    assert [t["Properties"]["ResourceId"].rsplit("/", 1)[1] for t in live.values()] == ["primary"]


def scaling_config(
    primary: dict[str, Any] | None = None, **sections: list[dict[str, Any]]
) -> ScalingConfig:
    """A scaling section with both variants at 2..8 instances and no policy, changed by
    ``primary`` (keys of scaling.variants.primary) and ``sections`` (schedules, release_calendar).
    """
    bare = {"min_capacity": 2, "max_capacity": 8, "target_tracking": None}
    return ScalingConfig.model_validate(
        {"variants": {"primary": {**bare, **(primary or {})}, "canary": bare}, **sections}
    )


def scaling_only(
    scaling: ScalingConfig,
    concurrency_targets: dict[VariantName, float] | None = None,
    suspended: frozenset[str] = frozenset(),
) -> Template:
    stack = cdk.Stack(cdk.App(), "ScalingOnly")
    ep = sagemaker.CfnEndpoint(stack, "Endpoint", endpoint_config_name="cfg")
    props = ScalingProps(ENDPOINT, scaling, concurrency_targets or {})
    EndpointScaling(stack, "Scaling", props=props, endpoint=ep, suspended=suspended)
    return Template.from_stack(stack)


def step_policy_behind(template: Template, alarm: dict[str, Any]) -> dict[str, Any]:
    """The StepScalingPolicyConfiguration of the policy the alarm matching ``alarm`` acts on."""
    policy = Capture()
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm", {**alarm, "AlarmActions": [{"Ref": policy}]}
    )
    found = template.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy")
    config: dict[str, Any] = found[policy.as_string()]["Properties"][
        "StepScalingPolicyConfiguration"
    ]
    return config


def scheduled_actions(template: Template, variant: str = "primary") -> dict[str, Any]:
    targets = template.find_resources(
        "AWS::ApplicationAutoScaling::ScalableTarget",
        {"Properties": {"ResourceId": f"endpoint/{ENDPOINT}/variant/{variant}"}},
    )
    (target,) = targets.values()
    return {a["ScheduledActionName"]: a for a in target["Properties"]["ScheduledActions"]}


@pytest.mark.parametrize(("variant", "low", "high"), [("primary", 2, 54), ("canary", 3, 54)])
def test_each_variant_has_a_scalable_target_addressed_by_its_resource_id(
    endpoint: Template, variant: str, low: int, high: int
) -> None:
    endpoint.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalableTarget",
        {
            "ServiceNamespace": "sagemaker",
            "ResourceId": f"endpoint/{ENDPOINT}/variant/{variant}",
            "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
            "MinCapacity": low,
            "MaxCapacity": high,
        },
    )


def test_there_is_exactly_one_target_per_variant(endpoint: Template) -> None:
    endpoint.resource_count_is("AWS::ApplicationAutoScaling::ScalableTarget", 2)


def test_targets_are_registered_after_the_endpoint_exists(endpoint: Template) -> None:
    (endpoint_id,) = endpoint.find_resources("AWS::SageMaker::Endpoint")
    targets = endpoint.find_resources("AWS::ApplicationAutoScaling::ScalableTarget")
    for target in targets.values():
        assert endpoint_id in target["DependsOn"]


def test_targets_use_the_sagemaker_service_linked_role_not_a_new_role(endpoint: Template) -> None:
    role = Capture()
    endpoint.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalableTarget", {"RoleARN": role}
    )
    assert "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint" in json.dumps(
        role.as_object()
    )


@pytest.mark.parametrize("variant", ["primary", "canary"])
def test_target_tracking_follows_high_resolution_concurrency_at_85_percent_of_max_num_seqs(
    endpoint: Template, variant: str
) -> None:
    targets = endpoint.find_resources("AWS::ApplicationAutoScaling::ScalableTarget")
    policies = endpoint.find_resources(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {"Properties": {"PolicyType": "TargetTrackingScaling"}},
    )
    by_variant = {
        targets[p["Properties"]["ScalingTargetId"]["Ref"]]["Properties"]["ResourceId"]: p
        for p in policies.values()
    }
    policy = by_variant[f"endpoint/{ENDPOINT}/variant/{variant}"]
    # The primary's scale-in belongs to idle-in (one scale-in authority per target).
    disable = {"DisableScaleIn": True} if variant == "primary" else {}
    assert policy["Properties"]["TargetTrackingScalingPolicyConfiguration"] == {
        "PredefinedMetricSpecification": {
            "PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"
        },
        # 0.85 x max_num_seqs 128: on prod's ml.g6e.xlarge (L40S 48 GB) the KV cache holds more
        # than 128 sequences at the typical length, so max_num_seqs binds; target_tracking.slos: []
        "TargetValue": 108.8,
        "ScaleOutCooldown": 60,
        "ScaleInCooldown": 600,
        **disable,
    }


def test_invocations_per_instance_can_be_tracked_instead() -> None:
    tracking = {"metric": "invocations", "invocations_per_instance": 300}
    template = scaling_only(scaling_config({"target_tracking": tracking}))
    template.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {
            "TargetTrackingScalingPolicyConfiguration": Match.object_like(
                {
                    "PredefinedMetricSpecification": {
                        "PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"
                    },
                    "TargetValue": 300,
                }
            )
        },
    )


def test_queue_depth_scales_out_by_2_4_8_from_an_alarm_on_the_contract_metric(
    endpoint: Template,
) -> None:
    alarm = {
        "Namespace": mc.NAMESPACE,
        "MetricName": mc.QUEUE_DEPTH.name,
        "Dimensions": DIMS,
        "Statistic": "Average",
        "Period": 60,
        "EvaluationPeriods": 1,
        "Threshold": 50,
        "ComparisonOperator": "GreaterThanThreshold",
    }
    props = step_policy_behind(endpoint, alarm)
    assert props["Cooldown"] == 60
    assert props["StepAdjustments"] == [
        {"MetricIntervalLowerBound": 0, "MetricIntervalUpperBound": 30, "ScalingAdjustment": 2},
        {"MetricIntervalLowerBound": 30, "MetricIntervalUpperBound": 80, "ScalingAdjustment": 4},
        {"MetricIntervalLowerBound": 80, "ScalingAdjustment": 8},
    ]


def test_kv_cache_above_90_percent_for_two_minutes_adds_two_instances(endpoint: Template) -> None:
    alarm = {
        "Namespace": mc.NAMESPACE,
        "MetricName": "KVCacheUsage",
        "Dimensions": DIMS,
        "Statistic": "Average",
        "Period": 60,
        "EvaluationPeriods": 2,
        "Threshold": 90,
        "ComparisonOperator": "GreaterThanThreshold",
    }
    steps = step_policy_behind(endpoint, alarm)["StepAdjustments"]
    assert steps == [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 2}]


def test_scale_in_needs_short_queue_and_idle_gpus_for_five_minutes(endpoint: Template) -> None:
    config = step_policy_behind(
        endpoint,
        {
            "ComparisonOperator": "LessThanThreshold",
            "Threshold": 5,
            "EvaluationPeriods": 5,
            "TreatMissingData": "notBreaching",
            "Metrics": Match.array_with(
                [
                    Match.object_like({"Expression": "IF(c < 20, m, 5)", "ReturnData": True}),
                    {
                        "Id": "m",
                        "MetricStat": {
                            "Metric": {
                                "Namespace": mc.NAMESPACE,
                                "MetricName": mc.QUEUE_DEPTH.name,
                                "Dimensions": DIMS,
                            },
                            "Period": 60,
                            "Stat": "Average",
                        },
                        "ReturnData": False,
                    },
                    {
                        "Id": "c",
                        "MetricStat": {
                            "Metric": {
                                "Namespace": mc.SAGEMAKER_INSTANCE_NAMESPACE,
                                "MetricName": "GPUUtilization",
                                "Dimensions": DIMS,
                            },
                            "Period": 60,
                            "Stat": "Average",
                        },
                        "ReturnData": False,
                    },
                ]
            ),
        },
    )
    assert config["StepAdjustments"] == [{"MetricIntervalUpperBound": 0, "ScalingAdjustment": -1}]
    assert config["Cooldown"] == 600


def test_step_scale_in_cooldown_is_longer_than_every_scale_out_cooldown(endpoint: Template) -> None:
    policies = endpoint.find_resources(
        "AWS::ApplicationAutoScaling::ScalingPolicy", {"Properties": {"PolicyType": "StepScaling"}}
    )
    out, in_ = [], []
    for p in policies.values():
        cfg = p["Properties"]["StepScalingPolicyConfiguration"]
        grows = cfg["StepAdjustments"][0]["ScalingAdjustment"] > 0
        (out if grows else in_).append(cfg["Cooldown"])
    assert out and in_
    assert min(in_) > max(out)


def test_no_policy_or_alarm_uses_an_async_only_metric(endpoint: Template) -> None:
    body = json.dumps(endpoint.to_json())
    assert "ApproximateBacklogSizePerInstance" not in body
    assert "HasBacklogWithoutCapacity" not in body


@pytest.mark.parametrize(
    ("name", "schedule", "zone", "low", "high"),
    [
        # 26 + 1 standby
        ("jp-evening-peak", "cron(45 17 * * ? *)", "Asia/Tokyo", 27, 54),
        ("jp-evening-end", "cron(0 23 * * ? *)", "Asia/Tokyo", 2, 54),
        ("jp-off-peak-floor", "cron(0 1 * * ? *)", "Asia/Tokyo", 2, 54),
        ("us-evening-peak", "cron(45 17 * * ? *)", "America/New_York", 2, 54),
        ("us-evening-end", "cron(0 23 * * ? *)", "America/New_York", 2, 54),
        ("friday-release-prescale", "cron(0 16 ? * FRI *)", "Asia/Tokyo", 3, 54),  # 2 + 1
    ],
)
def test_recurring_schedules_are_written_in_local_time_with_their_time_zone(
    endpoint: Template, name: str, schedule: str, zone: str, low: int, high: int
) -> None:
    action = scheduled_actions(endpoint)[name]
    assert action == {
        "ScheduledActionName": name,
        "Schedule": schedule,
        "Timezone": zone,
        "ScalableTargetAction": {"MinCapacity": low, "MaxCapacity": high},
    }


def test_every_scheduled_action_carries_a_time_zone(endpoint: Template) -> None:
    actions = scheduled_actions(endpoint)
    assert len(actions) >= 3
    assert all(a.get("Timezone") for a in actions.values())


def test_release_prescales_two_hours_before_in_local_time(endpoint: Template) -> None:
    action = scheduled_actions(endpoint)["one-piece-1170-prescale"]
    assert action["Schedule"] == "at(2026-12-04T18:00:00)"
    assert action["Timezone"] == "Asia/Tokyo"
    assert action["ScalableTargetAction"] == {"MinCapacity": 44, "MaxCapacity": 54}


def test_release_restores_what_the_recurring_schedule_holds_then(endpoint: Template) -> None:
    action = scheduled_actions(endpoint)["one-piece-1170-restore"]
    assert action["Schedule"] == "at(2026-12-04T23:00:00)"
    assert action["Timezone"] == "Asia/Tokyo"
    # jp-evening-end (23:00 Tokyo) is the last recurring action at or before the restore.
    assert action["ScalableTargetAction"] == {"MinCapacity": 2, "MaxCapacity": 54}


RELEASE = {
    "name": "one-piece-1170",
    "at": "2026-12-04T20:00:00",
    "timezone": "Asia/Tokyo",
    "prescale_hours": 2,
    "restore_after_hours": 3,
    "min_capacity": 8,
    "max_capacity": 8,
}


def test_release_restores_the_variant_bounds_when_no_schedule_exists() -> None:
    template = scaling_only(scaling_config({"max_capacity": 9}, release_calendar=[RELEASE]))
    action = scheduled_actions(template)["one-piece-1170-restore"]
    assert action["ScalableTargetAction"] == {"MinCapacity": 2, "MaxCapacity": 9}


def test_release_window_counts_elapsed_hours_across_a_dst_change() -> None:
    night = {
        **RELEASE,
        "name": "dst-night",
        "at": "2026-03-08T04:00:00",
        "timezone": "America/New_York",
        "prescale_hours": 3,
        "restore_after_hours": 1,
    }
    actions = scheduled_actions(scaling_only(scaling_config(release_calendar=[night])))
    # Clocks jump 02:00 -> 03:00 that night: 3 h before 04:00 EDT is 00:00 EST.
    assert actions["dst-night-prescale"]["Schedule"] == "at(2026-03-08T00:00:00)"
    assert actions["dst-night-restore"]["Schedule"] == "at(2026-03-08T05:00:00)"


def test_written_actions_are_the_bounds_changes_the_simulator_replays(
    prod_cfg: DeploymentConfig, endpoint: Template
) -> None:
    """One list (spec.bounds_changes) feeds the template and sizing/bounds_timeline.py."""
    written = list(scheduled_actions(endpoint).values())
    assert written == [
        {
            "ScheduledActionName": c.action_name,
            "Schedule": c.expression,
            "Timezone": c.timezone,
            "ScalableTargetAction": {"MinCapacity": c.min_capacity, "MaxCapacity": c.max_capacity},
        }
        for c in bounds_changes(prod_cfg.scaling)
        if c.variant == "primary"
    ]


def test_a_suspended_variant_gets_no_target_and_no_scheduled_action() -> None:
    canary_release = {**RELEASE, "variant": "canary", "max_capacity": 2, "min_capacity": 2}
    template = scaling_only(
        scaling_config(release_calendar=[canary_release]), suspended=frozenset({"canary"})
    )
    template.resource_count_is("AWS::ApplicationAutoScaling::ScalableTarget", 1)
    assert "one-piece-1170-prescale" not in json.dumps(template.to_json())


def test_concurrency_tracking_writes_the_target_it_is_given() -> None:
    template = scaling_only(
        scaling_config({"target_tracking": {"metric": "concurrency"}}), {"primary": 41.5}
    )
    template.has_resource_properties(
        "AWS::ApplicationAutoScaling::ScalingPolicy",
        {"TargetTrackingScalingPolicyConfiguration": Match.object_like({"TargetValue": 41.5})},
    )


def test_canary_gets_no_schedules_unless_configured(endpoint: Template) -> None:
    targets = endpoint.find_resources(
        "AWS::ApplicationAutoScaling::ScalableTarget",
        {"Properties": {"ResourceId": f"endpoint/{ENDPOINT}/variant/canary"}},
    )
    (canary,) = targets.values()
    assert "ScheduledActions" not in canary["Properties"]
