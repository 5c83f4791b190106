"""Canary controller against moto, rolling back: weight 0 first, then the canary's bounds; retried
while SageMaker refuses; never lost to a racing tick nor done by a stale execution."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from lambdas.canary_controller import handler as ctl
from tests.lambdas.conftest import (
    BAKE,
    CHECK,
    ENDPOINT,
    PLAN,
    REGION,
    World,
    advance,
    canary_bounds,
    instances,
    race,
    refuse_while_updating,
    set_alarm,
    set_endpoint_status,
    to_percent,
    weights,
)


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


def test_missing_alarm_counts_as_firing_and_rolls_back(world: World) -> None:
    world.start()
    result = world.tick("r1", 0)
    boto3.client("cloudwatch", region_name=REGION).delete_alarms(AlarmNames=["canary-5xx"])
    rolled = advance(world, result)
    assert rolled["status"] == "ROLLED_BACK" and "alarm not found" in json.dumps(rolled["history"])


def test_rollback_without_rollout_still_zeroes_the_canary(world: World) -> None:
    rolled = world.run({"action": "rollback", "endpoint_name": ENDPOINT})
    assert rolled["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    assert rolled["rollout_id"].startswith("rollback-")


def test_rollback_stands_even_when_the_notification_fails(world: World) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    boto3.client("sns", region_name=REGION).delete_topic(TopicArn=world.controller.s.topic_arn)
    set_alarm("canary-5xx", "ALARM", "5XX burst")
    rolled = world.tick("r1", result["seq"])
    assert rolled["status"] == "ROLLED_BACK" and weights()["canary"] == 0.0
    assert world.controller.load()["status"] == "ROLLED_BACK"  # type: ignore[index]


# ------------------------------------------------------------------ refused while busy


def test_alarm_while_updating_rolls_back_and_the_rollback_is_retried_until_it_lands(
    world: World,
) -> None:
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
    refuse_while_updating(world.controller.sm)
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    set_endpoint_status("Updating")
    rolled = world.run({"action": "rollback", "endpoint_name": ENDPOINT, "requested_by": "bob"})
    assert rolled["status"] == "ROLLING_BACK" and not rolled["done"]
    execs = world.executions()
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


# ------------------------------------------------------------------ races


def test_operator_rollback_racing_a_bake_tick_is_not_undone(world: World) -> None:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    world.clock.now += CHECK
    # The bake tick writes between the rollback's read and its conditional write.
    race(world, 1, lambda: world.tick("r1", result["seq"]))
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
    race(world, 1, lambda: world.run({"action": "rollback", "endpoint_name": ENDPOINT}))
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
