"""Canary controller against moto, a rollout forward: every step baked, the canary's capacity
raised before its weight, evidence before each step, pauses while the endpoint is busy."""

from __future__ import annotations

from typing import Any

import pytest

from lambdas.canary_controller import handler as ctl
from tests.lambdas.conftest import (
    BAKE,
    CHECK,
    PLAN,
    STEPS,
    World,
    advance,
    canary_bounds,
    instances,
    set_alarm,
    set_endpoint_status,
    to_percent,
    validation_error,
    walk,
    weights,
)


def test_full_rollout_walks_every_step_with_bake_and_completes(world: World) -> None:
    started = world.start()
    assert started["status"] == "RUNNING" and started["seq"] == 0
    execs = world.executions()
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


# ------------------------------------------------------------------ capacity first


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


# ------------------------------------------------------------------ evidence


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


# ------------------------------------------------------------------ the endpoint


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
