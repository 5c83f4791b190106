"""The controller's clients and its I/O: the recorded state (conditional writes), the AWS reads
and writes it delegates to ``aws.py``, the state machine's executions and SNS notifications.

No decision is taken here: ``decisions.py`` applies ``rules.decide``'s answers, ``handler.py``
serves the actions. The lock's compare-and-set is ``store.save``'s conditional write.
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
    from lambdas.canary_controller.settings import Settings, StartFailed
except ImportError:  # pragma: no cover - the Lambda runtime
    import aws  # type: ignore[no-redef]
    import rules as r  # type: ignore[no-redef]
    import store  # type: ignore[no-redef]
    from settings import Settings, StartFailed  # type: ignore[no-redef]


def is_conflict(exc: ClientError) -> bool:
    """DynamoDB refused a conditional write: another writer moved the record first."""
    return exc.response["Error"]["Code"] == "ConditionalCheckFailedException"


class ControllerIO:
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

    def _current(self) -> dict[str, Any]:
        """The record after a lost conditional write (which proves that one exists)."""
        current = self.load()
        assert current is not None
        return current

    def _save(self, state: dict[str, Any], *, expect_seq: int | None) -> None:
        store.save(self.table, state, expect_seq=expect_seq)

    def _write(self, state: dict[str, Any], *, expect_seq: int | None) -> bool:
        """``_save``, False when another writer moved the record first (any other error raises)."""
        try:
            self._save(state, expect_seq=expect_seq)
        except ClientError as exc:
            if not is_conflict(exc):
                raise
            return False
        return True

    def _decide(self, state: dict[str, Any], decision: str, reason: str) -> dict[str, Any]:
        return store.record(state, decision, reason, int(self.clock()))

    def _fresh(
        self, rollout_id: str, status: str, *, by: str, decision: str, reason: str
    ) -> dict[str, Any]:
        """A new rollout's record with its first decision: written only while nothing holds the
        lock (``_write(..., expect_seq=None)``)."""
        state = store.new_state(
            endpoint=self.s.endpoint_name,
            rollout_id=rollout_id,
            status=status,
            by=by,
            rules=self.s.rules,
            alarms=list(self.s.alarm_names),
            now=int(self.clock()),
        )
        return self._decide(state, decision, reason)

    def _result(
        self, state: dict[str, Any], *, duplicate: bool = False, wait: int = 0
    ) -> dict[str, Any]:
        return store.summary(
            state, check_seconds=self.s.rules.check_seconds, duplicate=duplicate, wait=wait
        )

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
            failed["status"] = r.FAILED
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
