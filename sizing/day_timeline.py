"""The plan's 24-hour timeline of a variant's scheduled bounds, in each zone its schedules are
written in and in UTC.

A schedule's cron is local to its own ``timezone`` (DST included), and schedules of different
zones act on the same scalable target: 11:30 in Tokyo is 21:30 the evening before in New York,
inside a New York night floor. Counting schedules ("3 schedules") hides that; the timeline
shows each firing of one local day at the same moment in every zone, with the bounds it leaves.

The day is the calendar day of the first schedule's zone (the config's zone) on
:data:`sizing.fleet_cost.REFERENCE_START`'s date, the day the plan prices and the simulator
replays; it is 23 or 25 hours long across a DST change. Weekday-only schedules that do not fire
that day are listed under it, with their days.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sizing.bounds_timeline import timeline
from sizing.fleet_cost import REFERENCE_START
from typed_config import DeploymentConfig, VariantName, bounds_changes


def zones(cfg: DeploymentConfig, variant: VariantName) -> list[str]:
    """The zones ``variant``'s schedules and releases are written in, first written first."""
    out: list[str] = []
    for c in bounds_changes(cfg.scaling):
        if c.variant == variant and c.timezone not in out:
            out.append(c.timezone)
    return out


def day_section(
    cfg: DeploymentConfig, variant: VariantName, day: date | None = None
) -> dict[str, Any] | None:
    """The rows of ``variant``'s timeline on ``day`` (default: the reference day), or None
    when nothing schedules it. Each row: the moment in each zone and UTC, the bounds from then
    (MinCapacity with standby, MaxCapacity) and the action that set them."""
    tzs = zones(cfg, variant)
    if not tzs:
        return None
    local = ZoneInfo(tzs[0])
    day = day or REFERENCE_START.date()
    start = datetime.combine(day, time(0), tzinfo=local)
    end = datetime.combine(day + timedelta(days=1), time(0), tzinfo=local)
    (lo, hi, name), changes = timeline(cfg.scaling, variant, start, end)
    columns = [*tzs, "UTC"]
    rows = [_row(start, columns, lo, hi, f"{name} (in force at the day's start)")]
    rows += [
        _row(c.at, columns, c.min_capacity, c.max_capacity, c.name) for c in changes if c.at < end
    ]
    fired = {c.name.split(":")[0] for c in changes}
    elsewhere = [
        f"{s.name} ({s.cron} {s.timezone})"
        for s in cfg.scaling.schedules
        if s.variant == variant and s.name not in fired
    ]
    return {
        "day": f"{start:%a %Y-%m-%d} {tzs[0]}",
        # aware datetimes of one zone subtract as wall times: through UTC for the real length
        "hours": round((end.astimezone(UTC) - start.astimezone(UTC)).total_seconds() / 3600),
        "columns": [_abbrev(z, start, end) for z in columns],
        "rows": rows,
        "not_this_day": elsewhere,
    }


def _abbrev(zone: str, start: datetime, end: datetime) -> str:
    """``JST``; ``EST/EDT`` on a day that changes it; the zone's name where it has no
    abbreviation (``Pacific/Kiritimati``, not ``+14``)."""
    names = []
    for at in (start, end - timedelta(seconds=1)):
        name = at.astimezone(ZoneInfo(zone)).tzname() or zone
        name = zone if name.startswith(("+", "-")) else name
        if name not in names:
            names.append(name)
    return "/".join(names)


def _row(at: datetime, columns: list[str], lo: int, hi: int, name: str) -> dict[str, Any]:
    return {
        "at": [f"{at.astimezone(ZoneInfo(z)):%a %H:%M}" for z in columns],
        "min": lo,
        "max": hi,
        "by": name,
    }


def render_day(d: dict[str, Any] | None) -> list[str]:
    """The timeline as plan lines: a header naming the day, one row per firing."""
    if d is None:
        return []
    hours = "" if d["hours"] == 24 else f", {d['hours']} h long (a DST change)"
    width = max(len("Tue 00:00  "), *(len(c) + 2 for c in d["columns"]))
    head = "".join(f"{c:<{width}}" for c in d["columns"])
    lines = [
        f"          schedules over {d['day']}{hours}; each firing at the same moment in every "
        "zone (min includes standby):",
        f"            {head}min..max  set by",
    ]
    for r in d["rows"]:
        cells = "".join(f"{t:<{width}}" for t in r["at"])
        lines.append(f"            {cells}{str(r['min']) + '..' + str(r['max']):<10}{r['by']}")
    if d["not_this_day"]:
        lines.append(f"            not firing this day: {', '.join(d['not_this_day'])}")
    return lines
