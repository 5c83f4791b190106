"""What the CDK CLI (``cdk deploy``, ``cdk diff``) and the docker CLI do with the caller's
credentials.

Neither is botocore, so their calls are not recorded. The CDK CLI's come from the cloud
assembly the app synthesizes (the contract between the app and the CLI) and the CLI's own files:

- ``cdk deploy`` assumes each stack's deploy role (the stack artifact's ``assumeRoleArn``) and
  the publishing role of each of its assets (the asset manifest's destinations'
  ``assumeRoleArn``); each bootstrap role carries the tag ``aws-cdk:bootstrap-role`` the
  bootstrap template gives it (node_modules/aws-cdk/lib/api/bootstrap/bootstrap-template.yaml),
  which IAM puts in the request's context as the role's resource tag.
- ``cdk diff --method template`` reads each stack's deployed template with the caller's own
  credentials (stacks/constructs/deploy_access.TEMPLATE_DIFF_READS, from the CLI's source).
- ``docker`` pushes and pulls (:func:`docker_requests`): the actions ECR's guide lists.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from .aws_iam import Request

BOOTSTRAP_TEMPLATE = (
    Path(__file__).resolve().parents[2]
    / "node_modules/aws-cdk/lib/api/bootstrap/bootstrap-template.yaml"
)
BOOTSTRAP_TAG = "aws-cdk:bootstrap-role"


class _CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short tags read as plain values."""


_CfnLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


@cache
def bootstrap_role_tags() -> dict[str, str]:
    """``{RoleName's pattern (Fn::Sub text): its aws-cdk:bootstrap-role tag}``."""
    template = yaml.load(BOOTSTRAP_TEMPLATE.read_text(), Loader=_CfnLoader)
    found = {}
    for resource in template["Resources"].values():
        props = resource.get("Properties", {})
        tags = {t["Key"]: t["Value"] for t in props.get("Tags", []) if isinstance(t, dict)}
        name = props.get("RoleName", {})
        if resource["Type"] == "AWS::IAM::Role" and BOOTSTRAP_TAG in tags and "Fn::Sub" in name:
            found[name["Fn::Sub"]] = tags[BOOTSTRAP_TAG]
    return found


def _render(arn: str, *, partition: str, account: str, region: str) -> str:
    return (
        arn.replace("${AWS::Partition}", partition)
        .replace("${AWS::AccountId}", account)
        .replace("${AWS::Region}", region)
    )


def _tag(role_arn: str, qualifier: str, account: str, region: str) -> str | None:
    name = role_arn.split(":role/", 1)[1]
    for pattern, tag in bootstrap_role_tags().items():
        filled = (
            pattern.replace("${Qualifier}", qualifier)
            .replace("${AWS::AccountId}", account)
            .replace("${AWS::Region}", region)
        )
        if filled == name:
            return tag
    return None


def deploy_role_arns(assembly: Path, stacks: Iterable[str]) -> dict[str, str]:
    """``{role ARN (with ${AWS::...} placeholders): why}``: the roles ``cdk deploy`` of
    ``stacks`` assumes (each stack's deploy role and its assets' publishing roles)."""
    manifest = json.loads((assembly / "manifest.json").read_text())
    artifacts: dict[str, Any] = manifest["artifacts"]
    roles: dict[str, str] = {}
    for stack in stacks:
        artifact = artifacts[stack]
        roles[artifact["properties"]["assumeRoleArn"]] = f"cdk deploy {stack} (its deploy role)"
        for dep in artifact.get("dependencies", []):
            if artifacts[dep]["type"] != "cdk:asset-manifest":
                continue
            assets = json.loads((assembly / artifacts[dep]["properties"]["file"]).read_text())
            for kind in ("files", "dockerImages"):
                for asset in assets.get(kind, {}).values():
                    for dest in asset["destinations"].values():
                        roles[dest["assumeRoleArn"]] = f"cdk deploy {stack} (publishing its {kind})"
    return roles


def deploy_requests(
    principal: str,
    assembly: Path,
    stacks: Iterable[str],
    *,
    qualifier: str,
    partition: str,
    account: str,
    region: str,
) -> Iterator[Request]:
    """sts:AssumeRole of every role ``cdk deploy`` of ``stacks`` assumes, with the role's
    bootstrap tag in the context (``iam:ResourceTag/...`` and ``aws:ResourceTag/...``)."""
    for arn, why in deploy_role_arns(assembly, stacks).items():
        role = _render(arn, partition=partition, account=account, region=region)
        tag = _tag(role, qualifier, account, region)
        context = (
            ((f"iam:ResourceTag/{BOOTSTRAP_TAG}", tag), (f"aws:ResourceTag/{BOOTSTRAP_TAG}", tag))
            if tag
            else ()
        )
        yield Request(principal, "sts:AssumeRole", role, why, context)


def template_diff_requests(
    principal: str, stacks: Iterable[str], reads: Iterable[str], *, partition: str, account: str,
    region: str,
) -> Iterator[Request]:  # fmt: skip
    """``cdk diff --method template``'s reads of each stack (its ARN ends in a generated id)."""
    for stack in stacks:
        arn = (
            f"arn:{partition}:cloudformation:{region}:{account}:stack/{stack}/"
            "0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c5d"
        )
        for action in reads:
            yield Request(principal, action, arn, f"cdk diff --method template of {stack}")


#: What ``docker push`` (buildx ``--push``, ``imagetools create``) asks of ECR for a repository
#: it writes: "IAM permissions for pushing an image to an Amazon ECR private repository" (ECR
#: User Guide, https://docs.aws.amazon.com/AmazonECR/latest/userguide/image-push-iam.html), and
#: the registry token on ``*``.
ECR_PUSH = (
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:CompleteLayerUpload",
    "ecr:InitiateLayerUpload",
    "ecr:PutImage",
    "ecr:UploadLayerPart",
)
#: What pulling an image's manifest and layers asks (a registry cache read back, the source of
#: an ``imagetools create`` copy): ECR User Guide, "Private repository policies" (pull).
ECR_PULL = ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer")


def docker_requests(
    principal: str,
    *,
    push: Iterable[str],
    pull: Iterable[str],
    partition: str,
    account: str,
    region: str,
) -> Iterator[Request]:
    """The docker CLI's ECR requests (it is not botocore, so not recorded): a login, the push
    actions on each repository of ``push`` and the pull actions on each of ``pull``."""
    yield Request(principal, "ecr:GetAuthorizationToken", "*", "docker login (ECR token)")
    for names, actions, why in ((push, ECR_PUSH, "docker push"), (pull, ECR_PULL, "docker pull")):
        for name in names:
            arn = f"arn:{partition}:ecr:{region}:{account}:repository/{name}"
            for action in actions:
                yield Request(principal, action, arn, f"{why} of {name}")
