"""tools.canary against the real controller handler (moto world); Lambda's invoke is emulated
with its real response format, including FunctionError for a refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.exceptions import ClientError

import tools.canary as cli
from tests.lambdas.conftest import (
    ENDPOINT,
    FakeLambda,
    World,
    set_endpoint_status,
    write_test_config,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def run(world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    write_test_config(tmp_path)
    monkeypatch.setattr(cli, "REPO_ROOT", tmp_path)
    import boto3

    fake = FakeLambda(world)
    clients = {"lambda": fake, "sagemaker": boto3.client("sagemaker"), "caller": "alice"}

    def _run(*argv: str) -> int:
        return cli.main([*argv, "--env", "test"], clients=clients)

    _run.fake = fake  # type: ignore[attr-defined]
    return _run


def test_start_prints_the_rollout_and_status_shows_steps_and_weights(
    run: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("start", "--rollout-id", "r1") == 0
    out = capsys.readouterr().out
    assert f"canary rollout r1 started on {ENDPOINT}" in out
    assert "rollout      r1 (RUNNING), by alice" in out
    assert "live weights canary 5, primary 95" in out
    assert run("start", "--rollout-id", "r1") == 0
    assert "already started (same id, nothing changed)" in capsys.readouterr().out
    assert run("status") == 0
    assert "steps        5% -> 25% -> 50% -> 75% -> 100%" in capsys.readouterr().out


def test_second_start_is_refused_with_the_reason(
    run: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run("start", "--rollout-id", "r1")
    capsys.readouterr()
    assert run("start", "--rollout-id", "r2") == 1
    assert "refused: RolloutConflict: rollout 'r1' is already RUNNING" in capsys.readouterr().err


def test_start_refused_while_endpoint_updates(run: Any, capsys: pytest.CaptureFixture[str]) -> None:
    set_endpoint_status("Updating")
    assert run("start") == 1
    assert "is Updating, not InService" in capsys.readouterr().err


def test_rollback_zeroes_the_canary_and_says_so(
    run: Any,
    world: World,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run("start", "--rollout-id", "r1")
    world.tick("r1", 0)
    world.clock.now += 3600
    world.tick("r1", 1)
    capsys.readouterr()
    assert run("rollback", "--reason", "bad answers in jp_style") == 0
    out = capsys.readouterr().out
    assert f"rolled back {ENDPOINT}: canary weight 0, primary 100" in out
    assert "live weights canary 0, primary 100" in out
    assert "bad answers in jp_style (by alice)" in out


def test_promote_info_says_not_ready_until_completed(
    run: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    run("start", "--rollout-id", "r1")
    capsys.readouterr()
    assert run("promote-info") == 0
    out = capsys.readouterr().out
    assert "Not ready to promote: rollout status is 'RUNNING'" in out
    assert "variants.primary.image_tag" in out and "make deploy ENV=test" in out


# ------------------------------------------------------- how a command ends (tools.aws_command)


def test_an_invalid_config_exits_2_naming_the_yaml_path(
    run: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config" / "test.yaml"
    raw = yaml.safe_load(path.read_text())
    raw["rollout"]["bake_minutes"] = -5
    path.write_text(yaml.safe_dump(raw))
    assert run("status") == 2
    assert "rollout.bake_minutes" in capsys.readouterr().err
    assert run.fake.calls == []


def test_a_failed_lambda_call_exits_1_naming_the_region(
    run: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def denied(**_: Any) -> dict[str, Any]:
        error = {"Code": "AccessDeniedException", "Message": "denied: lambda:InvokeFunction"}
        raise ClientError({"Error": error}, "Invoke")

    run.fake.invoke = denied
    assert run("status") == 1
    err = capsys.readouterr().err
    assert "AWS call failed (us-east-1)" in err and "lambda:InvokeFunction" in err


@pytest.fixture
def no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A real boto3 Lambda client on a machine with no AWS credentials at all: its Invoke raises
    botocore's NoCredentialsError, as on a new user's laptop."""
    import boto3

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                "AWS_DEFAULT_PROFILE"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    write_test_config(tmp_path)
    monkeypatch.setattr(cli, "REPO_ROOT", tmp_path)
    session = boto3.Session(region_name="us-east-1")
    return {"lambda": session.client("lambda"), "sagemaker": session.client("sagemaker"),
            "caller": "alice"}  # fmt: skip


def test_promote_info_prints_the_steps_without_an_account(
    no_credentials: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/day2.md: promote-info prints step 4 for your config; that needs no account."""
    assert cli.main(["promote-info", "--env", "test"], clients=no_credentials) == 0
    out = capsys.readouterr().out
    assert "Rollout status not read (no AWS credentials found: export AWS_PROFILE" in out
    assert "variants.primary.image_tag" in out and "make deploy ENV=test RESET=DesiredWeight" in out


@pytest.mark.parametrize("command", ["status", "start", "rollback"])
def test_without_credentials_a_command_says_how_to_provide_them(
    no_credentials: dict[str, Any], capsys: pytest.CaptureFixture[str], command: str
) -> None:
    assert cli.main([command, "--env", "test"], clients=no_credentials) == 1
    err = capsys.readouterr().err
    assert "no AWS credentials found: export AWS_PROFILE=<profile>" in err
    assert "make synth ENV=test and make demo run offline" in err
    assert "Unable to locate credentials" not in err


def test_status_and_wait_know_the_shadow_stage(
    run: Any, world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.lambdas import shadow_world as sw

    sw.shadow_world(world)
    shadow = sw.ShadowVariant(world, peak=4)
    assert run("start", "--rollout-id", "r1") == 0
    capsys.readouterr()
    result = world.tick("r1", 0)
    assert result["last_decision"] == "enter-shadow"
    world.clock.now += sw.COMPARE
    result = world.tick("r1", result["seq"])  # the window opens
    sw.capture_both(world)
    result = world.tick("r1", result["seq"])  # its ground: the probes sent
    result = world.tick("r1", result["seq"])  # its ground checked, the probes found
    world.clock.now += sw.COMPARE
    world.tick("r1", result["seq"])  # the first comparison: a pass, held until min_minutes
    assert run("status") == 0
    out = capsys.readouterr().out
    assert "steps        [shadow] -> 5% -> 25% -> 50% -> 75% -> 100%" in out
    assert "shadow       last comparison: pass" in out
    assert "manga_domain: pass;" in out
    # the shadow's count: 10 % of the primary's 4, at least 1, set when the stage starts
    # (shadow_fleet.py)
    assert [c["ShadowProductionVariants"][0]["InitialInstanceCount"] for c in shadow.created] == [1]
    assert "shadow fleet 1 instance for 10 % of the primary's 4 in service x 1 = 0.4" in out
