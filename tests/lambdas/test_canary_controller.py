"""Canary controller against moto: SageMaker weights, CloudWatch alarms, DynamoDB lock, SNS."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from lambdas.canary_controller import handler as ctl
from tests.lambdas.conftest import (
    ALARMS,
    BAKE,
    CHECK,
    ENDPOINT,
    REGION,
    STEPS,
    World,
    set_alarm,
    set_endpoint_status,
    weights,
)


def walk(world: World, result: dict[str, Any], rollout_id: str = "r1") -> dict[str, Any]:
    """Follow the state machine's loop (wait the returned seconds, tick) until the rollout ends."""
    seen: list[int] = []
    while not result["done"]:
        world.clock.now += result["wait_seconds"]
        result = world.tick(rollout_id, result["seq"])
        if result["last_decision"] == "advance":
            assert weights() == {"canary": result["current_percent"],
                                 "primary": 100 - result["current_percent"]}  # fmt: skip
            seen.append(result["current_percent"])
    result["walked"] = seen
    return result


def test_full_rollout_walks_every_step_with_bake_and_completes(world: World) -> None:
    started = world.start()
    assert started["status"] == "RUNNING" and started["seq"] == 0
    execs = boto3.client("stepfunctions", region_name=REGION).list_executions(
        stateMachineArn=world.state_machine_arn
    )["executions"]
    assert [e["name"] for e in execs] == ["r1"]

    first = world.tick("r1", 0)
    assert first["last_decision"] == "advance" and weights() == {"canary": 5.0, "primary": 95.0}
    # During the bake the weight stays, and the loop checks again every CHECK seconds.
    world.clock.now += CHECK
    baking = world.tick("r1", first["seq"])
    assert baking["last_decision"] == "bake" and weights()["canary"] == 5.0
    assert baking["wait_seconds"] == CHECK

    final = walk(world, baking)
    assert final["walked"] == [25, 50, 75, 100]
    assert final["status"] == "COMPLETED" and final["last_decision"] == "complete"
    assert weights() == {"canary": 100.0, "primary": 0.0}
    assert world.clock.now - started["started_at"] == BAKE * len(STEPS)
    decisions = [h["decision"] for h in final["history"]]
    assert decisions.count("advance") == len(STEPS) and decisions[0] == "start"
    [note] = world.notifications()
    assert note["status"] == "COMPLETED" and "promote" in note["last_reason"]
    # The lock is released: a new rollout may start.
    assert world.start("r2")["status"] == "RUNNING"


def test_alarm_mid_rollout_rolls_back_records_reason_and_notifies(world: World) -> None:
    world.start()
    result = world.tick("r1", 0)
    while result["current_percent"] < 50:
        world.clock.now += BAKE
        result = world.tick("r1", result["seq"])
    assert weights()["canary"] == 50.0
    set_alarm("canary-ttft", "ALARM", "Threshold Crossed: TTFT p90 2.4 s > 1.5 s")
    world.clock.now += CHECK
    rolled = world.tick("r1", result["seq"])
    assert rolled["status"] == "ROLLED_BACK" and rolled["done"]
    assert weights() == {"canary": 0.0, "primary": 100.0}
    assert "canary-ttft" in rolled["last_reason"] and "TTFT p90 2.4 s" in rolled["last_reason"]
    [note] = world.notifications()
    assert note["status"] == "ROLLED_BACK" and "canary-ttft" in note["last_reason"]
    # Later ticks change nothing.
    world.clock.now += BAKE
    again = world.tick("r1", rolled["seq"])
    assert again["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    status = world.run({"action": "status", "endpoint_name": ENDPOINT})
    assert status["last_decision"] == "rollback" and status["current_percent"] == 50


def test_alarm_already_firing_refuses_start(world: World) -> None:
    set_alarm("canary-5xx", "ALARM", "5XX burst")
    with pytest.raises(ctl.RolloutConflict, match="canary-5xx"):
        world.start()
    assert world.controller.load() is None


def test_missing_alarm_counts_as_firing_and_rolls_back(world: World) -> None:
    world.start()
    result = world.tick("r1", 0)
    boto3.client("cloudwatch", region_name=REGION).delete_alarms(AlarmNames=["canary-5xx"])
    world.clock.now += CHECK
    rolled = world.tick("r1", result["seq"])
    assert rolled["status"] == "ROLLED_BACK" and "alarm not found" in rolled["last_reason"]


def test_endpoint_not_in_service_refuses_start_and_pauses_ticks(world: World) -> None:
    set_endpoint_status("Updating")
    with pytest.raises(ctl.RolloutConflict, match="Updating, not InService"):
        world.start()
    set_endpoint_status("InService")
    world.start()
    result = world.tick("r1", 0)
    set_endpoint_status("SystemUpdating")
    world.clock.now += BAKE
    paused = world.tick("r1", result["seq"])
    assert paused["last_decision"] == "wait" and paused["status"] == "RUNNING"
    assert weights()["canary"] == 5.0 and paused["step_index"] == 0
    set_endpoint_status("InService")
    resumed = world.tick("r1", paused["seq"])
    assert resumed["last_decision"] == "advance" and weights()["canary"] == 25.0


def test_failed_endpoint_abandons_rollout(world: World) -> None:
    world.start()
    set_endpoint_status("Failed")
    result = world.tick("r1", 0)
    assert result["status"] == "FAILED" and "Failed" in result["last_reason"]
    assert weights()["canary"] == 5.0  # untouched: a Failed endpoint accepts no update


def test_duplicate_tick_neither_skips_nor_repeats_a_step(world: World) -> None:
    world.start()
    first = world.tick("r1", 0)
    assert first["current_percent"] == 5
    world.clock.now += BAKE
    redelivered = world.tick("r1", 0)  # the same event again, after the bake
    assert redelivered["duplicate"] and redelivered["seq"] == first["seq"]
    assert weights()["canary"] == 5.0 and redelivered["step_index"] == 0
    second = world.tick("r1", first["seq"])
    assert second["current_percent"] == 25
    again = world.tick("r1", first["seq"])
    assert again["duplicate"] and again["current_percent"] == 25 and weights()["canary"] == 25.0


def test_duplicate_start_is_a_no_op(world: World) -> None:
    world.start()
    again = world.start()
    assert again["duplicate"] and again["seq"] == 0
    execs = boto3.client("stepfunctions", region_name=REGION).list_executions(
        stateMachineArn=world.state_machine_arn
    )["executions"]
    assert len(execs) == 1


def test_concurrent_start_is_refused(world: World) -> None:
    world.start("r1")
    with pytest.raises(ctl.RolloutConflict, match="'r1' is already RUNNING"):
        world.start("r2")
    # A racer that read the table before r1 wrote it is stopped by the conditional write.
    world.controller.load = lambda: None  # type: ignore[method-assign]
    with pytest.raises(ctl.RolloutConflict, match="took the lock"):
        world.start("r3")
    world.controller.load = ctl.Controller.load.__get__(world.controller)  # type: ignore[method-assign]
    assert world.controller.load()["rollout_id"] == "r1"  # type: ignore[index]


def test_operator_rollback_releases_the_lock(world: World) -> None:
    world.start()
    result = world.tick("r1", 0)
    world.clock.now += BAKE
    world.tick("r1", result["seq"])
    rolled = world.run(
        {"action": "rollback", "endpoint_name": ENDPOINT, "reason": "bad answers",
         "requested_by": "bob"}
    )  # fmt: skip
    assert rolled["status"] == "ROLLED_BACK" and "bad answers (by bob)" in rolled["last_reason"]
    assert weights() == {"canary": 0.0, "primary": 100.0}
    assert world.start("r2")["status"] == "RUNNING"


def test_rollback_without_rollout_still_zeroes_the_canary(world: World) -> None:
    rolled = world.run({"action": "rollback", "endpoint_name": ENDPOINT})
    assert rolled["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0


def test_tick_without_any_rollout_is_rejected(world: World) -> None:
    with pytest.raises(ctl.EventError, match="no rollout recorded"):
        world.tick("r9", 0)


def test_stale_execution_ends_without_touching_the_newer_rollout(world: World) -> None:
    world.start("r1")
    first = world.tick("r1", 0)
    world.run({"action": "rollback", "endpoint_name": ENDPOINT})
    world.start("r2")
    r2 = world.tick("r2", 0)
    assert weights()["canary"] == 5.0
    world.clock.now += BAKE
    stale = world.tick("r1", first["seq"])
    assert stale["status"] == "SUPERSEDED" and stale["done"] and "'r2'" in stale["last_reason"]
    current = world.controller.load()
    assert current is not None and current["rollout_id"] == "r2" and current["seq"] == r2["seq"]
    assert weights()["canary"] == 5.0


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ([], "must be a JSON object"),
        ({"endpoint_name": ENDPOINT}, "'action' must be one of"),
        ({"action": "promote", "endpoint_name": ENDPOINT}, "'action' must be one of"),
        ({"action": "status", "endpoint_name": "other"}, "'endpoint_name' must be"),
        ({"action": "start", "endpoint_name": ENDPOINT}, "'rollout_id' must be"),
        ({"action": "start", "endpoint_name": ENDPOINT, "rollout_id": "a b"}, "'rollout_id'"),
        ({"action": "tick", "endpoint_name": ENDPOINT, "rollout_id": "r1"}, "'seq' must be"),
        ({"action": "tick", "endpoint_name": ENDPOINT, "rollout_id": "r1", "seq": -1}, "'seq'"),
        ({"action": "tick", "endpoint_name": ENDPOINT, "rollout_id": "r1", "seq": "1"}, "'seq'"),
        ({"action": "tick", "endpoint_name": ENDPOINT, "rollout_id": "r1", "seq": True}, "'seq'"),
        ({"action": "rollback", "endpoint_name": ENDPOINT, "reason": 5}, "'reason' must be"),
    ],
)
def test_malformed_events_are_rejected_without_side_effects(
    world: World, event: Any, message: str
) -> None:
    with pytest.raises(ctl.EventError, match=message):
        world.run(event)
    assert world.controller.load() is None
    assert weights() == {"primary": 95.0, "canary": 5.0}


def test_handler_reads_its_settings_from_the_environment(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = world.controller.s
    env = {
        "ENDPOINT_NAME": s.endpoint_name, "TABLE_NAME": s.table_name, "TOPIC_ARN": s.topic_arn,
        "STATE_MACHINE_ARN": s.state_machine_arn, "ALARM_NAMES": json.dumps(list(ALARMS)),
        "STEPS_PERCENT": json.dumps(list(STEPS)), "BAKE_SECONDS": str(BAKE),
        "CHECK_SECONDS": str(CHECK),
    }  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    started = ctl.handler({"action": "start", "endpoint_name": ENDPOINT, "rollout_id": "env"})
    assert started["status"] == "RUNNING"
    ticked = ctl.handler(
        {"action": "tick", "endpoint_name": ENDPOINT, "rollout_id": "env", "seq": 0}
    )
    assert ticked["current_percent"] == 5 and weights()["canary"] == 5.0


def test_rollback_stands_even_when_the_notification_fails(world: World) -> None:
    world.start()
    result = world.tick("r1", 0)
    boto3.client("sns", region_name=REGION).delete_topic(TopicArn=world.controller.s.topic_arn)
    set_alarm("canary-5xx", "ALARM", "5XX burst")
    rolled = world.tick("r1", result["seq"])
    assert rolled["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    assert world.controller.load()["status"] == "ROLLED_BACK"  # type: ignore[index]
