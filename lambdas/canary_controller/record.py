"""The state store: the rollout's record, read consistently and written only by conditional
writes (the item's shape and each version of it: ``store.py``; the lock's compare-and-set:
``store.save``).

Every failure of a record write is handled in :meth:`RolloutRecord.write`: a lost condition
(ConditionalCheckFailedException: another writer moved the record first) answers False; what
DynamoDB says is worth sending again (``aws.WRITE_AGAIN``: ProvisionedThroughputExceeded,
RequestLimitExceeded, ThrottlingException, InternalServerError, ServiceUnavailable, any 5xx) and
no answer at all (a connect or read timeout, a dropped connection) are sent again after
:data:`WRITE_BACKOFF_SECONDS` (Amazon DynamoDB Developer Guide, "Error retries and exponential
backoff"), well inside the Lambda's 60 s; what is still failing then (or never worth sending
again: AccessDenied, ValidationException) raises the error itself. A write that may have landed
without its answer (a timeout, a 5xx) and then loses its condition on the next attempt is
checked against the record: if the record is the one it wrote, it landed. Where a tick's AWS call
was made before its record could be written, the intent written before the call tells the next
tick what was done (``decisions.py``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from . import aws, store
from . import rules as r
from .clients import Clients
from .names import RolloutStatus
from .settings import Settings
from .state import RecordedDecision, RolloutState

#: Pauses before each further attempt of a record write that DynamoDB throttled, failed (5xx) or
#: did not answer: exponential backoff, 6.2 s in all (botocore's own retries come inside each
#: attempt), well inside the controller Lambda's 60 s timeout.
WRITE_BACKOFF_SECONDS = (0.2, 0.4, 0.8, 1.6, 3.2)


def is_conflict(exc: ClientError) -> bool:
    """DynamoDB refused a conditional write: another writer moved the record first."""
    return exc.response["Error"]["Code"] == "ConditionalCheckFailedException"


def _same(a: Any, b: Any) -> bool:
    """Two records alike as DynamoDB stores them (tuples come back as lists)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


@dataclass(eq=False)
class RolloutRecord:
    """One endpoint's record in the table ``clients.table``."""

    s: Settings
    clients: Clients
    _: KW_ONLY
    clock: Callable[[], float]
    #: The backoff between attempts of a record write (the tests' clock moves instead).
    sleep: Callable[[float], Any]

    def load(self) -> RolloutState | None:
        item = self.clients.table.get_item(
            Key={"endpoint_name": self.s.endpoint_name}, ConsistentRead=True
        )
        return store.plain(item.get("Item"))

    def current(self) -> RolloutState:
        """The record after a lost conditional write (which proves that one exists)."""
        current = self.load()
        assert current is not None
        return current

    def _save(self, state: RolloutState, *, expect_seq: int | None) -> None:
        """The one conditional write (``store.save``) every :meth:`write` attempt makes."""
        store.save(self.clients.table, state, expect_seq=expect_seq)

    def write(self, state: RolloutState, *, expect_seq: int | None) -> bool:
        """``_save``: True once written, False when another writer moved the record first; any
        other failure is sent again after each of :data:`WRITE_BACKOFF_SECONDS` while DynamoDB
        says it is worth it (module docstring), then raises."""
        maybe_written = False
        for pause in (*WRITE_BACKOFF_SECONDS, None):
            try:
                self._save(state, expect_seq=expect_seq)
                return True
            except ClientError as exc:
                if is_conflict(exc):
                    # An earlier attempt may have landed without its answer: then it is ours.
                    return maybe_written and _same(self.load(), state)
                failure: Exception = exc
            except BotoCoreError as exc:
                failure = exc
            maybe_written = maybe_written or aws.maybe_applied(failure)
            if pause is None or not aws.retry_later(failure, aws.WRITE_AGAIN):
                raise failure
            print(f"record write failed ({aws.describe_error(failure)}); again in {pause}s")
            self.sleep(pause)
        raise AssertionError("unreachable")  # pragma: no cover

    def decide(self, state: RolloutState, decision: RecordedDecision, reason: str) -> RolloutState:
        """The next version of ``state`` with ``decision`` recorded now (not written)."""
        return store.record(state, decision, reason, int(self.clock()))

    def fresh(
        self,
        rollout_id: str,
        status: RolloutStatus,
        *,
        by: str,
        decision: RecordedDecision,
        reason: str,
        obs: r.Observation | None = None,
    ) -> RolloutState:
        """A new rollout's record with its first decision: written only while nothing holds the
        lock (``write(..., expect_seq=None)``). Its execution is named after it; ``obs``: the
        endpoint as the rollout finds it (config, canary share), what later ticks compare with."""
        state = store.new_state(
            endpoint=self.s.endpoint_name,
            rollout_id=rollout_id,
            status=status,
            by=by,
            rules=self.s.rules,
            alarms=list(self.s.alarm_names),
            now=int(self.clock()),
            execution=rollout_id,
            endpoint_config_name=obs.endpoint_config_name if obs else None,
            canary_percent=round(obs.canary_share) if obs else None,
        )
        return self.decide(state, decision, reason)

    def result(
        self, state: RolloutState, *, duplicate: bool = False, wait: int = 0
    ) -> dict[str, Any]:
        """What an action answers: the record's summary (``store.summary``)."""
        return store.summary(
            state, check_seconds=self.s.rules.check_seconds, duplicate=duplicate, wait=wait
        )
