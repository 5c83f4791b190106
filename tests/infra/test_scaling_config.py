"""Scaling and monitoring config: invalid values name their YAML path; cron and calendar helpers."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from stacks.config import ConfigError, ScheduledAction, aas_cron

from .conftest import load_env, parse

STEP = "scaling.variants.primary.step_policies"

# (dotted path to change, new value, expected YAML path in the message, expected reason)
INVALID = [
    (f"{STEP}.0.metric", "QueueDepht", f"{STEP}.0.metric", "neither a per-variant metric"),
    (
        f"{STEP}.1.metric",
        "ApproximateBacklogSizePerInstance",
        f"{STEP}.1.metric",
        "asynchronous endpoints only",
    ),
    # Per-adapter metrics have an extra dimension: a variant-level policy cannot watch them.
    (f"{STEP}.0.metric", "AdapterLatencyP95", f"{STEP}.0.metric", "neither a per-variant"),
    (
        f"{STEP}.2.also_require",
        {"metric": "GPUUtilisation", "comparison": "<", "threshold": 20},
        f"{STEP}.2.also_require.metric",
        "neither a per-variant metric",
    ),
    (f"{STEP}.0.cooldown_seconds", 7200, f"{STEP}.0.cooldown_seconds", "less than or equal"),
    (
        "scaling.variants.primary.target_tracking.scale_in_cooldown_seconds",
        30,
        "scaling.variants.primary.target_tracking",
        "scale in slowly",
    ),
    ("scaling.schedules.0.cron", "0 18 1 * FRI", "scaling.schedules.0.cron", "only one of them"),
    ("scaling.schedules.0.cron", "0 18 * * 7", "scaling.schedules.0.cron", "Sunday as 0 or SUN"),
    ("scaling.schedules.0.cron", "0 18 L * *", "scaling.schedules.0.cron", "not supported"),
    ("scaling.schedules.0.cron", "61 18 * * *", "scaling.schedules.0.cron", "5-field cron"),
    (
        "scaling.schedules.2.min_capacity",
        1,
        "scaling.schedules.2.min_capacity",
        "below scaling.variants.primary.min_capacity (2)",
    ),
    (
        "scaling.release_calendar.0.min_capacity",
        1,
        "scaling.release_calendar.0.min_capacity",
        "below scaling.variants.primary.min_capacity",
    ),
    (
        "scaling.release_calendar.0.restore_after_hours",
        4,
        "scaling.release_calendar.0",
        "schedules.1 (jp-evening-end) fires at 2026-12-04 23:00 Asia/Tokyo inside",
    ),
    (
        "scaling.release_calendar.0.timezone",
        "Asia/Osaka",
        "scaling.release_calendar.0.timezone",
        "not an IANA time zone",
    ),
    ("monitoring", {"ttft_p95_ms": 0}, "monitoring.ttft_p95_ms", "greater than 0"),
    (
        "monitoring",
        {"slo_availability_percent": 100},
        "monitoring.slo_availability_percent",
        "less than 100",
    ),
    (
        "monitoring",
        {"adapter_latency_baseline_ms": {"nope": 500}},
        "monitoring.adapter_latency_baseline_ms",
        "['nope'] are not adapters",
    ),
    ("monitoring", {"queue_depth_critcal": 80}, "monitoring.queue_depth_critcal", "unknown key"),
]


@pytest.mark.parametrize(("path", "value", "where", "why"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_scaling_value_names_its_yaml_path(mutate, path, value, where, why) -> None:
    with pytest.raises(ConfigError) as err:
        parse(mutate(path, value))
    message = str(err.value)
    assert re.search(rf"^  {re.escape(where)}: .*{re.escape(why)}", message, re.M), message


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
    scaling = load_env("prod").scaling
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
    assert scaling.recurring_bounds_at("canary", datetime(2026, 12, 4, tzinfo=UTC)) == (2, 2)


def test_shipped_prod_release_window_ends_where_the_evening_schedule_fires() -> None:
    (event,) = load_env("prod").scaling.release_calendar
    start, end = event.window
    assert (start.hour, end.hour) == (18, 23)
