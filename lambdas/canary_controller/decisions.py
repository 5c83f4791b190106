"""A decision of ``rules.decide`` applied: the AWS calls of a step forward (capacity first,
weight second), the rollback's own steps (weight 0 first, bounds second), SageMaker's refusals
(retried on the next tick), and the conditional write that records each.

Each weight or bounds call handles both kinds of failure (``aws.AWS_ERRORS``): what
``aws.retry_later`` calls transient (a refusal while Updating, throttling, a 5xx, no answer) is
retried on the next tick and counted (a RUNNING rollout rolls back at ``MAX_REFUSALS``); anything
else (AccessDenied) raises, so the state machine retries the tick, then rolls back, and an
execution that cannot is noticed when it ends (``execution-ended``).

Intent before action: a step forward (``scale``, ``shift``) is written to the record as its
``intent`` (``rules.intent``: the target weight or instances, the step, the endpoint config)
before its first AWS call, and cleared by the record of the step made. Whatever stops the tick
in between (the record write throttled past its retries, a timeout or a dropped connection, the
Lambda's own timeout), the next tick finds the intent: if DescribeEndpoint shows its weight on
its endpoint config, SageMaker took it, and the step is recorded as made (late) and the rollout
carries on; if it shows that the call did not land, the tick decides again. Either way its own
shift is not taken for a change made under the rollout (``rules.endpoint_changed``). A tick whose
calls were made but whose record could not be written ends normally at the intent's ``seq``, so
that the state machine's next tick is the one that resolves it. A rollback's calls need no
intent of their own: ROLLING_BACK is recorded before the first of them, and each (weight 0, the
bounds) is decided again from DescribeEndpoint on every tick.

A rollback is recorded (ROLLING_BACK) before it acts; a write lost to a concurrent tick is
retried on the fresh record, so an operator's rollback cannot be lost or undone by the next tick.
It gives the primary its capacity back before the canary's weight moves (``raise-primary``,
``rules.decide``): the primary's scalable target is read (DescribeScalableTargets), its minimum
raised and its desired count set. A capacity call that fails moves the weight at once
(availability first: a partly sized primary beats a broken canary), and says so; a desired
count SageMaker refuses (Updating) is asked for again on the next tick. Once the canary's weight
is 0 its bounds are restored, then the primary's put back (``rules.primary_restore_bounds``).

Every way out of a rollout puts back the bounds it raised: a rollback's restore (above); an
abandoned rollout (the endpoint Failed or gone), a rollback past its deadline (``timeout``) and a
rollout nothing drives any more (``handler``) through :meth:`DecisionApplier.release_bounds`. A
COMPLETED rollout keeps the last step's bounds: its canary carries 100 % of the traffic until the
promotion's deploy replaces them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import aws, shadow_stage, store
from . import rules as r
from .endpoint_io import EndpointIO
from .notifier import Notifier
from .record import RolloutRecord
from .settings import RolloutConflict, Settings
from .shadow_io import ShadowIO
from .state import DecisionKind, Intent, RolloutState

#: Attempts of a rollback's conditional write against concurrent ticks before giving up.
WRITE_ATTEMPTS = 5
#: Decisions whose AWS calls are recorded as the record's intent before they are made.
INTENT_KINDS = ("scale", "shift", *r.STAGE_MOVES)
#: What the operator is told when a rollout ends by each decision (a ``timeout`` names what the
#: rollback waited for: ``rules.rollback_overdue``).
END_SUBJECTS = {
    "abort": "canary rollout abandoned",
    "timeout": "canary rollback timed out",
    "complete": "canary rollout complete: promote the canary",
    "restore": "canary rolled back",
    "shadow-end": "release stopped in the shadow stage",
}
#: A release that ended in the shadow stage: its subject names how and why ("release stopped in
#: the shadow stage: shadow comparison fail: recs: error rate ...", or FAILED past max_minutes).
SHADOW_END_SUBJECT = END_SUBJECTS["shadow-end"] + " ({}): {}"
#: What a rollback was made of (``rollback_reason``) follows its subject, cut to SNS's 100
#: characters: "canary rolled back: capacity shortfall: ..."
ROLLBACK_SUBJECT = END_SUBJECTS["restore"] + ": {}"
#: ...and a rollback that moved the weight with the primary short of its instances says so first
#: (the body's ``primary_capacity`` says it whole): "canary rolled back, primary had 2 of 8
#: needed: ...", the instances the primary had when the weight moved and those it needed.
ROLLBACK_SHORT_SUBJECT = END_SUBJECTS["restore"] + ", primary had {} of {} needed: {}"


class DecisionApplier:
    """Applies the decision core's answers (``rules.decide``, ``shadow_stage.decide``) through the
    endpoint's adapter, the shadow stage's and the record, and tells the operator how a rollout
    ended. Composed of its parts; it holds no client of its own."""

    def __init__(
        self,
        settings: Settings,
        *,
        record: RolloutRecord,
        endpoint: EndpointIO,
        shadow: ShadowIO,
        notifier: Notifier,
        clock: Callable[[], float],
    ) -> None:
        self.s = settings
        self.record = record
        self.endpoint = endpoint
        self.shadow = shadow
        self.notifier = notifier
        self.clock = clock

    def advance(self, state: RolloutState) -> dict[str, Any]:
        now = int(self.clock())
        # The watched alarms are the canary's: no canary serves in the shadow stage.
        alarms = state["status"] == r.RUNNING and not shadow_stage.in_shadow(state)
        obs = self.endpoint.observe(alarms=alarms)
        recorded = state.get("intent")
        if recorded:
            resolved = self._resolve_intent(state, recorded, obs)
            if resolved is None:
                return self.record.result(self.record.current(), duplicate=True)
            state = resolved
        return self._apply(state, self._decide_next(state, obs, now), now, obs)

    def _decide_next(self, state: RolloutState, obs: r.Observation, now: int) -> r.Decision:
        """``shadow_stage.decide`` while the rollout is in its shadow stage, else
        ``rules.decide``."""
        if shadow_stage.in_shadow(state):
            if self.s.shadow is None:
                return r.Decision(
                    "abort",
                    "the record is in the shadow stage but this controller has no SHADOW_STAGE "
                    "(a deploy removed rollout.shadow mid-stage): make canary-status, then "
                    "make canary-rollback after restoring it",
                )
            entering = state.get("shadow_requested_at") is None
            sent_at, said = state.get("shadow_probes_sent_at"), state.get("shadow_probes", "")

            def ground(start: int, end: int) -> shadow_stage.Ground:
                return self.shadow.ground(start, end, sent_at, said)

            return shadow_stage.decide(
                state, obs, self.s.shadow, now, self.shadow.evidence, self.s.rules.check_seconds,
                self.shadow.fleet() if entering else None, ground,
            )  # fmt: skip
        return r.decide(state, obs, self.s.rules, now, self.endpoint.evidence)

    def _resolve_intent(
        self, state: RolloutState, recorded: Intent, obs: r.Observation
    ) -> RolloutState | None:
        """The record's intent (``recorded``), as DescribeEndpoint shows it
        (``rules.intent_landed``): landed, the step is recorded as made at the intent's time
        (written now; None when another writer moved the record first); not landed, the intent
        is dropped (the tick decides again); not known yet (the endpoint is Updating), it stays."""
        if state["status"] != r.RUNNING:  # a rollback decides from DescribeEndpoint alone
            return {**state, "intent": None}
        landed = r.intent_landed(recorded, obs)
        if landed is None:
            return state
        if not landed:
            return {**state, "intent": None}
        d = r.intent_decision(recorded)
        new = self.record.decide(
            state, d.kind, f"{d.reason} (recorded by the next tick: the tick that asked for it "
            "stopped before its record was written)",
        )  # fmt: skip
        new.update(r.transition(state, d, int(recorded["at"])))
        new.update({"intent": None, "refusals": 0})
        return new if self.record.write(new, expect_seq=state["seq"]) else None

    def _apply(
        self, state: RolloutState, d: r.Decision, now: int, obs: r.Observation | None = None
    ) -> dict[str, Any]:
        seq = state["seq"]
        if d.kind == "rollback":
            return self.begin_rollback(state, d.reason, d.record)
        if d.kind == "raise-primary":
            return self._raise_primary(state, d, now)
        if d.kind in ("abort", "timeout"):
            return self._give_up(state, d, now, obs)
        intended, before = d.kind in INTENT_KINDS and obs is not None, state
        if intended:
            assert obs is not None
            # what the decision writes besides (the shadow comparison's verdict) goes with it
            pending = store.intending(
                {**state, **(d.record or {})}, r.intent(state, d, obs, now), now
            )
            if not self.record.write(pending, expect_seq=seq):
                return self.record.result(self.record.current(), duplicate=True)
            state, seq = pending, pending["seq"]
        new = self.record.decide(state, d.kind, d.reason)
        if d.kind in END_SUBJECTS:
            return self._end(state, d, new, seq, now)
        try:
            self._move(state, d, new, now)
        except aws.AWS_ERRORS as exc:
            if d.kind in r.STAGE_MOVES and aws.refused_for_good(exc):
                return self._move_refused(state, d, exc, now, obs)
            if not aws.retry_later(exc):
                if intended:
                    self._take_back(before, state, exc)
                raise
            return self._refused(state, d, exc)
        if d.kind in ("scale", "shift", "reapply", *r.STAGE_MOVES):
            new["refusals"] = 0
        if not intended:
            return self._store(new, seq, wait=d.wait_seconds, moved_weight=d.kind == "shift")
        new["intent"] = None
        try:
            return self._store(new, seq, wait=d.wait_seconds, moved_weight=d.kind == "shift")
        except aws.AWS_ERRORS as exc:
            return self._unrecorded(state, d, exc)

    def _end(
        self, state: RolloutState, d: r.Decision, new: RolloutState, seq: int, now: int
    ) -> dict[str, Any]:
        """A decision that ends the rollout (END_SUBJECTS): a restore's canary bounds and
        primary, a shadow end's canary scaling, then the record finished with its subject. A
        refusal AWS may lift later leaves the record as it was (retried at the next tick)."""
        if d.kind == "restore":
            assert d.bounds is not None
            try:
                self.endpoint.set_bounds(self.s.canary_variant, *d.bounds)
                primary = self._restore_primary(state)
            except aws.AWS_ERRORS as exc:
                if not aws.retry_later(exc):
                    raise
                return self._refused(state, d, exc)
            new["last_reason"] = f"{state.get('rollback_reason')}; then {d.reason}{primary}"
        elif d.kind == "shadow-end":
            try:
                again = self.shadow.own_canary_scaling()
            except aws.AWS_ERRORS as exc:
                if not aws.retry_later(exc):
                    raise
                return self._refused(state, d, exc)
            new["last_reason"] = f"{state.get('rollback_reason')}; then {d.reason}{again}"
        new.update(r.transition(state, d, now))
        return self._finish(new, seq, self._end_subject(state, d.kind))

    def _move(self, state: RolloutState, d: r.Decision, new: RolloutState, now: int) -> None:
        """The AWS call of a decision that moves the rollout on (none for bake, wait, hold),
        and its transition into ``new``; an AWS error propagates to :meth:`_apply`."""
        canary = self.s.canary_variant
        if d.kind == "scale":
            assert d.bounds is not None and d.instances is not None
            new.update(r.transition(state, d, now))
            self.endpoint.set_bounds(canary, *d.bounds)
            try:
                self.endpoint.set_instances(canary, d.instances)
            except aws.AWS_ERRORS as exc:
                if not aws.retry_later(exc):
                    raise
                new["last_reason"] += (
                    f"; desired count not set ({aws.describe_error(exc)}), "
                    "the raised MinCapacity scales the canary"
                )
        elif d.kind == "shift":
            assert d.percent is not None
            self.endpoint.set_canary_weight(d.percent)
            new.update(r.transition(state, d, now))
        elif d.kind == "reapply":
            self.endpoint.set_canary_weight(0)
            new.update(r.transition(state, d, now))
        elif d.kind in r.STAGE_MOVES:
            assert d.endpoint_config is not None
            if d.kind == "enter-shadow":
                new["last_reason"] += self.shadow.release_canary_scaling()
                self.shadow.size(d)
            self.endpoint.update_endpoint(d.endpoint_config)
            new.update(r.transition(state, d, now))
        elif d.kind == "canary-stage":
            new["last_reason"] += self.shadow.own_canary_scaling()
            new.update(r.transition(state, d, now))
        else:  # bake, wait, hold: no AWS call
            new.update(r.transition(state, d, now))

    def _move_refused(
        self, state: RolloutState, d: r.Decision, exc: Exception, now: int,
        obs: r.Observation | None,
    ) -> dict[str, Any]:  # fmt: skip
        """SageMaker refused a stage move for good (``aws.refused_for_good``: a ValidationException
        that is not "in progress"): asking again would only be refused again, so the stage ends
        now, naming AWS's message. Into the stage, nothing moved: the release ends FAILED by way
        of the rollback (the endpoint is still on the canary config: ``shadow-end``). Out of it,
        the endpoint stays where it is: FAILED, the lock released, the operator told how to move
        it back (``shadow_stage.move_back``)."""
        said = aws.describe_error(exc)
        why = f"SageMaker refused the move to {d.endpoint_config}: {said}"
        print(why)
        if d.kind == "enter-shadow" and state["status"] == r.RUNNING:
            return self.begin_rollback(state, why, {"shadow_end": r.FAILED})
        live = obs.endpoint_config_name if obs is not None else "its config"
        back = shadow_stage.move_back(self.s.endpoint_name, state.get("canary_config_name"))
        end = r.Decision(
            "abort",
            f"{why}; the endpoint stays on {live}: recorded FAILED, lock released; once the "
            f"cause is fixed, move it back with {back}",
            subject=f"shadow stage: SageMaker refused the move back: {said}",
        )
        return self._give_up(state, end, now, obs)

    def _take_back(self, before: RolloutState, pending: RolloutState, exc: Exception) -> None:
        """An AWS call of an intent failed in a way that is not "not now" (AccessDenied, a missing
        resource, no credentials: it applied nothing) and the tick fails: the record goes back to
        what it was before the intent, its ``seq`` too, so the state machine's retry of the same
        tick is not taken for a redelivery (which would answer without failing, and the retries
        that end in the catch-all rollback would never count). Writing an older ``seq`` again is
        safe: the record is the very version it was, and only a writer that read that version
        expects it. If even this write fails, the intent stays and the next tick decides again."""
        intent = pending["intent"]
        assert intent is not None  # written (store.intending) before the call that failed
        kind = intent["decision"]
        print(f"{kind} failed ({aws.describe_error(exc)}): its intent taken back")
        try:
            self.record.write(before, expect_seq=pending["seq"])
        except aws.AWS_ERRORS as again:
            print(f"intent not taken back ({aws.describe_error(again)})")

    def _unrecorded(self, pending: RolloutState, d: r.Decision, exc: Exception) -> dict[str, Any]:
        """The AWS calls of ``d`` were made but their record could not be written (``_write``
        gave up): the tick ends at the intent's ``seq`` (the record as it stands), so the next
        tick records the step from the intent (``_resolve_intent``)."""
        why = f"{d.kind} made, its record not written ({aws.describe_error(exc)}): the next " \
            "tick records it from the intent written before it"  # fmt: skip
        print(why)
        return {**self.record.result(pending, wait=d.wait_seconds), "last_reason": why}

    def _give_up(
        self, state: RolloutState, d: r.Decision, now: int, obs: r.Observation | None
    ) -> dict[str, Any]:
        """``abort`` (the endpoint failed or is gone) and ``timeout`` (a rollback past its
        deadline): FAILED, which releases the lock, the bounds the rollout raised put back as far
        as is safe (:meth:`release_bounds`), the operator told (a timeout names what it waited
        for and how long)."""
        new = self.record.decide(state, d.kind, d.reason)
        new.update(r.transition(state, d, now))
        new["last_reason"] += self.release_bounds(state, obs)
        new["intent"] = None
        return self._finish(new, state["seq"], d.subject or END_SUBJECTS[d.kind])

    def release_bounds(self, state: RolloutState, obs: r.Observation | None) -> str:
        """Put back the scaling bounds of a rollout that ends without a rollback's restore;
        returns what to add to the reason. Best effort: a failed call is said, never raised.

        The canary gets its configured minimum back (a step's raised MinCapacity would keep its
        instances, and block any scale-in, after the rollout is over), and its configured maximum
        only once its weight is known to be 0: RegisterScalableTarget moves the current count
        into the new range (Application Auto Scaling API reference), so lowering the maximum
        would scale in a canary that may still take traffic; its own autoscaling sizes it within
        the range meanwhile. The primary's bounds a rollback raised are put back as its restore
        does (``rules.primary_restore_bounds``)."""
        if obs is not None and obs.endpoint_status == "NotFound":
            return "; no bounds restored: the endpoint is gone"
        plan, canary = self.s.rules.plan, self.s.canary_variant
        notes = []
        try:
            live = self.endpoint.bounds(canary)
            if live is not None:
                idle = obs is not None and obs.canary_weight == 0
                high = plan.canary_max if idle else max(plan.canary_max, live[1])
                if live != (plan.canary_min, high):
                    self.endpoint.set_bounds(canary, plan.canary_min, high)
                kept = "" if high == plan.canary_max else " (its maximum kept: it may take traffic)"
                notes.append(f"the canary's bounds back to {plan.canary_min}..{high}{kept}")
        except aws.AWS_ERRORS as exc:
            notes.append(f"the canary's bounds not restored ({aws.describe_error(exc)})")
        try:
            notes.append(self._restore_primary(state).removeprefix("; "))
        except aws.AWS_ERRORS as exc:
            notes.append(f"the primary's bounds not restored ({aws.describe_error(exc)})")
        return "".join(f"; {note}" for note in notes if note)

    def _refused(self, state: RolloutState, d: r.Decision, exc: Exception) -> dict[str, Any]:
        """AWS refused a weight or bounds change (endpoint Updating), or gave no answer: retry on
        the next tick. A shift without an answer may have landed: its percent is pending."""
        count = int(state.get("refusals", 0)) + 1
        msg = aws.describe_error(exc)
        if state["status"] == r.RUNNING and count >= r.MAX_REFUSALS:
            return self.begin_rollback(
                state, f"SageMaker refused (or did not answer) the {d.kind} {count} times: {msg}"
            )
        if state["status"] == r.ROLLING_BACK:
            asked = "weight 0" if d.kind in ("reapply", "rollback") else f"the {d.kind}"
            now = int(self.clock())
            late = r.rollback_overdue(
                state, self.s.rules, now, f"SageMaker to take {asked} ({aws.error_code(exc)})"
            )
            if late is not None:
                return self._give_up(state, late, now, None)
        what = "refused by SageMaker" if aws.answered(exc) else "got no answer (it may have landed)"
        new = self.record.decide(
            state, "wait", f"{d.kind} {what} ({msg}); retry {count} on the next tick"
        )
        new["refusals"] = count
        if d.kind in INTENT_KINDS and not aws.maybe_applied(exc):
            new["intent"] = None  # refused: nothing landed; otherwise the intent stays
        result = self._store(new, state["seq"], wait=self.s.rules.check_seconds)
        if state["status"] == r.ROLLING_BACK and count == r.MAX_REFUSALS:
            self.notifier.notify(f"canary rollback still refused after {count} attempts", new)
        return result

    def begin_rollback(
        self, state: RolloutState, reason: str, record: RolloutState | None = None
    ) -> dict[str, Any]:
        """Record ROLLING_BACK before acting; a write lost to a concurrent tick is retried on the
        fresh state, so an operator's rollback cannot be lost (or undone by the next tick).
        ``record``: what the decision writes besides (a shadow comparison's verdict, the status
        a release ended in the shadow stage takes)."""
        for _ in range(WRITE_ATTEMPTS):
            if state["status"] == r.ROLLING_BACK:
                return self.drive_rollback(state)
            if state["status"] not in r.LOCKED:
                return self.record.result(state)
            new = self.record.decide(state, "rollback", reason)
            new.update(record or {})
            new.update(
                {"status": r.ROLLING_BACK, "refusals": 0, "rollback_reason": reason, "intent": None}
            )
            new["rollback_started_at"] = new["updated_at"]  # its deadline counts from here
            if self.record.write(new, expect_seq=state["seq"]):
                return self.drive_rollback(new)
            state = self.record.current()
        raise RolloutConflict(f"could not record the rollback in {WRITE_ATTEMPTS} attempts; retry")

    def drive_rollback(self, state: RolloutState) -> dict[str, Any]:
        """As far as a rollback goes now: the primary's capacity first (``rules.decide``), then
        canary weight 0, tried at once even on an endpoint that is not InService (SageMaker refuses
        it while Updating; the ticks retry it), finishing at once if DescribeEndpoint already shows
        it. An endpoint that cannot be read gets weight 0 without the capacity step, as before."""
        now = int(self.clock())
        try:
            obs = self.endpoint.observe(alarms=False)
        except aws.AWS_ERRORS as exc:
            print(f"rollback without the primary's capacity step: {aws.describe_error(exc)}")
            return self._weight_now(state)
        d = self._decide_next(state, obs, now)
        if d.kind == "reapply" or (d.kind == "wait" and d.percent == 0):
            return self._weight_now({**state, **r.transition(state, d, now)})
        return self._apply(state, d, now, obs)

    def _weight_now(self, state: RolloutState) -> dict[str, Any]:
        try:
            self.endpoint.set_canary_weight(0)
        except aws.AWS_ERRORS as exc:
            if not aws.retry_later(exc):
                raise
            return self._refused(state, r.Decision("rollback", "weight 0"), exc)
        return self.advance(state)

    def _raise_primary(self, state: RolloutState, d: r.Decision, now: int) -> dict[str, Any]:
        """The primary's capacity for its full share, before the canary's weight moves: its
        scalable target's bounds (read, then raised; once per rollback) and its desired count
        (each tick while it is below the need). The raise is recorded before it is made, so a
        write lost to a concurrent tick raises nothing that the record would not put back. A
        failed bounds call moves the weight at once (availability first), the record saying why;
        a refused desired count is asked for again on the next tick (the raised minimum scales
        the primary meanwhile, if it has a target)."""
        assert d.primary is not None
        primary = self.s.primary_variant
        new = self.record.decide(state, d.kind, d.reason)
        new.update(r.transition(state, d, now))
        notes = []
        if "primary_bounds" not in state:
            try:
                live = self.endpoint.bounds(primary)
            except aws.AWS_ERRORS as exc:
                return self._primary_failed(state, new, exc)
            bounds = r.primary_raise_bounds(d.primary.need, live)
            new["primary_bounds"] = {
                "before": None if live is None else list(live),
                "set": None if bounds is None else list(bounds),
            }
            if bounds is not None:
                if not self.record.write(new, expect_seq=state["seq"]):
                    return self.record.result(self.record.current(), duplicate=True)
                state, new = new, self.record.decide(new, d.kind, d.reason)
                try:
                    self.endpoint.set_bounds(primary, *bounds)
                except aws.AWS_ERRORS as exc:
                    new["primary_bounds"] = {**new["primary_bounds"], "set": None}
                    return self._primary_failed(state, new, exc)
        if d.instances is not None:
            try:
                self.endpoint.set_instances(primary, d.instances)
            except aws.AWS_ERRORS as exc:
                notes.append(
                    f"desired count not set ({aws.describe_error(exc)}), asked for again on the "
                    "next tick"
                )
        if notes:
            new["last_reason"] = "; ".join([new["last_reason"], *notes])
        return self._store(new, state["seq"], wait=d.wait_seconds)

    def _primary_failed(
        self, state: RolloutState, new: RolloutState, exc: Exception
    ) -> dict[str, Any]:
        """A capacity call for the primary failed: recorded (``primary_raise_failed``), then the
        weight moves at once, the primary as it is (availability first)."""
        failure = aws.describe_error(exc)
        new["primary_raise_failed"] = failure
        new["last_reason"] = f"{new['last_reason']}; the primary's bounds could not be raised: " \
            f"{failure}; the canary's weight moves now"  # fmt: skip
        if not self.record.write(new, expect_seq=state["seq"]):
            return self.record.result(self.record.current(), duplicate=True)
        return self.drive_rollback(new)

    def _restore_primary(self, state: RolloutState) -> str:
        """Put back the primary's bounds a rollback raised (``rules.primary_restore_bounds``);
        returns what to add to the reason. AWS errors raise (the restore is retried)."""
        recorded = state.get("primary_bounds")
        if not recorded or not recorded.get("set"):
            return ""
        primary = self.s.primary_variant
        back, said = r.primary_restore_bounds(recorded, self.endpoint.bounds(primary))
        if back is not None:
            self.endpoint.set_bounds(primary, *back)
        return f"; {said}"

    @staticmethod
    def _end_subject(state: RolloutState, kind: DecisionKind) -> str:
        """The subject of a rollout's end; a rollback's names its reason, and first the primary's
        shortfall when the weight moved without all the instances it needed."""
        if kind == "shadow-end":
            how = state.get("shadow_end") or r.ROLLED_BACK
            return SHADOW_END_SUBJECT.format(how, state.get("rollback_reason") or "")
        if kind != "restore":
            return END_SUBJECTS[kind]
        reason, short = state.get("rollback_reason"), state.get("primary_shortfall")
        if short:
            return ROLLBACK_SHORT_SUBJECT.format(short[0], short[1], reason or "")
        return ROLLBACK_SUBJECT.format(reason) if reason else END_SUBJECTS[kind]

    def _store(
        self, new: RolloutState, seq: int, *, wait: int, moved_weight: bool = False
    ) -> dict[str, Any]:
        if self.record.write(new, expect_seq=seq):
            return self.record.result(new, wait=wait)
        current = self.record.current()
        if moved_weight and current["status"] in (r.ROLLING_BACK, r.ROLLED_BACK):
            # A rollback was recorded while this tick moved the weight: put it back at once
            # (the rollback's own ticks also check the live weight before finishing).
            try:
                self.endpoint.set_canary_weight(0)
            except aws.AWS_ERRORS as again:
                if not aws.retry_later(again):
                    raise
        return self.record.result(current, duplicate=True)

    def _finish(self, new: RolloutState, seq: int, subject: str) -> dict[str, Any]:
        result = self._store(new, seq, wait=0)
        if not result["duplicate"]:
            self.notifier.notify(subject, new)
        return result
