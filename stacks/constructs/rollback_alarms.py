"""Alarms that make SageMaker roll a blue/green deployment back (and gate the canary rollout).

Per variant: 5XX errors and ModelLatency p99, on SageMaker's own AWS/SageMaker metrics. The
monitoring construct reuses these (adds notifications) rather than creating duplicates.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from sizing.rollout_alarms import ROLLBACK_5XX, ROLLBACK_LATENCY_P99, Timing
from stacks.constructs.endpoint_ref import EndpointRef
from stacks.constructs.metrics import MICROSECONDS_PER_MS
from typed_config import VARIANT_NAMES, DeploymentPolicy, VariantName


def treat_missing_data(timing: Timing) -> cloudwatch.TreatMissingData:
    """CloudWatch's name for ``timing.missing`` (``notBreaching`` -> NOT_BREACHING, ...)."""
    upper = "".join(f"_{c}" if c.isupper() else c.upper() for c in timing.missing)
    return cloudwatch.TreatMissingData[upper]


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
                ROLLBACK_5XX,
                f"{variant}: more than {errors} 5XX errors a minute in "
                f"{ROLLBACK_5XX.datapoints_to_alarm} of {ROLLBACK_5XX.evaluation_periods} minutes",
            )
            self.latency[variant] = self._alarm(
                f"{variant.capitalize()}ModelLatencyP99",
                endpoint.metric_model_latency(variant, "p99"),
                latency_ms * MICROSECONDS_PER_MS,  # ModelLatency is published in microseconds
                ROLLBACK_LATENCY_P99,
                f"{variant}: ModelLatency p99 above {latency_ms} ms in "
                f"{ROLLBACK_LATENCY_P99.datapoints_to_alarm} of "
                f"{ROLLBACK_LATENCY_P99.evaluation_periods} minutes",
            )

    def _alarm(
        self,
        construct_id: str,
        metric: cloudwatch.IMetric,
        threshold: float,
        timing: Timing,
        condition: str,
    ) -> cloudwatch.Alarm:
        """An alarm on ``metric`` above ``threshold``, evaluated as ``timing`` says (the figures the
        simulator's blast-radius replay uses, sizing/rollout_alarms.py)."""
        return cloudwatch.Alarm(
            self,
            construct_id,
            alarm_description=f"{condition} (rolls back a deployment)",
            metric=metric,
            threshold=threshold,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=timing.evaluation_periods,
            datapoints_to_alarm=timing.datapoints_to_alarm,
            treat_missing_data=treat_missing_data(timing),
        )

    @property
    def all(self) -> list[cloudwatch.Alarm]:
        return [*self.errors.values(), *self.latency.values()]
