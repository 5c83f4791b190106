"""Autoscaling of each endpoint variant: Application Auto Scaling targets and their policies.

Per variant: a scalable target ``endpoint/<endpoint>/variant/<variant>`` (created after the
endpoint), target tracking on the high-resolution concurrency metric (or invocations), and
step-scaling policies driven by CloudWatch alarms on contract or SageMaker metrics. On the
targets: recurring scheduled actions written in local time with their IANA time zone (MinCapacity
written = floor + standby instances), and for each release in the calendar a one-off pre-scale
``at(...)`` and a restore to what the recurring schedules hold at that moment: the list
``typed_config.bounds_changes`` gives, which the simulator replays too (sizing/bounds_timeline.py).

The construct takes :class:`ScalingProps` (the endpoint name, the scaling section and the
concurrency targets), not the whole DeploymentConfig.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aws_cdk import ArnFormat, Duration, Stack, TimeZone
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from lambdas.canary_controller.canary_scaling import CanaryScaling
from sizing.scaling_target import concurrency_target
from stacks.constructs.metrics import variant_metric
from typed_config import (
    DeploymentConfig,
    ScalingConfig,
    StepPolicy,
    VariantName,
    bounds_changes,
)

SCALABLE_DIMENSION = "sagemaker:variant:DesiredInstanceCount"


def scalable_targets_arn(stack: Stack) -> str:
    """Every scalable target of the account in the region (their ARNs carry a generated id)."""
    return stack.format_arn(
        service="application-autoscaling",
        resource="scalable-target",
        resource_name="*",
        arn_format=ArnFormat.SLASH_RESOURCE_NAME,
    )


def register_variant_bounds(stack: Stack, sid: str) -> iam.PolicyStatement:
    """RegisterScalableTarget on SageMaker variant counts only (the canary controller and the
    deploy role raise and restore bounds). Scalable-target ARNs carry a generated id, so the
    account's targets in the region are named; RegisterScalableTarget supports the condition
    keys application-autoscaling:service-namespace and :scalable-dimension (Service
    Authorization Reference, Application Auto Scaling), which keep it to SageMaker variants."""
    return iam.PolicyStatement(
        sid=sid,
        actions=["application-autoscaling:RegisterScalableTarget"],
        resources=[scalable_targets_arn(stack)],
        conditions={
            "StringEquals": {
                "application-autoscaling:service-namespace": "sagemaker",
                "application-autoscaling:scalable-dimension": SCALABLE_DIMENSION,
            }
        },
    )


# Application Auto Scaling uses (and creates if missing) this service-linked role for SageMaker.
SERVICE_LINKED_ROLE = (
    "aws-service-role/sagemaker.application-autoscaling.amazonaws.com/"
    "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
)
_COMPARISON = {
    ">": cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    ">=": cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
    "<": cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
    "<=": cloudwatch.ComparisonOperator.LESS_THAN_OR_EQUAL_TO_THRESHOLD,
}
# A value on the non-breaching side of each comparison's threshold, as an offset from it.
_NEUTRAL_OFFSET = {">": 0, ">=": -1, "<": 0, "<=": 1}


def resource_id(endpoint_name: str, variant: VariantName) -> str:
    return f"endpoint/{endpoint_name}/variant/{variant}"


#: Target tracking's metric per ``target_tracking.metric``: CDK's enum and the
#: PredefinedMetricType Application Auto Scaling's API names it by.
_TRACKED = {
    "concurrency": (
        appscaling.PredefinedMetric.SAGEMAKER_VARIANT_CONCURRENT_REQUESTS_PER_MODEL_HIGH_RESOLUTION,
        "SageMakerVariantConcurrentRequestsPerModelHighResolution",
    ),
    "invocations": (
        appscaling.PredefinedMetric.SAGEMAKER_VARIANT_INVOCATIONS_PER_INSTANCE,
        "SageMakerVariantInvocationsPerInstance",
    ),
}


@dataclass(frozen=True)
class ScalingProps:
    """What :class:`EndpointScaling` reads."""

    endpoint_name: str
    scaling: ScalingConfig
    #: Target of concurrency target tracking per variant that tracks concurrency
    #: (sizing.capacity.concurrency_target: it needs the engine and the instance's KV cache).
    concurrency_targets: Mapping[VariantName, float]

    @classmethod
    def from_config(cls, cfg: DeploymentConfig) -> ScalingProps:
        """``cfg``'s scaling section, with the concurrency targets its engine and instances give."""
        targets = {
            variant: concurrency_target(cfg, variant)
            for variant, vs in cfg.scaling.variants.items()
            if vs.target_tracking is not None and vs.target_tracking.metric == "concurrency"
        }
        return cls(cfg.endpoint_name, cfg.scaling, targets)


class EndpointScaling(Construct):
    """``targets``, ``tracking``, ``step_actions`` and ``step_alarms`` by variant (and policy)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        props: ScalingProps,
        endpoint: sagemaker.CfnEndpoint,
        suspended: frozenset[str] = frozenset(),
    ) -> None:
        """``suspended`` variants get no scalable target, policy or scheduled action, so a
        deploy of this template deregisters them (tools/deploy.py, instance-type changes)."""
        super().__init__(scope, construct_id)
        self._props = props
        role = iam.Role.from_role_arn(
            self,
            "AutoScalingRole",
            Stack.of(self).format_arn(
                service="iam", region="", resource="role", resource_name=SERVICE_LINKED_ROLE
            ),
        )
        self.targets: dict[str, appscaling.ScalableTarget] = {}
        self.tracking: dict[str, appscaling.TargetTrackingScalingPolicy] = {}
        self.step_actions: dict[tuple[str, str], appscaling.StepScalingAction] = {}
        self.step_alarms: dict[tuple[str, str], cloudwatch.Alarm] = {}
        for variant, vs in props.scaling.variants.items():
            if variant in suspended:
                continue
            target = appscaling.ScalableTarget(
                self,
                f"{variant.capitalize()}Target",
                service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
                resource_id=resource_id(props.endpoint_name, variant),
                scalable_dimension=SCALABLE_DIMENSION,
                min_capacity=vs.min_capacity,
                max_capacity=vs.max_capacity,
                role=role,
            )
            target.node.add_dependency(endpoint)  # the variant must exist before registration
            self.targets[variant] = target
            if vs.target_tracking is not None:
                self.tracking[variant] = self._track(variant, target)
            for policy in vs.step_policies:
                self._step(variant, target, policy)
        for change in bounds_changes(props.scaling):
            if change.variant in suspended:
                continue
            self.targets[change.variant].scale_on_schedule(
                change.action_name,
                schedule=appscaling.Schedule.expression(change.expression),
                min_capacity=change.min_capacity,
                max_capacity=change.max_capacity,
                time_zone=TimeZone.of(change.timezone),
            )

    def _track(
        self, variant: VariantName, target: appscaling.ScalableTarget
    ) -> appscaling.TargetTrackingScalingPolicy:
        t = tracking_terms(self._props, variant)
        return target.scale_to_track_metric(
            f"{variant.capitalize()}TargetTracking",
            target_value=t.value,
            predefined_metric=_TRACKED[t.metric][0],
            scale_out_cooldown=Duration.seconds(t.scale_out_cooldown_seconds),
            scale_in_cooldown=Duration.seconds(t.scale_in_cooldown_seconds),
            disable_scale_in=True if t.disable_scale_in else None,
        )

    def _step(
        self, variant: VariantName, target: appscaling.ScalableTarget, policy: StepPolicy
    ) -> None:
        cid = f"{variant.capitalize()}{''.join(p.capitalize() for p in policy.name.split('-'))}"
        aggregation = {
            "Maximum": appscaling.MetricAggregationType.MAXIMUM,
            "Minimum": appscaling.MetricAggregationType.MINIMUM,
        }.get(policy.statistic, appscaling.MetricAggregationType.AVERAGE)
        action = appscaling.StepScalingAction(
            self,
            cid,
            scaling_target=target,
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            cooldown=Duration.seconds(policy.cooldown_seconds),
            metric_aggregation_type=aggregation,
        )
        for step in policy.steps:
            action.add_adjustment(
                adjustment=step.change, lower_bound=step.lower, upper_bound=step.upper
            )
        alarm = cloudwatch.Alarm(
            self,
            f"{cid}Alarm",
            alarm_description=self._describe(variant, policy),
            metric=self._alarm_metric(variant, policy),
            threshold=policy.threshold,
            comparison_operator=_COMPARISON[policy.comparison],
            evaluation_periods=policy.evaluation_periods,
            datapoints_to_alarm=policy.datapoints_to_alarm,
            # No data is never a reason to scale (out or in).
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(cw_actions.ApplicationScalingAction(action))
        self.step_actions[(variant, policy.name)] = action
        self.step_alarms[(variant, policy.name)] = alarm

    def _alarm_metric(self, variant: VariantName, policy: StepPolicy) -> cloudwatch.IMetric:
        period = Duration.seconds(policy.period_seconds)
        main = variant_metric(
            self._props.endpoint_name,
            variant,
            policy.metric,
            statistic=policy.statistic,
            period=period,
        )
        cond = policy.also_require
        if cond is None:
            return main
        # AND: the main metric while the condition holds, else a value that cannot breach, so
        # the step bounds keep their meaning (offsets from the threshold of the main metric).
        other = variant_metric(
            self._props.endpoint_name, variant, cond.metric, statistic=cond.statistic, period=period
        )
        neutral = policy.threshold + _NEUTRAL_OFFSET[policy.comparison]
        return cloudwatch.MathExpression(
            expression=f"IF(c {cond.comparison} {cond.threshold:g}, m, {neutral:g})",
            using_metrics={"m": main, "c": other},
            period=period,
            label=f"{policy.metric} while {cond.metric} {cond.comparison} {cond.threshold:g}",
        )

    @staticmethod
    def _describe(variant: VariantName, policy: StepPolicy) -> str:
        cond = policy.also_require
        extra = f" and {cond.metric} {cond.comparison} {cond.threshold:g}" if cond else ""
        steps = ", ".join(f"{s.change:+d}" for s in policy.steps)
        return (
            f"{variant} scale {policy.direction} ({policy.name}): {policy.statistic} "
            f"{policy.metric} {policy.comparison} {policy.threshold:g}{extra} for "
            f"{policy.evaluation_periods} x {policy.period_seconds} s; steps {steps}"
        )


@dataclass(frozen=True)
class TrackingTerms:
    """A variant's target tracking, as both the stack's policy and the controller's take it."""

    metric: str
    value: float
    scale_out_cooldown_seconds: int
    scale_in_cooldown_seconds: int
    #: One scale-in authority per target (config.VariantScaling): a step scale-in is not blocked
    #: by target tracking and the largest capacity wins only among policies that act
    #: (Application Auto Scaling PutScalingPolicy reference), so when a step policy owns
    #: scale-in, target tracking only scales out.
    disable_scale_in: bool


def tracking_terms(props: ScalingProps, variant: VariantName) -> TrackingTerms:
    tt = props.scaling.variants[variant].target_tracking
    assert tt is not None
    value = (
        props.concurrency_targets[variant]
        if tt.metric == "concurrency"
        else float(tt.invocations_per_instance)
    )
    return TrackingTerms(
        tt.metric,
        value,
        tt.scale_out_cooldown_seconds,
        tt.scale_in_cooldown_seconds,
        disable_scale_in=not tt.scale_in,
    )


def controller_scaling(props: ScalingProps, variant: VariantName) -> CanaryScaling:
    """The variant's bounds and target tracking for the canary controller to register
    (lambdas/canary_controller/canary_scaling.py: with ``rollout.shadow`` the controller owns
    the canary's scaling), with the figures this construct gives a variant it registers."""
    vs = props.scaling.variants[variant]
    t = tracking_terms(props, variant)
    tracking: dict[str, Any] = {
        "TargetValue": t.value,
        "PredefinedMetricSpecification": {"PredefinedMetricType": _TRACKED[t.metric][1]},
        "ScaleOutCooldown": t.scale_out_cooldown_seconds,
        "ScaleInCooldown": t.scale_in_cooldown_seconds,
        "DisableScaleIn": t.disable_scale_in,
    }
    return CanaryScaling(
        min_capacity=vs.min_capacity,
        max_capacity=vs.max_capacity,
        policy_name=f"{props.endpoint_name}-{variant}-target-tracking",
        tracking=tracking,
    )
