"""Deploys replayed on the timeline (simulator/deploys.py) and one scale-in authority (item 9).

Hand-checked with FAST assumptions (new instances serve 60 s after the decision) and prod's
blue/green policy: canary step of one instance, 600 s bake, 600 s termination wait, so an update
runs 60 + 600 + 600 = 1,260 s; the green fleet takes traffic at 660 s. The counts are those of
the fleet they were checked on, prod's before issue 36 (sim_helpers.legacy_prod: ml.g5.xlarge,
primary 2..8 from 4, evening floor 5 + 1 standby, canary 2), not the committed solved fleet.
"""

from __future__ import annotations

import itertools
import math
from datetime import timedelta
from pathlib import Path

import pytest
from sim_helpers import FAST, LEGACY_SPEED, flat_trace, legacy_prod, make_cfg

from simulator.assumptions import Assumptions
from simulator.events import CanaryStart, Deploy
from simulator.run import simulate
from simulator.scaling_policies import SimulationError
from simulator.scenarios.deploy import hour_figures, jp_evening, todays_config, write
from simulator.traces import BUILTIN
from sizing.deploy_options import DeployOptions
from sizing.fit_checks import load_config
from sizing.update_semantics import update_phases
from tests.fixtures import config_fixture

PROD = legacy_prod()
COMMITTED = load_config(config_fixture("prod"), env="prod")
TICK = 10


def at_minute(series, minute: float) -> int:
    return int(series[int(minute * 60 // TICK)])


def held_at_six() -> object:
    # floor 6 holds the primary at 6 (initial 4); nothing scales
    return make_cfg({"min_capacity": 6, "max_capacity": 8}, initial=6)


def test_update_timeline_is_the_configs_blue_green_policy() -> None:
    p = update_phases(PROD, ready_seconds=60, fleet=6)
    assert (p.green_ready, p.all_shifted, p.complete) == (60, 660, 1260)


def test_retained_deploy_keeps_the_fleet_and_bills_a_second_one_for_the_update() -> None:
    cfg = held_at_six()
    trace = flat_trace([(60, 3000)])
    res = simulate(cfg, trace, FAST, events=[Deploy(trace.start + timedelta(minutes=10))])
    s = res.runs["primary"].series
    assert min(s["in_service"]) == 6  # never below the live count
    assert at_minute(s["launched"], 9) == 6
    assert at_minute(s["launched"], 10 + 5) == 12  # blue + green
    assert at_minute(s["launched"], 10 + 20) == 12  # until 1,260 s after UpdateEndpoint
    assert at_minute(s["launched"], 10 + 21.5) == 6
    assert [what for _, what in res.runs["primary"].operator_log] == [
        "deploy: started",
        "deploy: UpdateEndpoint, green fleet 6",
        "deploy: blue fleet terminated, update complete",
    ]


def test_reset_deploy_serves_on_the_initial_count_after_the_shift() -> None:
    # today's template: counts reset to InitialInstanceCount (4) while the live fleet holds 6
    cfg = DeployOptions(reset=("DesiredInstanceCount",)).apply(held_at_six())
    cfg = cfg.model_copy(
        update={
            "variants": cfg.variants.model_copy(
                update={
                    "primary": cfg.variants.primary.model_copy(update={"initial_instance_count": 4})
                }
            )
        }
    )
    trace = flat_trace([(60, 3000)])
    res = simulate(
        cfg, trace, FAST, events=[Deploy(trace.start + timedelta(minutes=10), prescale=False)]
    )
    s = res.runs["primary"].series
    assert at_minute(s["in_service"], 10 + 10.5) == 6  # blue still serves during the bake
    assert at_minute(s["in_service"], 10 + 11.5) == 4  # green (reset to 4) after the shift
    assert at_minute(s["launched"], 10 + 5) == 10  # 6 blue + 4 green


def test_autoscaling_is_blocked_for_the_whole_update() -> None:
    # a step scale-out that would fire every minute under this load does nothing while Updating
    out = {
        "name": "inv-out",
        "direction": "out",
        "metric": "InvocationsPerInstance",
        "comparison": ">",
        "threshold": 500,
        "period_seconds": 60,
        "evaluation_periods": 1,
        "cooldown_seconds": 0,
        "steps": [{"lower": 0, "change": 1}],
    }
    cfg = make_cfg({"min_capacity": 2, "max_capacity": 8, "step_policies": [out]})
    trace = flat_trace([(5, 500), (60, 2400)])
    start = trace.start + timedelta(minutes=4)
    res = simulate(cfg, trace, FAST, events=[Deploy(start, prescale=False)])
    acts = [a for a in res.runs["primary"].activities if a.source == "step:inv-out"]
    assert acts, "the policy never acted"
    blocked = (4 * 60, 4 * 60 + 1260)
    assert not [a for a in acts if blocked[0] <= a.seconds < blocked[1]]
    assert min(a.seconds for a in acts) >= blocked[1]


def test_make_deploy_raises_to_the_schedule_floor_before_the_update() -> None:
    trace = jp_evening(1.0)
    at = trace.start + timedelta(minutes=90)  # 17:30 JST; the 17:45 schedule needs 6
    res = simulate(PROD, trace, LEGACY_SPEED, events=[Deploy(at)])
    (raise_,) = [a for a in res.runs["primary"].activities if a.source == "deploy:prescale"]
    assert (raise_.seconds, raise_.desired_from, raise_.desired_to) == (90 * 60, 4, 6)
    log = dict((what, t) for t, what in res.runs["primary"].operator_log)
    # UpdateEndpoint only once the raised instances serve: instances of the running tag, so the
    # planned scale-out figure (sizing.scale_out_time: AWS's cached P50 with the measured engine
    # start), on the next 10 s tick
    serve = Assumptions().scale_out_seconds(PROD, "primary")
    assert log["deploy: UpdateEndpoint, green fleet 6"] == 90 * 60 + math.ceil(serve / 10) * 10


def test_deploy_at_the_jp_peak_loses_nothing_after_and_thousands_before() -> None:
    trace = jp_evening()
    at = trace.start + timedelta(hours=4)  # 20:00 JST
    a = LEGACY_SPEED
    base = hour_figures(simulate(PROD, trace, a), at)
    after = hour_figures(simulate(PROD, trace, a, events=[Deploy(at)]), at)
    before = hour_figures(
        simulate(todays_config(PROD), trace, a, events=[Deploy(at, prescale=False)]), at
    )
    assert base["primary_in_service_min_in_hour"] == 8
    assert after["rejected_in_hour"] == base["rejected_in_hour"] == 0
    assert after["capacity_rpm_min_in_hour"] == base["capacity_rpm_min_in_hour"]
    assert after["billed_instances_max"] == 20  # (8 + 2) blue + (8 + 2) green: the quota needed
    assert before["primary_in_service_min_in_hour"] == 4
    assert before["rejected_in_hour"] > 5_000


def test_scenario_writes_report_and_charts(tmp_path: Path) -> None:
    text = write(PROD, LEGACY_SPEED, tmp_path, charts=True)
    assert text.count("target (after: no capacity lost, no rejection beyond no deploy): met") == 2
    assert (tmp_path / "deploy-at-peak.json").exists()
    assert (tmp_path / "deploy-at-peak-1.png").stat().st_size > 10_000


def test_events_outside_the_trace_or_not_replayed_are_errors() -> None:
    trace = flat_trace([(10, 100)])
    with pytest.raises(ValueError, match="outside the trace"):
        simulate(PROD, trace, FAST, events=[Deploy(trace.start - timedelta(minutes=1))])
    with pytest.raises(SimulationError, match="canary start"):
        simulate(PROD, trace, FAST, events=[CanaryStart(trace.start)])


# ---------------------------------------------------------------- item 9: no flapping


def reversals(res, window_s: int = 1800) -> int:
    """Policy activities that undo the previous one within ``window_s`` (schedules excluded)."""
    acts = [a for a in res.runs["primary"].activities if not a.source.startswith("schedule")]
    return sum(
        1
        for x, y in itertools.pairwise(acts)
        if (x.desired_to - x.desired_from) * (y.desired_to - y.desired_from) < 0
        and y.seconds - x.seconds <= window_s
    )


def two_authorities():
    """Today's primary policy: target tracking scales in as well as idle-in (built without the
    validator that now refuses it)."""
    p = PROD.scaling.variants["primary"]
    assert p.target_tracking is not None
    both = p.model_copy(
        update={"target_tracking": p.target_tracking.model_copy(update={"scale_in": True})}
    )
    scaling = PROD.scaling.model_copy(
        update={"variants": {**PROD.scaling.variants, "primary": both}}
    )
    return PROD.model_copy(update={"scaling": scaling})


FLEETS = {
    # the fleet two_authorities() flaps on, at the speed its counts were checked with
    "legacy": (PROD, LEGACY_SPEED),
    # the committed solved fleet at the speed it was solved at (pessimistic edge, LoRA, warm start)
    "committed": (COMMITTED, Assumptions()),
}


@pytest.mark.parametrize("fleet", list(FLEETS))
@pytest.mark.parametrize("trace", [*BUILTIN.values(), jp_evening()], ids=lambda t: t.name)
def test_one_scale_in_authority_never_flaps_and_target_tracking_never_scales_in(
    trace, fleet: str
) -> None:
    cfg, a = FLEETS[fleet]
    res = simulate(cfg, trace, a)
    assert reversals(res) == 0
    assert not [
        a
        for a in res.runs["primary"].activities
        if a.source == "target-tracking" and a.desired_to < a.desired_from
    ]


def test_two_scale_in_authorities_flap_on_the_busy_evening() -> None:
    assert reversals(simulate(two_authorities(), jp_evening(), LEGACY_SPEED)) >= 2
