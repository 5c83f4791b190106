"""The stretches of a trace the routing comparison (:mod:`simulator.routing.compare`) replays: a
:class:`Window` per start time, on the fleet the scaling simulation has in service then."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

import numpy as np

from simulator.traces import JST, Trace


@dataclass(frozen=True)
class Window:
    """A stretch of a trace replayed with sessions: ``warmup`` minutes then ``minutes`` measured
    (only requests arriving in the measured minutes count)."""

    name: str
    start_minute: int
    minutes: int
    warmup: int
    instances: int
    rpm: tuple[float, ...]

    @property
    def mean_rpm(self) -> float:
        return float(np.mean(self.rpm[self.warmup :]))


def window_from_trace(
    trace: Trace,
    *,
    name: str,
    start_jst: str,
    minutes: int,
    warmup: int,
    instances: int,
) -> Window:
    """The measured minutes start at ``start_jst`` (HH:MM, Tokyo) on the trace's first day."""
    hh, mm = (int(x) for x in start_jst.split(":"))
    first = trace.start.astimezone(JST)
    at = first.replace(hour=hh, minute=mm)
    if at < first:
        at += timedelta(days=1)
    m = int((at - first).total_seconds() // 60)
    lo = m - warmup
    if lo < 0 or m + minutes > trace.minutes:
        raise ValueError(f"window {start_jst} JST +{minutes} min is outside trace {trace.name}")
    return Window(
        name, m, minutes, warmup, instances, tuple(float(x) for x in trace.rpm[lo : m + minutes])
    )


#: Windows of the comparison (JST, on the trace's first day): an afternoon the fleet carries and
#: the JP evening peak, where it is at max_capacity.
WINDOWS = ("15:00", "20:00")
#: Measured minutes and warm-up minutes before them (a session lasts ~2 minutes: 4.2 turns of
#: ~10 s service and 20 s think time), kept short so make simulate stays fast on 2 cores.
MINUTES, WARMUP = 8, 4


def windows(
    trace: Trace,
    in_service: np.ndarray | None,
    *,
    starts: tuple[str, ...] = WINDOWS,
    minutes: int = MINUTES,
    warmup: int = WARMUP,
    instances: int | None = None,
) -> list[Window]:
    """The windows at ``starts``, each with ``instances`` or what ``in_service`` (the scaling
    simulation's count, one value per minute) holds at its first measured minute."""
    out = []
    for start in starts:
        w = window_from_trace(
            trace, name=f"{trace.name} {start} JST", start_jst=start, minutes=minutes,
            warmup=warmup, instances=1,
        )  # fmt: skip
        if instances is None:
            if in_service is None:
                raise ValueError("give instances or the scaling simulation's in-service count")
            n = int(in_service[w.start_minute])
        else:
            n = instances
        out.append(replace(w, instances=max(1, n)))
    return out
