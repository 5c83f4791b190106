"""The scaling section: target tracking, step policies and bounds per variant, and the
scaling config that holds them with the recurring schedules and the release calendar."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field, field_validator

from container.serving import metrics_contract as mc
from typed_config.base import (
    NAME_PATTERN,
    VARIANT_NAMES,
    Strict,
    VariantName,
    check_capacity_bounds,
    section_rule,
)
from typed_config.timing import BoundsChange, Capacity, ReleaseEvent, ScheduledAction

#: Metrics step scaling may watch: per-variant contract metrics and SageMaker's real-time metrics.
SCALABLE_METRICS: frozenset[str] = (
    frozenset(m.name for m in mc.ALL_METRICS if m.dimensions == mc.VARIANT_DIMENSIONS)
    | mc.SAGEMAKER_INVOCATION_METRICS
    | mc.SAGEMAKER_INSTANCE_METRICS
)


def _check_metric(name: str) -> str:
    if name == "ApproximateBacklogSizePerInstance":
        raise ValueError(
            f"{name} is published for asynchronous endpoints only; a real-time endpoint "
            "scaling on it never scales"
        )
    if name not in SCALABLE_METRICS:
        raise ValueError(
            f"metric {name!r} is neither a per-variant metric of the metrics contract nor one "
            "SageMaker publishes for a real-time endpoint; known: "
            + ", ".join(sorted(SCALABLE_METRICS))
        )
    return name


#: The latency SLOs that may bound a concurrency target (``target_tracking.slos``), each with a
#: limit in ``monitoring.slo_*`` (sizing.scaling_target.SLO_LIMITS).
LatencySlo = Literal["ttft_p50", "ttft_p95", "latency_p99", "tpot_p95"]


class TargetTracking(Strict):
    """Track concurrency per instance or invocations per instance.

    Concurrency target = ``target_fraction_of_concurrency`` x what one instance can run at once
    within its SLOs: the lowest of engine.max_num_seqs, the KV cache at the typical request
    length and the concurrency at which each SLO of ``slos`` holds by the speed model
    (sizing.scaling_target.concurrency_target). Seeds: scale out at 85%.
    """

    metric: Literal["concurrency", "invocations"] = "concurrency"
    """``concurrency`` (requests in flight per instance) or ``invocations`` (InvocationsPerInstance
    per minute)."""
    target_fraction_of_concurrency: Annotated[float, Field(gt=0, le=1)] = 0.85
    """For ``concurrency``: target = this fraction x engine.max_num_seqs."""
    slos: Annotated[list[LatencySlo], Field(max_length=4)] = [
        "ttft_p50",
        "ttft_p95",
        "latency_p99",
        "tpot_p95",
    ]
    """For ``concurrency``: the latency SLOs (monitoring.slo_*) that may bound the target, beside
    max_num_seqs and the KV cache (sizing.scaling_target). One the speed model says is not
    reachable at its central estimate (sizing.slo_reach) cannot bind: synth warns, naming it and
    what would reach it; leaving it out of this list acknowledges that (its alarm stays)."""
    invocations_per_instance: Annotated[int, Field(gt=0)] = 1000
    """For ``invocations``: InvocationsPerInstance per minute."""
    scale_out_cooldown_seconds: Annotated[int, Field(ge=0, le=3600)] = 60
    """Seconds after a scale-out before the next one (0-3600)."""
    scale_in_cooldown_seconds: Annotated[int, Field(ge=0, le=3600)] = 600
    """Seconds after a scale-in before the next one (0-3600); at least the scale-out cooldown: scale
    in slowly."""
    scale_in: bool = True
    """False synthesizes ``DisableScaleIn``: the policy only scales out and a step policy with
    ``direction: in`` owns scale-in (one scale-in authority per target, VariantScaling)."""

    @field_validator("slos")
    @classmethod
    def _slos_once(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"each SLO once: {value}")
        return value

    @section_rule
    def _scale_in_slower(self) -> TargetTracking:
        if self.scale_in_cooldown_seconds < self.scale_out_cooldown_seconds:
            raise ValueError(
                f"scale_in_cooldown_seconds ({self.scale_in_cooldown_seconds}) must be >= "
                f"scale_out_cooldown_seconds ({self.scale_out_cooldown_seconds}): scale in slowly"
            )
        return self


class StepAdjustment(Strict):
    """Bounds are offsets from the alarm threshold, like Application Auto Scaling's."""

    lower: float | None = None
    """The interval's lower bound as an offset from the threshold (null: no bound)."""
    upper: float | None = None
    """The interval's upper bound as an offset from the threshold (null: no bound)."""
    change: int
    """Instances added (positive) or removed (negative) while the metric is in this interval."""


class StepCondition(Strict):
    metric: str
    """The second alarm's metric (a contract or SageMaker metric)."""
    statistic: Literal["Average", "Maximum", "Minimum", "Sum"] = "Average"
    """The second alarm's statistic."""
    comparison: Literal[">=", ">", "<=", "<"]
    """How the statistic is compared with ``threshold``."""
    threshold: float
    """The second alarm's threshold, in the metric's own unit."""

    @field_validator("metric")
    @classmethod
    def _metric_known(cls, value: str) -> str:
        return _check_metric(value)


class StepPolicy(Strict):
    """A step-scaling policy driven by one alarm on a contract or SageMaker metric."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    """The policy's name, unique within the variant (letters, digits, dashes; part of AWS names)."""
    direction: Literal["out", "in"]
    """``out``: adds instances (comparison > or >=, positive changes); ``in``: removes them (< or
    <=, negative changes)."""
    metric: str
    """The metric the alarm watches: a per-variant metric of the container's metrics contract or one
    SageMaker publishes for a real-time endpoint."""
    statistic: Literal["Average", "Maximum", "Minimum", "Sum", "p50", "p90", "p95", "p99"] = (
        "Average"
    )
    """The alarm's statistic over each period."""
    comparison: Literal[">=", ">", "<=", "<"]
    """How the statistic is compared with ``threshold``."""
    threshold: float
    """The alarm's threshold, in the metric's own unit."""
    period_seconds: Literal[10, 30, 60, 120, 300, 600] = 60
    """The alarm's period in seconds."""
    evaluation_periods: Annotated[int, Field(ge=1, le=60)] = 1
    """Periods the alarm evaluates (1-60)."""
    datapoints_to_alarm: Annotated[int, Field(ge=1, le=60)] | None = None
    """Breaching periods among evaluation_periods that fire the alarm; omitted: all of them."""
    cooldown_seconds: Annotated[int, Field(ge=0, le=3600)] = 60
    """Seconds after a step before the policy acts again (0-3600)."""
    also_require: StepCondition | None = None
    """Extra condition that must also hold (AND), e.g. scale in only while GPU utilisation is
    low."""
    steps: Annotated[list[StepAdjustment], Field(min_length=1)]
    """The step adjustments: contiguous intervals of the metric's distance from the threshold, each
    with its change in instances."""

    @field_validator("metric")
    @classmethod
    def _metric_known(cls, value: str) -> str:
        return _check_metric(value)

    @section_rule
    def _coherent(self) -> StepPolicy:
        if self.direction == "out" and (
            self.comparison.startswith("<") or any(s.change <= 0 for s in self.steps)
        ):
            raise ValueError("comparison: a scale-out policy needs > or >= and positive changes")
        if self.direction == "in" and (
            self.comparison.startswith(">") or any(s.change >= 0 for s in self.steps)
        ):
            raise ValueError("comparison: a scale-in policy needs < or <= and negative changes")
        if self.datapoints_to_alarm and self.datapoints_to_alarm > self.evaluation_periods:
            raise ValueError("datapoints_to_alarm: must be <= evaluation_periods")
        _check_intervals(self.steps)
        return self


def _check_intervals(steps: list[StepAdjustment]) -> None:
    """Steps must be sorted, contiguous and non-overlapping; one open end at most each side."""
    lo = [float("-inf") if s.lower is None else s.lower for s in steps]
    hi = [float("inf") if s.upper is None else s.upper for s in steps]
    for i, (a, b) in enumerate(zip(lo, hi, strict=True)):
        if a >= b:
            raise ValueError(f"steps.{i}.lower: {a} must be below upper ({b})")
        if i and a != hi[i - 1]:
            kind = "overlap" if a < hi[i - 1] else "leave a gap"
            raise ValueError(
                f"steps.{i}.lower: {a} and the step before it {kind}: its upper is {hi[i - 1]}; "
                "each step's lower must be the upper of the one before"
            )


class VariantScaling(Strict):
    min_capacity: Capacity
    """The fewest instances autoscaling may leave (the floor the endpoint never goes under)."""
    max_capacity: Capacity
    """The most instances autoscaling may run (the quota must hold it)."""
    target_tracking: TargetTracking | None = TargetTracking()
    """The target-tracking policy; null: none (step policies only)."""
    step_policies: list[StepPolicy] = []
    """Step-scaling policies, each driven by one alarm on a metric."""

    @section_rule
    def _bounds(self) -> VariantScaling:
        check_capacity_bounds(self.min_capacity, self.max_capacity)
        names = [p.name for p in self.step_policies]
        if len(set(names)) != len(names):
            raise ValueError(f"step_policies: names must be unique: {names}")
        authorities = self.scale_in_authorities
        if len(authorities) > 1:
            field = (
                "target_tracking.scale_in"
                if self.target_tracking is not None and self.target_tracking.scale_in
                else "step_policies"
            )
            raise ValueError(
                f"{field}: {len(authorities)} scale-in authorities on one scalable target "
                f"({', '.join(authorities)}). Application Auto Scaling runs every policy and a "
                "step scale-in is not blocked by target tracking (PutScalingPolicy), so they "
                "undo each other; keep one: target_tracking.scale_in: false lets the step "
                "policy own scale-in, or remove the step scale-in policy"
            )
        return self

    @property
    def scale_in_authorities(self) -> list[str]:
        """Every policy that can lower this target's desired capacity."""
        tt = self.target_tracking
        return (["target_tracking"] if tt is not None and tt.scale_in else []) + [
            f"step policy {p.name}" for p in self.step_policies if p.direction == "in"
        ]


class ScalingConfig(Strict):
    variants: dict[VariantName, VariantScaling]
    """Scaling per variant, one entry each for ``primary`` and ``canary``."""
    schedules: list[ScheduledAction] = []
    """Recurring bound changes in local time (a night floor, a day ceiling)."""
    release_calendar: list[ReleaseEvent] = []
    """Known releases: bounds raised ahead of each and restored after."""

    def queue_step_variants(self) -> set[str]:
        """Variants with a step scale-out policy on the queue depth (QueueDepth)."""
        return {
            name
            for name, v in self.variants.items()
            if any(
                p.direction == "out" and p.metric == mc.QUEUE_DEPTH.name for p in v.step_policies
            )
        }

    @section_rule
    def _within_variant_bounds(self) -> ScalingConfig:
        missing = set(VARIANT_NAMES) - set(self.variants)
        if missing:
            raise ValueError(f"variants: needs an entry for {sorted(missing)}")
        errors = []
        names = [s.name for s in self.schedules] + [r.name for r in self.release_calendar]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            errors.append(f"schedules: schedule/release names must be unique: {dupes}")
        groups: tuple[tuple[str, list[ScheduledAction | ReleaseEvent]], ...] = (
            ("schedules", [*self.schedules]),
            ("release_calendar", [*self.release_calendar]),
        )
        for kind, items in groups:
            for i, item in enumerate(items):
                bound = self.variants[item.variant].max_capacity
                if item.max_capacity > bound:
                    errors.append(
                        f"{kind}.{i}.max_capacity: {item.max_capacity} exceeds "
                        f"scaling.variants.{item.variant}.max_capacity ({bound}); raise that too"
                    )
                floor = self.variants[item.variant].min_capacity
                if item.min_capacity < floor:
                    errors.append(
                        f"{kind}.{i}.min_capacity: {item.min_capacity} is below "
                        f"scaling.variants.{item.variant}.min_capacity ({floor}), the floor "
                        "the endpoint must never go under"
                    )
        for i, event in enumerate(self.release_calendar):
            start, end = event.window
            for sched in self.schedules:
                fire = sched.first_fire_after(start)
                if sched.variant == event.variant and fire < end:
                    errors.append(
                        f"release_calendar.{i}: the schedule {sched.name} "
                        f"fires at {fire.astimezone(start.tzinfo):%Y-%m-%d %H:%M} {event.timezone}"
                        f" inside the pre-scale window {start:%Y-%m-%d %H:%M}.."
                        f"{end:%Y-%m-%d %H:%M} and would undo it; end the window at or before it"
                    )
        if errors:
            raise ValueError("\n".join(errors))
        return self

    def recurring_bounds_at(self, variant: VariantName, when: datetime) -> tuple[int, int]:
        """(min, max) the recurring schedules hold for ``variant`` at ``when``: the last one to
        fire at or before it, or the variant's own bounds when it has no schedule."""
        mine = [s for s in self.schedules if s.variant == variant]
        if not mine:
            base = self.variants[variant]
            return base.min_capacity, base.max_capacity
        last = max(mine, key=lambda s: s.last_fire(when))
        return last.written_min_capacity, last.max_capacity


def bounds_changes(scaling: ScalingConfig) -> list[BoundsChange]:
    """Every scheduled action the schedules and the release calendar make, in the order written:
    each recurring schedule (MinCapacity = floor + standby), then per release a pre-scale at
    ``at - prescale_hours`` to the release's bounds and a restore at ``at +
    restore_after_hours`` to what the recurring schedules hold then
    (:meth:`ScalingConfig.recurring_bounds_at`)."""
    changes = [
        BoundsChange(
            s.name,
            "recurring",
            s.variant,
            s.cron,
            s.timezone,
            s.written_min_capacity,
            s.max_capacity,
        )
        for s in scaling.schedules
    ]
    for r in scaling.release_calendar:
        start, end = r.window
        low, high = scaling.recurring_bounds_at(r.variant, end)
        changes += [
            BoundsChange(
                r.name, "prescale", r.variant, start, r.timezone, r.min_capacity, r.max_capacity
            ),
            BoundsChange(r.name, "restore", r.variant, end, r.timezone, low, high),
        ]
    return changes
