"""A prepared model in S3: published once, atomically, and read only when its manifest verifies.

Layout under ``s3://<bucket>/<prefix>/<version>/``::

    <upload-id>/base/...            the files of one upload (one preparation job)
    <upload-id>/lora/<name>/...
    <upload-id>/quality_report.json
    manifest.json                   written last: sha256 of every file, and which upload holds them

Publishing uploads every file under a fresh upload id, then writes ``manifest.json`` with
``If-None-Match: *``: S3 writes it only if no object has that key ("Amazon S3 User Guide:
Add preconditions to S3 operations with conditional requests": a conditional write answers
412 Precondition Failed when the key exists). So a version is published exactly once, a reader
never sees a manifest before every file it names is in place, and of two jobs racing on the
same inputs one publishes and the other is told "already published" (its upload, never named by
a manifest, is never read). Readers take the manifest first, then only its upload's files, each
checked against its sha256, and refuse a file the manifest does not name.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .manifest import (
    CHANGED,
    MANIFEST_NAME,
    MAX_NAMED,
    MISSING,
    UNLISTED,
    ManifestError,
    parse_manifest,
    sha256,
    verify_tree,
)
from .release import VERSION


class ArtifactError(Exception):
    """A model artifact cannot be published or read; the message names it and the file."""


class AlreadyPublished(ArtifactError):
    """The version has a manifest: the same inputs were prepared before."""


@dataclass(frozen=True)
class ArtifactLocation:
    """Where versions live: ``s3://bucket/prefix/``."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, uri: str) -> ArtifactLocation:
        if not uri.startswith("s3://") or not uri[5:].split("/", 1)[0]:
            raise ArtifactError(f"{uri!r}: expected s3://bucket/prefix")
        bucket, _, prefix = uri[5:].partition("/")
        return cls(bucket, prefix.strip("/"))

    def key(self, version: str, rel: str = "") -> str:
        parts = [p for p in (self.prefix, version, rel) if p]
        return "/".join(parts)

    def uri(self, version: str, rel: str = "") -> str:
        return f"s3://{self.bucket}/{self.key(version, rel)}"


def parse_ref(ref: str, default: ArtifactLocation | None) -> tuple[ArtifactLocation, str]:
    """``model.artifact``: a version (``m-0123456789abcdef``, read from ``default``) or the S3 URI
    of one (``s3://bucket/prefix/m-0123456789abcdef``)."""
    ref = ref.strip().rstrip("/")
    if ref.startswith("s3://"):
        head, _, version = ref.rpartition("/")
        if not VERSION.match(version) or head == "s3:/":
            raise ArtifactError(
                f"{ref!r}: expected s3://bucket/prefix/<version> ({VERSION.pattern})"
            )
        return ArtifactLocation.parse(head), version
    if not VERSION.match(ref):
        raise ArtifactError(f"{ref!r}: not a model version ({VERSION.pattern}) or s3:// URI")
    if default is None:
        raise ArtifactError(f"{ref}: a bare version needs the artifact location (model_prep)")
    return default, ref


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def read_manifest(s3: Any, where: ArtifactLocation, version: str) -> dict[str, Any] | None:
    """The published manifest of ``version``, or None when there is none (unpublished, or a
    preparation still uploading: it has written no manifest yet)."""
    try:
        body = s3.get_object(Bucket=where.bucket, Key=where.key(version, MANIFEST_NAME))["Body"]
    except Exception as exc:
        if _error_code(exc) in {"NoSuchKey", "404", "NotFound"}:
            return None
        raise
    try:
        manifest = parse_manifest(body.read(), where.uri(version, MANIFEST_NAME))
    except ManifestError as exc:
        raise ArtifactError(str(exc)) from exc
    if manifest.get("version") != version:
        raise ArtifactError(
            f"{where.uri(version, MANIFEST_NAME)}: names version {manifest.get('version')!r}"
        )
    return manifest


def publish(s3: Any, root: Path, where: ArtifactLocation, *, log: Any = print) -> str:
    """Upload the prepared model at ``root`` (its manifest must verify and name its version)
    and write the manifest last. Returns the version's URI; raises :class:`AlreadyPublished`."""
    try:
        manifest = verify_tree(root)
    except ManifestError as exc:
        raise ArtifactError(f"refusing to publish: {exc}") from exc
    version = str(manifest.get("version", ""))
    if not VERSION.match(version):
        raise ArtifactError(f"{root / MANIFEST_NAME}: no version to publish under")
    if read_manifest(s3, where, version) is not None:
        raise AlreadyPublished(f"{where.uri(version)} is already published")
    upload = f"u-{uuid.uuid4().hex[:12]}"
    files: dict[str, str] = manifest["files"]
    for i, rel in enumerate(sorted(files), start=1):
        s3.upload_file(str(root / rel), where.bucket, where.key(version, f"{upload}/{rel}"))
        if i % 50 == 0 or i == len(files):
            log(f"model-release: uploaded {i}/{len(files)} files to {where.uri(version, upload)}/")
    return write_manifest_once(s3, where, version, manifest, upload)


def write_manifest_once(
    s3: Any,
    where: ArtifactLocation,
    version: str,
    manifest: dict[str, Any],
    upload: str,
    *,
    writer: str = "preparation",
) -> str:
    """Publish ``version``: its manifest naming ``upload``, written only if none exists
    (module docstring). Returns the version's URI; raises :class:`AlreadyPublished` when another
    ``writer`` (a preparation, a promotion) published it meanwhile."""
    body = json.dumps({**manifest, "upload": upload}, indent=2, sort_keys=True).encode()
    try:
        s3.put_object(
            Bucket=where.bucket,
            Key=where.key(version, MANIFEST_NAME),
            Body=body,
            IfNoneMatch="*",
            ContentType="application/json",
        )
    except Exception as exc:
        if _error_code(exc) in {"PreconditionFailed", "412", "ConditionalRequestConflict"}:
            raise AlreadyPublished(
                f"{where.uri(version)} was published by another {writer} meanwhile"
            ) from exc
        raise
    return where.uri(version)


def fetch(s3: Any, where: ArtifactLocation, version: str, dest: Path) -> dict[str, Any]:
    """Download ``version`` into ``dest`` and verify it; a ``dest`` that already verifies as
    that version is kept. Nothing half-downloaded is ever left at ``dest``."""
    if (dest / MANIFEST_NAME).is_file():
        try:
            return verify_tree(dest, version=version)
        except ManifestError:
            shutil.rmtree(dest)
    manifest = read_manifest(s3, where, version)
    if manifest is None:
        raise ArtifactError(
            f"model artifact {version} is not published at {where.uri(version)}/ (no "
            f"{MANIFEST_NAME}): run `make prepare-model`, or name a published version"
        )
    upload = str(manifest.get("upload", ""))
    files: dict[str, str] = manifest.get("files", {})
    listed: set[str] = set()
    base = where.key(version, upload) + "/"
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=where.bucket, Prefix=base):
        listed.update(obj["Key"][len(base) :] for obj in page.get("Contents", []))
    missing = sorted(set(files) - listed)
    extra = sorted(listed - set(files))
    if missing or extra:
        named = [f"{f}: {MISSING}" for f in missing] + [f"{f}: {UNLISTED}" for f in extra]
        raise ArtifactError(
            f"model artifact {version} at {where.uri(version)}/ does not match its manifest: "
            + "; ".join(named[:MAX_NAMED])
        )
    tmp = dest.with_name(f".{dest.name}.partial-{uuid.uuid4().hex[:8]}")
    try:
        for rel, digest in sorted(files.items()):
            target = (tmp / rel).resolve()
            if not target.is_relative_to(tmp.resolve()):
                raise ArtifactError(
                    f"model artifact {version}: {rel!r} resolves outside the artifact"
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(where.bucket, f"{base}{rel}", str(target))
            if sha256(target) != digest:
                raise ArtifactError(
                    f"model artifact {version}: {where.uri(version, upload)}/{rel}: {CHANGED}"
                )
        local = {k: v for k, v in manifest.items() if k != "upload"}
        (tmp / MANIFEST_NAME).write_text(json.dumps(local, indent=2, sort_keys=True) + "\n")
        verify_tree(tmp, version=version)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return verify_tree(dest, version=version)
