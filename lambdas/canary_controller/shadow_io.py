"""The shadow stage's AWS side: what the stage stands on (data capture, the shadow's instances,
both variants' capture and invocations, the stage's probes), the comparison's evidence (both
variants' captured answers and CloudWatch minutes, ``shadow_compare``), the shadow's count at
entry (``shadow_fleet``) and its sized config, the canary's scaling released into the stage and
owned again out of it (``canary_scaling``), and the checks before a rollout with a shadow stage
starts. The stage's decisions are ``shadow_stage.decide``'s, on plain data; nothing is decided
here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from . import aws, canary_scaling, capture, probes, shadow_stage
from . import rules as r
from .clients import Clients
from .settings import RolloutConflict, Settings
from .shadow_compare import LikeLoads, compare, minute_loads
from .shadow_fleet import ShadowFleet
from .shadow_stage import CloudWatchErrors, Ground, ShadowEvidence

#: What keeps the shadow comparison from its data: any AWS failure (S3 AccessDenied, KMS, no
#: answer) and a capture that is not what data capture writes.
CAPTURE_READ_ERRORS: tuple[type[Exception], ...] = (*aws.AWS_ERRORS, capture.CaptureError)


@dataclass(eq=False)
class ShadowIO:
    s: Settings
    clients: Clients
    _: KW_ONLY
    clock: Callable[[], float]
    #: Between the attempts of the canary's scaling registration (``canary_scaling``).
    sleep: Callable[[float], Any]
    #: The shadow config's shadow count (its peak size) by config name, once read
    #: (:meth:`fleet`); None: the config has no such shadow variant.
    _shadow_peaks: dict[str, int | None] = field(default_factory=dict, init=False)

    def ground(
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
            described = self.clients.sm.describe_endpoint(EndpointName=ep)
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
                n = capture.objects_written(
                    self.clients.s3, shadow.capture_uri, ep, variant, start, end
                )
            except aws.AWS_ERRORS as exc:
                missing.append(f"{variant} capture unread ({aws.describe_error(exc)})")
                continue
            seen.append(f"{variant} {n} capture objects")
            if n == 0:
                missing.append(f"no capture object of {variant} yet")
        try:
            sums = aws.invocation_sums(self.clients.cw, ep, variants, start, end)
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
        sent = probes.send(self.clients.runtime, self.s.endpoint_name, ids, clock=self.clock)
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
                    self.clients.s3, shadow.capture_uri, self.s.endpoint_name, variant, sent_at,
                    end, wanted,
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

    def evidence(self, start: int, end: int) -> ShadowEvidence:
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
                    self.clients.s3, shadow.capture_uri, self.s.endpoint_name, variant, start, end
                )
        except CAPTURE_READ_ERRORS as exc:
            print(f"shadow comparison could not read its data: {aws.describe_error(exc)}")
            return ShadowEvidence(None, error=aws.describe_error(exc))
        try:
            minutes = aws.shadow_minutes(
                self.clients.cw, self.s.endpoint_name, self.s.primary_variant,
                shadow.shadow_variant, start, end,
            )  # fmt: skip
        except aws.AWS_ERRORS as exc:
            print(f"shadow comparison could not read CloudWatch: {aws.describe_error(exc)}")
            return ShadowEvidence(None, error=f"ModelLatency: {aws.describe_error(exc)}")
        variants = (self.s.primary_variant, shadow.shadow_variant)
        try:
            sums = aws.invocation_sums(self.clients.cw, self.s.endpoint_name, variants, start, end)
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

    def start_allowed(self, obs: r.Observation) -> None:
        """A rollout with a shadow stage starts on the canary config with nothing of the new
        build served to users, and with a canary variant SageMaker may remove: the shadow config
        has one production variant, and "removing a production variant that has auto scaling
        configured" needs its scalable target deregistered first (SageMaker developer guide,
        "Update endpoints that use auto scaling",
        https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-scaling-update.html). The stage
        deregisters it itself when the controller owns the canary's scaling (``canary_scaling``:
        a registered target whose only policy is the controller's), never a target someone else
        owns."""
        assert self.s.shadow is not None
        ep, canary = self.s.endpoint_name, self.s.canary_variant
        live, base = obs.endpoint_config_name, self.s.shadow.config_name
        if shadow_stage.is_shadow_config(live, self.s.endpoint_name, base):
            raise RolloutConflict(
                f"endpoint {ep} already runs a shadow config ({obs.endpoint_config_name}: a "
                "rollout that ended mid-stage): move it back to the canary config with "
                f"{shadow_stage.move_back(ep, None)}; start "
                "refused"
            )
        if obs.canary_weight > 0:
            raise RolloutConflict(
                f"the canary serves {obs.canary_share:.4g} % of requests: a shadow stage starts "
                "with nothing of the new build served to users; make canary-rollback first"
            )
        initial = aws.initial_weight(self.clients.sm, obs.endpoint_config_name, canary)
        if initial:
            raise RolloutConflict(
                f"the canary config {obs.endpoint_config_name} gives the {canary} variant initial "
                f"weight {initial:g}: back from the shadow config it would serve users at once; "
                "a config with rollout.shadow sets variants.canary.initial_weight 0"
            )
        if aws.scalable_bounds(self.clients.aas, ep, canary) is None:
            return
        spec = self.s.shadow.canary_scaling
        if spec is None:
            raise RolloutConflict(
                f"the {canary} variant is registered for autoscaling and this controller does not "
                "own its scaling: SageMaker removes it for the shadow stage only once it is "
                "deregistered (endpoint-scaling-update); deploy the stack with rollout.shadow "
                "(the controller then owns the canary's scaling), then start again"
            )
        foreign = canary_scaling.foreign_policies(self.clients.aas, ep, canary, spec)
        if foreign:
            raise RolloutConflict(
                f"the {canary} variant's scalable target has scaling policies that are not the "
                f"controller's ({', '.join(foreign)}; its own is {spec.policy_name}): the stage "
                "deregisters only a target it owns; deploy the stack with rollout.shadow (which "
                "removes CloudFormation's canary target), then start again"
            )

    def fleet(self) -> ShadowFleet | None:
        """What the shadow's count at entry follows (``shadow_fleet``); its peak size is the
        stack's shadow config's count (DescribeEndpointConfig, read once per Lambda instance and
        config). A read that is refused for now enters the stack's config at its peak size this
        time; any other failure raises."""
        shadow = self.s.shadow
        assert shadow is not None
        if shadow.config_name not in self._shadow_peaks:
            try:
                self._shadow_peaks[shadow.config_name] = aws.shadow_config_count(
                    self.clients.sm, shadow.config_name, shadow.shadow_variant
                )
            except aws.AWS_ERRORS as exc:
                if not aws.retry_later(exc):
                    raise
                print(f"shadow config not read ({aws.describe_error(exc)}): its peak size used")
                return None
        peak = self._shadow_peaks[shadow.config_name]
        if peak is None:
            return None
        return ShadowFleet(shadow.sample_percent, self.s.rules.plan.canary_per_primary, peak)

    def size(self, d: r.Decision) -> None:
        """The config ``enter-shadow`` moves to, when it is a sized copy of the stack's shadow
        config (``aws.create_sized_config``)."""
        shadow = self.s.shadow
        assert shadow is not None and d.endpoint_config is not None
        if d.shadow_instances is None or d.endpoint_config == shadow.config_name:
            return
        aws.create_sized_config(
            self.clients.sm, shadow.config_name, d.endpoint_config, shadow.shadow_variant,
            d.shadow_instances,
        )  # fmt: skip

    def release_canary_scaling(self) -> str:
        """Before the move to the shadow config: the canary's scalable target deregistered, when
        the controller owns it (``canary_scaling``); what was done, for the record's reason."""
        spec = self.s.shadow.canary_scaling if self.s.shadow else None
        if spec is None:
            return ""
        ep, canary = self.s.endpoint_name, self.s.canary_variant
        if canary_scaling.release(self.clients.aas, ep, canary):
            return f"; the {canary}'s scalable target deregistered (it leaves the endpoint)"
        return ""

    def own_canary_scaling(self) -> str:
        """Back on the canary config: the canary's bounds and target tracking registered again,
        when the controller owns them (``canary_scaling``)."""
        spec = self.s.shadow.canary_scaling if self.s.shadow else None
        if spec is None:
            return ""
        canary_scaling.register(
            self.clients.aas, self.s.endpoint_name, self.s.canary_variant, spec, sleep=self.sleep
        )
        return (
            f"; {self.s.canary_variant} autoscaling registered again "
            f"({spec.min_capacity}..{spec.max_capacity}, {spec.policy_name})"
        )
