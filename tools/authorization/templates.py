"""Synthesized templates read as AWS will see them: each resource's physical name and ARN.

A resource's ARN is its Service Authorization Reference type's ARN format filled with the name
the template gives it, or the name CloudFormation generates where it gives none
(``<stack name>-<logical id>-<random>``, cut to the type's limit).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .aws_iam import ResourceType, resource_types

#: CloudFormation type -> (IAM service prefix, Service Authorization Reference resource type,
#: the property that names it, or None where AWS generates an id). Types absent here have no
#: ARN of their own (inline policies, bucket and topic policies, subscriptions, permissions):
#: their handlers act on the resources they reference.
SAR_TYPES: dict[str, tuple[str, str, str | None]] = {
    "AWS::IAM::Role": ("iam", "role", "RoleName"),
    "AWS::IAM::OIDCProvider": ("iam", "oidc-provider", "Url"),
    "AWS::Lambda::Function": ("lambda", "function", "FunctionName"),
    "AWS::Logs::LogGroup": ("logs", "log-group", "LogGroupName"),
    "AWS::DynamoDB::Table": ("dynamodb", "table", "TableName"),
    "AWS::SNS::Topic": ("sns", "topic", "TopicName"),
    "AWS::Events::Rule": ("events", "rule-on-default-event-bus", "Name"),
    "AWS::CloudWatch::Alarm": ("cloudwatch", "alarm", "AlarmName"),
    "AWS::CloudWatch::Dashboard": ("cloudwatch", "dashboard", "DashboardName"),
    "AWS::StepFunctions::StateMachine": ("states", "statemachine", "StateMachineName"),
    "AWS::SageMaker::Endpoint": ("sagemaker", "endpoint", "EndpointName"),
    "AWS::SageMaker::EndpointConfig": ("sagemaker", "endpoint-config", "EndpointConfigName"),
    "AWS::SageMaker::Model": ("sagemaker", "model", "ModelName"),
    "AWS::SageMaker::InferenceComponent": (
        "sagemaker",
        "inference-component",
        "InferenceComponentName",
    ),
    "AWS::ECR::Repository": ("ecr", "repository", "RepositoryName"),
    "AWS::S3::Bucket": ("s3", "bucket", "BucketName"),
    "AWS::KMS::Key": ("kms", "key", None),
    "AWS::ApplicationAutoScaling::ScalableTarget": (
        "application-autoscaling",
        "ScalableTarget",
        None,
    ),
}
#: An id AWS generates, where a type has no name: one of the id's form per resource.
GENERATED_IDS = {
    "key": lambda ref: str(uuid.uuid5(uuid.NAMESPACE_URL, f"{ref.stack}/{ref.logical_id}")),
    "ScalableTarget": lambda ref: uuid.uuid5(uuid.NAMESPACE_URL, ref.logical_id).hex,
}
#: Types whose ``Ref`` is their ARN, not their name (each type's "Return values" in the
#: CloudFormation resource reference).
REF_IS_ARN = frozenset({
    "AWS::SNS::Topic", "AWS::SageMaker::Endpoint", "AWS::SageMaker::EndpointConfig",
    "AWS::SageMaker::Model", "AWS::StepFunctions::StateMachine",
})  # fmt: skip
#: SageMaker lower-cases the names in its ARNs ("arn:aws:sagemaker:...:endpoint/my-endpoint").
LOWER_CASE_ARNS = ("sagemaker",)
_PLACEHOLDER = re.compile(r"\$\{([^}]+)\}")


@dataclass(frozen=True)
class Ref:
    stack: str
    logical_id: str


@dataclass
class Deployment:
    """One environment's templates, ``{stack name: template}``, in one account and region."""

    templates: Mapping[str, Mapping[str, Any]]
    partition: str
    region: str
    account: str

    def resources(self) -> Iterator[tuple[Ref, Mapping[str, Any]]]:
        for stack, template in self.templates.items():
            for lid, resource in template.get("Resources", {}).items():
                yield Ref(stack, lid), resource

    def resource(self, ref: Ref) -> Mapping[str, Any]:
        return self.templates[ref.stack]["Resources"][ref.logical_id]

    def name(self, ref: Ref) -> str:
        rtype = self.resource(ref)["Type"]
        _, sar_type, prop = SAR_TYPES[rtype]
        if prop is None:
            return GENERATED_IDS[sar_type](ref)
        given = self.resource(ref).get("Properties", {}).get(prop)
        if given is not None:
            name = self.render(ref.stack, given)
            if name is None:
                raise ValueError(f"{ref.stack}/{ref.logical_id}: cannot read its {prop}: {given}")
            return name.removeprefix("https://") if prop == "Url" else name
        return f"{ref.stack}-{ref.logical_id}-ABCDEFGHIJKL"[:64]

    def arn_form(self, arn_format: str, name: str, service: str) -> str:
        """``arn_format`` (``${Partition}``...) filled with this deployment and ``name``."""
        if service in LOWER_CASE_ARNS:
            name = name.lower()
        fixed = {"Partition": self.partition, "Region": self.region, "Account": self.account}
        return _PLACEHOLDER.sub(lambda m: fixed.get(m.group(1), name), arn_format)

    def sar_type(self, ref: Ref) -> ResourceType | None:
        """The resource's type in the Service Authorization Reference; None: it has no ARN."""
        known = SAR_TYPES.get(self.resource(ref)["Type"])
        if known is None:
            return None
        return _arn_formats()[known[:2]]

    def arn(self, ref: Ref) -> str | None:
        """The resource's ARN, from its reference type's format; None for a type with no ARN."""
        known = SAR_TYPES.get(self.resource(ref)["Type"])
        if known is None:
            return None
        return self.arn_form(_arn_formats()[known[:2]].arn, self.name(ref), known[0])

    def references(self, stack: str, value: Any) -> set[Ref]:
        """Every resource of ``stack`` that ``value`` refers to (``Ref``, ``Fn::GetAtt``)."""
        found: set[Ref] = set()
        resources = self.templates[stack].get("Resources", {})
        if isinstance(value, dict):
            if "Ref" in value and value["Ref"] in resources:
                found.add(Ref(stack, value["Ref"]))
            if "Fn::GetAtt" in value:
                found.add(Ref(stack, value["Fn::GetAtt"][0]))
            for v in value.values():
                found |= self.references(stack, v)
        elif isinstance(value, list):
            for v in value:
                found |= self.references(stack, v)
        return found

    def render_document(self, stack: str, value: Any) -> Any:
        """A policy document with every intrinsic rendered (an unreadable one left as is)."""
        if isinstance(value, list):
            return [self.render_document(stack, v) for v in value]
        if isinstance(value, dict):
            if {"Ref", "Fn::Join", "Fn::GetAtt", "Fn::ImportValue"} & set(value):
                text = self.render(stack, value)
                return value if text is None else text
            return {k: self.render_document(stack, v) for k, v in value.items()}
        return value

    def resource_policy(self, arn: str) -> str | None:
        """The resource policy a template gives the resource ``arn`` names (a KMS key's key
        policy; a bucket's policy, for the bucket and its objects), as JSON; None where it
        gives none."""
        bucket = arn.split(":::", 1)[1].split("/", 1)[0] if ":s3:::" in arn else None
        for ref, resource in self.resources():
            props = resource.get("Properties", {})
            if resource["Type"] == "AWS::KMS::Key" and self.arn(ref) == arn:
                policy = props.get("KeyPolicy")
                return json.dumps(self.render_document(ref.stack, policy)) if policy else None
            if (
                bucket is not None
                and resource["Type"] == "AWS::S3::BucketPolicy"
                and self.render(ref.stack, props.get("Bucket")) == bucket
            ):
                return json.dumps(self.render_document(ref.stack, props["PolicyDocument"]))
        return None

    def output(self, stack: str, key: str) -> str | None:
        """The stack's output ``key`` as AWS will give it (DescribeStacks' OutputValue)."""
        output = self.templates[stack].get("Outputs", {}).get(key)
        return None if output is None else self.render(stack, output["Value"])

    def render(self, stack: str, value: Any) -> str | None:
        """A template value as the string AWS gets; None where it depends on what AWS returns
        (a generated id) and the check cannot know it."""
        if isinstance(value, str):
            return value
        if not isinstance(value, dict):
            return None
        pseudo = {
            "AWS::AccountId": self.account,
            "AWS::Region": self.region,
            "AWS::Partition": self.partition,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": stack,
        }
        if "Ref" in value:
            if value["Ref"] in pseudo:
                return pseudo[value["Ref"]]
            resources = self.templates[stack].get("Resources", {})
            if value["Ref"] in resources and resources[value["Ref"]]["Type"] in SAR_TYPES:
                ref = Ref(stack, value["Ref"])
                arn = resources[value["Ref"]]["Type"] in REF_IS_ARN
                return self.arn(ref) if arn else self.name(ref)
            return None
        if "Fn::GetAtt" in value:
            lid, attribute = value["Fn::GetAtt"]
            ref = Ref(stack, lid)
            if self.templates[stack]["Resources"].get(lid, {}).get("Type") not in SAR_TYPES:
                return None
            return self.arn(ref) if attribute == "Arn" else self.name(ref)
        if "Fn::ImportValue" in value:
            # Another stack's export of this deployment (CloudFormation, Fn::ImportValue).
            name = self.render(stack, value["Fn::ImportValue"])
            for other, template in self.templates.items():
                for output in template.get("Outputs", {}).values():
                    exported = output.get("Export", {}).get("Name")
                    if exported is not None and self.render(other, exported) == name:
                        return self.render(other, output["Value"])
            return None
        if "Fn::Join" in value:
            sep, parts = value["Fn::Join"]
            rendered = [self.render(stack, p) for p in parts]
            return None if None in rendered else sep.join(r for r in rendered if r is not None)
        return None


def _arn_formats() -> dict[tuple[str, str], ResourceType]:
    return resource_types(tuple(sorted({t[:2] for t in SAR_TYPES.values()})))
