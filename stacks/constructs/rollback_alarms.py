"""Alarms that make SageMaker roll a blue/green deployment back (and gate the canary rollout).

Per variant: 5XX errors and ModelLatency p99, on SageMaker's own AWS/SageMaker metrics. The
monitoring construct reuses these (adds notifications) rather than creating duplicates.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from stacks.constructs.endpoint_ref import EndpointRef
from stacks.constructs.metrics import MICROSECONDS_PER_MS
from typed_config import VARIANT_NAMES, DeploymentPolicy, VariantName


class RollbackAlarms(Construct):
    """``errors[variant]`` and ``latency[variant]`` alarms; ``all`` lists them.

    Thresholds are ``policy.rollback_5xx_errors_per_minute`` and
    ``policy.rollback_model_latency_p99_ms`` (the config's ``deployment`` section).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        endpoint: EndpointRef,
        policy: DeploymentPolicy,
        variant_names: Sequence[VariantName] = VARIANT_NAMES,
    ) -> None:
        super().__init__(scope, construct_id)
        self.errors: dict[str, cloudwatch.Alarm] = {}
        self.latency: dict[str, cloudwatch.Alarm] = {}
        errors = policy.rollback_5xx_errors_per_minute
        latency_ms = policy.rollback_model_latency_p99_ms
        for variant in variant_names:
            self.errors[variant] = self._alarm(
                f"{variant.capitalize()}5xx",
                endpoint.metric_invocation_5xx_errors(variant),
                errors,
                (3, 2),
                f"{variant}: more than {errors} 5XX errors a minute in 2 of 3 minutes",
            )
            self.latency[variant] = self._alarm(
                f"{variant.capitalize()}ModelLatencyP99",
                endpoint.metric_model_latency(variant, "p99"),
                latency_ms * MICROSECONDS_PER_MS,  # ModelLatency is published in microseconds
                (5, 3),
                f"{variant}: ModelLatency p99 above {latency_ms} ms in 3 of 5 minutes",
            )

    def _alarm(
        self,
        construct_id: str,
        metric: cloudwatch.IMetric,
        threshold: float,
        periods_datapoints: tuple[int, int],
        condition: str,
    ) -> cloudwatch.Alarm:
        """An alarm on ``metric`` above ``threshold`` in ``datapoints`` of ``periods`` minutes."""
        periods, datapoints = periods_datapoints
        return cloudwatch.Alarm(
            self,
            construct_id,
            alarm_description=f"{condition} (rolls back a deployment)",
            metric=metric,
            threshold=threshold,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=periods,
            datapoints_to_alarm=datapoints,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )

    @property
    def all(self) -> list[cloudwatch.Alarm]:
        return [*self.errors.values(), *self.latency.values()]
