"""What the roles AWS services assume for the product do, as calls of the role's own.

The preparation job and the packaging job (SageMaker training jobs under the preparation job's
role, started by tools/prepare_model.py and tools/bedrock_package.py) run
container/model_prep/ in another process and machine, so their calls are not recorded: they are
listed here from the code (:data:`JOB_CODE_CALLS`, each with where it is made; a test scans the
code's boto3 method calls and fails when the two differ) and from what SageMaker does with the
job's role (:data:`SAGEMAKER_WITH_THE_ROLE`). The resources come from the CreateTrainingJob
request the tool made (recorded): its input channel, output path, environment and image, the
contract between the tool and the job. The Bedrock import role's reads come from the
CreateModelImportJob request that passes it (tools/bedrock_import.py, recorded).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .recorder import Call

#: ``(operation, what it names, where)``: every AWS call container/model_prep/ makes in a job.
#: ``release``: ``MODEL_ARTIFACT_LOCATION``/``<version>/...`` (a file), ``manifest``: its
#: manifest, ``secret``: ``HF_TOKEN_SECRET``. Sources in S3 (``s3://`` model sources,
#: sources.fetch_s3) are read from the buckets the config names; prod and dev name none.
JOB_CODE_CALLS: tuple[tuple[str, str, str], ...] = (
    ("s3:GetObject", "manifest", "artifact.read_manifest (is the version published?)"),
    ("s3:PutObject", "manifest", "artifact.write_manifest_once (If-None-Match: *)"),
    ("s3:PutObject", "release", "artifact.publish (upload_file of each file)"),
    ("s3:CreateMultipartUpload", "release", "artifact.publish (upload_file, a large file)"),
    ("s3:UploadPart", "release", "artifact.publish (upload_file, a large file)"),
    ("s3:CompleteMultipartUpload", "release", "artifact.publish (upload_file, a large file)"),
    ("s3:AbortMultipartUpload", "release", "artifact.publish (upload_file, a failed part)"),
    ("s3:ListObjectsV2", "release", "artifact.fetch (bedrock_package reads the release)"),
    ("s3:GetObject", "release", "artifact.fetch (download_file of each file)"),
    ("secretsmanager:GetSecretValue", "secret", "job.hf_token_from_secret"),
)
#: The boto3 client methods behind :data:`JOB_CODE_CALLS` (S3's managed transfers included).
JOB_CODE_METHODS = frozenset(
    {"get_object", "put_object", "upload_file", "download_file", "list_objects_v2",
     "get_secret_value"}
)  # fmt: skip
#: What SageMaker does with the job's role: "CreateTrainingJob API: Execution Role Permissions"
#: (SageMaker Developer Guide, https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-roles.html):
#: the input channel read (ListBucket, GetObject), the output written (PutObject), the image
#: pulled from ECR, the job's logs and metrics.
SAGEMAKER_WITH_THE_ROLE: tuple[tuple[str, str], ...] = (
    ("s3:ListObjectsV2", "input"),
    ("s3:GetObject", "input"),
    ("s3:PutObject", "output"),
    ("ecr:GetAuthorizationToken", "registry"),
    ("ecr:BatchCheckLayerAvailability", "image"),
    ("ecr:GetDownloadUrlForLayer", "image"),
    ("ecr:BatchGetImage", "image"),
    ("logs:CreateLogStream", "logs"),
    ("logs:PutLogEvents", "logs"),
    ("logs:DescribeLogStreams", "logs"),
    ("cloudwatch:PutMetricData", "metrics"),
)
TRAINING_LOG_GROUP = "/aws/sagemaker/TrainingJobs"


def _s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def job_calls(principal: str, create: Call) -> Iterator[Call]:
    """The calls a training job started by ``create`` (a recorded CreateTrainingJob) makes
    with its role, as :class:`Call` s of ``principal``."""
    p = create.parameters
    env = p.get("Environment", {})
    job = p["TrainingJobName"]
    bucket, prefix = _s3(env["MODEL_ARTIFACT_LOCATION"])
    version = "m-0123456789abcdef"
    where = {
        "manifest": {"Bucket": bucket, "Key": f"{prefix}/{version}/manifest.json"},
        "release": {"Bucket": bucket, "Key": f"{prefix}/{version}/u-0123456789ab/base/config.json"},
    }
    listing = {"Bucket": bucket, "Prefix": f"{prefix}/{version}/u-0123456789ab/"}
    inputs = [c["DataSource"]["S3DataSource"]["S3Uri"] for c in p.get("InputDataConfig", [])]
    output_bucket, output_key = _s3(p["OutputDataConfig"]["S3OutputPath"])
    image = p["AlgorithmSpecification"]["TrainingImage"]
    repository = image.split("/", 1)[1].rsplit(":", 1)[0]
    for operation, names, _ in JOB_CODE_CALLS:
        if names == "secret":
            if env.get("HF_TOKEN_SECRET"):
                yield _call(principal, operation, {"SecretId": env["HF_TOKEN_SECRET"]})
        elif operation == "s3:ListObjectsV2":
            yield _call(principal, operation, listing)
        elif operation == "s3:PutObject" and names == "manifest":  # IfNoneMatch="*"
            yield _call(principal, operation, {**where[names], "IfNoneMatch": "*"})
        else:
            yield _call(principal, operation, where[names])
    for operation, names in SAGEMAKER_WITH_THE_ROLE:
        if names == "input":
            for uri in inputs:
                b, k = _s3(uri)
                params = {"Bucket": b, "Prefix": k} if "List" in operation else {
                    "Bucket": b, "Key": f"{k}inputs.json"}  # fmt: skip
                yield _call(principal, operation, params)
        elif names == "output":
            key = f"{output_key}{job}/output/model.tar.gz"
            yield _call(principal, operation, {"Bucket": output_bucket, "Key": key})
        elif names == "registry":
            yield _call(principal, operation, {})
        elif names == "image":
            yield _call(principal, operation, {"repositoryName": repository})
        elif names == "logs":
            stream = f"{job}/algo-1-1764000000"
            yield _call(principal, operation,
                        {"logGroupName": TRAINING_LOG_GROUP, "logStreamName": stream})  # fmt: skip
        else:
            yield _call(principal, operation, {"Namespace": TRAINING_LOG_GROUP})


def import_role_calls(principal: str, create: Call) -> Iterator[Call]:
    """What Bedrock reads with the import role for ``create`` (a recorded CreateModelImportJob):
    the model's files under its S3 prefix, listed then read ("Create a service role for
    importing pre-trained models", Bedrock User Guide: s3:GetObject and s3:ListBucket)."""
    uri = create.parameters["modelDataSource"]["s3DataSource"]["s3Uri"]
    bucket, key = _s3(uri)
    yield _call(principal, "s3:ListObjectsV2", {"Bucket": bucket, "Prefix": key})
    yield _call(principal, "s3:GetObject", {"Bucket": bucket, "Key": f"{key}config.json"})


def _call(principal: str, operation: str, params: dict[str, Any]) -> Call:
    return Call(principal, operation, json.dumps(params, sort_keys=True))
