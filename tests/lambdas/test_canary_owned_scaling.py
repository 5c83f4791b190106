"""The canary's autoscaling owned by the controller around the shadow stage (moto's Application
Auto Scaling, UpdateEndpoint validated by botocore): deregistered before the move to the shadow
config, registered again (bounds, then the target-tracking policy) once the endpoint is back on
the canary config, before any canary weight; a target the controller does not own is never
deregistered; a refused registration holds the canary stage back, a denied one leaves the
endpoint where it was."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from lambdas.canary_controller.canary_scaling import CanaryScaling
from lambdas.canary_controller.settings import RolloutConflict
from tests.lambdas import shadow_world as sw
from tests.lambdas.conftest import ENDPOINT, REGION, World, weights
from tests.lambdas.test_canary_shadow_stage import into_shadow, tick, until

RID = f"endpoint/{ENDPOINT}/variant/canary"
DIM = "sagemaker:variant:DesiredInstanceCount"
SPEC = CanaryScaling(
    min_capacity=1,
    max_capacity=6,
    policy_name=f"{ENDPOINT}-canary-target-tracking",
    tracking={
        "TargetValue": 108.8,
        "PredefinedMetricSpecification": {
            "PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"
        },
        "ScaleOutCooldown": 60,
        "ScaleInCooldown": 600,
        "DisableScaleIn": False,
    },
)


def aas() -> Any:
    return boto3.client("application-autoscaling", region_name=REGION)


def canary_target() -> tuple[int, int] | None:
    found = aas().describe_scalable_targets(
        ServiceNamespace="sagemaker", ResourceIds=[RID], ScalableDimension=DIM
    )["ScalableTargets"]
    return (found[0]["MinCapacity"], found[0]["MaxCapacity"]) if found else None


def canary_policies() -> dict[str, Any]:
    found = aas().describe_scaling_policies(
        ServiceNamespace="sagemaker", ResourceId=RID, ScalableDimension=DIM
    )["ScalingPolicies"]
    return {p["PolicyName"]: p for p in found}


def register(policy_name: str) -> None:
    """The canary registered with one target-tracking policy named ``policy_name``."""
    aas().register_scalable_target(
        ServiceNamespace="sagemaker", ResourceId=RID, ScalableDimension=DIM,
        MinCapacity=1, MaxCapacity=6,
    )  # fmt: skip
    aas().put_scaling_policy(
        PolicyName=policy_name, ServiceNamespace="sagemaker", ResourceId=RID,
        ScalableDimension=DIM, PolicyType="TargetTrackingScaling",
        TargetTrackingScalingPolicyConfiguration=SPEC.tracking,
    )  # fmt: skip


def failing(code: str, operation: str) -> Any:
    def fail(**_: Any) -> Any:
        raise ClientError(
            {"Error": {"Code": code, "Message": f"{operation} refused"},
             "ResponseMetadata": {"HTTPStatusCode": 400}}, operation,
        )  # fmt: skip

    return fail


@pytest.fixture
def owned(world: World) -> World:
    """The shadow world with the controller owning the canary's scaling, registered as the
    controller leaves it after a previous release."""
    world = sw.shadow_world(world)
    ctl = world.controller
    ctl.s = replace(ctl.s, shadow=replace(sw.SHADOW, canary_scaling=SPEC))
    register(SPEC.policy_name)
    return world


def test_the_stage_deregisters_the_canary_then_registers_it_again_before_any_weight(
    owned: World,
) -> None:
    asked = sw.serve_update_endpoint(owned.controller.sm)
    result = tick(owned, owned.start())
    assert result["last_decision"] == "enter-shadow", result
    assert "scalable target deregistered" in result["last_reason"], result
    assert asked == [sw.SHADOW_CONFIG]
    # gone before the move (AWS deletes its policies with it; moto keeps them, so they are not
    # asserted here)
    assert canary_target() is None
    result = tick(owned, result)
    sw.capture_both(owned)
    result = until(owned, result, "leave-shadow")
    assert canary_target() is None  # still off the endpoint while it moves back
    result = tick(owned, result)
    assert result["last_decision"] == "canary-stage", result
    assert "autoscaling registered again (1..6" in result["last_reason"], result
    assert canary_target() == (1, 6)
    policy = canary_policies()[SPEC.policy_name]
    assert policy["PolicyType"] == "TargetTrackingScaling"
    assert policy["TargetTrackingScalingPolicyConfiguration"]["TargetValue"] == 108.8
    assert weights()["canary"] == 0.0  # registered before the first step's weight
    result = tick(owned, result)
    # the first step's capacity-first raise works on the registered target
    assert result["last_decision"] in ("scale", "shift"), result
    low, _ = canary_target() or (0, 0)
    assert low >= 1


def test_a_target_with_a_policy_that_is_not_the_controllers_is_never_deregistered(
    owned: World,
) -> None:
    register("cloudformation-canary-tracking")  # CloudFormation's, from an older deploy
    asked = sw.serve_update_endpoint(owned.controller.sm)
    with pytest.raises(RolloutConflict, match="cloudformation-canary-tracking"):
        owned.start()
    assert canary_target() == (1, 6)
    assert set(canary_policies()) == {SPEC.policy_name, "cloudformation-canary-tracking"}
    assert asked == []
    assert owned.controller.load() is None  # no lock taken


def test_without_ownership_a_registered_canary_refuses_the_stage(owned: World) -> None:
    ctl = owned.controller
    ctl.s = replace(ctl.s, shadow=sw.SHADOW)  # an older stack: no canary_scaling
    with pytest.raises(RolloutConflict, match="does not own its scaling"):
        owned.start()
    assert canary_target() == (1, 6)


def test_a_refused_registration_holds_the_canary_stage_until_it_is_taken(owned: World) -> None:
    result = into_shadow(owned)
    sw.capture_both(owned)
    result = until(owned, result, "leave-shadow")
    real = owned.controller.aas.put_scaling_policy
    owned.controller.aas.put_scaling_policy = failing(
        "ConcurrentUpdateException", "PutScalingPolicy"
    )
    result = tick(owned, result)
    assert result["stage"] == "shadow" and result["status"] == "RUNNING", result
    assert "ConcurrentUpdateException" in result["last_reason"], result
    assert weights()["canary"] == 0.0
    owned.controller.aas.put_scaling_policy = real
    result = tick(owned, result)
    assert result["last_decision"] == "canary-stage" and result["stage"] == "canary", result
    assert SPEC.policy_name in canary_policies()


def test_a_denied_deregistration_leaves_the_endpoint_on_the_canary_config(owned: World) -> None:
    asked = sw.serve_update_endpoint(owned.controller.sm)
    owned.controller.aas.deregister_scalable_target = failing(
        "AccessDeniedException", "DeregisterScalableTarget"
    )
    result = owned.start()
    with pytest.raises(ClientError, match="AccessDenied"):
        tick(owned, result)
    assert asked == []  # no UpdateEndpoint without the deregistration
    assert canary_target() == (1, 6)
    record = owned.controller.load()
    assert record is not None and not record.get("intent"), record  # the intent taken back
    assert record["stage"] == "shadow" and record["status"] == "RUNNING"


def test_a_release_stopped_in_the_stage_gets_the_canarys_scaling_back(owned: World) -> None:
    result = into_shadow(owned)
    sw.capture_both(owned, shadow_fail_every=20)
    result = until(owned, result, "shadow-end")
    assert result["status"] == "ROLLED_BACK", result
    assert "autoscaling registered again" in result["last_reason"], result
    assert canary_target() == (1, 6) and SPEC.policy_name in canary_policies()
    assert weights()["canary"] == 0.0


@pytest.mark.parametrize(
    "fault",
    [
        EndpointConnectionError(endpoint_url="https://application-autoscaling.us-east-1"),
        ReadTimeoutError(endpoint_url="https://application-autoscaling.us-east-1"),
    ],
    ids=["connection-error", "read-timeout"],
)
def test_no_answer_to_the_registration_holds_the_canary_stage_then_it_is_taken(
    owned: World, fault: Exception
) -> None:
    """No answer at all (a dropped connection, a read timeout: the call may or may not have
    landed) is "not now": the stage stays shadow with the canary at weight 0, and the next tick
    registers again (RegisterScalableTarget and PutScalingPolicy are safe to repeat)."""
    result = into_shadow(owned)
    sw.capture_both(owned)
    result = until(owned, result, "leave-shadow")
    real = owned.controller.aas.register_scalable_target

    def no_answer(**_: Any) -> Any:
        raise fault

    owned.controller.aas.register_scalable_target = no_answer
    result = tick(owned, result)
    assert result["stage"] == "shadow" and result["status"] == "RUNNING", result
    assert weights()["canary"] == 0.0
    owned.controller.aas.register_scalable_target = real
    result = tick(owned, result)
    assert result["last_decision"] == "canary-stage" and result["stage"] == "canary", result
    assert canary_target() == (1, 6) and SPEC.policy_name in canary_policies()


def test_a_policy_sent_before_its_target_is_seen_is_sent_again_in_the_same_tick(
    owned: World,
) -> None:
    """Issue 41 finding 5: PutScalingPolicy right after RegisterScalableTarget can answer
    ObjectNotFoundException while the new target is not yet seen; the controller waits on its
    own clock and sends it again, and the canary stage goes on in that tick."""
    result = into_shadow(owned)
    sw.capture_both(owned)
    result = until(owned, result, "leave-shadow")
    real = owned.controller.aas.put_scaling_policy
    unseen = failing("ObjectNotFoundException", "PutScalingPolicy")
    answers = [unseen, unseen, real]

    def eventually(**params: Any) -> Any:
        return answers.pop(0)(**params)

    owned.controller.aas.put_scaling_policy = eventually
    before = owned.clock.now
    result = tick(owned, result)
    assert result["last_decision"] == "canary-stage" and result["stage"] == "canary", result
    assert answers == [] and SPEC.policy_name in canary_policies()
    assert owned.clock.now - before >= 1 + 2  # the two pauses, on the controller's clock


def test_a_target_that_stays_unseen_fails_the_tick_after_the_pauses(owned: World) -> None:
    result = into_shadow(owned)
    sw.capture_both(owned)
    result = until(owned, result, "leave-shadow")
    owned.controller.aas.put_scaling_policy = failing("ObjectNotFoundException", "PutScalingPolicy")
    with pytest.raises(ClientError, match="ObjectNotFoundException"):
        tick(owned, result)
    assert weights()["canary"] == 0.0
