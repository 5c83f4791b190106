"""Scheduled actions in their own time zones, standby instances, and the release calendar."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sim_helpers import FAST, IDLE_IN, flat_trace, in_service_at_minute, jst, make_cfg, run

from simulator.schedule import timeline


def sched(name: str, cron: str, tz: str, lo: int, hi: int = 8, standby: int = 0) -> dict:
    return {
        "name": name,
        "cron": cron,
        "timezone": tz,
        "min_capacity": lo,
        "max_capacity": hi,
        "standby_instances": standby,
    }


PRIMARY = {"min_capacity": 2, "max_capacity": 8}
#: Release at 20:00 JST on Friday 4 Dec 2026: 8 instances from 18:00, restored at 21:00.
RELEASE = {
    "name": "release",
    "at": "2026-12-04T20:00:00",
    "timezone": "Asia/Tokyo",
    "prescale_hours": 2,
    "restore_after_hours": 1,
    "min_capacity": 8,
    "max_capacity": 8,
}

#: 20:00 JST: 5 + 1 standby; 22:00 JST: back to 2.
PEAK_THEN_END = [
    sched("peak", "0 20 * * *", "Asia/Tokyo", 5, standby=1),
    sched("end", "0 22 * * *", "Asia/Tokyo", 2),
]


def test_schedule_fires_in_local_time_with_standby_added_to_min() -> None:
    cfg = make_cfg(PRIMARY, schedules=PEAK_THEN_END)
    res = run(cfg, flat_trace([(240, 0)], start=jst(2026, 12, 1, 19)))  # 19:00-23:00 JST
    # 20:00 JST = minute 60: min 5 + 1 standby = 6, serving 60 s later; 22:00 JST: min back to
    # 2, which only allows a scale-in (AAS does not scale in on a lower min by itself): with no
    # policy the 6 stay.
    counts = [in_service_at_minute(res, m) for m in (59, 60.5, 61, 179, 181, 239)]
    assert counts == [2, 2, 6, 6, 6, 6]
    assert res.runs["primary"].series["min_cap"][-1] == 2
    assert res.runs["primary"].bounds_changes == [(3600, "peak", 6, 8), (10800, "end", 2, 8)]


def test_same_cron_in_new_york_fires_at_new_york_time_including_dst() -> None:
    cfg = make_cfg(PRIMARY, schedules=[sched("us-peak", "0 18 * * *", "America/New_York", 4)])
    winter = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)  # 17:00 EST
    summer = datetime(2026, 7, 1, 21, 0, tzinfo=UTC)  # 17:00 EDT
    for start in (winter, summer):
        res = run(cfg, flat_trace([(120, 0)], start=start))
        ((t, name, lo, _),) = res.runs["primary"].bounds_changes
        assert (t, name, lo) == (3600, "us-peak", 4)  # 18:00 local both times
        assert in_service_at_minute(res, 62) == 4


def test_trace_starting_mid_window_inherits_the_last_action() -> None:
    cfg = make_cfg(PRIMARY, schedules=PEAK_THEN_END)
    res = run(cfg, flat_trace([(30, 0)], start=jst(2026, 12, 1, 21)))
    assert in_service_at_minute(res, 0) == 6
    res = run(cfg, flat_trace([(30, 0)], start=jst(2026, 12, 1, 23)))
    assert in_service_at_minute(res, 0) == 2


def test_weekday_cron_only_on_that_weekday() -> None:
    cfg = make_cfg(PRIMARY, schedules=[sched("fri", "0 16 * * FRI", "Asia/Tokyo", 7)])
    (lo, _, _), changes = timeline(
        cfg.scaling, "primary", jst(2026, 11, 30, 0), jst(2026, 12, 7, 0)
    )
    assert [c.at for c in changes] == [jst(2026, 12, 4, 16)]  # Friday 4 Dec 2026
    assert lo == 7  # the previous Friday's action still holds on Monday 30 Nov


def test_release_calendar_prescales_and_restores_variant_bounds() -> None:
    cfg = make_cfg({**PRIMARY, "step_policies": [IDLE_IN]}, calendar=[RELEASE])
    start = jst(2026, 12, 4, 17)
    res = run(cfg, flat_trace([(300, 0)], start=start), FAST)
    # pre-scale at 18:00 (minute 60) -> 8; restore at 21:00 (minute 240) -> bounds 2..8; the
    # idle scale-in policy (in ALARM all along, held by the min of 8) removes one instance at its
    # next period (minute 241), then one per 5-minute cooldown.
    counts = [in_service_at_minute(res, m) for m in (59, 61, 239, 240.5, 241, 246, 299)]
    assert counts == [2, 8, 8, 8, 7, 6, 2]
    assert [c[1] for c in res.runs["primary"].bounds_changes] == [
        "release:prescale",
        "release:restore",
    ]


def test_scheduled_max_below_current_capacity_scales_in() -> None:
    cfg = make_cfg(
        {"min_capacity": 2, "max_capacity": 8},
        initial=6,
        schedules=[sched("cap", "30 0 1 12 *", "UTC", 2, hi=3)],
    )
    res = run(cfg, flat_trace([(60, 0)], start=datetime(2026, 12, 1, 0, 0, tzinfo=UTC)))
    assert [in_service_at_minute(res, m) for m in (29, 30, 59)] == [6, 3, 3]


def test_timeline_window_is_half_open() -> None:
    cfg = make_cfg(PRIMARY, schedules=[sched("s", "0 * * * *", "UTC", 3)])
    start = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
    _, changes = timeline(cfg.scaling, "primary", start, start + timedelta(hours=2))
    assert [c.at.astimezone(UTC).hour for c in changes] == [1, 2]


def test_release_restore_returns_to_what_the_recurring_schedules_hold() -> None:
    cfg = make_cfg(
        PRIMARY,
        calendar=[RELEASE],
        schedules=[sched("evening", "0 17 * * *", "Asia/Tokyo", 5, hi=7)],
    )
    _, changes = timeline(cfg.scaling, "primary", jst(2026, 12, 4, 16), jst(2026, 12, 4, 23))
    assert [(c.name, c.min_capacity, c.max_capacity) for c in changes] == [
        ("evening", 5, 7),
        ("release:prescale", 8, 8),
        ("release:restore", 5, 7),  # the 17:00 schedule, not the variant's 2..8
    ]
