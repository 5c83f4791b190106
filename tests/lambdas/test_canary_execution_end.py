"""Issue 20 item 3.2: every way a rollout's execution ends releases or hands on the lock, and the
operator is told.

AWS behaviour relied on (cited from AWS's documentation):

- Step Functions sends "Step Functions Execution Status Change" events to EventBridge for each
  status change of a standard workflow's execution (``source`` aws.states; ``detail`` carries
  ``executionArn``, ``stateMachineArn``, ``name`` and ``status``: FAILED, TIMED_OUT, ABORTED among
  them), delivered "best effort" (EventBridge events reference, AWS Step Functions events; Step
  Functions developer guide, "Automating Step Functions event delivery with EventBridge"). The
  rule built in stacks/constructs/rollout_state_machine.py sends those three to the controller as
  ``execution-ended``; :func:`canary_lifecycle.execution_ended` is what its input transformer
  builds.
- An execution's history holds at most 25,000 events (Step Functions service quotas); a long
  workflow continues as a new execution started from a Task state (developer guide, "Continue
  long-running workflows using Step Functions API"). StartExecution with the name and input of an
  open execution returns it without starting another (API reference, StartExecution; moto
  implements the same).
- UpdateEndpointWeightsAndCapacities answering AccessDenied (a policy changed under the
  controller) fails every attempt: the state machine's retries are exhausted after ~34 minutes
  (Tick: 20 + 40 + 80 s; RollbackOnError: 30 s doubling, 6 retries) and the execution FAILS.
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from lambdas.canary_controller import handler as ctl
from tests.lambdas.canary_lifecycle import (
    execution_ended,
    record,
    record_sent,
    run_execution,
)
from tests.lambdas.conftest import (
    ENDPOINT,
    REGION,
    World,
    advance,
    canary_bounds,
    refuse_while_updating,
    set_endpoint_status,
    to_percent,
    weights,
)


def executions(world: World) -> dict[str, dict[str, Any]]:
    """The state machine's executions by name, with their input."""
    sfn = boto3.client("stepfunctions", region_name=REGION)
    found = {}
    for e in world.executions():
        found[e["name"]] = sfn.describe_execution(executionArn=e["executionArn"])
    return found


def test_start_records_the_execution_and_the_endpoint_it_found(world: World) -> None:
    world.start()
    state = record(world)
    assert state["execution"] == "r1" and list(executions(world)) == ["r1"]
    assert (state["endpoint_config_name"], state["canary_percent"]) == ("cfg-1", 5)
    started = executions(world)["r1"]
    assert json.loads(started["input"]) == {
        "endpoint_name": ENDPOINT, "rollout_id": "r1", "seq": 0, "iteration": 0,
    }  # fmt: skip


# ------------------------------------------------------------------ execution-ended


@pytest.mark.parametrize("status", ["FAILED", "TIMED_OUT", "ABORTED"])
def test_an_execution_that_ends_mid_rollout_rolls_the_canary_back_and_says_so(
    world: World, status: str
) -> None:
    sent = record_sent(world)
    world.start()
    to_percent(world, world.tick("r1", 0), 25)
    assert canary_bounds() == (2, 2)
    ended = execution_ended(world, "r1", status)
    assert ended["status"] == "ROLLED_BACK" and ended["done"]
    assert weights() == {"canary": 0.0, "primary": 100.0} and canary_bounds() == (1, 2)
    state = record(world)
    assert state["rollback_reason"].startswith(f"execution r1 ended {status} while the rollout")
    [note] = sent
    assert note["status"] == "ROLLED_BACK"
    assert note["subject"].startswith(f"[{ENDPOINT}] canary rolled back: execution r1 ended")
    assert world.start("r2")["status"] == "RUNNING"  # the lock is released


def test_a_rollback_that_cannot_land_at_once_is_driven_by_a_new_recorded_execution(
    world: World,
) -> None:
    sent = record_sent(world)
    refuse_while_updating(world.controller.sm)
    world.start()
    to_percent(world, world.tick("r1", 0), 5)
    set_endpoint_status("Updating")
    ended = execution_ended(world, "r1", "FAILED")
    assert ended["status"] == "ROLLING_BACK" and not ended["done"]
    driver = ended["execution"]
    assert driver.startswith("r1-rb-") and record(world)["execution"] == driver
    assert json.loads(executions(world)[driver]["input"])["seq"] == ended["seq"]
    [note] = sent
    assert (
        note["subject"]
        == (f"[{ENDPOINT}] canary rollout execution FAILED: rolling back, driven by {driver}"[:100])
    )
    # The driver's ticks finish the rollback once SageMaker takes the change.
    set_endpoint_status("InService")
    while not ended["done"]:
        ended = advance(world, ended)
    assert ended["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    assert [n["status"] for n in sent] == ["ROLLING_BACK", "ROLLED_BACK"]


def test_a_late_event_from_an_older_execution_changes_nothing(world: World) -> None:
    refuse_while_updating(world.controller.sm)
    world.start()
    to_percent(world, world.tick("r1", 0), 5)
    set_endpoint_status("Updating")
    rolled = world.run({"action": "rollback", "endpoint_name": ENDPOINT, "requested_by": "bob"})
    driver = record(world)["execution"]
    assert driver.startswith("r1-rb-") and rolled["execution"] == driver
    before = record(world)
    # The rollout's own execution, no longer the one recorded, is stopped: nothing happens.
    assert execution_ended(world, "r1", "ABORTED")["seq"] == before["seq"]
    assert record(world) == before and len(world.executions()) == 2


def test_an_event_for_a_rollout_that_already_ended_changes_nothing(world: World) -> None:
    world.start()
    world.run({"action": "rollback", "endpoint_name": ENDPOINT, "reason": "bad answers"})
    before = record(world)
    assert before["status"] == "ROLLED_BACK"
    # Its execution then ends in the RolledBack Fail state: a FAILED event.
    assert execution_ended(world, "r1", "FAILED")["status"] == "ROLLED_BACK"
    assert record(world) == before
    assert execution_ended(world, "nobody", "TIMED_OUT")["status"] == "ROLLED_BACK"


def test_no_execution_can_start_records_failed_releases_the_lock_and_says_so(
    world: World,
) -> None:
    sent = record_sent(world)
    refuse_while_updating(world.controller.sm)
    world.start()
    to_percent(world, world.tick("r1", 0), 5)
    set_endpoint_status("Updating")

    def down(**_: Any) -> Any:
        raise EndpointConnectionError(endpoint_url="https://states.us-east-1.amazonaws.com")

    world.controller.sfn.start_execution = down
    ended = execution_ended(world, "r1", "TIMED_OUT")
    state = record(world)
    assert ended["status"] == state["status"] == "FAILED" and state["last_decision"] == "abort"
    assert "no execution could be started to drive the rollback" in state["last_reason"]
    assert "may still take traffic" in state["last_reason"]
    assert sent[-1]["subject"] == f"[{ENDPOINT}] canary rollout FAILED: no execution drives it"
    set_endpoint_status("InService")
    with pytest.raises(ctl.StartFailed):  # the lock is free; Step Functions is still down
        world.start("r2")


def test_weight_calls_denied_for_40_minutes_end_failed_and_notified(world: World) -> None:
    """The adversarial run: UpdateEndpointWeightsAndCapacities answers AccessDenied for every
    call. Each execution exhausts its retries and FAILS; each end is noticed; the third lost
    execution records FAILED. Before, the first failure left the record ROLLING_BACK forever."""
    sent = record_sent(world)
    started = world.start()

    def denied(**_: Any) -> Any:
        raise ClientError(
            {"Error": {"Code": "AccessDeniedException", "Message": "not authorized"},
             "ResponseMetadata": {"HTTPStatusCode": 400}},
            "UpdateEndpointWeightsAndCapacities",
        )  # fmt: skip

    world.controller.sm.update_endpoint_weights_and_capacities = denied
    t0, name, result, ends = world.clock.now, "r1", started, []
    for _ in range(ctl.MAX_LOST_EXECUTIONS):
        assert run_execution(world, name, result) == "FAILED"
        ends.append(world.clock.now)
        result = execution_ended(world, name, "FAILED")
        name = result.get("execution") or name
    assert 30 * 60 < ends[0] - t0 < 40 * 60  # the first execution's retries: ~34 minutes
    state = record(world)
    assert state["status"] == "FAILED" and state["lost_executions"] == 2
    assert "3 executions of this rollout have ended before it did" in state["last_reason"]
    drivers = sorted(e for e in executions(world) if e != "r1")
    assert [n["subject"] for n in sent] == [
        *(f"[{ENDPOINT}] canary rollout execution FAILED: rolling back, driven by {d}"[:100]
          for d in drivers),
        f"[{ENDPOINT}] canary rollout FAILED: no execution drives it",
    ]  # fmt: skip
    assert weights()["canary"] == 5.0  # honest: the canary still has traffic, the message says so
    assert world.run({"action": "status", "endpoint_name": ENDPOINT})["done"]


def test_a_read_failure_while_acting_on_the_event_is_told_and_raised(world: World) -> None:
    sent = record_sent(world)
    world.start()

    def unreachable(**_: Any) -> Any:
        raise EndpointConnectionError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")

    world.controller.table.get_item = unreachable
    with pytest.raises(EndpointConnectionError):  # Lambda retries an async invocation twice
        execution_ended(world, "r1", "FAILED")
    [note] = sent
    assert "execution r1 FAILED: the controller could not act" in note["subject"]
    assert "make canary-rollback" in note["last_reason"]


# ------------------------------------------------------------------ continuing as new


def hand_on(world: World, result: dict[str, Any], execution: str) -> dict[str, Any]:
    """What the HandOn state sends once the loop has counted its iterations."""
    return world.run(
        {"action": "continue", "endpoint_name": ENDPOINT, "rollout_id": result["rollout_id"],
         "seq": result["seq"], "execution_name": execution, "iteration": 200}
    )  # fmt: skip


def test_a_long_rollout_continues_as_a_new_recorded_execution(world: World) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    handed = hand_on(world, result, "r1")
    assert handed["handed_on"] and not handed["done"] and handed["iteration"] == 200
    new = record(world)["execution"]
    assert new.startswith(f"r1-c{handed['seq']}-") and handed["execution"] == new
    assert json.loads(executions(world)[new]["input"]) == {
        "endpoint_name": ENDPOINT, "rollout_id": "r1", "seq": handed["seq"], "iteration": 0,
    }  # fmt: skip
    assert record(world)["history"][-1]["decision"] == "execution"
    assert record(world)["last_decision"] == "shift"  # what the rollout is doing is unchanged
    # The new execution drives on from the recorded seq; its end is the one noticed now.
    world.clock.now += 300
    nxt = world.tick("r1", handed["seq"])
    assert not nxt["duplicate"] and nxt["last_decision"] == "bake"
    assert execution_ended(world, "r1", "FAILED")["status"] == "RUNNING"  # the old one: ignored


def test_continue_from_an_execution_no_longer_recorded_just_ends_it(world: World) -> None:
    world.start()
    result = world.tick("r1", 0)
    handed = hand_on(world, result, "someone-else")
    assert handed["handed_on"] and len(world.executions()) == 1
    assert record(world)["execution"] == "r1"


def test_a_continuation_that_cannot_start_keeps_the_old_execution(world: World) -> None:
    world.start()
    result = world.tick("r1", 0)

    def throttled(**_: Any) -> Any:
        raise ClientError(
            {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "StartExecution"
        )

    world.controller.sfn.start_execution = throttled
    handed = hand_on(world, result, "r1")
    assert not handed["handed_on"] and not handed["done"]
    state = record(world)
    assert state["execution"] == "r1" and handed["seq"] == state["seq"]
    assert "ThrottlingException" in state["history"][-1]["reason"]
    # Its end is still noticed.
    assert execution_ended(world, "r1", "FAILED")["status"] in ("ROLLED_BACK", "ROLLING_BACK")


def test_the_loop_count_is_echoed_to_the_state_machine(world: World) -> None:
    world.start()
    ticked = world.run(
        {"action": "tick", "endpoint_name": ENDPOINT, "rollout_id": "r1", "seq": 0, "iteration": 7}
    )
    assert ticked["iteration"] == 7


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"action": "execution-ended", "execution_name": "r1"}, "'execution_status' must be"),
        ({"action": "execution-ended", "execution_name": "r1", "execution_status": "SUCCEEDED"},
         "'execution_status' must be one of FAILED, TIMED_OUT, ABORTED"),
        ({"action": "execution-ended", "execution_status": "FAILED"}, "'execution_name' must"),
        ({"action": "continue", "rollout_id": "r1", "seq": 1}, "'execution_name' must"),
        ({"action": "continue", "rollout_id": "r1", "execution_name": "r1"}, "'seq' must"),
        ({"action": "tick", "rollout_id": "r1", "seq": 1, "iteration": -1}, "'iteration' must"),
    ],
)  # fmt: skip
def test_malformed_lifecycle_events_are_rejected_without_side_effects(
    world: World, event: dict[str, Any], message: str
) -> None:
    world.start()
    before = record(world)
    with pytest.raises(ctl.EventError, match=message):
        world.run({"endpoint_name": ENDPOINT, **event})
    assert record(world) == before
