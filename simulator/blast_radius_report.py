"""The blast-radius table (simulator/blast_radius.py): one row per build, one table per release."""

from __future__ import annotations

from collections.abc import Sequence

from simulator.blast_radius import GOAL_PERCENT, Outcome


def release_label(outcomes: Sequence[Outcome], shadow: str | None) -> str:
    return f"shadow stage ({shadow}), then the canary steps" if shadow else "canary steps only"


def not_seen(o: Outcome, healthy: Outcome | None) -> bool:
    """A bad build stopped no earlier than the healthy build was not told apart from it: the
    alarm that stopped it stops every build there (a false positive the table must not count as
    detection)."""
    if healthy is None or healthy.minutes_to_stop is None or o.minutes_to_stop is None:
        return False
    return o.stage != "shadow" and o.minutes_to_stop >= healthy.minutes_to_stop


def table(title: str, outcomes: Sequence[Outcome]) -> str:
    """Build, where it was stopped, minutes from the release's start, requests it answered and
    their share of the day, and why."""
    day = outcomes[0].day_requests if outcomes else 0.0
    lines = [
        f"== blast radius: {title} (normal-day trace, {day:,.0f} requests; release at 14:00 JST)",
        f"{'build':<13} {'stopped at':<22} {'minutes':>8} {'served':>8} {'% of day':>9}  goal  why",
    ]
    healthy = next((o for o in outcomes if o.build.healthy), None)
    for o in outcomes:
        reason = o.reason
        if not o.build.healthy and not_seen(o, healthy):
            reason = f"NOT SEEN: the healthy build is stopped there too ({reason})"
        minutes = "-" if o.minutes_to_stop is None else f"{o.minutes_to_stop:,}"
        goal = "-" if o.build.healthy else ("yes" if o.meets_goal else "NO")
        lines.append(
            f"{o.build.key:<13} {o.stage:<22} {minutes:>8} {o.served:>8,.0f} "
            f"{o.served_percent:>8.3f}%  {goal:<4}  {reason[:110]}"
        )
    lines.append(
        f"goal: under {GOAL_PERCENT} % of the day's requests and no bad build past the first "
        "canary step; 'served' counts requests routed to the bad build (shadow copies: 0)"
    )
    return "\n".join(lines)
