"""The shadow stage's replay judges latency as the controller does, at like loads
(lambdas/canary_controller/shadow_compare.py, "Latency at like loads"): the replay hands the
controller's own functions per-minute loads of both fleets and the answers' minutes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lambdas.canary_controller.shadow_compare import MIN_LIKE_LOAD_MINUTES
from simulator.assumptions import Assumptions
from simulator.bad_builds import LatencyCurve, adapter_shares, bad_builds
from simulator.rollout import START_HOUR_JST
from simulator.shadow_replay import TrackingFleet, replay_shadow
from simulator.traces import normal_day
from sizing.fit import load_config
from sizing.rollout_alarms import RELATIVE_LATENCY
from sizing.shadow_plan import shadow_instances
from typed_config.shadow import ShadowStage

PROD = Path(__file__).resolve().parents[2] / "config" / "prod.yaml"
START = START_HOUR_JST * 60


@pytest.fixture(scope="module")
def prod():  # type: ignore[no-untyped-def]
    return load_config(PROD, env="prod")


def test_a_class_needs_as_many_minutes_as_the_canarys_ratio_alarm_breaches_on() -> None:
    assert RELATIVE_LATENCY.datapoints_to_alarm == MIN_LIKE_LOAD_MINUTES


def _replay(prod, key: str, shadow_load: str, stage: ShadowStage | None = None):  # type: ignore[no-untyped-def]
    shares = adapter_shares(prod)
    build = next(b for b in bad_builds(shares) if b.key == key)
    curve = LatencyCurve(prod, prod.variants.canary.instance_type, Assumptions())
    return replay_shadow(
        prod, stage or ShadowStage(), build, shares, normal_day(), curve,
        start_minute=START, shadow_load=shadow_load,  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_peak_sized_shadow_off_peak_neither_passes_nor_fails_a_healthy_build(prod) -> None:  # type: ignore[no-untyped-def]
    """Two hours from 14:00: the shadow well below the primary's load. Its latency is fail
    evidence only, and a healthy build is not slower: every comparison is insufficient."""
    s = _replay(prod, "healthy", "peak-sized", ShadowStage(min_minutes=60, max_minutes=120))
    assert [o for _, o in s.comparisons] == ["insufficient"] * 4
    assert s.outcome == "fail" and "never a pass" in s.reason
    assert "no evidence with the shadow's load at least the primary's" in s.reason


def test_a_shadow_at_the_primarys_load_passes_a_healthy_build_and_fails_a_slow_one(prod) -> None:  # type: ignore[no-untyped-def]
    healthy = _replay(prod, "healthy", "target")
    assert healthy.outcome == "pass"
    assert healthy.end_minute - START == ShadowStage().min_minutes
    slow = _replay(prod, "latency-2x", "target")
    assert (slow.outcome, slow.end_minute - START) == (
        "fail",
        ShadowStage().compare_interval_minutes,
    )
    assert "latency p95" in slow.reason and "at most the primary's: above 1.25 x" in slow.reason


def test_a_tracking_shadow_passes_a_healthy_build_and_fails_a_slow_one(prod) -> None:  # type: ignore[no-untyped-def]
    """The controller's shadow fleet (shadow_fleet.py): whole instances following the primary's,
    so both kinds of like-load evidence arrive; the healthy build passes (the peak-sized shadow
    holds it to the trace's end), the doubled latency fails at the first comparison."""
    healthy = _replay(prod, "healthy", "tracking")
    assert healthy.outcome == "pass", healthy.reason
    assert healthy.end_minute - START >= ShadowStage().min_minutes
    assert healthy.shadow_counts and all(
        1 <= n <= shadow_instances(prod) for _, n in healthy.shadow_counts
    )
    slow = _replay(prod, "latency-2x", "tracking")
    assert (slow.outcome, slow.end_minute - START) == (
        "fail",
        ShadowStage().compare_interval_minutes,
    )
    assert "at most the primary's: above 1.25 x" in slow.reason


def test_the_tracking_fleet_gains_instances_after_an_instance_start_and_sheds_them_at_once(  # type: ignore[no-untyped-def]
    prod,
) -> None:
    """A count the shadow gains serves an instance start later (the rollout replay's figure for
    instances of a new tag); meanwhile the endpoint is Updating: no new count is asked for and the
    primary's count stays. A count it sheds goes at the controller's tick."""
    a = Assumptions()
    curve = LatencyCurve(prod, prod.variants.canary.instance_type, a)
    fleet = TrackingFleet(prod, ShadowStage(), curve, a)
    assert fleet.ready == math.ceil(a.new_tag_seconds / 60) and fleet.shadow == fleet.peak
    per = fleet.per_instance_rpm
    fleet.minute(0, 10 * per)  # primary 10 -> shadow 1 at once (from the peak size)
    assert (fleet.primary, fleet.shadow, fleet.updating) == (10, 1, False)
    tick = fleet.tick
    fleet.minute(tick, 30 * per)  # primary 30 -> 3: asked for, the endpoint Updating
    assert (fleet.primary, fleet.shadow, fleet.updating) == (30, 1, True)
    for m in range(tick + 1, tick + fleet.ready):
        primary, shadow = fleet.minute(m, 40 * per)
        assert (fleet.primary, fleet.shadow) == (30, 1), m  # both wait for the update
        assert shadow > primary  # meanwhile the shadow is the more loaded
    fleet.minute(tick + fleet.ready, 40 * per)
    assert (fleet.primary, fleet.shadow, fleet.updating) == (40, 3, False)
    next_tick = -(-(tick + fleet.ready + 1) // tick) * tick
    fleet.minute(next_tick - 1, 10 * per)  # not a tick: the primary scales in, the shadow waits
    assert (fleet.primary, fleet.shadow) == (10, 3)
    fleet.minute(next_tick, 10 * per)  # the tick: 1 at once
    assert (fleet.primary, fleet.shadow, fleet.updating) == (10, 1, False)


def test_a_shadow_resize_during_a_spike_holds_the_primarys_scaling_and_the_replay_says_so(  # type: ignore[no-untyped-def]
    prod,
) -> None:
    """SageMaker applies one change at a time: while the shadow's new instances start, the
    primary's autoscaling waits. A stage that starts before an unannounced 3x spike grows its
    shadow during the spike, and the replay reports how long the primary was held and how far
    above its scaling target its load went (the figure docs/day2-canary.md quotes); on the
    normal day from 14:00 the stage passes before the shadow ever grows (nothing held)."""
    from simulator import blast_radius as br
    from simulator.traces import resolve

    shares = adapter_shares(prod)
    healthy = next(b for b in bad_builds(shares) if b.healthy)
    spike = br.replay(prod, healthy, shares, trace=resolve("unannounced-3x"), start_minute=0)
    assert spike.primary_held is not None
    held, peak = spike.primary_held
    assert held > 0 and peak > 1.0, spike.primary_held
    calm = br.replay(prod, healthy, shares, start_minute=START_HOUR_JST * 60)
    assert calm.primary_held == (0, 0.0)
    fixed = br.replay(prod, healthy, shares, start_minute=START_HOUR_JST * 60,
                      shadow_load="target")  # fmt: skip
    assert fixed.primary_held is None  # only the tracking fleet resizes
