"""Scaling and monitoring config: invalid values name their YAML path; cron and calendar helpers."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from typed_config import ScheduledAction, aas_cron, bounds_changes

from .conftest import assert_names_yaml_path, invalid, load_env, parse, raw_config

STEP = "scaling.variants.primary.step_policies"

# (dotted path to change, new value, expected reason[, YAML path the message names if not path])
INVALID = [
    invalid(f"{STEP}.0.metric", "QueueDepht", "neither a per-variant metric"),
    invalid(f"{STEP}.1.metric", "ApproximateBacklogSizePerInstance", "asynchronous endpoints only"),
    # Per-adapter metrics have an extra dimension: a variant-level policy cannot watch them.
    invalid(f"{STEP}.0.metric", "AdapterLatencyP95", "neither a per-variant"),
    invalid(
        f"{STEP}.2.also_require",
        {"metric": "GPUUtilisation", "comparison": "<", "threshold": 20},
        "neither a per-variant metric",
        where=f"{STEP}.2.also_require.metric",
    ),
    invalid(f"{STEP}.0.cooldown_seconds", 7200, "less than or equal"),
    invalid(
        "scaling.variants.primary.target_tracking.scale_in_cooldown_seconds",
        30,
        "scale in slowly",
        where="scaling.variants.primary.target_tracking",
    ),
    invalid("scaling.schedules.0.cron", "0 18 1 * FRI", "only one of them"),
    invalid("scaling.schedules.0.cron", "0 18 * * 7", "Sunday as 0 or SUN"),
    invalid("scaling.schedules.0.cron", "0 18 L * *", "not supported"),
    invalid("scaling.schedules.0.cron", "61 18 * * *", "minute '61' is not valid (accepted: 0-59)"),
    invalid(
        "scaling.schedules.0.cron", "0 25 * * MON-FRI", "hour '25' is not valid (accepted: 0-23)"
    ),
    invalid(
        "scaling.schedules.0.cron",
        "0 9 * 13 FOO",
        "month '13' is not valid (accepted: 1-12 or JAN-DEC); day-of-week 'FOO'",
    ),
    invalid(
        "scaling.schedules.2.min_capacity", 1, "below scaling.variants.primary.min_capacity (2)"
    ),
    invalid(
        "scaling.release_calendar.0.min_capacity", 1, "below scaling.variants.primary.min_capacity"
    ),
    invalid(
        "scaling.release_calendar.0.restore_after_hours",
        4,
        "the schedule jp-evening-end fires at 2026-12-04 23:00 Asia/Tokyo inside",
        where="scaling.release_calendar.0",
    ),
    invalid("scaling.release_calendar.0.timezone", "Asia/Osaka", "not an IANA time zone"),
    invalid("monitoring", {"ttft_p95_ms": 0}, "greater than 0", where="monitoring.ttft_p95_ms"),
    invalid(
        "monitoring",
        {"slo_availability_percent": 100},
        "less than 100",
        where="monitoring.slo_availability_percent",
    ),
    invalid(
        "monitoring",
        {"adapter_latency_baseline_ms": {"nope": 500}},
        "['nope'] are not adapters",
        where="monitoring.adapter_latency_baseline_ms",
    ),
    invalid(
        "monitoring",
        {"queue_depth_critcal": 80},
        "unknown key",
        where="monitoring.queue_depth_critcal",
    ),
]


@pytest.mark.parametrize(("path", "value", "where", "why"), INVALID)
def test_invalid_scaling_value_names_its_yaml_path(mutate, path, value, where, why) -> None:
    assert_names_yaml_path(mutate(path, value), where, why)


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        ("45 17 * * *", "cron(45 17 * * ? *)"),  # every day: day-of-week becomes ?
        ("0 16 * * FRI", "cron(0 16 ? * FRI *)"),  # a weekday: day-of-month becomes ?
        ("0 9 * * 1-5", "cron(0 9 ? * 2-6 *)"),  # numeric days shift: AAS 1 = Sunday
        ("0 0 * * 0,6", "cron(0 0 ? * 1,7 *)"),
        ("*/15 8 1 * *", "cron(0/15 8 1 * ? *)"),  # steps start from the field's minimum
    ],
)
def test_five_field_local_cron_becomes_aas_six_field_cron(cron: str, expected: str) -> None:
    assert aas_cron(cron) == expected


def test_standby_instances_raise_the_written_min_capacity() -> None:
    action = ScheduledAction(
        name="peak", cron="0 18 * * *", timezone="Asia/Tokyo", min_capacity=4,
        max_capacity=8, standby_instances=2,
    )  # fmt: skip
    assert action.written_min_capacity == 6


def test_recurring_bounds_are_those_of_the_last_schedule_to_fire() -> None:
    # prod's schedules, with bounds that tell them apart from each other and from the variant's
    # own (committed prod holds 2..54 on most of them)
    raw = raw_config("prod")
    off_peak, us_peak = raw["scaling"]["schedules"][2], raw["scaling"]["schedules"][3]
    assert (off_peak["name"], us_peak["name"]) == ("jp-off-peak-floor", "us-evening-peak")
    off_peak.update(min_capacity=2, max_capacity=6)
    us_peak.update(min_capacity=4, max_capacity=8)
    scaling = parse(raw).scaling
    # 2026-12-05 02:00 Tokyo: jp-off-peak-floor (01:00 Tokyo) fired last.
    assert scaling.recurring_bounds_at("primary", datetime(2026, 12, 4, 17, 0, tzinfo=UTC)) == (
        2,
        6,
    )
    # 2026-12-04 09:00 Tokyo = 19:00 New York the evening before: us-evening-peak fired last.
    assert scaling.recurring_bounds_at("primary", datetime(2026, 12, 4, 0, 0, tzinfo=UTC)) == (
        4,
        8,
    )


def test_variant_without_schedules_keeps_its_own_bounds() -> None:
    scaling = load_env("prod").scaling
    # prod's canary: min 3 (the solver's floor), max 54 (the primary's ceiling)
    assert scaling.recurring_bounds_at("canary", datetime(2026, 12, 4, tzinfo=UTC)) == (3, 54)


def test_shipped_prod_release_window_ends_where_the_evening_schedule_fires() -> None:
    (event,) = load_env("prod").scaling.release_calendar
    start, end = event.window
    assert (start.hour, end.hour) == (18, 23)


def test_bounds_changes_are_the_schedules_then_each_release_prescale_and_restore() -> None:
    changes = bounds_changes(load_env("prod").scaling)
    assert [c.kind for c in changes] == ["recurring"] * 6 + ["prescale", "restore"]
    assert [
        (c.action_name, c.expression, c.min_capacity, c.max_capacity) for c in changes[-3:]
    ] == [
        ("friday-release-prescale", "cron(0 16 ? * FRI *)", 3, 54),  # 2 + 1 standby
        ("one-piece-1170-prescale", "at(2026-12-04T18:00:00)", 44, 54),
        ("one-piece-1170-restore", "at(2026-12-04T23:00:00)", 2, 54),  # what jp-evening-end holds
    ]


def test_a_recurring_change_fires_by_its_cron_and_a_one_off_once() -> None:
    *_, friday, prescale, _ = bounds_changes(load_env("prod").scaling)
    week = (datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 12, 14, tzinfo=UTC))
    # 16:00 Tokyo on Fridays 4 and 11 Dec = 07:00 UTC.
    assert [f.astimezone(UTC).day for f in friday.fires(*week)] == [4, 11]
    assert [f.astimezone(UTC).hour for f in friday.fires(*week)] == [7, 7]
    assert prescale.fires(*week) == [prescale.when]
    assert prescale.fires(week[0], datetime(2026, 12, 4, 8, 59, tzinfo=UTC)) == []


def test_a_max_capacity_no_schedule_allows_is_a_plan_warning_naming_the_field() -> None:
    """dev's schedules write max 1 and 2: a primary max_capacity of 5 is never reached once one
    has fired, yet the plan priced and quota'd 5 without a word."""
    from sizing.plan import render_plan, unreachable_ceiling

    raw = raw_config("dev")
    raw["scaling"]["variants"]["primary"]["max_capacity"] = 5
    cfg = parse(raw, env="dev")
    warning = unreachable_ceiling(cfg.scaling, "primary")
    assert warning is not None
    assert warning.startswith("scaling.variants.primary.max_capacity 5 is never reached")
    assert "allow at most 2 (dev-night-floor 1, dev-day-ceiling 2)" in warning
    assert unreachable_ceiling(cfg.scaling, "canary") is None  # no schedule: reachable
    from sizing.plan import build_plan

    assert f"WARNING: {warning}" in render_plan(build_plan(cfg, {}))
    # the shipped configs reach their ceilings
    for env in ("dev", "prod"):
        shipped = load_env(env)
        assert [unreachable_ceiling(shipped.scaling, v) for v in ("primary", "canary")] == [
            None, None,
        ]  # fmt: skip
