"""The release's roles against every AWS call the release tools made in this suite (collected
last, so every other test's calls are in :data:`aws_calls.AWS_CALLS`), by AWS's own data
(tools/authorization/): each call's action on the resources the Service Authorization Reference
says it requires, plus what AWS documents a service doing with the caller's permissions (S3's
KMS calls for an SSE-KMS bucket), evaluated with a maintained IAM evaluator against the roles
dev and prod synthesize:

- the GitHub Actions deploy role (each environment's), for the release tools' calls
  (tests/infra/aws_calls.py says which tool runs under which role, and why);
- the pull request's diff role, for the preflight's calls (``make diff`` runs the preflight);
- the preparation job's role, for what the preparation and packaging jobs do (their code's calls,
  tools/authorization/jobs.py, on what the recorded CreateTrainingJob names);
- the Bedrock import role, for what Bedrock reads for the recorded CreateModelImportJob.

The calls name the test world's resources; each call is judged in the environment whose names it
carries (a call naming neither, in both), after the test world's stand-ins are mapped to that
environment's names through the deployment's own contracts: the release stack's outputs (the
roles' ARNs), the config (the token secret, the job image's repository) and the scaling
service-linked role's documented path. A failure names the principal, the action, the ARN and
the call that needs it.
"""

from __future__ import annotations

import ast
import re
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest

from stacks.app_builder import build_stacks, cdk_json_context, promotion_source
from stacks.constructs.deploy_access import TEMPLATE_DIFF_READS
from stacks.model_release_stack import BEDROCK_IMPORT_ROLE_OUTPUT, PREP_ROLE_OUTPUT
from tests.infra import test_bedrock_import, test_preflight, test_prepare_model
from tests.infra.aws_calls import (
    AWS_CALLS,
    BEDROCK_IMPORT_CALLER,
    DEPLOY_ROLE,
    DIFF_ROLE,
    PREFLIGHT,
)
from tests.infra.test_execution_policy import ACCOUNT, synth, with_access
from tools.authorization import cdk_cli, jobs, runtime
from tools.authorization.aws_iam import Request
from tools.authorization.check import denials
from tools.authorization.recorder import Call
from tools.authorization.templates import Deployment
from tools.deploy import deployed_stacks
from typed_config import (
    DeploymentConfig,
    artifact_bucket_name,
    deploy_access_stack_name,
    release_stack_name,
    stack_name,
)
from typed_config.aws_names import BOOTSTRAP_QUALIFIER, SCALING_ROLE, SCALING_SERVICE

REPO_ROOT = Path(__file__).resolve().parents[2]
ENVS = ("dev", "prod")
PREP_JOB_ROLE = "preparation job role"
BEDROCK_IMPORT_ROLE = "Bedrock import role"


@cache
def deployment() -> Deployment:
    """dev's and prod's templates as one deployment (one account): prod's role reads dev's
    release (promotion), through dev's exports."""
    templates: dict[str, dict[str, Any]] = {}
    for env in ENVS:
        templates.update(synth(env)[1])
    return Deployment(templates, "aws", config("prod").region, ACCOUNT)


def config(env: str) -> DeploymentConfig:
    return synth(env)[0]


def _output_role(d: Deployment, stack: str, output: str) -> Any:
    (role,) = d.references(stack, d.templates[stack]["Outputs"][output]["Value"])
    return role


def policies(d: Deployment) -> dict[str, list[dict[str, Any]]]:
    """``{principal (env): its identity policies}``, each role found through the output that
    names it (the contract the workflows and tools read)."""
    found = {}
    for env in ENVS:
        cfg = config(env)
        access, release = deploy_access_stack_name(cfg), release_stack_name(cfg)
        for principal, stack, output in (
            (DEPLOY_ROLE, access, "DeployRoleArn"),
            (DIFF_ROLE, access, "DiffRoleArn"),
            (PREP_JOB_ROLE, release, PREP_ROLE_OUTPUT),
            (BEDROCK_IMPORT_ROLE, release, BEDROCK_IMPORT_ROLE_OUTPUT),
        ):
            role = _output_role(d, stack, output)
            found[f"{principal} ({env})"] = runtime.role_policies(d, role)
    return found


def env_tokens(env: str) -> tuple[str, ...]:
    """Names only ``env``'s resources carry (the config's)."""
    cfg = config(env)
    return (
        cfg.endpoint_name,
        str(cfg.image.repository_name),
        artifact_bucket_name(cfg, ACCOUNT),
        f"{cfg.project}-{cfg.env}-",
    )


def envs_of(call: Call) -> tuple[str, ...]:
    """The environment whose names the call carries (the destination's, for a promotion: it
    names the source's too); both where it names neither."""
    for env in ("prod", "dev"):
        if any(token in call.params for token in env_tokens(env)):
            return (env,)
    return ENVS


def world_to(env: str) -> dict[str, str]:
    """The test world's stand-ins -> ``env``'s names, through the deployment's contracts."""
    d, cfg = deployment(), config(env)
    release = release_stack_name(cfg)
    prep_role = d.output(release, PREP_ROLE_OUTPUT)
    import_role = d.output(release, BEDROCK_IMPORT_ROLE_OUTPUT)
    assert prep_role and import_role
    job_repository = str(cfg.image.repository_name)  # model_release_stack._job_repository_arn
    assert cfg.model_prep.job_image is None and cfg.model_prep.hf_token_secret
    return {
        test_preflight.JOB_ROLE: prep_role,
        test_prepare_model.ROLE: prep_role,
        test_bedrock_import.ROLE: import_role,
        test_preflight.ACCOUNT: ACCOUNT,
        "hf/token": cfg.model_prep.hf_token_secret,
        test_prepare_model.JOB_IMAGE.split("/")[1].split(":")[0]: job_repository,
        # IAM names a service-linked role's ARN with its path (aws-service-role/<service>/).
        SCALING_ROLE: f"aws-service-role/{SCALING_SERVICE}/{SCALING_ROLE}",
    }


def recorded() -> list[Call]:
    calls = list(AWS_CALLS.calls)
    principals = {c.principal for c in calls}
    if not {DEPLOY_ROLE, PREFLIGHT, BEDROCK_IMPORT_CALLER} <= principals:
        pytest.fail(
            f"calls recorded for {sorted(principals)} only: this check judges the calls of the "
            "whole tests/infra suite; run it with the suite (make test-infra)"
        )
    return calls


def judged(calls: list[Call]) -> dict[str, list[Call]]:
    """``{env: the calls each env's roles make}``, as the principals of that env."""
    out: dict[str, list[Call]] = {env: [] for env in ENVS}
    for call in calls:
        for env in envs_of(call):
            as_ = {
                DEPLOY_ROLE: [DEPLOY_ROLE],
                PREFLIGHT: [DEPLOY_ROLE, DIFF_ROLE],
            }.get(call.principal, [])
            out[env] += [Call(f"{p} ({env})", call.operation, call.params) for p in as_]
            if call.principal == DEPLOY_ROLE and call.operation == "sagemaker:CreateTrainingJob":
                out[env] += jobs.job_calls(f"{PREP_JOB_ROLE} ({env})", call)
            if call.operation == "bedrock:CreateModelImportJob":
                out[env] += jobs.import_role_calls(f"{BEDROCK_IMPORT_ROLE} ({env})", call)
    return out


@cache
def assembly(env: str) -> Path:
    """``env``'s cloud assembly, as ``make synth`` writes it (what the CDK CLI reads)."""
    out = Path(tempfile.mkdtemp(prefix=f"authorization-{env}-"))
    app = cdk.App(outdir=str(out), context=cdk_json_context(REPO_ROOT))
    build_stacks(app, with_access(env))
    app.synth()
    return out


def cdk_cli_requests(env: str) -> list[Request]:
    """What the CDK and docker CLIs do with each role (tools/authorization/cdk_cli.py): the
    deploy role's ``make deploy`` (tools.deploy.deployed_stacks) and ``make deploy-repository``
    (the image stack) assume the bootstrap roles, its docker pushes and pulls the config's
    repositories; the diff role's ``make diff DIFF_METHOD=template`` reads every stack of the
    app (``cdk diff`` names none: all of them)."""
    cfg, out = config(env), assembly(env)
    where = {"partition": "aws", "account": ACCOUNT, "region": cfg.region}
    deployed = [*deployed_stacks(cfg), stack_name(cfg, "image")]
    stacks = list(synth(env)[1])
    # push-image (and its registry cache, read back) and prepare-model's job image push to the
    # environment's repository; promote-image copies the promotion source's image here.
    source = promotion_source(cfg)
    repository = str(cfg.image.repository_name)
    pulled = [repository, *([str(source.image.repository_name)] if source else [])]
    return [
        *cdk_cli.docker_requests(f"{DEPLOY_ROLE} ({env})", push=[repository], pull=pulled,
                                 **where),
        *cdk_cli.deploy_requests(f"{DEPLOY_ROLE} ({env})", out, deployed,
                                 qualifier=BOOTSTRAP_QUALIFIER, **where),
        *cdk_cli.template_diff_requests(f"{DIFF_ROLE} ({env})", stacks, TEMPLATE_DIFF_READS,
                                        **where),
    ]  # fmt: skip


@cache
def all_requests() -> tuple[list[Request], list[Any]]:
    d = deployment()
    requests: list[Request] = []
    unresolved: list[Any] = []
    for env, calls in judged(recorded()).items():
        found, missing = runtime.requests(d, calls, world_to(env))
        requests += found + cdk_cli_requests(env)
        unresolved += missing
    return requests, unresolved


def test_the_release_roles_allow_every_call_their_tools_make() -> None:
    requests, unresolved = all_requests()
    assert unresolved == [], unresolved
    principals = {r.principal.split(" (")[0] for r in requests}
    assert principals == {DEPLOY_ROLE, DIFF_ROLE, PREP_JOB_ROLE, BEDROCK_IMPORT_ROLE}
    denied = denials(requests, policies(deployment()), ACCOUNT)
    assert denied == [], (
        f"{len(denied)} requests the release's roles do not allow (grant them in "
        "stacks/constructs/deploy_access.py, model_release.py or bedrock_import.py):\n"
        + "\n".join(map(str, denied))
    )


def test_the_jobs_call_list_is_the_job_codes_boto3_calls() -> None:
    """tools/authorization/jobs.py lists what the jobs' code calls: every boto3 client method
    called in container/model_prep/ is one it lists, and each it lists is called."""
    called: set[str] = set()
    for path in (REPO_ROOT / "container/model_prep").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                called.add(node.func.attr)
            if (  # paginators name the operation as a string
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get_paginator"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                called.add(str(node.args[0].value))
    boto3_methods = {m for m in called if re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)+", m)}
    known = _client_methods()
    assert (boto3_methods & known) == set(jobs.JOB_CODE_METHODS)


def _client_methods() -> set[str]:
    from botocore import xform_name
    from botocore.session import get_session

    session = get_session()
    methods = {"upload_file", "download_file", "upload_fileobj", "download_fileobj", "copy"}
    for service in ("s3", "secretsmanager", "sts", "sagemaker", "logs", "ecr", "cloudwatch"):
        methods |= {xform_name(o) for o in session.get_service_model(service).operation_names}
    return methods


def test_the_check_fails_on_a_deploy_role_without_the_release_key() -> None:
    """A role that may read a release's objects but not decrypt them is refused by S3 (SSE-KMS):
    the check names the missing kms:Decrypt on the bucket key."""
    requests, _ = all_requests()
    stripped = policies(deployment())
    for doc in stripped["deploy role (prod)"]:
        doc["Statement"] = [s for s in doc["Statement"] if s.get("Sid") != "ReleaseKeyThroughS3"]
    denied = denials(requests, stripped, ACCOUNT)
    assert denied
    assert {(x.request.principal, x.request.action) for x in denied} == {
        ("deploy role (prod)", "kms:Decrypt"),
        ("deploy role (prod)", "kms:GenerateDataKey"),
    }
    assert all(":key/" in x.request.resource for x in denied)


def _without(principal: str, drop: Any) -> dict[str, list[dict[str, Any]]]:
    """Every role's policies, ``principal``'s without the statements ``drop`` picks."""
    stripped = policies(deployment())
    for doc in stripped[principal]:
        doc["Statement"] = [s for s in doc["Statement"] if not drop(s)]
    return stripped


def _actions(statement: dict[str, Any]) -> list[str]:
    action = statement.get("Action", [])
    return action if isinstance(action, list) else [action]


@pytest.mark.parametrize(
    ("principal", "drop", "action"),
    [
        ("diff role (dev)", "ReadStackTemplates", "cloudformation:GetTemplate"),
        ("deploy role (prod)", "PassPreparationJobRole", "iam:PassRole"),
        ("deploy role (dev)", "AssumeCdkBootstrapRoles", "sts:AssumeRole"),
        ("deploy role (prod)", "CanaryController", "lambda:InvokeFunction"),
        ("Bedrock import role (dev)", "kms:Decrypt", "kms:Decrypt"),
        ("preparation job role (prod)", "secretsmanager:GetSecretValue",
         "secretsmanager:GetSecretValue"),
        ("preparation job role (prod)", "ecr:BatchGetImage", "ecr:BatchGetImage"),
    ],
)  # fmt: skip
def test_the_check_names_what_a_role_without_its_statement_may_not_do(
    principal: str, drop: str, action: str
) -> None:
    """Each principal's requests reach the evaluator: a role without the statement (by Sid,
    or by an action its statements grant) is denied that action, named with the principal."""
    requests, _ = all_requests()
    stripped = _without(principal, lambda s: s.get("Sid") == drop or drop in _actions(s))
    denied = denials(requests, stripped, ACCOUNT)
    assert (principal, action) in {(d.request.principal, d.request.action) for d in denied}
    assert {d.request.principal for d in denied} == {principal}


def test_a_manifest_written_without_if_none_match_is_denied_by_the_bucket_policy() -> None:
    """The release bucket's policy is part of the decision: the preparation job's manifest
    write without If-None-Match is an explicit deny (ManifestsOnlyByConditionalCreate), though
    the job's role allows s3:PutObject there."""
    requests, _ = all_requests()
    (put,) = {
        r
        for r in requests
        if r.principal == f"{PREP_JOB_ROLE} (prod)"
        and r.action == "s3:PutObject"
        and r.resource.endswith("/manifest.json")
    }
    assert ("s3:if-none-match", "*") in put.context and put.resource_policy
    unconditional = Request(put.principal, put.action, put.resource, put.why,
                            tuple(c for c in put.context if c[0] != "s3:if-none-match"),
                            put.resource_policy)  # fmt: skip
    (denied,) = denials([unconditional], policies(deployment()), ACCOUNT)
    assert denied.decision == "ExplicitlyDenied"
