"""The controller's settings (from the Lambda environment) and event validation."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any

try:  # tests, stacks and the simulator import the package; in Lambda this directory is the root
    from lambdas.canary_controller import rules as r
except ImportError:  # pragma: no cover - the Lambda runtime
    import rules as r  # type: ignore[no-redef]

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$")
ACTIONS = ("start", "tick", "rollback", "status")


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
    if (action in ("start", "tick") or rollout_id is not None) and (
        not isinstance(rollout_id, str) or not _ID.match(rollout_id)
    ):
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
