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
    "s3:ListObjects": ("s3:ListBucket",),
    "s3:HeadObject": ("s3:GetObject",),
    "s3:HeadBucket": ("s3:ListBucket",),
    # A multipart upload's parts are the object's PutObject (S3 API reference,
    # CreateMultipartUpload, UploadPart, CompleteMultipartUpload: "Permissions").
    "s3:CreateMultipartUpload": ("s3:PutObject",),
    "s3:UploadPart": ("s3:PutObject",),
    "s3:CompleteMultipartUpload": ("s3:PutObject",),
    # A copy reads the source and writes the destination (S3 API reference, CopyObject and
    # UploadPartCopy, "Permissions"): the source from CopySource (:data:`PARAMETERS_OF`).
    "s3:CopyObject": ("s3:GetObject", "s3:PutObject"),
    "s3:UploadPartCopy": ("s3:GetObject", "s3:PutObject"),
    # Lambda's Invoke operation is authorized as lambda:InvokeFunction (Lambda API reference).
    "lambda:Invoke": ("lambda:InvokeFunction",),
    # The API reference names sagemaker:InvokeEndpoint; the Service Authorization Reference
    # lists an action of its own: both must be allowed (stacks/constructs/endpoint_ref.py).
    "sagemaker:InvokeEndpointWithResponseStream": (
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithResponseStream",
    ),
}
#: Operations that need no permission: "No permissions are required to perform this operation"
#: (STS API reference, GetCallerIdentity).
NO_PERMISSION = frozenset({"sts:GetCallerIdentity"})


def _copy_source(params: Mapping[str, Any]) -> dict[str, Any]:
    """A copy's source object as GetObject's parameters (CopySource: ``bucket/key`` or a dict)."""
    source = params.get("CopySource")
    if isinstance(source, dict):
        return {"Bucket": source.get("Bucket"), "Key": source.get("Key")}
    bucket, _, key = str(source).lstrip("/").partition("/")
    return {"Bucket": bucket, "Key": key.split("?versionId=")[0]}


#: ``(operation, action)`` -> the parameters that name the action's resource, where they are
#: not the request's own.
PARAMETERS_OF = {
    ("s3:CopyObject", "s3:GetObject"): _copy_source,
    ("s3:UploadPartCopy", "s3:GetObject"): _copy_source,
}
#: Request context keys IAM takes from a request's parameters (each service's condition keys
#: in the Service Authorization Reference).
CONTEXT_FROM_PARAMETERS: dict[str, dict[str, str]] = {
    "application-autoscaling:RegisterScalableTarget": {
        "application-autoscaling:service-namespace": "ServiceNamespace",
        "application-autoscaling:scalable-dimension": "ScalableDimension",
    },
    "s3:ListBucket": {"s3:prefix": "Prefix"},
    "cloudwatch:PutMetricData": {"cloudwatch:namespace": "Namespace"},
    "s3:PutObject": {"s3:if-none-match": "IfNoneMatch", "s3:if-match": "IfMatch"},
}
#: S3's ``s3:ObjectCreationOperation`` per operation: the multipart parts (CreateMultipartUpload,
#: UploadPart, UploadPartCopy) take no conditional header and are not object creations in a
#: bucket policy's sense ("Enforce conditional writes on Amazon S3 buckets", S3 User Guide).
OBJECT_CREATION = {
    "s3:PutObject": "true",
    "s3:CopyObject": "true",
    "s3:CompleteMultipartUpload": "true",
    "s3:CreateMultipartUpload": "false",
    "s3:UploadPart": "false",
    "s3:UploadPartCopy": "false",
}


def _s3_context(operation: str, action: str) -> dict[str, str]:
    """What IAM knows of every S3 request: over TLS (botocore's endpoints are HTTPS; the
    buckets deny aws:SecureTransport false), and whether a write creates the object."""
    if not action.startswith("s3:"):
        return {}
    context = {"aws:SecureTransport": "true"}
    if action == "s3:PutObject" and operation in OBJECT_CREATION:
        context["s3:ObjectCreationOperation"] = OBJECT_CREATION[operation]
    return context


#: Reference placeholders filled from request parameters of another name.
PARAMETER_FOR = {
    "BucketName": "Bucket",
    "ObjectName": "Key",
    "RoleNameWithPath": "RoleName",
    "ParameterNameWithoutLeadingSlash": "Name",
}
#: Placeholders AWS fills with an id it generates (a stack's id): one of the id's form, as the
#: product's policies cannot know it either.
GENERATED = {"Id": "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"}
#: What AWS appends to a name in the resource's ARN: a Secrets Manager secret's ARN ends in "-"
#: and six random characters (Secrets Manager User Guide, "Secret ARN").
NAME_SUFFIX = {"secretsmanager": "-AbCdEf"}
_PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")


def translate(value: Any, names: Mapping[str, str]) -> Any:
    """``value`` with each of the test world's names replaced by the deployment's, inside
    strings too (``endpoint/<name>/variant/canary``), longest first. A name is replaced where it
    stands whole (between ``/``, ``:``, quotes or the ends), never inside a longer name; a name
    ending in ``-`` is a prefix (``<endpoint>-shadow-``) and is replaced wherever a name begins
    with it; an account id is replaced wherever it appears."""
    if isinstance(value, str):
        for old in sorted(names, key=len, reverse=True):
            if re.fullmatch(r"\d{12}", old):  # an account id: names embed it
                value = value.replace(old, names[old])  # (cdk-<q>-cfn-exec-role-<account>-...)
                continue
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
    fixed = {"Partition": d.partition, "Region": d.region, "Account": d.account, **GENERATED}
    lowered = {k.lower(): v for k, v in params.items()}
    service = arn_format.split(":")[2]
    arns = [arn_format]
    for name in dict.fromkeys(_PLACEHOLDER.findall(arn_format)):
        if name in fixed:
            values = [fixed[name]]
        else:
            key = PARAMETER_FOR.get(name, name)
            given = params.get(key, params.get(f"{key}s"))
            if given is None:  # botocore's camelCase members (ECR, Logs, Bedrock)
                given = lowered.get(key.lower(), lowered.get(f"{key.lower()}s"))
            if given is None or (isinstance(given, str) and given.startswith("arn:")):
                return []  # an ARN given whole is matched as one (``_requests``)
            values = given if isinstance(given, list) else [given]
            if name == "ParameterNameWithoutLeadingSlash":
                values = [str(v).lstrip("/") for v in values]
            if name.startswith("Secret"):
                values = [f"{v}{NAME_SUFFIX[service]}" for v in values]
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


#: Requests that pass a role to a service: the parameter that names it and the service
#: (``iam:PassedToService``). "CreateTrainingJob: iam:PassRole" (SageMaker API permissions
#: reference, https://docs.aws.amazon.com/sagemaker/latest/dg/api-permissions-reference.html);
#: passing a role to any service needs iam:PassRole on it (IAM User Guide, "Grant a user
#: permissions to pass a role to an AWS service").
PASSES_ROLE = {
    "sagemaker:CreateTrainingJob": ("RoleArn", "sagemaker.amazonaws.com"),
    "bedrock:CreateModelImportJob": ("roleArn", "bedrock.amazonaws.com"),
}


def passed_role(
    action: str, params: Mapping[str, Any]
) -> Iterator[tuple[str, str, str, tuple[tuple[str, Any], ...]]]:
    """``(iam:PassRole, role ARN, source, context)`` for a request that passes a role."""
    if action in PASSES_ROLE:
        param, service = PASSES_ROLE[action]
        if params.get(param):
            yield ("iam:PassRole", str(params[param]), f"{action} passes {param}",
                   (("iam:PassedToService", service),))  # fmt: skip


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
    if (
        action
        in (
            "application-autoscaling:PutScalingPolicy",
            "application-autoscaling:DeregisterScalableTarget",
        )
        and params.get("ServiceNamespace") == "sagemaker"
        and (
            action.endswith("DeregisterScalableTarget")
            or params.get("PolicyType") == "TargetTrackingScaling"
        )
    ):
        # Target tracking creates its alarms, "TargetTracking-<resource id>-AlarmHigh-<uuid>"
        # (and AlarmLow), and deletes them with the policy or the target, with the caller's
        # cloudwatch permissions (Application Auto Scaling guide, "Permissions required for API
        # actions on target services and CloudWatch"; the execution role's check does the same).
        alarm = (
            f"arn:{d.partition}:cloudwatch:{d.region}:{d.account}:alarm:TargetTracking-"
            f"{params['ResourceId']}-AlarmHigh-1234abcd-12ab-34cd-56ef-1234567890ab"
        )
        alarm_actions = ["cloudwatch:DescribeAlarms", "cloudwatch:DeleteAlarms"]
        if action.endswith("PutScalingPolicy"):
            alarm_actions.append("cloudwatch:PutMetricAlarm")
        for cloudwatch in alarm_actions:
            yield cloudwatch, alarm, "Application Auto Scaling guide (CloudWatch permissions)"


#: The KMS actions S3 asks of the caller, with the caller's permissions, for an object in a
#: bucket encrypted with a KMS key (SSE-KMS): "To upload or download an object encrypted with an
#: AWS KMS key ... you need kms:GenerateDataKey and kms:Decrypt permissions on the key" (download:
#: Decrypt; a single upload: GenerateDataKey; a multipart upload both: Amazon S3 User Guide,
#: "Using server-side encryption with AWS KMS keys (SSE-KMS)" and "Multipart upload API and
#: permissions"). S3 makes them, so ``kms:ViaService`` is S3's (AWS KMS Developer Guide).
S3_KMS: dict[tuple[str, str], tuple[str, ...]] = {
    ("s3:GetObject", "s3:GetObject"): ("kms:Decrypt",),
    ("s3:CopyObject", "s3:GetObject"): ("kms:Decrypt",),
    ("s3:UploadPartCopy", "s3:GetObject"): ("kms:Decrypt",),
    ("s3:PutObject", "s3:PutObject"): ("kms:GenerateDataKey",),
    ("s3:CopyObject", "s3:PutObject"): ("kms:GenerateDataKey",),
    ("s3:CreateMultipartUpload", "s3:PutObject"): ("kms:GenerateDataKey", "kms:Decrypt"),
    ("s3:UploadPart", "s3:PutObject"): ("kms:GenerateDataKey", "kms:Decrypt"),
    ("s3:UploadPartCopy", "s3:PutObject"): ("kms:GenerateDataKey", "kms:Decrypt"),
    ("s3:CompleteMultipartUpload", "s3:PutObject"): ("kms:GenerateDataKey", "kms:Decrypt"),
}


def bucket_key(d: Deployment, bucket: str) -> Ref | None:
    """The KMS key a bucket of the deployment encrypts its objects with, or None."""
    for ref, resource in d.resources():
        if resource["Type"] != "AWS::S3::Bucket" or d.name(ref) != bucket:
            continue
        encryption = resource.get("Properties", {}).get("BucketEncryption", {})
        for rule in encryption.get("ServerSideEncryptionConfiguration", []):
            default = rule.get("ServerSideEncryptionByDefault", {})
            keys = d.references(ref.stack, default.get("KMSMasterKeyID"))
            if keys:
                return next(iter(keys))
    return None


def s3_kms(
    d: Deployment, operation: str, action: str, params: Mapping[str, Any]
) -> Iterator[tuple[str, str, str, tuple[tuple[str, Any], ...]]]:
    """``(action, key ARN, source, context)``: what S3 asks of KMS for this request
    (:data:`S3_KMS`)."""
    needed = S3_KMS.get((operation, action), ())
    key = bucket_key(d, str(params.get("Bucket"))) if needed else None
    if key is None:
        return
    via = (("kms:ViaService", f"s3.{d.region}.amazonaws.com"),)
    for kms in needed:
        yield kms, d.arn(key) or "", "S3 User Guide, SSE-KMS permissions", via


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
        if call.operation in NO_PERMISSION:
            continue
        params = translate(call.parameters, names)
        for name in OPERATION_ACTIONS.get(call.operation, (call.operation,)):
            of = PARAMETERS_OF.get((call.operation, name))
            found, missing = _requests(
                d, call, name, actions[name], of(params) if of else params, created
            )
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
    } | _s3_context(call.operation, name)
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
    for needed, arn, source, via in [*s3_kms(d, call.operation, name, params),
                                     *passed_role(name, params)]:  # fmt: skip
        out.append(Request(call.principal, needed, arn, f"{why}: {source}", via,
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
