"""A decision of ``rules.decide`` applied: the AWS calls of a step forward (capacity first,
weight second), the rollback's own steps (weight 0 first, bounds second), SageMaker's refusals
(retried on the next tick), and the conditional write that records each.

Each weight or bounds call handles both kinds of failure (``aws.AWS_ERRORS``): what
``aws.retry_later`` calls transient (a refusal while Updating, throttling, a 5xx, no answer) is
retried on the next tick and counted (a RUNNING rollout rolls back at ``MAX_REFUSALS``); anything
else (AccessDenied) raises, so the state machine retries the tick, then rolls back, and an
execution that cannot is noticed when it ends (``execution-ended``). A shift whose call got no
answer may have landed: its percent is recorded as pending, so the next tick does not take its
own weight for a change made under it.

A rollback is recorded (ROLLING_BACK) before it acts; a write lost to a concurrent tick is
retried on the fresh record, so an operator's rollback cannot be lost or undone by the next tick.
"""

from __future__ import annotations

from typing import Any

try:  # tests, stacks and the simulator import the package; in Lambda this directory is the root
    from lambdas.canary_controller import aws
    from lambdas.canary_controller import rules as r
    from lambdas.canary_controller.controller_io import ControllerIO
    from lambdas.canary_controller.settings import RolloutConflict
except ImportError:  # pragma: no cover - the Lambda runtime
    import aws  # type: ignore[no-redef]
    import rules as r  # type: ignore[no-redef]
    from controller_io import ControllerIO  # type: ignore[no-redef]
    from settings import RolloutConflict  # type: ignore[no-redef]

#: Attempts of a rollback's conditional write against concurrent ticks before giving up.
WRITE_ATTEMPTS = 5
#: What the operator is told when a rollout ends by each decision.
END_SUBJECTS = {
    "abort": "canary rollout abandoned",
    "complete": "canary rollout complete: promote the canary",
    "restore": "canary rolled back",
}
#: What a rollback was made of (``rollback_reason``) follows its subject, cut to SNS's 100
#: characters: "canary rolled back: capacity shortfall: ..."
ROLLBACK_SUBJECT = END_SUBJECTS["restore"] + ": {}"


class DecisionApplier(ControllerIO):
    def _advance(self, state: dict[str, Any]) -> dict[str, Any]:
        now = int(self.clock())
        obs = self.observe(alarms=state["status"] == r.RUNNING)
        decision = r.decide(state, obs, self.s.rules, now, self.evidence)
        return self._apply(state, decision, now)

    def _apply(self, state: dict[str, Any], d: r.Decision, now: int) -> dict[str, Any]:
        seq, ep, canary = state["seq"], self.s.endpoint_name, self.s.canary_variant
        new = self._decide(state, d.kind, d.reason)
        if d.kind == "rollback":
            return self._begin_rollback(state, d.reason)
        if d.kind in END_SUBJECTS:
            if d.kind == "restore":
                assert d.bounds is not None
                try:
                    aws.set_bounds(self.aas, ep, canary, *d.bounds)
                except aws.AWS_ERRORS as exc:
                    if not aws.retry_later(exc):
                        raise
                    return self._refused(state, d, exc)
                new["last_reason"] = f"{state.get('rollback_reason')}; then {d.reason}"
            new.update(r.transition(state, d, now))
            subject = END_SUBJECTS[d.kind]
            if d.kind == "restore" and state.get("rollback_reason"):
                subject = ROLLBACK_SUBJECT.format(state["rollback_reason"])
            return self._finish(new, seq, subject)
        try:
            if d.kind == "scale":
                assert d.bounds is not None and d.instances is not None
                new.update(r.transition(state, d, now))
                aws.set_bounds(self.aas, ep, canary, *d.bounds)
                try:
                    aws.set_instances(self.sm, ep, canary, d.instances)
                except aws.AWS_ERRORS as exc:
                    if not aws.retry_later(exc):
                        raise
                    new["last_reason"] += (
                        f"; desired count not set ({aws.describe_error(exc)}), "
                        "the raised MinCapacity scales the canary"
                    )
            elif d.kind == "shift":
                assert d.percent is not None
                self.set_canary_weight(d.percent)
                new.update(r.transition(state, d, now))
            elif d.kind == "reapply":
                self.set_canary_weight(0)
            else:  # bake, wait, hold: no AWS call
                new.update(r.transition(state, d, now))
        except aws.AWS_ERRORS as exc:
            if not aws.retry_later(exc):
                raise
            return self._refused(state, d, exc)
        if d.kind in ("scale", "shift", "reapply"):
            new["refusals"] = 0
        return self._store(new, seq, wait=d.wait_seconds, moved_weight=d.kind == "shift")

    def _refused(self, state: dict[str, Any], d: r.Decision, exc: Exception) -> dict[str, Any]:
        """AWS refused a weight or bounds change (endpoint Updating), or gave no answer: retry on
        the next tick. A shift without an answer may have landed: its percent is pending."""
        count = int(state.get("refusals", 0)) + 1
        msg = aws.describe_error(exc)
        if state["status"] == r.RUNNING and count >= r.MAX_REFUSALS:
            return self._begin_rollback(
                state, f"SageMaker refused (or did not answer) the {d.kind} {count} times: {msg}"
            )
        what = "refused by SageMaker" if aws.answered(exc) else "got no answer (it may have landed)"
        new = self._decide(
            state, "wait", f"{d.kind} {what} ({msg}); retry {count} on the next tick"
        )
        new["refusals"] = count
        if d.kind == "shift" and aws.error_code(exc) not in aws.RETRY_LATER:
            new["canary_percent_pending"] = d.percent  # not refused: it may have landed
        result = self._store(new, state["seq"], wait=self.s.rules.check_seconds)
        if state["status"] == r.ROLLING_BACK and count == r.MAX_REFUSALS:
            self.notify(f"canary rollback still refused after {count} attempts", new)
        return result

    def _begin_rollback(self, state: dict[str, Any], reason: str) -> dict[str, Any]:
        """Record ROLLING_BACK before acting; a write lost to a concurrent tick is retried on the
        fresh state, so an operator's rollback cannot be lost (or undone by the next tick)."""
        for _ in range(WRITE_ATTEMPTS):
            if state["status"] == r.ROLLING_BACK:
                return self._drive_rollback(state)
            if state["status"] not in r.LOCKED:
                return self._result(state)
            new = self._decide(state, "rollback", reason)
            new.update(status=r.ROLLING_BACK, refusals=0, rollback_reason=reason)
            if self._write(new, expect_seq=state["seq"]):
                return self._drive_rollback(new)
            state = self._current()
        raise RolloutConflict(f"could not record the rollback in {WRITE_ATTEMPTS} attempts; retry")

    def _drive_rollback(self, state: dict[str, Any]) -> dict[str, Any]:
        """Canary weight 0 now; finish at once if DescribeEndpoint already shows it."""
        try:
            self.set_canary_weight(0)
        except aws.AWS_ERRORS as exc:
            if not aws.retry_later(exc):
                raise
            return self._refused(state, r.Decision("rollback", "weight 0"), exc)
        return self._advance(state)

    def _store(
        self, new: dict[str, Any], seq: int, *, wait: int, moved_weight: bool = False
    ) -> dict[str, Any]:
        if self._write(new, expect_seq=seq):
            return self._result(new, wait=wait)
        current = self._current()
        if moved_weight and current["status"] in (r.ROLLING_BACK, r.ROLLED_BACK):
            # A rollback was recorded while this tick moved the weight: put it back at once
            # (the rollback's own ticks also check the live weight before finishing).
            try:
                self.set_canary_weight(0)
            except aws.AWS_ERRORS as again:
                if not aws.retry_later(again):
                    raise
        return self._result(current, duplicate=True)

    def _finish(self, new: dict[str, Any], seq: int, subject: str) -> dict[str, Any]:
        result = self._store(new, seq, wait=0)
        if not result["duplicate"]:
            self.notify(subject, new)
        return result
