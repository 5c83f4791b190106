"""The alarms the canary controller watches, as data: what each one measures on the canary, its
threshold, and how CloudWatch evaluates it (period, M of N, missing data).

The simulator (floor 4, beside the stacks) replays the rollout with these alarms and cannot import
the CDK constructs, so their evaluation figures are defined here, on the floor below both. The
stacks build the same alarms: ``stacks/constructs/rollback_alarms.py`` (5XX 2 of 3 minutes,
ModelLatency p99 3 of 5), ``relative_latency.py`` (canary / primary, 3 of 5, an invocation
floor, like loads only: :func:`ratio_expression`) and ``monitoring.py`` with ``alarm_rules.py``
(high TTFT over 5 minutes, engine restarts in 5 minutes; ``_rule_period``). The rollback and
relative latency alarms take their timing from here;
``tests/simulator/test_rollout_alarms_contract.py`` builds those constructs and holds every
figure (the monitoring rules' windows too) equal to these.

Which alarms are watched is ``stacks/endpoint_stack.py``'s ``_canary_controller``: the canary's
5XX and ModelLatency p99 rollback alarms, its high-TTFT and engine-restart alarms, and the
relative latency alarms; plus ``rollout.extra_alarm_names``, which the simulator cannot know.

CloudWatch's evaluation (user guide, "Using Amazon CloudWatch alarms", Evaluating an alarm:
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/AlarmThatSendsEmail.html): an
alarm goes to ALARM when at least ``datapoints_to_alarm`` (M) of the ``evaluation_periods`` (N)
most recent period datapoints breach; without ``datapoints_to_alarm`` M is N. Missing datapoints
("Configuring how CloudWatch alarms treat missing data":
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-missing-data.html):
``notBreaching`` counts them as good, ``breaching`` as bad, ``ignore`` keeps the state, ``missing``
goes to INSUFFICIENT_DATA when every datapoint of the range is missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from typed_config import DeploymentConfig

Missing = Literal["notBreaching", "breaching", "ignore", "missing"]
#: What an alarm measures on the canary each minute (the simulator computes each one):
#: 5XX errors a minute, ModelLatency p99 (ms), canary / primary ModelLatency p99 and TTFT p95,
#: the container's TTFT p95 (ms), engine restarts.
Signal = Literal[
    "errors_per_minute", "latency_p99_ms", "latency_ratio", "ttft_ratio", "ttft_p95_ms", "restarts"
]


@dataclass(frozen=True)
class Timing:
    """How CloudWatch evaluates one alarm."""

    period_seconds: int
    evaluation_periods: int
    #: M of the N periods; CloudWatch's default (and CDK's) is N.
    datapoints_to_alarm: int
    missing: Missing = "notBreaching"

    def __post_init__(self) -> None:
        if not 1 <= self.datapoints_to_alarm <= self.evaluation_periods:
            raise ValueError(
                f"datapoints_to_alarm {self.datapoints_to_alarm} must be within 1.."
                f"{self.evaluation_periods} (evaluation_periods)"
            )


#: The rollback alarms (stacks/constructs/rollback_alarms.py), per variant.
ROLLBACK_5XX = Timing(60, 3, 2)
ROLLBACK_LATENCY_P99 = Timing(60, 5, 3)
#: The relative latency alarms (stacks/constructs/relative_latency.py).
RELATIVE_LATENCY = Timing(60, 5, 3)
#: The relative latency alarms compare the variants only in minutes when the canary's load per
#: instance is not above the primary's (:func:`ratio_expression`): latency rises steeply with the
#: load near the scaling target (prod's speed model: a p99 of 21.5 s at 50 in flight, 39.7 s at
#: the target of 109), so a healthy canary on fewer instances per request than the primary (the
#: step's planned instances while the primary waits for its scale-in) is slower for its load
#: alone. At a like load a healthy build answers as the primary does (ratio 1), so the ratio
#: means the release. This is that bound: the canary's invocations per instance, in primary
#: instances (``x canary_per_primary``), at most this many times the primary's. 1: any slack
#: lets the load alone make a healthy canary slower (10 % more load near the target is 2 x the
#: p99 on prod's speed model), and a minute left out is only a minute not compared.
COMPARABLE_LOAD = 1.0
#: The monitoring rules' windows the controller watches (stacks/constructs/alarm_rules.py):
#: "high-ttft" (Average, over the window) and "engine-restarts" (Sum in the window).
HIGH_TTFT_WINDOW_SECONDS = 300
ENGINE_RESTARTS_WINDOW_SECONDS = 300


def rule_period(window_seconds: int, metrics_interval_seconds: int, *, count: bool) -> int:
    """A monitoring rule's alarm period on a metric published every ``metrics_interval_seconds``
    (the container's interval; 60 for SageMaker's own): that interval rounded up to whole minutes,
    no longer than the window; a count "in the window" (Sum) or an SLO window is one datapoint of
    the whole window. The stacks' alarms take their periods from here (monitoring.py)."""
    if count or window_seconds >= 3600:
        return window_seconds
    return min(window_seconds, max(60, math.ceil(metrics_interval_seconds / 60) * 60))


def window_timing(window_seconds: int, metrics_interval_seconds: int, *, count: bool) -> Timing:
    """A monitoring rule's timing: every period of the window must breach (no M of N)."""
    period = rule_period(window_seconds, metrics_interval_seconds, count=count)
    n = max(1, window_seconds // period)
    return Timing(period, n, n)


@dataclass(frozen=True)
class WatchedAlarm:
    """One alarm the controller reads on every tick; it rolls back when the alarm is in ALARM."""

    key: str
    signal: Signal
    threshold: float
    timing: Timing
    #: Metric math's ``IF(inv >= floor, ratio, 0)``: a minute with fewer canary invocations
    #: counts 0 (not breaching) rather than a ratio of a handful of requests.
    min_invocations_per_minute: int | None = None

    def breaches(self, value: float) -> bool:
        """Every watched alarm is GreaterThanThreshold."""
        return value > self.threshold


def ratio_expression(min_invocations: int, canary_per_primary: float) -> str:
    """The relative latency alarm's metric math (stacks/constructs/relative_latency.py): the
    canary's figure over the primary's in a minute with at least ``min_invocations`` canary
    invocations (``inv``) and like loads (:func:`comparable_loads` on AWS/SageMaker
    InvocationsPerInstance, ``cipi`` and ``pipi``: "the number of invocations sent to a model,
    normalized by InstanceCount in each ProductionVariant", SageMaker API reference,
    ScalingPolicyMetric: https://docs.aws.amazon.com/sagemaker/latest/APIReference/
    API_ScalingPolicyMetric.html); 0 (not breaching) otherwise. Nested ``IF`` (CloudWatch user
    guide, "Using metric math", IF expression) rather than a logical AND."""
    load = f"cipi * {canary_per_primary:g} <= {COMPARABLE_LOAD:g} * pipi"
    return f"IF(inv >= {min_invocations}, IF({load}, canary / primary, 0), 0)"


def comparable_loads(
    canary_per_instance: float, primary_per_instance: float, canary_per_primary: float
) -> bool:
    """Whether a minute's loads are alike enough for the ratio alarms (:data:`COMPARABLE_LOAD`;
    invocations per instance of each variant): the canary's, in primary instances, not above
    the primary's."""
    return canary_per_instance * canary_per_primary <= COMPARABLE_LOAD * primary_per_instance


def watched_alarms(cfg: DeploymentConfig) -> tuple[WatchedAlarm, ...]:
    """The canary alarms the controller watches under ``cfg`` (thresholds from its sections)."""
    dep, mon, ro = cfg.deployment, cfg.monitoring, cfg.rollout
    interval = cfg.engine.metrics_interval_seconds
    alarms = [
        WatchedAlarm(
            "canary-5xx", "errors_per_minute", dep.rollback_5xx_errors_per_minute, ROLLBACK_5XX
        ),
        WatchedAlarm(
            "canary-model-latency-p99",
            "latency_p99_ms",
            dep.rollback_model_latency_p99_ms,
            ROLLBACK_LATENCY_P99,
        ),
        WatchedAlarm(
            "canary/high-ttft",
            "ttft_p95_ms",
            mon.ttft_p95_ms,
            window_timing(HIGH_TTFT_WINDOW_SECONDS, interval, count=False),
        ),
        WatchedAlarm(
            "canary/engine-restarts",
            "restarts",
            0,
            window_timing(ENGINE_RESTARTS_WINDOW_SECONDS, interval, count=True),
        ),
    ]
    if ro.max_latency_ratio is not None:
        floor = ro.latency_ratio_min_invocations_per_minute
        ratios: tuple[tuple[str, Signal], ...] = (
            ("model-latency-ratio", "latency_ratio"),
            ("ttft-ratio", "ttft_ratio"),
        )
        for key, signal in ratios:
            alarms.append(WatchedAlarm(key, signal, ro.max_latency_ratio, RELATIVE_LATENCY, floor))
    return tuple(alarms)
