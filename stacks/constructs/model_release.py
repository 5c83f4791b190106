"""The bucket of prepared model releases, and the role of the SageMaker job that prepares them.

``make prepare-model`` runs container/model_prep/job.py as a SageMaker training job under
:class:`PreparationJobRole`; it publishes ``s3://<bucket>/<prefix>/<version>/<upload>/...``
then ``<prefix>/<version>/manifest.json`` last, with ``If-None-Match: *``
(container/model_prep/artifact.py). Its inputs and SageMaker's output live under
``<prefix>/jobs/``. :class:`ModelArtifacts` is the bucket and :meth:`ModelArtifacts.grant_releases`
what a preparation may do in it. AWS pages this relies on:

- "Enforce conditional writes on Amazon S3 buckets" (Amazon S3 User Guide): a bucket policy can
  require the ``If-None-Match`` header with the ``s3:if-none-match`` condition key; multipart
  parts (CreateMultipartUpload, UploadPart) carry no conditional header and are exempted with
  ``s3:ObjectCreationOperation``. Used so a published manifest cannot be overwritten by anyone.
- "Cross-service confused deputy prevention" (SageMaker Developer Guide), section for training
  jobs: the trust policy limits ``aws:SourceArn`` to ``training-job/*`` of this account/region.
- "SageMaker Roles", "CreateTrainingJob API: Execution Role Permissions" (SageMaker Developer
  Guide): logs, PutMetricData, S3 and ECR pull actions, each scoped here; ``cloudwatch`` and
  ``ecr:GetAuthorizationToken`` have no resource-level permission.
- "Encryption at rest" (Amazon ECR User Guide): ECR decrypts a KMS-encrypted repository through
  its own grant on the key, so pulling needs no KMS permission on the repository key.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from stacks.constructs.python_lambda import checkov_skip
from stacks.constructs.retention import KEEP_EXCEPT_FAILED_CREATE

#: Where SageMaker training jobs log and publish their instance metrics.
TRAINING_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
TRAINING_METRICS_NAMESPACE = "/aws/sagemaker/TrainingJobs"

_ACCESS_LOG_REASON = (
    "Server access logs would need a second bucket that itself fails this rule; object-level "
    "audit of this bucket belongs to CloudTrail S3 data events on the account's trail. Writes "
    "are already narrow: one job role, one prefix, manifests write-once by bucket policy."
)


def s3_sources(uris: Iterable[str]) -> dict[str, list[str]]:
    """``s3://bucket/prefix`` model sources grouped by bucket (other schemes ignored)."""
    found: dict[str, list[str]] = defaultdict(list)
    for uri in uris:
        if uri.startswith("s3://"):
            bucket, _, prefix = uri[5:].strip("/").partition("/")
            if prefix not in found[bucket]:
                found[bucket].append(prefix)
    return dict(found)


def ecr_repository_arn(image_uri: str) -> str:
    """``<account>.dkr.ecr.<region>.amazonaws.com[.cn]/<name>:<tag>`` -> the repository's ARN."""
    host, _, path = image_uri.partition("/")
    account, _, _, region = host.split(".")[:4]
    partition = "aws-cn" if host.endswith(".cn") else (
        "aws-us-gov" if region.startswith("us-gov-") else "aws"
    )  # fmt: skip
    return f"arn:{partition}:ecr:{region}:{account}:repository/{path.rsplit(':', 1)[0]}"


class ModelArtifacts(Construct):
    """Versioned, KMS-encrypted, TLS-only, private bucket whose manifests are write-once.

    ``bucket_name`` and ``prefix`` are the config's (``artifact_bucket_name``,
    ``model_prep.artifact_prefix``); ``name_prefix`` (``<project>-<env>``) names the key.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name_prefix: str,
        bucket_name: str,
        prefix: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.prefix = prefix
        self.key = kms.Key(
            self,
            "Key",
            enable_key_rotation=True,
            description=f"{name_prefix} model release bucket encryption",
            removal_policy=KEEP_EXCEPT_FAILED_CREATE,
        )
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            bucket_name=bucket_name,
            versioned=True,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,
            enforce_ssl=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-noncurrent-and-abandoned-uploads",
                    noncurrent_version_expiration=Duration.days(30),
                    abort_incomplete_multipart_upload_after=Duration.days(7),
                )
            ],
            removal_policy=KEEP_EXCEPT_FAILED_CREATE,
        )
        NagSuppressions.add_resource_suppressions(
            self.bucket, [NagPackSuppression(id="AwsSolutions-S1", reason=_ACCESS_LOG_REASON)]
        )
        checkov_skip(self.bucket, {"CKV_AWS_18": _ACCESS_LOG_REASON})
        self._write_once_manifests()

    def _write_once_manifests(self) -> None:
        """Deny, to every principal, a manifest PutObject without ``If-None-Match`` (an
        overwrite), and deleting a manifest or one of its versions, except the account root
        (break-glass). Bucket policies do not stop lifecycle rules (S3 User Guide, "Bucket
        policies for Amazon S3"); whoever may change this policy can still lift the guard."""
        stack = Stack.of(self)
        manifests = self.bucket.arn_for_objects(f"{self.prefix}/*/manifest.json")
        self.bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="ManifestsOnlyByConditionalCreate",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["s3:PutObject"],
                resources=[manifests],
                conditions={
                    "Null": {"s3:if-none-match": "true"},
                    "Bool": {"s3:ObjectCreationOperation": "true"},
                },
            )
        )
        self.bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="ManifestsNeverDeleted",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=["s3:DeleteObject", "s3:DeleteObjectVersion"],
                resources=[manifests],
                conditions={
                    "ArnNotEquals": {
                        "aws:PrincipalArn": f"arn:{stack.partition}:iam::{stack.account}:root"
                    }
                },
            )
        )

    def grant_releases(self, role: iam.Role) -> None:
        """What a preparation job does here: read, write and list under the prefix only (its
        releases, its inputs and SageMaker's output), with the bucket key through S3 only."""
        # Files, manifest, SageMaker's output; abort a failed multipart upload (upload_file).
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
                resources=[self.bucket.arn_for_objects(f"{self.prefix}/*")],
            )
        )
        # Listing under the prefix. IfExists: a GetObject of a missing manifest must answer
        # 404, which S3 gives only to a caller allowed s3:ListBucket on the bucket (GetObject
        # API reference, "Permissions"); that check comes with no s3:prefix in its context.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=[self.bucket.bucket_arn],
                conditions={"StringLikeIfExists": {"s3:prefix": [f"{self.prefix}/*"]}},
            )
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"],
                resources=[self.key.key_arn],
                conditions={
                    "StringEquals": {"kms:ViaService": f"s3.{Stack.of(self).region}.amazonaws.com"}
                },
            )
        )
        _suppress_wildcards(
            role,
            "object keys under the release prefix are versions and upload ids known at run time",
            [rf"<[A-Za-z0-9]+\.Arn>/{_re(self.prefix)}/\*"],
        )


class PreparationJobRole(Construct):
    """The role a preparation job (SageMaker training job) runs as, minus the bucket
    (:meth:`ModelArtifacts.grant_releases`): its logs and metrics, read-only ``s3://`` model
    sources, the job image's repository (None: no pull grant) and the Hugging Face token
    secret (a Secrets Manager secret *name*, None: no grant)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        name_prefix: str,
        sources: Sequence[str] = (),
        hf_token_secret: str | None = None,
        job_repository_arn: str | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.role = self._job_role(name_prefix)
        wildcards = self._read_sources(s3_sources(sources))
        self._grant_logs_and_metrics()
        if job_repository_arn is not None:
            self._grant_image_pull(job_repository_arn)
        if hf_token_secret is not None:
            self._grant_token_secret(hf_token_secret)
        _suppress_wildcards(
            self.role,
            "ecr:GetAuthorizationToken and cloudwatch:PutMetricData have no resource-level "
            "permission (PutMetricData is held to the training-jobs namespace by condition); "
            "source object keys are read under each configured prefix; SageMaker names the "
            "job's log streams at run time",
            [
                r"\*",
                *wildcards,
                rf"arn:[^:]+:logs:.+:log-group:{_re(TRAINING_LOG_GROUP)}:log-stream:\*",
            ],
        )

    def _job_role(self, name_prefix: str) -> iam.Role:
        """The role, trusted by SageMaker for this account's training jobs in this region only."""
        stack = Stack.of(self)
        return iam.Role(
            self,
            "Role",
            description=f"{name_prefix} model preparation job (SageMaker training job)",
            assumed_by=iam.ServicePrincipal(
                "sagemaker.amazonaws.com",
                conditions={
                    "StringEquals": {"aws:SourceAccount": stack.account},
                    "ArnLike": {
                        "aws:SourceArn": stack.format_arn(
                            service="sagemaker", resource="training-job", resource_name="*"
                        )
                    },
                },
            ),
        )

    def _grant_logs_and_metrics(self) -> None:
        """The job's logs in the shared training-jobs log group, where SageMaker writes them,
        and its instance metrics (PutMetricData has no resource, the namespace bounds it)."""
        log_group = Stack.of(self).format_arn(
            service="logs",
            resource="log-group",
            resource_name=TRAINING_LOG_GROUP,
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "logs:CreateLogGroup",
                    "logs:CreateLogStream",
                    "logs:PutLogEvents",
                    "logs:DescribeLogStreams",
                ],
                resources=[log_group, f"{log_group}:log-stream:*"],
            )
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": TRAINING_METRICS_NAMESPACE}},
            )
        )

    def _grant_image_pull(self, repository_arn: str) -> None:
        """Pull the job image: a registry token (no resource-level permission) + this repo."""
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"])
        )
        self.role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "ecr:BatchCheckLayerAvailability",
                    "ecr:GetDownloadUrlForLayer",
                    "ecr:BatchGetImage",
                ],
                resources=[repository_arn],
            )
        )

    def _grant_token_secret(self, secret_name: str) -> None:
        """The Hugging Face token for gated base models (job.py reads it into a file). A
        secret ARN ends in "-" and six random characters; "??????" matches only those."""
        secret = Stack.of(self).format_arn(
            service="secretsmanager",
            resource="secret",
            resource_name=f"{secret_name}-??????",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        self.role.add_to_policy(
            iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[secret])
        )

    def _read_sources(self, sources: dict[str, list[str]]) -> list[str]:
        """Model and adapter sources in S3 (container/model_prep/sources.py fetch_s3 lists the
        prefix, then gets each key): read-only, those prefixes only. Returns the wildcard
        resources' regexes for cdk-nag."""
        stack = Stack.of(self)
        wildcards = []
        for bucket, prefixes in sorted(sources.items()):
            bucket_arn = f"arn:{stack.partition}:s3:::{bucket}"
            self.role.add_to_policy(
                iam.PolicyStatement(
                    actions=["s3:GetObject"], resources=[f"{bucket_arn}/{p}/*" for p in prefixes]
                )
            )
            self.role.add_to_policy(
                iam.PolicyStatement(
                    actions=["s3:ListBucket"],
                    resources=[bucket_arn],
                    conditions={
                        "StringLike": {"s3:prefix": [x for p in prefixes for x in (p, f"{p}/*")]}
                    },
                )
            )
            wildcards += [rf"arn:[^:]+:s3:::{_re(bucket)}/{_re(p)}/\*" for p in prefixes]
        return wildcards


def _suppress_wildcards(role: iam.Role, reason: str, resource_regexes: Sequence[str]) -> None:
    """AwsSolutions-IAM5 suppressed for findings ``Resource::<ARN>`` whose whole ARN matches
    one of ``resource_regexes`` (written into JavaScript regex literals: slashes escaped)."""
    applies_to: list[str | RegexAppliesTo] = [
        RegexAppliesTo(regex="/^Resource::{}$/g".format(r.replace("/", r"\/")))
        for r in resource_regexes
    ]
    NagSuppressions.add_resource_suppressions(
        role,
        [NagPackSuppression(id="AwsSolutions-IAM5", reason=reason, applies_to=applies_to)],
        apply_to_children=True,
    )


def _re(text: str) -> str:
    """``text`` matched literally in a regex."""
    return "".join(f"\\{c}" if c in r"\^$.|?*+()[]{}" else c for c in text)
