"""What the product's own code does on AWS at run time, as requests its role must allow.

The calls come from :class:`.recorder.Recorder` (a test session's every call, per principal);
the resources they name are the test world's, so ``names`` maps each of the world's names to the
deployment's (the endpoint, the table, the configs...) before the ARNs are built. Each call
becomes one request per resource the Service Authorization Reference says its action requires,
plus the calls AWS documents a service making with the caller's permissions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .aws_iam import Request, describe
from .execution_role import Unresolved
from .recorder import Call
from .templates import Deployment, Ref

#: API operations IAM authorizes under another action's name (each service's documentation):
#: S3's ListObjectsV2 needs s3:ListBucket and HeadObject s3:GetObject
#: (https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html and API_HeadObject).
OPERATION_ACTIONS: dict[str, tuple[str, ...]] = {
    "s3:ListObjectsV2": ("s3:ListBucket",),
    "s3:HeadObject": ("s3:GetObject",),
    "s3:HeadBucket": ("s3:ListBucket",),
    # The API reference names sagemaker:InvokeEndpoint; the Service Authorization Reference
    # lists an action of its own: both must be allowed (stacks/constructs/endpoint_ref.py).
    "sagemaker:InvokeEndpointWithResponseStream": (
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithResponseStream",
    ),
}
#: Request context keys IAM takes from a request's parameters (each service's condition keys
#: in the Service Authorization Reference).
CONTEXT_FROM_PARAMETERS: dict[str, dict[str, str]] = {
    "application-autoscaling:RegisterScalableTarget": {
        "application-autoscaling:service-namespace": "ServiceNamespace",
        "application-autoscaling:scalable-dimension": "ScalableDimension",
    },
    "s3:ListBucket": {"s3:prefix": "Prefix"},
}
#: Reference placeholders filled from request parameters of another name.
PARAMETER_FOR = {"BucketName": "Bucket", "ObjectName": "Key"}
_PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")


def translate(value: Any, names: Mapping[str, str]) -> Any:
    """``value`` with each of the test world's names replaced by the deployment's, inside
    strings too (``endpoint/<name>/variant/canary``), longest first. A name is replaced where it
    stands whole (between ``/``, ``:``, quotes or the ends), never inside a longer name; a name
    ending in ``-`` is a prefix (``<endpoint>-shadow-``) and is replaced wherever a name begins
    with it."""
    if isinstance(value, str):
        for old in sorted(names, key=len, reverse=True):
            after = "" if old.endswith("-") else r"(?![A-Za-z0-9_.-])"
            pattern = r"(?<![A-Za-z0-9_.-])" + re.escape(old) + after
            value = re.sub(pattern, names[old].replace("\\", "\\\\"), value)
        return value
    if isinstance(value, list):
        return [translate(v, names) for v in value]
    if isinstance(value, dict):
        return {k: translate(v, names) for k, v in value.items()}
    return value


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)


def _fill(d: Deployment, arn_format: str, params: Mapping[str, Any]) -> list[str]:
    """The ARNs ``arn_format`` takes from the request's parameters: every placeholder filled
    from the parameter of its name (or its list, ``AlarmNames``), else none."""
    fixed = {"Partition": d.partition, "Region": d.region, "Account": d.account}
    arns = [arn_format]
    for name in dict.fromkeys(_PLACEHOLDER.findall(arn_format)):
        if name in fixed:
            values = [fixed[name]]
        else:
            key = PARAMETER_FOR.get(name, name)
            given = params.get(key, params.get(f"{key}s"))
            if given is None:
                return []
            values = given if isinstance(given, list) else [given]
        arns = [a.replace("${" + name + "}", str(v)) for a in arns for v in values]
    return [a.lower() if ":sagemaker:" in a else a for a in arns]


def _config(d: Deployment, name: str) -> Ref | None:
    for ref, resource in d.resources():
        if resource["Type"] == "AWS::SageMaker::EndpointConfig" and d.name(ref) == name:
            return ref
    return None


def _config_keys(params: Mapping[str, Any]) -> list[str]:
    """The KMS key ARNs an endpoint config names (``KmsKeyId``, ``DataCaptureConfig.KmsKeyId``)."""
    named = [params.get("KmsKeyId"), (params.get("DataCaptureConfig") or {}).get("KmsKeyId")]
    return [k for k in named if isinstance(k, str) and k.startswith("arn:")]


def documented(
    d: Deployment,
    action: str,
    params: Mapping[str, Any],
    created: Mapping[str, Mapping[str, Any]] | None = None,
) -> Iterator[tuple[str, str, str]]:
    """``(action, ARN, source)``: calls AWS documents a service making with the caller's
    permissions for this request. ``created``: the endpoint configs the code itself created
    (their CreateEndpointConfig parameters, by name)."""
    if action in ("sagemaker:CreateEndpoint", "sagemaker:UpdateEndpoint"):
        # kms:CreateGrant "required only if the associated EndpointConfig has a KmsKeyId
        # specified": https://docs.aws.amazon.com/sagemaker/latest/dg/api-permissions-reference.html
        name = str(params.get("EndpointConfigName"))
        config = _config(d, name)
        keys: list[str] = []
        if config is not None:
            props = d.resource(config).get("Properties", {})
            named = [props.get("KmsKeyId"), props.get("DataCaptureConfig", {}).get("KmsKeyId")]
            keys = [d.arn(k) or "" for k in d.references(config.stack, named)]
        elif created and name in created:
            keys = _config_keys(created[name])
        for key in keys:
            for kms in ("kms:CreateGrant", "kms:DescribeKey"):
                yield kms, key, "SageMaker API permissions reference (KmsKeyId)"
    if action == "sagemaker:CreateEndpointConfig":
        # The config's keys are described when it is created: CloudFormation's own handler for
        # AWS::SageMaker::EndpointConfig lists kms:DescribeKey for the same call.
        for key in _config_keys(params):
            yield "kms:DescribeKey", key, "the EndpointConfig handler's permissions (KmsKeyId)"
    if (
        action == "application-autoscaling:RegisterScalableTarget"
        and params.get("ServiceNamespace") == "sagemaker"
    ):
        # Application Auto Scaling's guide, "Permissions required for API actions on target
        # services and CloudWatch".
        endpoint = str(params["ResourceId"]).split("/")[1].lower()
        arn = f"arn:{d.partition}:sagemaker:{d.region}:{d.account}:endpoint/{endpoint}"
        for needed in (
            "sagemaker:DescribeEndpoint",
            "sagemaker:UpdateEndpointWeightsAndCapacities",
        ):
            yield needed, arn, "Application Auto Scaling guide (target service permissions)"


def requests(
    d: Deployment, calls: Sequence[Call], names: Mapping[str, str]
) -> tuple[list[Request], list[Unresolved]]:
    """One request per (call, resource its action requires), in the deployment's names."""
    actions = describe(a for c in calls for a in OPERATION_ACTIONS.get(c.operation, (c.operation,)))
    out: list[Request] = []
    unresolved: list[Unresolved] = []
    created = {
        str(p.get("EndpointConfigName")): p
        for c in calls
        if c.operation == "sagemaker:CreateEndpointConfig"
        for p in [translate(c.parameters, names)]
    }
    for call in dict.fromkeys(calls):
        params = translate(call.parameters, names)
        for name in OPERATION_ACTIONS.get(call.operation, (call.operation,)):
            found, missing = _requests(d, call, name, actions[name], params, created)
            out += found
            unresolved += missing
    return out, unresolved


def _requests(
    d: Deployment,
    call: Call,
    name: str,
    action: Any,
    params: Mapping[str, Any],
    created: Mapping[str, Mapping[str, Any]],
) -> tuple[list[Request], list[Unresolved]]:
    out: list[Request] = []
    unresolved: list[Unresolved] = []
    why = f"its code calls {call.operation}"
    if not action.exists:
        return [], [Unresolved(call.principal, name, "(no such IAM action)")]
    context = {
        key: params[param]
        for key, param in CONTEXT_FROM_PARAMETERS.get(name, {}).items()
        if param in params
    }
    targets = action.required or tuple(t for t in action.resource_types if _fill(d, t.arn, params))
    arns: list[str] = [] if targets else ["*"]
    for rt in targets:
        found = _fill(d, rt.arn, params)
        if rt.name == "ScalableTarget":  # its id is Application Auto Scaling's own
            found = [f"arn:{d.partition}:application-autoscaling:{d.region}:{d.account}:"
                     "scalable-target/0123456789abcdef0123456789abcdef"]  # fmt: skip
        found += [s for s in _strings(params) if s.startswith("arn:") and rt.matches(s)]
        if not found and rt.required:
            unresolved.append(Unresolved(call.principal, name, rt.name))
        arns += found
    for arn in dict.fromkeys(arns):
        out.append(Request(call.principal, name, arn, why, tuple(context.items()),
                           d.resource_policy(arn)))  # fmt: skip
    for needed, arn, source in documented(d, name, params, created):
        out.append(Request(call.principal, needed, arn, f"{why}: {source}", (),
                           d.resource_policy(arn)))  # fmt: skip
    return out, unresolved


def function_role(d: Deployment, handler: str) -> Ref:
    """The role of the Lambda function whose handler is ``handler``."""
    for ref, resource in d.resources():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::Lambda::Function" and props.get("Handler") == handler:
            (role,) = d.references(ref.stack, props["Role"])
            return role
    raise LookupError(f"no Lambda function with the handler {handler}")


def role_policies(d: Deployment, role: Ref) -> list[dict[str, Any]]:
    """The identity policies of ``role`` as the template gives them: its inline policies and
    every AWS::IAM::Policy that names it, rendered."""
    docs = [p["PolicyDocument"] for p in d.resource(role).get("Properties", {}).get("Policies", [])]
    for ref, resource in d.resources():
        props = resource.get("Properties", {})
        if (
            resource["Type"] == "AWS::IAM::Policy"
            and ref.stack == role.stack
            and (role in d.references(ref.stack, props.get("Roles", [])))
        ):
            docs.append(props["PolicyDocument"])
    return [d.render_document(role.stack, doc) for doc in docs]


def function_environment(d: Deployment, handler: str) -> dict[str, str]:
    """The rendered environment of the Lambda function whose handler is ``handler``."""
    for ref, resource in d.resources():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::Lambda::Function" and props.get("Handler") == handler:
            env = props.get("Environment", {}).get("Variables", {})
            return {k: json.loads(json.dumps(d.render(ref.stack, v))) for k, v in env.items()}
    raise LookupError(f"no Lambda function with the handler {handler}")
