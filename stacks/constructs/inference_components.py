"""The component shape's inference components (issue 45; typed_config/components.py): the base
model's component from the baked image, one adapter component per adapter from its published
version in the models bucket, and each component's copy scaling.

AWS behaviours relied on, each from AWS's documentation:

- An adapter component "uses the compute resources that you assigned to the base inference
  component": it names the base (``BaseInferenceComponentName``) and its adapter's S3 location
  (``Container.ArtifactUrl``), and has no compute requirements or copy count of its own (developer
  guide, "Fine-tune models with adapter inference components",
  https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints-adapt.html; API reference,
  InferenceComponentSpecification: "Specify this parameter only if your request is meant to
  create an adapter inference component"). So only the base component's copies scale.
- Copies scale through Application Auto Scaling on ``inference-component/<name>`` with the
  dimension ``sagemaker:inference-component:DesiredCopyCount``, and the predefined metric
  ``SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution`` tracks "the number of
  concurrent requests being received by the inference component", including requests queued in
  the container, emitted every 10 seconds (developer guide, "Define a scaling policy",
  https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-add-code-define.html).
- Scale to zero (developer guide, "Scale an endpoint to zero instances",
  https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html):
  the component's scalable target has minimum capacity 0; target tracking takes the copies down,
  but cannot bring them up from zero, so a step scaling policy (``ChangeInCapacity``,
  ``MetricAggregationType`` Maximum, cooldown 60, one step of +1 from lower bound 0) is driven by
  an alarm on ``AWS/SageMaker`` ``NoCapacityInvocationFailures`` (dimension
  ``InferenceComponentName``, Sum over 60 s, one datapoint), which "SageMaker AI emits ... when an
  endpoint receives an inference request, but the endpoint has no active instances to serve the
  request". AWS's example alarm compares ``GreaterThanThreshold`` 1 (two failed requests in a
  minute); here ``>= 1``, so one request at zero wakes the endpoint (a lone caller who gives up
  after one failure still gets a copy for the next try).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from typed_config.components import InferenceComponentsConfig

#: The scalable dimension of an inference component's copies (Application Auto Scaling).
COPY_DIMENSION = "sagemaker:inference-component:DesiredCopyCount"
#: The predefined metric the copies track (CDK's enum, and the API's PredefinedMetricType).
COPY_METRIC = "SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution"
#: The metric SageMaker emits for a request that finds no instance (scale to zero's wake-up).
NO_CAPACITY_METRIC = "NoCapacityInvocationFailures"


def component_resource_id(name: str) -> str:
    """Application Auto Scaling's resource id of one inference component."""
    return f"inference-component/{name}"


@dataclass(frozen=True)
class AdapterComponent:
    """One adapter component: its name, the adapter it serves and the S3 URL of its version."""

    name: str
    adapter: str
    artifact_url: str


@dataclass(frozen=True)
class ComponentsProps:
    """What :class:`InferenceComponents` reads (the stack derives it from the config)."""

    endpoint_name: str
    variant_name: str
    base_name: str
    adapters: Sequence[AdapterComponent]
    section: InferenceComponentsConfig
    #: MinMemoryRequiredInMb of one base copy (sizing: weights + LoRA slots in host memory).
    copy_memory_mb: int
    #: ContainerStartupHealthCheckTimeoutInSeconds of each base copy.
    startup_timeout_seconds: int


class InferenceComponents(Construct):
    """``base``, ``adapters`` (by adapter name), ``copy_target``, ``copy_tracking`` and, with
    scale to zero, ``wake_action`` and ``wake_alarm``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        props: ComponentsProps,
        endpoint: sagemaker.CfnEndpoint,
        model: sagemaker.CfnModel,
        scaling_role: iam.IRole,
    ) -> None:
        super().__init__(scope, construct_id)
        section = props.section
        self.base = sagemaker.CfnInferenceComponent(
            self,
            "Base",
            inference_component_name=props.base_name,
            endpoint_name=endpoint.attr_endpoint_name,
            variant_name=props.variant_name,
            specification=sagemaker.CfnInferenceComponent.InferenceComponentSpecificationProperty(
                model_name=model.attr_model_name,
                compute_resource_requirements=sagemaker.CfnInferenceComponent.InferenceComponentComputeResourceRequirementsProperty(
                    number_of_accelerator_devices_required=1,
                    min_memory_required_in_mb=props.copy_memory_mb,
                ),
                startup_parameters=sagemaker.CfnInferenceComponent.InferenceComponentStartupParametersProperty(
                    container_startup_health_check_timeout_in_seconds=props.startup_timeout_seconds
                ),
            ),
            runtime_config=sagemaker.CfnInferenceComponent.InferenceComponentRuntimeConfigProperty(
                copy_count=section.base.copies.initial
            ),
        )
        self.adapters: dict[str, sagemaker.CfnInferenceComponent] = {}
        for a in props.adapters:
            ic = sagemaker.CfnInferenceComponent(
                self,
                f"Adapter{''.join(p.capitalize() for p in a.adapter.split('_'))}",
                inference_component_name=a.name,
                endpoint_name=endpoint.attr_endpoint_name,
                specification=sagemaker.CfnInferenceComponent.InferenceComponentSpecificationProperty(
                    base_inference_component_name=props.base_name,
                    container=sagemaker.CfnInferenceComponent.InferenceComponentContainerSpecificationProperty(
                        artifact_url=a.artifact_url
                    ),
                ),
            )
            ic.add_resource_dependency(self.base)  # the base must exist before an adapter names it
            self.adapters[a.adapter] = ic
        self._scaling(props, scaling_role)

    def _scaling(self, props: ComponentsProps, role: iam.IRole) -> None:
        """The base component's copies: bounds, target tracking on concurrent requests per copy,
        and with scale to zero the wake-up step policy on its alarm (module docstring)."""
        base = props.section.base
        self.copy_target = appscaling.ScalableTarget(
            self,
            "BaseCopies",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=component_resource_id(props.base_name),
            scalable_dimension=COPY_DIMENSION,
            min_capacity=base.copies.min,
            max_capacity=base.copies.max,
            role=role,
        )
        self.copy_target.node.add_dependency(self.base)  # registered once the component exists
        self.copy_tracking = self.copy_target.scale_to_track_metric(
            "PerCopyConcurrency",
            predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_INFERENCE_COMPONENT_CONCURRENT_REQUESTS_PER_COPY_HIGH_RESOLUTION,
            target_value=base.target_requests_per_copy,
            scale_in_cooldown=Duration.seconds(base.scale_in_cooldown_seconds),
            scale_out_cooldown=Duration.seconds(base.scale_out_cooldown_seconds),
        )
        self.wake_action: appscaling.StepScalingAction | None = None
        self.wake_alarm: cloudwatch.Alarm | None = None
        if not props.section.scales_to_zero:
            return
        self.wake_action = appscaling.StepScalingAction(
            self,
            "WakeFromZero",
            scaling_target=self.copy_target,
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            metric_aggregation_type=appscaling.MetricAggregationType.MAXIMUM,
            cooldown=Duration.seconds(base.scale_out_cooldown_seconds),
        )
        self.wake_action.add_adjustment(adjustment=1, lower_bound=0)
        self.wake_alarm = cloudwatch.Alarm(
            self,
            "NoCapacityAlarm",
            alarm_description=(
                f"{props.base_name}: a request found no instance (scale to zero): add one copy"
            ),
            metric=cloudwatch.Metric(
                namespace="AWS/SageMaker",
                metric_name=NO_CAPACITY_METRIC,
                dimensions_map={"InferenceComponentName": props.base_name},
                statistic="Sum",
                period=Duration.seconds(60),
            ),
            threshold=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            datapoints_to_alarm=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        self.wake_alarm.add_alarm_action(cw_actions.ApplicationScalingAction(self.wake_action))
