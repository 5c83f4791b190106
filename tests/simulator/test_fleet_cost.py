"""The plan's monthly cost and the simulator's are one model (sizing.fleet_cost): on a fleet
that autoscaling cannot move off its floors, the simulator's bill of the plan's week is the
plan's figure; on any fleet the simulator reports the floors' share the plan prints."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from sim_helpers import FAST, flat_trace, make_cfg, run

from sizing.fleet_cost import (
    PLAN_WINDOW,
    REFERENCE_START,
    floor_cost,
    floor_instance_hours,
    plan_cost,
)
from sizing.plan import cost_section, render_cost
from typed_config.catalog import HOURS_PER_MONTH, INSTANCE_CATALOG


def pinned(name: str, cron: str, floor: int, standby: int = 0) -> dict:
    """A schedule whose max is its written min: autoscaling has no room above the floor."""
    return {
        "name": name,
        "cron": cron,
        "timezone": "Asia/Tokyo",
        "min_capacity": floor,
        "standby_instances": standby,
        "max_capacity": floor + standby,
    }


#: Weekday evenings 5 + 1 standby from 18:00 JST, 2 from 22:00 every day: the weekend differs,
#: so a single day would not price the month.
WEEKDAY_PEAK = [
    pinned("peak", "0 18 * * MON-FRI", 5, standby=1),
    pinned("end", "0 22 * * *", 2),
]


def test_the_simulators_bill_of_the_plans_week_is_the_plans_figure() -> None:
    cfg = make_cfg({"min_capacity": 2, "max_capacity": 6}, schedules=WEEKDAY_PEAK, initial=2)
    minutes = int(PLAN_WINDOW.total_seconds() // 60)
    res = run(cfg, flat_trace([(minutes, 100.0)], start=REFERENCE_START), FAST)
    plan = cost_section(cfg)
    assert res.summary["cost_per_month_usd"] == round(plan["monthly_at_floors"])
    assert res.summary["floor_cost_per_month_usd"] == round(plan["monthly_at_floors"])
    # by hand: primary 6 for 4 h on 5 weekday evenings, 2 otherwise; canary 2 throughout
    price = INSTANCE_CATALOG["ml.g5.xlarge"].price_per_hour
    primary_hours = 2 * 168 + 4 * 4 * 5
    by_hand = (primary_hours + 2 * 168) * price * HOURS_PER_MONTH / 168
    assert plan["monthly_at_floors"] == round(by_hand, 2)


def test_the_floors_of_a_day_are_the_simulators_floor_share_above_which_it_scales() -> None:
    """A traffic peak the floors do not cover: the simulator bills more than the floors, and
    says which part the floors are (the plan's model over the trace's day)."""
    cfg = make_cfg(
        {
            "min_capacity": 2,
            "max_capacity": 8,
            "step_policies": [],
            "target_tracking": {"metric": "invocations", "invocations_per_instance": 600},
        },
        initial=2,
    )
    res = run(cfg, flat_trace([(120, 200.0), (240, 4000.0), (120, 200.0)]), FAST)
    trace = res.trace
    floors = floor_cost(cfg, trace.start, trace.end)
    assert res.summary["floor_cost_per_month_usd"] == round(floors.monthly_usd)
    assert res.summary["cost_per_month_usd"] > res.summary["floor_cost_per_month_usd"]


def test_the_plan_says_what_its_figure_assumes() -> None:
    cfg = make_cfg({"min_capacity": 2, "max_capacity": 6}, schedules=WEEKDAY_PEAK, initial=2)
    text = "\n".join(render_cost(cost_section(cfg)))
    assert "at the floors" in text and "standby included" in text
    assert f"week from {REFERENCE_START:%Y-%m-%d %H:%M} JST" in text
    assert "autoscaling above the floors follows traffic" in text
    assert f"{HOURS_PER_MONTH} h/month" in text
    # the week, not its first day: Saturday and Sunday have no evening peak
    day = floor_cost(cfg, REFERENCE_START, REFERENCE_START + timedelta(days=1))
    assert plan_cost(cfg).monthly_usd < day.monthly_usd


def test_a_day_of_a_dst_change_bills_its_real_length() -> None:
    """New York's 2026-03-08 lasts 23 hours: a floor of 2 bills 46 instance-hours, not 48."""
    cfg = make_cfg({"min_capacity": 2, "max_capacity": 2}, initial=2)
    ny = ZoneInfo("America/New_York")
    start, end = datetime(2026, 3, 8, tzinfo=ny), datetime(2026, 3, 9, tzinfo=ny)
    assert floor_instance_hours(cfg, "primary", start, end) == 46
    assert floor_cost(cfg, start, end).minutes == 23 * 60


def test_a_release_is_priced_once_beside_the_monthly_figure() -> None:
    """A release in the priced week, scaled to a month, would count about four times."""
    release = {
        "name": "release", "at": "2026-12-04T20:00:00", "timezone": "Asia/Tokyo",
        "prescale_hours": 2, "restore_after_hours": 1, "min_capacity": 8, "max_capacity": 8,
    }  # fmt: skip
    plain = make_cfg({"min_capacity": 2, "max_capacity": 8}, initial=2)
    with_release = make_cfg({"min_capacity": 2, "max_capacity": 8}, calendar=[release], initial=2)
    plan = cost_section(with_release)
    assert plan["monthly_at_floors"] == cost_section(plain)["monthly_at_floors"]
    price = INSTANCE_CATALOG["ml.g5.xlarge"].price_per_hour
    (once,) = plan["releases_once"]
    assert once == {"name": "release", "at": "2026-12-04 20:00 JST", "usd": round(6 * 3 * price, 2)}
    assert "release release (2026-12-04 20:00 JST): +$" in "\n".join(render_cost(plan))
