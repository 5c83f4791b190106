"""Operator events on a simulated timeline: what a person (or `make`) does to the endpoint.

Small and stable on purpose: the scenarios, the CLI and the replays (simulator/deploys.py for
deploys; the canary controller replay for canary starts and rollbacks) share these types.
Times are aware datetimes; an event before the trace starts or after it ends is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from typed_config import VariantProperty


@dataclass(frozen=True)
class Deploy:
    """`make deploy` starts at ``at`` (a new EndpointConfig, a blue/green update).

    ``prescale``: the deploy tool raises desired counts before the update (tools/deploy.py);
    False replays a bare `cdk deploy` (the behaviour before issue 10). ``reset``: the properties
    this deploy resets (a one-off ``RESET=``); None means the config's
    ``deployment.reset_on_update``.
    """

    at: datetime
    prescale: bool = True
    reset: tuple[VariantProperty, ...] | None = None
    label: str = "deploy"


@dataclass(frozen=True)
class CanaryStart:
    """`make canary-start`: the canary controller begins walking the canary's weight."""

    at: datetime
    rollout_id: str = "simulated"
    label: str = "canary start"


@dataclass(frozen=True)
class OperatorRollback:
    """`make canary-rollback`: the operator sends the canary's traffic back to the primary."""

    at: datetime
    reason: str = "operator requested rollback"
    label: str = "operator rollback"


OperatorEvent = Deploy | CanaryStart | OperatorRollback


def check_events(events: Sequence[OperatorEvent], start: datetime, end: datetime) -> None:
    """Every event lies within the trace and carries an aware time."""
    for e in events:
        if e.at.tzinfo is None:
            raise ValueError(f"{e.label} at {e.at}: give the time with its UTC offset")
        if not start <= e.at < end:
            raise ValueError(
                f"{e.label} at {e.at.isoformat()} lies outside the trace "
                f"({start.isoformat()} .. {end.isoformat()})"
            )
