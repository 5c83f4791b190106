"""The controller's settings (from the Lambda environment) and event validation.

The environment is a contract between the construct (stacks/constructs/canary_controller.py),
which sets it, and :meth:`Settings.from_env`, which reads it: :class:`EnvVar` spells each variable
once for both, with which the function also runs without (:data:`ENV_DEFAULTS`,
:data:`ENV_OPTIONAL_DEADLINES`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from . import rules as r
from .shadow_stage import ShadowRules

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


class EnvVar(StrEnum):
    """The controller's environment variables, in the order the construct sets them (every one,
    :func:`lambda_environment`). Numbers are decimal strings; the alarm names and the steps are
    JSON lists, the capacity plan JSON (``rules.CapacityPlan.to_json``)."""

    ENDPOINT_NAME = "ENDPOINT_NAME"
    TABLE_NAME = "TABLE_NAME"
    TOPIC_ARN = "TOPIC_ARN"
    STATE_MACHINE_ARN = "STATE_MACHINE_ARN"
    ALARM_NAMES = "ALARM_NAMES"
    STEPS_PERCENT = "STEPS_PERCENT"
    BAKE_SECONDS = "BAKE_SECONDS"
    CHECK_SECONDS = "CHECK_SECONDS"
    MIN_CANARY_INVOCATIONS = "MIN_CANARY_INVOCATIONS"
    MAX_ERROR_RATE_INCREASE_PERCENT = "MAX_ERROR_RATE_INCREASE_PERCENT"
    EVIDENCE_TIMEOUT_SECONDS = "EVIDENCE_TIMEOUT_SECONDS"
    CAPACITY_TIMEOUT_SECONDS = "CAPACITY_TIMEOUT_SECONDS"
    ROLLBACK_CAPACITY_TIMEOUT_SECONDS = "ROLLBACK_CAPACITY_TIMEOUT_SECONDS"
    UPDATING_TIMEOUT_SECONDS = "UPDATING_TIMEOUT_SECONDS"
    CAPACITY_PLAN = "CAPACITY_PLAN"
    PRIMARY_VARIANT = "PRIMARY_VARIANT"
    CANARY_VARIANT = "CANARY_VARIANT"
    #: The shadow stage (``shadow_stage.ShadowRules.to_json``); empty: rollouts have none.
    SHADOW_STAGE = "SHADOW_STAGE"


#: Variables the function also runs without, and the value it takes then. A deployed function
#: gets every variable; these (and the deadlines below) may be left out of the environments the
#: tests build. Without STATE_MACHINE_ARN a start drives no execution.
ENV_DEFAULTS: Mapping[EnvVar, str] = {
    EnvVar.STATE_MACHINE_ARN: "",
    EnvVar.PRIMARY_VARIANT: "primary",
    EnvVar.CANARY_VARIANT: "canary",
    EnvVar.SHADOW_STAGE: "",
}
#: Deadlines the function also runs without: no such deadline (``rules.Rules``' None).
ENV_OPTIONAL_DEADLINES: tuple[EnvVar, ...] = (
    EnvVar.CAPACITY_TIMEOUT_SECONDS,
    EnvVar.ROLLBACK_CAPACITY_TIMEOUT_SECONDS,
    EnvVar.UPDATING_TIMEOUT_SECONDS,
)
#: Every other variable: :meth:`Settings.from_env` raises KeyError naming the one missing.
ENV_REQUIRED: tuple[EnvVar, ...] = tuple(
    key for key in EnvVar if key not in ENV_DEFAULTS and key not in ENV_OPTIONAL_DEADLINES
)


def lambda_environment(values: Mapping[EnvVar, str]) -> dict[str, str]:
    """The function's environment as the construct sets it: every :class:`EnvVar` variable, the
    optional ones too, by name and in :class:`EnvVar`'s order. Raises ValueError naming any that
    ``values`` leaves out."""
    missing = [key.value for key in EnvVar if key not in values]
    if missing:
        raise ValueError(f"the canary controller's environment lacks {', '.join(missing)}")
    return {key.value: values[key] for key in EnvVar}


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
    #: ``rollout.shadow`` (None: rollouts start with the canary).
    shadow: ShadowRules | None = None

    @property
    def steps(self) -> tuple[int, ...]:
        return self.rules.steps

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Settings:
        """The settings of the environment :class:`EnvVar` describes (module docstring)."""

        def required(key: EnvVar) -> str:
            return env[key.value]

        def or_default(key: EnvVar) -> str:
            return env.get(key.value, ENV_DEFAULTS[key])

        def deadline(key: EnvVar) -> int | None:
            return int(env[key.value]) if key.value in env else None

        rules = r.Rules(
            steps=tuple(int(s) for s in json.loads(required(EnvVar.STEPS_PERCENT))),
            bake_seconds=int(required(EnvVar.BAKE_SECONDS)),
            check_seconds=int(required(EnvVar.CHECK_SECONDS)),
            evidence=r.EvidenceRules(
                min_canary_invocations=int(required(EnvVar.MIN_CANARY_INVOCATIONS)),
                max_error_rate_increase_percent=float(
                    required(EnvVar.MAX_ERROR_RATE_INCREASE_PERCENT)
                ),
            ),
            evidence_timeout_seconds=int(required(EnvVar.EVIDENCE_TIMEOUT_SECONDS)),
            plan=r.CapacityPlan.from_json(required(EnvVar.CAPACITY_PLAN)),
            capacity_timeout_seconds=deadline(EnvVar.CAPACITY_TIMEOUT_SECONDS),
            rollback_capacity_timeout_seconds=deadline(EnvVar.ROLLBACK_CAPACITY_TIMEOUT_SECONDS),
            updating_timeout_seconds=deadline(EnvVar.UPDATING_TIMEOUT_SECONDS),
        )
        return cls(
            endpoint_name=required(EnvVar.ENDPOINT_NAME),
            table_name=required(EnvVar.TABLE_NAME),
            topic_arn=required(EnvVar.TOPIC_ARN),
            state_machine_arn=or_default(EnvVar.STATE_MACHINE_ARN),
            alarm_names=tuple(json.loads(required(EnvVar.ALARM_NAMES))),
            rules=rules,
            primary_variant=or_default(EnvVar.PRIMARY_VARIANT),
            canary_variant=or_default(EnvVar.CANARY_VARIANT),
            shadow=ShadowRules.from_json(shadow)
            if (shadow := or_default(EnvVar.SHADOW_STAGE))
            else None,
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
