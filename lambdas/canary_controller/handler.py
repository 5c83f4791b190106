"""Canary rollout controller: walks the canary variant's traffic weight through configured steps.

One Lambda, four actions, each an event ``{"action": ..., "endpoint_name": ..., ...}``:

- ``start``    (operator, via ``make canary-start``): takes the per-endpoint lock, records the
  rollout and starts the Step Functions execution that drives it. Refused while another rollout
  of the same endpoint is RUNNING; the same ``rollout_id`` sent twice is a no-op.
- ``tick``     (the state machine, every ``check_interval`` or sooner when a bake ends): checks
  the endpoint is InService and every watched alarm is OK, then either rolls back, bakes on,
  moves to the next step, or completes at 100 %. Carries the ``seq`` it last saw: a re-delivered
  tick (Step Functions retry, duplicate event) has a stale ``seq`` and changes nothing.
- ``rollback`` (operator, or the state machine's catch-all): canary weight to 0 at once.
- ``status``   (operator): the recorded state, read-only.

State lives in one DynamoDB item per endpoint (key ``endpoint_name``). DynamoDB rather than an
SSM parameter or endpoint tags because the lock and the step counter need an atomic
compare-and-set (a conditional write), which neither SSM nor tags offer; operators read it with
``make canary-status`` or in the console. The item holds the rollout id, status, current step,
when it started and when the step started, the last decision and its reason, and a short history.

Weights: SageMaker weights are relative, so step ``p`` sets canary ``p`` and primary ``100 - p``;
rollback sets canary 0 and primary 100. Promotion is not automatic: at 100 % the canary carries
all traffic and the operator makes the canary's image the primary's in config and deploys
(README, "Canary rollout and the deploy smoke gate"), which also restores the configured
initial weights.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.exceptions import ClientError

RUNNING, COMPLETED, ROLLED_BACK, FAILED = "RUNNING", "COMPLETED", "ROLLED_BACK", "FAILED"
#: Answer to a tick from an execution whose rollout is no longer the endpoint's current one.
SUPERSEDED = "SUPERSEDED"
#: Endpoint states that end a rollout; any other non-InService state means "wait and look again".
TERMINAL_ENDPOINT_STATES = frozenset({"Failed", "OutOfService", "Deleting"})
HISTORY_LIMIT = 50
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$")
ACTIONS = ("start", "tick", "rollback", "status")


class EventError(ValueError):
    """The event is malformed or addresses the wrong endpoint/rollout; nothing was changed."""


class RolloutConflict(RuntimeError):
    """Another rollout holds the endpoint's lock, or the endpoint cannot take a rollout now."""


@dataclass(frozen=True)
class Settings:
    endpoint_name: str
    table_name: str
    topic_arn: str
    state_machine_arn: str
    alarm_names: tuple[str, ...]
    steps: tuple[int, ...]
    bake_seconds: int
    check_seconds: int
    primary_variant: str = "primary"
    canary_variant: str = "canary"

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ[str] = os.environ) -> Settings:
        return cls(
            endpoint_name=env["ENDPOINT_NAME"],
            table_name=env["TABLE_NAME"],
            topic_arn=env["TOPIC_ARN"],
            state_machine_arn=env.get("STATE_MACHINE_ARN", ""),
            alarm_names=tuple(json.loads(env["ALARM_NAMES"])),
            steps=tuple(int(s) for s in json.loads(env["STEPS_PERCENT"])),
            bake_seconds=int(env["BAKE_SECONDS"]),
            check_seconds=int(env["CHECK_SECONDS"]),
            primary_variant=env.get("PRIMARY_VARIANT", "primary"),
            canary_variant=env.get("CANARY_VARIANT", "canary"),
        )


def validate_event(event: Any, settings: Settings) -> dict[str, Any]:
    """Reject anything but a well-formed event for this function's endpoint, with the reason."""
    if not isinstance(event, dict):
        raise EventError(f"event must be a JSON object, got {type(event).__name__}")
    action = event.get("action")
    if action not in ACTIONS:
        raise EventError(f"'action' must be one of {', '.join(ACTIONS)}; got {action!r}")
    endpoint = event.get("endpoint_name")
    if endpoint != settings.endpoint_name:
        raise EventError(
            f"'endpoint_name' must be {settings.endpoint_name!r} (the endpoint this controller "
            f"manages); got {endpoint!r}"
        )
    if action in ("start", "tick"):
        rollout_id = event.get("rollout_id")
        if not isinstance(rollout_id, str) or not _ID.match(rollout_id):
            raise EventError(
                f"'rollout_id' must be 1-80 letters, digits, '-' or '_'; got {rollout_id!r}"
            )
    if action == "tick":
        seq = event.get("seq")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise EventError(f"'seq' must be a non-negative integer; got {seq!r}")
    for key in ("reason", "requested_by"):
        if key in event and not isinstance(event[key], str):
            raise EventError(f"'{key}' must be a string; got {event[key]!r}")
    return event


class Controller:
    def __init__(self, settings: Settings, *, clock: Any = time.time, **clients: Any) -> None:
        self.s = settings
        self.clock = clock
        self.sm = clients.get("sagemaker") or boto3.client("sagemaker")
        self.cw = clients.get("cloudwatch") or boto3.client("cloudwatch")
        self.sns = clients.get("sns") or boto3.client("sns")
        self.sfn = clients.get("stepfunctions") or boto3.client("stepfunctions")
        ddb = clients.get("dynamodb") or boto3.resource("dynamodb")
        self.table = ddb.Table(settings.table_name)

    # ------------------------------------------------------------------ state

    def load(self) -> dict[str, Any] | None:
        item = self.table.get_item(Key={"endpoint_name": self.s.endpoint_name}, ConsistentRead=True)
        return _plain(item.get("Item"))

    def _save(self, state: dict[str, Any], *, expect_seq: int | None) -> None:
        """Write ``state`` if nobody else moved it since ``expect_seq`` (None: only if unlocked)."""
        if expect_seq is None:
            cond = "attribute_not_exists(endpoint_name) OR #st <> :running"
            values: dict[str, Any] = {":running": RUNNING}
        else:
            cond = "#seq = :seq"
            values = {":seq": expect_seq}
        names = {"#st": "status"} if expect_seq is None else {"#seq": "seq"}
        self.table.put_item(
            Item=state,
            ConditionExpression=cond,
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def _decide(self, state: dict[str, Any], decision: str, reason: str) -> dict[str, Any]:
        """Record a decision; routine bake checks update ``last_*`` but stay out of the history."""
        now = int(self.clock())
        history = list(state.get("history", []))
        if decision != "bake":
            entry = {"at": now, "decision": decision, "reason": reason, "step": state["step_index"]}
            history = [*history, entry][-HISTORY_LIMIT:]
        return {
            **state,
            "seq": state["seq"] + 1,
            "updated_at": now,
            "last_decision": decision,
            "last_reason": reason,
            "history": history,
        }

    # ------------------------------------------------------------------ AWS reads and writes

    def endpoint_status(self) -> str:
        try:
            return str(
                self.sm.describe_endpoint(EndpointName=self.s.endpoint_name)["EndpointStatus"]
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("ValidationException", "ResourceNotFound"):
                return "NotFound"
            raise

    def alarms_firing(self) -> list[str]:
        """Names (with reasons) of watched alarms in ALARM; a missing alarm counts as firing."""
        if not self.s.alarm_names:
            return []
        found: dict[str, dict[str, Any]] = {}
        names = list(self.s.alarm_names)
        for i in range(0, len(names), 100):
            pages = self.cw.get_paginator("describe_alarms").paginate(
                AlarmNames=names[i : i + 100], AlarmTypes=["MetricAlarm", "CompositeAlarm"]
            )
            for page in pages:
                for alarm in page.get("MetricAlarms", []) + page.get("CompositeAlarms", []):
                    found[alarm["AlarmName"]] = alarm
        firing = []
        for name in names:
            alarm = found.get(name)
            if alarm is None:
                firing.append(f"{name} (alarm not found: cannot verify canary health)")
            elif alarm["StateValue"] == "ALARM":
                firing.append(f"{name} ({alarm.get('StateReason', 'in ALARM')})")
        return firing

    def set_canary_weight(self, percent: int) -> None:
        self.sm.update_endpoint_weights_and_capacities(
            EndpointName=self.s.endpoint_name,
            DesiredWeightsAndCapacities=[
                {"VariantName": self.s.canary_variant, "DesiredWeight": float(percent)},
                {"VariantName": self.s.primary_variant, "DesiredWeight": float(100 - percent)},
            ],
        )

    def notify(self, subject: str, state: dict[str, Any]) -> None:
        """Best effort: the decision is already applied and recorded; a failed publish is logged
        instead of failing the tick (which would make the state machine roll back again)."""
        message = {k: state.get(k) for k in _SUMMARY_KEYS}
        try:
            self.sns.publish(
                TopicArn=self.s.topic_arn,
                Subject=f"[{self.s.endpoint_name}] {subject}"[:100],
                Message=json.dumps(message, indent=2, default=str),
            )
        except ClientError as exc:
            print(f"notification to {self.s.topic_arn} failed: {exc}")

    # ------------------------------------------------------------------ actions

    def start(self, event: dict[str, Any]) -> dict[str, Any]:
        rollout_id = event["rollout_id"]
        current = self.load()
        if current and current["rollout_id"] == rollout_id:
            return self._result(current, duplicate=True)
        if current and current["status"] == RUNNING:
            raise RolloutConflict(
                f"rollout {current['rollout_id']!r} is already RUNNING on {self.s.endpoint_name} "
                f"(step {current['step_index'] + 1}/{len(current['steps'])}, started by "
                f"{current.get('requested_by', '?')}); wait for it or run make canary-rollback"
            )
        status = self.endpoint_status()
        if status != "InService":
            raise RolloutConflict(
                f"endpoint {self.s.endpoint_name} is {status}, not InService; start refused"
            )
        firing = self.alarms_firing()
        if firing:
            raise RolloutConflict(f"alarms already firing, start refused: {'; '.join(firing)}")
        now = int(self.clock())
        state = {
            "endpoint_name": self.s.endpoint_name,
            "rollout_id": rollout_id,
            "status": RUNNING,
            "steps": list(self.s.steps),
            "step_index": -1,
            "bake_seconds": self.s.bake_seconds,
            "started_at": now,
            "step_started_at": now,
            "requested_by": event.get("requested_by", "unknown"),
            "alarm_names": list(self.s.alarm_names),
            "seq": -1,
            "history": [],
        }
        state = self._decide(state, "start", "lock taken; first step on the next tick")
        try:
            self._save(state, expect_seq=None)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ConditionalCheckFailedException":
                raise RolloutConflict(
                    f"another rollout took the lock on {self.s.endpoint_name} just now"
                ) from None
            raise
        if self.s.state_machine_arn:
            self.sfn.start_execution(
                stateMachineArn=self.s.state_machine_arn,
                name=rollout_id,
                input=json.dumps(
                    {"endpoint_name": self.s.endpoint_name, "rollout_id": rollout_id, "seq": 0}
                ),
            )
        return self._result(state)

    def tick(self, event: dict[str, Any]) -> dict[str, Any]:
        state = self.load()
        if state is None:
            raise EventError(f"no rollout recorded for {self.s.endpoint_name}; nothing changed")
        if state["rollout_id"] != event["rollout_id"]:
            # A stale execution (its rollout was rolled back and a newer one started): it ends
            # without touching the newer rollout.
            return {
                "endpoint_name": self.s.endpoint_name,
                "rollout_id": event["rollout_id"],
                "status": SUPERSEDED,
                "seq": event["seq"],
                "done": True,
                "duplicate": False,
                "last_reason": f"superseded by rollout {state['rollout_id']!r}; nothing changed",
                "wait_seconds": 1,
            }
        if state["status"] != RUNNING:
            return self._result(state)
        if event["seq"] != state["seq"]:
            return self._result(state, duplicate=True)
        seq = state["seq"]
        endpoint = self.endpoint_status()
        if endpoint in TERMINAL_ENDPOINT_STATES or endpoint == "NotFound":
            state = self._decide(state, "abort", f"endpoint is {endpoint}; rollout abandoned")
            state["status"] = FAILED
            self._save(state, expect_seq=seq)
            self.notify("canary rollout abandoned", state)
            return self._result(state)
        if endpoint != "InService":
            state = self._decide(state, "wait", f"endpoint is {endpoint}, not InService; no change")
            self._save(state, expect_seq=seq)
            return self._result(state, wait=self.s.check_seconds)
        firing = self.alarms_firing()
        if firing:
            return self._rollback(state, f"alarm: {'; '.join(firing)}", expect_seq=seq)
        steps, index = state["steps"], state["step_index"]
        baked = int(self.clock()) - state["step_started_at"]
        remaining = state["bake_seconds"] - baked
        if index >= 0 and remaining > 0:
            state = self._decide(state, "bake", f"{steps[index]}% baking, {remaining}s left")
            self._save(state, expect_seq=seq)
            return self._result(state, wait=min(remaining, self.s.check_seconds))
        if index == len(steps) - 1:
            state = self._decide(state, "complete", "canary baked at the last step; promote it")
            state["status"] = COMPLETED
            self._save(state, expect_seq=seq)
            self.notify("canary rollout complete: promote the canary", state)
            return self._result(state)
        percent = steps[index + 1]
        self.set_canary_weight(percent)
        state = self._decide(state, "advance", f"canary weight set to {percent}%, alarms OK")
        state.update(step_index=index + 1, step_started_at=int(self.clock()))
        self._save(state, expect_seq=seq)
        return self._result(state, wait=min(state["bake_seconds"], self.s.check_seconds))

    def rollback(self, event: dict[str, Any]) -> dict[str, Any]:
        reason = event.get("reason") or "operator requested rollback"
        by = event.get("requested_by", "unknown")
        state = self.load()
        if state is None:
            state = {
                "endpoint_name": self.s.endpoint_name,
                "rollout_id": "manual",
                "status": ROLLED_BACK,
                "steps": list(self.s.steps),
                "step_index": -1,
                "bake_seconds": self.s.bake_seconds,
                "started_at": int(self.clock()),
                "step_started_at": int(self.clock()),
                "seq": 0,
                "history": [],
            }
            self.set_canary_weight(0)
            state = self._decide(state, "rollback", f"{reason} (by {by})")
            self._save(state, expect_seq=None)
            self.notify("canary rolled back", state)
            return self._result(state)
        return self._rollback(state, f"{reason} (by {by})", expect_seq=state["seq"])

    def _rollback(self, state: dict[str, Any], reason: str, *, expect_seq: int) -> dict[str, Any]:
        self.set_canary_weight(0)
        state = self._decide(state, "rollback", reason)
        state["status"] = ROLLED_BACK
        self._save(state, expect_seq=expect_seq)
        self.notify("canary rolled back", state)
        return self._result(state)

    def _result(
        self, state: dict[str, Any], *, duplicate: bool = False, wait: int = 0
    ) -> dict[str, Any]:
        """What the state machine and the CLI read: summary plus loop control."""
        out = {k: state.get(k) for k in _SUMMARY_KEYS}
        index = state["step_index"]
        out["current_percent"] = state["steps"][index] if index >= 0 else 0
        out["duplicate"] = duplicate
        out["done"] = state["status"] != RUNNING
        out["wait_seconds"] = max(1, wait or self.s.check_seconds)
        return out


_SUMMARY_KEYS = (
    "endpoint_name",
    "rollout_id",
    "status",
    "seq",
    "steps",
    "step_index",
    "started_at",
    "step_started_at",
    "requested_by",
    "last_decision",
    "last_reason",
    "history",
)


def _plain(value: Any) -> Any:
    """DynamoDB returns Decimal for numbers; turn them back into ints for JSON and comparisons."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if type(value).__name__ == "Decimal":
        return int(value)
    return value


def handler(
    event: Any, context: Any = None, controller: Controller | None = None
) -> dict[str, Any]:
    settings = controller.s if controller else Settings.from_env()
    event = validate_event(event, settings)
    ctl = controller or Controller(settings)
    if event["action"] == "status":
        state = ctl.load()
        return (
            ctl._result(state)
            if state
            else {"endpoint_name": settings.endpoint_name, "status": None}
        )
    action: Any = getattr(ctl, event["action"])
    result: dict[str, Any] = action(event)
    print(
        json.dumps(
            {
                k: result.get(k)
                for k in ("rollout_id", "status", "seq", "last_decision", "last_reason")
            }
        )
    )
    return result
