"""ModelReleaseStack: the bucket of prepared model releases and the preparation job's role.

Deployed before anything else can use a release: ``make prepare-model`` publishes into this
bucket, and only then can the image stack (``image.mode: build``) bake the release. So this
stack references nothing in the image stack: a cross-stack reference would make its first
deploy wait for the image stack, whose first deploy needs a published release. The job image's
repository is named from config instead (``model_prep.job_image``, else ``image.repository_name``).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Stack
from constructs import Construct

from container.model_prep.bedrock_rules import package_prefix
from stacks.constructs.bedrock_import import BedrockImportRole
from stacks.constructs.model_release import (
    ModelArtifacts,
    PreparationJobRole,
    ecr_repository_arn,
)
from typed_config import DeploymentConfig, artifact_bucket_name

#: The stack outputs the tools read the roles' ARNs from: the preparation job's (make
#: prepare-model, make preflight) and the Bedrock import jobs' (make bedrock-import). Read by
#: these exact names: both end in "RoleArn".
PREP_ROLE_OUTPUT = "PrepRoleArn"
BEDROCK_IMPORT_ROLE_OUTPUT = "BedrockImportRoleArn"


class ModelReleaseStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, cfg: DeploymentConfig, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        prep = cfg.model_prep
        name_prefix = f"{cfg.project}-{cfg.env}"
        self.artifacts = ModelArtifacts(
            self,
            "ModelArtifacts",
            name_prefix=name_prefix,
            # The account as a literal when the config names it: a static name is what lets
            # `cdk deploy --import-existing-resources` adopt the retained bucket after the stack
            # was deleted (CloudFormation imports no resource whose name uses Ref or Fn::*).
            bucket_name=artifact_bucket_name(cfg, cfg.account or Aws.ACCOUNT_ID),
            prefix=prep.artifact_prefix,
        )
        self.job = PreparationJobRole(
            self,
            "PreparationJob",
            name_prefix=name_prefix,
            sources=[cfg.model.source, *(a.source for a in cfg.adapters)],
            hf_token_secret=prep.hf_token_secret,
            job_repository_arn=self._job_repository_arn(cfg),
        )
        self.artifacts.grant_releases(self.job.role)
        outputs = {
            "ArtifactBucketName": ("model-artifact-bucket", self.artifacts.bucket.bucket_name),
            "ArtifactKeyArn": ("model-artifact-key-arn", self.artifacts.key.key_arn),
            PREP_ROLE_OUTPUT: ("model-prep-role-arn", self.job.role.role_arn),
        }
        # Bedrock Custom Model Import (typed_config/bedrock.py): the import jobs' service role.
        self.bedrock_import: BedrockImportRole | None = None
        if cfg.bedrock.enabled:
            self.bedrock_import = BedrockImportRole(
                self,
                "BedrockImport",
                name_prefix=name_prefix,
                artifacts=self.artifacts,
                package_prefix=package_prefix(prep.artifact_prefix),
            )
            outputs[BEDROCK_IMPORT_ROLE_OUTPUT] = (
                "bedrock-import-role-arn",
                self.bedrock_import.role.role_arn,
            )
        for output_id, (export, value) in outputs.items():
            CfnOutput(self, output_id, value=value, export_name=f"{name_prefix}-{export}")

    def _job_repository_arn(self, cfg: DeploymentConfig) -> str | None:
        if cfg.model_prep.job_image is not None:
            return ecr_repository_arn(cfg.model_prep.job_image)
        if cfg.image.repository_name is not None:
            return self.format_arn(
                service="ecr", resource="repository", resource_name=cfg.image.repository_name
            )
        return None  # the plan warns (sizing.plan.job_image_warning)
