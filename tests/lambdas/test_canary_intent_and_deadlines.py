"""Issue 30: a record write that fails after an accepted shift, and a rollback that waited forever.

AWS behaviour relied on: DynamoDB answers a throttled write with
ProvisionedThroughputExceededException (HTTP 400, "OK to retry? Yes": Amazon DynamoDB Developer
Guide, "Error handling with DynamoDB"), which applied nothing; a write whose answer did not come
(ReadTimeoutError, ConnectionClosedError: botocore.exceptions) may have been applied.
UpdateEndpointWeightsAndCapacities is refused with ValidationException while the endpoint is
Updating (SageMaker API reference); RegisterScalableTarget moves the count into the new range
(Application Auto Scaling API reference).

Each failure is injected into the boto3 call the controller makes (the Table's PutItem, the
SageMaker client's UpdateEndpointWeightsAndCapacities), and each test asserts the end state: the
rollout's status and reason, the lock, the canary's bounds, what the operator was told.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

from lambdas.canary_controller import names
from lambdas.canary_controller.record import WRITE_BACKOFF_SECONDS
from tests.lambdas.canary_lifecycle import record, record_sent, set_rules
from tests.lambdas.conftest import (
    BAKE,
    CHECK,
    ENDPOINT,
    PLAN,
    World,
    advance,
    canary_bounds,
    refuse_while_updating,
    set_alarm,
    set_endpoint_status,
    to_percent,
    walk,
    weights,
)

DDB = "https://dynamodb.us-east-1.amazonaws.com"
#: Every attempt ``_write`` makes of one record write.
ATTEMPTS = len(WRITE_BACKOFF_SECONDS) + 1
#: The deadline these tests give every wait: four checks.
UPDATING_TIMEOUT = 4 * CHECK


def throttled() -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "ProvisionedThroughputExceededException", "Message": "Rate exceeded"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        },
        "PutItem",
    )


FAILURES = {
    "throttled": throttled,
    "timed-out": lambda: ReadTimeoutError(endpoint_url=DDB),
    "connection-reset": lambda: ConnectionClosedError(endpoint_url=DDB),
}


class LambdaTimedOut(Exception):
    """The Lambda's own timeout: the invocation stops where it is; Step Functions sees the task
    fail and retries it with the same input (stacks/constructs/rollout_state_machine.py)."""


def fail_writes_after_accepted_shift(world: World, failure: Any, times: int) -> list[str]:
    """After SageMaker accepts the next weight change, the next ``times`` PutItems fail with
    ``failure()`` (raised instead of the write); returns what happened, in order."""
    sm, table = world.controller.sm, world.controller.table
    real_update, real_put, seen, left = (
        sm.update_endpoint_weights_and_capacities, table.put_item, [], [0]
    )  # fmt: skip

    def update(**kw: Any) -> Any:
        answer = real_update(**kw)
        if any("DesiredWeight" in v for v in kw["DesiredWeightsAndCapacities"]):
            seen.append("weight accepted")
            left[0] = times
            sm.update_endpoint_weights_and_capacities = real_update
        return answer

    def put_item(**kw: Any) -> Any:
        if left[0] > 0:
            left[0] -= 1
            seen.append("put failed")
            raise failure()
        return real_put(**kw)

    sm.update_endpoint_weights_and_capacities = update
    table.put_item = put_item
    return seen


def at_scale_for_25(world: World) -> dict[str, Any]:
    """The rollout baked at 5 %, its next tick asks for 25 %'s capacity."""
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    world.clock.now += BAKE
    world.traffic()
    scale = world.tick("r1", result["seq"])
    assert scale["last_decision"] == "scale"
    return scale


def assert_completed_as_its_own(world: World, sent: list[dict[str, Any]]) -> None:
    state = record(world)
    assert state["status"] == names.COMPLETED and state["status"] not in names.LOCKED
    assert not any("deploy or the console" in h["reason"] for h in state["history"])
    assert [h["decision"] for h in state["history"]].count("rollback") == 0
    assert sent[-1]["subject"] == f"[{ENDPOINT}] canary rollout complete: promote the canary"
    # COMPLETED keeps the last step's bounds: the canary carries 100 % until the promotion.
    assert canary_bounds() == (state["target_instances"], PLAN.steps[-1].max_capacity)


# ------------------------------------------------------------------ intent before action


@pytest.mark.parametrize("failure", FAILURES.values(), ids=FAILURES.keys())
def test_a_record_write_that_fails_after_an_accepted_shift_does_not_roll_back(
    world: World, failure: Any
) -> None:
    """Every attempt of the shift's record fails: the tick ends at the intent's seq, the next
    one finds 25 % live on the same config (its own shift), records it and carries on."""
    sent = record_sent(world)
    scale = at_scale_for_25(world)
    seen = fail_writes_after_accepted_shift(world, failure, ATTEMPTS)
    ended = advance(world, scale)
    assert seen == ["weight accepted", *["put failed"] * ATTEMPTS]
    assert "shift made, its record not written" in ended["last_reason"]
    state = record(world)
    assert weights()["canary"] == 25.0 and state["canary_percent"] == 5
    assert state["intent"]["percent"] == 25 and state["seq"] == ended["seq"]
    nxt = advance(world, ended)
    assert nxt["status"] == "RUNNING" and nxt["last_decision"] == "bake"
    state = record(world)
    assert state["canary_percent"] == 25 and state["step_index"] == 1 and state["intent"] is None
    assert any("recorded by the next tick" in h["reason"] for h in state["history"])
    walk(world, nxt)
    assert_completed_as_its_own(world, sent)


@pytest.mark.parametrize("failure", FAILURES.values(), ids=FAILURES.keys())
def test_a_record_write_that_fails_then_succeeds_is_written_in_the_same_tick(
    world: World, failure: Any
) -> None:
    scale = at_scale_for_25(world)
    before = world.clock.now
    fail_writes_after_accepted_shift(world, failure, 2)
    shifted = advance(world, scale)
    state = record(world)
    assert shifted["last_decision"] == "shift" and not shifted["duplicate"]
    assert state["canary_percent"] == 25 and state["intent"] is None
    # The backoff ran on the test's clock: two pauses, no wall-clock wait.
    waited = scale["wait_seconds"] + sum(WRITE_BACKOFF_SECONDS[:2])
    assert world.clock.now - before == pytest.approx(waited)


def test_a_write_that_landed_without_its_answer_is_known_as_its_own(world: World) -> None:
    """PutItem applied, its answer lost (a read timeout): the next attempt loses its condition
    to the write itself, which is found to be the one it made, not another writer's."""
    scale = at_scale_for_25(world)
    table, real = world.controller.table, world.controller.table.put_item
    armed = [False]
    real_update = world.controller.sm.update_endpoint_weights_and_capacities

    def update(**kw: Any) -> Any:
        armed[0] = any("DesiredWeight" in v for v in kw["DesiredWeightsAndCapacities"])
        return real_update(**kw)

    def put_item(**kw: Any) -> Any:
        answer = real(**kw)
        if armed[0]:
            armed[0] = False
            raise ReadTimeoutError(endpoint_url=DDB)
        return answer

    world.controller.sm.update_endpoint_weights_and_capacities = update
    table.put_item = put_item
    shifted = advance(world, scale)
    assert shifted["last_decision"] == "shift" and not shifted["duplicate"]
    assert record(world)["canary_percent"] == 25


def test_the_lambda_timing_out_after_an_accepted_shift_is_recognised_on_the_retry(
    world: World,
) -> None:
    """The Lambda stops after SageMaker took 25 % (before the record): Step Functions retries the
    tick with the old seq (a redelivery: it learns the intent's seq), the next tick records the
    shift as its own, and the rollout completes."""
    sent = record_sent(world)
    scale = at_scale_for_25(world)
    fail_writes_after_accepted_shift(world, LambdaTimedOut, 1)
    with pytest.raises(LambdaTimedOut):
        advance(world, scale)
    assert weights()["canary"] == 25.0 and record(world)["intent"]["percent"] == 25
    world.clock.now += 20  # the state machine's retry interval
    again = world.tick("r1", scale["seq"])
    assert again["duplicate"] and again["seq"] == record(world)["seq"]
    nxt = advance(world, again)
    assert nxt["status"] == "RUNNING" and record(world)["canary_percent"] == 25
    walk(world, nxt)
    assert_completed_as_its_own(world, sent)


def test_a_write_dynamodb_will_never_take_is_not_sent_again(world: World) -> None:
    """AccessDenied is not worth another attempt: raised at once (the state machine's retries
    and catch-all take it from there), nothing slept."""
    world.start()
    attempts = []

    def denied(**kw: Any) -> Any:
        attempts.append(kw)
        raise ClientError(
            {"Error": {"Code": "AccessDeniedException", "Message": "no"},
             "ResponseMetadata": {"HTTPStatusCode": 400}},
            "PutItem",
        )  # fmt: skip

    world.controller.table.put_item = denied
    before = world.clock.now
    with pytest.raises(ClientError, match="AccessDenied"):
        world.tick("r1", 0)
    assert len(attempts) == 1 and world.clock.now == before


# ------------------------------------------------------------------ every wait has a deadline


def rolling_back_at_25(world: World) -> dict[str, Any]:
    set_rules(world, updating_timeout_seconds=UPDATING_TIMEOUT)
    world.start()
    result = to_percent(world, world.tick("r1", 0), 25)
    # The step raised the canary's minimum above its configured one.
    assert canary_bounds() == (record(world)["target_instances"], PLAN.steps[1].max_capacity)
    assert record(world)["target_instances"] > PLAN.canary_min
    return result


def test_a_rollback_whose_endpoint_stays_updating_ends_failed_past_its_deadline(
    world: World,
) -> None:
    """Autoscaling keeps the endpoint Updating: weight 0 is refused on every tick. Past the
    deadline the rollback ends FAILED, the lock released, the canary's raised minimum put back
    (its maximum not lowered: it still takes 25 %), the operator told what it waited for and how
    long."""
    sent = record_sent(world)
    result = rolling_back_at_25(world)
    refused = refuse_while_updating(world.controller.sm)
    set_endpoint_status("Updating")
    set_alarm("canary-5xx", "ALARM", "5XX burst")
    result = advance(world, result)
    assert result["status"] == "ROLLING_BACK" and refused
    ticks = 0
    while not result["done"]:
        result = advance(world, result)
        ticks += 1
    state = record(world)
    assert state["status"] == "FAILED" and state["last_decision"] == "timeout"
    assert ticks == UPDATING_TIMEOUT // CHECK
    assert weights()["canary"] == 25.0  # nothing could move it
    assert canary_bounds() == (PLAN.canary_min, PLAN.steps[1].max_capacity)
    note = sent[-1]
    assert (
        note["subject"]
        == (
            f"[{ENDPOINT}] canary rollback timed out: {UPDATING_TIMEOUT}s waiting for weight 0 "
            "(endpoint Updating)"
        )[:100]
    )
    back = f"the canary's bounds back to {PLAN.canary_min}..{PLAN.steps[1].max_capacity}"
    assert back in note["last_reason"] and "make canary-rollback" in note["last_reason"]
    assert note["rollback_reason"].startswith("alarm: canary-5xx")


def test_a_rollback_waiting_for_in_service_after_weight_0_ends_with_its_bounds_restored(
    world: World,
) -> None:
    """Weight 0 landed, then the endpoint stayed Updating: the bounds could not be restored by the
    rollback's own step; past the deadline it ends FAILED with the canary's bounds back to its
    configured ones (its weight is 0: nothing is scaled in under traffic)."""
    sent = record_sent(world)
    result = rolling_back_at_25(world)
    real = world.controller.sm.update_endpoint_weights_and_capacities

    def then_updating(**kw: Any) -> Any:
        answer = real(**kw)
        if any(v.get("DesiredWeight") == 0.0 for v in kw["DesiredWeightsAndCapacities"]):
            set_endpoint_status("Updating")
        return answer

    world.controller.sm.update_endpoint_weights_and_capacities = then_updating
    set_alarm("canary-5xx", "ALARM", "5XX burst")
    while not result["done"]:
        result = advance(world, result)
    state = record(world)
    assert state["status"] == "FAILED" and weights()["canary"] == 0.0
    assert canary_bounds() == (PLAN.canary_min, PLAN.canary_max)
    assert sent[-1]["subject"].startswith(
        f"[{ENDPOINT}] canary rollback timed out: {UPDATING_TIMEOUT}s waiting for InService "
        "after weight 0"
    )


def test_a_running_rollout_whose_endpoint_stays_updating_rolls_back_naming_it(
    world: World,
) -> None:
    """While baking, the endpoint stays Updating past the updating timeout: the rollout rolls
    back with that reason (not a hold without end); once InService the rollback completes."""
    sent = record_sent(world)
    result = rolling_back_at_25(world)
    set_endpoint_status("Updating")
    while result["status"] == "RUNNING":
        result = advance(world, result)
        assert world.clock.now - record(world)["started_at"] < 10 * BAKE
    set_endpoint_status("InService")
    while not result["done"]:
        result = advance(world, result)
    assert record(world)["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    assert canary_bounds() == (PLAN.canary_min, PLAN.canary_max)
    assert sent[-1]["rollback_reason"].startswith(
        f"the endpoint stayed Updating for {UPDATING_TIMEOUT}s (updating timeout"
    )
