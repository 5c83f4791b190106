"""Validate the model against the One Piece incident as the original team reported it.

The incident's policy, rebuilt on top of the configured deployment (engine, instance types and
prices unchanged; only ``scaling`` replaced, so nothing of the current policy is copied):

- 4 instances running ("kept 4 instances running"), max 8, all traffic on one variant (they ran
  a single ``AllTraffic`` variant: canary weight 0).
- Reactive target tracking on InvocationsPerInstance, cooldowns 60 s out / 300 s in. Target
  800/minute: their timeline has the trigger fire at 8:07 PM; with the trace's ramp
  (2,000 -> 6,000 rpm over 15 minutes) 3 consecutive 1-minute datapoints first exceed a target
  between 767 and 833 at 8:07. Their literal "InvocationsPerInstance > 300" cannot be right
  at that traffic (it would have been in alarm all evening).
- No step policies, schedules or release calendar.
- New capacity 8 and 13 minutes after the decision (their "trigger to capacity available:
  8-13 minutes"), container start included.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from simulator.assumptions import Assumptions
from simulator.run import Result, simulate
from simulator.traces import spike_3x
from sizing.fit_checks import validate_config
from typed_config import DeploymentConfig

OLD_TARGET_INVOCATIONS = 800
CAPACITY_MINUTES = (8, 13)
REPORTED: dict[str, object] = {
    "failed_pct_during_spike": 20.0,
    "trigger_to_capacity_minutes": list(CAPACITY_MINUTES),
    "degraded_minutes": 13,
}


#: The instance type the One Piece incident ran on (the brief: 4 x ml.g5.xlarge).
INCIDENT_INSTANCE_TYPE = "ml.g5.xlarge"


def old_policy_config(cfg: DeploymentConfig) -> DeploymentConfig:
    data: dict[str, Any] = cfg.model_dump()
    # the incident's hardware and fleet: 4..8 ml.g5.xlarge, whatever the config now runs
    for v in ("primary", "canary"):
        data["variants"][v].update(instance_type=INCIDENT_INSTANCE_TYPE, instance_pools=None)
        rt = data["variants"][v].get("routing")
        if rt and rt.get("concurrency_threshold"):
            rt["concurrency_threshold"] = None  # the incident fleet's own target's
    data["variants"]["primary"].update(initial_instance_count=4, initial_weight=100)
    data["variants"]["canary"].update(initial_weight=0, initial_instance_count=2)
    canary = {**data["scaling"]["variants"]["canary"], "min_capacity": 2, "max_capacity": 2}
    primary = {
        "min_capacity": 4,
        "max_capacity": 8,
        "target_tracking": {
            "metric": "invocations",
            "invocations_per_instance": OLD_TARGET_INVOCATIONS,
            "scale_out_cooldown_seconds": 60,
            "scale_in_cooldown_seconds": 300,
        },
        "step_policies": [],
    }
    data["scaling"] = {
        "variants": {"primary": primary, "canary": canary},
        "schedules": [],
        "release_calendar": [],
    }
    return validate_config(data)


@dataclass(frozen=True)
class OnePieceRun:
    """The One Piece trace replayed with new capacity ``minutes_to_capacity`` after a decision."""

    minutes_to_capacity: int
    result: Result

    def as_dict(self) -> dict[str, object]:
        return {
            "summary": self.result.summary,
            "scaling_activities": [x.as_dict() for x in self.result.runs["primary"].activities],
        }


@dataclass(frozen=True)
class OnePieceReport:
    runs: tuple[OnePieceRun, ...]

    def as_dict(self) -> dict[str, object]:
        """The report as ``one-piece-validation.json`` holds it."""
        return {
            "reported": REPORTED,
            "policy": "old reactive target tracking (see simulator/validation.py)",
            "runs": {f"{r.minutes_to_capacity}_min_to_capacity": r.as_dict() for r in self.runs},
        }


def one_piece(cfg: DeploymentConfig, a: Assumptions) -> OnePieceReport:
    """Replay the One Piece trace with the original policy at 8 and 13 minutes to capacity."""
    old = old_policy_config(cfg)
    runs = []
    for minutes in CAPACITY_MINUTES:
        assumed = replace(a, provision_seconds=minutes * 60 - a.startup_seconds)
        res = simulate(old, spike_3x(), assumed, label=f"old policy, {minutes} min to capacity")
        runs.append(OnePieceRun(minutes, res))
    return OnePieceReport(tuple(runs))
