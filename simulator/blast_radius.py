"""Blast radius, measured (issue 33 item 4): how many of a day's user requests a bad build answers
before the release stops it, at which stage, and how long that takes.

Each build of :mod:`simulator.bad_builds` goes through the release as configured, starting at
14:00 JST on the normal-day trace (simulator/rollout.py's start: its last steps meet the evening
peak):

1. the shadow stage, when ``rollout.shadow`` is set (:mod:`simulator.shadow_replay`: the
   comparison of shadow_compare.py on synthesized answers of both variants). Shadow answers reach
   no user: a build stopped there served 0 requests;
2. the canary steps, with the controller's own rules (``simulate_rollout``: rules.decide and
   transition) and the watched alarms replayed as CloudWatch evaluates them
   (:class:`AlarmWatch`: sizing/rollout_alarms.py's period, M of N and missing data, fed the
   build's per-minute signals); the evidence rule sees the build's 5XX errors.

The bad build's requests are those routed to the canary from the release's start until its weight
is 0 (a rollback moves it at the tick that decides it when the primary holds the traffic, as the
controller's ``DecisionApplier.drive_rollback`` does); a build never stopped keeps its share to the
day's end (after COMPLETED it has 100 %: what the promotion would then make permanent). The share
is of the whole day's requests (the trace's sum). The endpoint update between the stages is not
replayed: it delays the canary but serves no user from the bad build.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lambdas.canary_controller.capacity import CapacityPlan
from simulator.alarm_eval import AlarmEval
from simulator.assumptions import Assumptions
from simulator.bad_builds import (
    Build,
    LatencyCurve,
    Percentiles,
    adapter_shares,
    bad_builds,
    minute_signals,
)
from simulator.rollout import START_HOUR_JST, simulate_rollout
from simulator.shadow_replay import ShadowLoad, replay_shadow
from simulator.traces import Trace, normal_day
from sizing.rollout_alarms import comparable_loads, watched_alarms
from sizing.rollout_plan import rollout_capacity_plan
from typed_config import DeploymentConfig
from typed_config.shadow import ShadowStage

#: The issue's goal: under this share of a day's requests, no bad build past the first step.
GOAL_PERCENT = 0.05


class AlarmWatch:
    """The watched alarms of one replay, fed the build's signals each minute from
    ``start_minute`` (before it, the canary runs the previous build: no datapoints)."""

    def __init__(
        self,
        cfg: DeploymentConfig,
        a: Assumptions,
        build: Build,
        shares: Mapping[str, float],
        start_minute: int,
        plan: CapacityPlan,
    ) -> None:
        self.build, self.shares, self.start = build, shares, start_minute
        self.alarms = [AlarmEval(x, existing=True) for x in watched_alarms(cfg)]
        canary = cfg.variants.canary.instance_type
        primary = cfg.variants.primary.instance_type
        self.canary_curve = LatencyCurve(cfg, canary, a)
        self.primary_curve = (
            self.canary_curve if primary == canary else LatencyCurve(cfg, primary, a)
        )
        self.floor = cfg.rollout.latency_ratio_min_invocations_per_minute
        self.canary_per_primary = plan.canary_per_primary

    def observe(self, minute: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(alarms in ALARM, alarms in INSUFFICIENT_DATA) as a tick at ``minute`` reads them."""
        if minute <= self.start:  # no minute of this build has ended yet
            return (), ()
        return (
            tuple(x.alarm.key for x in self.alarms if x.state == "ALARM"),
            tuple(x.alarm.key for x in self.alarms if x.state == "INSUFFICIENT_DATA"),
        )

    @staticmethod
    def _speed(curve: LatencyCurve, arrivals: float, instances: int) -> Percentiles:
        return curve.at(curve.settled_in_flight(arrivals, instances))

    def _comparable(self, row: dict[str, Any]) -> bool:
        """The ratio alarms' like-load condition on the minute's InvocationsPerInstance (the
        arrivals over each variant's instances in service)."""
        canary, primary = row["canary_in_service"], row["primary_in_service"]
        if canary <= 0 or primary <= 0:
            return False
        return comparable_loads(
            row["canary_arrivals"] / canary,
            row["primary_arrivals"] / primary,
            self.canary_per_primary,
        )

    def record(self, row: dict[str, Any]) -> None:
        """One minute: the build's 5XX errors on the row (the evidence rule sums them), and each
        alarm's datapoint."""
        minute = row["minute"]
        ours = minute >= self.start
        calls = row["canary_arrivals"] if ours else 0.0
        row["canary_errors"] = calls * self.build.error_share(self.shares)
        row["primary_errors"] = 0.0
        if not ours:
            return
        signals = minute_signals(
            self.build,
            self.shares,
            invocations=calls,
            canary=self._speed(self.canary_curve, calls, row["canary_in_service"]),
            primary=self._speed(
                self.primary_curve, row["primary_arrivals"], row["primary_in_service"]
            )
            if row["primary_arrivals"] > 0
            else None,
            min_ratio_invocations=self.floor,
            comparable=self._comparable(row),
        )
        for x in self.alarms:
            x.minute(minute, signals[x.alarm.signal])


@dataclass(frozen=True)
class Outcome:
    """One build through one release."""

    build: Build
    #: "shadow", "canary step N (P %)" or "never stopped"; "passed" for a build that should pass.
    stage: str
    #: From the release's start to the moment the bad build stopped answering (None: never).
    minutes_to_stop: int | None
    #: Requests routed to the bad build (users'; shadow copies are not counted).
    served: float
    day_requests: float
    reason: str
    #: The furthest canary step the build reached (0: none).
    furthest_step: int
    status: str

    @property
    def served_percent(self) -> float:
        return 100 * self.served / self.day_requests

    @property
    def meets_goal(self) -> bool:
        return self.served_percent < GOAL_PERCENT and self.furthest_step <= 1

    def as_dict(self) -> dict[str, Any]:
        return {
            "build": self.build.key,
            "description": self.build.description,
            "stage": self.stage,
            "minutes_to_stop": self.minutes_to_stop,
            "served_requests": round(self.served),
            "day_requests": round(self.day_requests),
            "served_percent": round(self.served_percent, 4),
            "furthest_step": self.furthest_step,
            "status": self.status,
            "meets_goal": self.meets_goal,
            "reason": self.reason,
        }


def _canary(
    cfg: DeploymentConfig,
    plan: CapacityPlan,
    a: Assumptions,
    build: Build,
    shares: Mapping[str, float],
    tr: Trace,
    release_start: int,
    canary_start: int,
) -> Outcome:
    watch = AlarmWatch(cfg, a, build, shares, canary_start, plan)
    res = simulate_rollout(cfg, a, plan=plan, trace=tr, start_minute=canary_start, watch=watch)
    day = float(sum(tr.rpm))
    served = sum(row["canary_arrivals"] for row in res["rows"][canary_start:])
    stop = next((m for m, kind, _ in res["decisions"] if kind == "rollback"), None)
    shifts = [s for s in res["steps"] if stop is None or s["minute"] <= stop]
    furthest = len(shifts)
    if stop is None:
        last = res["decisions"][-1] if res["decisions"] else (0, "", "")
        stage = "passed" if build.healthy else "never stopped"
        return Outcome(build, stage, None, served, day, last[2], furthest, res["status"])
    why = next(reason for m, kind, reason in res["decisions"] if m == stop and kind == "rollback")
    # Before its first shift the canary holds the share the deploy gave it (its initial weight):
    # it answers users from the deploy on, as in step 1.
    v = cfg.variants
    initial = round(
        100 * v.canary.initial_weight / (v.canary.initial_weight + v.primary.initial_weight)
    )
    percent = shifts[-1]["percent"] if shifts else initial
    furthest = max(furthest, 1)
    return Outcome(
        build,
        f"canary step {furthest} ({percent} %)",
        stop - release_start,
        served,
        day,
        why,
        furthest,
        res["status"],
    )


def replay(
    cfg: DeploymentConfig,
    build: Build,
    shares: Mapping[str, float],
    a: Assumptions | None = None,
    *,
    trace: Trace | None = None,
    start_minute: int = START_HOUR_JST * 60,
    shadow_load: ShadowLoad = "tracking",
    plan: CapacityPlan,
) -> Outcome:
    """One build through ``cfg``'s release (shadow stage when ``rollout.shadow`` is set; its
    fleet's load: :mod:`simulator.shadow_replay`). ``plan``: the canary's capacity plan
    (``sizing.rollout_plan.rollout_capacity_plan``), derived once per run by the caller."""
    a = a or Assumptions()
    tr = trace or normal_day()
    stage = cfg.rollout.shadow
    canary_start = start_minute
    if stage is not None:
        curve = LatencyCurve(cfg, cfg.variants.canary.instance_type, a)
        s = replay_shadow(
            cfg, stage, build, shares, tr, curve, plan,
            start_minute=start_minute, shadow_load=shadow_load, a=a,
        )  # fmt: skip
        if s.outcome != "pass":
            day = float(sum(tr.rpm))
            return Outcome(build, "shadow", s.minutes, 0.0, day, s.reason, 0, "FAILED (shadow)")
        canary_start = s.end_minute
    return _canary(cfg, plan, a, build, shares, tr, start_minute, canary_start)


def with_shadow(cfg: DeploymentConfig, stage: ShadowStage | None = None) -> DeploymentConfig:
    """``cfg`` with a shadow stage (default: ``rollout.shadow``'s defaults, sample 10 %)."""
    rollout = cfg.rollout.model_copy(update={"shadow": stage or ShadowStage()})
    return cfg.model_copy(update={"rollout": rollout})


def without_shadow(cfg: DeploymentConfig) -> DeploymentConfig:
    """``cfg`` with its canary steps only."""
    return cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"shadow": None})})


def blast_radius(
    cfg: DeploymentConfig,
    a: Assumptions | None = None,
    *,
    shares: Mapping[str, float] | None = None,
    trace: Trace | None = None,
    shadow_load: ShadowLoad = "tracking",
) -> list[Outcome]:
    """Every build of :func:`bad_builds` (the healthy one first) through ``cfg``'s release, on
    the one capacity plan derived for it (``sizing.rollout_plan``)."""
    shares = shares or adapter_shares(cfg)
    plan = rollout_capacity_plan(cfg)
    return [
        replay(cfg, b, shares, a, trace=trace, shadow_load=shadow_load, plan=plan)
        for b in bad_builds(shares)
    ]
