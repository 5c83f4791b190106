"""Issue 20 item 3.3: failures of the controller's AWS calls that are not ClientError.

AWS behaviour relied on: boto3 raises ClientError when AWS answered with an error, and a
botocore BotoCoreError when no answer came: EndpointConnectionError and ConnectTimeoutError (no
connection), ReadTimeoutError (the request was sent, the answer did not come: the call may have
been applied) (botocore.exceptions; "Error handling" in the boto3 guide). StartExecution with the
name and input of an open execution returns it without starting another; once that execution has
closed, the same name answers ExecutionAlreadyExists (Step Functions API reference,
StartExecution). UpdateEndpointWeightsAndCapacities is refused with ValidationException while the
endpoint is Updating (SageMaker API reference).

Each failure is injected into the boto3 client the controller holds, in place of the call.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import (
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from lambdas.canary_controller import handler as ctl
from tests.lambdas.canary_lifecycle import record, record_sent
from tests.lambdas.conftest import (
    BAKE,
    CHECK,
    ENDPOINT,
    World,
    advance,
    set_alarm,
    to_percent,
    weights,
)

URL = "https://states.us-east-1.amazonaws.com"
NO_ANSWER = [
    EndpointConnectionError(endpoint_url=URL),
    ConnectTimeoutError(endpoint_url=URL),
    ReadTimeoutError(endpoint_url=URL),
]


class LambdaStopped(BaseException):
    """The Lambda's own timeout: the invocation stops where it is (nothing is caught)."""


# ------------------------------------------------------------------ StartExecution


@pytest.mark.parametrize("failure", NO_ANSWER, ids=lambda e: type(e).__name__)
def test_a_start_without_an_answer_releases_the_lock_and_the_same_id_starts_again(
    world: World, failure: Exception
) -> None:
    sent = record_sent(world)
    real, attempts = world.controller.sfn.start_execution, []

    def flaky(**kw: Any) -> Any:
        attempts.append(kw["name"])
        if len(attempts) == 1:
            raise failure
        return real(**kw)

    world.controller.sfn.start_execution = flaky
    with pytest.raises(ctl.StartFailed, match=type(failure).__name__):
        world.start("r1")
    state = record(world)
    assert state["status"] == "FAILED" and state["last_decision"] == "start-failed"
    [note] = sent
    assert note["subject"] == f"[{ENDPOINT}] canary rollout could not start"
    assert type(failure).__name__ in note["last_reason"]
    again = world.start("r1")
    assert again["status"] == "RUNNING" and not again["duplicate"]
    assert attempts == ["r1", "r1"] and [e["name"] for e in world.executions()] == ["r1"]


def test_a_start_whose_answer_was_lost_after_it_ran_gets_a_new_name(world: World) -> None:
    """ReadTimeoutError after Step Functions started it; the execution saw the FAILED record and
    ended before the retry: its name answers ExecutionAlreadyExists, a new one is recorded."""
    real = world.controller.sfn.start_execution

    def lost_answer(**kw: Any) -> Any:
        started = real(**kw)
        world.controller.sfn.start_execution = real
        world.controller.sfn.stop_execution(executionArn=started["executionArn"])
        raise ReadTimeoutError(endpoint_url=URL)

    world.controller.sfn.start_execution = lost_answer
    with pytest.raises(ctl.StartFailed):
        world.start("r1")
    again = world.start("r1")
    state = record(world)
    assert again["status"] == state["status"] == "RUNNING"
    assert state["execution"].startswith("r1-") and again["seq"] == state["seq"] == 1
    assert sorted(e["name"] for e in world.executions()) == ["r1", state["execution"]]
    assert world.tick("r1", again["seq"])["last_decision"] == "scale"  # the new one drives it


def test_a_start_stopped_between_the_lock_and_start_execution_starts_on_the_retry(
    world: World,
) -> None:
    """Before: the retry answered "already started" and nothing ever ticked."""

    def stopped(**_: Any) -> Any:
        raise LambdaStopped()

    real = world.controller.sfn.start_execution
    world.controller.sfn.start_execution = stopped
    with pytest.raises(LambdaStopped):
        world.start("r1")
    assert record(world)["status"] == "RUNNING" and world.executions() == []
    world.controller.sfn.start_execution = real
    again = world.start("r1")
    assert again["duplicate"] and [e["name"] for e in world.executions()] == ["r1"]
    # Once it has ticked, a further start of the same id changes nothing and starts nothing.
    world.tick("r1", 0)
    assert world.start("r1")["duplicate"] and len(world.executions()) == 1


# ------------------------------------------------------------------ weights and bounds


def test_a_shift_without_an_answer_that_did_not_land_is_retried(world: World) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    world.clock.now += BAKE
    world.traffic()
    scale = world.tick("r1", result["seq"])
    real = world.controller.sm.update_endpoint_weights_and_capacities

    def timeout(**kw: Any) -> Any:
        if any("DesiredWeight" in v for v in kw["DesiredWeightsAndCapacities"]):
            world.controller.sm.update_endpoint_weights_and_capacities = real
            raise ReadTimeoutError(endpoint_url=URL)
        return real(**kw)

    world.controller.sm.update_endpoint_weights_and_capacities = timeout
    waited = advance(world, scale)
    assert waited["last_decision"] == "wait" and waited["status"] == "RUNNING"
    assert "shift got no answer (it may have landed) (ReadTimeoutError" in waited["last_reason"]
    assert record(world)["intent"]["percent"] == 25  # it may have landed: the intent stays
    shifted = advance(world, waited)  # 5 % live: it did not land, the shift is asked again
    assert shifted["last_decision"] == "shift" and record(world)["intent"] is None
    assert weights()["canary"] == 25.0 and record(world)["canary_percent"] == 25


def test_a_shift_that_landed_though_its_answer_was_lost_is_not_taken_for_a_change(
    world: World,
) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    world.clock.now += BAKE
    world.traffic()
    scale = world.tick("r1", result["seq"])
    real = world.controller.sm.update_endpoint_weights_and_capacities

    def applied_then_lost(**kw: Any) -> Any:
        answer = real(**kw)
        if any("DesiredWeight" in v for v in kw["DesiredWeightsAndCapacities"]):
            world.controller.sm.update_endpoint_weights_and_capacities = real
            raise ReadTimeoutError(endpoint_url=URL)
        return answer

    world.controller.sm.update_endpoint_weights_and_capacities = applied_then_lost
    waited = advance(world, scale)
    assert waited["last_decision"] == "wait" and weights()["canary"] == 25.0
    nxt = advance(world, waited)  # 25 % live, 5 % recorded, 25 % intended: its own, no rollback
    assert nxt["status"] == "RUNNING" and nxt["last_decision"] == "bake"
    state = record(world)
    assert state["canary_percent"] == 25 and state["intent"] is None
    assert any("recorded by the next tick" in h["reason"] for h in state["history"])


def test_scaling_bounds_without_an_answer_are_retried_on_the_next_tick(world: World) -> None:
    world.start()
    real = world.controller.aas.register_scalable_target

    def once(**kw: Any) -> Any:
        world.controller.aas.register_scalable_target = real
        raise ConnectTimeoutError(endpoint_url="https://application-autoscaling.amazonaws.com")

    world.controller.aas.register_scalable_target = once
    waited = world.tick("r1", 0)
    assert waited["last_decision"] == "wait" and "ConnectTimeoutError" in waited["last_reason"]
    assert advance(world, waited)["last_decision"] == "scale"


def test_weight_calls_without_answers_roll_a_running_rollout_back(world: World) -> None:
    """No answer six times in a row counts as six refusals: the rollout rolls back (and the
    rollback's weight 0 is retried until it lands)."""
    sent = record_sent(world)
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    world.clock.now += BAKE
    world.traffic()
    scale = world.tick("r1", result["seq"])
    real, fails = world.controller.sm.update_endpoint_weights_and_capacities, [0]

    def unreachable(**kw: Any) -> Any:
        if any("DesiredWeight" in v for v in kw["DesiredWeightsAndCapacities"]) and fails[0] < 7:
            fails[0] += 1
            raise EndpointConnectionError(endpoint_url="https://api.sagemaker.amazonaws.com")
        return real(**kw)

    world.controller.sm.update_endpoint_weights_and_capacities = unreachable
    while not scale["done"]:
        scale = advance(world, scale)
    assert scale["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    assert "6 times: EndpointConnectionError" in record(world)["rollback_reason"]
    assert sent[-1]["status"] == "ROLLED_BACK"


# ------------------------------------------------------------------ notify, evidence, reads


@pytest.mark.parametrize("failure", NO_ANSWER[:2], ids=lambda e: type(e).__name__)
def test_a_notification_without_an_answer_does_not_undo_the_rollback(
    world: World, failure: Exception
) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)

    def down(**_: Any) -> Any:
        raise failure

    world.controller.sns.publish = down
    set_alarm("canary-5xx", "ALARM", "5XX burst")
    rolled = world.tick("r1", result["seq"])
    assert rolled["status"] == record(world)["status"] == "ROLLED_BACK"
    assert weights()["canary"] == 0.0


def test_evidence_that_cannot_be_read_holds_the_step_then_rolls_back_naming_why(
    world: World,
) -> None:
    sent = record_sent(world)
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)

    def unreachable(**_: Any) -> Any:
        raise EndpointConnectionError(endpoint_url="https://monitoring.us-east-1.amazonaws.com")

    world.controller.cw.get_metric_data = unreachable
    world.clock.now += BAKE
    held = world.tick("r1", result["seq"])
    assert held["last_decision"] == "hold" and weights()["canary"] == 5.0
    assert "metrics could not be read (EndpointConnectionError" in held["last_reason"]
    while not held["done"]:
        held = advance(world, held)
    assert held["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    assert "no evidence after the bake and its timeout: the canary's metrics could not be " \
        "read (EndpointConnectionError" in sent[-1]["rollback_reason"]  # fmt: skip


def test_alarms_that_cannot_be_read_do_not_hold_up_a_rollback(world: World) -> None:
    world.start()
    to_percent(world, world.tick("r1", 0), 25)

    def unreachable(*_: Any, **__: Any) -> Any:
        raise EndpointConnectionError(endpoint_url="https://monitoring.us-east-1.amazonaws.com")

    world.controller.cw.get_paginator = unreachable
    rolled = world.run({"action": "rollback", "endpoint_name": ENDPOINT, "reason": "bad answers"})
    assert rolled["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0


def test_a_tick_that_cannot_see_the_endpoint_changes_nothing(world: World) -> None:
    """DescribeEndpoint without an answer: the tick fails as a whole (the state machine retries
    it with the same seq, then rolls back; test_canary_execution_end covers the end)."""
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    before = record(world)

    def unreachable(**_: Any) -> Any:
        raise ReadTimeoutError(endpoint_url="https://api.sagemaker.amazonaws.com")

    world.controller.sm.describe_endpoint = unreachable
    world.clock.now += CHECK
    with pytest.raises(ReadTimeoutError):
        world.tick("r1", result["seq"])
    assert record(world) == before and weights()["canary"] == 5.0
