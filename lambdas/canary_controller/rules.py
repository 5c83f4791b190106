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
  A canary still short of them ``capacity_timeout_seconds`` after the phase began (capacity or
  quota: SageMaker cannot place them) rolls back, the reason naming the shortfall.
- No data means no step forward: a watched alarm in INSUFFICIENT_DATA holds the shift as it holds
  the end of a bake, and rolls back once the hold outlasts ``evidence_timeout_seconds``.
- The endpoint must still be the one the rollout started on: an InService endpoint whose
  EndpointConfigName or canary share is not what the controller recorded or set (a deploy, the
  console, a reset of the weights) rolls back, naming what changed (:func:`endpoint_changed`).
  Rollback rather than hold: a hold keeps the lock, so it blocks the very deploys that would put
  things right, with no way forward but an operator's rollback anyway.
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
#: Percentage points by which the live canary share may differ from the one recorded before it
#: counts as changed under the rollout: the recorded share is a whole percent (the controller sets
#: whole percents; the share found at the start is rounded), DescribeEndpoint's weights are floats.
SHARE_TOLERANCE = 0.5


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
    #: Why the metrics could not be read (GetMetricData failed): no evidence either way.
    error: str | None = None


@dataclass(frozen=True)
class EvidenceRules:
    min_canary_invocations: int
    #: The canary's 5XX rate may exceed the primary's by at most this many percentage points.
    max_error_rate_increase_percent: float


def judge(ev: Evidence, rules: EvidenceRules) -> tuple[str, str]:
    """``("ok" | "insufficient" | "worse", reason)``. No traffic is no evidence, never health; nor
    are metrics that could not be read."""
    if ev.error is not None:
        return "insufficient", f"the canary's metrics could not be read ({ev.error})"
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
    #: After the bake, how long to wait for enough evidence before rolling back a silent canary;
    #: also how long a shift may be held by alarms without data.
    evidence_timeout_seconds: int
    plan: CapacityPlan
    #: How long the canary may stay short of a step's instances, from the start of the scaling
    #: phase, before the rollout rolls back (``rollout.capacity_timeout_minutes``; the stacks and
    #: the simulator always pass it; None, no deadline, only for settings that predate it).
    capacity_timeout_seconds: int | None = None


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
    #: DescribeEndpoint's EndpointConfigName; None where it is not known (the simulator).
    endpoint_config_name: str | None = None

    @property
    def canary_share(self) -> float:
        """The canary's percentage of the traffic (SageMaker weights are relative)."""
        total = self.canary_weight + self.primary_weight
        return 100 * self.canary_weight / total if total > 0 else 0.0


def endpoint_changed(state: dict[str, Any], obs: Observation) -> str | None:
    """What changed on the endpoint under the rollout, or None.

    Compared with the record: the EndpointConfigName found at the start (a deploy or the console
    put another one: its weights and counts may be anything), and the canary share the controller
    last set (``canary_percent``; at the start, the share it found). Allowed besides: the share
    before the shift the previous tick made (DescribeEndpoint may not show it yet) and a shift
    whose call failed without an answer (``canary_percent_pending``: it may have landed). A
    record without these fields (a rollout started before they were recorded) is not checked.
    """
    was, now = state.get("endpoint_config_name"), obs.endpoint_config_name
    if was is not None and now is not None and now != was:
        return f"endpoint config {was} -> {now}"
    recorded = state.get("canary_percent")
    if recorded is None:
        return None
    allowed = [recorded, state.get("canary_percent_pending")]
    if state.get("last_decision") == "shift":
        allowed.append(state.get("canary_percent_before"))
    share = obs.canary_share
    if all(a is None or abs(share - a) > SHARE_TOLERANCE for a in allowed):
        return f"canary weight {recorded:g}% -> {share:.4g}%"
    return None


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
    steps = rules.steps
    scaling = state.get("phase") == SCALING
    if scaling and obs.canary_instances < state["target_instances"]:
        short = _capacity_deadline(state, obs, rules, now)
        if short is not None:
            return short
    if status != "InService":
        return Decision("wait", f"endpoint is {status}, not InService; alarms OK, no change", check)
    changed = endpoint_changed(state, obs)
    if changed is not None:
        return Decision(
            "rollback",
            f"{changed} under the rollout (a deploy or the console changed the endpoint): the "
            "controller stops moving and rolls the canary back",
        )
    if scaling:
        target, need = state["target_index"], state["target_instances"]
        if obs.canary_instances < need:
            left = _left(state.get("scaling_started_at"), rules.capacity_timeout_seconds, now)
            return Decision(
                "scale",
                f"canary has {obs.canary_instances} of the {need} instances {steps[target]}% "
                f"needs; capacity requested again{left}",
                check,
                target_index=target,
                instances=need,
                bounds=(need, rules.plan.steps[target].max_capacity),
            )
        if obs.no_data:
            return _held_without_data(state, obs, rules, now, f"shift to {steps[target]}%")
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


def _left(since: int | None, timeout: int | None, now: int) -> str:
    if since is None or timeout is None:
        return ""
    return f" (rollback in {max(0, since + timeout - now)}s without them)"


def _capacity_deadline(
    state: dict[str, Any], obs: Observation, rules: Rules, now: int
) -> Decision | None:
    """Rollback once the canary has been short of its step's instances for
    ``capacity_timeout_seconds`` since the scaling phase began (also while the endpoint is
    Updating: instances that do not come are the shortfall)."""
    since, timeout = state.get("scaling_started_at"), rules.capacity_timeout_seconds
    if since is None or timeout is None or now - since < timeout:
        return None
    target, need = state["target_index"], state["target_instances"]
    return Decision(
        "rollback",
        f"capacity shortfall: the canary has {obs.canary_instances} of the {need} instances "
        f"{rules.steps[target]}% needs, {now - since}s after they were requested (capacity "
        f"timeout {timeout}s, rollout.capacity_timeout_minutes): SageMaker could not place them "
        "(instance capacity or the account's quota)",
    )


def _held_without_data(
    state: dict[str, Any], obs: Observation, rules: Rules, now: int, move: str
) -> Decision:
    """No data, no step forward: hold ``move``; roll back once the hold outlasts
    ``evidence_timeout_seconds`` (``held_since``, recorded by :func:`transition`)."""
    silent = ", ".join(obs.no_data)
    since = state.get("held_since")
    held = 0 if since is None else now - since
    if held >= rules.evidence_timeout_seconds:
        return Decision(
            "rollback",
            f"no evidence: {silent} without data for {held}s, {move} held past the evidence "
            f"timeout ({rules.evidence_timeout_seconds}s)",
        )
    left = rules.evidence_timeout_seconds - held
    why = f"{move} held, alarms without data: {silent}; rollback in {left}s"
    return Decision("hold", why, rules.check_seconds)


def transition(state: dict[str, Any], d: Decision, now: int) -> dict[str, Any]:
    """The fields a decision changes once its AWS call was accepted (Lambda and simulator).

    ``scaling_started_at`` is when the scaling phase towards a step began: a re-request of the same
    step keeps it (the capacity deadline counts from the first request). ``held_since`` is when the
    current hold began; any move forward clears it. ``canary_percent`` is the share the controller
    set (``canary_percent_before`` the one before it: :func:`endpoint_changed`)."""
    if d.kind == "scale":
        same = (
            state.get("phase") == SCALING
            and state.get("target_index") == d.target_index
            and state.get("scaling_started_at") is not None
        )
        return {
            "phase": SCALING,
            "target_index": d.target_index,
            "target_instances": d.instances,
            "scaling_started_at": state["scaling_started_at"] if same else now,
            "held_since": None,
        }
    if d.kind == "shift":
        return {
            "phase": BAKING,
            "step_index": d.target_index,
            "step_started_at": now,
            "canary_percent": d.percent,
            "canary_percent_before": state.get("canary_percent"),
            "canary_percent_pending": None,
            "held_since": None,
        }
    if d.kind == "hold":
        since = state.get("held_since")
        return {"held_since": now if since is None else since}
    ends = {
        "abort": FAILED,
        "complete": COMPLETED,
        "restore": ROLLED_BACK,
        "rollback": ROLLING_BACK,
    }
    return {"status": ends[d.kind]} if d.kind in ends else {}
