"""Blast radius (issue 33 item 4): bad builds through the release with the controller's own rules,
the watched alarms as CloudWatch evaluates them, and the shadow stage's own comparison.

Two configs: prod as committed (``as_committed``: its healthy build completes, issue 33's fix of
the alarms that rolled it back), and prod with only the absolute alarms and the evidence rule
(``calm``: the high-TTFT threshold above any TTFT and no relative latency alarm), where what those
and the shadow stage can and cannot see shows on its own."""

from __future__ import annotations

import json

import pytest

from simulator.alarm_eval import AlarmEval
from simulator.assumptions import Assumptions
from simulator.bad_builds import (
    Build,
    LatencyCurve,
    Percentiles,
    adapter_shares,
    bad_builds,
    minute_signals,
)
from simulator.blast_radius import (
    GOAL_PERCENT,
    AlarmWatch,
    Outcome,
    blast_radius,
    replay,
    with_shadow,
    without_shadow,
)
from simulator.blast_radius_report import not_seen, table
from simulator.cli import main
from simulator.rollout import START_HOUR_JST, simulate_rollout
from simulator.shadow_replay import replay_shadow
from simulator.traces import normal_day
from sizing.fit_checks import load_config
from sizing.rollout_alarms import Timing, WatchedAlarm, comparable_loads
from sizing.rollout_plan import rollout_capacity_plan
from tests.fixtures import config_fixture
from typed_config.shadow import ShadowStage

PROD = config_fixture("prod")
START = START_HOUR_JST * 60


@pytest.fixture(scope="module")
def prod():  # type: ignore[no-untyped-def]
    return load_config(PROD, env="prod")


@pytest.fixture(scope="module")
def calm(prod):  # type: ignore[no-untyped-def]
    monitoring = prod.monitoring.model_copy(update={"ttft_p95_ms": 600_000})
    rollout = prod.rollout.model_copy(update={"max_latency_ratio": None})
    return prod.model_copy(update={"monitoring": monitoring, "rollout": rollout})


@pytest.fixture(scope="module")
def canary_only(calm):  # type: ignore[no-untyped-def]
    # prod.yaml has rollout.shadow: without it, the canary steps alone
    return {o.build.key: o for o in blast_radius(without_shadow(calm))}


@pytest.fixture(scope="module")
def shadowed(calm):  # type: ignore[no-untyped-def]
    return {o.build.key: o for o in blast_radius(with_shadow(calm), shadow_load="peak-sized")}


@pytest.fixture(scope="module")
def tracked(calm):  # type: ignore[no-untyped-def]
    """The shadow fleet the controller keeps at the primary's load per instance (the default)."""
    return {o.build.key: o for o in blast_radius(with_shadow(calm))}


def test_a_shadow_that_tracks_the_primary_passes_the_healthy_build_and_stops_every_bad_one(  # type: ignore[no-untyped-def]
    tracked,
) -> None:
    """The issue's goal with the shadow's count following the primary's (shadow_fleet.py): every
    bad build stopped in the shadow stage with nothing served, the healthy one passed on to the
    canary steps (the peak-sized shadow holds it to the trace's end)."""
    for key in ("errors-2pct", "latency-2x", "truncated", "one-adapter"):
        o = tracked[key]
        assert (o.stage, o.served, o.status) == ("shadow", 0.0, "FAILED (shadow)"), key
        assert o.meets_goal, key
    healthy = tracked["healthy"]
    assert healthy.stage == "passed" and healthy.furthest_step >= 1, healthy


def test_a_healthy_build_passes_the_canary_steps_and_a_shadow_at_the_primarys_load(  # type: ignore[no-untyped-def]
    calm, canary_only
) -> None:
    healthy = canary_only["healthy"]
    assert (healthy.stage, healthy.status) == ("passed", "COMPLETED")
    assert healthy.furthest_step == 5  # 5 -> 25 -> 50 -> 75 -> 100
    shares = adapter_shares(calm)
    at_target = replay(
        with_shadow(calm), bad_builds(shares)[0], shares, shadow_load="target",
        plan=rollout_capacity_plan(calm),
    )  # fmt: skip
    assert (at_target.stage, at_target.status, at_target.furthest_step) == (
        "passed", "COMPLETED", 5
    )  # fmt: skip


def test_a_healthy_build_is_held_not_passed_by_a_peak_sized_shadow(shadowed) -> None:  # type: ignore[no-untyped-def]
    """The peak-sized shadow carries the primary's load per instance only in the peak's minute:
    no like-load evidence a pass can stand on, so the stage holds to the trace's end and fails,
    nothing served (the price of never passing without evidence; docs/canary-studies.md)."""
    healthy = shadowed["healthy"]
    assert (healthy.stage, healthy.served, healthy.status) == ("shadow", 0.0, "FAILED (shadow)")
    assert "no evidence with the shadow's load at least the primary's" in healthy.reason


@pytest.fixture(scope="module")
def as_committed(prod):  # type: ignore[no-untyped-def]
    """prod.yaml's own alarms (high TTFT, the latency ratios at like loads), canary steps only,
    at the planning edge of the speed model (the pessimistic one)."""
    assert Assumptions().speed_edge == "pessimistic"
    return {o.build.key: o for o in blast_radius(without_shadow(prod))}


def test_prods_own_alarms_let_a_healthy_build_complete_every_canary_step(as_committed) -> None:  # type: ignore[no-untyped-def]
    """Until issue 33's fix the ratio alarm compared a canary on its step's planned instances
    with a primary still waiting for its scale-in (a healthy canary ~1.6 x the primary's p99 at
    50 %), and the 500 ms high-TTFT alarm fired on a healthy canary near its target: prod rolled
    back a healthy build at 50 %."""
    healthy = as_committed["healthy"]
    assert (healthy.stage, healthy.status, healthy.furthest_step) == ("passed", "COMPLETED", 5)


def test_prods_own_alarms_still_stop_the_bad_builds_they_can_see(as_committed) -> None:  # type: ignore[no-untyped-def]
    """The errors by the bake's evidence, the failing adapter by the 5XX alarm, the doubled
    latency by the ratio alarms at 25 % (the first step whose loads per instance are alike)."""
    for key, stage, why in (
        ("errors-2pct", "canary step 1 (5 %)", "evidence: canary 5XX rate"),
        ("one-adapter", "canary step 1 (5 %)", "canary-5xx"),
        ("latency-2x", "canary step 2 (25 %)", "ratio"),
    ):
        o = as_committed[key]
        assert (o.stage, o.status) == (stage, "ROLLED_BACK"), key
        assert why in o.reason, (key, o.reason)


def test_the_ratio_is_compared_only_at_like_loads(prod) -> None:  # type: ignore[no-untyped-def]
    """The healthy replay's minutes: where the canary's invocations per instance are above the
    primary's, the ratio alarms read 0 (what the metric math's inner IF gives), and those are
    the minutes where a healthy canary is slower for its load alone (above prod's 1.5 x); at like
    loads a healthy canary is never slower than the primary. The price (docs/canary-studies.md):
    minutes not compared, all of the 75 % step's (its canary is sized for its share at the
    target while the primary keeps the instances of 50 %, then its evening floor)."""
    shares = adapter_shares(prod)
    healthy = bad_builds(shares)[0]
    seen: list[tuple[bool, float]] = []
    by_step: dict[float, list[bool]] = {}

    class Watch(AlarmWatch):
        def record(self, row):  # type: ignore[no-untyped-def]
            super().record(row)
            if row["minute"] < START or row["canary_arrivals"] <= 0 or row["primary_arrivals"] <= 0:
                return
            canary = self._speed(
                self.canary_curve, row["canary_arrivals"], row["canary_in_service"]
            )
            primary = self._speed(
                self.primary_curve, row["primary_arrivals"], row["primary_in_service"]
            )
            seen.append((self._comparable(row), canary.e2e_p99 / primary.e2e_p99))
            if row["canary_arrivals"] >= self.floor:
                by_step.setdefault(row["canary_weight"], []).append(self._comparable(row))

    watch = Watch(prod, Assumptions(), healthy, shares, START, rollout_capacity_plan(prod))
    simulate_rollout(without_shadow(prod), start_minute=START, watch=watch)
    alike = [r for ok, r in seen if ok]
    unlike = [r for ok, r in seen if not ok]
    assert alike and unlike
    assert max(alike) <= 1.0 + 1e-9
    assert max(unlike) > prod.rollout.max_latency_ratio
    assert all(by_step[5]) and not any(by_step[75])
    assert sum(by_step[25]) > 0.9 * len(by_step[25]) and sum(by_step[50]) > 0.5 * len(by_step[50])


def test_unlike_loads_read_zero_and_like_loads_the_ratio() -> None:
    shares = {"a": 1.0}
    slow = Build("slow", "x", latency_factor=2.0)
    fast = Percentiles(0.2, 0.3, 3.0, 4.0)
    for comparable, expected in ((True, 2.0), (False, 0.0)):
        s = minute_signals(
            slow, shares, invocations=100, canary=fast, primary=fast, min_ratio_invocations=20,
            comparable=comparable,
        )  # fmt: skip
        assert s["latency_ratio"] == pytest.approx(expected)
        assert s["ttft_ratio"] == pytest.approx(expected)
        assert s["latency_p99_ms"] == pytest.approx(8000)  # the absolute alarms still see it
    assert comparable_loads(10, 10, 1.0) and not comparable_loads(10.5, 10, 1.0)
    assert comparable_loads(10, 10, 0.5) and not comparable_loads(10, 10, 1.5)


def test_canary_only_errors_are_caught_by_the_evidence_rule_at_the_end_of_the_first_bake(  # type: ignore[no-untyped-def]
    calm, canary_only
) -> None:
    """2 % of 5 % of the traffic is under 5 errors a minute (the 5XX alarm stays OK); the bake's
    evidence (2 % vs the primary's 0 %, more than 0.5 points) rolls it back at step 1."""
    o = canary_only["errors-2pct"]
    assert o.stage == "canary step 1 (5 %)" and o.status == "ROLLED_BACK"
    assert o.reason.startswith("evidence: canary 5XX rate 2.00%")
    bake = calm.rollout.bake_minutes
    assert bake <= o.minutes_to_stop <= bake + 2 * calm.rollout.check_interval_minutes
    assert o.served_percent > GOAL_PERCENT and not o.meets_goal


def test_one_failing_adapter_trips_the_5xx_alarm_within_the_first_step(canary_only) -> None:  # type: ignore[no-untyped-def]
    o = canary_only["one-adapter"]
    assert o.stage == "canary step 1 (5 %)" and "canary-5xx" in o.reason
    assert o.minutes_to_stop is not None and o.minutes_to_stop <= 10
    assert o.meets_goal


def test_the_canary_rules_never_see_truncated_answers(canary_only) -> None:  # type: ignore[no-untyped-def]
    """No error, no slower answer: the canary's rules watch errors and latency, so the build is
    promoted and answers the rest of the day."""
    o = canary_only["truncated"]
    assert (o.stage, o.status, o.minutes_to_stop) == ("never stopped", "COMPLETED", None)
    assert o.served_percent > 10


def test_the_shadow_stage_stops_errors_truncation_and_a_failing_adapter_before_any_user(  # type: ignore[no-untyped-def]
    shadowed,
) -> None:
    for key, why in (
        ("errors-2pct", "error rate"),
        ("truncated", "answer lengths differ"),
        ("one-adapter", "error rate 100.00 %"),
    ):
        o = shadowed[key]
        assert (o.stage, o.served, o.status) == ("shadow", 0.0, "FAILED (shadow)"), key
        assert why in o.reason and o.meets_goal


def test_a_latency_regression_is_stopped_by_a_peak_sized_shadow_at_like_loads(  # type: ignore[no-untyped-def]
    shadowed,
) -> None:
    """Off-peak the peak-sized shadow runs below its target, so the doubled latency once looked
    as fast as the loaded primary and passed (the canary stopped it at 25 % with prod's alarms;
    without them it was promoted). Judged only at like loads it cannot pass: no minute puts the
    shadow at the primary's load before the evening, and as the load rises the doubled build,
    still less loaded than the primary, is slower than 1.25 x: failed, nothing served."""
    o = shadowed["latency-2x"]
    assert (o.stage, o.served, o.status) == ("shadow", 0.0, "FAILED (shadow)")
    assert "with the shadow's load at most the primary's: above 1.25 x" in o.reason
    assert o.meets_goal


def test_the_served_share_adds_up(calm, canary_only) -> None:  # type: ignore[no-untyped-def]
    """Served = requests routed to the canary from the release's start to the rollback; the share
    is of the day's requests."""
    day = float(sum(normal_day().rpm))
    shares = adapter_shares(calm)
    build = next(b for b in bad_builds(shares) if b.key == "errors-2pct")
    plan = rollout_capacity_plan(calm)
    watch = AlarmWatch(calm, Assumptions(), build, shares, START, plan)
    res = simulate_rollout(calm, start_minute=START, watch=watch)
    stop = next(m for m, kind, _ in res["decisions"] if kind == "rollback")
    served = sum(row["canary_arrivals"] for row in res["rows"][START:stop])
    assert all(row["canary_arrivals"] == 0 for row in res["rows"][stop:])
    o = canary_only["errors-2pct"]
    assert o.served == pytest.approx(served)
    assert o.day_requests == pytest.approx(day)
    assert o.served_percent == pytest.approx(100 * served / day)
    assert o.minutes_to_stop == stop - START


def test_an_insufficient_comparison_is_never_a_pass(calm) -> None:  # type: ignore[no-untyped-def]
    """Too few answers per adapter: every comparison is insufficient and the stage fails at
    max_minutes, nothing served."""
    stage = ShadowStage(min_requests_per_adapter=10**7, min_minutes=30, max_minutes=60)
    shares = adapter_shares(calm)
    healthy = bad_builds(shares)[0]
    curve = LatencyCurve(calm, calm.variants.canary.instance_type, Assumptions())
    plan = rollout_capacity_plan(calm)
    s = replay_shadow(calm, stage, healthy, shares, normal_day(), curve, plan, start_minute=START)
    assert s.outcome == "fail" and "never a pass" in s.reason
    assert [o for _, o in s.comparisons] == ["insufficient", "insufficient"]
    o = replay(with_shadow(calm, stage), healthy, shares, plan=plan)
    assert (o.stage, o.served) == ("shadow", 0.0)


def test_make_simulate_prints_the_tables_and_writes_the_report(tmp_path, capsys, prod) -> None:  # type: ignore[no-untyped-def]
    """`simulator blast-radius` (make simulate's step) on the frozen prod: the canary steps
    alone, then a shadow stage first with each shadow fleet load; the JSON beside them. With the
    shadow fleet tracking the primary's load (the controller's) or at it, every bad build is
    stopped in the shadow stage, nothing served, and the healthy one passes: the issue's goal.
    (The tables docs/canary-studies.md quotes are shipped prod's: docs/generated/prod/
    blast-radius.txt, checked by tests/infra/test_generated_figures.py.)"""
    config = str(config_fixture("prod"))
    assert main(["blast-radius", "--env", "prod", "--config", config, "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.split("\nwrote blast-radius.json")[0].rstrip()
    assert printed.count("canary only") == 1 and printed.count("then canary steps") == 3
    report = json.loads((tmp_path / "blast-radius.json").read_text())
    titles = [r["release"] for r in report]
    canary = "as configured" if prod.rollout.shadow is None else "without the shadow stage"
    assert titles[0] == f"{canary}: canary only"
    assert [t.split("shadow fleet ")[1].split(")")[0] for t in titles[1:]] == [
        "tracking",
        "peak-sized",
        "target",
    ]
    for run in (report[1], report[3]):  # tracking the primary, and at its target
        builds = {b["build"]: b for b in run["builds"]}
        for key in ("errors-2pct", "latency-2x", "truncated", "one-adapter"):
            assert (builds[key]["stage"], builds[key]["served_requests"]) == ("shadow", 0)
            assert builds[key]["meets_goal"]
        assert builds["healthy"]["stage"] == "passed"
    for b in (b for r in report for b in r["builds"]):
        assert b["served_percent"] == pytest.approx(
            100 * b["served_requests"] / b["day_requests"], abs=1e-3
        )


def test_a_shadow_fleet_at_the_primarys_load_sees_the_latency_regression(calm) -> None:  # type: ignore[no-untyped-def]
    shares = adapter_shares(calm)
    slow = next(b for b in bad_builds(shares) if b.key == "latency-2x")
    plan = rollout_capacity_plan(calm)
    o = replay(with_shadow(calm), slow, shares, shadow_load="target", plan=plan)
    assert (o.stage, o.served) == ("shadow", 0.0)
    assert "latency p95" in o.reason


def test_adapter_shares_split_evenly_and_refuse_unknown_names(prod) -> None:  # type: ignore[no-untyped-def]
    shares = adapter_shares(prod)
    assert sum(shares.values()) == pytest.approx(1) and len(set(shares.values())) == 1
    assert adapter_shares(prod, {"jp_style": 10})["jp_style"] == pytest.approx(0.10)
    with pytest.raises(ValueError, match="unknown adapter"):
        adapter_shares(prod, {"nope": 10})


@pytest.mark.parametrize(
    ("timing", "values", "states"),
    [
        # 2 of 3: two breaching minutes of three alarm, with a good one between them; one
        # breaching minute in the last three is OK again
        (Timing(60, 3, 2), [9, 0, 9, 0, 0], ["OK", "OK", "ALARM", "OK", "OK"]),
        # 3 of 5 with missing data not breaching
        (Timing(60, 5, 3), [9, None, 9, None, 9], ["OK", "OK", "OK", "OK", "ALARM"]),
        # missing treated as breaching: silence alarms
        (Timing(60, 3, 2, "breaching"), [None, None], ["INSUFFICIENT_DATA", "ALARM"]),
        # missing: all missing is INSUFFICIENT_DATA
        (
            Timing(60, 2, 2, "missing"),
            [None, None, 9, 9],
            ["INSUFFICIENT_DATA"] * 2 + ["OK", "ALARM"],
        ),
        # a 5-minute period: one datapoint every five minutes, summed (a count)
        (Timing(300, 1, 1), [0, 0, 0, 0, 1], ["INSUFFICIENT_DATA"] * 4 + ["ALARM"]),
    ],
)
def test_alarm_evaluation_m_of_n_and_missing_data(timing, values, states) -> None:  # type: ignore[no-untyped-def]
    signal = "restarts" if timing.period_seconds > 60 else "errors_per_minute"
    ev = AlarmEval(WatchedAlarm("x", signal, 0.5 if signal == "restarts" else 5, timing))
    assert [ev.minute(i, v) for i, v in enumerate(values)] == states


def test_an_alarm_that_existed_before_the_build_starts_from_its_missing_data_state() -> None:
    ok = AlarmEval(WatchedAlarm("x", "restarts", 0, Timing(300, 1, 1)), existing=True)
    assert ok.state == "OK"  # notBreaching: silence was good
    silent = Timing(60, 1, 1, "missing")
    assert AlarmEval(WatchedAlarm("y", "restarts", 0, silent), existing=True).state == (
        "INSUFFICIENT_DATA"
    )


def test_a_bad_build_stopped_no_earlier_than_the_healthy_one_is_marked_not_seen() -> None:
    """The alarm that stopped it stops every build there: not a detection."""
    shares = {"a": 1.0}
    healthy, errors, _, truncated, _ = bad_builds(shares)

    def outcome(build, stage, minutes):  # type: ignore[no-untyped-def]
        return Outcome(build, stage, minutes, 100.0, 1e6, "alarm: x", 3, "ROLLED_BACK")

    h = outcome(healthy, "canary step 3 (50 %)", 145)
    late = outcome(truncated, "canary step 3 (50 %)", 185)
    early = outcome(errors, "canary step 1 (5 %)", 65)
    assert not_seen(late, h) and not not_seen(early, h)
    assert not not_seen(late, outcome(healthy, "passed", None))
    text = table("t", [h, early, late])
    assert text.count("NOT SEEN") == 1 and "errors-2pct" in text
