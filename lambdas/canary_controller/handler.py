"""Canary rollout controller: walks the canary variant's traffic weight through configured steps.

One Lambda, four actions, each an event ``{"action": ..., "endpoint_name": ..., ...}``:

- ``start``    (operator, ``make canary-start``): takes the per-endpoint lock and starts the
  Step Functions execution. Refused while another rollout holds the lock; the same
  ``rollout_id`` twice is a no-op. A failed StartExecution releases the lock (FAILED, notified):
  send the same ``rollout_id`` again.
- ``tick``     (the state machine, every ``check_interval`` or sooner when a bake ends): observes
  the endpoint and the alarms and applies the decision of :func:`rules.decide` (capacity first,
  weight second; evidence before every step forward). A re-delivered tick has a stale ``seq``
  and changes nothing but learns the current ``seq``.
- ``rollback`` (operator, or the state machine's catch-all naming its ``rollout_id``): records
  ROLLING_BACK before acting (a lost write is retried), then weight 0 until DescribeEndpoint
  shows it, then the canary's bounds (``rules.decide``). A stale ``rollout_id`` changes nothing.
- ``status``   (operator): the recorded state, read-only.

State: one DynamoDB item per endpoint (``store.py``). Weights are relative: step ``p`` sets
canary ``p`` and primary ``100 - p``. Every rollout ends COMPLETED, ROLLED_BACK or FAILED with an
SNS notification, each of which releases the lock. Promotion is a config change and a deploy.

The actions are here; the decisions applied (steps forward, rollback steps, refusals) are in
``decisions.py``, the record and the AWS calls in ``controller_io.py``.
"""

from __future__ import annotations

import json
from typing import Any

try:  # tests, stacks and the simulator import the package; in Lambda this directory is the root
    from lambdas.canary_controller import aws, store
    from lambdas.canary_controller import rules as r
    from lambdas.canary_controller.decisions import WRITE_ATTEMPTS, DecisionApplier
    from lambdas.canary_controller.settings import (
        EventError,
        RolloutConflict,
        Settings,
        StartFailed,
        validate_event,
    )
except ImportError:  # pragma: no cover - the Lambda runtime
    import aws  # type: ignore[no-redef]
    import rules as r  # type: ignore[no-redef]
    import store  # type: ignore[no-redef]
    from decisions import WRITE_ATTEMPTS, DecisionApplier  # type: ignore[no-redef]
    from settings import (  # type: ignore[no-redef]
        EventError,
        RolloutConflict,
        Settings,
        StartFailed,
        validate_event,
    )

# What importers of handler used before it was split keeps working (handler.X).
__all__ = [
    "WRITE_ATTEMPTS", "Controller", "EventError", "RolloutConflict", "Settings", "StartFailed",
    "aws", "handler",
]  # fmt: skip
RUNNING, ROLLING_BACK, COMPLETED, ROLLED_BACK, FAILED = r.RUNNING, r.ROLLING_BACK, *r.ENDED
SUPERSEDED = store.SUPERSEDED


class Controller(DecisionApplier):
    def start(self, event: dict[str, Any]) -> dict[str, Any]:
        rollout_id = event["rollout_id"]
        current = self.load()
        same = current is not None and current["rollout_id"] == rollout_id
        if same and current and current.get("last_decision") != "start-failed":
            return self._result(current, duplicate=True)
        if current and current["status"] in r.LOCKED:
            raise RolloutConflict(
                f"rollout {current['rollout_id']!r} is already {current['status']} on "
                f"{self.s.endpoint_name} (step {current['step_index'] + 1}/"
                f"{len(current['steps'])}, started by {current.get('requested_by', '?')}); "
                "wait for it or run make canary-rollback"
            )
        obs = self.observe()
        if obs.endpoint_status != "InService":
            raise RolloutConflict(
                f"endpoint {self.s.endpoint_name} is {obs.endpoint_status}, not InService; "
                "start refused"
            )
        if obs.firing:
            raise RolloutConflict(f"alarms already firing, start refused: {'; '.join(obs.firing)}")
        by = event.get("requested_by", "unknown")
        reason = "lock taken; first step on the next tick"
        state = self._fresh(rollout_id, RUNNING, by=by, decision="start", reason=reason)
        if not self._write(state, expect_seq=None):
            raise RolloutConflict(
                f"another rollout took the lock on {self.s.endpoint_name} just now"
            )
        self._start_execution(state)
        return self._result(state)

    def tick(self, event: dict[str, Any]) -> dict[str, Any]:
        state = self.load()
        if state is None:
            raise EventError(f"no rollout recorded for {self.s.endpoint_name}; nothing changed")
        if state["rollout_id"] != event["rollout_id"]:
            return store.superseded(self.s.endpoint_name, event, state)
        if state["status"] not in r.LOCKED:
            return self._result(state)
        if event["seq"] != state["seq"]:
            return self._result(state, duplicate=True)
        return self._advance(state)

    def rollback(self, event: dict[str, Any]) -> dict[str, Any]:
        by = event.get("requested_by", "unknown")
        reason = f"{event.get('reason') or 'operator requested rollback'} (by {by})"
        rollout_id = event.get("rollout_id")
        state = self.load()
        if rollout_id is not None and (state is None or state["rollout_id"] != rollout_id):
            return store.superseded(self.s.endpoint_name, event, state)
        if state is not None and state["status"] in r.LOCKED:
            result = self._begin_rollback(state, reason)
            if rollout_id is None and result["status"] == ROLLING_BACK:
                self._start_driver(result)
            return result
        if state is not None and rollout_id is not None:
            return self._result(state)  # this execution's rollout already ended
        # Nothing holds the lock: a rollback of its own, driven by its own execution.
        own_id = f"rollback-{int(self.clock())}"
        fresh = self._fresh(own_id, ROLLING_BACK, by=by, decision="rollback", reason=reason)
        fresh["rollback_reason"] = reason
        if not self._write(fresh, expect_seq=None):
            return self._begin_rollback(self._current(), reason)
        result = self._drive_rollback(fresh)
        if result["status"] == ROLLING_BACK:
            self._start_execution(self._current())
        return result

    def status(self) -> dict[str, Any]:
        """The recorded state, read-only."""
        state = self.load()
        if state is None:
            return {"endpoint_name": self.s.endpoint_name, "status": None}
        return self._result(state)


def handler(
    event: Any, context: Any = None, controller: Controller | None = None
) -> dict[str, Any]:
    settings = controller.s if controller else Settings.from_env()
    event = validate_event(event, settings)
    ctl = controller or Controller(settings)
    if event["action"] == "status":
        return ctl.status()
    result: dict[str, Any] = getattr(ctl, event["action"])(event)
    keys = ("rollout_id", "status", "seq", "last_decision", "last_reason")
    print(json.dumps({k: result.get(k) for k in keys}))
    return result
