"""The rollout's record as types: the DynamoDB item (``store.py``), one per endpoint, and the
decisions written into it.

Types only: at run time the record is the plain dict it always was (DynamoDB gives it back as
one, ``store.plain``), so its shape in DynamoDB, in the notifications and in the state machine's
input is unchanged. :class:`RolloutState` names every key the controller reads or writes with
its type; none is required by the type (``total=False``): ``store.new_state`` writes the ones
every record has, the others come with the decisions that need them, and partial versions
(``rules.transition``'s changes) share the type.
"""

from __future__ import annotations

from typing import Literal, TypedDict

from .names import RolloutStatus

#: What ``rules.decide`` answers (``rules.Decision.kind``); ``timeout`` is a rollback past its
#: deadline.
DecisionKind = Literal[
    "abort", "rollback", "wait", "bake", "hold", "scale", "shift", "complete", "reapply",
    "restore", "raise-primary", "timeout",
    # the shadow stage (shadow_stage.py): UpdateEndpoint to the shadow config and back, the
    # canary stage begun, a release ended in the shadow stage
    "enter-shadow", "leave-shadow", "canary-stage", "shadow-end",
]  # fmt: skip
#: A record's ``last_decision``: a decision of the rules, or the controller's own ``start`` (the
#: lock taken) and ``start-failed`` (StartExecution failed, the lock released).
RecordedDecision = DecisionKind | Literal["start", "start-failed"]
#: A history entry's ``decision``: a recorded decision, or ``execution`` (another execution took
#: over driving the rollout, ``store.handed_on``).
HistoryDecision = RecordedDecision | Literal["execution"]
#: Where a RUNNING rollout is: baking at ``step_index``, or scaling the canary towards
#: ``target_index`` before its weight moves (``rules.SCALING``, ``rules.BAKING``).
Phase = Literal["scaling", "baking"]
#: A rollout's stage: the shadow stage (shadow_stage.py) before the canary's steps, or the canary.
Stage = Literal["shadow", "canary"]


class HistoryEntry(TypedDict):
    at: int
    decision: HistoryDecision
    reason: str
    step: int


class Intent(TypedDict):
    """What a tick is about to ask AWS (``rules.intent``), written before it asks."""

    decision: DecisionKind
    reason: str
    wait_seconds: int
    target_index: int | None
    percent: int | None
    instances: int | None
    bounds: list[int] | None
    endpoint_config_name: str | None
    #: ``enter-shadow``/``leave-shadow``: the endpoint config UpdateEndpoint is asked to move to.
    target_config: str | None
    at: int


class PrimaryBounds(TypedDict):
    """The primary's scalable-target bounds around a rollback's raise (``[min, max]`` lists):
    found before it (None: no scalable target) and set by it (None: nothing registered)."""

    before: list[int] | None
    set: list[int] | None


class RolloutState(TypedDict, total=False):
    """The record: one DynamoDB item per endpoint, keyed by ``endpoint_name``."""

    # Written by store.new_state: every record has these.
    endpoint_name: str
    rollout_id: str
    status: RolloutStatus
    #: The name of the execution that drives the rollout.
    execution: str | None
    #: The endpoint as the rollout found it, then the canary share the controller last set.
    endpoint_config_name: str | None
    canary_percent: int | None
    steps: list[int]
    step_index: int
    phase: Phase
    bake_seconds: int
    started_at: int
    step_started_at: int
    requested_by: str
    alarm_names: list[str]
    #: The conditional writes' counter (``store.save``).
    seq: int
    refusals: int
    history: list[HistoryEntry]
    # store.record: every decision.
    updated_at: int
    last_decision: RecordedDecision
    last_reason: str
    # store.intending: a step forward's calls, before they are made (None once recorded).
    intent: Intent | None
    # rules.transition: the scaling phase, holds, waits.
    target_index: int
    target_instances: int
    scaling_started_at: int
    held_since: int | None
    updating_since: int | None
    canary_percent_before: int | None
    # A rollback (decisions.py, rules.transition, rules.primary_record).
    rollback_reason: str
    rollback_started_at: int
    primary_need: int
    primary_requested_at: int
    primary_bounds: PrimaryBounds
    primary_raise_failed: str
    primary_capacity: str
    #: ``[had, needed]`` when the primary was short of instances as the weight moved.
    primary_shortfall: list[int] | None
    # handler.py: executions of the rollout that ended with its lock held.
    lost_executions: int
    # The shadow stage (shadow_stage.py). ``stage`` is absent in records without one (canary).
    stage: Stage
    #: The endpoint config the rollout found (the canary stage's) and the shadow stage's.
    canary_config_name: str | None
    shadow_config_name: str
    shadow_requested_at: int
    #: When the endpoint was first seen InService on the shadow config: the comparison's window.
    shadow_entered_at: int
    shadow_next_compare_at: int
    shadow_compared_at: int
    #: The last comparison: pass, fail, insufficient or unreadable, and its figures per adapter.
    shadow_outcome: str
    shadow_evidence: list[str]
    #: Leaving for the canary stage (a pass); a release ending in the stage is ROLLING_BACK.
    shadow_leaving: bool | None
    shadow_leave_requested_at: int
    #: The status a release ended in the shadow stage takes (FAILED; otherwise ROLLED_BACK).
    shadow_end: RolloutStatus
    #: The shadow variant's count and why (shadow_fleet.py: the primary's load per instance when
    #: the stage starts, set in the config the stage enters).
    shadow_fleet: str
    #: What the shadow stage stood on when it was checked (shadow_stage.Ground): capture, both
    #: variants' capture objects and CloudWatch invocations and error rates.
    shadow_ground: str
    #: When the stage's probes were sent (their ids derive from it: ``probes.probe_ids``), and
    #: what became of them (answered, refused, unanswered per kind).
    shadow_probes_sent_at: int
    shadow_probes: str
