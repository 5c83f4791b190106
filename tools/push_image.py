"""``make push-image ENV=... TAG=...``: build the serving image once, push ``<repository>:<TAG>``.

What CI's release runs between the model release and ``make deploy IMAGE_TAG=<TAG>``
(.github/workflows/release.yml); the same command works from a workstation with docker buildx.

1. The repository (``image.repository_name``) must exist: ``make deploy-repository`` creates it
   (the image stack alone). A missing one is refused before anything is built.
2. A tag already in the repository is not built again: the repository refuses tag overwrites, and
   a re-run of a release job must not fail on the push it already did. Its manifest type is still
   checked (3).
3. The build: ``docker buildx build --push`` of ``container/`` with the config's build args and its
   verified model release as the ``model-artifact`` context (``make fetch-model`` wrote the ref
   file), and a registry cache in the same repository (``<repository>:buildcache``, the one tag
   the repository lets change: stacks/constructs/image.py).
   - SageMaker's CreateModel accepts Docker image manifest v2 schema 2 only: an OCI manifest or an
     OCI image index (what buildx pushes by default since 0.10, with its provenance attestation)
     is refused with "Unsupported manifest media type" (aws/amazon-sagemaker-feedback#180;
     moby/buildkit#5480). So the image goes out with ``--provenance=false --sbom=false`` and
     ``oci-mediatypes=false``, and the pushed manifest's media type is read back and checked.
   - The cache is an OCI artifact (``image-manifest=true,oci-mediatypes=true``: how ECR stores
     BuildKit caches, "Announcing remote cache support in Amazon ECR for BuildKit clients",
     AWS Containers blog); it is never deployed.
4. ECR login with a token from GetAuthorizationToken, handed to ``docker login --password-stdin``
   (never on a command line).

``--dry-run`` prints the commands (the password as ``***``) and pushes nothing.
"""

from __future__ import annotations

import argparse
import base64
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError
from pydantic import ValidationError

from stacks.constructs.image import BUILD_CACHE_TAG, CONTAINER_DIR, MODEL_CONTEXT, image_build_args
from tools import REPO_ROOT
from tools.aws_command import client, error_code, run_on_config
from typed_config import ConfigError, DeploymentConfig, ImageConfig

#: What SageMaker runs (CreateModel); the only manifest type this tool pushes or accepts.
DOCKER_MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
#: The instances SageMaker serves the GPU image on.
PLATFORM = "linux/amd64"

Runner = Callable[[Sequence[str], str | None], int]


class PushRefused(RuntimeError):
    """The push cannot go ahead; the message says what to do."""


def read_ref(path: Path) -> tuple[str, Path]:
    """``<version> <directory>`` written by ``make fetch-model`` (tools/model_release.py)."""
    try:
        version, directory = path.read_text().split()
    except (OSError, ValueError) as exc:
        raise PushRefused(
            f"no verified model release at {path}: run make fetch-model first ({exc})"
        ) from exc
    return version, Path(directory)


def checked_tag(tag: str) -> str:
    """The tag, validated by the same rule as ``image.tag`` in the config."""
    try:
        ImageConfig(mode="tag", tag=tag)
    except ValidationError as exc:
        why = exc.errors()[0]["msg"]
        raise ConfigError(f"TAG: {tag!r} is not a valid image tag ({why})") from None
    return tag


def repository_uri(ecr: Any, cfg: DeploymentConfig) -> str:
    name = cfg.image.repository_name
    if not name:
        raise ConfigError(
            "image.repository_name: not set in config/"
            f"{cfg.env}.yaml; CI pushes to a named repository"
        )
    try:
        repos = ecr.describe_repositories(repositoryNames=[name])["repositories"]
    except ClientError as exc:
        if error_code(exc) == "RepositoryNotFoundException":
            raise PushRefused(
                f"ECR repository {name} does not exist in {cfg.region}: create it with "
                f"make deploy-repository ENV={cfg.env} IMAGE_TAG=<tag>; nothing was built"
            ) from exc
        raise
    return str(repos[0]["repositoryUri"])


def pushed_media_type(ecr: Any, cfg: DeploymentConfig, tag: str) -> str | None:
    """The manifest media type of ``<repository>:<tag>``, or None when the tag is not there."""
    answer = ecr.batch_get_image(
        repositoryName=cfg.image.repository_name,
        imageIds=[{"imageTag": tag}],
        acceptedMediaTypes=[DOCKER_MANIFEST_V2, "application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.oci.image.index.v1+json",
                            "application/vnd.docker.distribution.manifest.list.v2+json"],
    )  # fmt: skip
    images = answer.get("images", [])
    if not images:
        return None
    return str(images[0].get("imageManifestMediaType", ""))


def manifest_problem(uri: str, media_type: str) -> str | None:
    """Why SageMaker would refuse the image (module docstring, 3), or None."""
    if media_type == DOCKER_MANIFEST_V2:
        return None
    return (
        f"{uri} has manifest type {media_type}; SageMaker accepts {DOCKER_MANIFEST_V2} only "
        "(push with --provenance=false and oci-mediatypes=false: make push-image does)"
    )


def build_command(
    cfg: DeploymentConfig, uri: str, tag: str, release: tuple[str, Path]
) -> list[str]:
    """The ``docker buildx build --push`` command (module docstring, 3)."""
    version, directory = release
    args = {**image_build_args(cfg), "MODEL_ARTIFACT_VERSION": version}
    cache = f"{uri}:{BUILD_CACHE_TAG}"
    command = [
        "docker", "buildx", "build", "--platform", PLATFORM,
        "--provenance=false", "--sbom=false",
        "--output", f"type=image,name={uri}:{tag},push=true,oci-mediatypes=false",
        "--cache-from", f"type=registry,ref={cache}",
        "--cache-to", f"type=registry,ref={cache},mode=max,image-manifest=true,oci-mediatypes=true",
        "--build-context", f"{MODEL_CONTEXT}={directory}",
    ]  # fmt: skip
    for key, value in sorted(args.items()):
        command += ["--build-arg", f"{key}={value}"]
    return [*command, str(CONTAINER_DIR)]


def login(ecr: Any, run: Runner) -> None:
    """docker login to the account's registry with a GetAuthorizationToken token via stdin."""
    data = ecr.get_authorization_token()["authorizationData"][0]
    user, password = base64.b64decode(data["authorizationToken"]).decode().split(":", 1)
    endpoint = data["proxyEndpoint"]
    if run(["docker", "login", "--username", user, "--password-stdin", endpoint], password):
        raise PushRefused(f"docker login to {endpoint} failed")


def subprocess_runner(dry_run: bool) -> Runner:
    def run(command: Sequence[str], stdin: str | None) -> int:
        print("+ " + " ".join(command) + (" < ***" if stdin is not None else ""), flush=True)
        if dry_run:
            return 0
        return subprocess.run(list(command), input=stdin, text=True, check=False).returncode

    return run


def push(
    cfg: DeploymentConfig, ecr: Any, tag: str, ref_file: Path, run: Runner, *, dry_run: bool
) -> int:
    tag = checked_tag(tag)
    uri = repository_uri(ecr, cfg)
    present = pushed_media_type(ecr, cfg, tag)
    if present is not None:
        problem = manifest_problem(f"{uri}:{tag}", present)
        if problem:
            raise PushRefused(f"{problem}; the tag is immutable: push another tag")
        print(f"{uri}:{tag} is already in the repository ({present}): nothing to build")
        return 0
    release = read_ref(ref_file)
    login(ecr, run)
    if run(build_command(cfg, uri, tag, release), None):
        raise PushRefused(f"docker buildx build failed; nothing was pushed as {uri}:{tag}")
    if dry_run:
        return 0
    pushed = pushed_media_type(ecr, cfg, tag)
    if pushed is None:
        raise PushRefused(f"the build ended but {uri}:{tag} is not in the repository")
    problem = manifest_problem(f"{uri}:{tag}", pushed)
    if problem:
        raise PushRefused(problem)
    print(f"pushed {uri}:{tag} ({pushed}, model release {release[0]})")
    return 0


def main(
    argv: list[str] | None = None,
    *,
    clients: dict[str, Any] | None = None,
    runner: Runner | None = None,
) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="dev")
    parser.add_argument("--tag", required=True, help="the image tag (CI: the commit sha)")
    parser.add_argument("--ref-file", type=Path, required=True,
                        help="the verified model release make fetch-model wrote")  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="print the commands, push nothing")
    args = parser.parse_args(argv)
    given = clients or {}

    def command(cfg: DeploymentConfig) -> int:
        ecr = client(given, "ecr", cfg.region)
        run = runner or subprocess_runner(args.dry_run)
        return push(cfg, ecr, args.tag, args.ref_file, run, dry_run=args.dry_run)

    return run_on_config(REPO_ROOT, args.env, command, refused=PushRefused)


if __name__ == "__main__":
    sys.exit(main())
