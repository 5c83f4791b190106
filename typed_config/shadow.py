"""``rollout.shadow``: the stage before the canary, where the new build answers copies of live
traffic that no user sees (lambdas/canary_controller/shadow_compare.py holds the comparison)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Final, Literal

from pydantic import Field, field_validator

from lambdas.canary_controller.shadow_compare import ContentCheck as ComparedCheck
from lambdas.canary_controller.shadow_compare import Thresholds
from typed_config.base import NAME_PATTERN, Strict, section_rule
from typed_config.scaling import ScalingConfig
from typed_config.timing import ReleaseEvent, ScheduledAction


class ContentCheck(Strict):
    """A pattern every answer must (``expect: match``) or must not (``expect: no_match``)
    contain, searched anywhere in the answer (Python regular expressions); the brief's guardrail
    pass rate. ``adapters`` empty: every adapter."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    """The check's name (letters, digits, dashes)."""
    pattern: Annotated[str, Field(min_length=1)]
    """A Python regular expression searched anywhere in the answer."""
    expect: Literal["match", "no_match"] = "no_match"
    """``match``: every answer must contain the pattern; ``no_match``: none may."""
    adapters: list[str] = []
    """Adapters the check applies to; empty: every adapter."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"pattern {pattern!r} is not a regular expression: {exc}") from None
        return pattern


#: The comparison's defaults, defined once in the Lambda's own module (the Lambda's asset holds
#: its package alone, so the config reads the Lambda's defaults, never the other way round).
DEFAULT_THRESHOLDS: Final = Thresholds()


class ShadowComparison(Strict):
    """How far the shadow's answers may differ from the primary's, per adapter, before the
    shadow stage fails (shadow_compare's module docstring says how each is measured)."""

    max_error_rate_increase_percent: Annotated[float, Field(ge=0, le=100)] = (
        DEFAULT_THRESHOLDS.max_error_rate_increase_percent
    )
    """The shadow's error rate may exceed the primary's by at most this many percentage points."""
    max_latency_p95_ratio: Annotated[float, Field(gt=1, le=10)] = (
        DEFAULT_THRESHOLDS.max_latency_p95_ratio
    )
    """The shadow's latency p95 may be at most this multiple of the primary's."""
    max_ttft_p95_ratio: Annotated[float, Field(gt=1, le=10)] = DEFAULT_THRESHOLDS.max_ttft_p95_ratio
    """The shadow's time to first token p95 may be at most this multiple of the primary's."""
    max_length_ks_statistic: Annotated[float, Field(gt=0, lt=1)] = (
        DEFAULT_THRESHOLDS.max_length_ks_statistic
    )
    """Kolmogorov-Smirnov distance between the answers' length distributions above which, when also
    significant at ``length_ks_alpha``, the lengths count as shifted."""
    length_ks_alpha: Annotated[float, Field(gt=0, lt=0.5)] = DEFAULT_THRESHOLDS.length_ks_alpha
    """Significance level of the answer-length comparison (Kolmogorov-Smirnov test)."""
    max_truncated_share_increase_percent: Annotated[float, Field(ge=0, le=100)] = (
        DEFAULT_THRESHOLDS.max_truncated_share_increase_percent
    )
    """The share of answers cut at max_tokens may rise by at most this many percentage points."""
    max_content_pass_rate_drop_percent: Annotated[float, Field(ge=0, le=100)] = (
        DEFAULT_THRESHOLDS.max_content_pass_rate_drop_percent
    )
    """The content checks' pass rate may drop by at most this many percentage points."""
    content_checks: list[ContentCheck] = []
    """Patterns every answer must or must not contain (the guardrail pass rate)."""


class ShadowStage(Strict):
    """A release's first stage: the new build as the endpoint's shadow variant beside the
    primary, answering ``sample_percent`` % of live requests (copies; users get the primary's
    answers), until every adapter has ``min_requests_per_adapter`` answers on both sides and
    ``min_minutes`` have passed; then the comparison decides: pass, the canary stage begins; fail,
    the release ends with nothing served to users. No verdict by ``max_minutes``: the release
    fails (no evidence is never a pass)."""

    sample_percent: Annotated[int, Field(ge=1, le=100)] = 10
    """Percent of live requests copied to the shadow (1-100); users always get the primary's
    answer."""
    min_requests_per_adapter: Annotated[int, Field(ge=1)] = (
        DEFAULT_THRESHOLDS.min_requests_per_adapter
    )
    """Answers each adapter needs on both sides before a verdict."""
    min_minutes: Annotated[int, Field(ge=1, le=20160)] = 60
    """The stage lasts at least this many minutes."""
    max_minutes: Annotated[int, Field(ge=1, le=20160)] = 1440
    """No verdict by this many minutes: the release fails (no evidence is never a pass)."""
    compare_interval_minutes: Annotated[int, Field(ge=5, le=1440)] = 30
    """How often the comparison runs inside the stage."""
    capture_percent: Annotated[int, Field(ge=1, le=100)] = 100
    """Data capture of both variants while the stage runs (S3, the product's KMS key): the share of
    requests captured, and how long the captured objects are kept."""
    capture_retention_days: Annotated[int, Field(ge=1, le=365)] = 30
    """Days the captured requests and answers are kept in S3 (1-365)."""
    comparison: ShadowComparison = ShadowComparison()
    """How far the shadow's answers may differ from the primary's."""

    @section_rule
    def _window(self) -> ShadowStage:
        if self.max_minutes < self.min_minutes:
            raise ValueError(
                f"max_minutes: {self.max_minutes} is shorter than min_minutes "
                f"({self.min_minutes}): the stage could never reach a verdict"
            )
        return self

    @property
    def thresholds(self) -> Thresholds:
        """The comparison's rules as the controller and the simulator take them."""
        c = self.comparison
        return Thresholds(
            min_requests_per_adapter=self.min_requests_per_adapter,
            max_error_rate_increase_percent=c.max_error_rate_increase_percent,
            max_latency_p95_ratio=c.max_latency_p95_ratio,
            max_ttft_p95_ratio=c.max_ttft_p95_ratio,
            max_length_ks_statistic=c.max_length_ks_statistic,
            length_ks_alpha=c.length_ks_alpha,
            max_truncated_share_increase_percent=c.max_truncated_share_increase_percent,
            max_content_pass_rate_drop_percent=c.max_content_pass_rate_drop_percent,
            content_checks=tuple(
                ComparedCheck(
                    name=check.name,
                    pattern=check.pattern,
                    must_match=check.expect == "match",
                    adapters=tuple(check.adapters),
                )
                for check in c.content_checks
            ),
        )


#: The variant whose autoscaling the canary controller owns when a release has a shadow stage
#: (lambdas/canary_controller/canary_scaling.py says why): the stack registers none for it.
CONTROLLER_OWNED_VARIANT: Final = "canary"


def controller_owned_variants(stage: ShadowStage | None) -> frozenset[str]:
    """The variants whose scalable target the stack leaves to the canary controller."""
    return frozenset({CONTROLLER_OWNED_VARIANT}) if stage is not None else frozenset()


def controller_owned_scaling_errors(stage: ShadowStage | None, scaling: ScalingConfig) -> list[str]:
    """With ``rollout.shadow`` the controller registers the canary's bounds and target tracking
    only, around the stage: a step policy, a scheduled action or a release pre-scale on the
    canary would be silently dropped, so each is an error naming its field."""
    errors: list[str] = []
    for variant in sorted(controller_owned_variants(stage)):
        vs = scaling.variants[variant]  # type: ignore[index]
        if vs.step_policies:
            errors.append(
                f"scaling.variants.{variant}.step_policies: {[p.name for p in vs.step_policies]}"
                f" with rollout.shadow: the canary controller owns the {variant}'s autoscaling "
                "(it leaves the endpoint for the shadow stage) and registers its bounds and "
                "target tracking only; remove them or rollout.shadow"
            )
        timed: tuple[tuple[str, Sequence[ScheduledAction | ReleaseEvent]], ...] = (
            ("schedules", scaling.schedules),
            ("release_calendar", scaling.release_calendar),
        )
        for kind, items in timed:
            for i, item in enumerate(items):
                if item.variant == variant:
                    errors.append(  # the index: the report names the item as the file does
                        f"scaling.{kind}.{i}.variant: {variant} with rollout.shadow: "
                        f"the canary controller owns the {variant}'s autoscaling and registers "
                        "no scheduled action; schedule the primary, or remove rollout.shadow"
                    )
    return errors
