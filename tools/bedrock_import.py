"""``make bedrock-import ENV=prod``: import the release's Bedrock package models the config names,
follow each import to its end, record the imported model against the release version, smoke-check
it, then delete this environment's imports the config no longer names.

The import has no CloudFormation resource (Custom Model Import does not support CloudFormation:
https://docs.aws.amazon.com/bedrock/latest/userguide/model-customization-import-model.html), so
this tool is idempotent itself, by the package's digest (the sha256 of its published manifest,
tools/bedrock_package.py):

1. The package of the config's release version must be published (else: run make
   bedrock-package), and every model to import passes bedrock_rules.manifest_problems.
2. Per model in ``bedrock.models``: the imported model is named
   ``<project>-<env>-<model>-<digest 12 hex>`` (:func:`imported_model_name`). GetImportedModel on
   that name: found means this digest is imported already, no second import. Else a job of that
   name already running (ListModelImportJobs nameContains, every page; InProgress) is followed
   instead of starting another; else CreateModelImportJob, with the ModelReleaseStack's import
   role (its output ``BedrockImportRoleArn``), the model's S3 prefix in the package, and tags
   naming the release version and the digest on the job and on the model.
3. GetModelImportJob until Completed or Failed (a line per status change and one a minute while
   it runs, with the time elapsed); Failed: its failureMessage, and nothing after it runs.
4. The imported model recorded against the release: ``<package prefix>/<version>/imports/
   <model>.json`` (its ARN, the job, the digest, Custom Model Units per copy).
5. A smoke invocation through InvokeModel with the OpenAI chat-completion body that imported
   models accept (models imported after 2025-11-11: seeds 002 section 12, Bedrock User Guide
   "Invoke your imported model"), checked by the SageMaker smoke gate's own answer check
   (lambdas/smoke_gate/checks.check_answer: JSON, choices, non-empty text). A cold model answers
   ModelNotReadyException while Bedrock restores it ("the model is not ready for inference. Wait
   and try your request again": AWS re:Post, "ModelNotReadyException" with imported models); the
   smoke retries that, and only that, until ``bedrock.import_timeout_seconds``.
6. Only when every named model passed: each imported model of this environment
   (``<project>-<env>-`` names) that is not one of them is deleted (DeleteImportedModel).

An AWS call refused for permissions names the IAM action it needed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from clients.bedrock_fallback import record_name
from container.model_prep import artifact, bedrock_rules
from container.model_prep.manifest import MANIFEST_NAME
from lambdas.smoke_gate.checks import chat_body, check_answer
from stacks.model_release_stack import BEDROCK_IMPORT_ROLE_OUTPUT
from tools import REPO_ROOT
from tools.aws_command import client, error_code, run_on_config
from tools.bedrock_package import package_location
from typed_config import (
    DeploymentConfig,
    artifact_location_uri,
    release_inputs,
    release_stack_name,
)
from typed_config import generated_names as gn

#: How often a running import job is read.
POLL_SECONDS = 30
#: A progress line at least this often while the job runs.
HEARTBEAT_SECONDS = 60
#: Imported model and job names: 1-63 characters; model names ``([0-9a-zA-Z][_-]?)+``, job
#: names ``[a-zA-Z0-9](-*[a-zA-Z0-9\+\-\.])*`` (Bedrock API reference, CreateModelImportJob):
#: both hold hyphen-separated runs of letters and digits (typed_config/generated_names.py).
NAME_LIMIT = 63
DIGEST_CHARS = gn.BEDROCK_DIGEST_CHARS
#: Tag keys on the import job and the imported model.
TAG_RELEASE, TAG_DIGEST, TAG_MODEL = "model-release", "bedrock-package-digest", "package-model"


class ImportRefused(Exception):
    """make bedrock-import cannot go on; the message says why and what to do."""


def environment_prefix(cfg: DeploymentConfig) -> str:
    """What every imported model of this environment is named with."""
    return gn.bedrock_model_prefix(cfg.project, cfg.env)


def imported_model_name(cfg: DeploymentConfig, model: str, digest: str) -> str:
    """``<project>-<env>-<model>-<12 hex of the digest>`` (typed_config.generated_names, whose
    config rule refuses two models that would share one)."""
    return gn.imported_model_name(cfg.project, cfg.env, model, digest)


def job_name(model_name: str, now: float) -> str:
    """The import job's name: the model's, and the UTC time (a failed job's name is not reused)."""
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(now))
    return f"{model_name[: NAME_LIMIT - len(stamp) - 1]}-{stamp}"


@dataclass(frozen=True)
class Package:
    version: str
    digest: str
    manifest: dict[str, Any]
    where: artifact.ArtifactLocation

    def model_uri(self, model: str) -> str:
        upload = str(self.manifest["upload"])
        rel = self.manifest["models"][model]["path"]
        return f"{self.where.uri(self.version, upload)}/{rel}/"


class Aws:
    """The calls this tool makes, each refused for permissions named with its IAM action."""

    def __init__(self, clients: Mapping[str, Any], region: str) -> None:
        self.bedrock = client(clients, "bedrock", region)
        self.runtime = client(clients, "bedrock-runtime", region)
        self.s3 = client(clients, "s3", region)
        self.cfn = client(clients, "cloudformation", region)
        self.sts = client(clients, "sts", region)

    @staticmethod
    def call(service: Any, operation: str, **kwargs: Any) -> Any:
        try:
            return getattr(service, operation)(**kwargs)
        except ClientError as exc:
            if error_code(exc) in {"AccessDeniedException", "AccessDenied"}:
                action = service.meta.service_model.operation_model(
                    "".join(p.title() for p in operation.split("_"))
                ).name
                prefix = service.meta.service_model.signing_name
                raise ImportRefused(
                    f"{prefix}:{action} was refused (AccessDenied): the caller's role needs it "
                    f"({exc.response.get('Error', {}).get('Message', '')})"
                ) from exc
            raise


def read_package(aws: Aws, cfg: DeploymentConfig, account: str) -> Package:
    version = release_inputs(cfg).version
    where = package_location(artifact_location_uri(cfg, account))
    manifest = artifact.read_manifest(aws.s3, where, version)
    if manifest is None:
        raise ImportRefused(
            f"the Bedrock package of release {version} is not published at {where.uri(version)}/: "
            f"run make bedrock-package ENV={cfg.env} first"
        )
    raw = aws.s3.get_object(Bucket=where.bucket, Key=where.key(version, MANIFEST_NAME))["Body"]
    digest = hashlib.sha256(raw.read()).hexdigest()
    problems = [p for m in cfg.bedrock.models for p in bedrock_rules.manifest_problems(manifest, m)]
    if problems:
        raise ImportRefused(
            f"package {where.uri(version)}/ cannot be imported: " + "; ".join(problems)
        )
    return Package(version, digest, manifest, where)


def import_role_arn(aws: Aws, cfg: DeploymentConfig) -> str:
    stack = release_stack_name(cfg)
    try:
        described = Aws.call(aws.cfn, "describe_stacks", StackName=stack)
    except ClientError as exc:
        raise ImportRefused(
            f"{stack}: {error_code(exc)}: deploy it first (make deploy-model-release ENV={cfg.env})"
        ) from exc
    for output in described["Stacks"][0].get("Outputs", []):
        if output["OutputKey"] == BEDROCK_IMPORT_ROLE_OUTPUT:
            return str(output["OutputValue"])
    raise ImportRefused(
        f"{stack} has no {BEDROCK_IMPORT_ROLE_OUTPUT} output: deploy it with bedrock.enabled "
        f"(make deploy-model-release ENV={cfg.env})"
    )


def existing_model(aws: Aws, name: str) -> dict[str, Any] | None:
    try:
        return dict(Aws.call(aws.bedrock, "get_imported_model", modelIdentifier=name))
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return None
        raise


def running_job(aws: Aws, name: str) -> str | None:
    """The ARN of an import job for ``name`` still InProgress (a re-run, a second terminal)."""
    token: str | None = None
    while True:
        page = Aws.call(
            aws.bedrock,
            "list_model_import_jobs",
            nameContains=name,
            **({"nextToken": token} if token else {}),
        )
        for job in page.get("modelImportJobSummaries", []):
            if job.get("status") == "InProgress" and job.get("importedModelName") == name:
                return str(job["jobArn"])
        token = page.get("nextToken")
        if not token:
            return None


def follow(
    aws: Aws,
    job_arn: str,
    model: str,
    *,
    timeout: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> str:
    """Read the job until it ends; returns the imported model's ARN, or raises naming why."""
    started = clock()
    last_status, last_line = "", started
    while True:
        job = Aws.call(aws.bedrock, "get_model_import_job", jobIdentifier=job_arn)
        status = job["status"]
        elapsed = clock() - started
        if status != last_status or clock() - last_line >= HEARTBEAT_SECONDS:
            print(f"bedrock-import: {model}: {job.get('jobName', job_arn)} {status} "
                  f"({elapsed:.0f} s)", flush=True)  # fmt: skip
            last_status, last_line = status, clock()
        if status == "Completed":
            return str(job["importedModelArn"])
        if status == "Failed":
            raise ImportRefused(
                f"{model}: import job {job.get('jobName', job_arn)} failed: "
                f"{job.get('failureMessage', 'no failure message')}"
            )
        if elapsed >= timeout:
            raise ImportRefused(
                f"{model}: import job {job_arn} still {status} after {timeout:.0f} s "
                "(bedrock.import_timeout_seconds): it runs on; run make bedrock-import again to "
                "follow it"
            )
        sleep(POLL_SECONDS)


def smoke(
    aws: Aws,
    cfg: DeploymentConfig,
    model_arn: str,
    model: str,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    """One chat completion through InvokeModel, checked as the SageMaker smoke gate checks an
    answer; ModelNotReadyException (a cold copy being restored) is waited out, nothing else."""
    body = chat_body(cfg.smoke_gate.prompt, None, cfg.smoke_gate.max_tokens, stream=False)
    deadline = clock() + cfg.bedrock.import_timeout_seconds
    while True:
        try:
            answer = Aws.call(
                aws.runtime,
                "invoke_model",
                modelId=model_arn,
                body=body,
                contentType="application/json",
                accept="application/json",
            )
            break
        except ClientError as exc:
            if error_code(exc) != "ModelNotReadyException" or clock() >= deadline:
                message = exc.response.get("Error", {}).get("Message", "")
                raise ImportRefused(
                    f"{model}: smoke invocation failed: {error_code(exc)}: {message}"
                ) from exc
            print(f"bedrock-import: {model}: not ready yet (cold start), retrying", flush=True)
            sleep(POLL_SECONDS)
    problem = check_answer(answer["body"].read(), None)
    if problem:
        raise ImportRefused(f"{model}: smoke invocation answered, but {problem}")
    print(f"bedrock-import: {model}: smoke invocation answered", flush=True)


def record(s3: Any, package: Package, model: str, facts: dict[str, Any]) -> str:
    """The imported model, recorded against the release version, beside its package."""
    key = package.where.key(package.version, record_name(model))
    s3.put_object(
        Bucket=package.where.bucket,
        Key=key,
        Body=json.dumps(facts, indent=2, sort_keys=True, default=str).encode(),
        ContentType="application/json",
    )
    return f"s3://{package.where.bucket}/{key}"


def import_model(
    aws: Aws,
    cfg: DeploymentConfig,
    package: Package,
    model: str,
    role_arn: str,
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> str:
    """One model imported (or found imported) for this digest; returns its ARN."""
    name = imported_model_name(cfg, model, package.digest)
    found = existing_model(aws, name)
    if found is not None:
        print(f"bedrock-import: {model}: {name} already imported for digest "
              f"{package.digest[:DIGEST_CHARS]}: no second import", flush=True)  # fmt: skip
        return str(found["modelArn"])
    job_arn = running_job(aws, name)
    if job_arn is not None:
        print(f"bedrock-import: {model}: an import of {name} is running: following it", flush=True)
    else:
        tags = [
            {"key": TAG_RELEASE, "value": package.version},
            {"key": TAG_DIGEST, "value": package.digest},
            {"key": TAG_MODEL, "value": model},
        ]
        job_arn = Aws.call(
            aws.bedrock,
            "create_model_import_job",
            jobName=job_name(name, time.time()),
            importedModelName=name,
            roleArn=role_arn,
            modelDataSource={"s3DataSource": {"s3Uri": package.model_uri(model)}},
            jobTags=tags,
            importedModelTags=tags,
        )["jobArn"]
        print(f"bedrock-import: {model}: import job {job_arn} for {package.model_uri(model)}",
              flush=True)  # fmt: skip
    arn = follow(aws, job_arn, model, timeout=cfg.bedrock.import_timeout_seconds, clock=clock,
                 sleep=sleep)  # fmt: skip
    imported = Aws.call(aws.bedrock, "get_imported_model", modelIdentifier=arn)
    units = imported.get("customModelUnits", {})
    where = record(
        aws.s3,
        package,
        model,
        {
            "model": model,
            "imported_model_arn": arn,
            "imported_model_name": name,
            "job_arn": job_arn,
            "release_version": package.version,
            "package_digest": package.digest,
            "custom_model_units_per_copy": units.get("customModelUnitsPerModelCopy"),
            "custom_model_units_version": units.get("customModelUnitsVersion"),
        },
    )
    print(f"bedrock-import: {model}: {arn} recorded at {where} "
          f"({units.get('customModelUnitsPerModelCopy')} CMU per copy)", flush=True)  # fmt: skip
    return arn


def cleanup(aws: Aws, cfg: DeploymentConfig, keep: set[str]) -> list[str]:
    """Delete this environment's imported models that are not in ``keep`` (names)."""
    prefix = environment_prefix(cfg)
    stale: list[tuple[str, str]] = []
    token: str | None = None
    while True:
        page = Aws.call(
            aws.bedrock,
            "list_imported_models",
            nameContains=prefix,
            **({"nextToken": token} if token else {}),
        )
        stale += [
            (m["modelName"], m["modelArn"])
            for m in page.get("modelSummaries", [])
            if m["modelName"].startswith(prefix) and m["modelName"] not in keep
        ]
        token = page.get("nextToken")
        if not token:
            break
    for name, arn in stale:
        Aws.call(aws.bedrock, "delete_imported_model", modelIdentifier=arn)
        print(f"bedrock-import: deleted {name} (no longer named by config/{cfg.env}.yaml)")
    return [name for name, _ in stale]


def run(
    cfg: DeploymentConfig,
    clients: Mapping[str, Any] | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    if not cfg.bedrock.enabled:
        print(f"bedrock-import: bedrock.enabled is false in config/{cfg.env}.yaml: nothing to do")
        return 0
    aws = Aws(clients or {}, cfg.region)
    account = str(Aws.call(aws.sts, "get_caller_identity")["Account"])
    package = read_package(aws, cfg, account)
    print(f"bedrock-import: release {package.version}, package digest {package.digest}", flush=True)
    role_arn = import_role_arn(aws, cfg)
    for model in cfg.bedrock.models:
        arn = import_model(aws, cfg, package, model, role_arn, clock=clock, sleep=sleep)
        smoke(aws, cfg, arn, model, clock=clock, sleep=sleep)
    cleanup(aws, cfg, {imported_model_name(cfg, m, package.digest) for m in cfg.bedrock.models})
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bedrock_import", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--env", required=True)
    args = p.parse_args(argv)
    return run_on_config(REPO_ROOT, args.env, run, refused=ImportRefused)


if __name__ == "__main__":
    sys.exit(main())
