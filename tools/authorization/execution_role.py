"""What CloudFormation does with the execution role when it deploys the product's templates.

For each resource, the permissions its type's registry schema lists for the create, read,
update and delete handlers (CloudFormation calls them with the role's credentials:
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-iam-servicerole.html), each
on every resource the Service Authorization Reference says the action requires: the resource
itself, what its properties reference, or an ARN its properties spell out. Plus the calls AWS
documents a service making with the caller's permissions (:data:`DOCUMENTED`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import cfnlint

from .aws_iam import Action, Request, describe
from .templates import Deployment, Ref

PRINCIPAL = "CloudFormation execution role"
CFNLINT_SCHEMAS = Path(cfnlint.__file__).parent / "data" / "schemas"
HANDLERS = ("create", "read", "update", "delete")
#: Properties that hold a policy document: the ARNs in them are what the policy grants or
#: trusts, not resources the handler calls.
POLICY_DOCUMENTS = frozenset(
    {"PolicyDocument", "KeyPolicy", "AssumeRolePolicyDocument", "Policies", "PolicyText"}
)
#: The service a role is passed to by a resource of each service (``iam:PassedToService``).
PASSED_TO = {
    "SageMaker": "sagemaker.amazonaws.com",
    "Lambda": "lambda.amazonaws.com",
    "StepFunctions": "states.amazonaws.com",
    "ApplicationAutoScaling": "application-autoscaling.amazonaws.com",
}


@cache
def handler_permissions(resource_type: str) -> tuple[str, ...]:
    """The permissions the type's CloudFormation handlers list (the registry schema, as the
    pinned cfn-lint ships it)."""
    providers = json.loads((CFNLINT_SCHEMAS / "providers/us-east-1.json").read_text())
    schema = json.loads(
        (CFNLINT_SCHEMAS / "resources" / f"{providers[resource_type]}.json").read_text()
    )
    handlers = schema.get("handlers", {})
    return tuple(
        sorted({p for op in HANDLERS for p in handlers.get(op, {}).get("permissions", [])})
    )


@dataclass(frozen=True)
class Unresolved:
    """A required resource the check could not name from the template: said, never guessed."""

    resource: str
    action: str
    resource_type: str


def _kms_keys(d: Deployment, ref: Ref) -> set[Ref]:
    """The KMS keys an endpoint's config names (``KmsKeyId``, ``DataCaptureConfig.KmsKeyId``)."""
    config = d.resource(ref).get("Properties", {})
    keys = d.references(
        ref.stack, [config.get("KmsKeyId"), config.get("DataCaptureConfig", {}).get("KmsKeyId")]
    )
    return {k for k in keys if d.resource(k)["Type"] == "AWS::KMS::Key"}


def documented(d: Deployment, ref: Ref) -> Iterator[tuple[str, str, str]]:
    """``(action, ARN, source)``: calls AWS documents a service making with the caller's
    permissions when CloudFormation creates or updates this resource."""
    resource = d.resource(ref)
    props = resource.get("Properties", {})
    if resource["Type"] == "AWS::SageMaker::Endpoint":
        # "CreateEndpoint ... kms:CreateGrant (required only if the associated EndpointConfig
        # has a KmsKeyId specified)"; UpdateEndpoint likewise: the SageMaker API permissions
        # reference, https://docs.aws.amazon.com/sagemaker/latest/dg/api-permissions-reference.html
        configs = d.references(ref.stack, props.get("EndpointConfigName"))
        for config in configs:
            for key in _kms_keys(d, config):
                for action in ("kms:CreateGrant", "kms:DescribeKey"):
                    yield action, d.arn(key) or "", "SageMaker API permissions reference (KmsKeyId)"
    if (
        resource["Type"] == "AWS::ApplicationAutoScaling::ScalableTarget"
        and props.get("ServiceNamespace", str(props.get("ScalableDimension", "")).split(":")[0])
        == "sagemaker"
    ):
        # Application Auto Scaling's guide, "Permissions required for API actions on target
        # services and CloudWatch": registering a SageMaker variant needs the caller's
        # sagemaker:DescribeEndpoint and sagemaker:UpdateEndpointWeightsAndCapacities
        # (https://docs.aws.amazon.com/autoscaling/application/userguide/security_iam_id-based-policy-examples.html).
        kind, name = str(props["ResourceId"]).split("/")[:2]
        if kind == "inference-component":
            # an inference component's copies: the guide's SageMaker rows name variants only;
            # assumed by analogy (the describe and set-count calls of the component's copies),
            # not read from AWS: confirm against "Amazon SageMaker AI and Application Auto Scaling"
            arn = (
                f"arn:{d.partition}:sagemaker:{d.region}:{d.account}:"
                f"inference-component/{name.lower()}"
            )
            actions: tuple[str, ...] = (
                "sagemaker:DescribeInferenceComponent",
                "sagemaker:UpdateInferenceComponentRuntimeConfig",
            )
        else:
            arn = f"arn:{d.partition}:sagemaker:{d.region}:{d.account}:endpoint/{name.lower()}"
            actions = ("sagemaker:DescribeEndpoint", "sagemaker:UpdateEndpointWeightsAndCapacities")
        for action in actions:
            yield action, arn, "Application Auto Scaling guide (target service permissions)"
    if (
        resource["Type"] == "AWS::ApplicationAutoScaling::ScalingPolicy"
        and props.get("PolicyType") == "TargetTrackingScaling"
    ):
        # Target tracking creates and deletes its own alarms, named "TargetTracking-<resource
        # id>-AlarmHigh-<uuid>", with the caller's cloudwatch permissions (same guide).
        target = d.resource(next(iter(d.references(ref.stack, props.get("ScalingTargetId")))))
        alarm = (
            f"arn:{d.partition}:cloudwatch:{d.region}:{d.account}:alarm:TargetTracking-"
            f"{target['Properties']['ResourceId']}-AlarmHigh-1234abcd-12ab-34cd-56ef-1234567890ab"
        )
        for action in (
            "cloudwatch:PutMetricAlarm",
            "cloudwatch:DescribeAlarms",
            "cloudwatch:DeleteAlarms",
        ):
            yield action, alarm, "Application Auto Scaling guide (CloudWatch permissions)"


def _context(d: Deployment, ref: Ref, action: str) -> list[dict[str, Any]]:
    """The request context IAM sees for ``action`` on this resource: one per distinct value."""
    rtype = d.resource(ref)["Type"]
    if action == "iam:PassRole":
        service = rtype.split("::")[1]
        return [{"iam:PassedToService": PASSED_TO.get(service, f"{service.lower()}.amazonaws.com")}]
    if action == "iam:AttachRolePolicy":
        policies = d.resource(ref).get("Properties", {}).get("ManagedPolicyArns", [])
        # Called once per managed policy the role names; never for a role that names none.
        return [{"iam:PolicyARN": d.render(ref.stack, p)} for p in policies]
    if action.startswith("application-autoscaling:") and rtype.endswith("ScalableTarget"):
        props = d.resource(ref)["Properties"]
        return [{
            "application-autoscaling:service-namespace": props["ScalableDimension"].split(":")[0],
            "application-autoscaling:scalable-dimension": props["ScalableDimension"],
        }]  # fmt: skip
    return [{}]


def _candidates(d: Deployment, ref: Ref, service: str, sar_type: Any) -> list[str]:
    """ARNs of ``sar_type`` this resource's handlers act on: itself, what it references, and
    ARNs written out in its properties."""
    found: list[str] = []
    own = d.sar_type(ref)
    if own is not None and own.arn == sar_type.arn:
        found.append(d.arn(ref) or "")
    # What a policy document names is whom it grants, not what the handler acts on.
    props = {
        k: v for k, v in d.resource(ref).get("Properties", {}).items() if k not in POLICY_DOCUMENTS
    }
    for other in sorted(d.references(ref.stack, props), key=lambda r: r.logical_id):
        other_type = d.sar_type(other)
        if other_type is not None and other_type.arn == sar_type.arn:
            found.append(d.arn(other) or "")
    for literal in _rendered_strings(d, ref.stack, props):
        if literal.startswith("arn:") and sar_type.matches(literal):
            found.append(literal)
    return sorted(set(found))


def _rendered_strings(d: Deployment, stack: str, value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        if "Fn::Join" in value:
            text = d.render(stack, value)
            if text is not None:
                yield text
            return
        for v in value.values():
            yield from _rendered_strings(d, stack, v)
    elif isinstance(value, list):
        for v in value:
            yield from _rendered_strings(d, stack, v)
    elif isinstance(value, str):
        yield value


def requests(
    d: Deployment, *, not_granted: Mapping[str, str]
) -> tuple[list[Request], list[Unresolved]]:
    """Every request the execution role makes for ``d``'s resources; ``not_granted``: handler
    permissions the policy leaves out on purpose (execution_policy.NOT_GRANTED, each with why)."""
    out: list[Request] = []
    unresolved: list[Unresolved] = []
    refs = [(ref, r) for ref, r in d.resources() if not r["Type"].startswith("Custom::")]
    wanted = {p for _, r in refs for p in handler_permissions(r["Type"])} - set(not_granted)
    actions: Mapping[str, Action] = describe(wanted)
    for ref, resource in refs:
        where = f"{ref.stack}/{ref.logical_id} ({resource['Type']})"
        for name in handler_permissions(resource["Type"]):
            if name in not_granted:
                continue
            action = actions[name]
            if not action.exists:
                unresolved.append(Unresolved(where, name, "(no such IAM action)"))
                continue
            arns: list[str] = []
            if not action.required:
                arns = ["*"]
            for rt in action.required:
                service = name.split(":")[0]
                found = _candidates(d, ref, service, rt)
                if not found:
                    unresolved.append(Unresolved(where, name, rt.name))
                arns += found
            for arn in arns:
                for context in _context(d, ref, name):
                    out.append(Request(
                        PRINCIPAL, name, arn, f"{where}: handler permission",
                        tuple(context.items()), d.resource_policy(arn),
                    ))  # fmt: skip
        for name, arn, source in documented(d, ref):
            out.append(
                Request(PRINCIPAL, name, arn, f"{where}: {source}", (), d.resource_policy(arn))
            )
    return out, unresolved
