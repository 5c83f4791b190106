"""The shadow stage's replay judges latency as the controller does, at like loads
(lambdas/canary_controller/shadow_compare.py, "Latency at like loads"): the replay hands the
controller's own functions per-minute loads of both fleets and the answers' minutes."""

from __future__ import annotations

import pytest

from lambdas.canary_controller.shadow_compare import MIN_LIKE_LOAD_MINUTES
from simulator.assumptions import Assumptions
from simulator.bad_builds import LatencyCurve, adapter_shares, bad_builds
from simulator.rollout import START_HOUR_JST
from simulator.shadow_replay import TrackingFleet, replay_shadow
from simulator.traces import normal_day
from sizing.fit_checks import load_config
from sizing.rollout_alarms import RELATIVE_LATENCY
from sizing.rollout_plan import rollout_capacity_plan
from sizing.shadow_plan import shadow_instances
from tests.fixtures import config_fixture
from typed_config.shadow import ShadowStage

PROD = config_fixture("prod")
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
        rollout_capacity_plan(prod), start_minute=START, shadow_load=shadow_load,  # type: ignore[arg-type]
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


def test_the_tracking_fleet_is_sized_once_when_the_stage_starts(prod) -> None:  # type: ignore[no-untyped-def]
    """The shadow's count is set in the config the stage enters, at the primary's count then
    (shadow_fleet.py); no documented call resizes a shadow variant, so it keeps that count while
    the primary scales: its load per instance rises above the primary's when the primary scales
    out, falls below when it scales in."""
    a = Assumptions()
    curve = LatencyCurve(prod, prod.variants.canary.instance_type, a)
    fleet = TrackingFleet(prod, ShadowStage(), curve, rollout_capacity_plan(prod))
    assert fleet.shadow == fleet.peak
    per = fleet.per_instance_rpm
    fleet.minute(0, 10 * per)  # primary 10 -> shadow 1 (from the peak size)
    assert (fleet.primary, fleet.shadow) == (10, 1)
    primary, shadow = fleet.minute(7, 30 * per)
    assert (fleet.primary, fleet.shadow) == (30, 1) and shadow > primary
    primary, shadow = fleet.minute(60, 5 * per)
    assert (fleet.primary, fleet.shadow) == (5, 1) and shadow < primary
