"""The product's CloudFormation execution policy: what CloudFormation may do, through the CDK
bootstrap's execution role, when it deploys this environment's stacks, and nothing else.

A default ``cdk bootstrap`` gives that role AdministratorAccess (bootstrap-template.yaml:
``ManagedPolicyArns`` falls back to ``arn:${AWS::Partition}:iam::aws:policy/AdministratorAccess``
when no ``CloudFormationExecutionPolicies`` are given), and the deploy role GitHub Actions
assumes may pass it: whoever holds the deploy role is account admin in effect. ``cdk bootstrap
--cloudformation-execution-policies <ARN>,...`` attaches these policies instead (CDK CLI
reference, ``cdk bootstrap``: https://docs.aws.amazon.com/cdk/v2/guide/ref-cli-cmd-bootstrap.html).

How the actions were chosen. CloudFormation calls each resource type's handlers with the
service role's credentials ("If you specify a service role, CloudFormation uses that role's
credentials", https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-iam-servicerole.html),
and each type's registry schema lists the permissions every handler needs (``handlers``:
create, read, update, delete, each with ``permissions``:
https://docs.aws.amazon.com/cloudformation-cli/latest/userguide/resource-type-schema.html).
:data:`GRANTS` holds, per service, every permission the schemas of the product's resource types
list whose resource type the product has, on the product's resources; :data:`NOT_GRANTED` the
rest, each with why (a feature no template uses, or a name that is no IAM action).
tests/infra/test_execution_policy.py reads the schemas cfn-lint ships and the synthesized
templates of dev and prod: a resource type without a grant, or a handler permission neither
granted nor explained, fails it.

Scope. Names the config fixes are named (the endpoint, the ECR repository, the artifact bucket,
the canary controller and its state machine, the endpoint's log group). CloudFormation names
what a template leaves unnamed ``<stack name>-<logical id>-<random>``, so roles, functions, log
groups, the table, the topic, the rule and the alarms are ``<project>-<env>-*``. What has no
name to scope by is this account and region's: KMS keys (random ids), SageMaker models and
endpoint configs, the dashboard and the smoke gate's waiter state machine (generated names that
need not start with the stack's); :data:`ACCOUNT_WIDE` says so for each. Actions with no
resource type (Service Authorization Reference) are on ``*``.

What this does not close: the role may create roles named ``<project>-<env>-*`` with any inline
policy (the endpoint stack's roles need PutRolePolicy), and pass them to SageMaker, Lambda or
Step Functions. It may attach no managed policy but AWSLambdaBasicExecutionRole. A permissions
boundary on every role the product creates would close the rest (not done: docs/release-from-ci.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from cdk_nag import NagPackSuppression, NagSuppressions
from constructs import Construct

from typed_config import EXECUTION_POLICY_PARTS

#: The GitHub OIDC provider's host (stacks/constructs/deploy_access.py creates it there).
GITHUB_OIDC_HOST = "token.actions.githubusercontent.com"
#: Application Auto Scaling's service-linked role for SageMaker variants (the scalable targets'
#: RoleARN; created at the first RegisterScalableTarget by a caller that may create it).
SCALING_SERVICE = "sagemaker.application-autoscaling.amazonaws.com"
SCALING_ROLE_PATH = (
    f"aws-service-role/{SCALING_SERVICE}/AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
)
#: The only managed policy a template attaches (the custom resource Provider framework's
#: function roles): ``iam:AttachRolePolicy`` is conditioned on it, so no stack can attach
#: AdministratorAccess to a role it creates.
ATTACHABLE_POLICIES = ("service-role/AWSLambdaBasicExecutionRole",)
#: The services a role the templates create is passed to (``iam:PassedToService``).
PASSED_TO = ("lambda.amazonaws.com", "sagemaker.amazonaws.com", "states.amazonaws.com")
#: Services a role the templates create trusts but CloudFormation never passes it to: Bedrock's
#: model-import role (stacks/model_release_stack.py) is passed by ``make bedrock-import``, the
#: caller's own iam:PassRole, since Custom Model Import has no CloudFormation resource. The
#: execution policy grants no PassRole for them.
TRUSTED_NOT_PASSED = ("bedrock.amazonaws.com",)


@dataclass(frozen=True)
class Names:
    """What the ARNs are built from: literals in tests, the stack's tokens in the construct."""

    partition: str
    region: str
    account: str
    #: ``<project>-<env>``: the stack names' prefix, so every generated name's.
    prefix: str
    endpoint: str
    repository: str
    bucket: str
    qualifier: str

    def arn(self, template: str) -> str:
        return template.format(
            p=self.partition,
            r=self.region,
            a=self.account,
            prefix=self.prefix,
            endpoint=self.endpoint.lower(),
            repository=self.repository,
            bucket=self.bucket,
            q=self.qualifier,
        )


@dataclass(frozen=True)
class Grant:
    """One policy statement: ``resources`` are ARN templates (:meth:`Names.arn`)."""

    sid: str
    part: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    conditions: Mapping[str, Any] = field(default_factory=dict)


def _g(sid: str, part: str, actions: str, resources: Sequence[str], **conditions: Any) -> Grant:
    return Grant(sid, part, tuple(sorted(actions.split())), tuple(resources), conditions)


_IAM = "arn:{p}:iam::{a}:"
_ROLES = _IAM + "role/{prefix}-*"
_REGIONAL = ":{r}:{a}:"
_VENDED_STATES_LOGS = "log-group:/aws/vendedlogs/states/{endpoint}-canary-rollout"

#: Every statement of the execution policies, by policy part (:data:`EXECUTION_POLICY_PARTS`).
GRANTS: tuple[Grant, ...] = (
    # --- iam: the roles and inline policies of every stack, the GitHub OIDC provider ---
    _g(
        "Roles",
        "iam",
        "iam:CreateRole iam:DeleteRole iam:GetRole iam:UpdateRole iam:UpdateRoleDescription "
        "iam:UpdateAssumeRolePolicy iam:TagRole iam:UntagRole iam:PutRolePolicy "
        "iam:GetRolePolicy iam:DeleteRolePolicy iam:ListRolePolicies "
        "iam:ListAttachedRolePolicies iam:DetachRolePolicy",
        [_ROLES],
    ),
    _g(
        "AttachLambdaBasicExecutionOnly",
        "iam",
        "iam:AttachRolePolicy",
        [_ROLES],
        ArnEquals={
            "iam:PolicyARN": [f"arn:{{p}}:iam::aws:policy/{p}" for p in ATTACHABLE_POLICIES]
        },
    ),
    _g(
        "PassRolesToTheirServices",
        "iam",
        "iam:PassRole",
        [_ROLES],
        StringEquals={"iam:PassedToService": list(PASSED_TO)},
    ),
    _g(
        "ScalingServiceLinkedRole",
        "iam",
        "iam:CreateServiceLinkedRole iam:PassRole iam:GetRole",
        [_IAM + "role/" + SCALING_ROLE_PATH],
    ),
    _g(
        "GitHubOidcProvider",
        "iam",
        "iam:CreateOpenIDConnectProvider iam:DeleteOpenIDConnectProvider "
        "iam:GetOpenIDConnectProvider iam:TagOpenIDConnectProvider "
        "iam:UntagOpenIDConnectProvider iam:ListOpenIDConnectProviderTags "
        "iam:AddClientIDToOpenIDConnectProvider iam:RemoveClientIDFromOpenIDConnectProvider "
        "iam:UpdateOpenIDConnectProviderThumbprint",
        [_IAM + "oidc-provider/" + GITHUB_OIDC_HOST],
    ),
    # --- serving: SageMaker, scaling, alarms, the image repository, keys, the bucket ---
    _g(
        "Endpoint",
        "serving",
        # UpdateEndpointWeightsAndCapacities: Application Auto Scaling's guide ("Permissions
        # required for API actions on target services and CloudWatch") lists it for whoever
        # registers a SageMaker variant as a scalable target: the ScalableTarget's handler.
        "sagemaker:CreateEndpoint sagemaker:UpdateEndpoint sagemaker:DeleteEndpoint "
        "sagemaker:DescribeEndpoint sagemaker:AddTags sagemaker:DeleteTags sagemaker:ListTags "
        "sagemaker:UpdateEndpointWeightsAndCapacities sagemaker:CreateInferenceComponent",
        ["arn:{p}:sagemaker" + _REGIONAL + "endpoint/{endpoint}"],
    ),
    _g(
        # The Service Authorization Reference: CreateEndpoint and UpdateEndpoint require both
        # the endpoint and the endpoint-config resource (aws/aws-cdk#11594: AccessDenied on
        # endpoint-config/<name> with the endpoint alone). The config's name is generated.
        "EndpointOnItsConfig",
        "serving",
        "sagemaker:CreateEndpoint sagemaker:UpdateEndpoint",
        ["arn:{p}:sagemaker" + _REGIONAL + "endpoint-config/*"],
    ),
    _g(
        # The component shape (issue 45): the handler of AWS::SageMaker::InferenceComponent lists
        # these (its registry schema); the Service Authorization Reference: CreateInferenceComponent
        # requires the endpoint (granted above) and the inference-component, whose names are
        # <project>-<env>-base and <project>-<env>-lora-<adapter> (typed_config.generated_names).
        "InferenceComponents",
        "serving",
        "sagemaker:CreateInferenceComponent sagemaker:UpdateInferenceComponent "
        "sagemaker:UpdateInferenceComponentRuntimeConfig sagemaker:DeleteInferenceComponent "
        "sagemaker:DescribeInferenceComponent sagemaker:AddTags sagemaker:DeleteTags "
        "sagemaker:ListTags",
        ["arn:{p}:sagemaker" + _REGIONAL + "inference-component/{prefix}-*"],
    ),
    _g(
        "ModelsAndEndpointConfigs",
        "serving",
        "sagemaker:CreateModel sagemaker:DeleteModel sagemaker:DescribeModel "
        "sagemaker:CreateEndpointConfig sagemaker:DeleteEndpointConfig "
        "sagemaker:DescribeEndpointConfig sagemaker:AddTags sagemaker:DeleteTags "
        "sagemaker:ListTags",
        [
            "arn:{p}:sagemaker" + _REGIONAL + "model/*",
            "arn:{p}:sagemaker" + _REGIONAL + "endpoint-config/*",
        ],
    ),
    _g(
        "ScalableTargets",
        "serving",
        "application-autoscaling:RegisterScalableTarget "
        "application-autoscaling:DeregisterScalableTarget "
        "application-autoscaling:PutScalingPolicy application-autoscaling:DeleteScalingPolicy "
        "application-autoscaling:PutScheduledAction "
        "application-autoscaling:DeleteScheduledAction application-autoscaling:TagResource "
        "application-autoscaling:UntagResource application-autoscaling:ListTagsForResource",
        ["arn:{p}:application-autoscaling" + _REGIONAL + "scalable-target/*"],
    ),
    _g(
        "NoResourceType",
        "serving",
        "application-autoscaling:DescribeScalableTargets "
        "application-autoscaling:DescribeScalingPolicies "
        "application-autoscaling:DescribeScheduledActions cloudwatch:GetMetricData "
        "kms:CreateKey kms:ListAliases",
        ["*"],
    ),
    _g(
        "Alarms",
        "serving",
        "cloudwatch:PutMetricAlarm cloudwatch:DeleteAlarms cloudwatch:DescribeAlarms "
        "cloudwatch:TagResource cloudwatch:UntagResource cloudwatch:ListTagsForResource",
        [
            "arn:{p}:cloudwatch" + _REGIONAL + "alarm:{prefix}-*",
            "arn:{p}:cloudwatch" + _REGIONAL + "alarm:TargetTracking-endpoint/{endpoint}/*",
            # the component shape's copy tracking (inference-component/<project>-<env>-base)
            "arn:{p}:cloudwatch"
            + _REGIONAL
            + "alarm:TargetTracking-inference-component/{prefix}-*",
        ],
    ),
    _g(
        "Dashboard",
        "serving",
        "cloudwatch:PutDashboard cloudwatch:GetDashboard cloudwatch:DeleteDashboards "
        "cloudwatch:TagResource cloudwatch:UntagResource cloudwatch:ListTagsForResource",
        ["arn:{p}:cloudwatch::{a}:dashboard/*"],
    ),
    _g(
        "ImageRepository",
        "serving",
        "ecr:CreateRepository ecr:DeleteRepository ecr:DescribeRepositories "
        "ecr:PutLifecyclePolicy ecr:GetLifecyclePolicy ecr:DeleteLifecyclePolicy "
        "ecr:SetRepositoryPolicy ecr:GetRepositoryPolicy ecr:DeleteRepositoryPolicy "
        "ecr:PutImageScanningConfiguration ecr:PutImageTagMutability ecr:TagResource "
        "ecr:UntagResource ecr:ListTagsForResource",
        ["arn:{p}:ecr" + _REGIONAL + "repository/{repository}"],
    ),
    _g(
        "Keys",
        "serving",
        "kms:DescribeKey kms:GetKeyPolicy kms:PutKeyPolicy kms:GetKeyRotationStatus "
        "kms:EnableKeyRotation kms:DisableKeyRotation kms:EnableKey kms:DisableKey "
        "kms:ScheduleKeyDeletion kms:UpdateKeyDescription kms:TagResource kms:UntagResource "
        "kms:ListResourceTags kms:CreateGrant kms:RetireGrant kms:RevokeGrant kms:Encrypt "
        "kms:Decrypt kms:GenerateDataKey",
        ["arn:{p}:kms" + _REGIONAL + "key/*"],
    ),
    _g(
        "ArtifactBucket",
        "serving",
        "s3:CreateBucket s3:DeleteBucket s3:ListBucket s3:GetBucketAcl s3:GetBucketPolicy "
        "s3:PutBucketPolicy s3:DeleteBucketPolicy s3:GetBucketTagging s3:PutBucketTagging "
        "s3:TagResource s3:UntagResource s3:ListTagsForResource s3:GetBucketVersioning "
        "s3:PutBucketVersioning s3:GetEncryptionConfiguration s3:PutEncryptionConfiguration "
        "s3:GetLifecycleConfiguration s3:PutLifecycleConfiguration "
        "s3:GetBucketPublicAccessBlock s3:PutBucketPublicAccessBlock "
        "s3:GetBucketOwnershipControls s3:PutBucketOwnershipControls "
        "s3:GetAccelerateConfiguration s3:GetAnalyticsConfiguration s3:GetBucketAbac "
        "s3:GetBucketCORS s3:GetBucketLogging s3:GetBucketMetadataTableConfiguration "
        "s3:GetBucketNotification s3:GetBucketObjectLockConfiguration s3:GetBucketWebsite "
        "s3:GetIntelligentTieringConfiguration s3:GetInventoryConfiguration "
        "s3:GetMetricsConfiguration s3:GetReplicationConfiguration",
        # the artifact bucket, and the shadow stage's capture bucket
        # (typed_config.derived.capture_bucket_name)
        ["arn:{p}:s3:::{bucket}", "arn:{p}:s3:::{prefix}-capture-{a}"],
    ),
    _g(
        "BootstrapAssets",
        "serving",
        "s3:GetObject s3:GetObjectVersion",
        ["arn:{p}:s3:::cdk-{q}-assets-{a}-{r}/*"],
    ),
    _g(
        "BootstrapVersion",
        "serving",
        "ssm:GetParameters",
        ["arn:{p}:ssm" + _REGIONAL + "parameter/cdk-bootstrap/{q}/version"],
    ),
    # --- control: the canary controller, the smoke gate, the rollout, monitoring ---
    _g(
        "Functions",
        "control",
        "lambda:CreateFunction lambda:DeleteFunction lambda:GetFunction "
        "lambda:UpdateFunctionCode lambda:UpdateFunctionConfiguration lambda:PublishVersion "
        "lambda:TagResource lambda:UntagResource lambda:GetFunctionCodeSigningConfig "
        "lambda:GetRuntimeManagementConfig lambda:PutRuntimeManagementConfig "
        "lambda:GetFunctionRecursionConfig lambda:PutFunctionRecursionConfig "
        "lambda:PutFunctionConcurrency lambda:DeleteFunctionConcurrency "
        "lambda:GetFunctionScalingConfig lambda:AddPermission lambda:RemovePermission "
        "lambda:GetPolicy lambda:InvokeFunction",
        [
            "arn:{p}:lambda" + _REGIONAL + "function:{prefix}-*",
            "arn:{p}:lambda" + _REGIONAL + "function:{endpoint}-*",
        ],
    ),
    _g(
        "StateMachines",
        "control",
        "states:CreateStateMachine states:UpdateStateMachine states:DeleteStateMachine "
        "states:DescribeStateMachine states:TagResource states:UntagResource "
        "states:ListTagsForResource",
        ["arn:{p}:states" + _REGIONAL + "stateMachine:*"],
    ),
    _g(
        "RolloutTable",
        "control",
        "dynamodb:CreateTable dynamodb:DeleteTable dynamodb:DescribeTable dynamodb:UpdateTable "
        "dynamodb:DescribeContinuousBackups dynamodb:UpdateContinuousBackups "
        "dynamodb:DescribeContributorInsights dynamodb:UpdateContributorInsights "
        "dynamodb:DescribeTimeToLive dynamodb:UpdateTimeToLive "
        "dynamodb:DescribeKinesisStreamingDestination dynamodb:GetResourcePolicy "
        "dynamodb:TagResource dynamodb:UntagResource dynamodb:ListTagsOfResource",
        ["arn:{p}:dynamodb" + _REGIONAL + "table/{prefix}-*"],
    ),
    _g(
        "ExecutionEndedRule",
        "control",
        "events:PutRule events:DeleteRule events:DescribeRule events:PutTargets "
        "events:RemoveTargets events:ListTargetsByRule events:TagResource "
        "events:UntagResource events:ListTagsForResource",
        ["arn:{p}:events" + _REGIONAL + "rule/{prefix}-*"],
    ),
    _g(
        "AlarmTopic",
        "control",
        "sns:CreateTopic sns:DeleteTopic sns:GetTopicAttributes sns:SetTopicAttributes "
        "sns:Subscribe sns:Unsubscribe sns:GetSubscriptionAttributes "
        "sns:SetSubscriptionAttributes sns:ListSubscriptionsByTopic sns:TagResource "
        "sns:UntagResource sns:ListTagsForResource sns:GetDataProtectionPolicy "
        "sns:PutDataProtectionPolicy",
        ["arn:{p}:sns" + _REGIONAL + "{prefix}-*"],
    ),
    _g(
        "LogGroups",
        "control",
        "logs:CreateLogGroup logs:DeleteLogGroup logs:PutRetentionPolicy "
        "logs:DeleteRetentionPolicy logs:AssociateKmsKey logs:DisassociateKmsKey "
        "logs:TagResource logs:UntagResource logs:ListTagsForResource "
        "logs:GetDataProtectionPolicy logs:DeleteDataProtectionPolicy "
        "logs:PutLogGroupDeletionProtection",
        [
            "arn:{p}:logs" + _REGIONAL + "log-group:{prefix}-*",
            "arn:{p}:logs" + _REGIONAL + "log-group:/aws/sagemaker/Endpoints/{endpoint}",
            "arn:{p}:logs" + _REGIONAL + "log-group:/aws/sagemaker/Endpoints/{endpoint}:*",
            # the rollout state machine's (rollout_state_machine.py: /aws/vendedlogs/states/)
            "arn:{p}:logs" + _REGIONAL + _VENDED_STATES_LOGS,
            "arn:{p}:logs" + _REGIONAL + _VENDED_STATES_LOGS + ":*",
        ],
    ),
    _g(
        "LogsNoResourceType",
        "control",
        "logs:DescribeLogGroups logs:DescribeResourcePolicies logs:DescribeIndexPolicies",
        ["*"],
    ),
)

#: Statements whose resources are this account and region's, not the product's by name, and
#: why (module docstring, "Scope").
ACCOUNT_WIDE: dict[str, str] = {
    "ModelsAndEndpointConfigs": "a new model and endpoint config per deploy, named by "
    "CloudFormation from the logical id",
    "EndpointOnItsConfig": "the endpoint config is named by CloudFormation from the logical id",
    "ScalableTargets": "scalable-target ARNs carry an id Application Auto Scaling generates",
    "Dashboard": "the dashboard's name is generated from its logical id",
    "Keys": "KMS key ids are random",
    "StateMachines": "the smoke gate's waiter state machine is named from its logical id",
}


def _why(reason: str, actions: str) -> dict[str, str]:
    return dict.fromkeys(actions.split(), reason)


#: Handler permissions of the product's resource types that no grant gives, and why.
_UNUSED_FEATURE = "a feature no template uses"
NOT_GRANTED: dict[str, str] = {
    # Names the schemas list that are no IAM action (Service Authorization Reference): S3
    # authorizes each Delete*Configuration call with the matching Put* action.
    **_why(
        "not an IAM action; S3 authorizes it with the matching Put* action",
        "s3:DeleteBucketAnalyticsConfiguration s3:DeleteBucketCors "
        "s3:DeleteBucketEncryption s3:DeleteBucketLifecycle "
        "s3:DeleteBucketMetricsConfiguration s3:DeleteBucketReplication "
        "s3:PutBucketReplication s3:PutObjectLockConfiguration",
    ),
    "s3:REST.PUT.OBJECT": "not an IAM action (a log group's S3 export)",
    "lambda:AssociateRuntimeAlias": "not an IAM action",
    # S3 bucket features the artifact bucket does not use.
    **_why(
        f"{_UNUSED_FEATURE} (the artifact bucket: encryption, versioning, lifecycle, "
        "public access block, ownership, tags, policy)",
        "s3:CreateBucketMetadataTableConfiguration s3:DeleteBucketMetadataTableConfiguration "
        "s3:UpdateBucketMetadataAnnotationTableConfiguration "
        "s3:UpdateBucketMetadataInventoryTableConfiguration "
        "s3:UpdateBucketMetadataJournalTableConfiguration "
        "s3:PutAccelerateConfiguration "
        "s3:PutAnalyticsConfiguration s3:PutBucketAbac s3:PutBucketAcl s3:PutBucketCORS "
        "s3:PutBucketLogging s3:PutBucketNotification s3:PutBucketObjectLockConfiguration "
        "s3:PutBucketWebsite s3:DeleteBucketWebsite s3:PutIntelligentTieringConfiguration "
        "s3:PutInventoryConfiguration s3:PutMetricsConfiguration "
        "s3:PutReplicationConfiguration s3:PutObjectAcl s3:DeleteObject",
    ),
    **_why(
        f"{_UNUSED_FEATURE}: S3 table buckets",
        "s3tables:CreateNamespace s3tables:CreateTable s3tables:CreateTableBucket "
        "s3tables:GetTable s3tables:GetTableMetadataLocation s3tables:PutTableBucketPolicy "
        "s3tables:PutTableEncryption s3tables:PutTablePolicy "
        "s3tables:UpdateTableMetadataLocation",
    ),
    # DynamoDB: no global table, no import, no Kinesis stream, no resource policy.
    **_why(
        f"{_UNUSED_FEATURE} (the rollout table: no replicas, import, Kinesis stream or "
        "resource policy)",
        "dynamodb:AssociateTableReplica dynamodb:CreateTableReplica dynamodb:ImportTable "
        "dynamodb:DescribeImport dynamodb:EnableKinesisStreamingDestination "
        "dynamodb:DisableKinesisStreamingDestination "
        "dynamodb:UpdateKinesisStreamingDestination dynamodb:PutResourcePolicy "
        "dynamodb:DeleteResourcePolicy dynamodb:BatchWriteItem dynamodb:DeleteItem "
        "dynamodb:GetItem dynamodb:PutItem dynamodb:Query dynamodb:Scan "
        "dynamodb:UpdateItem kinesis:DescribeStream kinesis:PutRecords "
        "s3:GetObjectMetadata logs:CreateLogStream logs:DescribeLogStreams logs:PutLogEvents",
    ),
    # Lambda: no VPC, file system, layer, code signing or capacity provider.
    **_why(
        f"{_UNUSED_FEATURE} (the functions: no VPC, file system, layer, code signing or "
        "capacity provider)",
        "ec2:DescribeSecurityGroups ec2:DescribeSubnets ec2:DescribeVpcs "
        "ec2:DescribeNetworkInterfaces elasticfilesystem:DescribeMountTargets "
        "s3files:ListMountTargets lambda:GetLayerVersion lambda:GetCodeSigningConfig "
        "lambda:PutFunctionCodeSigningConfig lambda:DeleteFunctionCodeSigningConfig "
        "lambda:PassCapacityProvider lambda:PutFunctionScalingConfig",
    ),
    # Scalable targets of SageMaker variants only: no Lambda provisioned concurrency.
    **_why(
        f"{_UNUSED_FEATURE}: the scalable targets are SageMaker variants",
        "lambda:GetProvisionedConcurrencyConfig lambda:PutProvisionedConcurrencyConfig "
        "lambda:DeleteProvisionedConcurrencyConfig",
    ),
    # Log groups: no resource policy, delivery, index policy, data protection policy or
    # Firehose; those actions list no resource type, so granting them would be account-wide.
    **_why(
        f"{_UNUSED_FEATURE} (the log groups: retention, KMS key and tags only)",
        "logs:PutResourcePolicy logs:DeleteResourcePolicy logs:CreateLogDelivery "
        "logs:PutIndexPolicy logs:DeleteIndexPolicy logs:PutDataProtectionPolicy "
        "logs:PutBearerTokenAuthentication firehose:TagDeliveryStream",
    ),
    # IAM: inline policies on roles only, no permissions boundary.
    **_why(
        f"{_UNUSED_FEATURE}: policies attach to roles only",
        "iam:GetGroupPolicy iam:PutGroupPolicy iam:DeleteGroupPolicy iam:GetUserPolicy "
        "iam:PutUserPolicy iam:DeleteUserPolicy",
    ),
    **{
        a: f"{_UNUSED_FEATURE}: no role has a permissions boundary"
        for a in ("iam:PutRolePermissionsBoundary", "iam:DeleteRolePermissionsBoundary")
    },
}


def policy_documents(names: Names) -> dict[str, dict[str, Any]]:
    """``{part: policy document}`` with ``names`` filled in (one per execution policy)."""
    docs: dict[str, dict[str, Any]] = {}
    for part in EXECUTION_POLICY_PARTS:
        statements = []
        for g in GRANTS:
            if g.part != part:
                continue
            s: dict[str, Any] = {
                "Sid": g.sid,
                "Effect": "Allow",
                "Action": list(g.actions),
                "Resource": [names.arn(r) for r in g.resources],
            }
            if g.conditions:
                s["Condition"] = {
                    op: {k: ([names.arn(x) for x in v] if isinstance(v, list) else v)
                         for k, v in kv.items()}
                    for op, kv in g.conditions.items()
                }  # fmt: skip
            statements.append(s)
        docs[part] = {"Version": "2012-10-17", "Statement": statements}
    return docs


class ExecutionPolicies(Construct):
    """One customer-managed policy per part, named ``policy_names`` (in part order)."""

    def __init__(
        self, scope: Construct, construct_id: str, *, names: Names, policy_names: Sequence[str]
    ) -> None:
        super().__init__(scope, construct_id)
        self.policies: list[iam.ManagedPolicy] = []
        for part, name in zip(EXECUTION_POLICY_PARTS, policy_names, strict=True):
            document = iam.PolicyDocument.from_json(policy_documents(names)[part])
            policy = iam.ManagedPolicy(
                self,
                part.capitalize(),
                managed_policy_name=name,
                description=f"CloudFormation execution policy of {names.prefix} ({part}): "
                "cdk bootstrap --cloudformation-execution-policies",
                document=document,
            )
            self.policies.append(policy)
        NagSuppressions.add_resource_suppressions(
            self.policies,
            [
                NagPackSuppression(
                    id="AwsSolutions-IAM5",
                    reason="CloudFormation names what a template leaves unnamed "
                    "<stack name>-<logical id>-<random>, so the product's resources are "
                    "<project>-<env>-*; the few without such a name ("
                    + "; ".join(f"{sid}: {why}" for sid, why in ACCOUNT_WIDE.items())
                    + ") are this account and region's, and actions with no resource type "
                    "are on *",
                )
            ],
        )


def stack_names(stack: Stack, *, prefix: str, endpoint: str, repository: str, bucket: str,
                qualifier: str) -> Names:  # fmt: skip
    """:class:`Names` of ``stack``'s partition, region and account (tokens where unresolved)."""
    return Names(
        partition=stack.partition,
        region=stack.region,
        account=stack.account,
        prefix=prefix,
        endpoint=endpoint,
        repository=repository,
        bucket=bucket,
        qualifier=qualifier,
    )
