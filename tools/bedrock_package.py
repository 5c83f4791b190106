"""``make bedrock-package ENV=prod``: the config's model release as a Bedrock Custom Model Import
package, built from the release's own inputs and published beside it.

1. ``bedrock.enabled`` or nothing to do; the release inputs and their version (the same
   ``typed_config.release_inputs`` ``make prepare-model`` uses), a moving revision refused.
2. The release must be published (its manifest in the artifact bucket): the package is a second
   target of that release, not a model of its own. Already packaged? Say so and stop.
3. Where it is built (sizing/bedrock_package.py): here when this machine has the disk and memory
   the package needs, else a SageMaker training job on a CPU instance
   (:data:`~sizing.bedrock_package.CPU_JOB_INSTANCE`, a volume sized from the package), started
   and followed the way ``make prepare-model`` starts and follows its job
   (tools/prepare_model.py: the same image, role, release channel and watch), with the package
   build as its entry point. A job already building the version is followed, not repeated.
4. The build itself is container/model_prep/bedrock_package.py (here run with
   ``--package-python``, the serving venv: torch, safetensors, transformers), publishing under
   ``<artifact prefix>/bedrock-v1/<version>/`` with its manifest written last.

Prints the package's digest (the sha256 of its published manifest), which ``make bedrock-import``
imports by.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from container.model_prep import artifact, bedrock_rules
from container.model_prep.manifest import MANIFEST_NAME
from container.model_prep.release import ReleaseInputs
from sizing.bedrock_package import CPU_JOB_INSTANCE, package_need, placement
from tools import REPO_ROOT
from tools.aws_command import run_on_config
from tools.model_release import aws_account
from tools.prepare_model import PrepareError, create_job, follow, new_job
from typed_config import (
    DeploymentConfig,
    artifact_location_uri,
    bedrock_package_job_prefix,
    release_inputs,
)

WORKDIR = REPO_ROOT / "build" / "bedrock-package"
#: The package job: the preparation image's Python with this entry point (its PYTHONPATH holds
#: model_prep), working on the job's volume (not /opt/ml/model: SageMaker would upload it).
JOB_ENTRYPOINT = ["python3", "-m", "model_prep.bedrock_package"]
JOB_WORKDIR = "/opt/ml/input/bedrock-package"
PACKAGE_PYTHON = REPO_ROOT / ".venv-serving" / "bin" / "python"


class PackageRefused(PrepareError):
    """make bedrock-package cannot go on; the message says why and what to do."""


def package_location(releases_uri: str) -> artifact.ArtifactLocation:
    """Where the packages of the releases at ``releases_uri`` live."""
    releases = artifact.ArtifactLocation.parse(releases_uri)
    return artifact.ArtifactLocation(releases.bucket, bedrock_rules.package_prefix(releases.prefix))


def published_digest(s3: Any, where: artifact.ArtifactLocation, version: str) -> str | None:
    """The sha256 of the package's published manifest (its digest), or None when unpublished."""
    if artifact.read_manifest(s3, where, version) is None:
        return None
    body = s3.get_object(Bucket=where.bucket, Key=where.key(version, MANIFEST_NAME))["Body"].read()
    return hashlib.sha256(body).hexdigest()


def machine_memory_bytes() -> int:
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def package_job_prefix(cfg: DeploymentConfig, version: str) -> str:
    """``<project>-<env>-prep-bedrock-<hex>-`` (typed_config.derived, whose config rule keeps it
    within SageMaker's 63 characters)."""
    return bedrock_package_job_prefix(cfg, version)


def build_in_job(
    cfg: DeploymentConfig,
    session: Any,
    inputs: ReleaseInputs,
    releases_uri: str,
    volume_gb: int,
    *,
    sleep: Callable[[float], None] = time.sleep,
    poll_seconds: float = 30,
) -> int:
    """The package built by a SageMaker training job on :data:`CPU_JOB_INSTANCE`: the
    preparation job's image, role and release channel, this module's entry point
    (container/model_prep/bedrock_package.py), a volume of ``volume_gb``. A job already building
    this version is followed instead of starting a second one."""
    version = inputs.version
    releases = artifact.ArtifactLocation.parse(releases_uri)
    where = package_location(releases_uri)
    s3 = session.client("s3")
    sm = session.client("sagemaker", region_name=cfg.region)
    logs = session.client("logs", region_name=cfg.region)
    resume = f"make bedrock-package ENV={cfg.env}"
    prefix = package_job_prefix(cfg, version)
    # Every page, the status compared here (tools/prepare_model.py says why not StatusEquals).
    for page in sm.get_paginator("list_training_jobs").paginate(NameContains=prefix.rstrip("-")):
        for job in page.get("TrainingJobSummaries", []):
            running = job.get("TrainingJobStatus") == "InProgress"
            if running and str(job["TrainingJobName"]).startswith(prefix):
                name = str(job["TrainingJobName"])
                print(f"bedrock-package: {name} is already building {version}: following it")
                return follow(sm, logs, name, s3, where, version, resume=resume,
                              poll_seconds=poll_seconds, out=print, sleep=sleep)  # fmt: skip
    spec = new_job(
        cfg,
        session,
        aws_account(session),
        releases,
        releases_uri,
        inputs,
        prefix,
        instance_type=CPU_JOB_INSTANCE,
        volume_gb=volume_gb,
        entrypoint=JOB_ENTRYPOINT,
        environment={"BEDROCK_PACKAGE_WORKDIR": JOB_WORKDIR},
    )
    name = spec.name
    print(f"bedrock-package: {version} on {CPU_JOB_INSTANCE}, {volume_gb} GB volume "
          f"-> {where.uri(version)}/", flush=True)  # fmt: skip
    create_job(spec, session)
    return follow(sm, logs, name, s3, where, version, resume=resume, poll_seconds=poll_seconds,
                  out=print, sleep=sleep)  # fmt: skip


def run(
    cfg: DeploymentConfig,
    args: argparse.Namespace,
    session: Any = None,
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    if not cfg.bedrock.enabled:
        print(f"bedrock-package: bedrock.enabled is false in config/{cfg.env}.yaml: nothing to do")
        return 0
    inputs = release_inputs(cfg)
    problems = inputs.problems()
    if problems:
        raise PackageRefused("; ".join(problems))
    version = inputs.version
    if session is None:
        import boto3

        session = boto3.Session(region_name=cfg.region)
    releases_uri = artifact_location_uri(cfg, aws_account(session))
    s3 = session.client("s3", endpoint_url=args.endpoint_url or None)
    releases = artifact.ArtifactLocation.parse(releases_uri)
    if artifact.read_manifest(s3, releases, version) is None:
        raise PackageRefused(
            f"model release {version} is not published at {releases.uri(version)}/: run "
            f"make prepare-model ENV={cfg.env} first (the package is that release's)"
        )
    where = package_location(releases_uri)
    digest = published_digest(s3, where, version)
    if digest is not None:
        print(f"bedrock-package: {where.uri(version)}/ already published, digest {digest}")
        return 0
    WORKDIR.mkdir(parents=True, exist_ok=True)
    need = package_need(adapters=len(cfg.adapters))
    where_to = placement(
        need,
        prep_volume_gb=cfg.model_prep.volume_size_gb,
        free_disk_bytes=shutil.disk_usage(WORKDIR).free,
        memory_bytes=machine_memory_bytes(),
    )
    print(f"bedrock-package: {where_to.reason}", flush=True)
    if where_to.where != "here":
        code = build_in_job(cfg, session, inputs, releases_uri, need.volume_gb, sleep=sleep)
        if code != 0:
            raise PackageRefused(f"the package job did not publish {where.uri(version)}/")
        print(
            f"bedrock-package: {where.uri(version)}/ digest {published_digest(s3, where, version)}"
        )
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        inputs_file = Path(tmp) / "inputs.json"
        inputs_file.write_text(json.dumps(inputs.to_json()))
        cmd = [str(args.package_python), "-m", "container.model_prep.bedrock_package",
               "--inputs", str(inputs_file), "--publish", releases_uri,
               "--workdir", str(WORKDIR / version)]  # fmt: skip
        if args.endpoint_url:
            cmd += ["--endpoint-url", args.endpoint_url]
        if cfg.model_prep.hf_token_secret:
            cmd += ["--hf-token-secret", cfg.model_prep.hf_token_secret,
                    "--hf-token-file", str(Path(tmp) / "hf_token")]  # fmt: skip
        done = subprocess.run(cmd, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    if done.returncode != 0:
        raise PackageRefused(f"the package build exited {done.returncode} (its last line says why)")
    digest = published_digest(s3, where, version)
    print(f"bedrock-package: {where.uri(version)}/ digest {digest}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bedrock_package", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--env", required=True)
    p.add_argument("--endpoint-url", default="", help="another S3 API (tests)")
    p.add_argument("--package-python", type=Path, default=PACKAGE_PYTHON)
    args = p.parse_args(argv)
    return run_on_config(REPO_ROOT, args.env, lambda cfg: run(cfg, args), refused=PrepareError)


if __name__ == "__main__":
    sys.exit(main())
