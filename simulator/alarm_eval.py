"""CloudWatch's evaluation of one metric alarm, minute by minute (sizing/rollout_alarms.py cites
the rules: M of the N most recent period datapoints, and the treatment of missing data).

A minute's value is known once the minute is over (a datapoint for the period ending at ``t`` is
evaluated at ``t``); a period longer than a minute aggregates its minutes (a count sums them, any
other statistic averages them). CloudWatch's own publishing delay is not added: the replayed alarm
fires at the earliest moment its datapoints allow, the optimistic edge for detection.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

from sizing.rollout_alarms import Missing, WatchedAlarm

State = Literal["OK", "ALARM", "INSUFFICIENT_DATA"]
#: The state of an alarm that has seen no data for a long while, by its missing-data treatment
#: (``ignore`` and ``missing``: INSUFFICIENT_DATA).
EXISTING_STATE: dict[Missing, State] = {"notBreaching": "OK", "breaching": "ALARM"}


class AlarmEval:
    """One alarm's state from the minute values fed to :meth:`minute`."""

    def __init__(self, alarm: WatchedAlarm, *, existing: bool = False) -> None:
        """``existing``: the alarm was created long before (with the stack) and has evaluated a
        canary without data since: its state is what its missing-data treatment makes of
        that. Otherwise it starts as CloudWatch creates one, in INSUFFICIENT_DATA."""
        self.alarm = alarm
        t = alarm.timing
        if t.period_seconds % 60:
            raise ValueError(f"{alarm.key}: period {t.period_seconds} s is not whole minutes")
        self._minutes_per_period = t.period_seconds // 60
        self._pending: list[float | None] = []
        #: The most recent period datapoints, None where missing.
        self._points: deque[float | None] = deque(maxlen=t.evaluation_periods)
        self.state: State = "INSUFFICIENT_DATA"
        if existing:
            self.state = EXISTING_STATE.get(t.missing, self.state)
        #: The minute index (end of minute) at which the alarm last went to ALARM.
        self.alarmed_at: int | None = None

    def minute(self, index: int, value: float | None) -> State:
        """Feed minute ``index``'s value (None: no datapoint); returns the state at its end."""
        self._pending.append(value)
        if len(self._pending) < self._minutes_per_period:
            return self.state
        present = [v for v in self._pending if v is not None]
        self._pending = []
        point: float | None = None
        if present:
            count = self.alarm.signal in ("errors_per_minute", "restarts")
            point = sum(present) if count else sum(present) / len(present)
        self._points.append(point)
        self._evaluate(index)
        return self.state

    def _evaluate(self, index: int) -> None:
        t = self.alarm.timing
        points = list(self._points)
        missing = t.missing
        if all(p is None for p in points):
            if missing == "missing":
                self.state = "INSUFFICIENT_DATA"
                return
            if missing == "ignore":
                return
        bad = 0
        for p in points:
            if p is None:
                bad += missing == "breaching"
            else:
                bad += self.alarm.breaches(p)
        if bad >= t.datapoints_to_alarm:
            if self.state != "ALARM":
                self.alarmed_at = index
            self.state = "ALARM"
        elif len(points) >= t.evaluation_periods or missing == "notBreaching":
            self.state = "OK"
