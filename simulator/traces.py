"""Traffic traces: one value per minute (requests per minute, optional mean prompt/output tokens).

CSV input (a header line, then one row per minute, consecutive minutes)::

    timestamp,requests_per_minute,mean_prompt_tokens,mean_output_tokens
    2026-12-04T20:00:00+09:00,2000,1200,180

The token columns are optional (both or neither); without them the engine's typical request
shape (``engine.typical_prompt_tokens`` / ``typical_output_tokens``) is used. Timestamps need a
UTC offset or ``Z``: the schedules are evaluated in their own time zones, so the trace must say
exactly when it happened.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np

from sizing.fleet_cost import REFERENCE_START

JST = ZoneInfo("Asia/Tokyo")
REQUIRED = ("timestamp", "requests_per_minute")
TOKENS = ("mean_prompt_tokens", "mean_output_tokens")


class TraceError(ValueError):
    """A trace file is malformed; the message names the file and line."""


@dataclass(frozen=True)
class Trace:
    name: str
    start: datetime  # aware, first minute
    rpm: np.ndarray  # requests per minute, one per minute
    description: str = ""
    prompt_tokens: np.ndarray | None = None
    output_tokens: np.ndarray | None = None
    #: (minute index, label) marks drawn on the chart.
    marks: tuple[tuple[int, str], ...] = ()
    display_tz: str = "Asia/Tokyo"
    #: Minutes [start, end) that count as "the spike" in the summary (None: no spike window).
    spike_window: tuple[int, int] | None = None
    meta: dict[str, str] = field(default_factory=dict)

    @property
    def minutes(self) -> int:
        return len(self.rpm)

    @property
    def end(self) -> datetime:
        return self.start + timedelta(minutes=self.minutes)


def _fail(path: Path, line: int, msg: str) -> TraceError:
    return TraceError(f"{path}: line {line}: {msg}")


def _number(path: Path, line: int, col: str, raw: str, *, positive: bool) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise _fail(path, line, f"{col} {raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        need = "a positive number" if positive else "a number >= 0"
        raise _fail(path, line, f"{col} {raw!r} must be {need}")
    return value


def load_csv(path: Path) -> Trace:
    """Read a user trace; every problem is reported with its line number."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read trace: {exc.strerror}") from None
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise TraceError(f"{path}: line 1: empty file; expected a header {','.join(REQUIRED)}")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in REQUIRED if c not in header]
    unknown = [c for c in header if c not in REQUIRED + TOKENS]
    if missing or unknown:
        raise _fail(
            path,
            1,
            f"header needs {', '.join(REQUIRED)} and optionally {', '.join(TOKENS)}; "
            + (f"missing {missing}" if missing else f"unknown column(s) {unknown}"),
        )
    has_tokens = [c in header for c in TOKENS]
    if any(has_tokens) and not all(has_tokens):
        raise _fail(path, 1, f"give both {' and '.join(TOKENS)} or neither")
    idx = {c: header.index(c) for c in header}
    times: list[datetime] = []
    rpm: list[float] = []
    prompt: list[float] = []
    output: list[float] = []
    for n, row in enumerate(rows[1:], start=2):
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise _fail(path, n, f"{len(row)} fields, the header has {len(header)}")
        cells = {c: row[i].strip() for c, i in idx.items()}
        try:
            ts = datetime.fromisoformat(cells["timestamp"].replace("Z", "+00:00"))
        except ValueError:
            raise _fail(path, n, f"timestamp {cells['timestamp']!r} is not ISO 8601") from None
        if ts.tzinfo is None:
            raise _fail(path, n, f"timestamp {cells['timestamp']!r} needs a UTC offset or Z")
        if ts.second or ts.microsecond:
            raise _fail(path, n, f"timestamp {cells['timestamp']!r} must be on a whole minute")
        if times and ts - times[-1] != timedelta(minutes=1):
            raise _fail(
                path,
                n,
                f"timestamp {cells['timestamp']} is not one minute after the previous row "
                f"({times[-1].isoformat()}); rows must be consecutive minutes",
            )
        times.append(ts)
        rpm.append(
            _number(path, n, "requests_per_minute", cells["requests_per_minute"], positive=False)
        )
        if all(has_tokens):
            prompt.append(_number(path, n, TOKENS[0], cells[TOKENS[0]], positive=True))
            output.append(_number(path, n, TOKENS[1], cells[TOKENS[1]], positive=True))
    if not times:
        raise TraceError(f"{path}: no data rows after the header")
    return Trace(
        name=path.stem,
        start=times[0].astimezone(UTC),
        rpm=np.asarray(rpm, dtype=float),
        description=f"user trace {path.name}",
        prompt_tokens=np.asarray(prompt) if prompt else None,
        output_tokens=np.asarray(output) if output else None,
    )


def write_csv(trace: Trace, path: Path) -> None:
    """Write a trace in the CSV format ``load_csv`` reads (round trip)."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        tokens = trace.prompt_tokens is not None and trace.output_tokens is not None
        w.writerow(list(REQUIRED) + (list(TOKENS) if tokens else []))
        for i, value in enumerate(trace.rpm):
            row = [(trace.start + timedelta(minutes=i)).isoformat(), f"{value:.1f}"]
            if tokens:
                assert trace.prompt_tokens is not None and trace.output_tokens is not None
                row += [f"{trace.prompt_tokens[i]:.0f}", f"{trace.output_tokens[i]:.0f}"]
            w.writerow(row)


# ---------------------------------------------------------------- built-in traces
#
# Levels the original team reported: ~500 requests/minute at 3 AM JST; a JP evening peak of
# ~3,600 requests/minute ("observed peak concurrency ~60" per engine on the 4-instance fleet, at
# ~4 s per request); JP and US evening peaks 18:00-22:00 local; the One Piece release: 3x in 15
# minutes from 20:00 JST. The pre-release level of 2,000 requests/minute is what their own
# figures imply: 20% of a 3x spike failing on 4 instances of ~1,200 requests/minute means
# 3 x base x 0.8 = 4,800.


def _bump(hours: np.ndarray, centre: float, width: float) -> np.ndarray:
    """A smooth plateau around ``centre`` (hours), ``width`` hours wide at half height."""
    d = np.abs((hours - centre + 12) % 24 - 12)
    return 1 / (1 + (d / (width / 2)) ** 6)


def _day_shape(start: datetime, minutes: int) -> np.ndarray:
    """Requests/minute of an ordinary day: JP daily cycle plus the US evening, in JST hours."""
    t = np.arange(minutes)
    jst = start.astimezone(JST)
    hours = (jst.hour + jst.minute / 60 + t / 60) % 24
    ny_hours = (hours - 14) % 24  # New York is 14 h behind Tokyo in winter (EST)
    base = 500 + 1100 * _bump(hours, 14.0, 14.0)  # ~500 at night, ~1,600 in the JP day
    jp_peak = 2000 * _bump(hours, 20.0, 4.5)  # 18:00-22:00 JST -> ~3,600 at the peak
    us_peak = 1200 * _bump(ny_hours, 20.0, 4.5)  # 18:00-22:00 New York
    noise = np.random.default_rng(minutes).normal(0, 0.03, minutes)  # deterministic, +-3%
    return np.maximum(0.0, (base + jp_peak + us_peak) * (1 + noise))


def _spike(minutes: int, at: int, factor: float, base: np.ndarray) -> np.ndarray:
    """Ramp to ``factor`` x over 15 minutes from ``at``, hold 30, decay back over 60."""
    t = np.arange(minutes) - at
    mult = np.ones(minutes)
    ramp = (t >= 0) & (t < 15)
    mult[ramp] = 1 + (factor - 1) * (t[ramp] + 1) / 15
    mult[(t >= 15) & (t < 45)] = factor
    decay = (t >= 45) & (t < 105)
    mult[decay] = factor - (factor - 1) * (t[decay] - 45) / 60
    return base * mult


def _jst(y: int, m: int, d: int, h: int, mi: int = 0) -> datetime:
    return datetime(y, m, d, h, mi, tzinfo=JST).astimezone(UTC)


def normal_day() -> Trace:
    # a Tuesday in Tokyo (Monday evening in New York); the plan prices the week from here
    start = REFERENCE_START.astimezone(UTC)
    rpm = _day_shape(start, 24 * 60)
    return Trace(
        "normal-day",
        start,
        rpm,
        "ordinary Tuesday (JST): ~500 rpm at night, JP evening peak ~3,600 rpm, "
        "US evening peak (08:00-12:00 JST)",
        marks=((18 * 60, "JP 18:00"), (8 * 60, "US 18:00 EST")),
    )


def day_at(name: str, start: datetime, description: str) -> Trace:
    """The ordinary day's traffic from ``start`` (00:00 of a day in Tokyo): the normal day
    replayed on another weekday (simulator/week.py)."""
    return replace(normal_day(), name=name, start=start.astimezone(UTC), description=description)


def spike_at(name: str, factor: float, at: datetime, desc: str) -> Trace:
    """The One Piece shape (``factor`` x from a 2,000 requests/minute evening) with its spike
    at ``at``: the unannounced spike replayed at another day's weakest hour (simulator/week.py)."""
    return _one_piece_like(name, factor, desc, start=at.astimezone(UTC) - timedelta(hours=2))


def _one_piece_like(name: str, factor: float, desc: str, start: datetime | None = None) -> Trace:
    # a Wednesday: no Friday pre-scale, not in the calendar
    start = start or _jst(2026, 12, 9, 18)
    minutes = 5 * 60
    base = np.full(minutes, 2000.0)
    at = 120  # 20:00 JST
    return Trace(
        name,
        start,
        _spike(minutes, at, factor, base),
        desc,
        marks=((at, f"spike {start.astimezone(JST) + timedelta(minutes=at):%H:%M}"),),
        spike_window=(at, at + 45),
    )


def spike_3x() -> Trace:
    return _one_piece_like(
        "unannounced-3x",
        3.0,
        "One Piece shape, unannounced: 2,000 rpm at 20:00 JST, 3x within 15 min, "
        "30 min plateau, 60 min decay",
    )


def spike_4x() -> Trace:
    return _one_piece_like(
        "unannounced-4x", 4.0, "as unannounced-3x but 4x (2,000 -> 8,000 rpm in 15 min)"
    )


def announced_release() -> Trace:
    # Friday 4 Dec 2026, 20:00 JST: the date of prod's release_calendar entry one-piece-1170,
    # so the calendar's pre-scale applies (a trace is data: move it and the calendar stops
    # matching, which is what an unannounced release looks like).
    start = _jst(2026, 12, 4, 14)
    minutes = 12 * 60
    at = 6 * 60
    base = _day_shape(start, minutes)
    rpm = _spike(minutes, at, 3.0, base)
    return Trace(
        "announced-release",
        start,
        rpm,
        "Friday 2026-12-04 (in the release calendar): JP evening plus a 3x release spike "
        "at 20:00 JST",
        marks=((at, "release 20:00"), (at - 120, "pre-scale")),
        spike_window=(at, at + 45),
    )


def off_peak_night() -> Trace:
    start = _jst(2026, 12, 2, 22)  # Wednesday night into Thursday, 22:00-08:00 JST
    minutes = 10 * 60
    rpm = _day_shape(start, minutes)
    return Trace(
        "off-peak-night",
        start,
        rpm,
        "22:00-08:00 JST: ~500 rpm from 02:00 to 06:00 (as reported)",
        marks=((4 * 60, "02:00"), (8 * 60, "06:00")),
    )


BUILTIN = {
    t.name: t for t in (normal_day(), announced_release(), spike_3x(), spike_4x(), off_peak_night())
}


def resolve(spec: str) -> Trace:
    """A built-in name or a CSV path."""
    if spec in BUILTIN:
        return BUILTIN[spec]
    path = Path(spec)
    if path.suffix.lower() != ".csv" and not path.exists():
        raise TraceError(f"unknown trace {spec!r}: give a CSV file or one of {', '.join(BUILTIN)}")
    return load_csv(path)
