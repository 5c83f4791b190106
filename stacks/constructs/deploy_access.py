"""The role GitHub Actions assumes to release one environment, and the OIDC provider it trusts.

:func:`github_oidc_provider` creates the account's ``token.actions.githubusercontent.com``
provider or imports it by its ARN, which IAM derives from the URL alone (one provider per URL per
account). :class:`DeployRole` is the role: trusted only for ``sts:AssumeRoleWithWebIdentity``
through that provider, with ``aud`` and ``sub`` compared exactly (StringEquals, never
StringLike), and each ``allow_*`` method adds what one release step calls, each statement with
a Sid naming it. Pages this relies on:

- GitHub, "Configuring OpenID Connect in Amazon Web Services"
  (https://docs.github.com/en/actions/how-tos/secure-your-work/security-harden-deployments/oidc-in-aws):
  provider URL ``https://token.actions.githubusercontent.com``, audience ``sts.amazonaws.com``
  (what aws-actions/configure-aws-credentials requests), and IAM's advice to evaluate the
  ``token.actions.githubusercontent.com:sub`` condition key in every role that trusts it.
- GitHub, "OpenID Connect", example subject claims
  (https://docs.github.com/en/actions/concepts/security/openid-connect): a job that names an
  environment gets ``repo:<orgName/repoName>:environment:<environmentName>``.
- IAM User Guide, "Create a role for OpenID Connect federation"
  (https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_create_for-idp_oidc.html).
- CDK API, ``OidcProviderNative`` (AWS::IAM::OIDCProvider, no custom resource): without
  thumbprints "IAM will retrieve and use the top intermediate certificate authority (CA)
  thumbprint" of the provider's certificate.
- Service Authorization Reference (https://docs.aws.amazon.com/service-authorization/latest/
  reference/reference_policies_actions-resources-contextkeys.html): the resource type of each
  action below; where an action lists none (``*``), its statement says so.
- Amazon ECR User Guide, "IAM permissions for pushing an image to an Amazon ECR private
  repository" (https://docs.aws.amazon.com/AmazonECR/latest/userguide/image-push-iam.html):
  the push actions on the repository and ``ecr:GetAuthorizationToken`` on ``*``; "Encryption at
  rest": ECR encrypts and decrypts a KMS repository through its own grant on the key, so neither
  push nor pull needs a KMS permission.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import Construct

from lambdas.canary_controller import canary_scaling
from stacks.constructs.endpoint_ref import EndpointRef
from stacks.constructs.retention import KEEP_EXCEPT_FAILED_CREATE
from stacks.constructs.scaling import register_variant_bounds, scalable_targets_arn
from typed_config.shadow import CONTROLLER_OWNED_VARIANT

#: GitHub's OIDC issuer host: the provider URL, and the prefix of its condition keys.
GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
#: The audience aws-actions/configure-aws-credentials requests (the provider's client id).
STS_AUDIENCE = "sts.amazonaws.com"
#: The ``aws-cdk:bootstrap-role`` tag values of the roles ``cdk deploy``/``diff`` assume
#: (node_modules/aws-cdk/lib/api/bootstrap/bootstrap-template.yaml); the execution role that
#: CloudFormation assumes carries no such tag, and trusts only cloudformation.amazonaws.com.
CDK_BOOTSTRAP_ROLES = ("deploy", "file-publishing", "image-publishing", "lookup")
#: What ``cdk diff --method template`` reads of a deployed stack (CDK CLI 2.1148.1,
#: CloudFormationStack.lookup and loadNestedStacks): DescribeStacks, GetTemplate, and
#: ListStackResources for nested stacks. "template: Compares CloudFormation templates directly
#: ... Uses the lookup role" (CDK CLI reference, cdk diff:
#: https://docs.aws.amazon.com/cdk/v2/guide/ref-cli-cmd-diff.html), and where that role cannot
#: be assumed the CLI reads with the caller's own credentials when they are for the stack's
#: account ("could not be used to assume ..., but are for the right account. Proceeding
#: anyway", SdkProvider.forEnvironment; accessStackForLookupBestEffort). The default method,
#: auto, makes a change set through the deploy role instead.
TEMPLATE_DIFF_READS = (
    "cloudformation:DescribeStacks",
    "cloudformation:GetTemplate",
    "cloudformation:ListStackResources",
)
#: Where SageMaker training jobs log (tools/prepare_model.py reads the job's streams there).
TRAINING_LOG_GROUP = "/aws/sagemaker/TrainingJobs"


def github_oidc_provider(
    scope: Construct, construct_id: str, *, create: bool
) -> iam.IOpenIdConnectProvider:
    """The account's GitHub OIDC provider: created (kept when the stack goes, except after a
    failed create: another environment's role may trust it), or imported by its ARN."""
    if create:
        return iam.OidcProviderNative(
            scope,
            construct_id,
            url=f"https://{GITHUB_OIDC_HOST}",
            client_ids=[STS_AUDIENCE],
            removal_policy=KEEP_EXCEPT_FAILED_CREATE,
        )
    arn = Stack.of(scope).format_arn(
        service="iam", region="", resource="oidc-provider", resource_name=GITHUB_OIDC_HOST
    )
    return iam.OpenIdConnectProvider.from_open_id_connect_provider_arn(scope, construct_id, arn)


class DeployRole(Construct):
    """``role``: assumable through ``provider`` only, by a token whose ``aud`` is
    sts.amazonaws.com and whose ``sub`` is one of ``subjects`` exactly; sessions last at most
    ``max_session``. It may do nothing until an ``allow_*`` method grants a step."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        provider: iam.IOpenIdConnectProvider,
        subjects: Sequence[str],
        max_session: Duration,
        description: str,
    ) -> None:
        super().__init__(scope, construct_id)
        if not subjects:
            raise ValueError("a deploy role needs at least one exact subject")
        self.role = iam.Role(
            self,
            "Role",
            description=description,
            max_session_duration=max_session,
            assumed_by=iam.OpenIdConnectPrincipal(
                provider,
                conditions={
                    "StringEquals": {
                        f"{GITHUB_OIDC_HOST}:aud": STS_AUDIENCE,
                        f"{GITHUB_OIDC_HOST}:sub": list(subjects),
                    }
                },
            ),
        )

    def _allow(
        self,
        sid: str,
        actions: Sequence[str],
        resources: Sequence[str],
        conditions: Mapping[str, Any] | None = None,
    ) -> None:
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid=sid, actions=list(actions), resources=list(resources), conditions=conditions
            )
        )

    def _allow_prefix_reads(self, sid: str, bucket_arn: str, prefix: str) -> None:
        """``<sid>Read``: GetObject under ``prefix``; ``<sid>List``: ListBucket, IfExists on
        the prefix: a GetObject of a missing manifest must answer 404, which S3 gives only to a
        caller allowed s3:ListBucket on the bucket, a check that carries no s3:prefix (S3 API
        reference, GetObject, "Permissions"); the same rule as the job role's."""
        self._allow(f"{sid}Read", ["s3:GetObject"], [f"{bucket_arn}/{prefix}/*"])
        self._allow(
            f"{sid}List",
            ["s3:ListBucket"],
            [bucket_arn],
            conditions={"StringLikeIfExists": {"s3:prefix": [f"{prefix}/*"]}},
        )

    def _allow_key_through_s3(self, sid: str, actions: Sequence[str], key_arn: str) -> None:
        """A bucket's KMS key, used by S3 on the role's behalf only (``kms:ViaService``)."""
        region = Stack.of(self).region
        via = {"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}}
        self._allow(sid, actions, [key_arn], conditions=via)

    def _wildcard(self, reason: str, *resource_regexes: str) -> None:
        """AwsSolutions-IAM5 suppressed, with ``reason``, for the findings ``Resource::<ARN>``
        whose whole ARN matches one of ``resource_regexes`` (JavaScript regex literals: slashes
        escaped). The role's DefaultPolicy exists by then (an ``_allow`` came first)."""
        NagSuppressions.add_resource_suppressions(
            self.role,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason=reason,
                    applies_to=[
                        RegexAppliesTo(regex="/^Resource::{}$/g".format(r.replace("/", r"\/")))
                        for r in resource_regexes
                    ],
                )
            ],
            apply_to_children=True,
        )

    def allow_cdk_bootstrap_roles(
        self, qualifier: str, roles: Sequence[str] = CDK_BOOTSTRAP_ROLES
    ) -> None:
        """``cdk deploy`` and ``cdk diff``: the bootstrap roles of this account and region only,
        and of those only the four tagged ``aws-cdk:bootstrap-role`` (cdk-pipelines-github's
        GitHubActionRole conditions on the same tag). The CLI passes STS no session tags unless a
        synthesizer's ``assumeRoleAdditionalOptions`` asks ("Default - No additional options"),
        and none here does, so ``sts:AssumeRole`` alone."""
        stack = Stack.of(self)
        self._allow(
            "AssumeCdkBootstrapRoles",
            ["sts:AssumeRole"],
            [
                stack.format_arn(
                    service="iam",
                    region="",
                    resource="role",
                    resource_name=f"cdk-{qualifier}-*-{stack.account}-{stack.region}",
                )
            ],
            conditions={"StringEquals": {"iam:ResourceTag/aws-cdk:bootstrap-role": list(roles)}},
        )
        self._wildcard(
            "the CDK bootstrap roles share one name pattern; the aws-cdk:bootstrap-role tag "
            f"condition admits {', '.join(roles)} only",
            rf"{_ARN}:iam::{_ACCOUNT}:role/cdk-{qualifier}-\*-{_ACCOUNT}-{_REGION}",
        )

    def allow_template_reads(self, stack_names: Sequence[str]) -> None:
        """``cdk diff --method template`` with this role's own credentials: the deployed
        templates of ``stack_names`` (this environment's stacks) and nothing else of the account
        (:data:`TEMPLATE_DIFF_READS`). A stack's ARN ends in an id CloudFormation generates."""
        stack = Stack.of(self)
        self._allow(
            "ReadStackTemplates",
            TEMPLATE_DIFF_READS,
            [
                stack.format_arn(service="cloudformation", resource="stack", resource_name=f"{n}/*")
                for n in stack_names
            ],
        )
        self._wildcard(
            "a stack ARN ends in an id CloudFormation generates",
            *(
                rf"{_ARN}:cloudformation:{_REGION}:{_ACCOUNT}:stack/{_re(n)}/\*"
                for n in stack_names
            ),
        )

    def allow_preflight(
        self, *, bootstrap_version_parameter: str, scaling_role: str, execution_role: str
    ) -> None:
        """tools/preflight.py: SSM GetParameter of the bootstrap version, the SageMaker quotas,
        IAM GetRole of the scaling service-linked role (``scaling_role``: its path and name),
        IAM ListAttachedRolePolicies of the bootstrap's CloudFormation execution role
        (``execution_role``: its name). STS GetCallerIdentity needs no permission ("No
        permissions are required to perform this operation", STS API reference,
        GetCallerIdentity)."""
        stack = Stack.of(self)
        self._allow(
            "PreflightBootstrapVersion",
            ["ssm:GetParameter"],
            [
                stack.format_arn(
                    service="ssm",
                    resource="parameter",
                    resource_name=bootstrap_version_parameter.lstrip("/"),
                )
            ],
        )
        # Service Authorization Reference, Service Quotas: ListServiceQuotas and
        # ListAWSDefaultServiceQuotas list no resource type, so the resource is "*".
        self._allow(
            "PreflightQuotas",
            ["servicequotas:ListAWSDefaultServiceQuotas", "servicequotas:ListServiceQuotas"],
            ["*"],
        )
        self._wildcard(_NO_RESOURCE_TYPE.format("servicequotas:List*ServiceQuotas"), r"\*")
        self._allow(
            "PreflightScalingRole",
            ["iam:GetRole"],
            [
                stack.format_arn(
                    service="iam", region="", resource="role", resource_name=scaling_role
                )
            ],
        )
        self._allow(
            "PreflightExecutionRolePolicies",
            ["iam:ListAttachedRolePolicies"],
            [
                stack.format_arn(
                    service="iam", region="", resource="role", resource_name=execution_role
                )
            ],
        )

    def allow_token_secret_check(self, *, secret_name: str, job_role_arn: str) -> None:
        """tools/preflight.py's token secret check (prepare-model): DescribeSecret of the named
        secret (its ARN ends in "-" and six random characters: "??????" matches only those)
        and SimulatePrincipalPolicy on the preparation job's role alone (Service Authorization
        Reference, IAM: the action's resource type is the user, group or role simulated)."""
        stack = Stack.of(self)
        self._allow(
            "PreflightTokenSecret",
            ["secretsmanager:DescribeSecret"],
            [
                stack.format_arn(
                    service="secretsmanager",
                    resource="secret",
                    resource_name=f"{secret_name}-??????",
                    arn_format=ArnFormat.COLON_RESOURCE_NAME,
                )
            ],
        )
        self._allow("PreflightJobRoleSimulation", ["iam:SimulatePrincipalPolicy"], [job_role_arn])
        self._wildcard(
            "a Secrets Manager secret's ARN ends in six random characters, matched by ??????",
            rf"{_ARN}:secretsmanager:{_REGION}:{_ACCOUNT}:secret:{_re(secret_name)}-\?\?\?\?\?\?",
        )

    def allow_ecr_repository(self, repository_arn: str) -> None:
        """Push, pull and read this one repository (tools/push_image.py: DescribeRepositories,
        BatchGetImage, the buildx push with its registry cache; tools/deploy.py: BatchGetImage;
        tools/prepare_model.py: DescribeImages, the job image's docker push)."""
        # Service Authorization Reference, Amazon ECR: GetAuthorizationToken lists no resource
        # type; the token reaches only what the repository statement below allows.
        self._allow("EcrLogin", ["ecr:GetAuthorizationToken"], ["*"])
        self._wildcard(_NO_RESOURCE_TYPE.format("ecr:GetAuthorizationToken"), r"\*")
        self._allow(
            "EcrRepository",
            [
                "ecr:BatchCheckLayerAvailability",
                "ecr:BatchGetImage",
                "ecr:CompleteLayerUpload",
                "ecr:DescribeImages",
                "ecr:DescribeRepositories",
                "ecr:GetDownloadUrlForLayer",
                "ecr:InitiateLayerUpload",
                "ecr:PutImage",
                "ecr:UploadLayerPart",
            ],
            [repository_arn],
        )

    def allow_endpoint_operations(
        self, *, endpoint_name: str, controller_function_arn: str
    ) -> None:
        """tools/deploy.py, tools/canary.py, tools/promote.py: read the live endpoint, raise its
        counts before a deploy, and every canary command through the controller Lambda."""
        stack = Stack.of(self)
        EndpointRef.of(self, endpoint_name).grant(
            self.role,
            "sagemaker:DescribeEndpoint",
            "sagemaker:UpdateEndpointWeightsAndCapacities",
            sid="Endpoint",
        )
        # Endpoint configs and models get generated names (a new pair each deploy): the
        # endpoint names them at run time. Read-only.
        self._allow(
            "EndpointConfigsAndModels",
            ["sagemaker:DescribeEndpointConfig", "sagemaker:DescribeModel"],
            [
                stack.format_arn(service="sagemaker", resource=kind, resource_name="*")
                for kind in ("endpoint-config", "model")
            ],
        )
        self._wildcard(
            "endpoint configs and models have generated names, read from the endpoint at run "
            "time; Describe only",
            rf"{_ARN}:sagemaker:{_REGION}:{_ACCOUNT}:(endpoint-config|model)/\*",
        )
        # Service Authorization Reference, Application Auto Scaling: DescribeScalableTargets
        # lists no resource type, so the resource is "*".
        self._allow("ScalableTargets", ["application-autoscaling:DescribeScalableTargets"], ["*"])
        self._wildcard(
            _NO_RESOURCE_TYPE.format("application-autoscaling:DescribeScalableTargets"), r"\*"
        )
        # tools/deploy.py raises a variant's registered minimum for the update and puts it back.
        self.role.add_to_policy(register_variant_bounds(stack, "ScalingMinimum"))
        self._wildcard(
            "scalable-target ARNs carry a generated id; the service-namespace and "
            "scalable-dimension conditions admit SageMaker variant counts only",
            rf"{_ARN}:application-autoscaling:{_REGION}:{_ACCOUNT}:scalable-target/\*",
        )
        # tools/deploy.py deregisters the canary's target itself before an instance-type change
        # when the canary controller owns it (rollout.shadow: canary_scaling.py), and Application
        # Auto Scaling deletes its target-tracking alarms with it, with the caller's rights
        # (Application Auto Scaling user guide, identity-based policy examples).
        self._allow(
            "ControllerScalingRelease",
            ["application-autoscaling:DeregisterScalableTarget"],
            [scalable_targets_arn(stack)],
        )
        canary_alarms = canary_scaling.TRACKING_ALARM_PREFIX + canary_scaling.resource_id(
            endpoint_name, CONTROLLER_OWNED_VARIANT
        )
        self._allow(
            "ControllerScalingAlarms",
            ["cloudwatch:DescribeAlarms", "cloudwatch:DeleteAlarms"],
            [
                stack.format_arn(
                    service="cloudwatch",
                    resource="alarm",
                    resource_name=f"{canary_alarms}-*",
                    arn_format=ArnFormat.COLON_RESOURCE_NAME,
                )
            ],
        )
        self._wildcard(
            "Application Auto Scaling names a target-tracking policy's alarms after its resource "
            "with a generated suffix: this endpoint's canary's only",
            rf"{_ARN}:cloudwatch:{_REGION}:{_ACCOUNT}:alarm:TargetTracking-endpoint/"
            rf"{_re(endpoint_name)}/variant/canary-\*",
        )
        self._allow("CanaryController", ["lambda:InvokeFunction"], [controller_function_arn])

    def allow_model_preparation(
        self,
        *,
        job_name_prefix: str,
        job_role_arn: str,
        release_stack_name: str,
    ) -> None:
        """tools/prepare_model.py: the training job (create, watch, stop), passing it the
        preparation job's role and nothing else, its log lines, and the release stack's
        outputs (where it reads that role's ARN)."""
        stack = Stack.of(self)
        self._allow(
            "PreparationJobs",
            [
                "sagemaker:CreateTrainingJob",
                "sagemaker:DescribeTrainingJob",
                "sagemaker:StopTrainingJob",
            ],
            [
                stack.format_arn(
                    service="sagemaker",
                    resource="training-job",
                    resource_name=f"{job_name_prefix.lower()}*",
                )
            ],
        )
        self._allow(
            "PassPreparationJobRole",
            ["iam:PassRole"],
            [job_role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
        )
        # make prepare-model looks for a job already preparing the version before starting one
        # (a re-run never starts a second); ListTrainingJobs names no resource type.
        self._allow("ListPreparationJobs", ["sagemaker:ListTrainingJobs"], ["*"])
        self._wildcard(_NO_RESOURCE_TYPE.format("sagemaker:ListTrainingJobs"), r"\*")
        log_group = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=TRAINING_LOG_GROUP,
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        # FilterLogEvents authorizes on the log group (Service Authorization Reference, Amazon
        # CloudWatch Logs); the ":*" form is the ARN the group's own actions are checked against.
        self._allow("PreparationJobLogs", ["logs:FilterLogEvents"], [log_group, f"{log_group}:*"])
        self._allow(
            "ReleaseStackOutputs",
            ["cloudformation:DescribeStacks"],
            [
                stack.format_arn(
                    service="cloudformation",
                    resource="stack",
                    resource_name=f"{release_stack_name}/*",
                )
            ],
        )
        self._wildcard(
            "training jobs are named <project>-<env>-prep-<version>-<time> at run time "
            "(tools/prepare_model.py)",
            rf"{_ARN}:sagemaker:{_REGION}:{_ACCOUNT}:"
            rf"training-job/{_re(job_name_prefix.lower())}\*",
        )
        self._wildcard(
            "SageMaker names each training job's log streams at run time, all in this group",
            rf"{_ARN}:logs:{_REGION}:{_ACCOUNT}:log-group:{_re(TRAINING_LOG_GROUP)}:\*",
        )
        self._wildcard(
            "a stack ARN ends in an id CloudFormation generates",
            rf"{_ARN}:cloudformation:{_REGION}:{_ACCOUNT}:stack/{_re(release_stack_name)}/\*",
        )

    def allow_model_releases(self, *, bucket_name: str, prefix: str, key_arn: str) -> None:
        """Model releases in the artifact bucket: read them (tools/model_release.py fetch, the
        manifest check of tools/prepare_model.py), and write a preparation job's inputs under
        ``<prefix>/jobs/`` only; the bucket key through S3 only."""
        bucket_arn = f"arn:{Stack.of(self).partition}:s3:::{bucket_name}"
        self._allow_prefix_reads("Releases", bucket_arn, prefix)
        self._allow("PreparationJobInputs", ["s3:PutObject"], [f"{bucket_arn}/{prefix}/jobs/*"])
        self._allow_key_through_s3("ReleaseKeyThroughS3", ["kms:Decrypt", "kms:GenerateDataKey"],
                                   key_arn)  # fmt: skip
        self._wildcard(
            "object keys under the release prefix are release versions and upload ids known "
            "at run time; writes only under <prefix>/jobs/",
            rf"{_ARN}:s3:::[^/]+/{_re(prefix)}/(jobs/)?\*",
        )

    def allow_promotion(
        self,
        *,
        source_repository_arn: str,
        source_bucket_name: str,
        source_prefix: str,
        source_key_arn: str,
        bucket_name: str,
        prefix: str,
    ) -> None:
        """tools/release_artifacts.py (``make promote-image``, ``promote-model``): read the
        source environment's image and model releases, and write a promoted release's files and
        manifest under this bucket's ``<prefix>/m-*`` (a version; the bucket policy still lets a
        manifest be written only if none exists). ``docker buildx imagetools create`` pulls the
        source's layers and pushes them here (the ECR push statement); the S3 copy reads the
        source object and writes the destination (CopyObject, UploadPartCopy: s3:GetObject on
        the source, s3:PutObject on the destination; S3 API reference, CopyObject), through both
        buckets' keys (Decrypt of the source's, GenerateDataKey of this one's)."""
        self._allow(
            "PromotionSourceImage",
            [
                "ecr:BatchCheckLayerAvailability",
                "ecr:BatchGetImage",
                "ecr:DescribeImages",
                "ecr:GetDownloadUrlForLayer",
            ],
            [source_repository_arn],
        )
        source = f"arn:{Stack.of(self).partition}:s3:::{source_bucket_name}"
        self._allow_prefix_reads("PromotionSource", source, source_prefix)
        self._allow_key_through_s3("PromotionSourceKeyThroughS3", ["kms:Decrypt"], source_key_arn)
        bucket_arn = f"arn:{Stack.of(self).partition}:s3:::{bucket_name}"
        self._allow("PromotedReleases", ["s3:PutObject"], [f"{bucket_arn}/{prefix}/m-*"])
        self._wildcard(
            "a promoted release's objects are named by its version and upload id at run time",
            rf"{_ARN}:s3:::[^/]+/{_re(prefix)}/m-\*",
            rf"{_ARN}:s3:::[^/]+/{_re(source_prefix)}/\*",
        )

    def allow_adapter_releases(
        self, *, endpoint_name: str, base_component: str, component_prefix: str, bucket_name: str
    ) -> None:
        """tools/adapter_release (``make release-adapter``, issue 45): the adapter components
        named ``<component_prefix>*`` (each adapter's, and its ``-next`` candidate), created on
        this endpoint, updated, deleted and invoked (the probes); the CloudWatch metrics and
        alarms that judge them; one adapter version published under ``adapters/`` in the models
        bucket (the bucket key through S3: ``allow_model_releases``). Service Authorization
        Reference, SageMaker: CreateInferenceComponent requires the endpoint and the
        inference-component; InvokeEndpoint the endpoint, and the inference-component it names;
        CloudWatch GetMetricData lists no required resource type (``*``)."""
        self._allow_adapter_components(endpoint_name, base_component, component_prefix)
        self._allow_adapter_evidence()
        bucket_arn = f"arn:{Stack.of(self).partition}:s3:::{bucket_name}"
        self._allow_prefix_reads("AdapterVersions", bucket_arn, "adapters")
        self._allow("AdapterVersionsWrite", ["s3:PutObject"], [f"{bucket_arn}/adapters/*"])
        self._adapter_wildcards(component_prefix)

    def _allow_adapter_components(
        self, endpoint_name: str, base_component: str, component_prefix: str
    ) -> None:
        """The adapter components' lifecycle and probes on this endpoint, and a read of the base
        component (the release reads it to refuse an endpoint without one, the variant shape;
        it never changes it)."""
        stack = Stack.of(self)
        components = stack.format_arn(
            service="sagemaker",
            resource="inference-component",
            resource_name=f"{component_prefix.lower()}*",
        )
        EndpointRef.of(self, endpoint_name).grant(
            self.role,
            "sagemaker:CreateInferenceComponent",
            "sagemaker:InvokeEndpoint",
            sid="AdapterComponentsEndpoint",
        )
        self._allow(
            "AdapterComponents",
            [
                "sagemaker:CreateInferenceComponent",
                "sagemaker:DeleteInferenceComponent",
                "sagemaker:DescribeInferenceComponent",
                "sagemaker:InvokeEndpoint",
                "sagemaker:UpdateInferenceComponent",
            ],
            [components],
        )
        self._allow(
            "BaseComponentRead",
            ["sagemaker:DescribeInferenceComponent"],
            [
                stack.format_arn(
                    service="sagemaker",
                    resource="inference-component",
                    resource_name=base_component.lower(),
                )
            ],
        )

    def _allow_adapter_evidence(self) -> None:
        """The CloudWatch metrics that judge a candidate and the alarms watched after a swap."""
        self._allow("AdapterEvidence", ["cloudwatch:GetMetricData"], ["*"])
        self._allow(
            "AdapterAlarms",
            ["cloudwatch:DescribeAlarms"],
            [
                Stack.of(self).format_arn(
                    service="cloudwatch",
                    resource="alarm",
                    resource_name="*",
                    arn_format=ArnFormat.COLON_RESOURCE_NAME,
                )
            ],
        )

    def _adapter_wildcards(self, component_prefix: str) -> None:
        """Why each ``*`` of the adapter release's statements is needed (cdk-nag IAM5)."""
        self._wildcard(
            "adapter components are named <project>-<env>-lora-<adapter>[-next]; one per "
            "adapter of the config, known at run time",
            rf"{_ARN}:sagemaker:{_REGION}:{_ACCOUNT}:"
            rf"inference-component/{_re(component_prefix.lower())}\*",
        )
        self._wildcard(
            _NO_RESOURCE_TYPE.format("cloudwatch:GetMetricData") + " (its dataset is optional)",
            r"\*",
        )
        self._wildcard(
            "the watched alarms are the config's (inference_components.rollout.alarm_names), "
            "named by the operator; DescribeAlarms only",
            rf"{_ARN}:cloudwatch:{_REGION}:{_ACCOUNT}:alarm:\*",
        )
        self._wildcard(
            "one adapter version's objects are named by the adapter, its version and its files",
            rf"{_ARN}:s3:::[^/]+/adapters/\*",
        )


#: The reason for ``*`` on an action with no resource type.
_NO_RESOURCE_TYPE = (
    "{} lists no resource type in the Service Authorization Reference: its resource must be *"
)
#: How cdk-nag renders an ARN's partition, region and account: literal when the stack's
#: environment names them, ``<AWS::Partition>``-style tokens otherwise.
_ARN = r"arn:([a-z-]+|<AWS::Partition>)"
_REGION = r"([a-z0-9-]+|<AWS::Region>)"
_ACCOUNT = r"([0-9]{12}|<AWS::AccountId>)"


def _re(text: str) -> str:
    """``text`` matched literally in a regex."""
    return "".join(f"\\{c}" if c in r"\^$.|?*+()[]{}" else c for c in text)
