"""Issue 20 item 3.4: no data means no step forward, for every forward move (the shift too).

AWS behaviour relied on: a CloudWatch alarm is in INSUFFICIENT_DATA when "the alarm has just
started, the metric is not available, or not enough data is available for the metric to determine
the alarm state" (CloudWatch user guide, "Alarm states"; DescribeAlarms ``StateValue``). A
watched alarm without data cannot fire, so it is no evidence that the canary is healthy: before,
the rule held only the end of a bake, and the scaling phase's shift moved the weight anyway.
"""

from __future__ import annotations

from lambdas.canary_controller import rules as r
from tests.lambdas.canary_lifecycle import record, record_sent
from tests.lambdas.conftest import (
    BAKE,
    CHECK,
    RULES,
    World,
    advance,
    canary_bounds,
    set_alarm,
    to_percent,
    weights,
)


def scaling_towards_25(world: World) -> dict:
    world.start()
    result = to_percent(world, world.tick("r1", 0), 5)
    world.clock.now += BAKE
    world.traffic()
    scale = world.tick("r1", result["seq"])
    assert scale["last_decision"] == "scale" and scale["phase"] == "scaling"
    return scale


def test_an_alarm_without_data_holds_the_shift_until_it_has_data(world: World) -> None:
    scale = scaling_towards_25(world)
    set_alarm("canary-ttft", "INSUFFICIENT_DATA", "no datapoints")
    held = advance(world, scale)
    assert held["last_decision"] == "hold" and held["status"] == "RUNNING"
    assert (
        "shift to 25% held, alarms without data: canary-ttft; rollback in 3600s"
        in (held["last_reason"])
    )
    assert weights()["canary"] == 5.0 and record(world)["held_since"] == int(world.clock.now)
    held = advance(world, held)
    assert "rollback in 3300s" in held["last_reason"] and weights()["canary"] == 5.0
    set_alarm("canary-ttft", "OK")
    shifted = advance(world, held)
    assert shifted["last_decision"] == "shift" and weights()["canary"] == 25.0
    assert record(world)["held_since"] is None


def test_an_alarm_without_data_past_the_evidence_timeout_rolls_back(world: World) -> None:
    sent = record_sent(world)
    scale = scaling_towards_25(world)
    set_alarm("canary-ttft", "INSUFFICIENT_DATA", "no datapoints")
    seen = []
    while not scale["done"]:
        scale = advance(world, scale)
        seen.append(scale["last_decision"])
    assert "shift" not in seen and scale["status"] == "ROLLED_BACK"
    assert weights() == {"canary": 0.0, "primary": 100.0} and canary_bounds() == (1, 2)
    reason = record(world)["rollback_reason"]
    assert reason.startswith("no evidence: canary-ttft without data for 3600s, shift to 25% held")
    assert sent[-1]["status"] == "ROLLED_BACK" and "canary-ttft" in sent[-1]["subject"]


def test_the_first_shift_is_held_too(world: World) -> None:
    world.start()
    set_alarm("canary-5xx", "INSUFFICIENT_DATA", "no datapoints")
    scale = world.tick("r1", 0)  # capacity for 5 %: adding instances moves no traffic
    assert scale["last_decision"] == "scale"
    world.clock.now += CHECK
    held = world.tick("r1", scale["seq"])
    assert held["last_decision"] == "hold" and held["current_percent"] == 0


def test_decide_holds_every_shift_while_an_alarm_has_no_data() -> None:
    state = {"status": "RUNNING", "phase": "scaling", "target_index": 2, "target_instances": 3,
             "scaling_started_at": 0, "step_index": 1, "canary_percent": 25}  # fmt: skip
    obs = r.Observation("InService", no_data=("a",), canary_instances=3, canary_weight=25,
                        primary_weight=75)  # fmt: skip
    evidence = lambda a, b: r.Evidence(1000, 0, 1000, 0)  # noqa: E731
    assert r.decide(state, obs, RULES, 100, evidence).kind == "hold"
    later = {**state, **r.transition(state, r.decide(state, obs, RULES, 100, evidence), 100)}
    assert later["held_since"] == 100
    gone = r.decide(later, obs, RULES, 100 + RULES.evidence_timeout_seconds, evidence)
    assert gone.kind == "rollback" and "a without data for 3600s" in gone.reason
    clear = r.Observation("InService", canary_instances=3, canary_weight=25, primary_weight=75)
    assert r.decide(later, clear, RULES, 200, evidence).kind == "shift"
