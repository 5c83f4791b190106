"""One adapter version out of a prepared model release: its quality gate alone, then published on
its own under ``adapters/<adapter>/<version>/`` in the environment's models bucket.

The prepared release (``make prepare-model``: container/model_prep/prepare.py) holds every
adapter under ``lora/<name>/`` and the quality gate's figures in its manifest
(``quality_gate``: the base and each adapter, quantized base against the original). The gate
here is that gate's own verdict (container/model_prep/quality_gate.py ``failures``) for this
adapter alone, against the floor the release was prepared with.

Publishing writes the adapter's files straight under the version's prefix (an adapter
component's ``ArtifactUrl`` is that prefix: SageMaker loads the adapter from what is under it),
then ``manifest.json`` beside them, written only if none exists (If-None-Match, as a model
release is published: container/model_prep/artifact.py), with each file's sha256, the release it
came from and the gate's figures. A version is published once: a re-run finds the same files and
writes nothing; other files under a published version are refused, named.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from container.model_prep.artifact import (
    AlreadyPublished,
    ArtifactLocation,
    read_manifest,
    write_manifest_once,
)
from container.model_prep.manifest import MANIFEST_NAME, verify_tree
from container.model_prep.quality_gate import failures

#: Where a prepared release keeps each adapter (container/model_prep/prepare.py).
LORA_DIR = "lora"


class AdapterRefused(RuntimeError):
    """The adapter release cannot go on; the message says why and what to do."""


@dataclass(frozen=True)
class PreparedAdapter:
    """One adapter version found in a verified prepared release."""

    adapter: str
    version: str
    release: str
    #: ``{path relative to the adapter's directory: sha256}``.
    files: dict[str, str]
    root: Path
    #: The gate's figures for this adapter and the floor (empty when no gate ran).
    gate: dict[str, Any]


def prepared_adapter(root: Path, adapter: str, version: str) -> PreparedAdapter:
    """``adapter`` at ``version`` in the release at ``root`` (verified against its manifest),
    with its gate passed for it alone. Refuses, naming the release: an adapter the release does
    not hold at that version; a gate that failed it or did not score it."""
    manifest = verify_tree(root)
    release = str(manifest.get("version"))
    held = (manifest.get("adapters") or {}).get(adapter)
    if held is None:
        raise AdapterRefused(f"model release {release} has no adapter {adapter}")
    if held.get("version") != version:
        raise AdapterRefused(
            f"model release {release} holds {adapter} {held.get('version')!r}, not {version!r}: "
            f"make prepare-model with adapters.{adapter}.version {version} first"
        )
    prefix = f"{LORA_DIR}/{adapter}/"
    files = {
        rel[len(prefix) :]: digest
        for rel, digest in manifest["files"].items()
        if rel.startswith(prefix)
    }
    if not files:
        raise AdapterRefused(f"model release {release} lists no file under {prefix}")
    gate = manifest.get("quality_gate")
    if gate:
        below = failures(gate, float(gate["min_agreement"]), only=adapter)
        if below:
            raise AdapterRefused(
                f"quality gate of model release {release}: {'; '.join(below)}: not published"
            )
        figures = {**gate["adapters"][adapter], "min_agreement": gate["min_agreement"]}
    elif manifest.get("quantization") in ("none", "pre-quantized"):
        figures = {}  # served on the very base it was trained on: nothing to compare
    else:
        raise AdapterRefused(
            f"model release {release} (quantization {manifest.get('quantization')!r}) carries "
            "no quality gate figures: its adapters were never gated"
        )
    return PreparedAdapter(adapter, version, release, files, root / prefix, figures)


def location(bucket: str, adapter: str) -> ArtifactLocation:
    """``s3://<bucket>/adapters/<adapter>/``: each version a prefix below it, its key
    ``adapter_artifact_key(adapter, version)``."""
    return ArtifactLocation(bucket, f"adapters/{adapter}")


def artifact_url(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


def _sha256(s3: Any, bucket: str, key: str) -> str:
    h = hashlib.sha256()
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    for chunk in iter(lambda: body.read(8 * 2**20), b""):
        h.update(chunk)
    return h.hexdigest()


def publish(
    s3: Any, prepared: PreparedAdapter, *, bucket: str, key: str, dry_run: bool = False
) -> tuple[str, str]:
    """Publish ``prepared`` under ``s3://<bucket>/<key>`` (module docstring). Returns
    ``(ArtifactUrl, what was done)``."""
    where = location(bucket, prepared.adapter)
    assert where.key(prepared.version) + "/" == key, (where, key)
    url = artifact_url(bucket, key)
    present = read_manifest(s3, where, prepared.version)
    if present is not None:
        if present.get("files") != prepared.files:
            raise AdapterRefused(
                f"{url} is published with other files than model release {prepared.release}'s "
                f"{prepared.adapter} {prepared.version} (from {present.get('release')}): a version "
                "names one content; release it under a new version"
            )
        return url, f"already published from {present.get('release')}: nothing written"
    if dry_run:
        return url, f"would upload {len(prepared.files)} files and {MANIFEST_NAME}"
    for rel, digest in sorted(prepared.files.items()):
        s3.upload_file(str(prepared.root / rel), bucket, f"{key}{rel}")
        if _sha256(s3, bucket, f"{key}{rel}") != digest:
            raise AdapterRefused(f"{url}{rel}: sha256 differs after upload; not published")
    manifest = {
        "version": prepared.version,
        "adapter": prepared.adapter,
        "release": prepared.release,
        "quality_gate": prepared.gate,
        "files": prepared.files,
    }
    try:
        write_manifest_once(s3, where, prepared.version, manifest, "", writer="adapter release")
    except AlreadyPublished as exc:
        raise AdapterRefused(f"{exc}: run again (it compares the files)") from exc
    return url, f"published {len(prepared.files)} files and {MANIFEST_NAME} (digests verified)"
