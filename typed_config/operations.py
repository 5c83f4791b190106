"""Operating the endpoint: canary rollout, smoke gate, notifications, alarm and SLO thresholds."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, field_validator

from typed_config.base import Strict, section_rule, worded
from typed_config.instance_start import ASSUMED_READY_SECONDS
from typed_config.shadow import ShadowStage

#: The default capacity wait in instance starts: the request, the endpoint still Updating with an
#: earlier change (autoscaling, one start), and one launch that fails and is replaced.
CAPACITY_WAIT_INSTANCE_STARTS = 3
#: A rollback's wait for the primary's instances, in instance starts: the one start that brings
#: them (they launch together). A rollback waits with a faulty canary still on its share, so it
#: does not allow for a retried launch: past it the weight moves anyway.
ROLLBACK_CAPACITY_WAIT_INSTANCE_STARTS = 1
#: How long the controller waits for an endpoint that is not InService, in instance starts: an
#: autoscaling scale-out (one start) and another one autoscaling starts right after it. Past it a
#: RUNNING rollout rolls back, and a rollback (after its capacity wait) ends FAILED and says so.
UPDATING_WAIT_INSTANCE_STARTS = 2

_EMAIL = worded(r"^[^@\s]+@[^@\s]+\.[^@\s]+$", "an e-mail address, e.g. oncall@example.com")


class RolloutConfig(Strict):
    """Progressive canary rollout driven by the canary controller Lambda."""

    steps_percent: Annotated[list[int], Field(min_length=1)] = [5, 25, 50, 75, 100]
    """The canary's traffic share at each step, in percent, rising to 100."""
    bake_minutes: Annotated[int, Field(ge=1, le=10080)] = 60
    """Minutes each step is held while the alarms are watched, before the next (1-10080)."""
    check_interval_minutes: Annotated[int, Field(ge=1, le=60)] = 5
    """Minutes between the canary controller's checks (1-60)."""
    canary_instances: Annotated[int, Field(ge=1, le=100)] | None = None
    """The canary's instance floor while a release runs: the release path raises
    scaling.variants.canary.min_capacity to it when a rollout starts and restores the config's
    after it, so between releases the canary stands at its own (the least a blue/green deploy
    accepts: SageMaker bills every instance of a variant, and an instance-based endpoint's variant
    cannot scale to zero). None: the canary's own min stands all the time. The fleet solver
    (simulator/fleet/solver.py) sets it; the plan prices it as release hours a month."""
    extra_alarm_names: list[str] = []
    """Names of further CloudWatch alarms whose ALARM rolls the canary back (beside the product's
    own)."""
    min_canary_invocations_per_step: Annotated[int, Field(ge=1)] = 100
    """Evidence per step: the canary must have served at least this many invocations since its
    weight last moved (AWS/SageMaker Invocations) before it may take the next step."""
    max_error_rate_increase_percent: Annotated[float, Field(ge=0, le=100)] = 0.5
    """The canary's 5XX rate may exceed the primary's over the same window (since its weight last
    moved) by at most this many percentage points, or it rolls back."""
    evidence_timeout_minutes: Annotated[int, Field(ge=0, le=10080)] = 60
    """After a bake, how long to wait for that evidence before rolling back a silent canary; also
    how long a shift may be held by watched alarms without data."""
    capacity_timeout_minutes: Annotated[int, Field(ge=1, le=1440)] | None = None
    """How long the canary may stay short of the instances a step needs (SageMaker cannot place
    them: instance capacity, the account's quota) before the rollout rolls back and says so, counted
    from the first request of that step's capacity. Not set: CAPACITY_WAIT_INSTANCE_STARTS instance
    starts (each the plan's per-start bound, sizing.ready_bound: the measured new-tag start plus a
    margin) plus the check that sees the last one (:meth:`capacity_timeout_seconds_for`). Set: at
    least one such start plus one check."""
    max_latency_ratio: Annotated[float, Field(gt=1, le=10)] | None = 1.5
    """Regression relative to the primary, not an absolute figure: the rollout rolls back when the
    canary's ModelLatency p99 or its container's TTFT p95 exceeds this multiple of the primary's in
    3 of 5 minutes (stacks.constructs.relative_latency). Both variants see the same traffic mix, so
    a slower canary is the release, not the load. None: not watched."""
    latency_ratio_min_invocations_per_minute: Annotated[int, Field(ge=1)] = 20
    """max_latency_ratio counts only minutes in which the canary served at least this many
    invocations (a p99 of a handful of requests is noise)."""
    shadow: ShadowStage | None = None
    """A shadow stage before the first canary step (typed_config.shadow); None: the release starts
    with the canary, the first request the new build answers is a user's."""

    @field_validator("steps_percent")
    @classmethod
    def _increasing(cls, steps: list[int]) -> list[int]:
        if any(not 0 < s <= 100 for s in steps) or steps != sorted(set(steps)):
            raise ValueError(f"steps_percent must be strictly increasing within 1..100: {steps}")
        if steps[-1] != 100:
            raise ValueError(
                f"steps_percent {steps} ends at {steps[-1]}: a rollout completes with the canary "
                "on 100 % of traffic (the promotion and the plan's 100 % step bounds assume it); "
                "end the list with 100"
            )
        return steps

    def capacity_wait_minutes(self, instance_starts: int, ready_seconds: float) -> int:
        """``instance_starts`` instance starts of ``ready_seconds`` each (from the capacity
        request to the instance serving: the plan's per-start bound, sizing.ready_bound) plus the
        check that sees the last."""
        starts = instance_starts * ready_seconds / 60
        return math.ceil(starts + self.check_interval_minutes)

    @section_rule
    def _capacity_wait_covers_an_instance_start(self) -> RolloutConfig:
        """Held here against the assumed floor (ASSUMED_READY_SECONDS): the measured start is
        not known on the config's floor; sizing.ready_bound.ready_bound_errors holds the same
        rule against the derived bound, which is never below it."""
        if self.capacity_timeout_minutes is None:
            return self
        least = self.capacity_wait_minutes(1, ASSUMED_READY_SECONDS)
        if self.capacity_timeout_minutes < least:
            raise ValueError(
                f"capacity_timeout_minutes: {self.capacity_timeout_minutes} is shorter than one "
                f"instance start plus one check ({least} min): every canary whose instances are "
                f"still starting would roll back; use {least} or more"
            )
        return self

    def capacity_timeout_seconds_for(self, ready_seconds: float) -> int:
        """``capacity_timeout_minutes`` in seconds, or the default it documents at the per-start
        bound ``ready_seconds`` (the Lambda's ``CAPACITY_TIMEOUT_SECONDS``; the simulator's
        rules; sizing.ready_bound.rollout_waits passes the bound)."""
        minutes = self.capacity_timeout_minutes
        if minutes is None:
            minutes = self.capacity_wait_minutes(CAPACITY_WAIT_INSTANCE_STARTS, ready_seconds)
        return minutes * 60

    def rollback_capacity_timeout_seconds_for(self, ready_seconds: float) -> int:
        """How long a rollback waits for the primary's instances before it moves the canary's
        weight anyway: ROLLBACK_CAPACITY_WAIT_INSTANCE_STARTS instance starts of ``ready_seconds``
        plus the check that sees them (the Lambda's ``ROLLBACK_CAPACITY_TIMEOUT_SECONDS``; the
        simulator's rules)."""
        starts = ROLLBACK_CAPACITY_WAIT_INSTANCE_STARTS
        return self.capacity_wait_minutes(starts, ready_seconds) * 60

    def updating_timeout_seconds_for(self, ready_seconds: float) -> int:
        """How long the controller waits, in a row, for an endpoint that is not InService:
        UPDATING_WAIT_INSTANCE_STARTS instance starts of ``ready_seconds`` plus the check that
        sees the end (the Lambda's ``UPDATING_TIMEOUT_SECONDS``). A rollback's deadline is this
        plus :meth:`rollback_capacity_timeout_seconds_for` (``rules.Rules``)."""
        return self.capacity_wait_minutes(UPDATING_WAIT_INSTANCE_STARTS, ready_seconds) * 60


class SmokeGateConfig(Strict):
    enabled: bool = True
    """False: no smoke gate after a deploy."""
    prompt: str = "Recommend one action manga in one sentence."
    """The prompt each adapter is asked; an empty or failed answer fails the gate."""
    max_tokens: Annotated[int, Field(ge=1, le=512)] = 16
    """Answer length of the smoke request, in tokens (1-512)."""
    timeout_seconds: Annotated[int, Field(ge=10, le=3000)] = 300
    """One deadline for the whole gate, and the CDK Provider's total timeout: at most 1 hour
    (custom_resources ProviderProps.totalTimeout; CloudFormation waits 1 hour for a custom resource
    by default), so 3000 s leaves room for the start and the last round."""

    @field_validator("timeout_seconds")
    @classmethod
    def _polled_every_15_s(cls, value: int) -> int:
        if value > 60 and value % 15:
            raise ValueError(
                f"{value} must be a multiple of 15 above 60 s: the Provider polls at an interval "
                f"that divides the timeout, and 15 s keeps it from polling every second "
                f"(try {value - value % 15} or {value - value % 15 + 15})"
            )
        return value


class NotificationConfig(Strict):
    emails: list[Annotated[str, Field(pattern=_EMAIL)]] = []
    """E-mail addresses subscribed to the alarm topic (each confirms the subscription once)."""


class MetricsPath(Strict):
    """What SageMaker itself publishes for the endpoint: the EndpointConfig's ``MetricsConfig``,
    set explicitly (stacks.constructs.metrics_path says why each default is what it is).

    The alarms, the step-scaling policies and the blue/green rollback read the container's
    metrics as classic CloudWatch metrics (the entrypoint's EMF lines); SageMaker's detailed
    observability would scrape the same ``/metrics`` a second time into OpenTelemetry metrics
    that only PromQL reads, so it is off unless asked for."""

    detailed_observability: bool = False
    """``EnableDetailedObservability``: SageMaker's collector scrapes the container's /metrics (port
    8080) into CloudWatch OTel metrics (PromQL only). AWS's default is true for endpoint configs
    created after 2026-06-17; off here: one metrics path."""
    enhanced_metrics: bool = True
    """``EnableEnhancedMetrics``: per-instance (InstanceId) and per-GPU (AcceleratorId) classic
    metrics in /aws/sagemaker/Endpoints and AWS/SageMaker: the dashboard's per-GPU graphs."""
    publish_frequency_seconds: Literal[10, 30, 60, 120, 180, 240, 300] = 60
    """``MetricPublishFrequencyInSeconds``: AWS accepts 10, 30, 60, 120, 180, 240, 300 (default 60);
    with enhanced metrics it applies to invocation metrics too."""


class MonitoringConfig(Strict):
    """Alarm thresholds and SLO targets; defaults are the alerting rules and SLOs the original
    team ran in production."""

    metrics_path: MetricsPath = MetricsPath()
    """SageMaker's own metrics for the endpoint (MetricsConfig)."""

    ttft_p95_ms: Annotated[float, Field(gt=0)] = 500
    """The high-TTFT alarm: time to first token p95 above this, in milliseconds; above what a
    healthy fleet shows at its scaling target (synth checks it)."""
    queue_depth_critical: Annotated[float, Field(gt=0)] = 80
    """The queue-buildup alarm: requests waiting in vLLM's queue per instance (QueueDepth,
    averaged over the instances) above this."""
    kv_cache_usage_percent: Annotated[float, Field(gt=0, le=100)] = 95
    """The KV-cache pressure alarm: cache usage above this, in percent."""
    prefix_cache_hit_rate_min_percent: Annotated[float, Field(ge=0, lt=100)] = 50
    """The prefix-cache alarm: hit rate below this, in percent (a prompt template change)."""
    adapter_latency_baseline_ms: dict[str, Annotated[float, Field(gt=0)]] = {}
    """Adapter P95 baseline (ms) per adapter name; adapters not listed use the default."""
    default_adapter_latency_baseline_ms: Annotated[float, Field(gt=0)] = 1000
    """Adapter latency p95 baseline in milliseconds for adapters not in
    adapter_latency_baseline_ms."""
    adapter_latency_regression_factor: Annotated[float, Field(gt=1)] = 2
    """An adapter's latency alarm fires above its baseline times this (> 1)."""
    slo_availability_percent: Annotated[float, Field(gt=90, lt=100)] = 99.9
    """Availability SLO in percent of requests answered without a 5XX (90-100); its error-budget
    burn alarms."""
    slo_ttft_p50_ms: Annotated[float, Field(gt=0)] = 200
    """SLO: time to first token p50 in milliseconds; binds the scaling target and the capacity
    gate."""
    slo_ttft_p95_ms: Annotated[float, Field(gt=0)] = 500
    """SLO: time to first token p95 in milliseconds, the tail a chat user waits before the answer
    starts; binds the scaling target and the capacity gate. The default is the brief's own
    warning on it ("High TTFT: P95 TTFT > 500 ms for 5 min", the MangaAssist alerting rules): a
    fleet that holds it does not raise that warning when healthy. Held per minute as requests in
    flight per instance within the most at which the speed model's p95 holds; the wait in the
    admission queue before the engine is held by ``slo_queue_wait_p95_ms``."""
    slo_latency_p99_ms: Annotated[float, Field(gt=0)] = 2000
    """SLO: end-to-end latency p99 in milliseconds; binds the scaling target and the capacity
    gate."""
    slo_queue_wait_p95_ms: Annotated[float, Field(gt=0)] = 100
    """SLO: queue wait p95 in milliseconds; held by the capacity gate."""
    slo_tpot_p95_ms: Annotated[float, Field(gt=0)] = 100
    """SLO: time per output token after the first, 95th percentile over requests (ms): how fast an
    answer streams to the user (100 ms = 10 tokens/s per user). The default is MLPerf Inference's
    server-scenario bound for Llama-3.1-8B, the closest model it benchmarks to this product's 8B:
    ``llama3_1-8b.Server.tpot_latency = 100`` in mlcommons/inference loadgen/mlperf.conf (TTFT
    2,000 ms beside it; the interactive scenario asks 30 ms). MLPerf holds it at the 99th
    percentile (``*.Server.target_latency_percentile = 99``); held here at the 95th, as the other
    latency SLOs' alarms read a percentile over an hour."""
    slo_error_rate_percent: Annotated[float, Field(gt=0, lt=10)] = 0.1
    """SLO: 5XX error rate in percent of requests (0-10)."""

    def adapter_threshold_ms(self, adapter: str) -> float:
        base = self.adapter_latency_baseline_ms.get(
            adapter, self.default_adapter_latency_baseline_ms
        )
        return base * self.adapter_latency_regression_factor
