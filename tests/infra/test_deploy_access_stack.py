"""DeployAccessStack: the role GitHub Actions assumes through OIDC, and the account's provider.

config/dev.yaml and prod.yaml carry no ``deploy_access`` section (no placeholder repository may
be trusted), so these tests add one to each. The prod template is built once through
``build_stacks`` (as ``make synth`` does, cdk-nag included); ``make validate`` cannot see the
stack while the configs lack the section, so cfn-lint and checkov run on it here."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import botocore.session
import pytest
from aws_cdk.assertions import Match, Template
from botocore import xform_name

from sizing import release_jobs
from stacks.app_builder import build_stacks, cdk_json_context
from stacks.deploy_access_stack import (
    ARTIFACT_KEY_EXPORT,
    PREP_ROLE_EXPORT,
    DeployAccessStack,
)
from tests.fixtures import fixture_root
from tools import deploy_access
from tools.validate import run_cfn_lint, run_checkov
from typed_config import DeploymentConfig, github_subjects, preparation_job_version_prefix

from .conftest import REPO_ROOT, assert_names_yaml_path, make_rule, parse, raw_config

REPOSITORY = "my-org/mangaassist-serving"
HOST = "token.actions.githubusercontent.com"
CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"


def with_access(env: str, **access: Any) -> dict[str, Any]:
    raw = raw_config(env)
    raw["deploy_access"] = {"repository": REPOSITORY, "oidc_provider": "create", **access}
    return raw


def build(cfg: DeploymentConfig, outdir: Path | None = None) -> cdk.App:
    app = cdk.App(context=cdk_json_context(REPO_ROOT), outdir=str(outdir) if outdir else None)
    build_stacks(app, cfg)
    return app


def access_template(app: cdk.App, cfg: DeploymentConfig) -> Template:
    stack = app.node.find_child(f"{cfg.project}-{cfg.env}-deploy-access")
    assert isinstance(stack, DeployAccessStack)
    return Template.from_stack(stack)


@pytest.fixture(scope="module")
def prod_access_cfg() -> DeploymentConfig:
    return parse(with_access("prod", github_environments=["prod", "prod-promote"]))


@pytest.fixture(scope="module")
def template(prod_access_cfg: DeploymentConfig) -> Template:
    return access_template(build(prod_access_cfg), prod_access_cfg)


def statements(template: Template, role: str = "Deploy") -> dict[str, dict[str, Any]]:
    """A role's policy statements by Sid (every statement has one); ``role``: the construct id,
    ``Deploy`` (environments) or ``PullRequestDiff``."""
    policies = template.find_resources("AWS::IAM::Policy")
    (policy,) = [p for lid, p in policies.items() if lid.startswith(f"{role}Role")]
    found = policy["Properties"]["PolicyDocument"]["Statement"]
    assert all("Sid" in s for s in found), found
    return {s["Sid"]: s for s in found}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def joined(value: Any) -> str:
    """A resource ARN as text: ``Fn::Join`` parts concatenated, tokens as ``{Ref}``."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        return "".join(joined(p) for p in value["Fn::Join"][1])
    if "Ref" in value:
        return "{" + value["Ref"] + "}"
    return json.dumps(value, sort_keys=True)


def resources(statement: dict[str, Any]) -> list[str]:
    return [joined(r) for r in as_list(statement["Resource"])]


# --- trust ---------------------------------------------------------------------------------


def trust(template: Template, role_id: str = "Deploy") -> dict[str, Any]:
    roles = template.find_resources("AWS::IAM::Role")
    (role,) = [r for lid, r in roles.items() if lid.startswith(f"{role_id}Role")]
    (statement,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    return dict(statement)


def test_trust_is_web_identity_with_exact_aud_and_exact_sub_per_environment(template) -> None:
    statement = trust(template)
    assert statement["Effect"] == "Allow"
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert statement["Condition"] == {
        "StringEquals": {
            f"{HOST}:aud": "sts.amazonaws.com",
            f"{HOST}:sub": [
                f"repo:{REPOSITORY}:environment:prod",
                f"repo:{REPOSITORY}:environment:prod-promote",
            ],
        }
    }
    assert "*" not in json.dumps(statement["Condition"])


def test_pull_requests_get_a_read_only_diff_role_of_their_own(template) -> None:
    """A pull request's job names no environment, so its token's sub is
    repo:OWNER/NAME:pull_request: the deploy role never trusts it. The diff role does, and may
    only read this environment's stack templates (cdk diff --method template, with its own
    credentials) and do the preflight's reads: no CDK bootstrap role, so not the lookup role's
    ReadOnlyAccess on the whole account."""
    statement = trust(template, "PullRequestDiff")
    assert statement["Condition"] == {
        "StringEquals": {
            f"{HOST}:aud": "sts.amazonaws.com",
            f"{HOST}:sub": [f"repo:{REPOSITORY}:pull_request"],
        }
    }
    assert f"repo:{REPOSITORY}:pull_request" not in json.dumps(trust(template))
    diff = statements(template, "PullRequestDiff")
    assert set(diff) == {
        "ReadStackTemplates", "PreflightBootstrapVersion", "PreflightQuotas",
        "PreflightScalingRole", "PreflightExecutionRolePolicies",
    }  # fmt: skip
    assert not [a for s in diff.values() for a in as_list(s["Action"]) if a.startswith("sts:")]
    reads = diff["ReadStackTemplates"]
    assert sorted(as_list(reads["Action"])) == [
        "cloudformation:DescribeStacks",
        "cloudformation:GetTemplate",
        "cloudformation:ListStackResources",
    ]
    stack = "arn:aws:cloudformation:us-east-1:{AWS::AccountId}:stack/mangaassist-prod-"
    assert sorted(resources(reads)) == sorted(
        f"{stack}{part}/*"
        for part in ("model-release", "image", "endpoint", "deploy-access", "execution-policy")
    )
    outputs = template.to_json()["Outputs"]
    assert f"repo:{REPOSITORY}:pull_request" in outputs["DiffRoleArn"]["Description"]


def test_no_condition_anywhere_in_the_stack_is_a_pattern_on_the_token(template) -> None:
    text = json.dumps(template.to_json())
    assert "StringLike" not in text.replace("StringLikeIfExists", "")
    assert not re.search(rf"{re.escape(HOST)}:sub\"?: ?\"[^\"]*\*", text)


def test_the_default_environment_is_the_config_env_and_sessions_outlive_the_release_job() -> None:
    cfg = parse(with_access("dev"), env="dev")
    assert github_subjects(cfg) == [f"repo:{REPOSITORY}:environment:dev"]
    template = access_template(build(cfg), cfg)
    assert trust(template)["Condition"]["StringEquals"][f"{HOST}:sub"] == [
        f"repo:{REPOSITORY}:environment:dev"
    ]
    # The dev job's own bound (build, preparation job, deploy), not STS's default hour.
    job = release_jobs.release_job(cfg)
    assert job.session_seconds >= job.minutes * 60 > 3600
    template.has_resource_properties("AWS::IAM::Role", {"MaxSessionDuration": job.session_seconds})


def test_prods_role_holds_the_longest_of_its_jobs_sessions(prod_access_cfg, template) -> None:
    sessions = {j.job: j.session_seconds for j in release_jobs.jobs(prod_access_cfg)}
    assert set(sessions) == {"release", "canary-wait", "promote"}
    longest = max(sessions.values())
    assert longest == release_jobs.CANARY_WAIT_MINUTES * 60  # the 6-hour runner's wait
    template.has_resource_properties(
        "AWS::IAM::Role", {"Description": Match.string_like_regexp("GitHub Actions release"),
                           "MaxSessionDuration": longest})  # fmt: skip


def test_a_longer_preparation_job_lengthens_the_session_and_past_12_hours_is_refused() -> None:
    default = release_jobs.release_job(parse(with_access("dev"), env="dev"))
    raw = with_access("dev")
    raw.setdefault("model_prep", {})["max_runtime_seconds"] = 4 * 3600
    cfg = parse(raw, env="dev")
    job = release_jobs.release_job(cfg)
    assert job.session_seconds == default.session_seconds + (4 * 3600 - 4500)
    assert release_jobs.role_max_session_seconds(cfg) == job.session_seconds
    raw["model_prep"]["max_runtime_seconds"] = 11 * 3600
    with pytest.raises(release_jobs.SessionTooLong) as err:
        release_jobs.role_max_session_seconds(parse(raw, env="dev"))
    assert "longer than the 12 hours IAM allows" in str(err.value)
    assert "model_prep.max_runtime_seconds" in str(err.value)


def test_immutable_ids_give_the_immutable_subject_and_hours_are_configurable() -> None:
    cfg = parse(
        with_access(
            "prod",
            immutable_ids={"owner_id": 123456, "repository_id": 456789},
            max_session_hours=6,
        )
    )
    assert github_subjects(cfg) == [
        "repo:my-org@123456/mangaassist-serving@456789:environment:prod"
    ]
    template = access_template(build(cfg), cfg)
    template.has_resource_properties("AWS::IAM::Role", {"MaxSessionDuration": 6 * 3600})


# --- the OIDC provider ---------------------------------------------------------------------


def test_create_makes_the_github_provider_for_sts_and_keeps_it(template) -> None:
    template.resource_count_is("AWS::IAM::OIDCProvider", 1)
    template.has_resource(
        "AWS::IAM::OIDCProvider",
        {
            "Properties": {
                "Url": f"https://{HOST}",
                "ClientIdList": ["sts.amazonaws.com"],
                "Tags": Match.any_value(),
            },
            "DeletionPolicy": "RetainExceptOnCreate",
        },
    )
    (provider_id,) = template.find_resources("AWS::IAM::OIDCProvider")
    assert trust(template)["Principal"] == {"Federated": {"Ref": provider_id}}


def test_existing_creates_no_provider_and_trusts_the_accounts_by_its_arn() -> None:
    cfg = parse(with_access("dev", oidc_provider="existing"), env="dev")
    template = access_template(build(cfg), cfg)
    template.resource_count_is("AWS::IAM::OIDCProvider", 0)
    assert joined(trust(template)["Principal"]["Federated"]) == (
        f"arn:aws:iam::{{AWS::AccountId}}:oidc-provider/{HOST}"
    )


# --- permissions ---------------------------------------------------------------------------


def test_the_role_may_assume_only_the_tagged_cdk_bootstrap_roles_of_its_region(template) -> None:
    s = statements(template)["AssumeCdkBootstrapRoles"]
    assert s["Action"] == "sts:AssumeRole"
    assert resources(s) == [
        "arn:aws:iam::{AWS::AccountId}:role/cdk-hnb659fds-*-{AWS::AccountId}-us-east-1"
    ]
    assert s["Condition"] == {
        "StringEquals": {
            "iam:ResourceTag/aws-cdk:bootstrap-role": [
                "deploy",
                "file-publishing",
                "image-publishing",
                "lookup",
            ]
        }
    }


def test_ecr_push_and_read_are_on_the_configured_repository_only(template) -> None:
    s = statements(template)
    assert resources(s["EcrRepository"]) == [
        "arn:aws:ecr:us-east-1:{AWS::AccountId}:repository/mangaassist-vllm-prod"
    ]
    assert {
        "ecr:BatchGetImage",  # tools/deploy.py refuses a tag missing from ECR
        "ecr:DescribeImages",
        "ecr:InitiateLayerUpload",
        "ecr:UploadLayerPart",
        "ecr:CompleteLayerUpload",
        "ecr:PutImage",
    } <= set(s["EcrRepository"]["Action"])
    assert s["EcrLogin"]["Action"] == "ecr:GetAuthorizationToken"


def test_the_endpoint_and_the_canary_controller_are_named(template) -> None:
    s = statements(template)
    assert resources(s["Endpoint"]) == [
        "arn:aws:sagemaker:us-east-1:{AWS::AccountId}:endpoint/mangaassist-vllm-prod"
    ]
    assert sorted(s["Endpoint"]["Action"]) == [
        "sagemaker:DescribeEndpoint",
        "sagemaker:UpdateEndpointWeightsAndCapacities",
    ]
    assert s["CanaryController"]["Action"] == "lambda:InvokeFunction"
    assert resources(s["CanaryController"]) == [
        "arn:aws:lambda:us-east-1:{AWS::AccountId}:function:mangaassist-vllm-prod-canary-controller"
    ]


def test_the_preparation_job_role_is_passed_to_sagemaker_only(template) -> None:
    s = statements(template)["PassPreparationJobRole"]
    assert s["Action"] == "iam:PassRole"
    assert s["Resource"] == {"Fn::ImportValue": f"mangaassist-prod-{PREP_ROLE_EXPORT}"}
    assert s["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}


def test_training_jobs_logs_and_artifacts_are_scoped(template) -> None:
    s = statements(template)
    assert resources(s["PreparationJobs"]) == [
        "arn:aws:sagemaker:us-east-1:{AWS::AccountId}:training-job/mangaassist-prod-prep-*"
    ]
    assert resources(s["PreparationJobLogs"]) == [
        "arn:aws:logs:us-east-1:{AWS::AccountId}:log-group:/aws/sagemaker/TrainingJobs",
        "arn:aws:logs:us-east-1:{AWS::AccountId}:log-group:/aws/sagemaker/TrainingJobs:*",
    ]
    bucket = "arn:aws:s3:::mangaassist-prod-models-{AWS::AccountId}"
    assert resources(s["ReleasesRead"]) == [f"{bucket}/models/*"]
    assert resources(s["PreparationJobInputs"]) == [f"{bucket}/models/jobs/*"]
    assert s["ReleasesList"]["Condition"] == {"StringLikeIfExists": {"s3:prefix": ["models/*"]}}
    key = s["ReleaseKeyThroughS3"]
    assert key["Resource"] == {"Fn::ImportValue": f"mangaassist-prod-{ARTIFACT_KEY_EXPORT}"}
    assert key["Condition"] == {"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}}


def test_a_job_prepare_model_names_is_one_the_role_may_run(template, prod_access_cfg) -> None:
    """The round trip: the ARN pattern the synthesized role grants matches the name
    tools/prepare_model.py gives a job (one definition:
    typed_config.preparation_job_version_prefix)."""
    import fnmatch

    version = "m-0123456789abcdef"
    name = f"{preparation_job_version_prefix(prod_access_cfg, version)}1128040000"
    arn = f"arn:aws:sagemaker:us-east-1:{{AWS::AccountId}}:training-job/{name.lower()}"
    (granted,) = resources(statements(template)["PreparationJobs"])
    assert fnmatch.fnmatchcase(arn, granted)
    other = arn.replace("mangaassist-prod-", "mangaassist-dev-")
    assert not fnmatch.fnmatchcase(other, granted)


def test_star_resources_are_only_the_actions_with_no_resource_type(template) -> None:
    """Service Authorization Reference: these list no resource type; everything else is named."""
    star = {sid for sid, s in statements(template).items() if "*" in as_list(s["Resource"])}
    assert star == {
        "EcrLogin",
        "PreflightQuotas",
        "ScalableTargets",
        "ListPreparationJobs",
        "AdapterEvidence",
    }
    actions = {a for sid in star for a in as_list(statements(template)[sid]["Action"])}
    assert actions == {
        "ecr:GetAuthorizationToken",
        "sagemaker:ListTrainingJobs",
        "servicequotas:ListServiceQuotas",
        "servicequotas:ListAWSDefaultServiceQuotas",
        "application-autoscaling:DescribeScalableTargets",
        "cloudwatch:GetMetricData",
    }
    assert not [
        a
        for s in statements(template).values()
        for a in as_list(s["Action"])
        if "*" in a
        or (
            a.startswith("iam:")
            and a
            not in (
                "iam:GetRole",
                "iam:PassRole",
                "iam:SimulatePrincipalPolicy",
                "iam:ListAttachedRolePolicies",
            )
        )
    ]


def test_the_token_secret_check_reads_that_secret_and_simulates_the_job_role_only(template) -> None:
    s = statements(template)
    assert resources(s["PreflightTokenSecret"]) == [
        "arn:aws:secretsmanager:us-east-1:{AWS::AccountId}:secret:mangaassist/hf-token-??????"
    ]
    assert as_list(s["PreflightJobRoleSimulation"]["Action"]) == ["iam:SimulatePrincipalPolicy"]
    assert s["PreflightJobRoleSimulation"]["Resource"] == {
        "Fn::ImportValue": f"mangaassist-prod-{PREP_ROLE_EXPORT}"
    }


def test_the_preflight_reads_are_the_bootstrap_version_and_the_scaling_role(template) -> None:
    s = statements(template)
    assert resources(s["PreflightBootstrapVersion"]) == [
        "arn:aws:ssm:us-east-1:{AWS::AccountId}:parameter/cdk-bootstrap/hnb659fds/version"
    ]
    assert resources(s["PreflightScalingRole"]) == [
        "arn:aws:iam::{AWS::AccountId}:role/aws-service-role/sagemaker.application-autoscaling"
        ".amazonaws.com/AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
    ]
    assert resources(s["PreflightExecutionRolePolicies"]) == [
        "arn:aws:iam::{AWS::AccountId}:role/cdk-hnb659fds-cfn-exec-role-{AWS::AccountId}-us-east-1"
    ]


#: The files whose AWS calls a release job makes with the role (the make targets in
#: .github/workflows/release.yml and pull-request.yml), and calls that are not the role's.
CALLERS = [
    "tools/preflight.py",
    "tools/deploy.py",
    "tools/promote.py",
    "tools/canary.py",
    "tools/prepare_model.py",
    "tools/model_release.py",
    "tools/push_image.py",
    "tools/live_images.py",
    "tools/release_artifacts.py",
    "container/model_prep/artifact.py",
    "tools/adapter_release/__main__.py",
    "tools/adapter_release/publish.py",
    "tools/adapter_release/rollout.py",
    "tools/adapter_release/target.py",
]
NOT_THE_ROLES = {
    "sts:GetCallerIdentity",  # needs no permission (STS API reference, GetCallerIdentity)
    "s3:CreateBucket",  # tools/model_release.py local: the S3 API served on this machine
}
SERVICES = {  # boto3 client name -> IAM service prefix
    "application-autoscaling": "application-autoscaling",
    "cloudformation": "cloudformation",
    "cloudwatch": "cloudwatch",
    "ecr": "ecr",
    "iam": "iam",
    "lambda": "lambda",
    "logs": "logs",
    "s3": "s3",
    "sagemaker": "sagemaker",
    "sagemaker-runtime": "sagemaker",
    "secretsmanager": "secretsmanager",
    "service-quotas": "servicequotas",
    "ssm": "ssm",
    "sts": "sts",
}
#: Granted though no boto3 call in CALLERS names them: who needs each.
NOT_BOTO3_CALLS = {
    "sts:AssumeRole": "cdk deploy / diff (the CDK bootstrap roles)",
    "sagemaker:CreateTrainingJob": "tools/prepare_model.py, sagemaker-core TrainingJob.create",
    "iam:PassRole": "CreateTrainingJob's RoleArn (the preparation job role)",
    "sagemaker:StopTrainingJob": "the stop command make prepare-model prints on Ctrl-C",
    "ecr:BatchCheckLayerAvailability": "docker push / buildx --push",
    "ecr:InitiateLayerUpload": "docker push / buildx --push",
    "ecr:UploadLayerPart": "docker push / buildx --push",
    "ecr:CompleteLayerUpload": "docker push / buildx --push",
    "ecr:PutImage": "docker push / buildx --push (and the buildcache tag)",
    "ecr:GetDownloadUrlForLayer": "docker pull of buildx's registry cache",
    "kms:Decrypt": "S3 GetObject of a release (the bucket's KMS key)",
    "kms:GenerateDataKey": "S3 PutObject of a job's inputs (the bucket's KMS key)",
    "application-autoscaling:DeregisterScalableTarget": "tools/deploy.py through "
    "lambdas/canary_controller/canary_scaling.py release (a controller-owned canary's type change)",
    "cloudwatch:DescribeAlarms": "DeregisterScalableTarget deleting the target-tracking alarms",
    "cloudwatch:DeleteAlarms": "DeregisterScalableTarget deleting the target-tracking alarms",
}
#: IAM actions whose name is not the operation's (S3 transfer helpers, ListObjectsV2, Lambda).
ACTION_OF = {
    "s3:ListObjectsV2": "s3:ListBucket",
    "s3:DownloadFile": "s3:GetObject",
    "s3:UploadFile": "s3:PutObject",
    "s3:Copy": "s3:PutObject",  # the managed copy: CopyObject / UploadPartCopy
    "lambda:Invoke": "lambda:InvokeFunction",
}


def aws_calls() -> dict[str, set[str]]:
    """``{IAM action: files}`` for every boto3 operation called in :data:`CALLERS` (a
    snake_case method, or a quoted name: ``get_paginator(op)``), by botocore's models."""
    session = botocore.session.get_session()
    operations: dict[str, str] = {
        "download_file": "s3:DownloadFile",
        "upload_file": "s3:UploadFile",
        "copy": "s3:Copy",
    }
    for client, prefix in SERVICES.items():
        for op in session.get_service_model(client).operation_names:
            operations.setdefault(xform_name(op), f"{prefix}:{op}")
    found: dict[str, set[str]] = {}
    for rel in CALLERS:
        text = (REPO_ROOT / rel).read_text()
        names = re.findall(r"\.([a-z_0-9]+)\(", text)
        names += re.findall(r"[\"']([a-z_0-9]+)[\"']", text)  # paginators, by name
        for name in names:
            if name in operations:
                action = ACTION_OF.get(operations[name], operations[name])
                found.setdefault(action, set()).add(rel)
    return found


def test_every_aws_call_of_the_release_tools_is_granted(template) -> None:
    granted = {a for s in statements(template).values() for a in as_list(s["Action"])}
    calls = aws_calls()
    assert {
        "sagemaker:DescribeEndpoint",
        "lambda:InvokeFunction",
        "ecr:BatchGetImage",
        "servicequotas:ListServiceQuotas",
        "sagemaker:DescribeTrainingJob",
    } <= set(calls)
    missing = {a: sorted(f) for a, f in calls.items() if a not in granted | NOT_THE_ROLES}
    assert missing == {}, (
        "these AWS calls of the release tools are not granted to the deploy role "
        "(stacks/constructs/deploy_access.py): " + json.dumps(missing)
    )


def test_every_granted_action_is_a_call_of_the_release_or_says_whose_it_is(template) -> None:
    """The other direction: nothing granted that no release step calls."""
    granted = {a for s in statements(template).values() for a in as_list(s["Action"])}
    unexplained = granted - set(aws_calls()) - set(NOT_BOTO3_CALLS)
    assert unexplained == set()
    assert set(NOT_BOTO3_CALLS) <= granted


def test_prod_may_read_devs_release_and_write_promoted_versions_only(template) -> None:
    """promotion.from_env: dev (config/prod.yaml): prod's role reads dev's repository and
    release prefix (dev's bucket key through S3 only) and writes versions under its own."""
    s = statements(template)
    assert resources(s["PromotionSourceImage"]) == [
        "arn:aws:ecr:us-east-1:{AWS::AccountId}:repository/mangaassist-vllm-dev"
    ]
    assert "ecr:PutImage" not in as_list(s["PromotionSourceImage"]["Action"])
    dev_bucket = "arn:aws:s3:::mangaassist-dev-models-{AWS::AccountId}"
    assert resources(s["PromotionSourceRead"]) == [f"{dev_bucket}/models/*"]
    assert as_list(s["PromotionSourceRead"]["Action"]) == ["s3:GetObject"]
    assert s["PromotionSourceKeyThroughS3"]["Resource"] == {
        "Fn::ImportValue": f"mangaassist-dev-{ARTIFACT_KEY_EXPORT}"
    }
    assert as_list(s["PromotionSourceKeyThroughS3"]["Action"]) == ["kms:Decrypt"]
    assert resources(s["PromotedReleases"]) == [
        "arn:aws:s3:::mangaassist-prod-models-{AWS::AccountId}/models/m-*"
    ]
    dev = parse(with_access("dev"), env="dev")
    assert not [sid for sid in statements(access_template(build(dev), dev)) if "Promot" in sid]


def test_the_imported_exports_are_the_model_release_stacks(prod_access_cfg) -> None:
    app = build(prod_access_cfg)
    release = Template.from_stack(app.node.find_child("mangaassist-prod-model-release"))
    exports = {o.get("Export", {}).get("Name") for o in release.to_json()["Outputs"].values()}
    assert {f"mangaassist-prod-{PREP_ROLE_EXPORT}", f"mangaassist-prod-{ARTIFACT_KEY_EXPORT}"} <= (
        exports
    )
    outputs = release.to_json()["Outputs"].values()
    (prep,) = [o for o in outputs if o["Export"]["Name"].endswith(PREP_ROLE_EXPORT)]
    assert "PreparationJobRole" in prep["Value"]["Fn::GetAtt"][0]


def test_outputs_name_the_role_arn(template) -> None:
    outputs = template.to_json()["Outputs"]
    assert outputs["DeployRoleArn"]["Value"]["Fn::GetAtt"][1] == "Arn"
    description = outputs["DeployRoleArn"]["Description"]
    assert f"repo:{REPOSITORY}:environment:prod-promote" in description


# --- config --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["my-org", "my-org/repo/extra", "-org/repo", "org-/repo", "my--org/repo", "org/*",
     "org/re po", "org/..", "a" * 40 + "/repo", "repo:org/x"],
)  # fmt: skip
def test_a_repository_that_is_not_owner_slash_name_is_refused_naming_the_field(value) -> None:
    raw = with_access("prod")
    raw["deploy_access"]["repository"] = value
    assert_names_yaml_path(raw, "deploy_access.repository", "is not OWNER/NAME")


def test_environments_are_exact_names_listed_once() -> None:
    raw = with_access("prod", github_environments=["prod", "prod:*"])
    assert_names_yaml_path(
        raw, "deploy_access.github_environments.1", "is not a GitHub environment name"
    )
    raw = with_access("prod", github_environments=["prod", "Prod"])
    assert_names_yaml_path(raw, "deploy_access.github_environments", "lists an environment twice")
    raw = with_access("prod", oidc_provider="maybe")
    assert_names_yaml_path(raw, "deploy_access.oidc_provider", "'create' or 'existing'")


def test_the_role_needs_a_named_repository() -> None:
    raw = with_access("prod")
    del raw["image"]["repository_name"]
    assert_names_yaml_path(raw, "image.repository_name", "deploy_access needs it")


def test_without_the_section_there_is_no_stack(prod_cfg) -> None:
    assert prod_cfg.deploy_access is None
    app = build(prod_cfg)
    assert app.node.try_find_child("mangaassist-prod-deploy-access") is None


# --- both environments through the validators ----------------------------------------------


@pytest.fixture(scope="module", params=["dev", "prod"])
def synthesized(request, tmp_path_factory) -> Path:
    """The environment's app with the section, synthesized with cdk-nag (AwsSolutionsChecks
    fails the synth on any unsuppressed finding) into a directory; the access template's path."""
    env = request.param
    cfg = parse(with_access(env, oidc_provider="existing" if env == "dev" else "create"), env=env)
    out = tmp_path_factory.mktemp(f"access-{env}")
    assembly = build(cfg, out).synth()
    stack = assembly.get_stack_by_name(f"mangaassist-{env}-deploy-access")
    errors = [m for m in stack.messages if m.level == cdk.cx_api.SynthesisMessageLevel.ERROR]
    assert errors == []
    return out / stack.template_file


def test_cfn_lint_reports_nothing(synthesized) -> None:
    assert run_cfn_lint([synthesized], "us-east-1") == []


@pytest.mark.skipif(not CHECKOV.exists(), reason="run `make checkov-venv` (make test does)")
def test_checkov_reports_no_failed_checks(synthesized) -> None:
    passed, failed = run_checkov(CHECKOV, [synthesized])
    assert failed == []
    assert passed >= 10


# --- make deploy-access --------------------------------------------------------------------


def test_make_deploy_access_asks_before_broadening_iam() -> None:
    recipe = make_rule("deploy-access")
    assert "--require-approval broadening" in recipe
    assert "never" not in recipe
    assert "tools.deploy_access stack" in recipe and "--exclusively" in recipe


def copy_configs(tmp_path: Path, **sections: dict[str, Any] | None) -> Path:
    """A repository root under ``tmp_path`` with config/ copied and ``deploy_access`` set per
    env (None: no section)."""
    import yaml

    fixture_root(tmp_path)
    for env, section in sections.items():
        raw = raw_config(env)
        if section is not None:
            raw["deploy_access"] = section
        (tmp_path / "config" / f"{env}.yaml").write_text(yaml.safe_dump(raw))
    return tmp_path


def test_deploy_access_without_the_section_names_the_fields(tmp_path, capsys) -> None:
    root = copy_configs(tmp_path)
    assert deploy_access.cmd_stack("dev", root) == 2
    err = capsys.readouterr().err
    assert "deploy_access.repository" in err and "deploy_access.oidc_provider" in err


def test_deploy_access_prints_the_stack_and_warns_of_a_second_creator(tmp_path, capsys) -> None:
    create = {"repository": REPOSITORY, "oidc_provider": "create"}
    root = copy_configs(tmp_path, dev=create, prod=create)
    assert deploy_access.cmd_stack("prod", root) == 0
    out, err = capsys.readouterr()
    assert out == "mangaassist-prod-deploy-access\n"
    assert "config/dev.yaml also says deploy_access.oidc_provider: create" in err
    root = copy_configs(tmp_path / "b", dev={**create, "oidc_provider": "existing"}, prod=create)
    assert deploy_access.cmd_stack("prod", root) == 0
    assert capsys.readouterr().err == ""
