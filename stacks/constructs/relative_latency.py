"""The canary's latency relative to the primary's: a regression signal that means "this release
is slower", where an absolute ModelLatency threshold can only mean "slower than a figure".

Issue 20 item 2 asks for rollback signals that mean regression (error rates, TTFT from the
container's metrics, the canary's latency relative to the primary's) over absolute figures. The
error-rate comparison is the controller's own evidence rule (``rollout.max_error_rate_increase_
percent``); the absolute ModelLatency alarm stays as a ceiling checked against the speed model
(sizing.speed_plan). These alarms add the relative latency: CloudWatch metric math
(CloudWatch user guide, "Using metric math"; "Create a CloudWatch alarm based on a metric math
expression") divides the canary's figure by the primary's each minute, and ``IF`` keeps the
minutes where the canary served too few requests for a p99 at 0 (not breaching).

They are watched by the canary controller only, not by SageMaker's blue/green rollback: a
blue/green update replaces both variants' fleets at once, so during it the ratio compares two
new fleets.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from container.serving import metrics_contract as mc
from sizing.rollout_alarms import RELATIVE_LATENCY, ratio_expression
from stacks.constructs.endpoint_ref import EndpointRef
from stacks.constructs.rollback_alarms import treat_missing_data
from typed_config import RolloutConfig

#: (construct id, metric, statistic, what it measures): the two latencies compared.
RATIOS: tuple[tuple[str, str, str, str], ...] = (
    ("ModelLatencyRatio", "ModelLatency", "p99", "ModelLatency p99"),
    ("TtftRatio", mc.TTFT_P95.name, "Average", "TTFT p95 (container)"),
)
MINUTE = Duration.minutes(1)


class RelativeLatencyAlarms(Construct):
    """``alarms``: canary / primary above ``rollout.max_latency_ratio`` (none when it is None)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        endpoint: EndpointRef,
        rollout: RolloutConfig,
        canary_per_primary: float,
    ) -> None:
        """``canary_per_primary``: canary instances that serve what one primary instance serves
        (the rollout's capacity plan), to compare the loads per instance in like units."""
        super().__init__(scope, construct_id)
        self.alarms: list[cloudwatch.Alarm] = []
        ratio = rollout.max_latency_ratio
        if ratio is None:
            return
        floor = rollout.latency_ratio_min_invocations_per_minute
        for construct_id_, name, stat, what in RATIOS:
            expression = cloudwatch.MathExpression(
                expression=ratio_expression(floor, canary_per_primary),
                using_metrics={
                    "canary": endpoint.metric("canary", name, statistic=stat, period=MINUTE),
                    "primary": endpoint.metric("primary", name, statistic=stat, period=MINUTE),
                    "inv": endpoint.metric("canary", "Invocations", statistic="Sum", period=MINUTE),
                    "cipi": endpoint.metric(
                        "canary", mc.INVOCATIONS_PER_INSTANCE, statistic="Sum", period=MINUTE
                    ),
                    "pipi": endpoint.metric(
                        "primary", mc.INVOCATIONS_PER_INSTANCE, statistic="Sum", period=MINUTE
                    ),
                },
                period=MINUTE,
                label=f"canary / primary {what}",
            )
            self.alarms.append(
                cloudwatch.Alarm(
                    self,
                    construct_id_,
                    alarm_description=(
                        f"canary: {what} above {ratio:g} x the primary's in "
                        f"{RELATIVE_LATENCY.datapoints_to_alarm} of "
                        f"{RELATIVE_LATENCY.evaluation_periods} minutes with "
                        f"at least {floor} canary invocations a minute and a canary load per "
                        "instance not above the primary's (rolls back the canary rollout)"
                    ),
                    metric=expression,
                    threshold=ratio,
                    comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                    evaluation_periods=RELATIVE_LATENCY.evaluation_periods,
                    datapoints_to_alarm=RELATIVE_LATENCY.datapoints_to_alarm,
                    treat_missing_data=treat_missing_data(RELATIVE_LATENCY),
                )
            )
