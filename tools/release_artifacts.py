"""Build once, promote by digest: what the source environment's release job built, recorded, and
copied into an environment that promotes it (``promotion.from_env``), verified, never rebuilt.

    python -m tools.release_artifacts record --env dev --tag SHA
        (make release-record) after dev's push-image: the image's digest (ECR) and the model
        release's manifest digest (S3), printed and written to $GITHUB_OUTPUT as the job's
        outputs image-ref (<registry>/<repository>@<digest>), image-digest, model-release
        (s3://<bucket>/<prefix>/<version>) and model-manifest-sha256.
    python -m tools.release_artifacts image --env prod --source REF@DIGEST --tag SHA
        (make promote-image) the image copied into prod's repository as <repository>:SHA by
        ``docker buildx imagetools create --prefer-index=false``, then read back: its digest must
        be the source's, or it refuses naming both.
    python -m tools.release_artifacts model --env prod --source s3://.../VERSION --manifest-sha256 H
        (make promote-model) the model release copied S3 to S3 by its manifest: the source
        manifest must hash to H (the release dev's job recorded), every file is copied under a
        fresh upload id and read back, its sha256 checked against the manifest (a file that
        differs is refused, named, and no manifest is written, so the version is not published);
        the manifest is written last, only if none exists (If-None-Match, as the preparation
        job publishes: container/model_prep/artifact.py).

Why a copy and not a rebuild: a build is not reproducible to the byte (base image tags move, pip
resolves, compile caches), so a rebuilt image is one no one tested. The digest is the image's
identity: ECR names an image by the sha256 of its manifest, and a manifest copied unchanged keeps
it. ``docker buildx imagetools create`` with one source that is not an index "will be a manifest
list, however you can disable this behavior with --prefer-index=false which attempts to preserve
the source manifest format" (Docker CLI reference, ``docker buildx imagetools create``:
https://docs.docker.com/reference/cli/docker/buildx/imagetools/create/); copying between
registries this way is Docker's documented way ("Copy image between registries with GitHub
Actions": https://docs.docker.com/build/ci/github-actions/copy-image-registries/). It needs only
the buildx the runner already has for the build (docker/setup-buildx-action), no crane or
skopeo. SageMaker runs Docker image manifest v2 schema 2 only (tools/push_image.py), so the copy's
media type is checked too. ECR's login token "can be used to access any Amazon ECR registry that
your IAM principal has access to" (ECR API reference, GetAuthorizationToken).

What each refuses, before any copy: a source that is not the ``promotion.from_env``
environment's repository or release location in this account and region (another account would
need the source's resource policies: not built); an image build or model release this
environment's config would not make (its build args or model version differ from the source's:
it would not run what its config says); a target tag or version that already holds something
else. A re-run after success finds the same digest or the same files and copies nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from container.model_prep.artifact import (
    AlreadyPublished,
    ArtifactLocation,
    read_manifest,
    write_manifest_once,
)
from container.model_prep.manifest import MANIFEST_NAME, ManifestError, parse_manifest
from sizing.fit_checks import load_config
from stacks.constructs.image import image_build_args
from tools import REPO_ROOT
from tools.aws_command import client, error_code, run_on_config
from tools.ci_config import write_outputs
from tools.push_image import (
    DOCKER_MANIFEST_V2,
    PushRefused,
    Runner,
    checked_tag,
    login,
    manifest_problem,
    subprocess_runner,
)
from typed_config import (
    ConfigError,
    DeploymentConfig,
    artifact_location_uri,
    artifact_version,
    config_path,
)

#: ``<account>.dkr.ecr.<region>.amazonaws.com/<repository>@sha256:<64 hex>``.
IMAGE_REF = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/"
    r"(?P<repository>[a-z0-9._/-]+)@(?P<digest>sha256:[0-9a-f]{64})$"
)
ACCEPTED = [
    DOCKER_MANIFEST_V2,
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
]
#: Read back in pieces this large: a shard of several GB never sits in memory.
CHUNK = 8 * 2**20


class PromotionRefused(PushRefused):
    """The promotion cannot go ahead; the message says why and what to do (a kind of refused
    push: the docker login it shares with make push-image refuses so)."""


# --------------------------------------------------------------------------- shared


def source_config(cfg: DeploymentConfig, root: Path = REPO_ROOT) -> DeploymentConfig:
    """The ``promotion.from_env`` environment's config."""
    if cfg.promotion is None:
        raise ConfigError(
            f"promotion: config/{cfg.env}.yaml promotes nothing (no promotion section): its "
            "release job builds its own image and model release"
        )
    return load_config(config_path(root, cfg.promotion.from_env), env=cfg.promotion.from_env)


def caller_account(sts: Any) -> str:
    return str(sts.get_caller_identity()["Account"])


def image_digest(ecr: Any, repository: str, tag: str) -> tuple[str, str] | None:
    """``(digest, manifest media type)`` of ``repository:tag``, or None when not there."""
    answer = ecr.batch_get_image(
        repositoryName=repository, imageIds=[{"imageTag": tag}], acceptedMediaTypes=ACCEPTED
    )
    images = answer.get("images", [])
    if not images:
        return None
    image = images[0]
    return str(image["imageId"]["imageDigest"]), str(image.get("imageManifestMediaType", ""))


def manifest_digest(s3: Any, where: ArtifactLocation, version: str) -> tuple[str, dict[str, Any]]:
    """The sha256 of the published manifest's bytes, and the manifest."""
    key = where.key(version, MANIFEST_NAME)
    try:
        body = s3.get_object(Bucket=where.bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if error_code(exc) in {"NoSuchKey", "404", "NotFound"}:
            raise PromotionRefused(
                f"model release {version} is not published at {where.uri(version)}/ (no "
                f"{MANIFEST_NAME})"
            ) from exc
        raise
    try:
        manifest = parse_manifest(body, where.uri(version, MANIFEST_NAME))
    except ManifestError as exc:
        raise PromotionRefused(str(exc)) from exc
    return hashlib.sha256(body).hexdigest(), manifest


# --------------------------------------------------------------------------- record


def record(cfg: DeploymentConfig, *, ecr: Any, s3: Any, sts: Any, tag: str) -> dict[str, str]:
    """The job outputs of the environment that built the release (module docstring)."""
    tag = checked_tag(tag)
    repository = cfg.image.repository_name
    if not repository:
        raise ConfigError(f"image.repository_name: not set in config/{cfg.env}.yaml")
    found = image_digest(ecr, repository, tag)
    if found is None:
        raise PromotionRefused(
            f"{repository}:{tag} is not in the repository: make push-image ENV={cfg.env} "
            f"TAG={tag} first"
        )
    digest, media_type = found
    problem = manifest_problem(f"{repository}:{tag}", media_type)
    if problem:
        raise PromotionRefused(problem)
    account = caller_account(sts)
    where = ArtifactLocation.parse(artifact_location_uri(cfg, account))
    version = artifact_version(cfg)
    sha, _ = manifest_digest(s3, where, version)
    registry = f"{account}.dkr.ecr.{cfg.region}.amazonaws.com"
    return {
        "image-ref": f"{registry}/{repository}@{digest}",
        "image-digest": digest,
        "model-release": where.uri(version),
        "model-manifest-sha256": sha,
    }


# --------------------------------------------------------------------------- image


@dataclass(frozen=True)
class ImageSource:
    account: str
    region: str
    repository: str
    digest: str

    @classmethod
    def parse(cls, ref: str) -> ImageSource:
        m = IMAGE_REF.match(ref)
        if not m:
            raise ConfigError(
                f"SOURCE: {ref!r} is not <account>.dkr.ecr.<region>.amazonaws.com/<repository>"
                "@sha256:<digest> (make release-record prints it as image-ref)"
            )
        return cls(**m.groupdict())

    @property
    def registry(self) -> str:
        return f"{self.account}.dkr.ecr.{self.region}.amazonaws.com"


def copy_command(source: ImageSource, target: str) -> list[str]:
    return [
        "docker", "buildx", "imagetools", "create", "--prefer-index=false",
        "--tag", target, f"{source.registry}/{source.repository}@{source.digest}",
    ]  # fmt: skip


def promote_image(
    cfg: DeploymentConfig,
    *,
    ecr: Any,
    sts: Any,
    source_ref: str,
    tag: str,
    run: Runner,
    root: Path = REPO_ROOT,
    dry_run: bool = False,
) -> str:
    """Copy the source image to ``<repository>:<tag>`` and verify its digest; returns it."""
    tag = checked_tag(tag)
    source = ImageSource.parse(source_ref)
    src_cfg = source_config(cfg, root)
    account = caller_account(sts)
    expected = (account, cfg.region, src_cfg.image.repository_name)
    if (source.account, source.region, source.repository) != expected:
        raise PromotionRefused(
            f"{source_ref} is not {src_cfg.env}'s repository "
            f"{src_cfg.image.repository_name} in account {account}, {cfg.region}: "
            "promotion copies the release of promotion.from_env in this account and region only"
        )
    ours, theirs = image_build_args(cfg), image_build_args(src_cfg)
    if ours != theirs:
        differ = sorted(k for k in {*ours, *theirs} if ours.get(k) != theirs.get(k))
        raise PromotionRefused(
            f"config/{cfg.env}.yaml would build another image than config/{src_cfg.env}.yaml "
            f"(build args {differ}: {[ours.get(k) for k in differ]} here, "
            f"{[theirs.get(k) for k in differ]} there): promoting it would run an image this "
            "config does not describe"
        )
    repository = str(cfg.image.repository_name)
    target = f"{account}.dkr.ecr.{cfg.region}.amazonaws.com/{repository}:{tag}"
    present = image_digest(ecr, repository, tag)
    if present is not None:
        if present[0] != source.digest:
            raise PromotionRefused(
                f"{target} already holds {present[0]}, not the promoted {source.digest} (tags "
                "are immutable): promote under another tag"
            )
        print(f"{target} is already {source.digest}: nothing to copy")
        return source.digest
    try:
        found = ecr.describe_images(
            repositoryName=source.repository, imageIds=[{"imageDigest": source.digest}]
        )["imageDetails"]
    except ClientError as exc:
        if error_code(exc) == "ImageNotFoundException":
            raise PromotionRefused(
                f"{source_ref}: no such image in {source.repository}; nothing was copied"
            ) from exc
        raise
    problem = manifest_problem(source_ref, str(found[0].get("imageManifestMediaType", "")))
    if problem:
        raise PromotionRefused(problem)
    login(ecr, run)
    if run(copy_command(source, target), None):
        raise PromotionRefused(f"docker buildx imagetools create failed; {target} not written")
    if dry_run:
        return source.digest
    copied = image_digest(ecr, repository, tag)
    if copied is None:
        raise PromotionRefused(f"the copy ended but {target} is not in the repository")
    if copied[0] != source.digest:
        raise PromotionRefused(
            f"{target} is {copied[0]} after the copy, not the source's {source.digest}: the "
            "copy changed the image (a manifest list instead of the manifest?); do not deploy it"
        )
    problem = manifest_problem(target, copied[1])
    if problem:
        raise PromotionRefused(problem)
    print(f"promoted {source_ref} to {target} (digest verified)")
    return source.digest


# --------------------------------------------------------------------------- model


def stream_sha256(s3: Any, bucket: str, key: str) -> str:
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    digest = hashlib.sha256()
    for chunk in iter(lambda: body.read(CHUNK), b""):
        digest.update(chunk)
    return digest.hexdigest()


def promote_model(
    cfg: DeploymentConfig,
    *,
    s3: Any,
    sts: Any,
    source_uri: str,
    manifest_sha256: str,
    root: Path = REPO_ROOT,
) -> str:
    """Copy the source model release here by its manifest and verify it; returns its URI."""
    src_cfg = source_config(cfg, root)
    account = caller_account(sts)
    head, _, version = source_uri.rstrip("/").rpartition("/")
    source = ArtifactLocation.parse(head)
    expected = ArtifactLocation.parse(artifact_location_uri(src_cfg, account))
    if source != expected:
        raise PromotionRefused(
            f"{source_uri} is not under {src_cfg.env}'s release location {expected.uri('')} in "
            f"account {account}: promotion copies the release of promotion.from_env only"
        )
    if version != artifact_version(cfg):
        raise PromotionRefused(
            f"config/{cfg.env}.yaml bakes model release {artifact_version(cfg)}, not the "
            f"promoted {version}: its model inputs differ from config/{src_cfg.env}.yaml's"
        )
    sha, manifest = manifest_digest(s3, source, version)
    if sha != manifest_sha256:
        raise PromotionRefused(
            f"{source.uri(version, MANIFEST_NAME)} has sha256 {sha}, not the recorded "
            f"{manifest_sha256}: it is not the release the source job built and tested"
        )
    files: dict[str, str] = manifest.get("files", {})
    dest = ArtifactLocation.parse(artifact_location_uri(cfg, account))
    present = read_manifest(s3, dest, version)
    if present is not None:
        if present.get("files") != files:
            raise PromotionRefused(
                f"{dest.uri(version)} is published with other files than {source.uri(version)}"
            )
        print(f"{dest.uri(version)} is already published with the same files: nothing to copy")
        return dest.uri(version)
    src_upload, upload = str(manifest.get("upload", "")), f"u-{uuid.uuid4().hex[:12]}"
    for i, (rel, digest) in enumerate(sorted(files.items()), start=1):
        key = dest.key(version, f"{upload}/{rel}")
        s3.copy(
            {"Bucket": source.bucket, "Key": source.key(version, f"{src_upload}/{rel}")},
            dest.bucket,
            key,
        )
        got = stream_sha256(s3, dest.bucket, key)
        if got != digest:
            raise PromotionRefused(
                f"model release {version}: {rel} copied to {dest.uri(version, upload)}/{rel} has "
                f"sha256 {got}, the manifest says {digest}; nothing published"
            )
        print(f"promote-model: {i}/{len(files)} {rel} copied and verified", flush=True)
    try:
        write_manifest_once(s3, dest, version, manifest, upload, writer="promotion")
    except AlreadyPublished as exc:
        raise PromotionRefused(f"{exc}: run again (it compares the files)") from exc
    print(f"promoted model release {version} to {dest.uri(version)} (every file verified)")
    return dest.uri(version)


# --------------------------------------------------------------------------- CLI


def main(
    argv: list[str] | None = None,
    *,
    clients: dict[str, Any] | None = None,
    runner: Runner | None = None,
    environ: dict[str, str] | None = None,
    root: Path = REPO_ROOT,
) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.release_artifacts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="the built release's digests as job outputs")
    rec.add_argument("--env", required=True)
    rec.add_argument("--tag", required=True)
    img = sub.add_parser("image", help="copy the source image here by digest and verify it")
    img.add_argument("--env", required=True)
    img.add_argument("--source", required=True, help="<registry>/<repository>@sha256:...")
    img.add_argument("--tag", required=True)
    img.add_argument("--dry-run", action="store_true")
    mod = sub.add_parser("model", help="copy the source model release here and verify it")
    mod.add_argument("--env", required=True)
    mod.add_argument("--source", required=True, help="s3://<bucket>/<prefix>/<version>")
    mod.add_argument("--manifest-sha256", required=True)
    args = parser.parse_args(argv)
    given = clients or {}
    env = dict(os.environ if environ is None else environ)

    def command(cfg: DeploymentConfig) -> int:
        sts = client(given, "sts", cfg.region)
        if args.command == "record":
            values = record(
                cfg,
                ecr=client(given, "ecr", cfg.region),
                s3=client(given, "s3", cfg.region),
                sts=sts,
                tag=args.tag,
            )
            write_outputs(values, env)
        elif args.command == "image":
            digest = promote_image(
                cfg,
                ecr=client(given, "ecr", cfg.region),
                sts=sts,
                source_ref=args.source,
                tag=args.tag,
                run=runner or subprocess_runner(args.dry_run),
                root=root,
                dry_run=args.dry_run,
            )
            write_outputs({"image-digest": digest}, env)
        else:
            promote_model(
                cfg,
                s3=client(given, "s3", cfg.region),
                sts=sts,
                source_uri=args.source,
                manifest_sha256=args.manifest_sha256,
                root=root,
            )
        return 0

    return run_on_config(root, args.env, command, refused=PromotionRefused)


if __name__ == "__main__":
    sys.exit(main())
