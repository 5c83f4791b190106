"""Helpers for the tests of how canary rollouts end (issue 20 item 3): the controller's settings
changed for one test, the SNS messages as sent (subject included), the EventBridge event of an
execution that ended, and a stand-in for the rollout state machine's own retries and catch-all.

The state machine's behaviour is the one built in stacks/constructs/rollout_state_machine.py:
a Tick is retried ``TICK_RETRIES`` times (20 s, then doubled), then RollbackOnError is called and
retried ``ROLLBACK_RETRIES`` times (30 s, then doubled); if that still fails the execution FAILS,
and Step Functions sends "Step Functions Execution Status Change" (status FAILED) to EventBridge,
whose rule invokes the controller with ``execution-ended``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from lambdas.canary_controller import names
from stacks.constructs.rollout_state_machine import ROLLBACK_RETRIES, TICK_RETRIES
from tests.lambdas.conftest import ENDPOINT, World


def set_rules(world: World, **changes: Any) -> None:
    """The controller's rules with ``changes`` (e.g. a capacity timeout) for this test."""
    s = world.controller.s
    world.controller.s = dataclasses.replace(s, rules=dataclasses.replace(s.rules, **changes))


def record_sent(world: World) -> list[dict[str, Any]]:
    """Every SNS message the controller publishes from now on: its Subject and its body."""
    real, sent = world.controller.sns.publish, []

    def publish(**kw: Any) -> Any:
        sent.append({"subject": kw["Subject"], **json.loads(kw["Message"])})
        return real(**kw)

    world.controller.sns.publish = publish
    return sent


def execution_arn(world: World, name: str) -> str:
    return world.state_machine_arn.replace(":stateMachine:", ":execution:") + f":{name}"


def execution_ended(world: World, name: str, status: str = "FAILED") -> dict[str, Any]:
    """What the EventBridge rule sends for one execution's status change (its input transformer)."""
    return world.run(
        {
            "action": names.EXECUTION_ENDED,
            "endpoint_name": ENDPOINT,
            "execution_arn": execution_arn(world, name),
            "execution_name": name,
            "execution_status": status,
        }
    )


def record(world: World) -> dict[str, Any]:
    state = world.controller.load()
    assert state is not None
    return state


def run_execution(world: World, name: str, result: dict[str, Any], limit: int = 50) -> str:
    """One execution of the rollout state machine from ``result`` (the answer that started or
    last drove it): ticks, each retried, then the catch-all rollback, each retried; the clock
    moves by every wait and retry interval. Returns how it ended: "SUCCEEDED", or "FAILED" once
    the rollback call itself failed on every attempt (the EventBridge event is the caller's)."""
    rollout_id = result["rollout_id"]
    for _ in range(limit):
        if result["done"]:
            return "SUCCEEDED"
        world.clock.now += result["wait_seconds"]
        event = {"action": names.TICK, "endpoint_name": ENDPOINT, "rollout_id": rollout_id,
                 "seq": result["seq"]}  # fmt: skip
        answer, cause = _attempts(world, event, TICK_RETRIES, 20)
        if answer is None:
            event = {"action": names.ROLLBACK, "endpoint_name": ENDPOINT,
                     "rollout_id": rollout_id, "requested_by": "state-machine",
                     "reason": f"controller error, rolled back: {cause}"}  # fmt: skip
            answer, _ = _attempts(world, event, ROLLBACK_RETRIES, 30)
            if answer is None:
                return "FAILED"
        result = answer
    raise AssertionError(f"execution {name} still looping after {limit} iterations: {result}")


def _attempts(
    world: World, event: dict[str, Any], retries: int, interval: int
) -> tuple[dict[str, Any] | None, str]:
    cause = ""
    for attempt in range(retries + 1):
        try:
            return world.run(event), ""
        except Exception as exc:  # what the Lambda reports as a task failure
            cause = f"{type(exc).__name__}: {exc}"
            if attempt < retries:
                world.clock.now += interval * 2**attempt
    return None, cause
