"""The canary variant's autoscaling when the controller owns it: a release with a shadow stage.

Why the controller, not CloudFormation. The shadow stage runs the endpoint on a config with one
production variant (the primary) beside the shadow ("For an endpoint with a shadow variant, there
can be a maximum of one production variant", SageMaker developer guide, "Create a shadow test",
https://docs.aws.amazon.com/sagemaker/latest/dg/shadow-tests-create.html), so the canary variant
leaves the endpoint for the stage, and SageMaker removes a variant that has autoscaling only once
its scalable target is deregistered ("Update endpoints that use auto scaling",
https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-scaling-update.html). A scalable target
CloudFormation created would be deregistered under it, and the next deploy would find its
resource gone; so with ``rollout.shadow`` the stack registers no target for the canary
(stacks/constructs/scaling.py) and hands its bounds and its target-tracking policy to the
controller (:class:`CanaryScaling`, inside ``SHADOW_STAGE``), which:

- deregisters the canary's target before it moves the endpoint to the shadow config
  (:func:`release`; "Deregistering a scalable target deletes the scaling policies and the
  scheduled actions that are associated with it", Application Auto Scaling API reference,
  DeregisterScalableTarget; a target already gone is not an error here);
- registers it again, bounds then policy, once the endpoint is back on the canary config
  (:func:`register`): before the canary's first step on a pass (whose capacity-first raise of
  MinCapacity then works on a registered target, as without a shadow stage), and when a release
  ends in the shadow stage (the canary, at weight 0, autoscaled as configured again).
  PutScalingPolicy with a policy name that exists updates that policy (API reference,
  PutScalingPolicy), and RegisterScalableTarget updates an existing target, so both are safe to
  repeat on the next tick after a refusal.

A target whose policies are not the controller's own (:func:`foreign_policies`: CloudFormation's,
from a stack deployed before ``rollout.shadow`` was set) is never deregistered: the start of a
rollout is refused, naming them.

The caller needs, besides the Application Auto Scaling actions, CloudWatch's alarm actions on the
target-tracking alarms Application Auto Scaling creates and deletes for the policy (Application
Auto Scaling user guide, "Identity-based policy examples", permissions required for API actions on
target services and CloudWatch:
https://docs.aws.amazon.com/autoscaling/application/userguide/security_iam_id-based-policy-examples.html);
the construct grants them on this endpoint's canary alarms only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from botocore.exceptions import ClientError

from .aws import SCALABLE_DIMENSION

SERVICE_NAMESPACE = "sagemaker"
#: Application Auto Scaling names a target-tracking policy's alarms ``TargetTracking-<resource
#: id>-AlarmHigh-<uuid>`` / ``-AlarmLow-<uuid>``: the prefix the construct's grant names.
TRACKING_ALARM_PREFIX = "TargetTracking-"


def resource_id(endpoint: str, variant: str) -> str:
    return f"endpoint/{endpoint}/variant/{variant}"


@dataclass(frozen=True)
class CanaryScaling:
    """The canary's bounds and target-tracking policy, as the stack would have registered them
    (stacks/constructs/scaling.py ``controller_scaling``: the same figures)."""

    min_capacity: int
    max_capacity: int
    policy_name: str
    #: PutScalingPolicy's ``TargetTrackingScalingPolicyConfiguration``.
    tracking: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CanaryScaling:
        return cls(**raw)


def release(aas: Any, endpoint: str, variant: str) -> bool:
    """Deregister the variant's scalable target (its policies and scheduled actions with it).
    False when it had none (ObjectNotFoundException): nothing to do, not an error."""
    try:
        aas.deregister_scalable_target(
            ServiceNamespace=SERVICE_NAMESPACE,
            ResourceId=resource_id(endpoint, variant),
            ScalableDimension=SCALABLE_DIMENSION,
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ObjectNotFoundException":
            return False
        raise
    return True


#: Pauses before PutScalingPolicy is sent again when it cannot find the target just registered.
#: ObjectNotFoundException: "For any operation that depends on the existence of a scalable
#: target, this exception is thrown if the scalable target ... does not exist" (Application Auto
#: Scaling API reference, PutScalingPolicy, Errors); a target registered a moment ago can still be
#: unseen by the next call, as AWS's APIs are eventually consistent. 1 + 2 + 4 + 8 = 15 s within
#: one tick; past that the tick fails and the state machine's retry registers both again.
POLICY_AFTER_REGISTER_PAUSES = (1, 2, 4, 8)


def register(
    aas: Any,
    endpoint: str,
    variant: str,
    spec: CanaryScaling,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """The variant's scalable target at ``spec``'s bounds, then its target-tracking policy,
    sent again after each of :data:`POLICY_AFTER_REGISTER_PAUSES` while Application Auto Scaling
    does not yet see the target."""
    rid = resource_id(endpoint, variant)
    aas.register_scalable_target(
        ServiceNamespace=SERVICE_NAMESPACE,
        ResourceId=rid,
        ScalableDimension=SCALABLE_DIMENSION,
        MinCapacity=spec.min_capacity,
        MaxCapacity=spec.max_capacity,
    )
    for pause in (*POLICY_AFTER_REGISTER_PAUSES, None):
        try:
            aas.put_scaling_policy(
                PolicyName=spec.policy_name,
                ServiceNamespace=SERVICE_NAMESPACE,
                ResourceId=rid,
                ScalableDimension=SCALABLE_DIMENSION,
                PolicyType="TargetTrackingScaling",
                TargetTrackingScalingPolicyConfiguration=spec.tracking,
            )
            return
        except ClientError as exc:
            unseen = exc.response.get("Error", {}).get("Code") == "ObjectNotFoundException"
            if not unseen or pause is None:
                raise
            print(
                f"PutScalingPolicy: {rid} not found just after its registration; again in {pause}s"
            )
            sleep(pause)


def foreign_policies(aas: Any, endpoint: str, variant: str, spec: CanaryScaling) -> list[str]:
    """The names of the variant's scaling policies that are not ``spec``'s (DescribeScalingPolicies,
    every page): a target someone else owns."""
    names: list[str] = []
    kwargs: dict[str, Any] = {
        "ServiceNamespace": SERVICE_NAMESPACE,
        "ResourceId": resource_id(endpoint, variant),
        "ScalableDimension": SCALABLE_DIMENSION,
    }
    while True:
        page = aas.describe_scaling_policies(**kwargs)
        names += [
            p["PolicyName"]
            for p in page.get("ScalingPolicies", [])
            if p["PolicyName"] != spec.policy_name
        ]
        token = page.get("NextToken")
        if not token:
            return names
        kwargs["NextToken"] = token
