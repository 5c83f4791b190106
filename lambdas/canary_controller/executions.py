"""The rollout's Step Functions executions: the one that drives it is named in the record before
it starts, so that its end is always noticed (``execution-ended``) and a second one alive at the
same time only ever sees duplicate ``seq``s. Starting the first, handing the rollout on to a new
one, a rollback's driver, and naming the previous one again when a start fails.
"""

from __future__ import annotations

from collections.abc import Callable

from botocore.exceptions import ClientError

from . import aws, store
from . import rules as r
from .clients import Clients
from .notifier import Notifier
from .record import RolloutRecord
from .settings import Settings, StartFailed
from .state import RolloutState


def driver(state: RolloutState) -> str:
    """The name of the execution that drives ``state``'s rollout (a record written before the
    name was recorded: the rollout id, the name its start used)."""
    return str(state.get("execution") or state["rollout_id"])


class Executions:
    def __init__(
        self,
        settings: Settings,
        clients: Clients,
        record: RolloutRecord,
        notifier: Notifier,
        *,
        clock: Callable[[], float],
    ) -> None:
        self.s = settings
        self.clients = clients
        self.record = record
        self.notifier = notifier
        self.clock = clock

    def hand_to(self, state: RolloutState, name: str, reason: str) -> RolloutState | None:
        """Record ``name`` as the execution that drives the rollout, then start it at the recorded
        seq. The record comes first, so an execution that starts is always the recorded one (its
        end is then noticed: ``execution-ended``). None when another writer moved the record
        first (nothing started); AWS errors of StartExecution raise, the new record written."""
        new = store.handed_on(state, name, reason, int(self.clock()))
        if not self.record.write(new, expect_seq=state["seq"]):
            return None
        aws.start_execution(self.clients.sfn, self.s.state_machine_arn, name, new)
        return new

    def start(self, state: RolloutState) -> RolloutState:
        """Start the execution ``state`` names; returns the record as it stands after.

        Any failure (an error answer or none: a dropped connection, a timeout) releases the lock
        (FAILED, ``start-failed``, notified) and raises StartFailed: send the same rollout id again.
        ExecutionAlreadyExists means an earlier attempt whose answer was lost did start it and it
        has ended since: a new name is recorded and started. If the failure record loses its
        conditional write, the execution did start and its first tick moved the record: the
        rollout runs."""
        if not self.s.state_machine_arn:
            return state
        sfn, arn, attempt = self.clients.sfn, self.s.state_machine_arn, state
        try:
            try:
                aws.start_execution(sfn, arn, driver(state), state)
            except ClientError as exc:
                if aws.error_code(exc) != "ExecutionAlreadyExists":
                    raise
                name = f"{state['rollout_id'][:60]}-{int(self.clock())}"
                reason = f"execution name {driver(state)} was taken by an earlier attempt"
                attempt = store.handed_on(state, name, reason, int(self.clock()))
                if not self.record.write(attempt, expect_seq=state["seq"]):
                    return self.record.current()
                aws.start_execution(sfn, arn, name, attempt)
        except aws.AWS_ERRORS as exc:
            failed = self.record.decide(
                attempt,
                "start-failed",
                f"StartExecution failed ({aws.describe_error(exc)}); lock released, send the "
                "same rollout id again",
            )
            failed["status"] = r.FAILED
            if not self.record.write(failed, expect_seq=attempt["seq"]):
                return self.record.current()  # it did start: its first tick moved the record
            self.notifier.notify("canary rollout could not start", failed)
            raise StartFailed(failed["last_reason"]) from None
        return attempt

    def start_driver(self, state: RolloutState) -> RolloutState | None:
        """An execution that ticks a pending rollback to its end even if the rollout's own
        execution has stopped; a second one alive at the same time only sees duplicate seqs.
        Returns the record naming it (or, when another writer moved the record first, the record
        as it is: an execution is ticking it), None when it could not be started (the record
        then names the execution it named before)."""
        if not self.s.state_machine_arn:
            return state
        name = f"{state['rollout_id'][:60]}-rb-{int(self.clock())}"
        try:
            new = self.hand_to(state, name, f"execution {name} drives the rollback")
        except aws.AWS_ERRORS as exc:
            self.name_again(driver(state), name, exc)
            return None
        return new if new is not None else self.record.current()

    def name_again(self, previous: str, failed: str, exc: Exception) -> RolloutState:
        """StartExecution of ``failed`` failed after the record named it: name ``previous``
        again (if nobody moved the record since), so that its end is still noticed."""
        print(f"StartExecution {failed} failed: {aws.describe_error(exc)}")
        current = self.record.current()
        if current.get("execution") != failed:
            return current
        back = store.handed_on(
            current,
            previous,
            f"StartExecution {failed} failed ({aws.describe_error(exc)}); {previous} drives it",
            int(self.clock()),
        )
        return back if self.record.write(back, expect_seq=current["seq"]) else self.record.current()
