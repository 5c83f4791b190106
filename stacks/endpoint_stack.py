"""EndpointStack: the endpoint, its rollback alarms, and (wired here) scaling, monitoring, lambdas.

Thin by design: constructs do the work; this stack passes what one creates to the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import ArnFormat, Aws, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from lambdas.canary_controller.capacity import CapacityPlan
from sizing.component_plan import copy_memory_mb
from sizing.ready_bound import rollout_waits
from sizing.rollout_plan import rollout_capacity_plan
from sizing.scaling_target import routed_variants
from sizing.shadow_plan import shadow_instances
from sizing.slo_reach import held
from sizing.update_semantics import reset_properties
from stacks.constructs.canary_controller import CanaryController
from stacks.constructs.endpoint import (
    ServingEndpoint,
    container_environment,
    pool_environments,
)
from stacks.constructs.endpoint_ref import EndpointRef
from stacks.constructs.image import ServingImage
from stacks.constructs.inference_components import (
    AdapterComponent,
    ComponentsProps,
    InferenceComponents,
)
from stacks.constructs.monitoring import Monitoring
from stacks.constructs.relative_latency import RelativeLatencyAlarms
from stacks.constructs.retention import KEEP_EXCEPT_FAILED_CREATE
from stacks.constructs.rollback_alarms import RollbackAlarms
from stacks.constructs.scaling import (
    SERVICE_LINKED_ROLE,
    EndpointScaling,
    ScalingProps,
    controller_scaling,
)
from stacks.constructs.shadow_stage import ShadowStageConfig
from stacks.constructs.smoke_gate import SmokeGate
from typed_config import VARIANT_NAMES, DeploymentConfig, VariantName
from typed_config.derived import artifact_bucket_name, capture_bucket_name
from typed_config.generated_names import (
    adapter_artifact_key,
    adapter_component_name,
    base_component_name,
)
from typed_config.shadow import CONTROLLER_OWNED_VARIANT, controller_owned_variants

#: What CloudWatch Logs does with a log group's key (the user guide's policy, below).
LOGS_KEY_ACTIONS = [
    "kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*",
]  # fmt: skip


def logs_key_statement(stack: Stack) -> iam.PolicyStatement:
    """CloudWatch Logs may use the key for this account's log groups in this region only: the
    encryption context CloudWatch Logs sends names the log group, and the condition on it keeps
    the service from using the key for another account's group (the confused deputy). The
    statement of CloudWatch Logs User Guide, "Encrypt log data in CloudWatch Logs using AWS KMS",
    step 2: ``kms:EncryptionContext:aws:logs:arn`` ``ArnLike``
    ``arn:aws:logs:<region>:<account>:log-group:*``."""
    return iam.PolicyStatement(
        sid="CloudWatchLogsOfThisAccount",
        principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
        actions=LOGS_KEY_ACTIONS,
        resources=["*"],
        conditions={
            "ArnLike": {
                "kms:EncryptionContext:aws:logs:arn": stack.format_arn(
                    service="logs",
                    resource="log-group",
                    resource_name="*",
                    arn_format=ArnFormat.COLON_RESOURCE_NAME,
                )
            }
        },
    )


class EndpointStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cfg: DeploymentConfig,
        image: ServingImage,
        suspend_scaling: frozenset[str] = frozenset(),
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.key = self._endpoint_key(cfg)
        # The endpoint by name: its ARN, grants and metrics for everything that watches or calls it.
        self.endpoint_ref = endpoint = EndpointRef.of(self, cfg.endpoint_name)
        self.rollback_alarms = RollbackAlarms(
            self, "RollbackAlarms", endpoint=endpoint, policy=cfg.deployment
        )
        self.serving = self._serving_endpoint(cfg, image)
        if cfg.inference_components is not None:
            self._component_shape(cfg, image)
            return
        self.scaling = self._scaling(cfg, suspend_scaling)
        # The canary's capacity plan, derived once: its like-load bound and the controller's steps
        plan = rollout_capacity_plan(cfg)
        self.monitoring = self._monitoring(cfg)
        self.relative_latency = RelativeLatencyAlarms(
            self,
            "RelativeLatency",
            endpoint=endpoint,
            rollout=cfg.rollout,
            canary_per_primary=plan.canary_per_primary,
        )
        self.shadow = self._shadow_stage(cfg)
        self.canary = self._canary_controller(cfg, plan)
        self.smoke_gate = SmokeGate(
            self,
            "SmokeGate",
            gate=cfg.smoke_gate,
            endpoint=self.serving.endpoint,
            endpoint_name=cfg.endpoint_name,
            variant_names=VARIANT_NAMES,
            adapter_names=[adapter.name for adapter in cfg.adapters],
        )
        self._grant_image_pull(image)

    def _component_shape(self, cfg: DeploymentConfig, image: ServingImage) -> None:
        """The component shape (typed_config/components.py): the inference components and their
        copy scaling, the monitoring of the one variant, the image pull and the adapters' read.
        Not built here: the variant scaling (SageMaker's managed instance scaling owns the
        instances), the canary controller, relative-latency alarms and shadow stage (they move
        weight between variants; an adapter rolls out on its own component instead) and the
        smoke gate (it invokes variants by TargetVariant; a component is invoked by
        InferenceComponentName)."""
        ic = cfg.inference_components
        assert ic is not None
        account = cfg.account or Aws.ACCOUNT_ID
        bucket = artifact_bucket_name(cfg, account)
        self.components = InferenceComponents(
            self,
            "Components",
            props=ComponentsProps(
                endpoint_name=cfg.endpoint_name,
                variant_name="primary",
                base_name=base_component_name(cfg.project, cfg.env),
                adapters=[
                    AdapterComponent(
                        adapter_component_name(cfg.project, cfg.env, a.name),
                        a.name,
                        f"s3://{bucket}/{adapter_artifact_key(a.name, a.version or '')}",
                    )
                    for a in cfg.adapters
                ],
                section=ic,
                copy_memory_mb=copy_memory_mb(cfg),
                startup_timeout_seconds=cfg.deployment.startup_health_check_timeout_seconds,
            ),
            endpoint=self.serving.endpoint,
            model=self.serving.models["primary"],
            scaling_role=iam.Role.from_role_arn(
                self,
                "AutoScalingRole",
                self.format_arn(
                    service="iam", region="", resource="role", resource_name=SERVICE_LINKED_ROLE
                ),
            ),
        )
        self.serving.grant_adapter_artifacts(bucket, "adapters/")
        self.monitoring = self._monitoring(
            cfg, variant_names=("primary",), idle_at_zero=ic.scales_to_zero
        )
        self._grant_image_pull(image)
        policy = self.serving.role.node.find_child("DefaultPolicy")
        for component in (self.components.base, *self.components.adapters.values()):
            component.node.add_dependency(policy)  # the role reads the adapters before

    def _monitoring(
        self,
        cfg: DeploymentConfig,
        *,
        variant_names: Sequence[VariantName] = VARIANT_NAMES,
        idle_at_zero: bool = False,
    ) -> Monitoring:
        """The endpoint's alarms, dashboard and notifications, for either shape (the component
        shape names its one variant and whether it idles at zero: :class:`Monitoring`)."""
        return Monitoring(
            self,
            "Monitoring",
            endpoint=self.endpoint_ref,
            thresholds=cfg.monitoring,
            adapter_names=[a.name for a in cfg.adapters],
            metrics_interval_seconds=cfg.engine.metrics_interval_seconds,
            queue_step_variants=cfg.scaling.queue_step_variants(),
            emails=cfg.notifications.emails,
            rollback_alarms=self.rollback_alarms,
            key=self.key,
            variant_names=variant_names,
            idle_at_zero=idle_at_zero,
            held_slos=held(cfg),
        )

    def _endpoint_key(self, cfg: DeploymentConfig) -> kms.Key:
        """The key of the endpoint's logs, notifications and volumes; CloudWatch Logs may use it
        (:func:`logs_key_statement`)."""
        key = kms.Key(
            self,
            "EndpointKey",
            enable_key_rotation=True,
            description=f"{cfg.endpoint_name}: endpoint logs, notifications, volumes",
            # it decrypts the log group kept past the stack; kept too, except a failed create
            removal_policy=KEEP_EXCEPT_FAILED_CREATE,
        )
        key.add_to_resource_policy(logs_key_statement(self))
        return key

    def _serving_endpoint(self, cfg: DeploymentConfig, image: ServingImage) -> ServingEndpoint:
        """The endpoint itself: each variant's container from the config and ``image``."""
        return ServingEndpoint(
            self,
            "Serving",
            endpoint_name=cfg.endpoint_name,
            variants=routed_variants(cfg),
            deployment=cfg.deployment,
            environments={v: self._environment(cfg, v) for v in VARIANT_NAMES},
            pool_environments={v: pool_environments(cfg, v) for v in VARIANT_NAMES},
            image_uris={v: image.image_uri(cfg.variants[v].image_tag) for v in VARIANT_NAMES},
            resets=reset_properties(cfg),
            rollback_alarms=self.rollback_alarms.all,
            volume_key=self.key,
            metrics_path=cfg.monitoring.metrics_path,
            components=cfg.inference_components,
        )

    @staticmethod
    def _environment(cfg: DeploymentConfig, variant: VariantName) -> dict[str, str]:
        """``variant``'s container environment; in the component shape also vLLM's switch for
        SageMaker's adapter routes (``VLLM_ALLOW_RUNTIME_LORA_UPDATING``) and the product's
        ``SERVING_ADAPTERS_AT_RUNTIME`` (adapters arrive as adapter components, so the baked ones
        are not all required at start): the contract of issue 45."""
        env = container_environment(cfg, variant)
        if cfg.inference_components is None:
            return env
        return {
            **env,
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
            "SERVING_ADAPTERS_AT_RUNTIME": "1",
        }

    def _scaling(self, cfg: DeploymentConfig, suspend_scaling: frozenset[str]) -> EndpointScaling:
        """Autoscaling of the endpoint's variants (an SLO it cannot hold is the plan's warning,
        sizing.scaling_target.unmet_slo_warnings)."""
        return EndpointScaling(
            self,
            "Scaling",
            props=ScalingProps.from_config(cfg),
            endpoint=self.serving.endpoint,
            # with rollout.shadow the canary's scaling is the controller's (canary_scaling.py)
            suspended=suspend_scaling | controller_owned_variants(cfg.rollout.shadow),
        )

    def _shadow_stage(self, cfg: DeploymentConfig) -> ShadowStageConfig | None:
        """The shadow stage's endpoint config and capture (None without ``rollout.shadow``)."""
        if cfg.rollout.shadow is None:
            return None
        return ShadowStageConfig(
            self,
            "ShadowStage",
            serving=self.serving,
            variants=routed_variants(cfg),
            deployment=cfg.deployment,
            stage=cfg.rollout.shadow,
            shadow_instances=shadow_instances(cfg),
            key=self.key,
            metrics_path=cfg.monitoring.metrics_path,
            canary_scaling=controller_scaling(
                ScalingProps.from_config(cfg), CONTROLLER_OWNED_VARIANT
            ),
            bucket_name=capture_bucket_name(cfg, cfg.account or Aws.ACCOUNT_ID),
        )

    def _canary_controller(self, cfg: DeploymentConfig, plan: CapacityPlan) -> CanaryController:
        """The canary rollout's controller, rolling back on the canary's alarms; ``plan``: its
        capacity plan (``sizing.rollout_plan``), handed to the Lambda in its environment."""
        return CanaryController(
            self,
            "CanaryController",
            endpoint=self.endpoint_ref,
            rollout=cfg.rollout,
            waits=rollout_waits(cfg),
            capacity_plan=plan,
            alarms=[
                self.rollback_alarms.errors["canary"],
                self.rollback_alarms.latency["canary"],
                self.monitoring.alarms["canary/high-ttft"],
                # A canary whose engine dies (a CUDA OOM under the new image or settings) is not
                # promoted: one restart rolls the rollout back.
                self.monitoring.alarms["canary/engine-restarts"],
                # A canary slower than the primary on the same traffic: a regression, whatever
                # the absolute figures (issue 20 item 2).
                *self.relative_latency.alarms,
            ],
            topic=self.monitoring.topic,
            shadow=self.shadow,
            canary_config_arn=self.serving.endpoint_config.ref,
            # a move between the stage's configs is one blue/green update: its own limit
            stage_update_timeout_seconds=cfg.deployment.max_execution_timeout_seconds
            + cfg.deployment.termination_wait_seconds,
        )

    def _grant_image_pull(self, image: ServingImage) -> None:
        """The execution role pulls ``image``. SageMaker checks image access at CreateModel:
        create the models after the role's policy."""
        image.grant_pull(self.serving.role)
        policy = self.serving.role.node.find_child("DefaultPolicy")
        for model in self.serving.models.values():
            model.node.add_dependency(policy)
