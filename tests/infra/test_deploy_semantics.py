"""What a deploy keeps, what the execution role may do for it, and which steps SageMaker accepts.

Issue 10 items 1 (retained properties), 3 (rollback alarms readable by the execution role),
4 (guardrail step sizes per variant), 9 (one scale-in authority) and the suspended-scaling
template of item 2, each on the synthesized template or the config validator.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from aws_cdk.assertions import Match, Template

from sizing.alarm_headroom import HEADROOM, healthy_latency_ratio
from sizing.deploy_options import DeployOptions
from sizing.ready_bound import ready_seconds
from sizing.update_semantics import green_fleet_size, retained_properties, weights_after_update
from typed_config import ConfigError

from .conftest import parse, synth_templates


@pytest.fixture(scope="module")
def endpoint(prod_templates) -> Template:
    return prod_templates["endpoint"]


def refusal(raw: dict[str, Any]) -> str:
    """The ConfigError message ``raw`` (prod.yaml, changed) is refused with."""
    with pytest.raises(ConfigError) as err:
        parse(raw)
    return str(err.value)


def with_ceiling(raw: dict[str, Any], top: int = 8) -> dict[str, Any]:
    """``raw`` with every scaling ceiling (variants, schedules, releases) at most ``top``: the
    guardrail rules below are about fleet sizes, not prod's (2..54 and 3..54, where a linear step
    of one instance is below 10 % of any fleet above 10)."""
    scaling = raw["scaling"]
    variants = scaling["variants"].values()
    for bounds in [*variants, *scaling["schedules"], *scaling["release_calendar"]]:
        standby = bounds.get("standby_instances", 0)
        bounds["max_capacity"] = min(bounds["max_capacity"], top)
        bounds["min_capacity"] = min(bounds["min_capacity"], top - standby)
    return raw


def _endpoint_props(tpl: Template) -> dict[str, Any]:
    (ep,) = tpl.find_resources("AWS::SageMaker::Endpoint").values()
    return dict(ep["Properties"])


# ---------------------------------------------------------------- item 1: retained properties


def test_a_deploy_keeps_live_counts_and_weights(endpoint: Template, prod_cfg) -> None:
    props = _endpoint_props(endpoint)
    assert props["RetainAllVariantProperties"] is True
    assert "ExcludeRetainedVariantProperties" not in props
    assert retained_properties(prod_cfg) == ("DesiredInstanceCount", "DesiredWeight")
    assert green_fleet_size(prod_cfg, "primary", live_desired=7) == 7


def test_reset_on_update_lists_what_a_deploy_resets_on_purpose(mutate) -> None:
    cfg = parse(mutate("deployment.reset_on_update", ["DesiredWeight"]))
    props = _endpoint_props(synth_templates(cfg)["endpoint"])
    assert props["RetainAllVariantProperties"] is True
    assert props["ExcludeRetainedVariantProperties"] == [{"VariantPropertyType": "DesiredWeight"}]
    assert weights_after_update(cfg, {"primary": 0.0, "canary": 100.0}) == {
        "primary": cfg.variants.primary.initial_weight,
        "canary": 0.0,  # prod's canary waits at 0 for its rollout (rollout.shadow)
    }
    assert green_fleet_size(cfg, "primary", live_desired=7) == 7  # counts still retained


def test_promotion_deploy_resets_weights_through_a_one_off_context_flag(prod_cfg) -> None:
    options = DeployOptions.from_context({"reset": "DesiredWeight"}.get)
    assert options.as_context() == {"reset": "DesiredWeight"}
    assert options.apply(prod_cfg).deployment.reset_on_update == ["DesiredWeight"]


def test_unknown_reset_property_is_refused_with_its_name(mutate) -> None:
    assert "deployment.reset_on_update[DesiredCount]: Input should be" in refusal(
        mutate("deployment.reset_on_update", ["DesiredCount"])
    )
    with pytest.raises(ConfigError, match=r"reset: .*DesiredCount"):
        DeployOptions.from_context({"reset": "DesiredCount"}.get)


# ---------------------------------------------------------------- item 3: execution role


def _role_statements(tpl: Template) -> list[dict[str, Any]]:
    return [
        s
        for p in tpl.find_resources("AWS::IAM::Policy").values()
        if any("ServingExecutionRole" in r["Ref"] for r in p["Properties"]["Roles"])
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_execution_role_reads_exactly_the_rollback_alarms(endpoint: Template) -> None:
    (describe,) = [
        s for s in _role_statements(endpoint) if s["Action"] == "cloudwatch:DescribeAlarms"
    ]
    arns = sorted(r["Fn::GetAtt"][0] for r in describe["Resource"])
    rollback = sorted(
        a["AlarmName"]["Ref"]
        for a in _endpoint_props(endpoint)["DeploymentConfig"]["AutoRollbackConfiguration"][
            "Alarms"
        ]
    )
    assert arns == rollback and len(arns) == 4
    assert all(r["Fn::GetAtt"][1] == "Arn" for r in describe["Resource"])


def test_execution_role_has_the_create_model_minimum_scoped(endpoint: Template) -> None:
    statements = _role_statements(endpoint)
    (put,) = [s for s in statements if s["Action"] == "cloudwatch:PutMetricData"]
    assert put["Condition"] == {
        "StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/Endpoints"}
    }
    (create,) = [s for s in statements if s["Action"] == "logs:CreateLogGroup"]
    assert "log-group:/aws/sagemaker/Endpoints/mangaassist-vllm-prod" in str(create["Resource"])
    assert ":log-stream" not in str(create["Resource"])


# ---------------------------------------------------------------- item 4: guardrail steps


def test_todays_prod_guardrail_is_refused_naming_field_and_rule(mutate) -> None:
    raw = mutate("deployment.traffic_shift", {"type": "canary", "step_percent": 10})
    raw["variants"]["canary"]["initial_instance_count"] = 1
    raw["scaling"]["variants"]["canary"]["min_capacity"] = 1
    msg = refusal(raw)
    assert "deployment.traffic_shift.step_percent" in msg
    assert "CanarySize must be at least one whole instance and <= 50%" in msg
    assert "0.2 instance(s) of variant primary's 2-instance fleet" in msg


def test_one_instance_canary_step_needs_two_instances_in_every_variant(mutate) -> None:
    raw = mutate("scaling.variants.canary.min_capacity", 1)
    raw["variants"]["canary"]["initial_instance_count"] = 1
    assert (
        "step_instances: CANARY step 1 instance(s) is 1 instance(s) of variant canary's "
        "1-instance fleet"
    ) in refusal(raw)


def test_linear_step_must_be_10_to_50_percent_of_every_fleet(mutate) -> None:
    raw = with_ceiling(mutate(
        "deployment.traffic_shift",
        {"type": "linear", "step_percent": 50, "wait_interval_seconds": 300},
    ))  # fmt: skip
    raw["deployment"]["max_execution_timeout_seconds"] = 3600
    parse(raw)  # 50% of 2..8 (and of the canary's 3..8) is 1..4 whole-or-more instances
    raw["deployment"]["traffic_shift"] = {
        "type": "linear",
        "step_instances": 1,
        "wait_interval_seconds": 60,
    }
    parse(raw)  # 1 of 2..8 (and of 3..8) lies within 10-50%
    raw["scaling"]["variants"]["primary"]["max_capacity"] = 12
    # 1 of 11 or 12 is below 10%
    assert "LinearStepSize must be at least one whole instance and 10-50%" in refusal(raw)


def test_counts_reset_at_deploy_validate_only_the_initial_count(mutate) -> None:
    # 25% of each variant's fleet: 4 initial instances each -> one whole instance.
    raw = mutate("deployment.traffic_shift", {"type": "canary", "step_percent": 25})
    raw["variants"]["canary"]["initial_instance_count"] = 4
    raw["scaling"]["variants"]["canary"]["max_capacity"] = 4
    # counts retained: a deploy can meet the primary at 2
    assert re.search(r"0.5 instance.*primary's 2-instance fleet", refusal(raw))
    raw["deployment"]["reset_on_update"] = ["DesiredInstanceCount"]
    assert parse(raw).deploy_fleet_sizes("primary") == [4]


def test_step_percent_and_step_instances_exclude_each_other(mutate) -> None:
    raw = mutate(
        "deployment.traffic_shift", {"type": "canary", "step_percent": 10, "step_instances": 1}
    )
    assert "traffic_shift.step_instances: give step_percent or" in refusal(raw)


# ---------------------------------------------------------------- item 9: scale-in authority


def test_target_tracking_and_a_step_scale_in_on_one_target_are_refused(mutate) -> None:
    raw = mutate("scaling.variants.primary.target_tracking.scale_in", True)
    assert re.search(
        r"scaling\.variants\.primary\.target_tracking\."
        r"scale_in: 2 scale-in authorities .*target_tracking, step policy idle-in",
        refusal(raw),
    )


def test_two_step_scale_in_policies_are_refused(prod_raw) -> None:
    policies = prod_raw["scaling"]["variants"]["primary"]["step_policies"]
    idle = next(p for p in policies if p["name"] == "idle-in")
    policies.append({**idle, "name": "idle-in-2"})
    assert "primary.step_policies: 2 scale-in authorities" in refusal(prod_raw)


def test_each_target_has_exactly_one_scale_in_authority_in_the_template(endpoint: Template) -> None:
    targets = endpoint.find_resources("AWS::ApplicationAutoScaling::ScalableTarget")
    policies = endpoint.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy")
    for tid in targets:
        mine = [
            p["Properties"]
            for p in policies.values()
            if p["Properties"]["ScalingTargetId"]["Ref"] == tid
        ]
        scale_in = [
            p
            for p in mine
            if (
                p["PolicyType"] == "TargetTrackingScaling"
                and not p["TargetTrackingScalingPolicyConfiguration"].get("DisableScaleIn")
            )
            or (
                p["PolicyType"] == "StepScaling"
                and any(
                    s["ScalingAdjustment"] < 0
                    for s in p["StepScalingPolicyConfiguration"]["StepAdjustments"]
                )
            )
        ]
        assert len(scale_in) == 1, (tid, scale_in)


# ---------------------------------------------------------------- item 2: suspended scaling


def test_suspended_variant_has_no_target_policy_or_schedule_and_keeps_its_type(mutate) -> None:
    options = DeployOptions.from_context(
        {"suspend_scaling": "primary", "pin_instance_type": "primary=ml.g5.2xlarge"}.get
    )
    # the pinned A10G primary beside the L40S canary: the deploy carries the rollback threshold
    # that type needs (DeployOptions.apply raises it), and the config carries the latency ratio
    # a healthy L40S canary at its target shows against the A10G at like loads, with headroom
    raw = mutate("deployment.rollback_model_latency_p99_ms", 55000)
    del raw["rollout"]["shadow"]  # with it the canary's scaling is the controller's
    raw["variants"]["canary"]["initial_weight"] = 5
    ratio, _ = healthy_latency_ratio(options.apply(parse(raw)))
    raw["rollout"]["max_latency_ratio"] = math.ceil(ratio * HEADROOM * 100) / 100
    cfg = parse(raw)
    tpl = synth_templates(options.apply(cfg), options)["endpoint"]
    targets = tpl.find_resources("AWS::ApplicationAutoScaling::ScalableTarget")
    assert [t["Properties"]["ResourceId"] for t in targets.values()] == [
        "endpoint/mangaassist-vllm-prod/variant/canary"
    ]
    (canary_target,) = targets
    for policy in tpl.find_resources("AWS::ApplicationAutoScaling::ScalingPolicy").values():
        assert policy["Properties"]["ScalingTargetId"]["Ref"] == canary_target
    tpl.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {
            "ProductionVariants": Match.array_with(
                [Match.object_like({"VariantName": "primary", "InstanceType": "ml.g5.2xlarge"})]
            )
        },
    )


def test_bad_deploy_options_name_the_context_key() -> None:
    with pytest.raises(ConfigError, match="pin_instance_type: 'primary' is not VARIANT="):
        DeployOptions.from_context({"pin_instance_type": "primary"}.get)
    with pytest.raises(ConfigError, match=r"unknown variant\(s\) \['shadow'\]"):
        DeployOptions.from_context({"suspend_scaling": "shadow"}.get)


# ---------------------------------------------------------------- the plan's deploy section


def test_plan_says_what_a_deploy_does_to_the_fleet(mutate, prod_cfg, prod_templates) -> None:
    from sizing.plan import build_plan, render_plan
    from sizing.plan_deploy import deploy_section

    plan = build_plan(prod_cfg, {k: t.to_json() for k, t in prod_templates.items()})
    d = plan["deploy"]
    kind = prod_cfg.variants.primary.instance_type
    assert prod_cfg.variants.canary.instance_type == kind  # the frozen prod: one type
    bounds = prod_cfg.scaling.variants
    primary_max, canary_max = bounds["primary"].max_capacity, bounds["canary"].max_capacity
    initial = sum(v.initial_instance_count for v in (prod_cfg.variants.primary,
                                                     prod_cfg.variants.canary))  # fmt: skip
    assert d["keeps"] == ["DesiredInstanceCount", "DesiredWeight"] and d["resets"] == []
    # serve a new tag's instances + bake + termination wait
    wait = prod_cfg.deployment.traffic_shift.wait_interval_seconds
    assert d["minutes"] == round(
        (ready_seconds(prod_cfg) + wait + prod_cfg.deployment.termination_wait_seconds) / 60, 1
    )
    # blue + green: both fleets at once
    assert d["at_max_capacity"]["peak_instances_by_type"] == {kind: 2 * (primary_max + canary_max)}
    # The promotion deploy lands while the canary holds its 100 % step bounds (up to the
    # primary's ceiling, and the frozen prod's canary ceiling is that too).
    assert canary_max == primary_max
    assert d["at_promotion"]["peak_instances_by_type"] == {kind: 2 * (primary_max + canary_max)}
    assert d["instance_quota_needed"] == {kind: 2 * (primary_max + canary_max)}
    assert d["at_initial_counts"]["peak_instances_by_type"] == {kind: 2 * initial}
    assert d["guardrail"]["min_instances_per_variant"] == 2
    text = render_plan(plan)
    need = 2 * (primary_max + canary_max)
    assert f"instance quota for endpoint usage needed: {need} x {kind}" in text
    half = primary_max + canary_max
    assert f"promotion deploy (canary on its 100% step bounds): blue {half} + green {half}" in text
    assert "keeps DesiredInstanceCount, DesiredWeight; resets nothing" in text
    # A canary ceiling below its 100 % step's bounds: the quota is the promotion's, not max's.
    small = deploy_section(parse(mutate("scaling.variants.canary.max_capacity", 3)))
    at_max = small["at_max_capacity"]["peak_instances_by_type"]
    assert at_max == {kind: 2 * (primary_max + 3)}
    assert small["at_promotion"]["peak_instances_by_type"] == {kind: need}
    assert small["instance_quota_needed"] == {kind: need}


def test_linear_instance_steps_must_fit_the_execution_timeout_on_the_largest_fleet(mutate) -> None:
    raw = with_ceiling(mutate(
        "deployment.traffic_shift",
        {"type": "linear", "step_instances": 1, "wait_interval_seconds": 600},
    ))  # fmt: skip
    # 8 steps x 600 s + 600 s termination wait = 5,400 s > 3,600 s
    assert "max_execution_timeout_seconds: 3600 is shorter than 8" in refusal(raw)
