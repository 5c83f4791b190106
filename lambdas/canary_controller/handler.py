"""Canary rollout controller: walks the canary variant's traffic weight through configured steps.

One Lambda, six actions, each an event ``{"action": ..., "endpoint_name": ..., ...}``:

- ``start``    (operator, ``make canary-start``): takes the per-endpoint lock and starts the
  Step Functions execution. The record names that execution (the rollout id) and the endpoint as
  the rollout found it (its EndpointConfigName and canary share). Refused while another rollout
  holds the lock; the same ``rollout_id`` twice is a no-op, except that a start whose first
  attempt never got StartExecution's answer (the Lambda stopped, the answer was lost) issues it
  again: same name, same input, so Step Functions starts at most one. A failed StartExecution,
  whatever failed (an error answer, no connection, a connect or read timeout), releases the lock
  (FAILED, notified): send the same ``rollout_id`` again.
- ``tick``     (the state machine, every ``check_interval`` or sooner when a bake ends): observes
  the endpoint and the alarms and applies the decision of :func:`rules.decide` (capacity first,
  weight second; evidence, and alarms with data, before every step forward; a deadline on every
  wait; a rollback when the endpoint changed under it). A step forward is recorded as an intent
  before its AWS calls, so the next tick recognises its own work whatever stopped the tick
  that made it (``decisions.py``). A re-delivered tick has a stale
  ``seq`` and changes nothing but learns the current ``seq``.
- ``rollback`` (operator, or the state machine's catch-all naming its ``rollout_id``): records
  ROLLING_BACK before acting (a lost write is retried), then weight 0 until DescribeEndpoint
  shows it, then the canary's bounds (``rules.decide``); past its deadline it ends FAILED, naming
  what it waited for (``rules.rollback_overdue``). A stale ``rollout_id`` changes nothing.
- ``continue`` (the state machine, once an execution has looped ``ITERATIONS_PER_EXECUTION``
  times, stacks/constructs/rollout_state_machine.py): hands the rollout on to a new execution
  before the execution's history reaches Step Functions' 25,000 events. The new execution's name
  is recorded, then it is started at the recorded ``seq``; the old one ends (Succeed). If it
  cannot be started, the record names the old one again, which keeps looping and asks again on
  its next iteration (its bound leaves room for that).
- ``execution-ended`` (EventBridge: the state machine's "Step Functions Execution Status Change"
  events with status FAILED, TIMED_OUT or ABORTED): an execution ended without a Succeed state
  (its retries exhausted, its timeout, an operator's StopExecution). If the record still holds
  the lock for that execution (the name it recorded: an event of any other, older execution is
  ignored), nothing drives the rollout any more. The choice made here: **roll it back, driven by
  a new execution**. A RUNNING rollout records ROLLING_BACK and tries the rollback at once
  (weight 0, then bounds: it may end here, ROLLED_BACK and notified); what is left is driven by a
  new execution (``<rollout>-rb-<time>``, recorded, notified). It is not resumed forward: the
  execution ended because something kept failing or someone stopped it, and a step forward on
  that is a guess. If no execution can be started, or ``MAX_LOST_EXECUTIONS`` executions of the
  rollout have ended this way (the rollback itself keeps failing), the rollout is recorded FAILED
  and the operator told; the lock is released, and the message says the canary may still take
  traffic (``make canary-status``, ``make canary-rollback``). Step Functions delivers these events
  "best effort" (EventBridge events reference, AWS Step Functions events): a lost one leaves the
  lock held, and ``make canary-status`` shows the time of the last decision.
- ``status``   (operator): the recorded state, read-only.

State: one DynamoDB item per endpoint (``store.py``). Weights are relative: step ``p`` sets
canary ``p`` and primary ``100 - p``. Every rollout ends COMPLETED, ROLLED_BACK or FAILED with an
SNS notification, each of which releases the lock. Promotion is a config change and a deploy.
Every AWS call handles both kinds of failure, an error answer (ClientError) and none at all
(BotoCoreError): see ``aws.py``, ``decisions.py``, ``record.py`` and ``executions.py`` for what
each does.

The actions are here, served by :class:`Controller`, which is composed of parts with one job
each (no inheritance): the decision core is pure (``rules.decide``, ``shadow_stage.decide``:
state and observation in, decision out); ``decisions.py`` applies its answers (steps forward,
rollback steps, refusals); ``record.py`` is the state store; ``endpoint_io.py`` and
``shadow_io.py`` are the AWS adapters of the endpoint and the shadow stage; ``executions.py``
starts and hands on the Step Functions executions; ``notifier.py`` tells the operator.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from . import aws, store
from . import rules as r
from .clients import Clients
from .decisions import WRITE_ATTEMPTS, DecisionApplier
from .endpoint_io import EndpointIO
from .executions import Executions, driver
from .notifier import Notifier
from .record import RolloutRecord
from .settings import (
    EventError,
    RolloutConflict,
    Settings,
    StartFailed,
    validate_event,
)
from .shadow_io import ShadowIO
from .state import RolloutState

# What importers of handler used before it was split keeps working (handler.X).
__all__ = [
    "MAX_LOST_EXECUTIONS", "WRITE_ATTEMPTS", "Controller", "EventError", "RolloutConflict",
    "Settings", "StartFailed", "aws", "handler",
]  # fmt: skip
RUNNING, ROLLING_BACK, COMPLETED, ROLLED_BACK, FAILED = r.RUNNING, r.ROLLING_BACK, *r.ENDED
SUPERSEDED = store.SUPERSEDED
#: Executions of one rollout that may end (FAILED, TIMED_OUT, ABORTED) with its lock held: the
#: rollout's own and the rollback drivers after it. The one that reaches this count is not
#: replaced: the rollout is recorded FAILED and the operator told.
MAX_LOST_EXECUTIONS = 3
#: The method serving each action.
METHODS = {
    r.names.CONTINUE: "continue_rollout",
    r.names.EXECUTION_ENDED: "execution_ended",
}


class _Client:
    """``controller.<name>``: the parts' shared client of that name (``clients.Clients``);
    setting it replaces it for every part (the tests' fakes and Stubbers)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, controller: Controller, owner: type | None = None) -> Any:
        return getattr(controller.clients, self.name)

    def __set__(self, controller: Controller, client: Any) -> None:
        setattr(controller.clients, self.name, client)


class Controller:
    """The actions, composed of the controller's parts, each with one job: the record (the state
    store, ``record.py``), the endpoint's AWS side (``endpoint_io.py``), the shadow stage's
    (``shadow_io.py``), the executions (``executions.py``), the notifications (``notifier.py``)
    and the applier of the decision core's answers (``decisions.py``). The parts share one set
    of clients (``clients.py``) and one settings object (:attr:`s`, set on every part)."""

    def __init__(
        self,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Any] = time.sleep,
        **clients: Any,
    ) -> None:
        self.clients = Clients.create(settings.table_name, clients)
        self.clock = clock
        self.record = RolloutRecord(settings, self.clients, clock=clock, sleep=sleep)
        self.endpoint = EndpointIO(settings, self.clients)
        self.shadow = ShadowIO(settings, self.clients, clock=clock, sleep=sleep)
        self.notifier = Notifier(settings, self.clients)
        self.executions = Executions(
            settings, self.clients, self.record, self.notifier, clock=clock
        )
        self.applier = DecisionApplier(
            settings, record=self.record, endpoint=self.endpoint, shadow=self.shadow,
            notifier=self.notifier, clock=clock,
        )  # fmt: skip
        self.s = settings

    @property
    def s(self) -> Settings:
        return self._settings

    @s.setter
    def s(self, settings: Settings) -> None:
        """New settings (the tests' variations of a world) reach every part."""
        self._settings = settings
        for part in (
            self.record,
            self.endpoint,
            self.shadow,
            self.notifier,
            self.executions,
            self.applier,
        ):
            part.s = settings

    sm, cw, sns, sfn, aas, s3 = _Client(), _Client(), _Client(), _Client(), _Client(), _Client()
    runtime, table = _Client(), _Client()

    @property
    def _save(self) -> Callable[..., None]:
        """The record's one conditional write (``RolloutRecord._save``): the tests wrap it to
        check every record the controller writes."""
        return self.record._save

    @_save.setter
    def _save(self, save: Callable[..., None]) -> None:
        self.record._save = save  # type: ignore[method-assign]

    def load(self) -> RolloutState | None:
        return self.record.load()

    def start(self, event: dict[str, Any]) -> dict[str, Any]:
        rollout_id = event["rollout_id"]
        current = self.load()
        same = current is not None and current["rollout_id"] == rollout_id
        if same and current and current.get("last_decision") != "start-failed":
            if current["status"] == RUNNING and current.get("last_decision") == "start":
                # No tick yet: the first attempt may have stopped before StartExecution answered.
                current = self.executions.start(current)
            return self.record.result(current, duplicate=True)
        if current and current["status"] in r.LOCKED:
            raise RolloutConflict(
                f"rollout {current['rollout_id']!r} is already {current['status']} on "
                f"{self.s.endpoint_name} (step {current['step_index'] + 1}/"
                f"{len(current['steps'])}, started by {current.get('requested_by', '?')}); "
                "wait for it or run make canary-rollback"
            )
        obs = self.endpoint.observe()
        if obs.endpoint_status != "InService":
            raise RolloutConflict(
                f"endpoint {self.s.endpoint_name} is {obs.endpoint_status}, not InService; "
                "start refused"
            )
        if obs.firing:
            raise RolloutConflict(f"alarms already firing, start refused: {'; '.join(obs.firing)}")
        by = event.get("requested_by", "unknown")
        reason = "lock taken; first step on the next tick"
        if self.s.shadow is not None:
            self.shadow.start_allowed(obs)
            reason = "lock taken; the shadow stage begins on the next tick"
        state = self.record.fresh(
            rollout_id, RUNNING, by=by, decision="start", reason=reason, obs=obs
        )
        if self.s.shadow is not None:
            state.update(
                {
                    "stage": "shadow",
                    "canary_config_name": obs.endpoint_config_name,
                    "shadow_config_name": self.s.shadow.config_name,
                }
            )
        if not self.record.write(state, expect_seq=None):
            raise RolloutConflict(
                f"another rollout took the lock on {self.s.endpoint_name} just now"
            )
        return self.record.result(self.executions.start(state))

    def tick(self, event: dict[str, Any]) -> dict[str, Any]:
        state = self.load()
        if state is None:
            raise EventError(f"no rollout recorded for {self.s.endpoint_name}; nothing changed")
        if state["rollout_id"] != event["rollout_id"]:
            return store.superseded(self.s.endpoint_name, event, state)
        if state["status"] not in r.LOCKED:
            return self.record.result(state)
        if event["seq"] != state["seq"]:
            return self.record.result(state, duplicate=True)
        return self.applier.advance(state)

    def rollback(self, event: dict[str, Any]) -> dict[str, Any]:
        by = event.get("requested_by", "unknown")
        reason = f"{event.get('reason') or 'operator requested rollback'} (by {by})"
        rollout_id = event.get("rollout_id")
        state = self.load()
        if rollout_id is not None and (state is None or state["rollout_id"] != rollout_id):
            return store.superseded(self.s.endpoint_name, event, state)
        if state is not None and state["status"] in r.LOCKED:
            result = self.applier.begin_rollback(state, reason)
            if rollout_id is None and result["status"] == ROLLING_BACK:
                pending = self.record.current()
                driven = self.executions.start_driver(pending)
                if driven is None:
                    self.notifier.notify(
                        "canary rollback pending: run make canary-rollback again", pending
                    )
                else:
                    result = self.record.result(driven)
            return result
        if state is not None and rollout_id is not None:
            return self.record.result(state)  # this execution's rollout already ended
        # Nothing holds the lock: a rollback of its own, driven by its own execution.
        own_id = f"rollback-{int(self.clock())}"
        fresh = self.record.fresh(own_id, ROLLING_BACK, by=by, decision="rollback", reason=reason)
        fresh["rollback_reason"] = reason
        fresh["rollback_started_at"] = fresh["started_at"]  # its deadline counts from here
        if not self.record.write(fresh, expect_seq=None):
            return self.applier.begin_rollback(self.record.current(), reason)
        result = self.applier.drive_rollback(fresh)
        if result["status"] == ROLLING_BACK:
            result = self.record.result(self.executions.start(self.record.current()))
        return result

    def continue_rollout(self, event: dict[str, Any]) -> dict[str, Any]:
        """``continue``: hand the rollout on to a new execution (module docstring).
        ``handed_on`` tells the calling execution to end."""
        state = self.load()
        if state is None:
            raise EventError(f"no rollout recorded for {self.s.endpoint_name}; nothing changed")
        if state["rollout_id"] != event["rollout_id"]:
            return {**store.superseded(self.s.endpoint_name, event, state), "handed_on": False}
        if state["status"] not in r.LOCKED:
            return {**self.record.result(state), "handed_on": False}
        caller = event["execution_name"]
        if driver(state) != caller:  # another execution drives the rollout: this one ends
            return {**self.record.result(state, duplicate=True), "handed_on": True}
        name = f"{state['rollout_id'][:48]}-c{state['seq'] + 1}-{int(self.clock())}"
        why = f"execution {caller} handed the rollout on to {name} after " \
            f"{event.get('iteration', '?')} loop iterations (execution history limit)"  # fmt: skip
        try:
            new = self.executions.hand_to(state, name, why)
        except aws.AWS_ERRORS as exc:
            back = self.executions.name_again(caller, name, exc)
            return {**self.record.result(back), "handed_on": False}
        if new is None:  # another writer moved the record first: loop on, ask again
            return {**self.record.result(self.record.current(), duplicate=True), "handed_on": False}
        return {**self.record.result(new), "handed_on": True}

    def execution_ended(self, event: dict[str, Any]) -> dict[str, Any]:
        """``execution-ended``: the choice is in the module docstring. If even the record cannot
        be read or written, the operator is told and the error raised (Lambda retries an
        asynchronous invocation twice)."""
        name, status = event["execution_name"], event["execution_status"]
        try:
            return self._execution_ended(name, status)
        except (ClientError, BotoCoreError, RolloutConflict) as exc:
            self.notifier.notify(
                f"canary rollout execution {name} {status}: the controller could not act",
                {
                    "endpoint_name": self.s.endpoint_name,
                    "execution": name,
                    "last_reason": f"{aws.describe_error(exc)}; the rollout's lock may still be "
                    "held with nothing driving it: make canary-status, then make canary-rollback",
                },
            )
            raise

    def _execution_ended(self, name: str, status: str) -> dict[str, Any]:
        state = self.load()
        if state is None or state["status"] not in r.LOCKED or driver(state) != name:
            current = driver(state) if state else None
            print(f"execution {name} {status}: not the one driving a locked rollout ({current})")
            return self.record.result(state) if state else {"endpoint_name": self.s.endpoint_name}
        lost = int(state.get("lost_executions", 0)) + 1
        why = f"execution {name} ended {status} while the rollout was {state['status']}"
        if lost >= MAX_LOST_EXECUTIONS:
            return self._abandon(
                state, f"{why}; {lost} executions of this rollout have ended before it did"
            )
        state = {**state, "lost_executions": lost}
        if state["status"] == RUNNING:
            try:
                self.applier.begin_rollback(state, f"{why}: nothing drove it any more")
            except aws.AWS_ERRORS as exc:  # recorded ROLLING_BACK, its first call failed
                print(f"rollback after {name} {status}: {aws.describe_error(exc)}")
            state = self.record.current()
            if state["status"] == RUNNING:  # the rollback could not even be recorded
                raise RolloutConflict(f"could not record the rollback after {why}")
            if state["status"] not in r.LOCKED:
                return self.record.result(state)  # rolled back here, and notified
        driven = self.executions.start_driver({**state, "lost_executions": lost})
        if driven is None:
            return self._abandon(
                self.record.current(), f"{why}; no execution could be started to drive the rollback"
            )
        self.notifier.notify(
            f"canary rollout execution {status}: rolling back, driven by {driven['execution']}",
            driven,
        )
        return self.record.result(driven)

    def _abandon(self, state: RolloutState, why: str) -> dict[str, Any]:
        """Nothing can drive the rollout: FAILED (the lock released), the bounds it raised put
        back as far as is safe without knowing the canary's weight
        (``DecisionApplier.release_bounds``: its minimum, not its maximum), and the operator
        told."""
        new = self.record.decide(
            state,
            "abort",
            f"{why}: recorded FAILED, lock released. The canary may still take traffic: "
            "make canary-status, then make canary-rollback",
        )
        new["status"] = FAILED
        new["last_reason"] += self.applier.release_bounds(state, None)
        if not self.record.write(new, expect_seq=state["seq"]):
            return self.record.result(self.record.current(), duplicate=True)
        self.notifier.notify("canary rollout FAILED: no execution drives it", new)
        return self.record.result(new)

    def status(self) -> dict[str, Any]:
        """The recorded state, read-only."""
        state = self.load()
        if state is None:
            return {"endpoint_name": self.s.endpoint_name, "status": None}
        return self.record.result(state)


def handler(
    event: Any, context: Any = None, controller: Controller | None = None
) -> dict[str, Any]:
    settings = controller.s if controller else Settings.from_env()
    event = validate_event(event, settings)
    ctl = controller or Controller(settings)
    if event["action"] == "status":
        return ctl.status()
    method = METHODS.get(event["action"], event["action"])
    result: dict[str, Any] = getattr(ctl, method)(event)
    if "iteration" in event:  # the state machine's loop count, echoed for its next iteration
        result["iteration"] = event["iteration"]
    keys = ("rollout_id", "status", "seq", "last_decision", "last_reason", "execution")
    print(json.dumps({k: result.get(k) for k in keys}))
    return result
