"""The canary controller's rules without AWS: capacity per step, evidence, and the next decision.

Pure functions on plain data, so the Lambda (``handler.py``), the stacks (the synth-time capacity
plan) and the simulator (``simulator/rollout.py``) run the same rules. Nothing here imports boto3.

The loop, one decision per tick:

- RUNNING, phase ``baking`` at step ``i``: wait out the bake, then require *evidence* (enough
  canary invocations, and an error rate not worse than the primary's over the same window);
  then either complete (last step) or ask for the next step's capacity (phase ``scaling``).
- RUNNING, phase ``scaling`` towards step ``i+1``: the canary's instances are raised first
  (scalable-target bounds and desired count); only when the endpoint is InService with at least
  the planned instances is its weight shifted (the canary holds its share before it gets it).
- ROLLING_BACK: canary weight to 0 until DescribeEndpoint shows it at 0 on an InService endpoint;
  only then are its scaling bounds restored (weight first, shrink second). Then ROLLED_BACK.
- Watched alarms are read on every RUNNING tick, also while the endpoint is Updating: an alarm
  rolls back at once (the weight call itself is retried until SageMaker accepts it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

try:  # tests, stacks and the simulator import the package; in Lambda this directory is the root
    from lambdas.canary_controller import names
except ImportError:  # pragma: no cover - the Lambda runtime
    import names  # type: ignore[no-redef]

# The statuses are defined in names.py (the stacks import them from there); kept here as well so
# the controller, the simulator and the tests can keep writing ``rules.RUNNING``.
RUNNING, ROLLING_BACK, LOCKED = names.RUNNING, names.ROLLING_BACK, names.LOCKED
COMPLETED, ROLLED_BACK, FAILED = names.COMPLETED, names.ROLLED_BACK, names.FAILED
ENDED = names.ENDED
SCALING, BAKING = "scaling", "baking"
#: Endpoint states that end a rollout; any other non-InService state means "wait and look again".
TERMINAL_ENDPOINT_STATES = frozenset({"Failed", "OutOfService", "Deleting", "NotFound"})
#: SageMaker refusals of a weight/capacity change on an InService endpoint before a RUNNING
#: rollout rolls back (a ROLLING_BACK one keeps retrying and tells the operator at this count).
MAX_REFUSALS = 6


# ---------------------------------------------------------------------------- capacity


@dataclass(frozen=True)
class StepCapacity:
    """The canary's scalable-target bounds while it holds ``percent`` of the traffic."""

    percent: int
    min_capacity: int
    max_capacity: int


@dataclass(frozen=True)
class CapacityPlan:
    """Computed at synth from stacks.capacity and the config; handed to the Lambda as JSON."""

    #: Canary instances that serve what one primary instance serves (per-instance concurrency
    #: of the primary's instance type / the canary's).
    canary_per_primary: float
    primary_max: int
    #: The canary's configured bounds, restored after a rollback.
    canary_min: int
    canary_max: int
    steps: tuple[StepCapacity, ...]

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> CapacityPlan:
        raw = json.loads(text)
        return cls(
            canary_per_primary=float(raw["canary_per_primary"]),
            primary_max=int(raw["primary_max"]),
            canary_min=int(raw["canary_min"]),
            canary_max=int(raw["canary_max"]),
            steps=tuple(StepCapacity(**s) for s in raw["steps"]),
        )


def _ceil(x: float) -> int:
    return math.ceil(round(x, 9))


def build_plan(
    steps: tuple[int, ...] | list[int],
    *,
    primary_min: int,
    primary_max: int,
    canary_min: int,
    canary_max: int,
    primary_concurrency: float,
    canary_concurrency: float,
) -> CapacityPlan:
    """Per step ``p``: at most what ``p`` % of the primary's maximum fleet serves (so at peak the
    canary can grow with its share as far as the primary could), at least ``p`` % of its minimum;
    never below the canary's configured bounds."""
    ratio = primary_concurrency / canary_concurrency
    plan = []
    for p in steps:
        lo = max(canary_min, _ceil(p / 100 * primary_min * ratio))
        hi = max(canary_max, _ceil(p / 100 * primary_max * ratio), lo)
        plan.append(StepCapacity(p, lo, hi))
    return CapacityPlan(round(ratio, 6), primary_max, canary_min, canary_max, tuple(plan))


def instances_for_step(
    plan: CapacityPlan,
    index: int,
    *,
    primary_instances: int,
    primary_weight: float,
    canary_weight: float,
) -> int:
    """Canary instances step ``index`` needs before it gets its share.

    Demand is measured in primary instances: the primary's instances divided by the share of
    traffic they serve now (autoscaling sizes the primary to its share). The canary needs its
    step's share of that demand, converted to its instance type, within the step's bounds.
    """
    step = plan.steps[index]
    total = primary_weight + canary_weight
    share = primary_weight / total if total > 0 else 0.0
    demand = primary_instances / share if share > 0 else float(plan.primary_max)
    need = _ceil(step.percent / 100 * demand * plan.canary_per_primary)
    return min(max(need, step.min_capacity), step.max_capacity)


# ---------------------------------------------------------------------------- evidence


@dataclass(frozen=True)
class Evidence:
    """AWS/SageMaker Invocations and Invocation5XXErrors per variant over one window."""

    canary_invocations: float
    canary_errors: float
    primary_invocations: float
    primary_errors: float


@dataclass(frozen=True)
class EvidenceRules:
    min_canary_invocations: int
    #: The canary's 5XX rate may exceed the primary's by at most this many percentage points.
    max_error_rate_increase_percent: float


def judge(ev: Evidence, rules: EvidenceRules) -> tuple[str, str]:
    """``("ok" | "insufficient" | "worse", reason)``. No traffic is no evidence, never health."""
    if ev.canary_invocations < rules.min_canary_invocations:
        return "insufficient", (
            f"canary served {ev.canary_invocations:.0f} invocations in the window, fewer than "
            f"the {rules.min_canary_invocations} required (rollout.min_canary_invocations_per_step)"
        )
    canary = 100 * ev.canary_errors / ev.canary_invocations
    primary = (
        100 * ev.primary_errors / ev.primary_invocations if ev.primary_invocations > 0 else 0.0
    )
    if canary > primary + rules.max_error_rate_increase_percent:
        return "worse", (
            f"canary 5XX rate {canary:.2f}% exceeds the primary's {primary:.2f}% by more than "
            f"{rules.max_error_rate_increase_percent} points "
            f"({ev.canary_errors:.0f}/{ev.canary_invocations:.0f} vs "
            f"{ev.primary_errors:.0f}/{ev.primary_invocations:.0f})"
        )
    return "ok", (
        f"{ev.canary_invocations:.0f} canary invocations, 5XX {canary:.2f}% vs primary "
        f"{primary:.2f}%"
    )


# ---------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class Rules:
    steps: tuple[int, ...]
    bake_seconds: int
    check_seconds: int
    evidence: EvidenceRules
    #: After the bake, how long to wait for enough evidence before rolling back a silent canary.
    evidence_timeout_seconds: int
    plan: CapacityPlan


@dataclass(frozen=True)
class Observation:
    """What one tick sees: DescribeEndpoint and DescribeAlarms."""

    endpoint_status: str
    firing: tuple[str, ...] = ()
    #: Watched alarms in INSUFFICIENT_DATA: no evidence either way, so no step forward.
    no_data: tuple[str, ...] = ()
    canary_instances: int = 0
    canary_weight: float = 0.0
    primary_instances: int = 0
    primary_weight: float = 0.0


@dataclass(frozen=True)
class Decision:
    #: abort | rollback | wait | bake | hold | scale | shift | complete | reapply | restore
    kind: str
    reason: str
    wait_seconds: int = 0
    target_index: int | None = None
    instances: int | None = None
    bounds: tuple[int, int] | None = None
    percent: int | None = None


def decide(
    state: dict[str, Any],
    obs: Observation,
    rules: Rules,
    now: int,
    evidence: Callable[[int, int], Evidence],
) -> Decision:
    """The next step of a RUNNING or ROLLING_BACK rollout. ``evidence(start, end)`` is only
    called once a bake is over (it is a CloudWatch query in the Lambda)."""
    check = rules.check_seconds
    status = obs.endpoint_status
    if state["status"] == ROLLING_BACK:
        if status in TERMINAL_ENDPOINT_STATES:
            return Decision("abort", f"endpoint is {status}; rollback cannot complete")
        if status != "InService":
            return Decision("wait", f"rollback pending: endpoint is {status}", check)
        if obs.canary_weight > 0:
            return Decision("reapply", f"canary weight is {obs.canary_weight:g}, setting 0", check)
        return Decision(
            "restore",
            "canary weight 0 on an InService endpoint; canary scaling bounds restored to "
            f"{rules.plan.canary_min}..{rules.plan.canary_max}",
            bounds=(rules.plan.canary_min, rules.plan.canary_max),
        )
    if status in TERMINAL_ENDPOINT_STATES:
        return Decision("abort", f"endpoint is {status}; rollout abandoned")
    if obs.firing:
        return Decision("rollback", f"alarm: {'; '.join(obs.firing)}")
    if status != "InService":
        return Decision("wait", f"endpoint is {status}, not InService; alarms OK, no change", check)
    steps = rules.steps
    if state.get("phase") == SCALING:
        target, need = state["target_index"], state["target_instances"]
        if obs.canary_instances < need:
            return Decision(
                "scale",
                f"canary has {obs.canary_instances} of the {need} instances {steps[target]}% "
                "needs; capacity requested again",
                check,
                target_index=target,
                instances=need,
                bounds=(need, rules.plan.steps[target].max_capacity),
            )
        return Decision(
            "shift",
            f"canary weight set to {steps[target]}% on {obs.canary_instances} instances, alarms OK",
            min(rules.bake_seconds, check),
            target_index=target,
            percent=steps[target],
        )
    index = state["step_index"]
    if index >= 0:
        baked = now - state["step_started_at"]
        remaining = rules.bake_seconds - baked
        if remaining > 0:
            return Decision(
                "bake", f"{steps[index]}% baking, {remaining}s left", min(remaining, check)
            )
        verdict, why = judge(evidence(state["step_started_at"], now), rules.evidence)
        if verdict == "worse":
            return Decision("rollback", f"evidence: {why}")
        if verdict == "insufficient" or obs.no_data:
            why = (
                why
                if verdict == "insufficient"
                else f"alarms without data: {', '.join(obs.no_data)}"
            )
            if baked >= rules.bake_seconds + rules.evidence_timeout_seconds:
                return Decision("rollback", f"no evidence after the bake and its timeout: {why}")
            return Decision("hold", f"{steps[index]}% held, not enough evidence: {why}", check)
        if index == len(steps) - 1:
            return Decision("complete", f"canary baked at the last step ({why}); promote it")
    nxt = index + 1
    need = instances_for_step(
        rules.plan,
        nxt,
        primary_instances=obs.primary_instances,
        primary_weight=obs.primary_weight,
        canary_weight=obs.canary_weight,
    )
    return Decision(
        "scale",
        f"{steps[nxt]}% next: canary to {need} instances (bounds {need}.."
        f"{rules.plan.steps[nxt].max_capacity}) before its weight moves",
        check,
        target_index=nxt,
        instances=need,
        bounds=(need, rules.plan.steps[nxt].max_capacity),
    )


def transition(state: dict[str, Any], d: Decision, now: int) -> dict[str, Any]:
    """The fields a decision changes once its AWS call was accepted (Lambda and simulator)."""
    if d.kind == "scale":
        return {"phase": SCALING, "target_index": d.target_index, "target_instances": d.instances}
    if d.kind == "shift":
        return {"phase": BAKING, "step_index": d.target_index, "step_started_at": now}
    ends = {
        "abort": FAILED,
        "complete": COMPLETED,
        "restore": ROLLED_BACK,
        "rollback": ROLLING_BACK,
    }
    return {"status": ends[d.kind]} if d.kind in ends else {}
