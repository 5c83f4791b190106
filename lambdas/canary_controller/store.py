"""The rollout's record: one DynamoDB item per endpoint, written only by conditional writes.

DynamoDB rather than an SSM parameter or endpoint tags because the lock and the step counter need
an atomic compare-and-set (a conditional write), which neither SSM nor tags offer.
"""

from __future__ import annotations

from typing import Any

from . import rules as r
from .state import HistoryEntry, Intent, RecordedDecision, RolloutState

HISTORY_LIMIT = 50
#: Answer to a tick or rollback from an execution whose rollout is no longer the current one.
SUPERSEDED = r.names.SUPERSEDED


def save(table: Any, state: RolloutState, *, expect_seq: int | None) -> None:
    """Write ``state`` if nobody else moved it since ``expect_seq`` (None: only if unlocked)."""
    if expect_seq is None:
        cond = "attribute_not_exists(endpoint_name) OR NOT (#st IN (:running, :rolling))"
        names = {"#st": "status"}
        values: dict[str, Any] = {":running": r.RUNNING, ":rolling": r.ROLLING_BACK}
    else:
        cond, names, values = "#seq = :seq", {"#seq": "seq"}, {":seq": expect_seq}
    table.put_item(
        Item=state,
        ConditionExpression=cond,
        ExpressionAttributeNames=names,
        ExpressionAttributeValues=values,
    )


def record(state: RolloutState, decision: RecordedDecision, reason: str, now: int) -> RolloutState:
    """The next version of ``state`` with a decision; routine checks (and a rollback's repeated
    requests for the primary's capacity) stay out of the history."""
    history = list(state.get("history", []))
    routine = ("bake", "wait", "hold", "raise-primary")
    if decision not in routine or decision != state.get("last_decision"):
        entry: HistoryEntry = {
            "at": now,
            "decision": decision,
            "reason": reason,
            "step": state["step_index"],
        }
        history = [*history, entry][-HISTORY_LIMIT:]
    return {
        **state,
        "seq": state["seq"] + 1,
        "updated_at": now,
        "last_decision": decision,
        "last_reason": reason,
        "history": history,
    }


def handed_on(state: RolloutState, execution: str, reason: str, now: int) -> RolloutState:
    """The next version of ``state`` driven by the execution named ``execution``: its history
    says so, its last decision (what the rollout is doing) stays."""
    entry: HistoryEntry = {
        "at": now,
        "decision": "execution",
        "reason": reason,
        "step": state["step_index"],
    }
    return {
        **state,
        "seq": state["seq"] + 1,
        "updated_at": now,
        "execution": execution,
        "history": [*state.get("history", []), entry][-HISTORY_LIMIT:],
    }


def intending(state: RolloutState, intent: Intent, now: int) -> RolloutState:
    """The next version of ``state`` with ``intent``: what the controller is about to ask AWS
    (``rules.intent``), written before it asks. Its last decision and history stay: the intent
    becomes a decision only once the call was made and recorded (or, after a tick that died in
    between, once the next tick finds it landed: ``rules.intent_landed``)."""
    return {**state, "seq": state["seq"] + 1, "updated_at": now, "intent": intent}


def new_state(
    *,
    endpoint: str,
    rollout_id: str,
    status: r.names.RolloutStatus,
    by: str,
    rules: r.Rules,
    alarms: list[str],
    now: int,
    execution: str | None = None,
    endpoint_config_name: str | None = None,
    canary_percent: int | None = None,
) -> RolloutState:
    """A new rollout's record. ``execution``: the name of the state machine execution that drives
    it (a late event from any other is ignored); ``endpoint_config_name`` and ``canary_percent``:
    the endpoint as the rollout found it (``rules.endpoint_changed``)."""
    return {
        "endpoint_name": endpoint,
        "rollout_id": rollout_id,
        "status": status,
        "execution": execution,
        "endpoint_config_name": endpoint_config_name,
        "canary_percent": canary_percent,
        "steps": list(rules.steps),
        "step_index": -1,
        "phase": r.BAKING,
        "bake_seconds": rules.bake_seconds,
        "started_at": now,
        "step_started_at": now,
        "requested_by": by,
        "alarm_names": alarms,
        "seq": -1,
        "refusals": 0,
        "history": [],
    }


def summary(
    state: RolloutState, *, check_seconds: int, duplicate: bool = False, wait: int = 0
) -> dict[str, Any]:
    """What the state machine and the CLI read: summary plus loop control."""
    out = {k: state.get(k) for k in SUMMARY_KEYS}
    index = state["step_index"]
    out["current_percent"] = state["steps"][index] if index >= 0 else 0
    out["duplicate"] = duplicate
    out["done"] = state["status"] not in r.LOCKED
    out["wait_seconds"] = max(1, wait or check_seconds)
    return out


def superseded(endpoint: str, event: dict[str, Any], state: RolloutState | None) -> dict[str, Any]:
    """A stale execution (its rollout ended and a newer one started) ends, changing nothing."""
    current = state["rollout_id"] if state else None
    return {
        "endpoint_name": endpoint,
        "rollout_id": event.get("rollout_id"),
        "status": SUPERSEDED,
        "seq": event.get("seq", 0),
        "done": True,
        "duplicate": False,
        "last_reason": f"superseded by rollout {current!r}; nothing changed",
        "wait_seconds": 1,
    }


SUMMARY_KEYS = (
    "endpoint_name",
    "rollout_id",
    "status",
    "seq",
    "steps",
    "step_index",
    "phase",
    "target_instances",
    "scaling_started_at",
    "held_since",
    "canary_percent",
    "endpoint_config_name",
    "execution",
    "started_at",
    "step_started_at",
    "requested_by",
    "last_decision",
    "last_reason",
    "rollback_reason",
    "primary_capacity",
    "intent",
    "stage",
    "shadow_outcome",
    "shadow_evidence",
    "shadow_fleet",
    "shadow_ground",
    "shadow_probes",
    "history",
)


def plain(value: Any) -> Any:
    """DynamoDB returns Decimal for numbers; turn them back into ints for JSON and comparisons."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if type(value).__name__ == "Decimal":
        return int(value)
    return value
