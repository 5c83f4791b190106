"""``make prepare-model ENV=prod``: prepare the config's model release on a SageMaker GPU job.

1. The release inputs from config (spec.release_inputs) and their version; a moving
   revision is refused, and so is a caller without credentials, before anything else.
2. Already published (its manifest is in the artifact bucket)? Say so and stop: the same inputs
   are never prepared twice. A job already preparing this version (InProgress: a re-run while
   the first run's job goes on, or a watch that lost its credentials) is followed instead of
   starting a second one; one that Completed is read back (its manifest). Jobs are found by
   name (``<project>-<env>-prep-<version>-``) with ListTrainingJobs' NameContains, every page
   read and the status compared here: with StatusEquals and MaxResults together SageMaker
   filters only the first MaxResults jobs (SageMaker API reference, ListTrainingJobs).
3. The job image ``<serving repository>:model-prep-<digest>`` (container/Dockerfile.model-prep
   and container/model_prep: the code the tests run) must be in ECR: built and pushed here with
   docker when missing, or ``model_prep.job_image``.
4. A SageMaker training job, created through the SageMaker Python SDK (sagemaker-core's
   ``TrainingJob``): the ``release`` channel carries inputs.json, the job's role is the
   ModelReleaseStack's, instance type, volume, runtime and spot from ``model_prep:``.
5. Progress until it ends: status, secondary status (Starting, Downloading, Training, ...), the
   job's own phase (its last ``model-prep:`` line in CloudWatch Logs) and the time elapsed. On
   failure or stop: SageMaker's FailureReason and the job's last log lines, exit 1. On success:
   the published release's summary (quality gate, size), read back from S3.

Ctrl-C leaves the job running and says how to stop it. A watch whose credentials expire
(ExpiredTokenException: "The security token included in the request is expired", AWS common
errors) stops at once, saying the job runs on and that running the command again follows it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from container.model_prep import artifact
from container.model_prep.compile_cache_step import ENGINE_FILE
from container.model_prep.manifest import summary
from container.model_prep.release import ReleaseInputs
from sizing.fit_checks import load_config
from stacks.constructs.endpoint import container_environment
from stacks.constructs.image import JOB_IMAGE_TAG_PREFIX
from stacks.model_release_stack import PREP_ROLE_OUTPUT
from tools import REPO_ROOT
from tools.aws_command import error_code
from tools.model_release import aws_account
from typed_config import (
    ConfigError,
    DeploymentConfig,
    artifact_location_uri,
    config_path,
    preparation_job_version_prefix,
    release_inputs,
    release_stack_name,
)
from typed_config.generated_names import JOB_TIME_FORMAT, training_job_name

JOB_DOCKERFILE = REPO_ROOT / "container" / "Dockerfile.model-prep"
#: What the job image is built from: its Dockerfile, the quantization pins, the job's code and
#: the serving entrypoint it starts to make the compile cache.
JOB_IMAGE_INPUTS = (
    JOB_DOCKERFILE,
    REPO_ROOT / "container" / "requirements-quant.txt",
    REPO_ROOT / "container" / "model_prep",
    REPO_ROOT / "container" / "serving",
)
#: SageMaker training jobs log to this group, one stream per instance: <job>/algo-1-<epoch>
#: (SageMaker Developer Guide, "Log Amazon SageMaker AI events with Amazon CloudWatch").
TRAINING_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
TERMINAL = {"Completed", "Failed", "Stopped"}
#: Consecutive failed DescribeTrainingJob reads before the watch gives up (the job runs on).
STATUS_READ_ATTEMPTS = 10
#: The credentials are no longer valid: reading again cannot help (AWS common errors:
#: ExpiredTokenException, HTTP 403; STS and older query APIs spell it ExpiredToken).
EXPIRED_CREDENTIALS = {"ExpiredTokenException", "ExpiredToken"}
LAST_LOG_LINES = 30


class PrepareError(Exception):
    """make prepare-model cannot go on; the message says why and what to do."""


def job_image_tag() -> str:
    """``model-prep-<12 hex>``: a digest of everything the job image is built from."""
    h = hashlib.sha256()
    for root in JOB_IMAGE_INPUTS:
        paths = [root] if root.is_file() else sorted(root.rglob("*"))
        for p in paths:
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(REPO_ROOT)).encode() + b"\0" + p.read_bytes())
    return f"{JOB_IMAGE_TAG_PREFIX}{h.hexdigest()[:12]}"


def job_image_uri(cfg: DeploymentConfig, account: str) -> str:
    if cfg.model_prep.job_image:
        return cfg.model_prep.job_image
    if not cfg.image.repository_name:
        raise PrepareError(
            "model_prep.job_image: not set, and image.repository_name is not set either; name "
            "the serving repository (the job image is pushed there as model-prep-<digest>) or "
            "give model_prep.job_image"
        )
    registry = f"{account}.dkr.ecr.{cfg.region}.amazonaws.com"
    return f"{registry}/{cfg.image.repository_name}:{job_image_tag()}"


def image_present(ecr: Any, uri: str) -> bool:
    repo, _, tag = uri.split("/", 1)[1].rpartition(":")
    try:
        ecr.describe_images(repositoryName=repo, imageIds=[{"imageTag": tag}])
    except ClientError as exc:
        if error_code(exc) == "ImageNotFoundException":
            return False
        raise
    return True


def push_job_image(uri: str, ecr: Any, run: Callable[..., Any] = subprocess.run) -> None:
    """Build container/Dockerfile.model-prep and push it (docker; CI runners have it).

    ``--provenance=false``: with an attestation, BuildKit makes the tag an OCI image index, and
    SageMaker pulls Docker image manifest v2 schema 2 only (tools/push_image.py says where)."""
    token = ecr.get_authorization_token()["authorizationData"][0]
    registry = uri.split("/", 1)[0]
    import base64

    user, _, password = base64.b64decode(token["authorizationToken"]).decode().partition(":")
    print(f"prepare-model: building the job image {uri} ...", flush=True)
    run(["docker", "login", "--username", user, "--password-stdin", registry],
        input=password, text=True, check=True)  # fmt: skip
    run(["docker", "build", "--platform", "linux/amd64", "--provenance=false",
         "-f", str(JOB_DOCKERFILE), "-t", uri, str(JOB_DOCKERFILE.parent)], check=True)  # fmt: skip
    run(["docker", "push", uri], check=True)


def stack_output(cfn: Any, stack: str, key_suffix: str) -> str:
    """An output of a deployed stack (the job role ARN of ``<project>-<env>-model-release``)."""
    try:
        outputs = cfn.describe_stacks(StackName=stack)["Stacks"][0].get("Outputs", [])
    except Exception as exc:
        raise PrepareError(
            f"stack {stack} is not deployed ({exc}): `make deploy-model-release ENV=...` creates "
            "the artifact bucket and the job role"
        ) from exc
    for out in outputs:
        if out["OutputKey"].endswith(key_suffix):
            return str(out["OutputValue"])
    raise PrepareError(f"stack {stack} has no output ending in {key_suffix}")


@dataclass
class JobSpec:
    name: str
    image: str
    role_arn: str
    inputs_uri: str
    output_uri: str
    location: str
    cfg: DeploymentConfig
    #: Another job on the same image and inputs (the Bedrock package build,
    #: tools/bedrock_package.py): its instance, volume and entry point instead of model_prep's
    #: (and no spot: its runtime is model_prep's max_runtime_seconds).
    instance_type: str | None = None
    volume_gb: int | None = None
    entrypoint: list[str] | None = None
    environment: dict[str, str] | None = None


def engine_settings(cfg: DeploymentConfig) -> dict[str, str]:
    """The engine settings the job makes the release's compile cache with: the primary
    variant's container environment, as its SageMaker Model sets it (one definition:
    ``container_environment``); ``engine.json`` in the ``release`` channel."""
    return container_environment(cfg, "primary")


def new_job(
    cfg: DeploymentConfig,
    session: Any,
    account: str,
    where: artifact.ArtifactLocation,
    location: str,
    inputs: ReleaseInputs,
    name_prefix: str,
    **overrides: Any,
) -> JobSpec:
    """A job on the release inputs, ready to create: the job image in ECR (built and pushed when
    missing), the release stack's job role, a fresh name under ``name_prefix``, the inputs
    and the engine settings (:func:`engine_settings`) uploaded under ``<prefix>/jobs/<name>/input/``
    (the ``release`` channel). ``overrides``:
    JobSpec's fields for another job on the same image (tools/bedrock_package.py)."""
    image = job_image_uri(cfg, account)
    ecr = session.client("ecr")
    if not cfg.model_prep.job_image and not image_present(ecr, image):
        push_job_image(image, ecr)
    role = stack_output(session.client("cloudformation"), release_stack_name(cfg), PREP_ROLE_OUTPUT)
    name = training_job_name(name_prefix, time.strftime(JOB_TIME_FORMAT))
    if len(name) > 63:  # CreateTrainingJob: TrainingJobName is at most 63 characters
        raise PrepareError(
            f"project and env: the job name {name} is longer than SageMaker's 63 characters; "
            "shorten the project name"
        )
    jobs = f"{where.prefix}/jobs/{name}" if where.prefix else f"jobs/{name}"
    s3 = session.client("s3")
    s3.put_object(Bucket=where.bucket, Key=f"{jobs}/input/inputs.json",
                  Body=json.dumps(inputs.to_json(), indent=2).encode())  # fmt: skip
    s3.put_object(Bucket=where.bucket, Key=f"{jobs}/input/{ENGINE_FILE}",
                  Body=json.dumps(engine_settings(cfg), indent=2).encode())  # fmt: skip
    return JobSpec(
        name=name,
        image=image,
        role_arn=role,
        inputs_uri=f"s3://{where.bucket}/{jobs}/input/",
        output_uri=f"s3://{where.bucket}/{jobs}/output/",
        location=location,
        cfg=cfg,
        **overrides,
    )


def create_job(spec: JobSpec, session: Any) -> Any:
    """The training job, through the SageMaker Python SDK (sagemaker-core)."""
    from sagemaker.core.resources import TrainingJob
    from sagemaker.core.shapes import (
        AlgorithmSpecification,
        Channel,
        DataSource,
        OutputDataConfig,
        ResourceConfig,
        S3DataSource,
        StoppingCondition,
    )

    mp = spec.cfg.model_prep
    env = {"MODEL_ARTIFACT_LOCATION": spec.location, **(spec.environment or {})}
    if mp.hf_token_secret:
        env["HF_TOKEN_SECRET"] = mp.hf_token_secret
    stopping = StoppingCondition(max_runtime_in_seconds=mp.max_runtime_seconds)
    spot = mp.use_spot and spec.entrypoint is None
    if spot:
        stopping = StoppingCondition(
            max_runtime_in_seconds=mp.max_runtime_seconds,
            max_wait_time_in_seconds=mp.max_wait_seconds,
        )
    return TrainingJob.create(
        training_job_name=spec.name,
        role_arn=spec.role_arn,
        algorithm_specification=AlgorithmSpecification(
            training_image=spec.image,
            training_input_mode="File",
            **({"container_entrypoint": spec.entrypoint} if spec.entrypoint else {}),
        ),
        input_data_config=[
            Channel(
                channel_name="release",
                data_source=DataSource(
                    s3_data_source=S3DataSource(
                        s3_data_type="S3Prefix",
                        s3_uri=spec.inputs_uri,
                        s3_data_distribution_type="FullyReplicated",
                    )
                ),
            )
        ],
        output_data_config=OutputDataConfig(s3_output_path=spec.output_uri),
        resource_config=ResourceConfig(
            instance_type=spec.instance_type or mp.instance_type,
            instance_count=1,
            volume_size_in_gb=spec.volume_gb or mp.volume_size_gb,
        ),
        stopping_condition=stopping,
        enable_managed_spot_training=spot,
        environment=env,
        session=session,
        region=spec.cfg.region,
    )


def job_log_lines(logs: Any, job_name: str, limit: int = LAST_LOG_LINES) -> list[str]:
    """The job's last ``limit`` log lines (every instance stream of the job)."""
    try:
        events = logs.filter_log_events(
            logGroupName=TRAINING_LOG_GROUP, logStreamNamePrefix=f"{job_name}/"
        ).get("events", [])
    except ClientError as exc:  # no stream yet (the instance is starting), or no rights
        if error_code(exc) == "ResourceNotFoundException":
            return []
        return [f"(log lines unavailable: {error_code(exc)}: {exc})"]
    except BotoCoreError as exc:  # a connection error or timeout: the job goes on regardless
        return [f"(log lines unavailable: {type(exc).__name__}: {exc})"]
    return [str(e["message"]).rstrip() for e in events][-limit:]


def phase(lines: list[str]) -> str:
    """The job's own step: its last ``model-prep:`` or ``model-release:`` line."""
    for line in reversed(lines):
        for mark in ("model-prep:", "model-release:"):
            if mark in line:
                return line[line.index(mark) :][:120]
    return ""


def elapsed(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def existing_job(sm: Any, cfg: DeploymentConfig, version: str) -> dict[str, Any] | None:
    """The newest job preparing ``version`` that is InProgress, Stopping or Completed (a
    Failed or Stopped one left nothing to wait for), as ListTrainingJobs summarizes it."""
    prefix = preparation_job_version_prefix(cfg, version)
    found: list[dict[str, Any]] = []
    pages = sm.get_paginator("list_training_jobs").paginate(
        NameContains=prefix.rstrip("-"), SortBy="CreationTime", SortOrder="Descending"
    )
    for page in pages:
        for job in page.get("TrainingJobSummaries", []):
            if str(job["TrainingJobName"]).startswith(prefix) and job["TrainingJobStatus"] in (
                "InProgress", "Stopping", "Completed"):  # fmt: skip
                found.append(job)
    return max(found, key=lambda j: j["CreationTime"]) if found else None


def watch(
    describe: Callable[[], dict[str, Any]],
    logs: Any,
    job_name: str,
    *,
    resume: str = "make prepare-model",
    poll_seconds: float = 30,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    out: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Poll until the job ends, printing a line whenever status, secondary status or phase
    changes (and at least every 5 minutes). Returns the last DescribeTrainingJob answer."""
    started = clock()
    last: tuple[str, str, str] | None = None
    last_print = started
    failures = 0
    while True:
        try:
            d = describe()
        except (BotoCoreError, ClientError) as exc:
            # A dropped connection, a timeout or throttling says nothing about the job, which
            # runs on in SageMaker: read again, and give up (naming the job) only when reads
            # keep failing.
            failures += 1
            why = error_code(exc) if isinstance(exc, ClientError) else type(exc).__name__
            if why in EXPIRED_CREDENTIALS:
                raise PrepareError(
                    f"the AWS credentials expired while following {job_name} ({why}); the job "
                    f"keeps running in SageMaker. With fresh credentials, `{resume}` follows "
                    "the same job (it never starts a second one for this version); in CI, "
                    "re-run the failed job"
                ) from exc
            if failures >= STATUS_READ_ATTEMPTS:
                raise PrepareError(
                    f"{failures} reads of {job_name}'s status failed in a row (last: {why}); "
                    f"the job keeps running: aws sagemaker describe-training-job "
                    f"--training-job-name {job_name}"
                ) from exc
            out(f"prepare-model: could not read {job_name}'s status ({why}); reading again")
            sleep(poll_seconds)
            continue
        failures = 0
        status = str(d.get("TrainingJobStatus", "?"))
        secondary = str(d.get("SecondaryStatus", ""))
        step = phase(job_log_lines(logs, job_name, limit=50)) if status == "InProgress" else ""
        now = clock()
        if (status, secondary, step) != last or now - last_print >= 300:
            out(f"prepare-model: {job_name} {status}/{secondary} {elapsed(now - started)}"
                + (f"  {step}" if step else ""))  # fmt: skip
            last, last_print = (status, secondary, step), now
        if status in TERMINAL:
            return d
        sleep(poll_seconds)


def run(
    cfg: DeploymentConfig,
    session: Any,
    *,
    poll_seconds: float = 30,
    out: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    inputs = release_inputs(cfg)
    problems = inputs.problems()
    if problems:
        raise PrepareError("; ".join(problems))
    version = inputs.version
    account = aws_account(session)  # no credentials: named here, before any work
    location = artifact_location_uri(cfg, account)
    where = artifact.ArtifactLocation.parse(location)
    s3 = session.client("s3")
    published = artifact.read_manifest(s3, where, version)
    if published is not None:
        out(f"prepare-model: {where.uri(version)} already published: {summary(published)}")
        return 0
    sm = session.client("sagemaker", region_name=cfg.region)
    logs = session.client("logs", region_name=cfg.region)
    resume = f"make prepare-model ENV={cfg.env}"
    running = existing_job(sm, cfg, version)
    if running is not None:
        name, status = str(running["TrainingJobName"]), running["TrainingJobStatus"]
        if status == "Completed":
            return read_back(s3, where, version, name, out)
        created = f"{running['CreationTime']:%Y-%m-%d %H:%M:%S %Z}"
        out(f"prepare-model: {name} is already preparing {version} ({status}, created "
            f"{created}): following it, no second job")  # fmt: skip
        return follow(sm, logs, name, s3, where, version, resume=resume,
                      poll_seconds=poll_seconds, out=out, sleep=sleep)  # fmt: skip
    spec = new_job(
        cfg, session, account, where, location, inputs, preparation_job_version_prefix(cfg, version)
    )
    name = spec.name
    out(f"prepare-model: {version} on {cfg.model_prep.instance_type} "
        f"(max {elapsed(cfg.model_prep.max_runtime_seconds)}"
        f"{', spot' if cfg.model_prep.use_spot else ''}) -> {where.uri(version)}/")  # fmt: skip
    create_job(spec, session)
    return follow(sm, logs, name, s3, where, version, resume=resume, poll_seconds=poll_seconds,
                  out=out, sleep=sleep)  # fmt: skip


def follow(
    sm: Any,
    logs: Any,
    name: str,
    s3: Any,
    where: artifact.ArtifactLocation,
    version: str,
    *,
    resume: str,
    poll_seconds: float,
    out: Callable[[str], None],
    sleep: Callable[[float], None],
) -> int:
    """Watch ``name`` until it ends; its failure explained, or its release read back."""
    try:
        final = watch(lambda: sm.describe_training_job(TrainingJobName=name), logs, name,
                      resume=resume, poll_seconds=poll_seconds, out=out, sleep=sleep)  # fmt: skip
    except KeyboardInterrupt:
        out(f"prepare-model: {name} keeps running; stop it with "
            f"`aws sagemaker stop-training-job --training-job-name {name}`")  # fmt: skip
        return 130
    status = final.get("TrainingJobStatus")
    if status != "Completed":
        reason = final.get("FailureReason") or "no FailureReason given"
        out(f"prepare-model FAILED: {name} {status}: {reason}")
        out(f"last log lines of {name} ({TRAINING_LOG_GROUP}):")
        for line in job_log_lines(logs, name) or ["(none)"]:
            out(f"  {line}")
        return 1
    return read_back(s3, where, version, name, out)


def read_back(
    s3: Any, where: artifact.ArtifactLocation, version: str, name: str, out: Callable[[str], None]
) -> int:
    """A completed job's release, from its manifest."""
    published = artifact.read_manifest(s3, where, version)
    if published is None:
        out(f"prepare-model FAILED: {name} completed but {where.uri(version)} has no manifest")
        return 1
    out(f"prepare-model: published {summary(published)} (by {name})")
    return 0


def prepare(cfg: DeploymentConfig, session: Any, **kw: Any) -> int:
    """:func:`run`, every failure a ``prepare-model FAILED:`` line naming it and exit 1."""
    try:
        return run(cfg, session, **kw)
    except (PrepareError, artifact.ArtifactError, ValueError) as exc:
        print(f"prepare-model FAILED: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"prepare-model FAILED: {' '.join(exc.cmd[:2])} exited {exc.returncode}",
              file=sys.stderr)  # fmt: skip
        return 1
    except ClientError as exc:  # AccessDenied, ResourceLimitExceeded (the training quota), ...
        print(f"prepare-model FAILED: {error_code(exc)}: {exc}", file=sys.stderr)
        return 1
    except BotoCoreError as exc:  # EndpointConnectionError, a read timeout, NoCredentialsError
        print(f"prepare-model FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.prepare_model", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--env", required=True)
    p.add_argument("--poll-seconds", type=float, default=30)
    args = p.parse_args(argv)
    try:
        cfg = load_config(config_path(REPO_ROOT, args.env), env=args.env)
    except ConfigError as exc:
        print(f"prepare-model FAILED: {exc}", file=sys.stderr)
        return 1
    import boto3

    return prepare(cfg, boto3.Session(region_name=cfg.region), poll_seconds=args.poll_seconds)


if __name__ == "__main__":
    sys.exit(main())
