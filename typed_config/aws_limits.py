"""AWS's limits on the names the product generates: length, characters and reserved affixes, each
with the page that states it and, where botocore's service model carries it, the model's
``max``/``pattern`` of the API parameter (``botocore/data/<service>/<date>/service-2.json``, the
machine-readable copy the SDKs validate against; tests/infra/test_name_limits.py reads each one
back from the installed botocore, so a limit copied wrongly here fails there).

docs/limits.md ("Generated names") lists them with what the product does at each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class NameLimit:
    """What AWS accepts as one kind of name."""

    #: What the name names, as an error message says it ("S3 bucket name").
    what: str
    max_length: int
    #: The characters AWS accepts, matched against the whole name.
    pattern: str
    #: The page that states the limit.
    source: str
    min_length: int = 1
    #: ``(service, shape)`` in botocore's service model that carries the same limit, if any.
    botocore_shape: tuple[str, str] | None = None
    #: Reserved prefixes and suffixes (S3's), each refused.
    reserved_prefixes: tuple[str, ...] = ()
    reserved_suffixes: tuple[str, ...] = ()

    def problems(self, name: str) -> list[str]:
        """Each way ``name`` breaks this limit, as a phrase; empty when AWS accepts it."""
        found = []
        if not self.min_length <= len(name) <= self.max_length:
            found.append(f"{len(name)} characters, {self.min_length}-{self.max_length} allowed")
        return found + self.shape_problems(name)

    def shape_problems(self, name: str) -> list[str]:
        """Each way ``name``'s characters or affixes break this limit (its length aside)."""
        found = []
        if not re.fullmatch(self.pattern, name):
            found.append(f"not of the characters AWS allows ({self.pattern})")
        found += [
            f"starts with {p!r}, reserved" for p in self.reserved_prefixes if name.startswith(p)
        ]
        found += [f"ends with {s!r}, reserved" for s in self.reserved_suffixes if name.endswith(s)]
        return found


#: "General purpose bucket naming rules", Amazon S3 user guide
#: (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html): 3-63
#: characters; lowercase letters, numbers, dots and hyphens; begin and end with a letter or
#: number; no two adjacent periods; not an IP address; the reserved prefixes and suffixes below.
#: botocore's BucketName carries no length or pattern, so the page is the only source.
S3_BUCKET = NameLimit(
    "S3 bucket name",
    63,
    r"(?!\d+\.\d+\.\d+\.\d+$)[a-z0-9](?!.*\.\.)[a-z0-9.-]*[a-z0-9]",
    "https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html",
    min_length=3,
    reserved_prefixes=("xn--", "sthree-", "amzn-s3-demo-"),
    reserved_suffixes=("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"),
)
#: SageMaker API reference, CreateTrainingJob ``TrainingJobName``
#: (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateTrainingJob.html):
#: 1-63, ``^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}``; EndpointName and EndpointConfigName are the same.
#: The pattern here leaves the length to ``max_length`` (``*`` for ``{0,62}``), so a name too long
#: is reported as such.
SAGEMAKER_TRAINING_JOB = NameLimit(
    "SageMaker training job name",
    63,
    r"[a-zA-Z0-9](-*[a-zA-Z0-9])*",
    "https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateTrainingJob.html",
    botocore_shape=("sagemaker", "TrainingJobName"),
)
SAGEMAKER_ENDPOINT = NameLimit(
    "SageMaker endpoint name",
    63,
    r"[a-zA-Z0-9](-*[a-zA-Z0-9])*",
    "https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateEndpoint.html",
    botocore_shape=("sagemaker", "EndpointName"),
)
#: CreateInferenceComponent ``InferenceComponentName`` (SageMaker API reference,
#: https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateInferenceComponent.html):
#: "Maximum length of 63", pattern ``[a-zA-Z0-9]([\-a-zA-Z0-9]*[a-zA-Z0-9])?`` (issue 45).
SAGEMAKER_INFERENCE_COMPONENT = NameLimit(
    "SageMaker inference component name",
    63,
    r"[a-zA-Z0-9]([\-a-zA-Z0-9]*[a-zA-Z0-9])?",
    "https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_CreateInferenceComponent.html",
    botocore_shape=("sagemaker", "InferenceComponentName"),
)
#: CloudFormation API reference, CreateStack ``StackName``
#: (https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateStack.html): "A
#: stack name can contain only alphanumeric characters (case sensitive) and hyphens. It must
#: start with an alphabetical character and can't be longer than 128 characters." (botocore's
#: StackName shape carries neither.)
CLOUDFORMATION_STACK = NameLimit(
    "CloudFormation stack name",
    128,
    r"[a-zA-Z][-a-zA-Z0-9]*",
    "https://docs.aws.amazon.com/AWSCloudFormation/latest/APIReference/API_CreateStack.html",
)
#: IAM API reference, CreatePolicy ``PolicyName``
#: (https://docs.aws.amazon.com/IAM/latest/APIReference/API_CreatePolicy.html): 1-128,
#: ``[\w+=,.@-]+``.
IAM_MANAGED_POLICY = NameLimit(
    "IAM managed policy name",
    128,
    r"[\w+=,.@-]+",
    "https://docs.aws.amazon.com/IAM/latest/APIReference/API_CreatePolicy.html",
    botocore_shape=("iam", "policyNameType"),
)
#: Lambda API reference, CreateFunction ``FunctionName``
#: (https://docs.aws.amazon.com/lambda/latest/api/API_CreateFunction.html): "The length
#: constraint applies only to the full ARN. If you specify only the function name, it is limited
#: to 64 characters in length"; the name part of botocore's pattern is ``[a-zA-Z0-9-_]+``.
LAMBDA_FUNCTION = NameLimit(
    "Lambda function name",
    64,
    r"[a-zA-Z0-9_-]+",
    "https://docs.aws.amazon.com/lambda/latest/api/API_CreateFunction.html",
)
#: Step Functions API reference, CreateStateMachine ``name``
#: (https://docs.aws.amazon.com/step-functions/latest/apireference/API_CreateStateMachine.html):
#: 1-80 characters, no white space, brackets, wildcards or special characters, and "To enable
#: logging with CloudWatch Logs, the name should only contain 0-9, A-Z, a-z, - and _" (the
#: rollout state machine logs): that narrower set is the pattern here.
STEP_FUNCTIONS_STATE_MACHINE = NameLimit(
    "Step Functions state machine name",
    80,
    r"[0-9A-Za-z_-]+",
    "https://docs.aws.amazon.com/step-functions/latest/apireference/API_CreateStateMachine.html",
    botocore_shape=("stepfunctions", "Name"),
)
#: StartExecution ``name``
#: (https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html): the
#: same shape, 1-80, and the same narrower set "To enable logging with CloudWatch Logs".
STEP_FUNCTIONS_EXECUTION = NameLimit(
    "Step Functions execution name",
    80,
    r"[0-9A-Za-z_-]+",
    "https://docs.aws.amazon.com/step-functions/latest/apireference/API_StartExecution.html",
    botocore_shape=("stepfunctions", "Name"),
)
#: CloudWatch Logs API reference, CreateLogGroup ``logGroupName``
#: (https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_CreateLogGroup.html):
#: 1-512, ``[\.\-_/#A-Za-z0-9]+``.
LOG_GROUP = NameLimit(
    "CloudWatch Logs log group name",
    512,
    r"[\.\-_/#A-Za-z0-9]+",
    "https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_CreateLogGroup.html",
    botocore_shape=("logs", "LogGroupName"),
)
#: Application Auto Scaling API reference, PutScalingPolicy ``PolicyName``
#: (https://docs.aws.amazon.com/autoscaling/application/APIReference/API_PutScalingPolicy.html):
#: 1-256, ``\p{Print}+``.
SCALING_POLICY = NameLimit(
    "Application Auto Scaling policy name",
    256,
    r"[\x20-\x7e]+",
    "https://docs.aws.amazon.com/autoscaling/application/APIReference/API_PutScalingPolicy.html",
    botocore_shape=("application-autoscaling", "PolicyName"),
)
#: PutScheduledAction ``ScheduledActionName``
#: (https://docs.aws.amazon.com/autoscaling/application/APIReference/API_PutScheduledAction.html):
#: 1-256, no leading or trailing space, no control characters, no ``:``, ``/`` or ``|``.
SCHEDULED_ACTION = NameLimit(
    "Application Auto Scaling scheduled action name",
    256,
    r"(?!((^[ ]+.*)|(.*([\u0000-\u001f]|[\u007f-\u009f]|[:/|])+.*)|(.*[ ]+$))).+",
    "https://docs.aws.amazon.com/autoscaling/application/APIReference/API_PutScheduledAction.html",
    botocore_shape=("application-autoscaling", "ScheduledActionName"),
)
#: RegisterScalableTarget ``ResourceId``
#: (https://docs.aws.amazon.com/autoscaling/application/APIReference/API_RegisterScalableTarget.html):
#: 1-1600; for a SageMaker variant ``endpoint/<endpoint>/variant/<variant>``.
SCALABLE_TARGET_RESOURCE_ID = NameLimit(
    "Application Auto Scaling resource id",
    1600,
    r"[\x20-\x7e]+",
    "https://docs.aws.amazon.com/autoscaling/application/APIReference/API_RegisterScalableTarget.html",
    botocore_shape=("application-autoscaling", "ResourceIdMaxLen1600"),
)
#: Bedrock API reference, CreateModelImportJob
#: (https://docs.aws.amazon.com/bedrock/latest/APIReference/API_CreateModelImportJob.html):
#: ``jobName`` 1-63, ``[a-zA-Z0-9](-*[a-zA-Z0-9\+\-\.])*``; ``importedModelName`` 1-63,
#: ``([0-9a-zA-Z][_-]?)+``.
BEDROCK_IMPORT_JOB = NameLimit(
    "Bedrock model import job name",
    63,
    r"[a-zA-Z0-9](-*[a-zA-Z0-9\+\-\.])*",
    "https://docs.aws.amazon.com/bedrock/latest/APIReference/API_CreateModelImportJob.html",
    botocore_shape=("bedrock", "JobName"),
)
BEDROCK_IMPORTED_MODEL = NameLimit(
    "Bedrock imported model name",
    63,
    r"([0-9a-zA-Z][_-]?)+",
    "https://docs.aws.amazon.com/bedrock/latest/APIReference/API_CreateModelImportJob.html",
    botocore_shape=("bedrock", "ImportedModelName"),
)
#: ECR API reference, CreateRepository ``repositoryName``
#: (https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_CreateRepository.html):
#: 2-256, lowercase, ``[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(\/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*``.
ECR_REPOSITORY = NameLimit(
    "ECR repository name",
    256,
    r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(\/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*",
    "https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_CreateRepository.html",
    min_length=2,
    botocore_shape=("ecr", "RepositoryName"),
)

#: Every limit above, for the tests that read each back from botocore.
ALL_LIMITS: tuple[NameLimit, ...] = (
    S3_BUCKET,
    SAGEMAKER_TRAINING_JOB,
    SAGEMAKER_ENDPOINT,
    SAGEMAKER_INFERENCE_COMPONENT,
    CLOUDFORMATION_STACK,
    IAM_MANAGED_POLICY,
    LAMBDA_FUNCTION,
    STEP_FUNCTIONS_STATE_MACHINE,
    STEP_FUNCTIONS_EXECUTION,
    LOG_GROUP,
    SCALING_POLICY,
    SCHEDULED_ACTION,
    SCALABLE_TARGET_RESOURCE_ID,
    BEDROCK_IMPORT_JOB,
    BEDROCK_IMPORTED_MODEL,
    ECR_REPOSITORY,
)
