"""make canary-wait (tools.canary wait): a bounded wait on the rollout that never changes the fleet.

The controller's answers come through a real boto3 Lambda client: botocore's Stubber answers each
Invoke in order (records, throttling, AccessDenied), and a hook raises what Stubber cannot answer
(a dropped connection, a read timeout, no credentials) in place of a call. Time is a fake clock that
the wait's sleep advances: nothing sleeps. The last tests follow a real rollout: the controller's
handler on the moto world (tests/lambdas/conftest.py), its state machine's loop driven by the
wait's own sleeps.
"""

from __future__ import annotations

import io
import json
import math
import subprocess
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import EndpointConnectionError, NoCredentialsError, ReadTimeoutError
from botocore.stub import Stubber

import tools.canary as cli
from lambdas.canary_controller import names
from sizing.fit_checks import load_config
from sizing.ready_bound import ready_seconds
from tests.fixtures import config_fixture
from tests.lambdas.conftest import ENDPOINT, FakeLambda, World, write_test_config

REPO = Path(__file__).resolve().parents[2]
STATUS = json.dumps({"endpoint_name": ENDPOINT, "action": "status"}).encode()


class Clock:
    """Monotonic time for the wait; ``sleep`` moves it on and records each sleep."""

    def __init__(self) -> None:
        self.now, self.sleeps = 1000.0, []  # type: ignore[var-annotated]

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Controller:
    """The controller's Invoke answers, in order: a record (dict), an AWS error (``(code,
    http status)``, answered by Stubber like Lambda would), or an exception raised in place of the
    call (what Stubber cannot answer). Every stubbed call must be a status read."""

    def __init__(self, *script: Any) -> None:
        self.client = boto3.client("lambda", region_name="us-east-1", aws_access_key_id="t",
                                   aws_secret_access_key="t")  # fmt: skip
        self.stub = Stubber(self.client)
        self.raises: list[BaseException | None] = []
        self.calls = 0
        expected = {"FunctionName": names.controller_function_name(ENDPOINT),
                    "InvocationType": "RequestResponse", "Payload": STATUS}  # fmt: skip
        for item in script:
            if isinstance(item, BaseException):
                self.raises.append(item)
                continue
            self.raises.append(None)
            if isinstance(item, tuple):
                code, status = item
                self.stub.add_client_error(
                    "invoke", code, f"{code} (injected)", http_status_code=status,
                    expected_params=expected,
                )  # fmt: skip
            else:
                body = io.BytesIO(json.dumps({"endpoint_name": ENDPOINT, **item}).encode())
                self.stub.add_response("invoke", {"StatusCode": 200, "Payload": body}, expected)
        # Stubber answers at "before-call.*.*"; registered there first, this hook runs before it
        self.client.meta.events.register_first("before-call.*.*", self._drop)
        self.stub.activate()

    def _drop(self, **_: Any) -> None:
        self.calls += 1
        exc = self.raises.pop(0)
        if exc is not None:
            raise exc


def running(step: int, **extra: Any) -> dict[str, Any]:
    steps = [5, 25, 50, 75, 100]
    return {"rollout_id": "r1", "status": "RUNNING", "steps": steps, "step_index": step,
            "current_percent": steps[step] if step >= 0 else 0, "phase": "baking",
            "last_decision": "shift" if step >= 0 else "start",
            "last_reason": f"canary weight set to {steps[step]}%" if step >= 0 else "lock taken",
            **extra}  # fmt: skip


def ended(status: str, decision: str, reason: str, **extra: Any) -> dict[str, Any]:
    return {**running(4), "status": status, "last_decision": decision, "last_reason": reason,
            **extra}  # fmt: skip


@pytest.fixture
def wait(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """``make canary-wait ENV=test [TIMEOUT_MIN=] [POLL_S=]`` on a scripted controller:
    (exit code, stdout, stderr, clock)."""
    write_test_config(tmp_path)
    monkeypatch.setattr(cli, "REPO_ROOT", tmp_path)

    def _wait(controller: Controller, *argv: str) -> tuple[int, str, str, Clock]:
        clock = Clock()
        given = {"lambda": controller.client, "clock": clock, "sleep": clock.sleep}
        rc = cli.main(["wait", "--env", "test", *argv], clients=given)
        out, err = capsys.readouterr()
        return rc, out, err, clock

    return _wait


def test_a_completed_rollout_exits_0_with_a_line_per_step(wait) -> None:
    ctl = Controller(
        running(-1),
        running(0),
        running(0),
        running(1),
        running(2),
        running(3),
        running(4),
        ended("COMPLETED", "complete", "canary baked at the last step"),
    )
    rc, out, err, clock = wait(ctl)
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert [line.split()[3:6] for line in lines[:-1]] == [
        ["before", "step", "1/5"],
        ["step", "1/5", "(5%)"],
        ["step", "2/5", "(25%)"],
        ["step", "3/5", "(50%)"],
        ["step", "4/5", "(75%)"],
        ["step", "5/5", "(100%)"],
    ]  # no line for the unchanged second read of step 1
    assert lines[-1].startswith(f"canary-wait: rollout r1 COMPLETED on {ENDPOINT} after 3m30s")
    assert "make promote ENV=test" in lines[-1]
    assert clock.sleeps == [cli.WAIT_POLL_SECONDS] * 7
    ctl.stub.assert_no_pending_responses()  # only status reads: the wait changes nothing


@pytest.mark.parametrize(
    ("last", "says"),
    [
        (ended("ROLLED_BACK", "restore", "canary weight 0 on an InService endpoint",
               rollback_reason="alarm: canary-5xx"),
         "is ROLLED_BACK on mangaassist-vllm-test, not COMPLETED (last: restore: canary weight 0 "
         "on an InService endpoint; rollback: alarm: canary-5xx)"),
        (ended("ROLLING_BACK", "rollback", "evidence: canary 5XX 2.1% vs primary 0.1%",
               rollback_reason="evidence: canary 5XX 2.1% vs primary 0.1%"),
         "is ROLLING_BACK on mangaassist-vllm-test"),
        (ended("FAILED", "abort", "endpoint is Failed; rollout abandoned"),
         "is FAILED on mangaassist-vllm-test, not COMPLETED (last: abort: endpoint is Failed"),
    ],
    ids=["rolled-back", "rolling-back", "aborted"],
)  # fmt: skip
def test_a_rollout_that_ends_otherwise_exits_1_with_the_controllers_reason(
    wait, last: dict[str, Any], says: str
) -> None:
    ctl = Controller(running(1), running(2), last)
    rc, out, err, _ = wait(ctl)
    assert rc == 1
    assert says in err and "make canary-status ENV=test" in err
    assert "COMPLETED" not in out
    ctl.stub.assert_no_pending_responses()


def test_no_rollout_recorded_exits_1_saying_how_to_start_one(wait) -> None:
    rc, _, err, clock = wait(Controller({"status": None}))
    assert rc == 1 and clock.sleeps == []
    assert "no rollout recorded on mangaassist-vllm-test: start one with make canary-start" in err


def test_the_bound_passing_first_exits_3_and_leaves_the_rollout_running(wait) -> None:
    # TIMEOUT_MIN=12 POLL_S=60: reads at 0, 1, ..., 12 minutes (the last one at the bound)
    ctl = Controller(*[running(2)] * 13)
    rc, out, err, clock = wait(ctl, "--timeout-min", "12", "--poll-s", "60")
    assert rc == cli.WAIT_TIMED_OUT == 3
    assert clock.now - 1000.0 == 12 * 60
    ctl.stub.assert_no_pending_responses()  # 13 status reads, nothing else
    assert (
        "gave up after 12m00s (the bound, TIMEOUT_MIN=12): rollout r1 is still RUNNING ("
        "step 3/5 (50%)). The rollout goes on; this wait changed nothing." in err
    )
    assert "make canary-wait ENV=test" in err and "make canary-rollback ENV=test" in err
    # no change: a line at least every check interval (5 min in prod.yaml), not on every read
    assert [line.split("  last:")[0].split()[-1] for line in out.splitlines()] == [
        "0m00s", "5m00s", "10m00s",
    ]  # fmt: skip


def test_the_default_bound_is_the_rollouts_total_bake_plus_a_margin_per_step(wait) -> None:
    cfg = load_config(config_fixture("prod"), env="prod")
    ro = cfg.rollout
    # one instance start per step at the config's per-start bound (sizing.ready_bound)
    per_step = ro.bake_minutes + ro.check_interval_minutes + ready_seconds(cfg) / 60
    steps = math.ceil(len(ro.steps_percent) * per_step)
    # longer than the rollout the simulator replays on prod's normal day (docs/canary-studies.md)
    assert steps > 5 * 60 + 35
    # prod's releases start with the shadow stage: its max_minutes and its two moves on top
    assert ro.shadow is not None
    dep = cfg.deployment
    move = (dep.max_execution_timeout_seconds + dep.termination_wait_seconds) / 60
    bound = cli.rollout_wait_minutes(cfg)
    assert bound == math.ceil(len(ro.steps_percent) * per_step + ro.shadow.max_minutes + 2 * move)
    polls = bound * 2 + 12  # every 30 s until the bound, and more: still RUNNING at the bound
    rc, _, err, clock = wait(Controller(*[running(0)] * polls), "--poll-s", "30")
    assert rc == 3 and f"TIMEOUT_MIN={bound})" in err and clock.now - 1000.0 == bound * 60


def test_transient_read_failures_are_read_again_until_the_answer_comes(wait) -> None:
    ctl = Controller(
        running(3),
        ("TooManyRequestsException", 429),
        EndpointConnectionError(endpoint_url="https://lambda.us-east-1.amazonaws.com"),
        ReadTimeoutError(endpoint_url="https://lambda.us-east-1.amazonaws.com"),
        ("ServiceException", 500),
        running(4),
        ended("COMPLETED", "complete", "canary baked at the last step"),
    )
    rc, out, _, _ = wait(ctl)
    assert rc == 0 and ctl.calls == 7
    retried = [line for line in out.splitlines() if "reading again" in line]
    assert [line.split("(")[1].split(")")[0] for line in retried] == [
        "TooManyRequestsException", "EndpointConnectionError", "ReadTimeoutError",
        "ServiceException",
    ]  # fmt: skip
    assert retried[-1].endswith("(4/10)")
    ctl.stub.assert_no_pending_responses()


def test_reads_failing_in_a_row_give_up_after_the_bound_number_and_say_the_rollout_goes_on(
    wait,
) -> None:
    ctl = Controller(running(1), *[("TooManyRequestsException", 429)] * cli.STATUS_READ_ATTEMPTS)
    rc, _, err, _ = wait(ctl)
    assert rc == 1 and ctl.calls == 1 + cli.STATUS_READ_ATTEMPTS
    assert (
        "10 reads of the rollout's status failed in a row (last: TooManyRequestsException)" in err
    )
    assert "the rollout goes on without this wait: make canary-status ENV=test" in err


@pytest.mark.parametrize(
    ("failure", "says"),
    [
        (("AccessDeniedException", 403), "AWS call failed (us-east-1): An error occurred "
         "(AccessDeniedException) when calling the Invoke operation"),
        (("ResourceNotFoundException", 404), "ResourceNotFoundException"),
        (NoCredentialsError(), "no AWS credentials found: export AWS_PROFILE=<profile>"),
    ],
    ids=["access-denied", "no-controller", "no-credentials"],
)  # fmt: skip
def test_access_denied_or_no_credentials_stop_at_once_with_the_reason(
    wait, failure: Any, says: str
) -> None:
    ctl = Controller(running(1), failure, running(2))
    rc, _, err, clock = wait(ctl)
    assert rc == 1 and ctl.calls == 2 and len(clock.sleeps) == 1
    assert says in err


def test_make_canary_wait_passes_the_bound_and_the_poll_interval() -> None:
    def command(*variables: str) -> str:
        command = ["make", "-n", "--no-print-directory", "canary-wait", "ENV=prod", *variables]
        out = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True)
        return next(line for line in out.stdout.splitlines() if "-m tools.canary wait" in line)

    assert command().split()[1:] == ["-m", "tools.canary", "wait", "--env", "prod"]
    assert command("TIMEOUT_MIN=90", "POLL_S=10").split()[-4:] == [
        "--timeout-min", "90", "--poll-s", "10",
    ]  # fmt: skip


# ------------------------------------------------------- against the real controller (moto)


def loop_driven_by_sleep(world: World, rollout_id: str, result: dict[str, Any]) -> Any:
    """The wait's sleep: the rollout state machine's loop (wait what the controller asked,
    traffic flows, tick) runs every tick that falls due before the sleep ends."""
    loop = {"result": result, "due": world.clock.now + result["wait_seconds"]}

    def sleep(seconds: float) -> None:
        end = world.clock.now + seconds
        while not loop["result"]["done"] and loop["due"] <= end:
            world.clock.now = loop["due"]
            world.traffic()
            loop["result"] = world.tick(rollout_id, loop["result"]["seq"])
            loop["due"] = world.clock.now + loop["result"]["wait_seconds"]
        world.clock.now = end

    return sleep


def test_wait_follows_a_real_rollout_to_completed_then_start_starts_nothing(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    write_test_config(tmp_path)
    monkeypatch.setattr(cli, "REPO_ROOT", tmp_path)
    fake = FakeLambda(world)
    given = {"lambda": fake, "sagemaker": boto3.client("sagemaker"), "caller": "alice",
             "clock": world.clock}  # fmt: skip
    assert cli.main(["start", "--env", "test", "--rollout-id", "r1"], clients=given) == 0
    given["sleep"] = loop_driven_by_sleep(world, "r1", world.tick("r1", 0))
    capsys.readouterr()
    assert cli.main(["wait", "--env", "test", "--poll-s", "300"], clients=given) == 0
    out = capsys.readouterr().out
    for percent in (5, 25, 50, 75, 100):
        assert f"({percent}%)" in out
    assert "canary-wait: rollout r1 COMPLETED on mangaassist-vllm-test" in out
    assert [e["action"] for e in fake.calls[:2]] == ["status", "start"]
    assert {e["action"] for e in fake.calls[2:]} == {"status"}  # the wait only reads

    # make canary-start again (a release run again from the top): the COMPLETED canary keeps
    # its 100 % and nothing starts
    fake.calls.clear()
    assert cli.main(["start", "--env", "test"], clients=given) == 0
    out = capsys.readouterr().out
    assert (
        "canary rollout r1 COMPLETED on mangaassist-vllm-test: the canary carries 100 % and "
        "waits for make promote ENV=test; nothing started" in out
    )
    assert [e["action"] for e in fake.calls] == ["status"]
    assert world.run({"action": "status", "endpoint_name": ENDPOINT})["status"] == "COMPLETED"


def test_wait_ends_1_when_the_real_controller_rolls_back_on_an_alarm(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from tests.lambdas.conftest import set_alarm

    write_test_config(tmp_path)
    monkeypatch.setattr(cli, "REPO_ROOT", tmp_path)
    world.start("r1")
    set_alarm("canary-5xx", "ALARM", "5XX above 5 a minute")
    given = {"lambda": FakeLambda(world), "clock": world.clock,
             "sleep": loop_driven_by_sleep(world, "r1", world.tick("r1", 0))}  # fmt: skip
    assert cli.main(["wait", "--env", "test"], clients=given) == 1
    err = capsys.readouterr().err
    assert "rollout r1 is ROLLED_BACK on mangaassist-vllm-test, not COMPLETED" in err
    assert "rollback: alarm: canary-5xx" in err
