"""`make deploy` (tools.deploy) while a canary rollout holds the endpoint: the real controller on
the moto world answers the deploy tool's status call; the deploy is refused until the rollout
ends, and `cdk deploy` is never started while it is refused."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

import tools.deploy as tool
from sizing.deploy_options import DeployOptions
from tests.lambdas.conftest import ENDPOINT, REGION, FakeLambda, World, write_test_config


class Deploys:
    """Stands in for `cdk deploy`: records each deploy's options."""

    def __init__(self) -> None:
        self.calls: list[dict[str, str]] = []

    def __call__(self, options: DeployOptions) -> int:
        self.calls.append(options.as_context())
        return 0


@pytest.fixture
def deploy(world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    write_test_config(tmp_path)
    monkeypatch.setattr(tool, "REPO_ROOT", tmp_path)
    fake = FakeLambda(world)
    recorder = Deploys()
    clients = {
        "lambda": fake,
        "sagemaker": boto3.client("sagemaker", region_name=REGION),
        "application-autoscaling": boto3.client("application-autoscaling", region_name=REGION),
        "deploy": recorder,
    }

    def _run(*argv: str) -> int:
        return tool.main(["--env", "test", *argv], clients=clients)

    _run.fake, _run.recorder, _run.clients = fake, recorder, clients  # type: ignore[attr-defined]
    return _run


def test_no_rollout_recorded_lets_the_deploy_plan(deploy: Any, capsys: Any) -> None:
    assert deploy("--dry-run") == 0
    assert deploy.fake.calls == [{"endpoint_name": ENDPOINT, "action": "status"}]
    assert "step 1:" in capsys.readouterr().out


def test_a_running_rollout_refuses_the_deploy_naming_it_and_the_way_out(
    deploy: Any, world: World, capsys: Any
) -> None:
    world.start("r7")
    assert deploy() == 1
    assert deploy("--dry-run") == 1
    err = capsys.readouterr().err
    assert f"refused: canary rollout 'r7' is RUNNING on {ENDPOINT}" in err
    assert "make canary-rollback ENV=test" in err and "make canary-status ENV=test" in err
    assert deploy.recorder.calls == []


def test_the_deploy_goes_ahead_once_the_rollout_is_rolled_back(
    deploy: Any, world: World, capsys: Any
) -> None:
    world.start("r7")
    assert deploy("--dry-run") == 1
    world.run({"action": "rollback", "endpoint_name": ENDPOINT, "reason": "bad answers"})
    assert world.run({"action": "status", "endpoint_name": ENDPOINT})["status"] == "ROLLED_BACK"
    capsys.readouterr()
    assert deploy("--dry-run") == 0
    assert "refused" not in capsys.readouterr().err


def test_skip_rollout_check_deploys_without_asking_the_controller(
    deploy: Any, world: World
) -> None:
    world.start("r7")
    assert deploy("--dry-run", "--skip-rollout-check") == 0
    assert deploy.fake.calls == []


def _lambda_failing(code: str, message: str, status: int) -> tuple[Any, Stubber]:
    """A real Lambda client whose Invoke fails with ``code`` (botocore Stubber)."""
    lam = boto3.client("lambda", region_name=REGION)
    stub = Stubber(lam)
    stub.add_client_error("invoke", code, message, http_status_code=status)
    stub.activate()
    return lam, stub


def test_a_stack_without_the_controller_function_has_no_rollout(deploy: Any) -> None:
    lam, stub = _lambda_failing("ResourceNotFoundException", "Function not found", 404)
    deploy.clients["lambda"] = lam
    assert deploy("--dry-run") == 0
    stub.assert_no_pending_responses()


def test_a_controller_that_fails_refuses_naming_its_error_and_the_override(
    deploy: Any, world: World, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("table mangaassist-vllm-test-rollouts is gone")

    monkeypatch.setattr(world.controller, "status", broken)
    assert deploy() == 1
    err = capsys.readouterr().err
    assert "could not read the canary rollout's state (RuntimeError: table" in err
    assert "--skip-rollout-check" in err
    assert deploy.recorder.calls == []


def test_access_denied_on_the_status_call_exits_1_naming_the_region(
    deploy: Any, capsys: Any
) -> None:
    lam, stub = _lambda_failing("AccessDeniedException", "denied: lambda:InvokeFunction", 403)
    deploy.clients["lambda"] = lam
    assert deploy() == 1
    stub.assert_no_pending_responses()
    err = capsys.readouterr().err
    assert "AWS call failed (us-east-1)" in err and "lambda:InvokeFunction" in err
    assert deploy.recorder.calls == []


def test_a_controller_answer_that_is_not_a_record_refuses_naming_it(
    deploy: Any, capsys: Any
) -> None:
    def odd(**_: Any) -> dict[str, Any]:
        return {"StatusCode": 200, "Payload": io.BytesIO(b"null")}

    deploy.fake.invoke = odd
    assert deploy() == 1
    assert "the controller answered None, not a rollout record" in capsys.readouterr().err
    assert deploy.recorder.calls == []
