"""tools/preflight.py: what `make diff` / `make deploy` say when the AWS edge is not ready.

The AWS calls are botocore Stubber-ed real clients: STS refusing the credentials, SSM without the
bootstrap parameter, the wrong account."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from tools import preflight

REGION = "us-east-1"
ACCOUNT = "111122223333"
BOOTSTRAP = f"/cdk-bootstrap/{preflight.BOOTSTRAP_QUALIFIER}/version"


class NoCredentials:
    def get_credentials(self) -> None:
        return None


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
