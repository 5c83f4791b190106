"""The simulator's view of the scheduled actions: the timeline is sizing's
(:mod:`sizing.bounds_timeline`, shared with the plan's cost and timeline); here only what a
deploy needs from it."""

from __future__ import annotations

from datetime import datetime

from sizing.bounds_timeline import BoundsFiring, timeline
from typed_config import ScalingConfig, VariantName

__all__ = ["BoundsFiring", "schedule_floor", "timeline"]


def schedule_floor(
    scaling: ScalingConfig, variant: VariantName, start: datetime, end: datetime
) -> int:
    """The highest minimum capacity the schedules and release calendar hold in [start, end]
    (what a deploy that blocks autoscaling over that window must provision beforehand)."""
    (low, _, _), changes = timeline(scaling, variant, start, end)
    return max([low, *(c.min_capacity for c in changes)])
