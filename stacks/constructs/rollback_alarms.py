"""Alarms that make SageMaker roll a blue/green deployment back (and gate the canary rollout).

Per variant: 5XX errors and ModelLatency p99, on SageMaker's own AWS/SageMaker metrics. The
monitoring construct reuses these (adds notifications) rather than creating duplicates.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from container.serving import metrics_contract as mc
from stacks.config import DeploymentConfig

MICROSECONDS_PER_MS = 1000


class RollbackAlarms(Construct):
    """``errors[variant]`` and ``latency[variant]`` alarms; ``all`` lists them."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cfg: DeploymentConfig,
        variant_names: tuple[str, ...],
    ) -> None:
        super().__init__(scope, construct_id)
        policy = cfg.deployment
        self.errors: dict[str, cloudwatch.Alarm] = {}
        self.latency: dict[str, cloudwatch.Alarm] = {}
        for variant in variant_names:
            dims = {mc.DIM_ENDPOINT: cfg.endpoint_name, mc.DIM_VARIANT: variant}
            self.errors[variant] = cloudwatch.Alarm(
                self,
                f"{variant.capitalize()}5xx",
                alarm_description=(
                    f"{variant}: more than {policy.rollback_5xx_errors_per_minute} 5XX "
                    "errors a minute in 2 of 3 minutes (rolls back a deployment)"
                ),
                metric=cloudwatch.Metric(
                    namespace=mc.SAGEMAKER_INVOCATION_NAMESPACE,
                    metric_name="Invocation5XXErrors",
                    dimensions_map=dims,
                    statistic="Sum",
                    period=Duration.minutes(1),
                ),
                threshold=policy.rollback_5xx_errors_per_minute,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=3,
                datapoints_to_alarm=2,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )
            self.latency[variant] = cloudwatch.Alarm(
                self,
                f"{variant.capitalize()}ModelLatencyP99",
                alarm_description=(
                    f"{variant}: ModelLatency p99 above {policy.rollback_model_latency_p99_ms} ms "
                    "in 3 of 5 minutes (rolls back a deployment)"
                ),
                metric=cloudwatch.Metric(
                    namespace=mc.SAGEMAKER_INVOCATION_NAMESPACE,
                    metric_name="ModelLatency",
                    dimensions_map=dims,
                    statistic="p99",
                    period=Duration.minutes(1),
                ),
                # ModelLatency is published in microseconds.
                threshold=policy.rollback_model_latency_p99_ms * MICROSECONDS_PER_MS,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=5,
                datapoints_to_alarm=3,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            )

    @property
    def all(self) -> list[cloudwatch.Alarm]:
        return [*self.errors.values(), *self.latency.values()]
