"""The controller's clients and its I/O: the recorded state (conditional writes), the AWS reads
and writes it delegates to ``aws.py``, the state machine's executions and SNS notifications.

No decision is taken here: ``decisions.py`` applies ``rules.decide``'s answers, ``handler.py``
serves the actions. The lock's compare-and-set is ``store.save``'s conditional write.

Every failure of a record write is handled in :meth:`ControllerIO._write`: a lost condition
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
import time
from collections.abc import Callable
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from . import aws, capture, probes, store
from . import rules as r
from .names import RolloutStatus
from .settings import Settings, StartFailed
from .shadow_compare import LikeLoads, compare, minute_loads
from .shadow_stage import CloudWatchErrors, Ground, ShadowEvidence
from .state import RecordedDecision, RolloutState

#: Pauses before each further attempt of a record write that DynamoDB throttled, failed (5xx) or
#: did not answer: exponential backoff, 6.2 s in all (botocore's own retries come inside each
#: attempt), well inside the controller Lambda's 60 s timeout.
WRITE_BACKOFF_SECONDS = (0.2, 0.4, 0.8, 1.6, 3.2)
#: What keeps the shadow comparison from its data: any AWS failure (S3 AccessDenied, KMS, no
#: answer) and a capture that is not what data capture writes.
CAPTURE_READ_ERRORS: tuple[type[Exception], ...] = (*aws.AWS_ERRORS, capture.CaptureError)


def is_conflict(exc: ClientError) -> bool:
    """DynamoDB refused a conditional write: another writer moved the record first."""
    return exc.response["Error"]["Code"] == "ConditionalCheckFailedException"


def _same(a: Any, b: Any) -> bool:
    """Two records alike as DynamoDB stores them (tuples come back as lists)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


class ControllerIO:
    def __init__(
        self,
        settings: Settings,
        *,
        clock: Any = time.time,
        sleep: Callable[[float], Any] = time.sleep,
        **clients: Any,
    ) -> None:
        self.s = settings
        self.clock = clock
        #: The backoff between attempts of a record write (the tests' clock moves instead).
        self.sleep = sleep
        self.sm = clients.get("sagemaker") or boto3.client("sagemaker")
        self.cw = clients.get("cloudwatch") or boto3.client("cloudwatch")
        self.sns = clients.get("sns") or boto3.client("sns")
        self.sfn = clients.get("stepfunctions") or boto3.client("stepfunctions")
        self.aas = clients.get("application-autoscaling") or boto3.client("application-autoscaling")
        self.s3 = clients.get("s3") or boto3.client("s3")
        #: The shadow stage's probes (``probes``): no retries, short timeouts.
        self.runtime = clients.get("sagemaker-runtime") or boto3.client(
            "sagemaker-runtime", config=probes.RUNTIME_CONFIG
        )
        ddb = clients.get("dynamodb") or boto3.resource("dynamodb")
        self.table = ddb.Table(settings.table_name)
        #: The shadow config's shadow count (its peak size) by config name, once read
        #: (``decisions``); None: the config has no such shadow variant.
        self._shadow_peaks: dict[str, int | None] = {}

    # ------------------------------------------------------------------ state

    def load(self) -> RolloutState | None:
        item = self.table.get_item(Key={"endpoint_name": self.s.endpoint_name}, ConsistentRead=True)
        return store.plain(item.get("Item"))

    def _current(self) -> RolloutState:
        """The record after a lost conditional write (which proves that one exists)."""
        current = self.load()
        assert current is not None
        return current

    def _save(self, state: RolloutState, *, expect_seq: int | None) -> None:
        store.save(self.table, state, expect_seq=expect_seq)

    def _write(self, state: RolloutState, *, expect_seq: int | None) -> bool:
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

    def _decide(self, state: RolloutState, decision: RecordedDecision, reason: str) -> RolloutState:
        return store.record(state, decision, reason, int(self.clock()))

    def _fresh(
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
        lock (``_write(..., expect_seq=None)``). Its execution is named after it; ``obs``: the
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
        return self._decide(state, decision, reason)

    def _result(
        self, state: RolloutState, *, duplicate: bool = False, wait: int = 0
    ) -> dict[str, Any]:
        return store.summary(
            state, check_seconds=self.s.rules.check_seconds, duplicate=duplicate, wait=wait
        )

    # ------------------------------------------------------------------ AWS

    def observe(self, *, alarms: bool = True) -> r.Observation:
        """DescribeEndpoint, and DescribeAlarms unless ``alarms`` is False (a rollback does not
        read them, so an alarm that cannot be read does not hold a rollback up)."""
        return aws.observe(
            self.sm, self.cw, self.s.endpoint_name, self.s.alarm_names if alarms else (),
            primary=self.s.primary_variant, canary=self.s.canary_variant,
        )  # fmt: skip

    def evidence(self, start: int, end: int) -> r.Evidence:
        """GetMetricData; a failure of any kind is no evidence (the step is held, and rolls back
        after ``evidence_timeout_seconds`` with the failure as its reason), never health."""
        try:
            return aws.evidence(
                self.cw, self.s.endpoint_name, start, end,
                primary=self.s.primary_variant, canary=self.s.canary_variant,
            )  # fmt: skip
        except aws.AWS_ERRORS as exc:
            print(f"GetMetricData failed: {aws.describe_error(exc)}")
            return r.Evidence(0.0, 0.0, 0.0, 0.0, error=aws.describe_error(exc))

    def shadow_ground(
        self, start: int, end: int, probes_sent_at: int | None = None, probes_said: str = ""
    ) -> Ground:
        """What the shadow stage stands on over ``[start, end]`` (``shadow_stage``): data
        capture's status (DescribeEndpoint ``DataCaptureConfig``: ``CaptureStatus`` Started or
        Stopped, "whether data capture is currently functional", API reference,
        https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DataCaptureConfigSummary.html),
        the shadow variant's instances in
        service (DescribeEndpoint ``ShadowProductionVariants``), capture objects of both variants
        (``capture.objects_written``), and both variants' Invocations and Invocation5XXErrors
        (CloudWatch, ``aws.invocation_sums``: the error rate per variant, which capture alone
        does not give: an error answer may not be captured), and the stage's probes
        (:meth:`_probe_ground`: sent when ``probes_sent_at`` is None, else looked for in both
        variants' capture; ``probes_said``: what became of them when sent). A read that fails is
        missing too, named with its error."""
        shadow = self.s.shadow
        assert shadow is not None
        ep, variants = self.s.endpoint_name, (self.s.primary_variant, shadow.shadow_variant)
        missing: list[str] = []
        seen: list[str] = []
        try:
            described = self.sm.describe_endpoint(EndpointName=ep)
        except aws.AWS_ERRORS as exc:
            described = {}
            missing.append(f"the endpoint unread ({aws.describe_error(exc)})")
        if described:
            summary = described.get("DataCaptureConfig") or {}
            status = summary.get("CaptureStatus", "not configured")
            seen.append(f"data capture {status}")
            if status != "Started" or not summary.get("EnableCapture"):
                missing.append(f"data capture is {status}, not Started")
            live = [v for v in described.get("ShadowProductionVariants") or []
                    if v["VariantName"] == shadow.shadow_variant]  # fmt: skip
            serving = int(live[0].get("CurrentInstanceCount") or 0) if live else 0
            seen.append(f"{shadow.shadow_variant} {serving} instances in service")
            if not serving:
                missing.append(f"no {shadow.shadow_variant} instance in service")
        for variant in variants:
            try:
                n = capture.objects_written(self.s3, shadow.capture_uri, ep, variant, start, end)
            except aws.AWS_ERRORS as exc:
                missing.append(f"{variant} capture unread ({aws.describe_error(exc)})")
                continue
            seen.append(f"{variant} {n} capture objects")
            if n == 0:
                missing.append(f"no capture object of {variant} yet")
        try:
            sums = aws.invocation_sums(self.cw, ep, variants, start, end)
        except aws.AWS_ERRORS as exc:
            missing.append(f"CloudWatch invocations unread ({aws.describe_error(exc)})")
            sums = {}
        for variant in variants if sums else ():
            calls, errors = sums[(variant, "Invocations")], sums[(variant, "Invocation5XXErrors")]
            if calls > 0:
                seen.append(f"{variant} {calls:g} invocations, 5XX {100 * errors / calls:.3g} %")
            else:
                missing.append(f"no CloudWatch Invocations of {variant} yet")
        if probes_sent_at is None:
            return self._send_probes(end, missing, seen)
        self._probe_ground(probes_sent_at, end, missing, seen)
        if missing and probes_said:
            seen.append(f"probes sent: {probes_said}")
        return Ground(tuple(missing), ", ".join(seen))

    def _probe_count(self) -> int:
        shadow = self.s.shadow
        assert shadow is not None
        return probes.probe_count(shadow.sample_percent, shadow.capture_percent)

    def _send_probes(self, now: int, missing: list[str], seen: list[str]) -> Ground:
        """The stage's probes sent (``probes.send``), recorded with ``now`` (their ids derive
        from it). A probe SageMaker or the model refused ends the stage at once: users' requests
        of that kind are refused on the shadow config too."""
        shadow = self.s.shadow
        assert shadow is not None
        n = self._probe_count()
        ids = probes.probe_ids(self.s.endpoint_name, now, n)
        sent = probes.send(self.runtime, self.s.endpoint_name, ids, clock=self.clock)
        chance = probes.false_failure_chance(shadow.sample_percent, shadow.capture_percent, n)
        said = f"{sent.summary(n)}; false-failure chance at most {chance:.2g}"
        print(f"shadow stage probes: {said}")
        refused = [
            f"SageMaker refused {len(sent.refused[kind])} of {n} {kind} probes on the shadow "
            f"config ({sent.refused[kind][0]}): users' {kind} requests are refused there too"
            for kind in probes.KINDS
            if sent.refused[kind]
        ]
        missing.append("probes sent now, not yet looked for in capture")
        return Ground(
            tuple(missing), ", ".join(seen), refused="; ".join(refused) or None,
            record={"shadow_probes_sent_at": now, "shadow_probes": said},
        )  # fmt: skip

    def _probe_ground(self, sent_at: int, end: int, missing: list[str], seen: list[str]) -> None:
        """Both kinds of probe sent at ``sent_at`` found in both variants' capture
        (``capture.probes_found``): a kind none of whose probes a variant's capture holds is
        missing, named."""
        shadow = self.s.shadow
        assert shadow is not None
        ids = probes.probe_ids(self.s.endpoint_name, sent_at, self._probe_count())
        wanted = {i for kind in probes.KINDS for i in ids[kind]}
        for variant in (self.s.primary_variant, shadow.shadow_variant):
            try:
                found, read = capture.probes_found(
                    self.s3, shadow.capture_uri, self.s.endpoint_name, variant, sent_at, end,
                    wanted,
                )  # fmt: skip
            except aws.AWS_ERRORS as exc:
                missing.append(f"{variant} probes unread ({aws.describe_error(exc)})")
                continue
            counts = {kind: len(found & set(ids[kind])) for kind in probes.KINDS}
            seen.append(
                f"{variant} capture holds {counts['whole']} whole and {counts['streamed']} "
                f"streamed probes ({read} objects read)"
            )
            missing.extend(
                f"no {kind} probe in the {variant}'s capture" for kind, n in counts.items() if not n
            )

    def shadow_evidence(self, start: int, end: int) -> ShadowEvidence:
        """Both variants' captured answers over ``[start, end]`` compared per adapter
        (``shadow_compare.compare``). Data that cannot be read (an S3 or KMS error of any kind, no
        answer, a capture line that is not what data capture writes) is no comparison: the stage
        holds, and fails past its max_minutes naming the failure, never passes."""
        shadow = self.s.shadow
        assert shadow is not None
        read = {}
        try:
            for variant in (self.s.primary_variant, shadow.shadow_variant):
                read[variant] = capture.read_variant(
                    self.s3, shadow.capture_uri, self.s.endpoint_name, variant, start, end
                )
        except CAPTURE_READ_ERRORS as exc:
            print(f"shadow comparison could not read its data: {aws.describe_error(exc)}")
            return ShadowEvidence(None, error=aws.describe_error(exc))
        try:
            minutes = aws.shadow_minutes(
                self.cw, self.s.endpoint_name, self.s.primary_variant, shadow.shadow_variant,
                start, end,
            )  # fmt: skip
        except aws.AWS_ERRORS as exc:
            print(f"shadow comparison could not read CloudWatch: {aws.describe_error(exc)}")
            return ShadowEvidence(None, error=f"ModelLatency: {aws.describe_error(exc)}")
        variants = (self.s.primary_variant, shadow.shadow_variant)
        try:
            sums = aws.invocation_sums(self.cw, self.s.endpoint_name, variants, start, end)
        except aws.AWS_ERRORS as exc:
            print(f"shadow comparison could not read CloudWatch: {aws.describe_error(exc)}")
            return ShadowEvidence(None, error=f"Invocation5XXErrors: {aws.describe_error(exc)}")
        primary_v, shadow_v = variants
        errors = CloudWatchErrors(
            primary_calls=sums[(primary_v, "Invocations")],
            primary_errors=sums[(primary_v, "Invocation5XXErrors")],
            shadow_calls=sums[(shadow_v, "Invocations")],
            shadow_errors=sums[(shadow_v, "Invocation5XXErrors")],
            max_increase_percent=shadow.thresholds.max_error_rate_increase_percent,
            min_calls=shadow.thresholds.min_requests_per_adapter,
        )
        # the shadow variant is the canary's model on the canary's instance type
        loads = LikeLoads.of(minute_loads(minutes), self.s.rules.plan.canary_per_primary)
        primary, _ = read[self.s.primary_variant]
        answers, _ = read[shadow.shadow_variant]
        said = ", ".join(f"{v} {len(a)} answers in {n} objects" for v, (a, n) in read.items())
        return ShadowEvidence(
            compare(primary, answers, shadow.thresholds, loads=loads),
            read=f"read: {said}",
            minutes=minutes,
            loads=loads,
            errors=errors,
        )

    def set_canary_weight(self, percent: int) -> None:
        aws.set_weights(
            self.sm,
            self.s.endpoint_name,
            {self.s.canary_variant: percent, self.s.primary_variant: 100 - percent},
        )

    def notify(self, subject: str, state: RolloutState) -> None:
        """Best effort: the decision is already applied and recorded; a failed publish (an error
        answer or none at all) is logged instead of failing the tick (which would make the state
        machine roll back again)."""
        message = {k: state.get(k) for k in store.SUMMARY_KEYS}
        try:
            self.sns.publish(
                TopicArn=self.s.topic_arn,
                Subject=f"[{self.s.endpoint_name}] {subject}"[:100],
                Message=json.dumps(message, indent=2, default=str),
            )
        except aws.AWS_ERRORS as exc:
            print(f"notification to {self.s.topic_arn} failed: {aws.describe_error(exc)}")

    # ------------------------------------------------------------------ executions

    @staticmethod
    def driver(state: RolloutState) -> str:
        """The name of the execution that drives ``state``'s rollout (a record written before the
        name was recorded: the rollout id, the name its start used)."""
        return str(state.get("execution") or state["rollout_id"])

    def _hand_to(self, state: RolloutState, name: str, reason: str) -> RolloutState | None:
        """Record ``name`` as the execution that drives the rollout, then start it at the recorded
        seq. The record comes first, so an execution that starts is always the recorded one (its
        end is then noticed: ``execution-ended``). None when another writer moved the record
        first (nothing started); AWS errors of StartExecution raise, the new record written."""
        new = store.handed_on(state, name, reason, int(self.clock()))
        if not self._write(new, expect_seq=state["seq"]):
            return None
        aws.start_execution(self.sfn, self.s.state_machine_arn, name, new)
        return new

    def _start_execution(self, state: RolloutState) -> RolloutState:
        """Start the execution ``state`` names; returns the record as it stands after.

        Any failure (an error answer or none: a dropped connection, a timeout) releases the lock
        (FAILED, ``start-failed``, notified) and raises StartFailed: send the same rollout id again.
        ExecutionAlreadyExists means an earlier attempt whose answer was lost did start it and it
        has ended since: a new name is recorded and started. If the failure record loses its
        conditional write, the execution did start and its first tick moved the record: the
        rollout runs."""
        if not self.s.state_machine_arn:
            return state
        attempt = state
        try:
            try:
                aws.start_execution(self.sfn, self.s.state_machine_arn, self.driver(state), state)
            except ClientError as exc:
                if aws.error_code(exc) != "ExecutionAlreadyExists":
                    raise
                name = f"{state['rollout_id'][:60]}-{int(self.clock())}"
                reason = f"execution name {self.driver(state)} was taken by an earlier attempt"
                attempt = store.handed_on(state, name, reason, int(self.clock()))
                if not self._write(attempt, expect_seq=state["seq"]):
                    return self._current()
                aws.start_execution(self.sfn, self.s.state_machine_arn, name, attempt)
        except aws.AWS_ERRORS as exc:
            failed = self._decide(
                attempt,
                "start-failed",
                f"StartExecution failed ({aws.describe_error(exc)}); lock released, send the "
                "same rollout id again",
            )
            failed["status"] = r.FAILED
            if not self._write(failed, expect_seq=attempt["seq"]):
                return self._current()  # it did start: its first tick moved the record
            self.notify("canary rollout could not start", failed)
            raise StartFailed(failed["last_reason"]) from None
        return attempt

    def _start_driver(self, state: RolloutState) -> RolloutState | None:
        """An execution that ticks a pending rollback to its end even if the rollout's own
        execution has stopped; a second one alive at the same time only sees duplicate seqs.
        Returns the record naming it (or, when another writer moved the record first, the record
        as it is: an execution is ticking it), None when it could not be started (the record
        then names the execution it named before)."""
        if not self.s.state_machine_arn:
            return state
        name = f"{state['rollout_id'][:60]}-rb-{int(self.clock())}"
        try:
            new = self._hand_to(state, name, f"execution {name} drives the rollback")
        except aws.AWS_ERRORS as exc:
            self._name_again(self.driver(state), name, exc)
            return None
        return new if new is not None else self._current()

    def _name_again(self, previous: str, failed: str, exc: Exception) -> RolloutState:
        """StartExecution of ``failed`` failed after the record named it: name ``previous``
        again (if nobody moved the record since), so that its end is still noticed."""
        print(f"StartExecution {failed} failed: {aws.describe_error(exc)}")
        current = self._current()
        if current.get("execution") != failed:
            return current
        back = store.handed_on(
            current,
            previous,
            f"StartExecution {failed} failed ({aws.describe_error(exc)}); {previous} drives it",
            int(self.clock()),
        )
        return back if self._write(back, expect_seq=current["seq"]) else self._current()
