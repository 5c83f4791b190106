"""The controller's settings (from the Lambda environment) and event validation."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

from . import rules as r

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$")
#: A Step Functions execution name (StartExecution ``name``: 1-80 characters).
_EXECUTION = re.compile(r"^\S{1,80}$")
ACTIONS = ("start", r.names.TICK, r.names.ROLLBACK, "status", r.names.CONTINUE,
           r.names.EXECUTION_ENDED)  # fmt: skip


class EventError(ValueError):
    """The event is malformed or addresses the wrong endpoint/rollout; nothing was changed."""


class RolloutConflict(RuntimeError):
    """Another rollout holds the endpoint's lock, or the endpoint cannot take a rollout now."""


class StartFailed(RuntimeError):
    """The state machine could not be started; the lock was released (retry the same id)."""


@dataclass(frozen=True)
class Settings:
    endpoint_name: str
    table_name: str
    topic_arn: str
    state_machine_arn: str
    alarm_names: tuple[str, ...]
    rules: r.Rules
    primary_variant: str = "primary"
    canary_variant: str = "canary"

    @property
    def steps(self) -> tuple[int, ...]:
        return self.rules.steps

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ[str] = os.environ) -> Settings:
        rules = r.Rules(
            steps=tuple(int(s) for s in json.loads(env["STEPS_PERCENT"])),
            bake_seconds=int(env["BAKE_SECONDS"]),
            check_seconds=int(env["CHECK_SECONDS"]),
            evidence=r.EvidenceRules(
                min_canary_invocations=int(env["MIN_CANARY_INVOCATIONS"]),
                max_error_rate_increase_percent=float(env["MAX_ERROR_RATE_INCREASE_PERCENT"]),
            ),
            evidence_timeout_seconds=int(env["EVIDENCE_TIMEOUT_SECONDS"]),
            plan=r.CapacityPlan.from_json(env["CAPACITY_PLAN"]),
            capacity_timeout_seconds=(
                int(env["CAPACITY_TIMEOUT_SECONDS"]) if "CAPACITY_TIMEOUT_SECONDS" in env else None
            ),
            rollback_capacity_timeout_seconds=(
                int(env["ROLLBACK_CAPACITY_TIMEOUT_SECONDS"])
                if "ROLLBACK_CAPACITY_TIMEOUT_SECONDS" in env
                else None
            ),
            updating_timeout_seconds=(
                int(env["UPDATING_TIMEOUT_SECONDS"]) if "UPDATING_TIMEOUT_SECONDS" in env else None
            ),
        )
        return cls(
            endpoint_name=env["ENDPOINT_NAME"],
            table_name=env["TABLE_NAME"],
            topic_arn=env["TOPIC_ARN"],
            state_machine_arn=env.get("STATE_MACHINE_ARN", ""),
            alarm_names=tuple(json.loads(env["ALARM_NAMES"])),
            rules=rules,
            primary_variant=env.get("PRIMARY_VARIANT", "primary"),
            canary_variant=env.get("CANARY_VARIANT", "canary"),
        )


#: Longest free text an event may carry: it lands in the record (a DynamoDB item, 400 KB at most
#: with its history) and in SNS subjects and bodies. ``requested_by`` is what the operator tools
#: send (the caller's STS identity ARN, tools/canary.py): a direct Lambda Invoke carries no
#: caller identity the function could read instead (its context's ``identity`` is Amazon
#: Cognito's only, Lambda developer guide, "Lambda context object in Python").
TEXT_LIMITS = {"reason": 500, "requested_by": 256}


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
    rollout_id = event.get("rollout_id")
    if (action in ("start", r.names.TICK, r.names.CONTINUE) or rollout_id is not None) and (
        not isinstance(rollout_id, str) or not _ID.fullmatch(rollout_id)
    ):
        raise EventError(
            f"'rollout_id' must be 1-80 letters, digits, '-' or '_'; got {rollout_id!r}"
        )
    counters = {"seq": action in (r.names.TICK, r.names.CONTINUE), "iteration": False}
    for key, required in counters.items():
        value = event.get(key)
        if (required or key in event) and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            raise EventError(f"'{key}' must be a non-negative integer; got {value!r}")
    if action in (r.names.CONTINUE, r.names.EXECUTION_ENDED):
        name = event.get("execution_name")
        if not isinstance(name, str) or not _EXECUTION.fullmatch(name):
            raise EventError(f"'execution_name' must be an execution's name; got {name!r}")
    if action == r.names.EXECUTION_ENDED:
        status = event.get("execution_status")
        if status not in r.names.EXECUTION_ENDED_STATUSES:
            raise EventError(
                f"'execution_status' must be one of {', '.join(r.names.EXECUTION_ENDED_STATUSES)}"
                f"; got {status!r}"
            )
    for key, limit in TEXT_LIMITS.items():
        if key not in event:
            continue
        value = event[key]
        if not isinstance(value, str):
            raise EventError(f"'{key}' must be a string; got {value!r}")
        if len(value) > limit:
            raise EventError(f"'{key}' must be at most {limit} characters; got {len(value)}")
        if any(ch < " " or ch == "\x7f" for ch in value):
            raise EventError(f"'{key}' must be one line without control characters; got {value!r}")
    return event
