"""The service role a Bedrock Custom Model Import job runs as: read the release bucket's Bedrock
packages, nothing else.

``make bedrock-import`` (tools/bedrock_import.py) passes this role to CreateModelImportJob; the
import itself has no CloudFormation resource ("You can't use Custom Model Import with ... AWS
CloudFormation": https://docs.aws.amazon.com/bedrock/latest/userguide/model-customization-import-model.html),
so the role is the only part of the import that is infrastructure. AWS pages this relies on:

- "Create a service role for importing pre-trained models" (Bedrock User Guide,
  https://docs.aws.amazon.com/bedrock/latest/userguide/model-import-iam-role.html): trust
  ``bedrock.amazonaws.com`` with ``aws:SourceAccount`` and ``aws:SourceArn`` ArnEquals
  ``arn:<partition>:bedrock:<region>:<account>:model-import-job/*``; permissions ``s3:GetObject``
  and ``s3:ListBucket`` on the model files, a folder held by an ``s3:prefix`` condition, and
  ``aws:ResourceAccount`` equal to the account.
- The bucket is encrypted with the release key (stacks/constructs/model_release.py): reading it
  through S3 needs ``kms:Decrypt`` on that key, held to S3 by ``kms:ViaService`` (the same grant
  the preparation job has; AWS KMS Developer Guide, "kms:ViaService").
- The imported model is encrypted with an AWS-owned key (CreateModelImportJob's
  ``importedModelKmsKeyId`` is not given), so the role needs no key of its own.
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from stacks.constructs.model_release import ModelArtifacts, _re, _suppress_wildcards


class BedrockImportRole(Construct):
    """The role, trusted by Bedrock's model import jobs of this account and region, reading
    ``<artifact prefix>/<package prefix>/*`` of the release bucket (``package_prefix``:
    container/model_prep/bedrock_rules.package_prefix)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name_prefix: str,
        artifacts: ModelArtifacts,
        package_prefix: str,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.role = iam.Role(
            self,
            "Role",
            description=f"{name_prefix} Bedrock Custom Model Import jobs (read the packages)",
            assumed_by=iam.ServicePrincipal(
                "bedrock.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnEquals": {
                        "aws:SourceArn": stack.format_arn(
                            service="bedrock", resource="model-import-job", resource_name="*"
                        )
                    },
                },
            ),
        )
        owned = {"StringEquals": {"aws:ResourceAccount": stack.account}}
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[artifacts.bucket.arn_for_objects(f"{package_prefix}/*")],
                conditions=owned,
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[artifacts.bucket.bucket_arn],
                conditions={
                    **owned,
                    "StringLike": {"s3:prefix": [package_prefix, f"{package_prefix}/*"]},
                },
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt"],
                resources=[artifacts.key.key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{stack.region}.amazonaws.com"}},
            )
        )
        _suppress_wildcards(
            self.role,
            "the package's object keys (release versions, upload ids, model files) are known "
            "at run time; reading is held to the package prefix of this one bucket",
            [rf"<[A-Za-z0-9]+\.Arn>/{_re(package_prefix)}/\*"],
        )
