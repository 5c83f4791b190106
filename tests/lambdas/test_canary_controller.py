"""Canary controller against moto: SageMaker weights and counts, Application Auto Scaling bounds,
CloudWatch alarms and metrics, DynamoDB lock, SNS. Faults are injected into the AWS calls."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from lambdas.canary_controller import handler as ctl
from tests.lambdas.conftest import (
    ALARMS,
    BAKE,
    CHECK,
    ENDPOINT,
    PLAN,
    REGION,
    STEPS,
    World,
    canary_bounds,
    instances,
    set_alarm,
    set_endpoint_status,
    validation_error,
    weights,
)


def advance(world: World, result: dict[str, Any], rollout_id: str = "r1") -> dict[str, Any]:
    """One loop turn of the state machine: wait what the controller asked, traffic flows, tick."""
    world.clock.now += result["wait_seconds"]
    world.traffic()
    return world.tick(rollout_id, result["seq"])


def to_percent(
    world: World, result: dict[str, Any], percent: int, rollout_id: str = "r1"
) -> dict[str, Any]:
    while not (result["last_decision"] == "shift" and result["current_percent"] == percent):
        assert not result["done"], result
        result = advance(world, result, rollout_id)
    return result


def walk(world: World, result: dict[str, Any]) -> dict[str, Any]:
    """Follow the loop until the rollout ends; record the canary's instances at every shift."""
    seen: list[tuple[int, int]] = []
    while not result["done"]:
        before = instances()["canary"]
        result = advance(world, result)
        if result["last_decision"] == "shift":
            pct = result["current_percent"]
            assert weights() == {"canary": pct, "primary": 100 - pct}
            # Capacity came first: the instances were already there before the weight moved.
            assert instances()["canary"] == before
            seen.append((pct, before))
    result["walked"] = seen
    return result


def test_full_rollout_walks_every_step_with_bake_and_completes(world: World) -> None:
    started = world.start()
    assert started["status"] == "RUNNING" and started["seq"] == 0
    execs = boto3.client("stepfunctions", region_name=REGION).list_executions(
        stateMachineArn=world.state_machine_arn
    )["executions"]
    assert [e["name"] for e in execs] == ["r1"]
    first = to_percent(world, world.tick("r1", 0), 5)
    assert weights() == {"canary": 5.0, "primary": 95.0}
    world.clock.now += CHECK
    baking = world.tick("r1", first["seq"])
    assert baking["last_decision"] == "bake" and baking["wait_seconds"] == CHECK
    final = walk(world, baking)
    assert [p for p, _ in final["walked"]] == [25, 50, 75, 100]
    assert final["status"] == "COMPLETED" and final["last_decision"] == "complete"
    assert weights() == {"canary": 100.0, "primary": 0.0}
    assert world.clock.now - started["started_at"] >= BAKE * len(STEPS)
    decisions = [h["decision"] for h in final["history"]]
    assert decisions.count("shift") == len(STEPS) and decisions[0] == "start"
    [note] = world.notifications()
    assert note["status"] == "COMPLETED" and "promote" in note["last_reason"]
    assert world.start("r2")["status"] == "RUNNING"  # the lock is released


# ------------------------------------------------------------------ item 5: capacity first


def test_canary_gets_its_instances_and_bounds_before_each_weight_step(world: World) -> None:
    calls: list[str] = []
    sm, aas = world.controller.sm, world.controller.aas
    real_update, real_register = (
        sm.update_endpoint_weights_and_capacities,
        aas.register_scalable_target,
    )

    def update(**kw: Any) -> Any:
        for v in kw["DesiredWeightsAndCapacities"]:
            if v["VariantName"] == "canary":
                calls.append(
                    f"weight {v['DesiredWeight']:g}" if "DesiredWeight" in v
                    else f"count {v['DesiredInstanceCount']}"
                )  # fmt: skip
        return real_update(**kw)

    def register(**kw: Any) -> Any:
        calls.append(f"bounds {kw['MinCapacity']}..{kw['MaxCapacity']}")
        return real_register(**kw)

    sm.update_endpoint_weights_and_capacities = update
    aas.register_scalable_target = register
    world.start()
    final = walk(world, world.tick("r1", 0))
    assert final["status"] == "COMPLETED"
    # primary: 4 instances (moto does not autoscale it), so demand is 4 / primary share.
    assert [n for _, n in final["walked"]] == [1, 2, 3, 6, 8]
    for pct, n in final["walked"]:
        # Traffic is constant here: 4 primary instances served 95 % of it before the rollout.
        # At every step the canary has at least as many instances per share of traffic.
        assert n / (pct / 100) >= 4 / 0.95
    # Per step: bounds, then desired count, then (after InService) the weight.
    assert calls[:3] == ["bounds 1..2", "count 1", "weight 5"]
    assert calls[3:6] == ["bounds 2..2", "count 2", "weight 25"]
    assert calls[-3:] == ["bounds 8..8", "count 8", "weight 100"]
    assert canary_bounds() == (8, PLAN.steps[-1].max_capacity)


def test_rollback_moves_weight_first_then_restores_the_canary_bounds(world: World) -> None:
    world.start()
    to_percent(world, world.tick("r1", 0), 50)
    assert canary_bounds() == (3, 4) and instances()["canary"] == 3
    order: list[str] = []
    sm, aas = world.controller.sm, world.controller.aas
    real_update, real_register = (
        sm.update_endpoint_weights_and_capacities,
        aas.register_scalable_target,
    )
    sm.update_endpoint_weights_and_capacities = lambda **kw: (
        order.append("weight"),
        real_update(**kw),
    )[1]
    aas.register_scalable_target = lambda **kw: (order.append("shrink"), real_register(**kw))[1]
    rolled = world.run({"action": "rollback", "endpoint_name": ENDPOINT, "reason": "bad answers"})
    assert rolled["status"] == "ROLLED_BACK" and order == ["weight", "shrink"]
    assert weights() == {"canary": 0.0, "primary": 100.0}
    assert canary_bounds() == (PLAN.canary_min, PLAN.canary_max)


def test_a_step_waits_while_the_canary_has_fewer_instances_than_planned(world: World) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    world.clock.now += BAKE
    world.traffic()
    # SageMaker accepted the bounds, but the desired count did not land (another change won).
    real = world.controller.sm.update_endpoint_weights_and_capacities

    def ignore_counts(**kw: Any) -> Any:
        if any("DesiredInstanceCount" in v for v in kw["DesiredWeightsAndCapacities"]):
            return {}
        return real(**kw)

    world.controller.sm.update_endpoint_weights_and_capacities = ignore_counts
    scale = world.tick("r1", result["seq"])
    assert scale["last_decision"] == "scale" and scale["target_instances"] == 2
    again = advance(world, scale)
    assert again["last_decision"] == "scale" and "1 of the 2 instances" in again["last_reason"]
    assert weights()["canary"] == 5.0  # no weight for capacity that is not there
    world.controller.sm.update_endpoint_weights_and_capacities = real
    assert advance(world, advance(world, again))["current_percent"] == 25
    assert instances()["canary"] == 2


# ------------------------------------------------------------------ item 6: evidence


def test_silent_canary_is_held_then_rolled_back_never_promoted(world: World) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    seen = []
    while not result["done"]:
        world.clock.now += result["wait_seconds"]
        world.traffic(canary=0, primary=20000)  # the canary receives nothing
        result = world.tick("r1", result["seq"])
        seen.append(result["last_decision"])
    assert "hold" in seen and "shift" not in seen and weights()["canary"] == 0.0
    assert result["status"] == "ROLLED_BACK"
    assert "no evidence" in result["last_reason"] and "0 invocations" in result["last_reason"]
    [note] = world.notifications()
    assert note["status"] == "ROLLED_BACK"


def test_alarm_without_data_is_no_evidence(world: World) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    set_alarm("canary-ttft", "INSUFFICIENT_DATA", "no datapoints")
    world.clock.now += BAKE
    world.traffic()
    held = world.tick("r1", result["seq"])
    assert held["last_decision"] == "hold" and "canary-ttft" in held["last_reason"]
    assert weights()["canary"] == 5.0


def test_canary_erroring_more_than_the_primary_rolls_back(world: World) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    world.clock.now += BAKE
    world.traffic(canary=1000, canary_5xx=20, primary=19000, primary_5xx=19)
    rolled = world.tick("r1", result["seq"])
    assert rolled["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    assert "canary 5XX rate 2.00% exceeds the primary's 0.10%" in rolled["last_reason"]


# ------------------------------------------------------------------ item 7: no lock-out


def test_refused_weight_change_is_retried_and_the_rollout_continues(world: World) -> None:
    world.start()
    result = world.tick("r1", 0)  # scale for 5 %
    real = world.controller.sm.update_endpoint_weights_and_capacities
    refusals = iter(range(2))

    def busy(**kw: Any) -> Any:
        weight = any("DesiredWeight" in v for v in kw["DesiredWeightsAndCapacities"])
        if weight and next(refusals, None) is not None:
            raise validation_error()
        return real(**kw)

    world.controller.sm.update_endpoint_weights_and_capacities = busy
    first = advance(world, result)
    assert first["last_decision"] == "wait" and "shift refused by SageMaker" in first["last_reason"]
    assert first["status"] == "RUNNING" and not first["done"]
    second = advance(world, first)
    assert "retry 2" in second["last_reason"]
    third = advance(world, second)
    assert third["last_decision"] == "shift" and weights()["canary"] == 5.0


def test_alarm_while_updating_rolls_back_and_the_rollback_is_retried_until_it_lands(
    world: World,
) -> None:
    from tests.lambdas.conftest import refuse_while_updating

    refused = refuse_while_updating(world.controller.sm)
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    set_endpoint_status("Updating")  # autoscaling or a deploy is changing the endpoint
    set_alarm("canary-5xx", "ALARM", "5XX burst")
    rolling = advance(world, result)
    # The alarm was read although the endpoint is Updating; the weight call was refused.
    assert rolling["status"] == "ROLLING_BACK" and not rolling["done"] and refused
    assert weights()["canary"] == 5.0
    with pytest.raises(ctl.RolloutConflict, match="already ROLLING_BACK"):
        world.start("r2")
    for _ in range(3):
        rolling = advance(world, rolling)
        assert rolling["status"] == "ROLLING_BACK"
    set_endpoint_status("InService")
    while not rolling["done"]:
        rolling = advance(world, rolling)
    assert rolling["status"] == "ROLLED_BACK" and weights() == {"canary": 0.0, "primary": 100.0}
    [note] = world.notifications()
    assert note["status"] == "ROLLED_BACK" and "canary-5xx" in json.dumps(note["history"])
    set_alarm("canary-5xx", "OK")
    assert world.start("r2")["status"] == "RUNNING"


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
    execs = boto3.client("stepfunctions", region_name=REGION).list_executions(
        stateMachineArn=world.state_machine_arn
    )["executions"]
    assert [e["name"] for e in execs] == ["r1"]


def _race(world: World, on_call: int, action: Any) -> None:
    """Run ``action`` just before the ``on_call``-th DynamoDB write reaches the table."""
    table, real, count = world.controller.table, world.controller.table.put_item, [0]

    def put_item(**kw: Any) -> Any:
        count[0] += 1
        if count[0] == on_call:
            table.put_item = real
            action()
        return real(**kw)

    table.put_item = put_item


def test_operator_rollback_racing_a_bake_tick_is_not_undone(world: World) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    world.clock.now += CHECK
    # The bake tick writes between the rollback's read and its conditional write.
    _race(world, 1, lambda: world.tick("r1", result["seq"]))
    rolled = world.run({"action": "rollback", "endpoint_name": ENDPOINT, "requested_by": "bob"})
    assert rolled["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    world.clock.now += 2 * BAKE
    world.traffic()
    later = world.tick("r1", rolled["seq"])
    assert later["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0


def test_tick_that_shifted_while_a_rollback_was_recorded_puts_the_weight_back(
    world: World,
) -> None:
    world.start()
    scale = to_percent(world, world.tick("r1", 0), 5)
    world.clock.now += BAKE
    world.traffic()
    scale = world.tick("r1", scale["seq"])
    assert scale["last_decision"] == "scale"
    world.clock.now += CHECK
    # The operator's rollback lands between the tick's weight change and its write.
    _race(world, 1, lambda: world.run({"action": "rollback", "endpoint_name": ENDPOINT}))
    lost = world.tick("r1", scale["seq"])
    assert lost["duplicate"] and lost["status"] == "ROLLED_BACK"
    assert weights()["canary"] == 0.0


def test_stale_execution_cannot_roll_back_a_newer_rollout(world: World) -> None:
    world.start("r1")
    first = world.tick("r1", 0)
    world.run({"action": "rollback", "endpoint_name": ENDPOINT})
    world.start("r2")
    r2 = to_percent(world, world.tick("r2", 0), 5, "r2")
    stale = world.run(
        {"action": "rollback", "endpoint_name": ENDPOINT, "rollout_id": "r1",
         "reason": "controller error", "requested_by": "state-machine"}
    )  # fmt: skip
    assert stale["status"] == "SUPERSEDED" and "'r2'" in stale["last_reason"]
    tick = world.tick("r1", first["seq"])
    assert tick["status"] == "SUPERSEDED"
    current = world.controller.load()
    assert current is not None and current["rollout_id"] == "r2" and current["seq"] == r2["seq"]
    assert current["status"] == "RUNNING" and weights()["canary"] == 5.0


# ------------------------------------------------------------------ behaviour kept


def test_alarm_mid_rollout_rolls_back_records_reason_and_notifies(world: World) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 50)
    set_alarm("canary-ttft", "ALARM", "Threshold Crossed: TTFT p90 2.4 s > 1.5 s")
    world.clock.now += CHECK
    rolled = world.tick("r1", result["seq"])
    assert rolled["status"] == "ROLLED_BACK" and rolled["done"]
    assert weights() == {"canary": 0.0, "primary": 100.0}
    assert "canary-ttft" in json.dumps(rolled["history"]) and "TTFT p90 2.4 s" in json.dumps(
        rolled["history"]
    )
    [note] = world.notifications()
    assert note["status"] == "ROLLED_BACK"
    world.clock.now += BAKE
    again = world.tick("r1", rolled["seq"])
    assert again["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    status = world.run({"action": "status", "endpoint_name": ENDPOINT})
    assert status["current_percent"] == 50 and status["status"] == "ROLLED_BACK"


def test_alarm_already_firing_refuses_start(world: World) -> None:
    set_alarm("canary-5xx", "ALARM", "5XX burst")
    with pytest.raises(ctl.RolloutConflict, match="canary-5xx"):
        world.start()
    assert world.controller.load() is None


def test_missing_alarm_counts_as_firing_and_rolls_back(world: World) -> None:
    world.start()
    result = world.tick("r1", 0)
    boto3.client("cloudwatch", region_name=REGION).delete_alarms(AlarmNames=["canary-5xx"])
    rolled = advance(world, result)
    assert rolled["status"] == "ROLLED_BACK" and "alarm not found" in json.dumps(rolled["history"])


def test_endpoint_not_in_service_refuses_start_and_pauses_ticks(world: World) -> None:
    set_endpoint_status("Updating")
    with pytest.raises(ctl.RolloutConflict, match="Updating, not InService"):
        world.start()
    set_endpoint_status("InService")
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    set_endpoint_status("SystemUpdating")
    world.clock.now += BAKE
    paused = world.tick("r1", result["seq"])
    assert paused["last_decision"] == "wait" and paused["status"] == "RUNNING"
    assert weights()["canary"] == 5.0 and paused["step_index"] == 0
    set_endpoint_status("InService")
    assert to_percent(world, paused, 25)["current_percent"] == 25


def test_failed_endpoint_abandons_rollout_and_notifies(world: World) -> None:
    world.start()
    set_endpoint_status("Failed")
    result = world.tick("r1", 0)
    assert result["status"] == "FAILED" and "Failed" in result["last_reason"]
    [note] = world.notifications()
    assert note["status"] == "FAILED"


def test_duplicate_tick_neither_skips_nor_repeats_a_step(world: World) -> None:
    world.start()
    first = to_percent(world, world.tick("r1", 0), 5)
    world.clock.now += BAKE
    world.traffic()
    redelivered = world.tick("r1", first["seq"] - 1)  # an earlier event again, after the bake
    assert redelivered["duplicate"] and redelivered["seq"] == first["seq"]
    assert weights()["canary"] == 5.0 and redelivered["step_index"] == 0
    scale = world.tick("r1", first["seq"])
    again = world.tick("r1", first["seq"])
    assert again["duplicate"] and again["seq"] == scale["seq"] and again["phase"] == "scaling"


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
    world.controller.load = lambda: None  # type: ignore[method-assign]
    with pytest.raises(ctl.RolloutConflict, match="took the lock"):
        world.start("r3")
    world.controller.load = ctl.Controller.load.__get__(world.controller)  # type: ignore[method-assign]
    assert world.controller.load()["rollout_id"] == "r1"  # type: ignore[index]


def test_rollback_without_rollout_still_zeroes_the_canary(world: World) -> None:
    rolled = world.run({"action": "rollback", "endpoint_name": ENDPOINT})
    assert rolled["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    assert rolled["rollout_id"].startswith("rollback-")


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


def test_rollback_stands_even_when_the_notification_fails(world: World) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    boto3.client("sns", region_name=REGION).delete_topic(TopicArn=world.controller.s.topic_arn)
    set_alarm("canary-5xx", "ALARM", "5XX burst")
    rolled = world.tick("r1", result["seq"])
    assert rolled["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    assert world.controller.load()["status"] == "ROLLED_BACK"  # type: ignore[index]


def test_refused_bounds_restore_keeps_the_lock_until_it_lands(world: World) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 25)
    aas = world.controller.aas
    real, calls = aas.register_scalable_target, []

    def busy(**kw: Any) -> Any:
        calls.append(kw["MinCapacity"])
        if len(calls) == 1:
            raise ClientError(
                {"Error": {"Code": "ConcurrentUpdateException", "Message": "target busy"}},
                "RegisterScalableTarget",
            )
        return real(**kw)

    aas.register_scalable_target = busy
    set_alarm("canary-5xx", "ALARM", "5XX burst")
    rolling = advance(world, result)
    assert rolling["status"] == "ROLLING_BACK" and weights()["canary"] == 0.0
    assert "target busy" in rolling["last_reason"]
    done = advance(world, rolling)
    assert done["status"] == "ROLLED_BACK" and canary_bounds() == (1, 2) and len(calls) == 2
    [note] = world.notifications()
    assert note["status"] == "ROLLED_BACK"


def test_operator_rollback_that_cannot_land_yet_gets_a_driver(world: World) -> None:
    from tests.lambdas.conftest import refuse_while_updating

    refuse_while_updating(world.controller.sm)
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    set_endpoint_status("Updating")
    rolled = world.run({"action": "rollback", "endpoint_name": ENDPOINT, "requested_by": "bob"})
    assert rolled["status"] == "ROLLING_BACK" and not rolled["done"]
    execs = boto3.client("stepfunctions", region_name=REGION).list_executions(
        stateMachineArn=world.state_machine_arn
    )["executions"]
    names = sorted(e["name"] for e in execs)
    assert names[0] == "r1" and names[1].startswith("r1-rb-")
    # The driver's ticks (same rollout id, the current seq) finish the rollback.
    set_endpoint_status("InService")
    driver = rolled
    while not driver["done"]:
        driver = advance(world, driver)
    assert driver["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    # The rollout's own execution, ticking with an old seq, changes nothing.
    assert world.tick("r1", result["seq"])["status"] == "ROLLED_BACK"
