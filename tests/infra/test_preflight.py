"""tools/preflight.py: what `make diff` / `make deploy` say when the AWS edge is not ready.

The AWS calls are botocore Stubber-ed real clients: STS refusing the credentials, SSM without the
bootstrap parameter, the wrong account."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from tools import preflight
from typed_config import DeploymentConfig

REGION = "us-east-1"
ACCOUNT = "111122223333"
BOOTSTRAP = f"/cdk-bootstrap/{preflight.BOOTSTRAP_QUALIFIER}/version"


class NoCredentials:
    def get_credentials(self) -> None:
        return None


#: The release stack also exports the Bedrock import role; its output ends in "RoleArn" too
#: and comes first here, so a lookup by a loose suffix would take the wrong role.
IMPORT_ROLE = "arn:aws:iam::123456789012:role/bedrock-import"


def stubbed(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, dict[str, Any], dict[str, Stubber]]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    session = boto3.Session(region_name=REGION)
    clients = {name: session.client(name, region_name=REGION) for name in ("sts", "ssm")}
    stubs = {name: Stubber(c) for name, c in clients.items()}
    for s in stubs.values():
        s.activate()
    return session, clients, stubs


def identity(account: str = ACCOUNT) -> dict[str, str]:
    return {"Account": account, "Arn": f"arn:aws:iam::{account}:user/ci", "UserId": "AIDA"}


def test_no_credentials_names_the_fix_and_the_offline_commands(capsys) -> None:
    assert preflight.main(["--env", "prod"], session=NoCredentials()) == 2
    err = capsys.readouterr().err
    assert "no AWS credentials found" in err and "AWS_PROFILE" in err
    assert "make synth ENV=prod and make demo run offline" in err


def test_refused_credentials_are_reported(monkeypatch) -> None:
    session, clients, stubs = stubbed(monkeypatch)
    stubs["sts"].add_client_error("get_caller_identity", "ExpiredToken", "token expired")
    problems = preflight.check(region=REGION, account=None, session=session, client=clients.get)
    assert len(problems) == 1 and "refused by STS" in problems[0] and "ExpiredToken" in problems[0]


def test_unbootstrapped_account_gets_the_bootstrap_command(monkeypatch) -> None:
    session, clients, stubs = stubbed(monkeypatch)
    stubs["sts"].add_response("get_caller_identity", identity())
    stubs["ssm"].add_client_error(
        "get_parameter", "ParameterNotFound", expected_params={"Name": BOOTSTRAP}
    )
    problems = preflight.check(region=REGION, account=None, session=session, client=clients.get)
    assert problems == [
        f"account {ACCOUNT} is not CDK-bootstrapped in {REGION} (no SSM parameter {BOOTSTRAP}): "
        f"run `npx cdk bootstrap aws://{ACCOUNT}/{REGION}`"
    ]


def test_wrong_account_is_named(monkeypatch) -> None:
    session, clients, stubs = stubbed(monkeypatch)
    stubs["sts"].add_response("get_caller_identity", identity("999988887777"))
    stubs["ssm"].add_response(
        "get_parameter",
        {"Parameter": {"Name": BOOTSTRAP, "Type": "String", "Value": "30"}},
        {"Name": BOOTSTRAP},
    )
    problems = preflight.check(region=REGION, account=ACCOUNT, session=session, client=clients.get)
    assert len(problems) == 1 and "account 999988887777" in problems[0] and ACCOUNT in problems[0]


def test_ready_edge_passes(monkeypatch) -> None:
    session, clients, stubs = stubbed(monkeypatch)
    stubs["sts"].add_response("get_caller_identity", identity())
    stubs["ssm"].add_response(
        "get_parameter",
        {"Parameter": {"Name": BOOTSTRAP, "Type": "String", "Value": "30"}},
        {"Name": BOOTSTRAP},
    )
    assert (
        preflight.check(region=REGION, account=ACCOUNT, session=session, client=clients.get) == []
    )
    for s in stubs.values():
        s.assert_no_pending_responses()


def quota(name: str, value: float, code: str) -> dict[str, Any]:
    return {"ServiceCode": "sagemaker", "QuotaName": name, "QuotaCode": code, "Value": value}


ENDPOINT_QUOTA = "ml.g6e.xlarge for endpoint usage"
JOB_QUOTA = "ml.g6e.xlarge for training job usage"


def capacity_clients(monkeypatch, applied, defaults=None, role: bool = True):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    session = boto3.Session(region_name=REGION)
    clients = {n: session.client(n, region_name=REGION) for n in ("service-quotas", "iam")}
    stubs = {n: Stubber(c) for n, c in clients.items()}
    stubs["service-quotas"].add_response(
        "list_service_quotas", {"Quotas": applied}, {"ServiceCode": "sagemaker"}
    )
    if defaults is not None:
        stubs["service-quotas"].add_response(
            "list_aws_default_service_quotas", {"Quotas": defaults}, {"ServiceCode": "sagemaker"}
        )
    if role:
        found = {
            "Path": "/aws-service-role/",
            "RoleName": preflight.SCALING_ROLE,
            "RoleId": "AROA1234567890EXAMPLE",
            "Arn": f"arn:aws:iam::{ACCOUNT}:role/{preflight.SCALING_ROLE}",
            "CreateDate": "2026-01-01T00:00:00Z",
        }
        stubs["iam"].add_response("get_role", {"Role": found}, {"RoleName": preflight.SCALING_ROLE})
    else:
        stubs["iam"].add_client_error("get_role", "NoSuchEntity", "role not found")
    for s in stubs.values():
        s.activate()
    return clients, stubs


def peak_need(cfg: DeploymentConfig) -> int:
    """The frozen prod's endpoint need: blue + green at max capacity (its largest, above the
    shadow stage's and equal to the promotion deploy's)."""
    return 2 * sum(v.max_capacity for v in cfg.scaling.variants.values())


def test_quotas_below_the_plans_peak_name_the_increase(monkeypatch, prod_cfg) -> None:
    """The plan needs blue + green at max capacity for endpoint usage and one training instance;
    an account at the default of 4 is told so, with the command that asks for the need."""
    need = peak_need(prod_cfg)
    applied = [quota(ENDPOINT_QUOTA, 4, "L-1234ABCD")]
    defaults = [quota(ENDPOINT_QUOTA, 2, "L-1234ABCD"), quota(JOB_QUOTA, 0, "L-5678EFGH")]
    clients, stubs = capacity_clients(monkeypatch, applied, defaults)
    problems = preflight.capacity_check(prod_cfg, clients.get)
    assert problems == [
        f"quota '{ENDPOINT_QUOTA}' is 4, the plan needs {need}: `aws service-quotas "
        f"request-service-quota-increase --region {REGION} --service-code sagemaker "
        f"--quota-code L-1234ABCD --desired-value {need}`",
        f"quota '{JOB_QUOTA}' is 0, the plan needs 1: `aws service-quotas "
        f"request-service-quota-increase --region {REGION} --service-code sagemaker "
        "--quota-code L-5678EFGH --desired-value 1`",
    ]  # the applied 4, not the default 2, for the endpoint quota
    for s in stubs.values():
        s.assert_no_pending_responses()


def test_enough_quota_and_the_role_pass_without_reading_defaults(monkeypatch, prod_cfg) -> None:
    applied = [quota(ENDPOINT_QUOTA, peak_need(prod_cfg), "L-1"), quota(JOB_QUOTA, 2, "L-2")]
    clients, stubs = capacity_clients(monkeypatch, applied)
    assert preflight.capacity_check(prod_cfg, clients.get) == []
    for s in stubs.values():
        s.assert_no_pending_responses()


def test_an_unknown_type_is_named_and_a_missing_scaling_role_is_a_note(
    monkeypatch, prod_cfg
) -> None:
    """Issue 31: AWS creates the service-linked role at the first RegisterScalableTarget, so its
    absence on a fresh account does not stop a deploy; the note says how to create it."""
    clients, _ = capacity_clients(
        monkeypatch, [quota(ENDPOINT_QUOTA, peak_need(prod_cfg), "L-1")], [], role=False
    )
    notes: list[str] = []
    problems = preflight.capacity_check(prod_cfg, clients.get, notes=notes)
    assert problems == [f"no quota '{JOB_QUOTA}' in {REGION}: is the type offered there?"]
    [note] = notes
    assert note.startswith(f"the service-linked role {preflight.SCALING_ROLE} does not exist yet")
    assert "creates it at the first RegisterScalableTarget" in note
    assert "aws iam create-service-linked-role --aws-service-name " in note
    assert "sagemaker.application-autoscaling.amazonaws.com" in note


def test_unreadable_quotas_are_one_line_naming_the_permission(monkeypatch, prod_cfg) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    session = boto3.Session(region_name=REGION)
    sq, iam = session.client("service-quotas"), session.client("iam")
    with Stubber(sq) as s1, Stubber(iam) as s2:
        s1.add_client_error("list_service_quotas", "AccessDeniedException", "not authorized")
        s2.add_client_error("get_role", "AccessDenied", "not authorized")
        problems = preflight.capacity_check(prod_cfg, {"service-quotas": sq, "iam": iam}.get)
    assert len(problems) == 2
    assert "servicequotas:ListServiceQuotas" in problems[0]
    assert problems[1].startswith(f"could not read the role {preflight.SCALING_ROLE}")


# --- per target, and the token secret ---------------------------------------------------------

SECRET = "mangaassist/hf-token"
SECRET_ARN = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{SECRET}-AbCdEf"
JOB_ROLE = f"arn:aws:iam::{ACCOUNT}:role/mangaassist-prod-model-release-ModelPrepRole"


class StubbedSession:
    """A session whose clients are Stubber-ed; asking for any other service fails the test
    (so a target that must not read quotas or secrets cannot)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *services: str) -> None:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
        self.session = boto3.Session(region_name=REGION)
        self.clients = {n: self.session.client(n, region_name=REGION) for n in services}
        self.stubs = {n: Stubber(c) for n, c in self.clients.items()}

    def get_credentials(self) -> Any:
        return self.session.get_credentials()

    def client(self, name: str, **_: Any) -> Any:
        assert name in self.clients, f"the preflight asked for {name}"
        return self.clients[name]

    def ready_edge(self) -> StubbedSession:
        self.stubs["sts"].add_response("get_caller_identity", identity())
        self.stubs["ssm"].add_response(
            "get_parameter",
            {"Parameter": {"Name": BOOTSTRAP, "Type": "String", "Value": "30"}},
            {"Name": BOOTSTRAP},
        )
        return self

    def activate(self) -> None:
        for s in self.stubs.values():
            s.activate()

    def assert_done(self) -> None:
        for s in self.stubs.values():
            s.assert_no_pending_responses()


EXEC_ROLE = f"cdk-hnb659fds-cfn-exec-role-{ACCOUNT}-{REGION}"
PROD_POLICIES = [
    f"arn:aws:iam::{ACCOUNT}:policy/mangaassist-prod-cfn-exec-{part}"
    for part in ("iam", "serving", "control")
]
DEV_POLICIES = [arn.replace("-prod-", "-dev-") for arn in PROD_POLICIES]
ADMIN = "arn:aws:iam::aws:policy/AdministratorAccess"


def attached(aws: StubbedSession, *arns: str) -> None:
    aws.stubs["iam"].add_response(
        "list_attached_role_policies",
        {"AttachedPolicies": [{"PolicyName": a.rsplit("/", 1)[1], "PolicyArn": a} for a in arns]},
        {"RoleName": EXEC_ROLE},
    )


@pytest.mark.parametrize("target", ["deploy-access", "deploy-repository", "deploy-model-release"])
def test_iam_and_ecr_targets_check_the_edge_only_not_prods_quota(
    monkeypatch, capsys, target
) -> None:
    """deploy-access changes IAM, deploy-repository ECR: neither waits for prod's instances of
    endpoint quota (no Service Quotas or Secrets Manager client is even asked for). Each deploys
    through the bootstrap's roles, so each checks the execution role's policies."""
    aws = StubbedSession(monkeypatch, "sts", "ssm", "iam").ready_edge()
    attached(aws, *PROD_POLICIES)
    aws.activate()
    assert preflight.main(["--env", "prod", "--for", target], session=aws) == 0
    assert capsys.readouterr().out == (
        f"preflight ({target}): AWS credentials, account, CDK bootstrap, the execution role's "
        f"policies ok in {REGION}\n"
    )
    aws.assert_done()


# --- the bootstrap's CloudFormation execution role --------------------------------------------


def test_the_execution_policy_target_runs_before_bootstrap(monkeypatch, capsys) -> None:
    """make deploy-execution-policy comes before cdk bootstrap: credentials and account only
    (no SSM client is asked for the bootstrap version, no IAM for the role)."""
    aws = StubbedSession(monkeypatch, "sts")
    aws.stubs["sts"].add_response("get_caller_identity", identity())
    aws.activate()
    assert preflight.main(["--env", "prod", "--for", "deploy-execution-policy"], session=aws) == 0
    assert capsys.readouterr().out == (
        f"preflight (deploy-execution-policy): AWS credentials, account ok in {REGION}\n"
    )
    aws.assert_done()


def execution_role_problems(monkeypatch, capsys, *arns: str, error: str | None = None) -> str:
    aws = StubbedSession(monkeypatch, "sts", "ssm", "iam").ready_edge()
    if error:
        aws.stubs["iam"].add_client_error("list_attached_role_policies", error, "no")
    else:
        attached(aws, *arns)
    aws.activate()
    assert preflight.main(["--env", "prod", "--for", "deploy-repository"], session=aws) == 2
    aws.assert_done()
    return str(capsys.readouterr().err)


def test_an_administrator_execution_role_stops_a_deploy_naming_the_fix(monkeypatch, capsys) -> None:
    """A default cdk bootstrap: AdministratorAccess on the execution role, which the CI deploy
    role may pass. The finding names both commands, with the ARNs to give."""
    err = execution_role_problems(monkeypatch, capsys, ADMIN)
    assert f"execution role {EXEC_ROLE} carries AdministratorAccess" in err
    assert "`make deploy-execution-policy ENV=prod`" in err
    assert (
        f"`npx cdk bootstrap aws://{ACCOUNT}/{REGION} --cloudformation-execution-policies "
        + ",".join(PROD_POLICIES)
        + "`"
    ) in err
    assert ADMIN not in err.split("--cloudformation-execution-policies")[1]


def test_admin_beside_the_products_policies_is_still_refused(monkeypatch, capsys) -> None:
    err = execution_role_problems(monkeypatch, capsys, *PROD_POLICIES, ADMIN)
    assert "carries AdministratorAccess" in err


def test_a_missing_policy_is_named_and_another_environments_are_kept(monkeypatch, capsys) -> None:
    """dev and prod in one account: the role carries dev's policies; prod's are added beside
    them, never in their place."""
    err = execution_role_problems(monkeypatch, capsys, *DEV_POLICIES, PROD_POLICIES[0])
    assert (
        f"execution role {EXEC_ROLE} does not carry mangaassist-prod-cfn-exec-serving, "
        "mangaassist-prod-cfn-exec-control, so CloudFormation may not create prod's resources"
    ) in err
    wanted = ",".join([*DEV_POLICIES, *PROD_POLICIES])
    assert f"--cloudformation-execution-policies {wanted}`" in err


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ("NoSuchEntity", f"has no CloudFormation execution role {EXEC_ROLE}"),
        ("AccessDenied", "needs iam:ListAttachedRolePolicies on it"),
    ],
)
def test_an_unreadable_or_missing_execution_role_is_a_finding(
    monkeypatch, capsys, error, expected
) -> None:
    assert expected in execution_role_problems(monkeypatch, capsys, error=error)


def describe_secret(aws: StubbedSession) -> None:
    aws.stubs["secretsmanager"].add_response(
        "describe_secret", {"ARN": SECRET_ARN, "Name": SECRET}, {"SecretId": SECRET}
    )


def release_stack(aws: StubbedSession, deployed: bool = True) -> None:
    stack = "mangaassist-prod-model-release"
    if not deployed:
        aws.stubs["cloudformation"].add_client_error(
            "describe_stacks", "ValidationError", f"Stack with id {stack} does not exist"
        )
        return
    aws.stubs["cloudformation"].add_response(
        "describe_stacks",
        {"Stacks": [{"StackName": stack, "CreationTime": "2026-11-01T00:00:00Z",
                     "StackStatus": "UPDATE_COMPLETE",
                     "Outputs": [{"OutputKey": "BedrockImportRoleArn", "OutputValue": IMPORT_ROLE},
                                 {"OutputKey": "ModelPrepRoleArn", "OutputValue": JOB_ROLE}]}]},
        {"StackName": stack},
    )  # fmt: skip


def simulated(aws: StubbedSession, decision: str) -> None:
    aws.stubs["iam"].add_response(
        "simulate_principal_policy",
        {"EvaluationResults": [{"EvalActionName": "secretsmanager:GetSecretValue",
                                "EvalResourceName": SECRET_ARN, "EvalDecision": decision}]},
        {"PolicySourceArn": JOB_ROLE, "ActionNames": ["secretsmanager:GetSecretValue"],
         "ResourceArns": [SECRET_ARN]},
    )  # fmt: skip


def prepare_model_session(monkeypatch) -> StubbedSession:
    aws = StubbedSession(
        monkeypatch, "sts", "ssm", "service-quotas", "secretsmanager", "cloudformation", "iam"
    ).ready_edge()
    aws.stubs["service-quotas"].add_response(
        "list_service_quotas",
        {"Quotas": [quota(JOB_QUOTA, 1, "L-2")]},
        {"ServiceCode": "sagemaker"},
    )
    return aws


def test_prepare_model_checks_the_training_quota_and_that_the_job_role_reads_the_secret(
    monkeypatch, capsys
) -> None:
    aws = prepare_model_session(monkeypatch)
    describe_secret(aws)
    release_stack(aws)
    simulated(aws, "allowed")
    aws.activate()
    assert preflight.main(["--env", "prod", "--for", "prepare-model"], session=aws) == 0
    assert capsys.readouterr().out == (
        "preflight (prepare-model): AWS credentials, account, CDK bootstrap, quotas (1 x "
        f"{JOB_QUOTA}), the token secret ok in {REGION}\n"
    )
    aws.assert_done()


def test_a_missing_token_secret_stops_prepare_model_naming_the_field(monkeypatch, capsys) -> None:
    aws = prepare_model_session(monkeypatch)
    aws.stubs["secretsmanager"].add_client_error(
        "describe_secret", "ResourceNotFoundException", "Secrets Manager can't find the secret"
    )
    aws.activate()
    assert preflight.main(["--env", "prod", "--for", "prepare-model"], session=aws) == 2
    err = capsys.readouterr().err
    assert f"model_prep.hf_token_secret: no secret {SECRET} in {REGION}" in err
    assert f"aws secretsmanager create-secret --region {REGION} --name {SECRET}" in err
    aws.assert_done()


def test_a_job_role_that_may_not_read_the_secret_stops_prepare_model(monkeypatch, capsys) -> None:
    aws = prepare_model_session(monkeypatch)
    describe_secret(aws)
    release_stack(aws)
    simulated(aws, "implicitDeny")
    aws.activate()
    assert preflight.main(["--env", "prod", "--for", "prepare-model"], session=aws) == 2
    err = capsys.readouterr().err
    assert (
        f"model_prep.hf_token_secret: the preparation job's role {JOB_ROLE} may not read the "
        f"secret {SECRET} (IAM simulation: implicitDeny): `make deploy-model-release ENV=prod`"
    ) in err
    aws.assert_done()


def test_before_the_release_stack_exists_the_role_check_is_a_note(monkeypatch, capsys) -> None:
    aws = prepare_model_session(monkeypatch)
    describe_secret(aws)
    release_stack(aws, deployed=False)
    aws.activate()
    assert preflight.main(["--env", "prod", "--for", "prepare-model"], session=aws) == 0
    out = capsys.readouterr().out
    assert (
        "preflight note: model_prep.hf_token_secret: the secret mangaassist/hf-token exists" in out
    )
    aws.assert_done()


def test_make_quotas_prints_each_quota_the_plan_needs_and_the_commands_that_raise_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Offline (no session is made): each quota with the plan's own figure, its code looked up
    by its exact name, and the request for that figure."""
    from sizing.fit_checks import load_config
    from typed_config import config_path

    assert preflight.main(["--env", "dev", "--quotas"], session=NoCredentials()) == 0
    out = capsys.readouterr().out
    cfg = load_config(config_path(preflight.REPO_ROOT, "dev"), env="dev")
    needed = preflight.quotas_needed(cfg)
    assert any(name.endswith("for endpoint usage") for name in needed)
    for name, n in needed.items():
        assert f"\n  {name}: {n}\n" in out
        assert f"--query \"Quotas[?QuotaName=='{name}'].QuotaCode\" --output text)" in out
        assert (
            f"aws service-quotas request-service-quota-increase --region {cfg.region} "
            f"--service-code sagemaker --quota-code $code --desired-value {n}\n"
        ) in out + "\n"
