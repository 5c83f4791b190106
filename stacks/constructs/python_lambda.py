"""What the product's Python Lambdas share: runtime, role and log group, checkov skips.

Used by the canary controller and the smoke gate (and the rollout state machine's log group).
Children keep the ids ``Logs``, ``Role`` and ``Function`` under the calling construct.

A function's code is one package under lambdas/ (:func:`package_code`): the asset holds the
package as a folder at its root, and its handler names the package
(``canary_controller.handler.handler``), so Lambda imports the package as a package and its
modules' relative imports (``from . import rules``) work there as they do under ``lambdas.``.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import CfnResource, Duration, RemovalPolicy, Stack, SymlinkFollowMode
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

# Re-exported for smoke_gate.py until it takes an EndpointRef (endpoint_ref.grant_invoke).

LAMBDA_RUNTIME = lambda_.Runtime.PYTHON_3_14


#: checkov findings that do not fit these functions, with the reason (Metadata.checkov.skip).
FUNCTION_CHECKOV_SKIPS = {
    "CKV_AWS_116": "Invoked synchronously (CloudFormation, Step Functions, the CLI); a DLQ only "
    "catches asynchronous invocations.",
    "CKV_AWS_117": "Calls only AWS APIs (SageMaker, CloudWatch, DynamoDB, SNS); no VPC resource "
    "to reach, and a VPC would add NAT/endpoint cost and cold-start time.",
    "CKV_AWS_115": "Reserved concurrency would be taken from the account pool (new accounts "
    "cannot reserve any); the controller serialises itself with a DynamoDB lock instead.",
    "CKV_AWS_173": "Environment holds resource names and rollout numbers only, no secrets; "
    "encrypted at rest with the AWS managed Lambda key.",
}
LOG_GROUP_CHECKOV_SKIP = {
    "CKV_AWS_158": "Holds rollout decisions and smoke-gate reasons only (no prompts or customer "
    "data); encrypted at rest by CloudWatch Logs' own key."
}


def checkov_skip(construct: IConstruct, skips: dict[str, str]) -> None:
    cfn = construct.node.default_child
    assert isinstance(cfn, CfnResource)
    cfn.add_metadata("checkov", {"skip": [{"id": k, "comment": v} for k, v in skips.items()]})


def tidy_function(function: IConstruct, role: IConstruct) -> None:
    """checkov skips for a function, and its DependsOn reduced to the role's policy: the
    ``Role`` GetAtt already orders function after role (cfn-lint W3005 flags the duplicate)."""
    checkov_skip(function, FUNCTION_CHECKOV_SKIPS)
    fn_cfn = function.node.default_child
    policy = role.node.try_find_child("DefaultPolicy")
    assert isinstance(fn_cfn, CfnResource) and policy is not None
    policy_cfn = policy.node.default_child
    assert isinstance(policy_cfn, CfnResource)
    fn_cfn.add_override("DependsOn", [Stack.of(function).get_logical_id(policy_cfn)])


def decision_log_group(
    scope: Construct, construct_id: str, *, name: str | None = None
) -> logs.LogGroup:
    """A log group of rollout decisions or smoke-gate reasons: kept one month, deleted with the
    stack, its checkov skip recorded. Every log group of the Lambdas and the state machine;
    ``name``: a fixed name (the state machine's, under ``/aws/vendedlogs/``), else generated."""
    log_group = logs.LogGroup(
        scope,
        construct_id,
        log_group_name=name,
        retention=logs.RetentionDays.ONE_MONTH,
        removal_policy=RemovalPolicy.DESTROY,
    )
    checkov_skip(log_group, LOG_GROUP_CHECKOV_SKIP)
    return log_group


def lambda_role(scope: Construct, *, description: str) -> tuple[iam.Role, logs.LogGroup]:
    """The function's own role and its log group (:func:`decision_log_group`)."""
    log_group = decision_log_group(scope, "Logs")
    role = iam.Role(
        scope,
        "Role",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        description=description,
    )
    return role, log_group


def package_code(package_dir: Path) -> lambda_.AssetCode:
    """The asset of the Lambda package ``package_dir`` (``lambdas/<package>``): its parent as the
    code root with nothing in it but the package (no sibling function's code, no bytecode), so
    the asset's only top-level entry is the ``<package>/`` folder."""
    name = package_dir.name
    only_the_package = ["*", f"!{name}", f"!{name}/**", "__pycache__", "*.pyc"]
    # A link to a file outside the code root (the answer-timing contract the container shares,
    # lambdas/canary_controller/answer_timing_contract.py) is copied as the file it names, said
    # explicitly rather than left to the default.
    return lambda_.Code.from_asset(
        str(package_dir.parent),
        exclude=only_the_package,
        follow_symlinks=SymlinkFollowMode.EXTERNAL,
    )


def package_handler(package_dir: Path, handler: str = "handler.handler") -> str:
    """The Lambda handler string of ``handler`` (module.function inside the package)."""
    return f"{package_dir.name}.{handler}"


def python_function(
    scope: Construct,
    *,
    package_dir: Path,
    role: iam.Role,
    log_group: logs.LogGroup,
    timeout: Duration,
    description: str,
    function_name: str | None = None,
    environment: dict[str, str] | None = None,
    handler: str = "handler.handler",
) -> lambda_.Function:
    """``handler`` (module.function inside the package ``package_dir``, :func:`package_code`),
    writing to ``log_group`` as ``role``."""
    log_group.grant_write(role)
    return lambda_.Function(
        scope,
        "Function",
        function_name=function_name,
        runtime=LAMBDA_RUNTIME,
        handler=package_handler(package_dir, handler),
        code=package_code(package_dir),
        role=role,
        log_group=log_group,
        timeout=timeout,
        memory_size=256,
        description=description,
        environment=environment,
    )
