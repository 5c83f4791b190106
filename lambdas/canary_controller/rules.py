"""The canary controller's decision core without AWS: state and observation in, decision out.

Pure functions on plain data, so the Lambda (``handler.py``) and the simulator
(``simulator/rollout.py``) run the same rules. Nothing here imports boto3. The capacity plan and
its instance arithmetic are in ``capacity.py``, the evidence rule in ``evidence.py``; their names
are importable from here as well.

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
- ROLLING_BACK: the primary's capacity first, then canary weight 0 until DescribeEndpoint shows
  it at 0 on an InService endpoint; only then are the canary's scaling bounds restored, and the
  primary's bounds put back (weight first, shrink second). Then ROLLED_BACK.
- The primary's capacity before the weight moves: while the canary carried most of the traffic,
  the primary's autoscaling sized it to its small share, and weight 0 in one move would land all
  the traffic on those few instances, exactly during an incident. So a rollback first asks for
  the instances the primary's full share needs (:func:`primary_instances_needed`): its
  scalable-target bounds raised to at least that (``primary_raise_bounds``) and its desired count
  (decision ``raise-primary``), and moves the weight once the endpoint is InService with at least
  that many primary instances. A primary that already has them moves it at once (no wait). The
  wait is bounded by ``rollback_capacity_timeout_seconds``: past it, or when the capacity calls
  fail, the weight moves anyway (availability first: a partly sized primary beats a broken
  canary), and the record (``primary_capacity``, ``primary_shortfall``) and the rollback's
  notification say that the primary had X of the Y instances it needed. The primary's bounds are
  put back to what they were before the raise, unless something else (a scheduled action, a
  deploy) set them since (``primary_restore_bounds``; the deploy tool's ``restore_minimums`` rule):
  the configured bounds would undo a schedule's floor active at the time (prod's evening 5).
- Watched alarms are read on every RUNNING tick, also while the endpoint is Updating: an alarm
  rolls back at once (the weight call itself is retried until SageMaker accepts it).
- Every wait has a deadline. A RUNNING rollout waits for an endpoint that is not InService at
  most ``updating_timeout_seconds`` in a row (``updating_since``), then rolls back naming it
  (while the canary is short of a step's instances the capacity deadline governs instead). A
  rollback ends within ``rollback_timeout_seconds`` of its start (``rollback_started_at``): past
  it, whatever it still waits for (an endpoint kept Updating, SageMaker refusing weight 0 or the
  bounds), it ends FAILED (:func:`rollback_overdue`): the lock released, the operator told what
  it waited for and how long, the canary's raised minimum put back (``decisions.py``).
- Intent before action: a step forward (``scale``, ``shift``) is recorded as the record's
  ``intent`` before its AWS calls (:func:`intent`). A tick that dies after SageMaker took the
  call but before its record was written leaves the intent; the next tick finds the live weight
  equal to it on the same endpoint config (:func:`intent_landed`) and records the step as made,
  so its own shift is never taken for a change made under the rollout (:func:`endpoint_changed`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from . import names

# What moved to capacity.py and evidence.py stays importable from here (the simulator,
# tools/adapter_release and the tests write rules.judge, rules.CapacityPlan, ...).
from .capacity import CapacityPlan, instances_for_step, primary_instances_needed
from .capacity import StepCapacity as StepCapacity
from .capacity import primary_raise_bounds as primary_raise_bounds
from .capacity import primary_restore_bounds as primary_restore_bounds
from .evidence import Evidence, EvidenceRules, judge
from .state import DecisionKind, Intent, RolloutState

# The statuses are defined in names.py (the stacks import them from there); kept here as well so
# the controller, the simulator and the tests can keep writing ``rules.RUNNING``.
RUNNING, ROLLING_BACK, LOCKED = names.RUNNING, names.ROLLING_BACK, names.LOCKED
COMPLETED, ROLLED_BACK, FAILED = names.COMPLETED, names.ROLLED_BACK, names.FAILED
ENDED = names.ENDED
SCALING: Final = "scaling"
BAKING: Final = "baking"
#: Endpoint states that end a rollout; any other non-InService state means "wait and look again".
TERMINAL_ENDPOINT_STATES = frozenset({"Failed", "OutOfService", "Deleting", "NotFound"})
#: SageMaker refusals of a weight/capacity change on an InService endpoint before a RUNNING
#: rollout rolls back (a ROLLING_BACK one keeps retrying and tells the operator at this count).
MAX_REFUSALS = 6
#: Percentage points by which the live canary share may differ from the one recorded before it
#: counts as changed under the rollout: the recorded share is a whole percent (the controller sets
#: whole percents; the share found at the start is rounded), DescribeEndpoint's weights are floats.
SHARE_TOLERANCE = 0.5
#: Decisions that move the endpoint to another endpoint config (UpdateEndpoint): the shadow
#: stage's way in and out (shadow_stage.py).
STAGE_MOVES = ("enter-shadow", "leave-shadow")


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
    #: How long a rollback waits for the primary's instances (its full share's) before it moves
    #: the canary's weight anyway (``rollout.rollback_capacity_timeout_seconds``: one instance
    #: start and one check; the stacks and the simulator always pass it). None, only for settings
    #: that predate it: no capacity step, the weight moves at once as it did before.
    rollback_capacity_timeout_seconds: int | None = None
    #: How long a RUNNING rollout waits, in a row, for an endpoint that is not InService (an
    #: autoscaling activity, an update) before it rolls back; with the rollback capacity wait,
    #: also a rollback's whole deadline (:attr:`rollback_timeout_seconds`).
    #: ``rollout.updating_timeout_seconds``; None, only for settings that predate it: no deadline.
    updating_timeout_seconds: int | None = None

    @property
    def rollback_timeout_seconds(self) -> int | None:
        """A rollback's deadline from its start: its wait for the primary's capacity, then one
        updating wait for the weight and the bounds (None without an updating timeout)."""
        if self.updating_timeout_seconds is None:
            return None
        return (self.rollback_capacity_timeout_seconds or 0) + self.updating_timeout_seconds


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
    #: The primary's CurrentInstanceCount (``primary_instances`` is the larger of current and
    #: desired); None where only ``primary_instances`` is known.
    primary_in_service: int | None = None

    @property
    def primary_serving(self) -> int:
        """Primary instances in service now."""
        return (
            self.primary_instances if self.primary_in_service is None else self.primary_in_service
        )

    @property
    def canary_share(self) -> float:
        """The canary's percentage of the traffic (SageMaker weights are relative)."""
        total = self.canary_weight + self.primary_weight
        return 100 * self.canary_weight / total if total > 0 else 0.0


def endpoint_changed(state: RolloutState, obs: Observation) -> str | None:
    """What changed on the endpoint under the rollout, or None.

    Compared with the record: the EndpointConfigName found at the start (a deploy or the console
    put another one: its weights and counts may be anything), and the canary share the controller
    last set (``canary_percent``; at the start, the share it found). Allowed besides: the share
    before the shift the previous tick made (DescribeEndpoint may not show it yet) and the share of
    a recorded shift ``intent`` on the same endpoint config (its call may have landed: no answer
    came, or the tick died before recording it). A record without these fields (a rollout
    started before they were recorded) is not checked.
    """
    was, now = state.get("endpoint_config_name"), obs.endpoint_config_name
    if was is not None and now is not None and now != was:
        return f"endpoint config {was} -> {now}"
    recorded = state.get("canary_percent")
    if recorded is None:
        return None
    allowed = [recorded, _intended_share(state, obs)]
    if state.get("last_decision") == "shift":
        allowed.append(state.get("canary_percent_before"))
    share = obs.canary_share
    if all(a is None or abs(share - a) > SHARE_TOLERANCE for a in allowed):
        return f"canary weight {recorded:g}% -> {share:.4g}%"
    return None


def _intended_share(state: RolloutState, obs: Observation) -> float | None:
    intent = state.get("intent")
    if not intent or intent.get("decision") != "shift":
        return None
    config = intent.get("endpoint_config_name")
    if config is not None and obs.endpoint_config_name not in (None, config):
        return None
    return _shift_percent(intent)


def _shift_percent(intent: Intent) -> float:
    """The canary share a shift's intent asks for (a shift always names one)."""
    percent = intent["percent"]
    assert percent is not None, intent
    return float(percent)


def intent(state: RolloutState, d: Decision, obs: Observation, now: int) -> Intent:
    """What a tick is about to ask AWS for ``d`` (``scale``, ``shift``), recorded before it asks:
    the decision with its target (step, weight, instances, bounds), the endpoint config it is
    asked of, and when."""
    config = obs.endpoint_config_name or state.get("endpoint_config_name")
    return {
        "decision": d.kind,
        "reason": d.reason,
        "wait_seconds": d.wait_seconds,
        "target_index": d.target_index,
        "percent": d.percent,
        "instances": d.instances,
        "bounds": None if d.bounds is None else list(d.bounds),
        "endpoint_config_name": config,
        "target_config": d.endpoint_config,
        "at": now,
    }


def intent_decision(recorded: Intent) -> Decision:
    """The decision a recorded :func:`intent` was made for (its :func:`transition` is applied
    once the intent is known to have landed)."""
    bounds = recorded.get("bounds")
    return Decision(
        recorded["decision"],
        recorded["reason"],
        int(recorded.get("wait_seconds") or 0),
        target_index=recorded.get("target_index"),
        instances=recorded.get("instances"),
        bounds=None if bounds is None else (int(bounds[0]), int(bounds[1])),
        percent=recorded.get("percent"),
        endpoint_config=recorded.get("target_config"),
    )


def intent_landed(recorded: Intent, obs: Observation) -> bool | None:
    """Whether the AWS calls of a recorded :func:`intent` were made, as far as DescribeEndpoint
    tells: True (record the step as made), False (decide again), None (cannot tell yet: the
    endpoint is not InService and does not show the weight yet).

    A shift landed when the live canary share is the intended one on the endpoint config it was
    asked of (another config: a deploy replaced the endpoint's, the shift is moot). A capacity
    request (``scale``) is decided again: DescribeEndpoint does not show whether its bounds were
    registered, and asking again is harmless (RegisterScalableTarget on an existing target updates
    it; the desired count is a count, not an increment). A stage move (``enter-shadow``,
    ``leave-shadow``) landed when the endpoint runs the config it asked for; an endpoint Updating
    cannot tell yet."""
    if recorded.get("decision") in STAGE_MOVES:
        if obs.endpoint_config_name == recorded.get("target_config"):
            return True
        return None if obs.endpoint_status != "InService" else False
    if recorded.get("decision") != "shift":
        return False
    config = recorded.get("endpoint_config_name")
    if config is not None and obs.endpoint_config_name not in (None, config):
        return False
    if abs(obs.canary_share - _shift_percent(recorded)) <= SHARE_TOLERANCE:
        return True
    return None if obs.endpoint_status != "InService" else False


@dataclass(frozen=True)
class PrimaryCapacity:
    """What a rollback knows of the primary's capacity when it decides."""

    #: Instances the primary's full share needs (:func:`primary_instances_needed`).
    need: int
    #: Instances in service (DescribeEndpoint CurrentInstanceCount).
    have: int
    #: One sentence for the record and the notification.
    note: str

    @property
    def short(self) -> bool:
        return self.have < self.need


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    reason: str
    wait_seconds: int = 0
    target_index: int | None = None
    #: ``scale``: the canary's desired count; ``raise-primary``: the primary's, None when its
    #: desired count already covers the need.
    instances: int | None = None
    bounds: tuple[int, int] | None = None
    #: ``shift``: the canary's new share; a rollback's ``wait`` with 0: the weight is due but the
    #: endpoint is not InService (the rollback's first call tries it anyway).
    percent: int | None = None
    #: A rollback's view of the primary (``raise-primary``, and the weight move after it).
    primary: PrimaryCapacity | None = None
    #: ``wait``: for an endpoint that is not InService (``updating_since`` counts it).
    updating: bool = False
    #: What the operator is told (the SNS subject) when this decision ends the rollout, where it
    #: is not the decision's usual one (``timeout``: what the rollback waited for, how long).
    subject: str | None = None
    #: A stage move's endpoint config (``enter-shadow``, ``leave-shadow``).
    endpoint_config: str | None = None
    #: Fields the decision writes into the record besides its transition (the shadow stage's
    #: window, its comparison's verdict and figures).
    record: RolloutState | None = None
    #: ``enter-shadow``: the shadow variant's InitialInstanceCount in the config the move
    #: creates (``shadow_fleet``: the primary's load per instance when the stage starts).
    shadow_instances: int | None = None


def decide(
    state: RolloutState,
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
        return _decide_rolling_back(state, obs, rules, now)
    if status in TERMINAL_ENDPOINT_STATES:
        return Decision("abort", f"endpoint is {status}; rollout abandoned")
    if obs.firing:
        return Decision("rollback", f"alarm: {'; '.join(obs.firing)}")
    scaling = state.get("phase") == SCALING
    short = scaling and obs.canary_instances < state["target_instances"]
    if short:
        late = _capacity_deadline(state, obs, rules, now)
        if late is not None:
            return late
    if status != "InService":
        # While the canary is short of a step's instances, the capacity deadline governs.
        late = None if short else _updating_deadline(state, rules, now, status)
        return late or Decision(
            "wait",
            f"endpoint is {status}, not InService; alarms OK, no change",
            check,
            updating=not short,
        )
    changed = endpoint_changed(state, obs)
    if changed is not None:
        return Decision(
            "rollback",
            f"{changed} under the rollout (a deploy or the console changed the endpoint): the "
            "controller stops moving and rolls the canary back",
        )
    if scaling:
        return _decide_scaling(state, obs, rules, now)
    if state["step_index"] >= 0:
        judged = _judge_step(state, obs, rules, now, evidence)
        if judged is not None:
            return judged
    return _scale_for_next_step(state, obs, rules)


def _decide_rolling_back(state: RolloutState, obs: Observation, rules: Rules, now: int) -> Decision:
    """A ROLLING_BACK rollout: the canary's weight to 0 (the primary's capacity first), then,
    on an InService endpoint, the canary's scaling bounds restored."""
    check, status = rules.check_seconds, obs.endpoint_status
    if status in TERMINAL_ENDPOINT_STATES:
        return Decision("abort", f"endpoint is {status}; rollback cannot complete")
    if obs.canary_weight > 0:
        d = _rollback_weight(state, obs, rules, now)
        late = None
        if d.kind == "wait":
            late = rollback_overdue(state, rules, now, f"weight 0 (endpoint {status})")
        return late or d
    if status != "InService":
        what = f"InService after weight 0 (endpoint {status})"
        late = rollback_overdue(state, rules, now, what)
        return late or Decision("wait", f"rollback pending: endpoint is {status}", check)
    return Decision(
        "restore",
        "canary weight 0 on an InService endpoint; canary scaling bounds restored to "
        f"{rules.plan.canary_min}..{rules.plan.canary_max}",
        bounds=(rules.plan.canary_min, rules.plan.canary_max),
    )


def _decide_scaling(state: RolloutState, obs: Observation, rules: Rules, now: int) -> Decision:
    """The SCALING phase on an InService endpoint: capacity requested again while the canary is
    short of the target step's instances, then the weight shift (held while alarms lack data)."""
    steps, check = rules.steps, rules.check_seconds
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


def _judge_step(
    state: RolloutState,
    obs: Observation,
    rules: Rules,
    now: int,
    evidence: Callable[[int, int], Evidence],
) -> Decision | None:
    """The current step: still baking, or its evidence judged once the bake is over (rollback,
    hold, or complete at the last step). None: the step passed and the next one comes."""
    steps, check = rules.steps, rules.check_seconds
    index = state["step_index"]
    baked = now - state["step_started_at"]
    remaining = rules.bake_seconds - baked
    if remaining > 0:
        return Decision("bake", f"{steps[index]}% baking, {remaining}s left", min(remaining, check))
    verdict, why = judge(evidence(state["step_started_at"], now), rules.evidence)
    if verdict == "worse":
        return Decision("rollback", f"evidence: {why}")
    if verdict == "insufficient" or obs.no_data:
        why = why if verdict == "insufficient" else f"alarms without data: {', '.join(obs.no_data)}"
        if baked >= rules.bake_seconds + rules.evidence_timeout_seconds:
            return Decision("rollback", f"no evidence after the bake and its timeout: {why}")
        return Decision("hold", f"{steps[index]}% held, not enough evidence: {why}", check)
    if index == len(steps) - 1:
        return Decision("complete", f"canary baked at the last step ({why}); promote it")
    return None


def _scale_for_next_step(state: RolloutState, obs: Observation, rules: Rules) -> Decision:
    """The next step's canary instances, requested before its weight moves."""
    nxt = state["step_index"] + 1
    need = instances_for_step(
        rules.plan,
        nxt,
        primary_instances=obs.primary_instances,
        primary_weight=obs.primary_weight,
        canary_weight=obs.canary_weight,
    )
    return Decision(
        "scale",
        f"{rules.steps[nxt]}% next: canary to {need} instances (bounds {need}.."
        f"{rules.plan.steps[nxt].max_capacity}) before its weight moves",
        rules.check_seconds,
        target_index=nxt,
        instances=need,
        bounds=(need, rules.plan.steps[nxt].max_capacity),
    )


def _rollback_weight(state: RolloutState, obs: Observation, rules: Rules, now: int) -> Decision:
    """The canary still has weight: the primary's capacity first (:func:`_primary_first`), then
    weight 0, which SageMaker takes only on an InService endpoint."""
    check, status = rules.check_seconds, obs.endpoint_status
    primary = _primary_first(state, obs, rules, now)
    if isinstance(primary, Decision):
        return primary
    if status != "InService":
        why = f"rollback pending: endpoint is {status}"
        return Decision("wait", why, check, percent=0, primary=primary)
    why = f"canary weight is {obs.canary_weight:g}, setting 0"
    if primary is not None:
        why += f"; {primary.note}"
    return Decision("reapply", why, check, primary=primary)


def _primary_first(
    state: RolloutState, obs: Observation, rules: Rules, now: int
) -> Decision | PrimaryCapacity | None:
    """``raise-primary`` while the primary is short of its full share's instances and the wait is
    not over; otherwise what the weight move says of the primary (None: no capacity step).

    The need is measured once, at the first look (``primary_need``), and the deadline counts from
    the first request (``primary_requested_at``). Each tick of the wait asks again (bounds once,
    the desired count while it is below the need: SageMaker refuses it while Updating)."""
    timeout = rules.rollback_capacity_timeout_seconds
    if timeout is None:
        return None
    have = obs.primary_serving
    need = state.get("primary_need")
    if need is None:
        need = primary_instances_needed(
            rules.plan,
            primary_instances=obs.primary_instances,
            primary_weight=obs.primary_weight,
            canary_instances=obs.canary_instances,
            canary_weight=obs.canary_weight,
        )
    failed, since = state.get("primary_raise_failed"), state.get("primary_requested_at")
    if failed is not None:
        return PrimaryCapacity(need, have, (
            f"the primary's capacity could not be raised ({failed}): the canary's weight moves "
            f"anyway, the primary had {have} of the {need} instances it needed"
        ))  # fmt: skip
    if since is None and have >= need:
        return PrimaryCapacity(need, have, (
            f"the primary already had {have} instances, {need} needed for its full share: "
            "no capacity wait"
        ))  # fmt: skip
    waited = 0 if since is None else now - since
    if since is not None and have >= need and obs.endpoint_status == "InService":
        return PrimaryCapacity(need, have, (
            f"the primary is InService with {have} of the {need} instances it needed, "
            f"{waited}s after they were requested"
        ))  # fmt: skip
    if waited >= timeout:
        return PrimaryCapacity(need, have, (
            f"the primary had {have} of the {need} instances it needed {waited}s after they "
            f"were requested (rollback capacity timeout {timeout}s): the canary's weight moves "
            "anyway, availability first"
        ))  # fmt: skip
    left = timeout - waited
    again = "raised" if since is None else "asked for again"
    return Decision(
        "raise-primary",
        f"rollback: the primary has {have} of the {need} instances its full share needs; "
        f"capacity {again} (scalable-target minimum, desired count): the canary's weight moves "
        f"once they are InService, at the latest in {left}s",
        min(rules.check_seconds, left),
        instances=need if obs.primary_instances < need else None,
        primary=PrimaryCapacity(need, have, f"the primary has {have} of the {need} instances"),
    )


def _left(since: int | None, timeout: int | None, now: int) -> str:
    if since is None or timeout is None:
        return ""
    return f" (rollback in {max(0, since + timeout - now)}s without them)"


def _capacity_deadline(
    state: RolloutState, obs: Observation, rules: Rules, now: int
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


def _updating_deadline(state: RolloutState, rules: Rules, now: int, status: str) -> Decision | None:
    """Rollback once a RUNNING rollout has seen the endpoint not InService for
    ``updating_timeout_seconds`` in a row (``updating_since``: its first such tick)."""
    since, timeout = state.get("updating_since"), rules.updating_timeout_seconds
    if since is None or timeout is None or now - since < timeout:
        return None
    return Decision(
        "rollback",
        f"the endpoint stayed {status} for {now - since}s (updating timeout {timeout}s, "
        "rollout.updating_timeout_seconds): the rollout cannot move on while it is not InService",
    )


def rollback_overdue(
    state: RolloutState, rules: Rules, now: int, waiting_for: str
) -> Decision | None:
    """``timeout`` once a rollback has run ``rollback_timeout_seconds`` since it began
    (``rollback_started_at``) and is still waiting for ``waiting_for``: it ends FAILED, naming
    what it waited for and how long; the canary may still take traffic."""
    since, timeout = state.get("rollback_started_at"), rules.rollback_timeout_seconds
    if since is None or timeout is None or now - since < timeout:
        return None
    waited = now - since
    subject = f"canary rollback timed out: {waited}s waiting for {waiting_for}"
    return Decision(
        "timeout",
        f"rollback timed out: {waited}s waiting for {waiting_for} (rollback timeout {timeout}s: "
        "the primary's capacity wait and one updating wait); recorded FAILED, lock released. The "
        "canary may still take traffic: make canary-status, then make canary-rollback",
        subject=subject,
    )


def _held_without_data(
    state: RolloutState, obs: Observation, rules: Rules, now: int, move: str
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


def transition(state: RolloutState, d: Decision, now: int) -> RolloutState:
    """:func:`_transition`, and ``updating_since``: when the endpoint was first seen not
    InService by the wait going on now (:func:`_updating_deadline`); any other decision clears
    it."""
    since = state.get("updating_since")
    updating: RolloutState = {
        "updating_since": (now if since is None else since) if d.updating else None
    }
    return {**_transition(state, d, now), **updating, **(d.record or {})}


def _transition(state: RolloutState, d: Decision, now: int) -> RolloutState:
    """The fields a decision changes once its AWS call was accepted (Lambda and simulator).

    ``scaling_started_at`` is when the scaling phase towards a step began: a re-request of the same
    step keeps it (the capacity deadline counts from the first request). ``held_since`` is when the
    current hold began; any move forward clears it. ``canary_percent`` is the share the controller
    set (``canary_percent_before`` the one before it: :func:`endpoint_changed`). A rollback's
    ``raise-primary`` records the need and when capacity was first requested (the rollback
    capacity deadline counts from it); its weight move what it says of the primary
    (:func:`primary_record`)."""
    if d.kind == "scale":
        assert d.target_index is not None and d.instances is not None
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
        assert d.target_index is not None
        return {
            "phase": BAKING,
            "step_index": d.target_index,
            "step_started_at": now,
            "canary_percent": d.percent,
            "canary_percent_before": state.get("canary_percent"),
            "held_since": None,
        }
    if d.kind == "hold":
        since = state.get("held_since")
        return {"held_since": now if since is None else since}
    if d.kind == "raise-primary":
        assert d.primary is not None
        since = state.get("primary_requested_at")
        return {
            "primary_need": d.primary.need,
            "primary_requested_at": now if since is None else since,
        }
    if d.kind in ("reapply", "wait") and d.primary is not None:
        return primary_record(d.primary)
    if d.kind == "enter-shadow":
        return {"shadow_requested_at": state.get("shadow_requested_at") or now}
    if d.kind == "leave-shadow":
        return {
            "shadow_leave_requested_at": state.get("shadow_leave_requested_at") or now,
            "shadow_leaving": state["status"] == RUNNING or None,
        }
    ends = {
        "abort": FAILED,
        "timeout": FAILED,
        "complete": COMPLETED,
        "restore": ROLLED_BACK,
        "rollback": ROLLING_BACK,
    }
    if d.kind == "shadow-end":
        return {"status": state.get("shadow_end") or ROLLED_BACK}
    return {"status": ends[d.kind]} if d.kind in ends else {}


def primary_record(p: PrimaryCapacity) -> RolloutState:
    """The record's view of the primary when the canary's weight moves: ``primary_capacity`` (the
    sentence), ``primary_shortfall`` (``[had, needed]`` when short, the notification's subject
    names it)."""
    return {
        "primary_capacity": p.note,
        "primary_shortfall": [p.have, p.need] if p.short else None,
    }
