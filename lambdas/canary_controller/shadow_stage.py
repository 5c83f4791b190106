"""The rollout's shadow stage, before the canary's first step: pure rules on plain data, like
``rules.py`` (which hands a record whose ``stage`` is ``shadow`` to :func:`decide`).

Why two endpoint configs, moved between by UpdateEndpoint, and not an inference experiment:
"For an endpoint with a shadow variant, there can be a maximum of one production variant"
(SageMaker developer guide, "Create a shadow test",
https://docs.aws.amazon.com/sagemaker/latest/dg/shadow-tests-create.html), so the stage runs on
an endpoint config of its own (the primary as the one production variant, the new build as the
shadow variant in ``ShadowProductionVariants``: "Testing models with shadow variants",
https://docs.aws.amazon.com/sagemaker/latest/dg/model-shadow-deployment.html), synthesized by the
stacks beside the canary config. A shadow test (``CreateInferenceExperiment``,
``AWS::SageMaker::InferenceExperiment``) runs on its own schedule (7 days by default, 30 at most),
decides its own end and, when it ends, "the endpoint reverts to the state it was in before the
test started" or promotes the shadow itself: a second authority over the endpoint beside this
controller, which already owns the rollout's lock, evidence, deadlines and notifications. The
controller keeps that authority: it moves the endpoint to the shadow config, judges the
comparison on its own schedule, and moves it back to the canary config (pass: the canary steps
follow; fail: the release ends with nothing served to users).

The loop, one decision per tick (``kind`` of ``rules.Decision``):

- ``enter-shadow``: UpdateEndpoint to the shadow config, written first as the record's intent (a
  tick that dies after SageMaker took the call is recognised by the next one: the live config is
  the intent's). Not before the endpoint is InService on the canary config. The config moved to
  is the stack's shadow config with the shadow variant sized for the primary's instances in
  service at that moment (``shadow_fleet``; ``names.sized_shadow_config``, created by the
  controller: ``aws.create_sized_config``), recorded as the record's ``shadow_config_name``; the
  stack's own, at its peak size, when that size is not known. The move is a plain update, never
  blue/green (``aws.update_endpoint``); SageMaker refusing it for good (a ValidationException
  other than "in progress") ends the stage at once, naming AWS's message (``decisions``).
- waiting for the update (``wait``): at most ``stage_update_timeout_seconds`` from the request
  (the blue/green update's own limit: max execution timeout plus termination wait); past it the
  rollout ends FAILED. An endpoint found InService on the canary config after the request (a
  blue/green auto-rollback) ends it too.
- on the shadow config, InService: the stage's window opens (``shadow_entered_at``); then the
  stage checks its ground (:class:`Ground`, read by the controller each tick until it is all
  there, recorded once as ``shadow_ground``): data capture Started, capture objects written for
  both variants, CloudWatch's Invocations (with Invocation5XXErrors, the error rate per
  variant) for both, and the stage's probes, whole and streamed, found in the capture of both
  variants (``probes``: sent on the first check, recorded as ``shadow_probes_sent_at`` and
  ``shadow_probes``). What is still missing :data:`GROUND_SECONDS` after the window opened ends
  the release FAILED, naming it (never a hold to ``max_minutes``); a probe SageMaker refuses
  ends it at once. Then every
  ``compare_seconds`` the comparison runs (the captured answers per adapter, CloudWatch's
  ModelLatency at like loads, and CloudWatch's 5XX error rate per variant:
  :class:`CloudWatchErrors`) (``bake`` in between), its verdict and figures written
  into the record (``shadow_outcome``, ``shadow_evidence``):
  - ``fail``: the release ends; the endpoint goes back to the canary config (``rollback``: the
    record ROLLING_BACK, then ``leave-shadow``), then ROLLED_BACK with the comparison's reason;
  - ``insufficient``, or data that cannot be read (S3 AccessDenied, a malformed capture): ``hold``
    (never a pass); past ``max_seconds`` the release ends FAILED, the endpoint back on the canary
    config, the reason naming what was missing;
  - ``pass`` before ``min_seconds``: ``hold``; after: ``leave-shadow`` to the canary config, then
    ``canary-stage`` once it is InService there, and the canary steps run as without a shadow.
- The shadow variant's count: set once, by the config the stage enters (above), recorded as
  ``shadow_fleet`` and in each comparison's evidence; never changed during the stage (no
  documented call changes a shadow variant's count: ``aws.create_sized_config``).
- A rollback in the shadow stage (the operator's, or any failure) is the way back to the canary
  config with nothing served: the canary variant comes back at its configured initial weight,
  which a config with a shadow stage holds at 0 (typed_config: ``rollout.shadow``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final, cast

from . import names
from .canary_scaling import CanaryScaling
from .rules import TERMINAL_ENDPOINT_STATES, Decision, Observation
from .shadow_compare import (
    CLOUDWATCH_LATENCY,
    ContentCheck,
    LikeLoads,
    MinuteLatency,
    Thresholds,
    Verdict,
    cloudwatch_classes,
    cloudwatch_latency,
    like_load_detail,
)
from .shadow_fleet import ShadowFleet
from .state import RolloutState

SHADOW: Final = "shadow"
CANARY: Final = "canary"


@dataclass(frozen=True)
class ShadowRules:
    """``rollout.shadow`` and the names the stacks give it, as the Lambda takes them (one JSON
    variable, ``SHADOW_STAGE``)."""

    #: The endpoint config with the shadow variant (generated by CloudFormation).
    config_name: str
    shadow_variant: str
    #: Data capture's DestinationS3Uri (``s3://bucket/prefix``).
    capture_uri: str
    sample_percent: int
    min_seconds: int
    max_seconds: int
    compare_seconds: int
    #: How long a move between the stage's configs may keep the endpoint Updating.
    stage_update_timeout_seconds: int
    thresholds: Thresholds = field(default_factory=Thresholds)
    #: The canary's bounds and target tracking, which the controller registers and deregisters
    #: around the stage (``canary_scaling``); None: the canary has no autoscaling of its own.
    canary_scaling: CanaryScaling | None = None
    #: Data capture's InitialSamplingPercentage (the probes' count: ``probes.probe_count``).
    capture_percent: int = 100

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ShadowRules:
        raw = json.loads(text)
        limits = dict(raw.pop("thresholds"))
        checks = tuple(
            ContentCheck(**{**c, "adapters": tuple(c["adapters"])})
            for c in limits.pop("content_checks")
        )
        scaling = raw.pop("canary_scaling", None)
        return cls(
            **raw,
            thresholds=Thresholds(**limits, content_checks=checks),
            canary_scaling=None if scaling is None else CanaryScaling.from_dict(scaling),
        )


#: How long after the shadow config goes live the stage's ground must all be there: data capture
#: writes an object per variant "periodically" (an assumption of minutes: docs/limits.md) and
#: CloudWatch publishes the invocation metrics each minute (developer guide, "Metrics for
#: monitoring Amazon SageMaker AI").
GROUND_SECONDS: Final = 900


@dataclass(frozen=True)
class Ground:
    """What the shadow stage stands on (module docstring), as the controller read it: what is
    missing (empty: all there) and what was seen, for the record."""

    missing: tuple[str, ...]
    seen: str
    #: What a refusal said that ends the stage at once (a probe SageMaker refused: users'
    #: requests of its kind are refused too, ``probes``); None: nothing refused.
    refused: str | None = None
    #: What this check writes into the record whatever it finds (the probes sent, and when).
    record: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CloudWatchErrors:
    """Both variants' Invocations and Invocation5XXErrors over the window (AWS/SageMaker, per
    EndpointName and VariantName: ``aws.invocation_sums``): the error rate of every request,
    where the capture holds only the sampled ones it wrote (an error answer may not be captured
    at all). The shadow fails when its rate exceeds the primary's by more than
    ``max_increase_percent`` points, judged once it has ``min_calls`` invocations (the
    comparison's per-adapter minimum)."""

    primary_calls: float
    primary_errors: float
    shadow_calls: float
    shadow_errors: float
    max_increase_percent: float
    min_calls: int

    def judged(self) -> tuple[bool, str]:
        """``(failed, figures)``."""
        p = 100 * self.primary_errors / self.primary_calls if self.primary_calls else 0.0
        s = 100 * self.shadow_errors / self.shadow_calls if self.shadow_calls else 0.0
        figures = (
            f"CloudWatch 5XX: shadow {s:.3g} % of {self.shadow_calls:g}, primary {p:.3g} % of "
            f"{self.primary_calls:g} (at most +{self.max_increase_percent:g} points)"
        )
        failed = self.shadow_calls >= self.min_calls and s - p > self.max_increase_percent
        return failed, figures


@dataclass(frozen=True)
class ShadowEvidence:
    """One comparison: the verdict, or why the data could not be read."""

    verdict: Verdict | None
    #: Why the comparison could not read its data (S3, KMS, a malformed capture): a hold.
    error: str | None = None
    #: What was read (objects, answers per variant), for the record.
    read: str = ""
    #: CloudWatch per minute over the window (epoch minute -> both variants' ModelLatency p95 and
    #: InvocationsPerInstance; a minute missing any of them is left out): the ModelLatency rule.
    minutes: Mapping[int, MinuteLatency] = field(default_factory=dict)
    #: Which minutes give latency evidence, and for which verdict (the verdict's per-answer
    #: latency rules were judged on the same).
    loads: LikeLoads = field(default_factory=LikeLoads)
    #: Both variants' error rates from CloudWatch (None where not read: the simulator).
    errors: CloudWatchErrors | None = None

    def judged(self, max_ratio: float) -> tuple[str, str]:
        """``(outcome, summary)``: the per-adapter verdict, failed also when the shadow's
        ModelLatency p95 exceeds ``max_ratio`` x the primary's in minutes where its load was at
        most the primary's, and never a pass unless it is within it in minutes where its load was
        at least the primary's (``shadow_compare.cloudwatch_latency``: no like-load evidence
        either way is ``insufficient``, a hold)."""
        if self.verdict is None:
            return "unreadable", f"the comparison could not read its data ({self.error})"
        outcome, summary = self.verdict.outcome, self.verdict.summary()
        if self.errors is not None:
            failed, figures = self.errors.judged()
            if failed:
                prefix = summary if outcome == "fail" else "shadow comparison fail"
                return "fail", f"{prefix}; {figures}"
        latency, why = cloudwatch_latency(self.minutes, self.loads, max_ratio)
        if latency == "fail":
            prefix = summary if outcome == "fail" else "shadow comparison fail"
            return "fail", f"{prefix}; {why}"
        if outcome == "pass" and latency == "insufficient":
            return "insufficient", f"shadow comparison insufficient: {why}; {self.loads.summary()}"
        return outcome, summary

    def lines(self) -> list[str]:
        """The record's ``shadow_evidence``: the like-load minutes, the ModelLatency rule's figures
        in each class, then one line per adapter with its figures."""
        if self.verdict is None:
            return [f"no comparison: {self.error}"]
        out = [self.read] if self.read else []
        out.append(f"{len(self.minutes)} minutes of CloudWatch read; {self.loads.summary()}")
        if self.errors is not None:
            out.append(self.errors.judged()[1])
        out.append(
            like_load_detail(CLOUDWATCH_LATENCY, *cloudwatch_classes(self.minutes, self.loads))
        )
        for a in self.verdict.adapters:
            figures = ", ".join(f"{k} {v:.4g}" for k, v in a.figures.items())
            reasons = f" ({'; '.join(a.reasons)})" if a.reasons else ""
            out.append(f"{a.adapter}: {a.outcome}{reasons}; {figures}")
        return out


def move_back(endpoint: str, canary_config: str | None) -> str:
    """What puts an endpoint left on a shadow config back on the canary config: a plain
    UpdateEndpoint, as the stage's own move (``aws.update_endpoint``). Not ``make deploy``: a
    deploy whose template changes nothing changes nothing, and one that does updates blue/green,
    which SageMaker refuses between configs whose variant names differ (deployment guardrails,
    "Exclusions")."""
    return (
        f"aws sagemaker update-endpoint --endpoint-name {endpoint} --endpoint-config-name "
        f"{canary_config or '<the canary config>'} --retain-all-variant-properties"
    )


def is_shadow_config(config: str | None, endpoint: str, base: str) -> bool:
    """``config`` is the stack's shadow config ``base`` or one sized from it for ``endpoint``."""
    if config is None or config == base:
        return config is not None
    prefix = names.sized_shadow_config(endpoint, base, 0)[:-1]
    count = config.removeprefix(prefix)
    return count != config and count.isdigit()


def in_shadow(state: RolloutState) -> bool:
    return state.get("stage") == SHADOW


def _since(state: RolloutState, key: str) -> int | None:
    value: Any = cast(Mapping[str, Any], state).get(key)
    return None if value is None else int(value)


def decide(
    state: RolloutState,
    obs: Observation,
    rules: ShadowRules,
    now: int,
    compare: Callable[[int, int], ShadowEvidence],
    check_seconds: int,
    fleet: ShadowFleet | None,
    ground: Callable[[int, int], Ground],
) -> Decision:
    """The next step of a rollout in its shadow stage (module docstring). ``ground(start,
    end)``: what the stage stands on since the window opened. ``fleet``: what the
    shadow's count at entry follows (``shadow_fleet``); None: the stack's shadow config, at its
    peak size, is entered."""
    status, config = obs.endpoint_status, obs.endpoint_config_name
    canary_config = state.get("canary_config_name")
    shadow_config = state.get("shadow_config_name") or rules.config_name
    if status in TERMINAL_ENDPOINT_STATES:
        return Decision("abort", f"endpoint is {status}; rollout abandoned in the shadow stage")
    leaving = state["status"] == names.ROLLING_BACK or bool(state.get("shadow_leaving"))
    if leaving:
        return _leave(state, obs, rules, now, check_seconds)
    requested = _since(state, "shadow_requested_at")
    if config not in (canary_config, shadow_config):
        return Decision(
            "rollback",
            f"endpoint config {config} is neither the canary config {canary_config} nor the "
            f"shadow config {shadow_config}: a deploy or the console changed the endpoint under "
            "the shadow stage",
        )
    entered = _since(state, "shadow_entered_at")
    if config == shadow_config and status != "InService" and entered is not None:
        return _updating_in_stage(state, rules, now, status, check_seconds)
    if config != shadow_config or status != "InService":
        if requested is None:
            if status != "InService":
                return Decision(
                    "wait", f"endpoint is {status}; the shadow stage waits", check_seconds
                )
            return _enter(state["endpoint_name"], rules, obs, check_seconds, fleet)
        waited = now - requested
        if config == canary_config and status == "InService":
            return _end_failed(
                f"the endpoint is InService on the canary config {canary_config} {waited}s after "
                f"the shadow config {shadow_config} was asked for: the update did not land "
                "(a blue/green auto-rollback, or SageMaker refused it)"
            )
        if waited >= rules.stage_update_timeout_seconds:
            return _end_failed(
                f"the endpoint stayed {status} for {waited}s after the shadow config was asked "
                f"for (stage update timeout {rules.stage_update_timeout_seconds}s)"
            )
        return Decision(
            "wait", f"endpoint is {status} on {config}: moving to the shadow config", check_seconds
        )
    if entered is not None and not state.get("shadow_ground"):
        return _check_ground(ground(entered, now), now - entered, check_seconds)
    return _in_stage(state, rules, now, compare, check_seconds, entered)


def _check_ground(found: Ground, waited: int, check_seconds: int) -> Decision:
    """The stage's ground (module docstring): recorded once all there; the release ended FAILED
    at once when a probe was refused, and when any of it is still missing
    :data:`GROUND_SECONDS` after the window opened."""
    record: RolloutState = cast(RolloutState, dict(found.record))
    if found.refused is not None:
        return _end_failed(
            f"the shadow stage's ground: {found.refused} {waited}s after the shadow config went "
            f"live (seen: {found.seen})",
            record,
        )
    if not found.missing:
        return Decision(
            "bake", f"shadow stage ground checked: {found.seen}", 1,
            record={**record, "shadow_ground": found.seen},
        )  # fmt: skip
    missing = "; ".join(found.missing)
    if waited >= GROUND_SECONDS:
        return _end_failed(
            f"the shadow stage's ground is not there {waited}s after the shadow config went "
            f"live: {missing} (seen: {found.seen})",
            record,
        )
    left = GROUND_SECONDS - waited
    return Decision(
        "bake",
        f"shadow stage checks its ground: {missing}; the stage ends in {left}s without it",
        min(check_seconds, left),
        record=record or None,
    )


def _enter(
    endpoint: str, rules: ShadowRules, obs: Observation, check_seconds: int,
    fleet: ShadowFleet | None,
) -> Decision:  # fmt: skip
    """``enter-shadow``: to a config whose shadow is sized for the primary's instances in service
    now (``shadow_instances``: the controller creates it), or to the stack's at its peak size
    when ``fleet`` is None."""
    what = (
        f"the new build as the shadow variant, {rules.sample_percent} % of requests copied to it, "
        "its answers never returned"
    )
    if fleet is None:
        config, count, why = rules.config_name, None, "the stack's shadow config's (peak size)"
    else:
        count = fleet.count(obs.primary_serving)
        config = names.sized_shadow_config(endpoint, rules.config_name, count)
        why = fleet.why(obs.primary_serving)
    return Decision(
        "enter-shadow",
        f"shadow stage: endpoint to {config} ({what}; shadow fleet {why})",
        check_seconds,
        endpoint_config=config,
        shadow_instances=count,
        record={"shadow_config_name": config, "shadow_fleet": why},
    )


def _in_stage(
    state: RolloutState,
    rules: ShadowRules,
    now: int,
    compare: Callable[[int, int], ShadowEvidence],
    check_seconds: int,
    entered: int | None,
) -> Decision:
    """On the shadow config, InService: the window opens, then the comparisons (module
    docstring)."""
    shadow_config = state.get("shadow_config_name") or rules.config_name
    canary_config = state.get("canary_config_name")
    if entered is None:
        return Decision(
            "bake",
            f"shadow variant live on {shadow_config}: first comparison in {rules.compare_seconds}s",
            min(rules.compare_seconds, check_seconds),
            record={
                "shadow_entered_at": now,
                "shadow_next_compare_at": now + rules.compare_seconds,
            },
        )
    due = _since(state, "shadow_next_compare_at") or entered
    if now < due:
        return Decision(
            "bake", f"shadow stage: next comparison in {due - now}s", min(due - now, check_seconds)
        )
    ran = compare(entered, now)
    elapsed = now - entered
    outcome, summary = ran.judged(rules.thresholds.max_latency_p95_ratio)
    fleet_line = state.get("shadow_fleet")
    record: RolloutState = {
        "shadow_next_compare_at": now + rules.compare_seconds,
        "shadow_compared_at": now,
        "shadow_evidence": [*ran.lines(), *([f"shadow fleet: {fleet_line}"] if fleet_line else [])],
        "shadow_outcome": outcome,
    }
    wait = min(rules.compare_seconds, check_seconds)
    if outcome == "fail":
        return Decision("rollback", summary, record=record)
    if outcome == "pass":
        if elapsed >= rules.min_seconds:
            return Decision(
                "leave-shadow",
                f"{summary} after {elapsed}s: endpoint back to the canary config "
                f"{canary_config}, the canary steps next",
                check_seconds,
                endpoint_config=canary_config,
                record={**record, "shadow_leaving": True, "shadow_leave_requested_at": now},
            )
        why = f"{summary}; held until min_minutes ({rules.min_seconds - elapsed}s left)"
        return Decision("hold", why, wait, record=record)
    why = summary
    if elapsed >= rules.max_seconds:
        return _end_failed(
            f"shadow stage past max_minutes ({rules.max_seconds // 60} min) without a verdict: "
            f"{why}",
            record,
        )
    left = rules.max_seconds - elapsed
    return Decision("hold", f"{why}; held (no pass without evidence), fails in {left}s", wait,
                    record=record)  # fmt: skip


def _updating_in_stage(
    state: RolloutState, rules: ShadowRules, now: int, status: str, check_seconds: int
) -> Decision:
    """The endpoint on the shadow config but not InService once the stage is under way (the
    primary's autoscaling, an update): wait, the comparison with it; the release ends FAILED
    once it stays so ``stage_update_timeout_seconds`` in a row (``updating_since``)."""
    since = _since(state, "updating_since")
    if since is not None and now - since >= rules.stage_update_timeout_seconds:
        return _end_failed(
            f"the endpoint stayed {status} on the shadow config for {now - since}s (stage update "
            f"timeout {rules.stage_update_timeout_seconds}s)"
        )
    return Decision(
        "wait",
        f"endpoint is {status} on the shadow config (autoscaling or an update); the stage waits",
        check_seconds,
        updating=True,
    )


def _end_failed(reason: str, record: RolloutState | None = None) -> Decision:
    """The release ends FAILED, by way of the canary config (a rollback whose end is FAILED)."""
    return Decision("rollback", reason, record={**(record or {}), "shadow_end": names.FAILED})


def _leave(
    state: RolloutState, obs: Observation, rules: ShadowRules, now: int, check_seconds: int
) -> Decision:
    """Back to the canary config: for the canary stage (``shadow_leaving``) or to end the release
    (ROLLING_BACK). UpdateEndpoint is asked for while the endpoint is InService on the shadow
    config (again after a refusal or an auto-rollback), the end is recorded once it is InService
    on the canary config. Bounded by ``stage_update_timeout_seconds`` from the first request."""
    status, config = obs.endpoint_status, obs.endpoint_config_name
    canary_config = state.get("canary_config_name")
    ending = state["status"] == names.ROLLING_BACK
    since = _since(state, "shadow_leave_requested_at") or _since(state, "rollback_started_at")
    if config == canary_config and status == "InService":
        if ending:
            return Decision(
                "shadow-end",
                f"endpoint back on the canary config {canary_config}; nothing was served to users",
            )
        return Decision(
            "canary-stage",
            f"shadow stage passed; endpoint InService on the canary config {canary_config}: "
            "canary steps begin",
            check_seconds,
            record={
                "stage": CANARY,
                "shadow_leaving": None,
                "endpoint_config_name": canary_config,
                "canary_percent": round(obs.canary_share),
                "step_started_at": now,
            },
        )
    if since is not None and now - since >= rules.stage_update_timeout_seconds:
        return Decision(
            "timeout",
            f"the endpoint did not come back InService on the canary config {canary_config} "
            f"within {rules.stage_update_timeout_seconds}s (it is {status} on {config}); recorded "
            "FAILED, lock released: make canary-status, then make deploy",
            subject=f"shadow stage: endpoint not back on the canary config after {now - since}s",
        )
    if status != "InService":
        return Decision(
            "wait", f"endpoint is {status} on {config}: back to the canary config", check_seconds
        )
    return Decision(
        "leave-shadow",
        f"endpoint to the canary config {canary_config}"
        + (f" ({state.get('rollback_reason')})" if ending else ""),
        check_seconds,
        endpoint_config=canary_config,
        record={} if since is not None else {"shadow_leave_requested_at": now},
    )
