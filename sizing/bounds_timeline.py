"""Scheduled actions and release-calendar events as a timeline of (UTC time, min, max) changes:
the one reading of the schedules that the plan's cost (sizing.fleet_cost), the plan's 24-hour
timeline and the simulator's replay share.

Semantics matched with the CDK scaling construct (Application Auto Scaling scheduled actions):

- A recurring action's 5-field cron is local time in its IANA ``timezone`` (DST included).
- It sets the scalable target's MinCapacity to ``min_capacity + standby_instances`` and its
  MaxCapacity to ``max_capacity``; the bounds hold until another action changes them.
- A release event is two one-off actions (``ReleaseEvent.window``): at ``at - prescale_hours``
  it sets the event's min/max; at ``at + restore_after_hours`` it restores what the recurring
  schedules hold at that moment (``ScalingConfig.recurring_bounds_at``). Both this module and the
  CDK construct take the actions from one list, ``typed_config.bounds_changes``.
- Changing the bounds does not scale in by itself: a lower min only lets the policies scale in
  (a higher min, or a lower max, moves desired capacity at once).
- The state at the start of a trace is what the most recent action before it left behind
  (looked back up to 8 days; before any action, the variant's own min/max).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from typed_config import ScalingConfig, VariantName, bounds_changes

LOOKBACK = timedelta(days=8)


@dataclass(frozen=True, order=True)
class BoundsFiring:
    """One firing of a scheduled action: from ``at`` the bounds are (min, max)."""

    at: datetime  # aware
    min_capacity: int
    max_capacity: int
    name: str


def timeline(
    scaling: ScalingConfig, variant: VariantName, start: datetime, end: datetime
) -> tuple[tuple[int, int, str], list[BoundsFiring]]:
    """(bounds at ``start``, changes within (start, end]) for ``variant``: the scheduled actions
    the CDK construct writes (``typed_config.bounds_changes``), each at every time it fires."""
    base = scaling.variants[variant]
    changes = [
        BoundsFiring(when, c.min_capacity, c.max_capacity, _label(c.name, c.kind))
        for c in bounds_changes(scaling)
        if c.variant == variant
        for when in c.fires(start - LOOKBACK, end)
    ]
    changes.sort(key=lambda c: c.at)
    initial = (base.min_capacity, base.max_capacity, "variant")
    for c in changes:
        if c.at <= start:
            initial = (c.min_capacity, c.max_capacity, c.name)
    return initial, [c for c in changes if start < c.at <= end]


def _label(name: str, kind: str) -> str:
    """How the simulator's logs name a change: the schedule, or ``<release>:prescale|restore``."""
    return name if kind == "recurring" else f"{name}:{kind}"
