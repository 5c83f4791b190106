"""tools/bootstrap.py (`make bootstrap`): the CDK bootstrap a new account needs, with the product's
execution policies read from their stack, the pinned CLI through npx, and a re-bootstrap that keeps
another environment's policies. AWS calls are botocore Stubber-ed real clients."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from tools import bootstrap, preflight

from .conftest import REPO_ROOT, make_rule

REGION = "us-east-1"
ACCOUNT = "111122223333"
STACK = "mangaassist-prod-execution-policy"
ROLE = f"cdk-hnb659fds-cfn-exec-role-{ACCOUNT}-{REGION}"
OURS = [f"arn:aws:iam::{ACCOUNT}:policy/mangaassist-prod-cfn-exec-{p}" for p in ("iam", "serving",
        "control")]  # fmt: skip
DEVS = f"arn:aws:iam::{ACCOUNT}:policy/mangaassist-dev-cfn-exec-iam"
ADMIN = "arn:aws:iam::aws:policy/AdministratorAccess"
IDENTITY = {"Account": ACCOUNT, "Arn": f"arn:aws:iam::{ACCOUNT}:user/me", "UserId": "AIDA"}


class Session:
    """A boto3 session whose clients are stubbed; ``stubs`` to queue their answers."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
        real = boto3.Session(region_name=REGION)
        self.clients = {n: real.client(n, region_name=REGION) for n in ("cloudformation", "sts",
                                                                         "iam")}  # fmt: skip
        self.stubs = {n: Stubber(c) for n, c in self.clients.items()}
        for stub in self.stubs.values():
            stub.activate()

    def client(self, name: str, region_name: str) -> Any:
        return self.clients[name]


def stack_with(outputs: dict[str, str]) -> dict[str, Any]:
    return {"Stacks": [{"StackName": STACK, "CreationTime": "2026-12-01T00:00:00Z",
                        "StackStatus": "CREATE_COMPLETE",
                        "Outputs": [{"OutputKey": k, "OutputValue": v}
                                    for k, v in outputs.items()]}]}  # fmt: skip


def attached(*arns: str) -> dict[str, Any]:
    return {"AttachedPolicies": [{"PolicyName": a.rsplit("/", 1)[1], "PolicyArn": a}
                                 for a in arns]}  # fmt: skip


def run_main(session: Session, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str], str]:
    ran: list[list[str]] = []
    rc = bootstrap.main(["--env", "prod"], session=session,
                        run=lambda cmd: ran.append(cmd) or 0)  # fmt: skip
    out = capsys.readouterr()
    return rc, ran[0] if ran else [], out.out + out.err


def test_a_new_account_is_bootstrapped_with_the_products_policies_through_npx(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    s = Session(monkeypatch)
    s.stubs["cloudformation"].add_response("describe_stacks", stack_with(
        {"ExecutionPolicyArns": ",".join(OURS)}), {"StackName": STACK})  # fmt: skip
    s.stubs["sts"].add_response("get_caller_identity", IDENTITY)  # fmt: skip
    s.stubs["iam"].add_client_error("list_attached_role_policies", "NoSuchEntity",
                                    expected_params={"RoleName": ROLE})  # fmt: skip
    rc, command, out = run_main(s, capsys)
    assert rc == 0
    assert command == ["npx", "cdk", "bootstrap", f"aws://{ACCOUNT}/{REGION}",
                       "--cloudformation-execution-policies", ",".join(OURS)]  # fmt: skip
    assert f"bootstrap: npx cdk bootstrap aws://{ACCOUNT}/{REGION}" in out


def test_a_rebootstrap_keeps_another_environments_policies_and_drops_administrator_access(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    s = Session(monkeypatch)
    s.stubs["cloudformation"].add_response("describe_stacks", stack_with(
        {"ExecutionPolicyArns": ",".join(OURS)}))  # fmt: skip
    s.stubs["sts"].add_response("get_caller_identity", IDENTITY)  # fmt: skip
    s.stubs["iam"].add_response("list_attached_role_policies", attached(ADMIN, DEVS, OURS[0]))
    rc, command, _ = run_main(s, capsys)
    assert rc == 0
    assert command[-1] == ",".join([DEVS, *OURS])


def test_without_the_execution_policy_stack_it_names_the_command_that_comes_first(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    s = Session(monkeypatch)
    s.stubs["cloudformation"].add_client_error(
        "describe_stacks", "ValidationError", f"Stack with id {STACK} does not exist"
    )
    rc, command, out = run_main(s, capsys)
    assert rc == 2 and command == []
    assert f"no stack {STACK} in {REGION}: run `make deploy-execution-policy ENV=prod` first" in out


def test_make_bootstrap_runs_the_tool_with_the_venvs_node_first_on_path() -> None:
    """The recipe runs tools/bootstrap.py, whose npx is the Makefile's shim on the venv's Node
    (PATH is exported with NODE_SHIMS and NODE_BIN first), after npm installed the pinned CLI."""
    rule = make_rule("bootstrap")
    assert "node_modules/.stamp" in rule.splitlines()[0]
    assert "-m tools.bootstrap --env $(ENV)" in rule
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "export PATH := $(NODE_SHIMS):$(NODE_BIN):$(PATH)" in makefile


def test_the_preflight_on_an_unbootstrapped_account_names_make_bootstrap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    s = Session(monkeypatch)
    ssm = boto3.Session(region_name=REGION).client("ssm", region_name=REGION)
    ssm_stub = Stubber(ssm)
    ssm_stub.activate()
    s.stubs["sts"].add_response("get_caller_identity", IDENTITY)  # fmt: skip
    ssm_stub.add_client_error("get_parameter", "ParameterNotFound")
    clients = {"sts": s.clients["sts"], "ssm": ssm}
    problems = preflight.check(region=REGION, account=None, session=boto3.Session(
        region_name=REGION), client=clients.__getitem__, env="prod")  # fmt: skip
    assert problems == [
        f"account {ACCOUNT} is not CDK-bootstrapped in {REGION} (no SSM parameter "
        f"/cdk-bootstrap/hnb659fds/version): run `make deploy-execution-policy ENV=prod`, then "
        "`make bootstrap ENV=prod` (the product's execution policies, not AdministratorAccess)"
    ]


def test_the_clis_own_options_follow_for_a_tooling_account(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """BOOTSTRAP_ARGS (after --): a tooling account trusted to deploy here keeps the product's
    execution policies (the CLI refuses --trust without explicit ones)."""
    s = Session(monkeypatch)
    s.stubs["cloudformation"].add_response("describe_stacks", stack_with(
        {"ExecutionPolicyArns": ",".join(OURS)}))  # fmt: skip
    s.stubs["sts"].add_response("get_caller_identity", IDENTITY)
    s.stubs["iam"].add_client_error("list_attached_role_policies", "NoSuchEntity")
    ran: list[list[str]] = []
    argv = ["--env", "prod", "--dry-run", "--", "--trust", "999988887777"]
    assert bootstrap.main(argv, session=s, run=lambda cmd: ran.append(cmd) or 0) == 0
    assert ran == []  # a dry run runs nothing
    out = capsys.readouterr().out
    assert out.strip().endswith(
        f"--cloudformation-execution-policies {','.join(OURS)} --trust 999988887777"
    )
