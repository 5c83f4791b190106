"""The plan's 24-hour timeline of scheduled bounds in each zone the schedules use and in UTC
(issue 32: a schedule at 11:30 JST landing inside dev's New York night floor was invisible
behind "3 schedules"): every firing of the day at one moment in every zone, across a DST change
and across the date line."""

from __future__ import annotations

from datetime import date
from typing import Any

from sizing.day_timeline import day_section, render_day
from sizing.plan import build_plan, render_plan

from .conftest import parse


def sched(name: str, cron: str, tz: str, lo: int, hi: int, standby: int = 0) -> dict[str, Any]:
    return {"name": name, "cron": cron, "timezone": tz, "min_capacity": lo,
            "max_capacity": hi, "standby_instances": standby}  # fmt: skip


def with_schedules(prod_raw: dict[str, Any], *schedules: dict[str, Any]) -> Any:
    prod_raw["scaling"]["schedules"] = list(schedules)
    prod_raw["scaling"]["release_calendar"] = []
    return parse(prod_raw)


def test_a_tokyo_schedule_shows_inside_the_new_york_night(prod_raw) -> None:
    cfg = with_schedules(
        prod_raw,
        sched("ny-night", "0 20 * * MON-FRI", "America/New_York", 2, 2),
        sched("ny-day", "0 8 * * MON-FRI", "America/New_York", 2, 4),
        sched("jp-lunch", "30 11 * * *", "Asia/Tokyo", 3, 4, standby=1),
    )
    d = day_section(cfg, "primary", date(2026, 12, 1))
    assert d is not None
    assert d["columns"] == ["EST", "JST", "UTC"]
    assert [(r["at"], r["min"], r["max"], r["by"]) for r in d["rows"]] == [
        # Monday's 21:30 firing of jp-lunch still holds at New York's midnight
        (["Tue 00:00", "Tue 14:00", "Tue 05:00"], 4, 4, "jp-lunch (in force at the day's start)"),
        (["Tue 08:00", "Tue 22:00", "Tue 13:00"], 2, 4, "ny-day"),
        (["Tue 20:00", "Wed 10:00", "Wed 01:00"], 2, 2, "ny-night"),
        # 11:30 in Tokyo is 21:30 in New York: inside the night floor, raising it to 3 + 1
        (["Tue 21:30", "Wed 11:30", "Wed 02:30"], 4, 4, "jp-lunch"),
    ]
    text = render_plan(build_plan(cfg, {}))
    assert "schedules over Tue 2026-12-01 America/New_York" in text
    assert "Tue 21:30  Wed 11:30  Wed 02:30  4..4      jp-lunch" in text


def test_the_day_of_a_dst_change_is_23_hours_and_moves_utc(prod_raw) -> None:
    cfg = with_schedules(
        prod_raw,
        sched("ny-day", "0 8 * * *", "America/New_York", 2, 4),
        sched("ny-night", "0 20 * * *", "America/New_York", 2, 2),
    )
    before = day_section(cfg, "primary", date(2026, 3, 7))
    change = day_section(cfg, "primary", date(2026, 3, 8))  # clocks go forward at 02:00
    assert before is not None and change is not None
    assert before["hours"] == 24 and change["hours"] == 23
    assert before["columns"] == ["EST", "UTC"] and change["columns"] == ["EST/EDT", "UTC"]
    # 08:00 local is 13:00 UTC in winter time, 12:00 UTC once the clocks have moved
    assert before["rows"][1]["at"] == ["Sat 08:00", "Sat 13:00"]
    assert change["rows"][1]["at"] == ["Sun 08:00", "Sun 12:00"]
    assert "23 h long (a DST change)" in "\n".join(render_day(change))


def test_a_zone_across_the_date_line_shows_the_day_before_in_utc(prod_raw) -> None:
    cfg = with_schedules(
        prod_raw,
        sched("kiritimati-morning", "0 9 * * TUE", "Pacific/Kiritimati", 3, 6),
        sched("tokyo-evening", "0 18 * * *", "Asia/Tokyo", 2, 6),
    )
    d = day_section(cfg, "primary", date(2026, 12, 1))  # a Tuesday in Kiritimati (UTC+14)
    assert d is not None
    assert d["columns"] == ["Pacific/Kiritimati", "JST", "UTC"]
    rows = {r["by"]: r["at"] for r in d["rows"]}
    # Tuesday 09:00 at UTC+14 is Monday 19:00 UTC and Tuesday 04:00 in Tokyo
    assert rows["kiritimati-morning"] == ["Tue 09:00", "Tue 04:00", "Mon 19:00"]
    # Tokyo's 18:00 is 23:00 the same Tuesday at UTC+14
    assert rows["tokyo-evening"] == ["Tue 23:00", "Tue 18:00", "Tue 09:00"]


def test_a_weekday_schedule_off_that_day_is_listed_with_its_cron(prod_raw) -> None:
    cfg = with_schedules(
        prod_raw,
        sched("daily", "0 8 * * *", "Asia/Tokyo", 2, 4),
        sched("friday", "0 16 * * FRI", "Asia/Tokyo", 5, 8),
    )
    d = day_section(cfg, "primary", date(2026, 12, 1))
    assert d is not None and d["not_this_day"] == ["friday (0 16 * * FRI Asia/Tokyo)"]
    # a variant nothing schedules has no timeline
    assert day_section(cfg, "canary") is None
