"""The week the schedules leave: which days differ, and each day's weakest hour.

A recurring schedule may fire on some weekdays only (prod's JP evening floor on ``SUN-THU,SAT``,
a Friday release pre-scale, dev's ``MON-FRI``), so a scenario replayed on one weekday says
nothing about the others: an unannounced spike replayed on a Wednesday evening, under a 26+1
floor, passed while the same spike on a Friday evening (floor 2+1) rejected thousands of
requests (issue 42). The capacity gate replays each traffic scenario on every day whose bounds
differ (:func:`day_groups`: days whose per-minute MinCapacity/MaxCapacity of both variants are
identical are one replay, named by all their days), and an unannounced spike at each such day's
weakest hour (:func:`weakest_hour`): the hour whose mean instances in service (every variant
with weight) over the spike's first ``SPIKE_SPAN_MINUTES``, on that day group's own normal-day
replay, is the lowest, ties going to the hour nearest the scenario's own (20:00 JST, the evening a
release lands).

Chosen by the fleet in service, not by the scheduled floor (MinCapacity): a floor that drops at
23:00 (prod's ``jp-evening-end``) does not drop the fleet, which the step policy scales in one
instance per 10 minutes, so the lowest floor picked an hour still served by the evening's fleet
and the spike passed there, while at 04:00 or 14:00 the same spike ran TTFT p50 to 283 ms and
TPOT p95 far past its in-flight bound (issue 42).

The week is the one after the release calendar's prod entry (2026-12-07, a Monday in Tokyo, to
the Sunday): an unannounced spike is one the calendar does not know.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from simulator.traces import JST
from sizing.bounds_timeline import timeline
from typed_config import VARIANT_NAMES, DeploymentConfig

#: Monday 00:00 in Tokyo of the week the gate replays.
WEEK_START = datetime(2026, 12, 7, 0, 0, tzinfo=JST)
DAY_MINUTES = 24 * 60
#: Minutes of a spike whose floor decides how weak its hour is: the 15-minute ramp and the
#: 30-minute plateau (simulator.traces._spike).
SPIKE_SPAN_MINUTES = 45
#: The hour (JST) a spike scenario names on its own: ties among equally weak hours go nearest it.
SPIKE_HOUR = 20


@dataclass(frozen=True)
class DayGroup:
    """Days of the week whose bounds are the same, minute by minute; replayed once."""

    days: tuple[str, ...]
    #: 00:00 JST of the first of them.
    start: datetime

    @property
    def label(self) -> str:
        return ", ".join(self.days)

    @property
    def share_of_week(self) -> float:
        return len(self.days) / 7


def bounds_by_minute(
    cfg: DeploymentConfig, variant: str, start: datetime, minutes: int
) -> tuple[np.ndarray, np.ndarray]:
    """(MinCapacity, MaxCapacity) of ``variant`` in each minute from ``start`` (the value in
    force at the minute's start)."""
    s = start.astimezone(UTC)
    (lo, hi, _), changes = timeline(cfg.scaling, variant, s, s + timedelta(minutes=minutes))  # type: ignore[arg-type]
    mins = np.full(minutes, lo, dtype=int)
    maxs = np.full(minutes, hi, dtype=int)
    for c in changes:
        m = int(np.ceil((c.at - s).total_seconds() / 60))
        if m < minutes:
            mins[m:] = c.min_capacity
            maxs[m:] = c.max_capacity
    return mins, maxs


def day_groups(cfg: DeploymentConfig) -> list[DayGroup]:
    """The week's days, grouped where both variants' bounds are the same in every minute."""
    groups: dict[bytes, list[tuple[str, datetime]]] = {}
    for d in range(7):
        start = WEEK_START + timedelta(days=d)
        key = b"".join(
            np.concatenate(bounds_by_minute(cfg, v, start, DAY_MINUTES)).tobytes()
            for v in VARIANT_NAMES
        )
        groups.setdefault(key, []).append((f"{start:%a}", start))
    return [DayGroup(tuple(n for n, _ in g), g[0][1]) for g in groups.values()]


def weakest_hour(
    in_service: np.ndarray, near: int = SPIKE_HOUR, span: int = SPIKE_SPAN_MINUTES
) -> int:
    """The whole hour (JST) whose mean instances in service over ``span`` minutes from it is the
    lowest (``in_service``: per minute of one day from 00:00 JST, every variant with weight, on
    that day's normal-day replay; a span past the day's end is read up to it); ties go to the
    hour nearest ``near``. Hour 0 is not a candidate: the replay starts at 00:00 with the
    warm-start fleet for 00:00's demand (simulator.capacity.warm_start_count), not the previous
    evening's fleet still scaling in, so its first hour measures the replay's start, not the
    policy (prod: 6 there against 46 the evening before)."""
    if len(in_service) < DAY_MINUTES:
        raise ValueError(f"in_service: {len(in_service)} minutes, a day has {DAY_MINUTES}")
    mean = [float(np.mean(in_service[h * 60 : h * 60 + span])) for h in range(24)]
    least = min(mean[1:])
    weakest = [h for h in range(1, 24) if mean[h] <= least + 1e-9]
    return min(weakest, key=lambda h: (abs(h - near), -h))
