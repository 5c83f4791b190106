"""Scheduled actions and release-calendar events as a timeline of (UTC time, min, max) changes.

Semantics matched with the CDK scaling construct (Application Auto Scaling scheduled actions):

- A recurring action's 5-field cron is local time in its IANA ``timezone`` (DST included).
- It sets the scalable target's MinCapacity to ``min_capacity + standby_instances`` and its
  MaxCapacity to ``max_capacity``; the bounds hold until another action changes them.
- A release event is two one-off actions (``ReleaseEvent.window``): at ``at - prescale_hours``
  it sets the event's min/max; at ``at + restore_after_hours`` it restores what the recurring
  schedules hold at that moment (``ScalingConfig.recurring_bounds_at``), as the CDK construct does.
- Changing the bounds does not scale in by itself: a lower min only lets the policies scale in
  (a higher min, or a lower max, moves desired capacity at once).
- The state at the start of a trace is what the most recent action before it left behind
  (looked back up to 8 days; before any action, the variant's own min/max).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter

from stacks.config import ScalingConfig, VariantName

LOOKBACK = timedelta(days=8)


@dataclass(frozen=True, order=True)
class BoundsChange:
    at: datetime  # aware
    min_capacity: int
    max_capacity: int
    name: str


def _cron_fires(cron: str, tz: str, start: datetime, end: datetime) -> list[datetime]:
    """Every firing in (start, end], as aware datetimes."""
    it = croniter(cron, start.astimezone(ZoneInfo(tz)))
    out: list[datetime] = []
    while True:
        nxt = it.get_next(datetime)
        if nxt > end:
            return out
        out.append(nxt)


def timeline(
    scaling: ScalingConfig, variant: VariantName, start: datetime, end: datetime
) -> tuple[tuple[int, int, str], list[BoundsChange]]:
    """(bounds at ``start``, changes within (start, end]) for ``variant``."""
    base = scaling.variants[variant]
    changes: list[BoundsChange] = []
    for s in scaling.schedules:
        if s.variant != variant:
            continue
        for when in _cron_fires(s.cron, s.timezone, start - LOOKBACK, end):
            changes.append(BoundsChange(when, s.written_min_capacity, s.max_capacity, s.name))
    for r in scaling.release_calendar:
        if r.variant != variant:
            continue
        pre, post = r.window
        changes.append(BoundsChange(pre, r.min_capacity, r.max_capacity, f"{r.name}:prescale"))
        low, high = scaling.recurring_bounds_at(variant, post)
        changes.append(BoundsChange(post, low, high, f"{r.name}:restore"))
    changes.sort(key=lambda c: c.at)
    initial = (base.min_capacity, base.max_capacity, "variant")
    for c in changes:
        if c.at <= start:
            initial = (c.min_capacity, c.max_capacity, c.name)
    return initial, [c for c in changes if start < c.at <= end]


def schedule_floor(
    scaling: ScalingConfig, variant: VariantName, start: datetime, end: datetime
) -> int:
    """The highest minimum capacity the schedules and release calendar hold in [start, end]
    (what a deploy that blocks autoscaling over that window must provision beforehand)."""
    (low, _, _), changes = timeline(scaling, variant, start, end)
    return max([low, *(c.min_capacity for c in changes)])
