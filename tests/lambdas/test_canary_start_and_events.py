"""Canary controller against moto, the lock and the events: start refused or idempotent, a failed
StartExecution releasing the lock, malformed events rejected without side effects, settings
read from the Lambda environment."""

from __future__ import annotations

import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from lambdas.canary_controller import handler as ctl
from tests.lambdas.conftest import (
    ALARMS,
    BAKE,
    CHECK,
    ENDPOINT,
    PLAN,
    STEPS,
    World,
    canary_bounds,
    set_alarm,
    weights,
)


def test_failed_start_execution_releases_the_lock_and_the_same_id_starts_it(world: World) -> None:
    real = world.controller.sfn.start_execution
    attempts: list[str] = []

    def flaky(**kw: Any) -> Any:
        attempts.append(kw["name"])
        if len(attempts) == 1:
            raise ClientError(
                {"Error": {"Code": "ServiceUnavailable", "Message": "try later"}}, "StartExecution"
            )
        return real(**kw)

    world.controller.sfn.start_execution = flaky
    with pytest.raises(ctl.StartFailed, match="lock released"):
        world.start("r1")
    state = world.controller.load()
    assert state is not None and state["status"] == "FAILED"
    [note] = world.notifications()
    assert note["status"] == "FAILED" and "ServiceUnavailable" in note["last_reason"]
    again = world.start("r1")
    assert again["status"] == "RUNNING" and not again["duplicate"] and attempts == ["r1", "r1"]
    execs = world.executions()
    assert [e["name"] for e in execs] == ["r1"]


def test_alarm_already_firing_refuses_start(world: World) -> None:
    set_alarm("canary-5xx", "ALARM", "5XX burst")
    with pytest.raises(ctl.RolloutConflict, match="canary-5xx"):
        world.start()
    assert world.controller.load() is None


def test_duplicate_start_is_a_no_op(world: World) -> None:
    world.start()
    again = world.start()
    assert again["duplicate"] and again["seq"] == 0
    execs = world.executions()
    assert len(execs) == 1


def test_concurrent_start_is_refused(world: World) -> None:
    world.start("r1")
    with pytest.raises(ctl.RolloutConflict, match="'r1' is already RUNNING"):
        world.start("r2")
    world.controller.load = lambda: None  # type: ignore[method-assign]
    with pytest.raises(ctl.RolloutConflict, match="took the lock"):
        world.start("r3")
    world.controller.load = ctl.Controller.load.__get__(world.controller)  # type: ignore[method-assign]
    assert world.controller.load()["rollout_id"] == "r1"  # type: ignore[index]


def test_tick_without_any_rollout_is_rejected(world: World) -> None:
    with pytest.raises(ctl.EventError, match="no rollout recorded"):
        world.tick("r9", 0)


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ([], "must be a JSON object"),
        ({"endpoint_name": ENDPOINT}, "'action' must be one of"),
        ({"action": "promote", "endpoint_name": ENDPOINT}, "'action' must be one of"),
        ({"action": "status", "endpoint_name": "other"}, "'endpoint_name' must be"),
        ({"action": "start", "endpoint_name": ENDPOINT}, "'rollout_id' must be"),
        ({"action": "start", "endpoint_name": ENDPOINT, "rollout_id": "a b"}, "'rollout_id'"),
        ({"action": "rollback", "endpoint_name": ENDPOINT, "rollout_id": 7}, "'rollout_id'"),
        ({"action": "tick", "endpoint_name": ENDPOINT, "rollout_id": "r1"}, "'seq' must be"),
        ({"action": "tick", "endpoint_name": ENDPOINT, "rollout_id": "r1", "seq": -1}, "'seq'"),
        ({"action": "tick", "endpoint_name": ENDPOINT, "rollout_id": "r1", "seq": "1"}, "'seq'"),
        ({"action": "tick", "endpoint_name": ENDPOINT, "rollout_id": "r1", "seq": True}, "'seq'"),
        ({"action": "rollback", "endpoint_name": ENDPOINT, "reason": 5}, "'reason' must be"),
        # `$` alone would accept a trailing newline: the id is matched whole
        ({"action": "start", "endpoint_name": ENDPOINT, "rollout_id": "r1\n"}, "'rollout_id'"),
        (
            {"action": "rollback", "endpoint_name": ENDPOINT, "reason": "x" * 501},
            "'reason' must be at most 500 characters; got 501",
        ),
        (
            {
                "action": "start",
                "endpoint_name": ENDPOINT,
                "rollout_id": "r1",
                "requested_by": "ops\r\nSubject: forged",
            },
            "'requested_by' must be one line without control characters",
        ),
        (
            {
                "action": "start",
                "endpoint_name": ENDPOINT,
                "rollout_id": "r1",
                "requested_by": "a" * 257,
            },
            "'requested_by' must be at most 256",
        ),
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
        "CHECK_SECONDS": str(CHECK), "MIN_CANARY_INVOCATIONS": "100",
        "MAX_ERROR_RATE_INCREASE_PERCENT": "0.5", "EVIDENCE_TIMEOUT_SECONDS": "3600",
        "CAPACITY_PLAN": PLAN.to_json(),
    }  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert ctl.Settings.from_env().rules == s.rules
    started = ctl.handler({"action": "start", "endpoint_name": ENDPOINT, "rollout_id": "env"})
    assert started["status"] == "RUNNING"
    ticked = ctl.handler(
        {"action": "tick", "endpoint_name": ENDPOINT, "rollout_id": "env", "seq": 0}
    )
    assert ticked["last_decision"] == "scale" and canary_bounds() == (1, 2)
