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
"""

from __future__ import annotations

import json
import time
from typing import Any

import boto3
from botocore.exceptions import ClientError

try:  # tests, stacks and the simulator import the package; in Lambda this directory is the root
    from lambdas.canary_controller import aws, store
    from lambdas.canary_controller import rules as r
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
    from settings import (  # type: ignore[no-redef]
        EventError,
        RolloutConflict,
        Settings,
        StartFailed,
        validate_event,
    )

RUNNING, ROLLING_BACK, COMPLETED, ROLLED_BACK, FAILED = r.RUNNING, r.ROLLING_BACK, *r.ENDED
SUPERSEDED = store.SUPERSEDED
#: Attempts of a rollback's conditional write against concurrent ticks before giving up.
WRITE_ATTEMPTS = 5


def _conflict(exc: ClientError) -> bool:
    return exc.response["Error"]["Code"] == "ConditionalCheckFailedException"


class Controller:
    def __init__(self, settings: Settings, *, clock: Any = time.time, **clients: Any) -> None:
        self.s = settings
        self.clock = clock
        self.sm = clients.get("sagemaker") or boto3.client("sagemaker")
        self.cw = clients.get("cloudwatch") or boto3.client("cloudwatch")
        self.sns = clients.get("sns") or boto3.client("sns")
        self.sfn = clients.get("stepfunctions") or boto3.client("stepfunctions")
        self.aas = clients.get("application-autoscaling") or boto3.client("application-autoscaling")
        ddb = clients.get("dynamodb") or boto3.resource("dynamodb")
        self.table = ddb.Table(settings.table_name)

    # ------------------------------------------------------------------ state

    def load(self) -> dict[str, Any] | None:
        item = self.table.get_item(Key={"endpoint_name": self.s.endpoint_name}, ConsistentRead=True)
        return store.plain(item.get("Item"))

    def _save(self, state: dict[str, Any], *, expect_seq: int | None) -> None:
        store.save(self.table, state, expect_seq=expect_seq)

    def _decide(self, state: dict[str, Any], decision: str, reason: str) -> dict[str, Any]:
        return store.record(state, decision, reason, int(self.clock()))

    # ------------------------------------------------------------------ AWS

    def observe(self) -> r.Observation:
        return aws.observe(
            self.sm, self.cw, self.s.endpoint_name, self.s.alarm_names,
            primary=self.s.primary_variant, canary=self.s.canary_variant,
        )  # fmt: skip

    def evidence(self, start: int, end: int) -> r.Evidence:
        return aws.evidence(
            self.cw, self.s.endpoint_name, start, end,
            primary=self.s.primary_variant, canary=self.s.canary_variant,
        )  # fmt: skip

    def set_canary_weight(self, percent: int) -> None:
        aws.set_weights(
            self.sm,
            self.s.endpoint_name,
            {self.s.canary_variant: percent, self.s.primary_variant: 100 - percent},
        )

    def notify(self, subject: str, state: dict[str, Any]) -> None:
        """Best effort: the decision is already applied and recorded; a failed publish is logged
        instead of failing the tick (which would make the state machine roll back again)."""
        message = {k: state.get(k) for k in store.SUMMARY_KEYS}
        try:
            self.sns.publish(
                TopicArn=self.s.topic_arn,
                Subject=f"[{self.s.endpoint_name}] {subject}"[:100],
                Message=json.dumps(message, indent=2, default=str),
            )
        except ClientError as exc:
            print(f"notification to {self.s.topic_arn} failed: {exc}")

    def _start_execution(self, state: dict[str, Any]) -> None:
        """Start the state machine for ``state``; on failure release the lock and say so."""
        if not self.s.state_machine_arn:
            return
        try:
            aws.start_execution(self.sfn, self.s.state_machine_arn, state["rollout_id"], state)
        except ClientError as exc:
            err = exc.response["Error"]
            failed = self._decide(
                state,
                "start-failed",
                f"StartExecution failed ({err.get('Code')}: {err.get('Message')}); lock "
                "released, send the same rollout id again",
            )
            failed["status"] = FAILED
            self._save(failed, expect_seq=state["seq"])
            self.notify("canary rollout could not start", failed)
            raise StartFailed(failed["last_reason"]) from None

    def _start_driver(self, result: dict[str, Any]) -> None:
        """An execution that ticks a pending rollback to its end even if the rollout's own
        execution has stopped; a second one alive at the same time only sees duplicate seqs."""
        if not self.s.state_machine_arn:
            return
        name = f"{result['rollout_id'][:60]}-rb-{int(self.clock())}"
        try:
            aws.start_execution(self.sfn, self.s.state_machine_arn, name, result)
        except ClientError as exc:
            print(f"StartExecution {name} failed: {exc}")
            self.notify("canary rollback pending: run make canary-rollback again", result)

    # ------------------------------------------------------------------ actions

    def _new_state(self, rollout_id: str, status: str, by: str) -> dict[str, Any]:
        return store.new_state(
            endpoint=self.s.endpoint_name,
            rollout_id=rollout_id,
            status=status,
            by=by,
            rules=self.s.rules,
            alarms=list(self.s.alarm_names),
            now=int(self.clock()),
        )

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
        state = self._new_state(rollout_id, RUNNING, event.get("requested_by", "unknown"))
        state = self._decide(state, "start", "lock taken; first step on the next tick")
        try:
            self._save(state, expect_seq=None)
        except ClientError as exc:
            if _conflict(exc):
                raise RolloutConflict(
                    f"another rollout took the lock on {self.s.endpoint_name} just now"
                ) from None
            raise
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
        fresh = self._new_state(f"rollback-{int(self.clock())}", ROLLING_BACK, by)
        fresh = self._decide(fresh, "rollback", reason)
        fresh["rollback_reason"] = reason
        try:
            self._save(fresh, expect_seq=None)
        except ClientError as exc:
            if not _conflict(exc):
                raise
            current = self.load()
            assert current is not None
            return self._begin_rollback(current, reason)
        result = self._drive_rollback(fresh)
        if result["status"] == ROLLING_BACK:
            current = self.load()
            assert current is not None
            self._start_execution(current)
        return result

    # ------------------------------------------------------------------ decisions applied

    def _advance(self, state: dict[str, Any]) -> dict[str, Any]:
        now = int(self.clock())
        decision = r.decide(state, self.observe(), self.s.rules, now, self.evidence)
        return self._apply(state, decision, now)

    def _apply(self, state: dict[str, Any], d: r.Decision, now: int) -> dict[str, Any]:
        seq, ep, canary = state["seq"], self.s.endpoint_name, self.s.canary_variant
        new = self._decide(state, d.kind, d.reason)
        if d.kind == "rollback":
            return self._begin_rollback(state, d.reason)
        if d.kind in ("abort", "complete", "restore"):
            if d.kind == "restore":
                assert d.bounds is not None
                try:
                    aws.set_bounds(self.aas, ep, canary, *d.bounds)
                except ClientError as exc:
                    if not aws.refused(exc):
                        raise
                    return self._refused(state, d, exc)
                new["last_reason"] = f"{state.get('rollback_reason')}; then {d.reason}"
            subject = {
                "abort": "canary rollout abandoned",
                "complete": "canary rollout complete: promote the canary",
                "restore": "canary rolled back",
            }[d.kind]
            new.update(r.transition(state, d, now))
            return self._finish(new, seq, subject)
        try:
            if d.kind == "scale":
                assert d.bounds is not None and d.instances is not None
                new.update(r.transition(state, d, now))
                aws.set_bounds(self.aas, ep, canary, *d.bounds)
                try:
                    aws.set_instances(self.sm, ep, canary, d.instances)
                except ClientError as exc:
                    if not aws.refused(exc):
                        raise
                    new["last_reason"] += (
                        f"; desired count refused ({exc.response['Error'].get('Message')}), "
                        "the raised MinCapacity scales the canary"
                    )
            elif d.kind == "shift":
                assert d.percent is not None
                self.set_canary_weight(d.percent)
                new.update(r.transition(state, d, now))
            elif d.kind == "reapply":
                self.set_canary_weight(0)
        except ClientError as exc:
            if not aws.refused(exc):
                raise
            return self._refused(state, d, exc)
        if d.kind in ("scale", "shift", "reapply"):
            new["refusals"] = 0
        return self._store(new, seq, wait=d.wait_seconds, moved_weight=d.kind == "shift")

    def _refused(self, state: dict[str, Any], d: r.Decision, exc: ClientError) -> dict[str, Any]:
        """SageMaker refused a weight change (endpoint Updating): retry on the next tick."""
        count = int(state.get("refusals", 0)) + 1
        msg = exc.response["Error"].get("Message", "")
        if state["status"] == RUNNING and count >= r.MAX_REFUSALS:
            return self._begin_rollback(
                state, f"SageMaker refused the {d.kind} {count} times: {msg}"
            )
        new = self._decide(
            state, "wait", f"{d.kind} refused by SageMaker ({msg}); retry {count} on the next tick"
        )
        new["refusals"] = count
        result = self._store(new, state["seq"], wait=self.s.rules.check_seconds)
        if state["status"] == ROLLING_BACK and count == r.MAX_REFUSALS:
            self.notify(f"canary rollback still refused after {count} attempts", new)
        return result

    def _begin_rollback(self, state: dict[str, Any], reason: str) -> dict[str, Any]:
        """Record ROLLING_BACK before acting; a write lost to a concurrent tick is retried on the
        fresh state, so an operator's rollback cannot be lost (or undone by the next tick)."""
        for _ in range(WRITE_ATTEMPTS):
            if state["status"] == ROLLING_BACK:
                return self._drive_rollback(state)
            if state["status"] not in r.LOCKED:
                return self._result(state)
            new = self._decide(state, "rollback", reason)
            new.update(status=ROLLING_BACK, refusals=0, rollback_reason=reason)
            try:
                self._save(new, expect_seq=state["seq"])
            except ClientError as exc:
                if not _conflict(exc):
                    raise
                fresh = self.load()
                assert fresh is not None
                state = fresh
                continue
            return self._drive_rollback(new)
        raise RolloutConflict(f"could not record the rollback in {WRITE_ATTEMPTS} attempts; retry")

    def _drive_rollback(self, state: dict[str, Any]) -> dict[str, Any]:
        """Canary weight 0 now; finish at once if DescribeEndpoint already shows it."""
        try:
            self.set_canary_weight(0)
        except ClientError as exc:
            if not aws.refused(exc):
                raise
            return self._refused(state, r.Decision("rollback", "weight 0"), exc)
        return self._advance(state)

    def _store(
        self, new: dict[str, Any], seq: int, *, wait: int, moved_weight: bool = False
    ) -> dict[str, Any]:
        try:
            self._save(new, expect_seq=seq)
        except ClientError as exc:
            if not _conflict(exc):
                raise
            current = self.load()
            assert current is not None
            if moved_weight and current["status"] in (ROLLING_BACK, ROLLED_BACK):
                # A rollback was recorded while this tick moved the weight: put it back at once
                # (the rollback's own ticks also check the live weight before finishing).
                try:
                    self.set_canary_weight(0)
                except ClientError as again:
                    if not aws.refused(again):
                        raise
            return self._result(current, duplicate=True)
        return self._result(new, wait=wait)

    def _finish(self, new: dict[str, Any], seq: int, subject: str) -> dict[str, Any]:
        result = self._store(new, seq, wait=0)
        if not result["duplicate"]:
            self.notify(subject, new)
        return result

    def _result(
        self, state: dict[str, Any], *, duplicate: bool = False, wait: int = 0
    ) -> dict[str, Any]:
        return store.summary(
            state, check_seconds=self.s.rules.check_seconds, duplicate=duplicate, wait=wait
        )


def handler(
    event: Any, context: Any = None, controller: Controller | None = None
) -> dict[str, Any]:
    settings = controller.s if controller else Settings.from_env()
    event = validate_event(event, settings)
    ctl = controller or Controller(settings)
    if event["action"] == "status":
        state = ctl.load()
        return (
            ctl._result(state) if state else {"endpoint_name": ctl.s.endpoint_name, "status": None}
        )
    result: dict[str, Any] = getattr(ctl, event["action"])(event)
    keys = ("rollout_id", "status", "seq", "last_decision", "last_reason")
    print(json.dumps({k: result.get(k) for k in keys}))
    return result
