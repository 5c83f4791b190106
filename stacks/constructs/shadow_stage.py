"""The shadow stage's endpoint config and its data capture (``rollout.shadow``).

The stage runs on an endpoint config of its own beside the canary config the Endpoint runs: the
primary as its one production variant ("For an endpoint with a shadow variant, there can be a
maximum of one production variant": SageMaker developer guide, "Create a shadow test",
https://docs.aws.amazon.com/sagemaker/latest/dg/shadow-tests-create.html) and the canary's Model
as the shadow variant (``ShadowProductionVariants``, "Testing models with shadow variants",
https://docs.aws.amazon.com/sagemaker/latest/dg/model-shadow-deployment.html). The canary
controller moves the Endpoint to it and back (lambdas/canary_controller/shadow_stage.py says why
not an inference experiment); CloudFormation only creates it, so a deploy changes nothing live.

Data capture of both variants ("optionally turn on Data Capture to log requests and responses of
your production and shadow variants", "Create a shadow test"; ``DataCaptureConfig``, SageMaker
API reference, https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DataCaptureConfig.html):
one config for the endpoint config, so both variants' requests and answers are captured under
``<uri>/<endpoint>/<variant>/yyyy/mm/dd/hh/`` ("Data capture",
https://docs.aws.amazon.com/sagemaker/latest/dg/model-monitor-data-capture.html), sampled at
``capture_percent``, encrypted with the endpoint's KMS key (``KmsKeyId``: S3 server-side
encryption with it); ``application/json`` listed as JSON so the bodies are captured as text
(anything else, a streamed ``text/event-stream`` answer, is captured BASE64, which the controller
decodes too). The bucket keeps captured objects ``capture_retention_days`` (an S3 lifecycle
expiration rule), blocks public access and refuses plain HTTP.

The shadow's share: its InitialVariantWeight relative to the primary's, as the developer guide's
example sets a shadow's weight against its production variant's. The primary keeps its live
weight across the UpdateEndpoint (RetainAllVariantProperties); the shadow's is ``sample_percent``
% of the primary's configured initial weight. Neither the planned count nor the verdict depends
on the exact share: the comparison waits for ``min_requests_per_adapter`` answers, and a larger
share than planned loads the shadow more, which fails it on latency (the safe direction).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sagemaker
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from lambdas.canary_controller.canary_scaling import CanaryScaling
from lambdas.canary_controller.shadow_stage import ShadowRules
from stacks.constructs.endpoint import ServingEndpoint
from stacks.constructs.metrics_path import metrics_config
from stacks.constructs.python_lambda import checkov_skip
from stacks.constructs.retention import KEEP_EXCEPT_FAILED_CREATE
from typed_config import DeploymentPolicy, MetricsPath, ShadowStage, Variants

#: The shadow variant's name (``ShadowProductionVariants``; its metrics carry it as VariantName).
SHADOW_VARIANT = "shadow"
#: Where data capture writes in the bucket.
CAPTURE_PREFIX = "datacapture"
_ACCESS_LOG_REASON = (
    "Captured requests of a time-boxed shadow stage, written by SageMaker only and read by the "
    "canary controller only (both by IAM); CloudTrail data events are the audit trail if needed"
)


class ShadowStageConfig(Construct):
    """``endpoint_config`` (primary + shadow, data capture on), ``bucket``, ``capture_uri``."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        serving: ServingEndpoint,
        variants: Variants,
        deployment: DeploymentPolicy,
        stage: ShadowStage,
        shadow_instances: int,
        key: kms.IKey,
        metrics_path: MetricsPath | None = None,
        canary_scaling: CanaryScaling | None = None,
        bucket_name: str | None = None,
    ) -> None:
        """``canary_scaling``: the canary's bounds and target tracking, which the controller
        registers around the stage (the stack registers none for it with ``rollout.shadow``:
        lambdas/canary_controller/canary_scaling.py)."""
        super().__init__(scope, construct_id)
        self.stage, self.key = stage, key
        self.canary_scaling = canary_scaling
        self.bucket = self._capture_bucket(stage, key, bucket_name)
        self.capture_uri = f"s3://{self.bucket.bucket_name}/{CAPTURE_PREFIX}"
        canary = variants.canary
        primary = variants.primary
        self.endpoint_config = sagemaker.CfnEndpointConfig(
            self,
            "EndpointConfig",
            kms_key_id=key.key_arn if serving.kms_on_volume else None,
            metrics_config=metrics_config(metrics_path or MetricsPath()),
            production_variants=[serving.variant_property(variants, deployment, "primary")],
            shadow_production_variants=[
                sagemaker.CfnEndpointConfig.ProductionVariantProperty(
                    variant_name=SHADOW_VARIANT,
                    model_name=serving.models["canary"].attr_model_name,
                    instance_type=canary.instance_type,
                    initial_instance_count=shadow_instances,
                    initial_variant_weight=primary.initial_weight * stage.sample_percent / 100,
                    container_startup_health_check_timeout_in_seconds=(
                        deployment.startup_health_check_timeout_seconds
                    ),
                    volume_size_in_gb=canary.volume_size_gb,
                )
            ],
            data_capture_config=sagemaker.CfnEndpointConfig.DataCaptureConfigProperty(
                enable_capture=True,
                initial_sampling_percentage=stage.capture_percent,
                destination_s3_uri=self.capture_uri,
                kms_key_id=key.key_arn,
                capture_options=[
                    sagemaker.CfnEndpointConfig.CaptureOptionProperty(capture_mode=mode)
                    for mode in ("Input", "Output")
                ],
                capture_content_type_header=(
                    sagemaker.CfnEndpointConfig.CaptureContentTypeHeaderProperty(
                        json_content_types=["application/json"]
                    )
                ),
            ),
        )
        self._grant_capture_write(serving.role)

    def _capture_bucket(
        self, stage: ShadowStage, key: kms.IKey, bucket_name: str | None
    ) -> s3.Bucket:
        """Captured requests and answers, encrypted with the endpoint's key, kept
        ``capture_retention_days``."""
        bucket = s3.Bucket(
            self,
            "Capture",
            bucket_name=bucket_name,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=key,
            bucket_key_enabled=True,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="capture-retention",
                    expiration=Duration.days(stage.capture_retention_days),
                    noncurrent_version_expiration=Duration.days(1),
                    abort_incomplete_multipart_upload_after=Duration.days(1),
                )
            ],
            removal_policy=KEEP_EXCEPT_FAILED_CREATE,
        )
        NagSuppressions.add_resource_suppressions(
            bucket, [NagPackSuppression(id="AwsSolutions-S1", reason=_ACCESS_LOG_REASON)]
        )
        checkov_skip(bucket, {"CKV_AWS_18": _ACCESS_LOG_REASON})
        return bucket

    def _grant_capture_write(self, role: iam.Role) -> None:
        """SageMaker writes the capture as the endpoint's execution role: PutObject under the
        prefix, and the key to encrypt it (explicit actions, no kms:ReEncrypt*)."""
        _allow(role, "ShadowCaptureWrite", ["s3:PutObject"],
               self.bucket.arn_for_objects(f"{CAPTURE_PREFIX}/*"))  # fmt: skip
        _allow(role, "ShadowCaptureKey", ["kms:GenerateDataKey", "kms:Encrypt"], self.key.key_arn)
        self._suppress_object_wildcard(role, CAPTURE_PREFIX)

    def grant_read(self, role: iam.Role, endpoint_name: str) -> None:
        """The controller reads this endpoint's capture only: ListBucket under its prefix,
        GetObject on its objects, Decrypt with the key."""
        prefix = f"{CAPTURE_PREFIX}/{endpoint_name}/"
        _allow(role, "ShadowCaptureList", ["s3:ListBucket"], self.bucket.bucket_arn,
               {"StringLike": {"s3:prefix": [f"{prefix}*"]}})  # fmt: skip
        _allow(role, "ShadowCaptureRead", ["s3:GetObject"],
               self.bucket.arn_for_objects(f"{prefix}*"))  # fmt: skip
        _allow(role, "ShadowCaptureDecrypt", ["kms:Decrypt"], self.key.key_arn)
        self._suppress_object_wildcard(role, prefix.rstrip("/"))

    def _suppress_object_wildcard(self, role: iam.Role, prefix: str) -> None:
        """AwsSolutions-IAM5 on ``<bucket>/<prefix>/*``: data capture names its objects by
        variant, hour and a generated id, so they are only known at run time."""
        NagSuppressions.add_resource_suppressions(
            role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="data capture writes objects named by variant, hour and a generated "
                    "id under this prefix: only the prefix is known at synth",
                    applies_to=[
                        RegexAppliesTo(
                            regex=rf"/^Resource::<ShadowStageCapture[A-Za-z0-9]+\.Arn>\/"
                            rf"{prefix.replace('/', chr(92) + '/')}\/\*$/g"
                        )
                    ],
                )
            ],
            apply_to_children=True,
        )

    def rules(self, *, stage_update_timeout_seconds: int) -> ShadowRules:
        """The controller's ``SHADOW_STAGE`` (its config name is CloudFormation's)."""
        s = self.stage
        return ShadowRules(
            config_name=self.endpoint_config.attr_endpoint_config_name,
            shadow_variant=SHADOW_VARIANT,
            capture_uri=self.capture_uri,
            sample_percent=s.sample_percent,
            min_seconds=s.min_minutes * 60,
            max_seconds=s.max_minutes * 60,
            compare_seconds=s.compare_interval_minutes * 60,
            stage_update_timeout_seconds=stage_update_timeout_seconds,
            thresholds=s.thresholds,
            canary_scaling=self.canary_scaling,
            capture_percent=s.capture_percent,
        )


def _allow(
    role: iam.Role,
    sid: str,
    actions: list[str],
    resource: str,
    conditions: dict[str, Any] | None = None,
) -> None:
    """One statement in ``role``'s policy: ``actions`` on ``resource`` only."""
    role.add_to_policy(
        iam.PolicyStatement(sid=sid, actions=actions, resources=[resource], conditions=conditions)
    )
