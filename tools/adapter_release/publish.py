"""One adapter version out of a prepared model release: its quality gate alone, then published on
its own as ``adapters/<adapter>/<version>/adapter.tar.gz`` in the environment's models bucket.

The prepared release (``make prepare-model``: container/model_prep/prepare.py) holds every
adapter under ``lora/<name>/`` and the quality gate's figures in its manifest
(``quality_gate``: the base and each adapter, quantized base against the original). The gate
here is that gate's own verdict (container/model_prep/quality_gate.py ``failures``) for this
adapter alone, against the floor the release was prepared with.

**One archive.** An adapter component's ``Container.ArtifactUrl`` "must point to a single gzip
compressed tar archive (.tar.gz suffix)" (SageMaker API reference,
InferenceComponentContainerSpecification; botocore's sagemaker model says the same), so the
version is one object (typed_config.generated_names ``adapter_artifact_key``): the adapter's
PEFT files at the archive's root (``adapter_config.json``, ``adapter_model.safetensors``), so the
directory it unpacks to is the adapter's directory. What the serving image receives: vLLM's
SageMaker adapter route (``POST /adapters``, model_hosting_container_standards'
``SageMakerRegisterLoRAAdapterRequest``: ``name`` and ``src``) hands ``body.src`` to vLLM's
``load_lora_adapter`` as ``lora_path`` (vllm/entrypoints/serve/lora/api_router.py), which vLLM
opens as a local PEFT directory; neither unpacks an archive or reads S3. So the contract this
relies on is SageMaker's: it fetches the archive with the endpoint's execution role, unpacks it
on the instance and sends the unpacked directory's path as ``src``. AWS's developer guide
("Fine-tune models with adapter inference components",
https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints-adapt.html) says only that an
adapter component names "the location where you've stored the LoRA adapter in Amazon S3" and
that SageMaker "combines the adapter with the base model"; the unpacking and the local ``src``
are what the container's side of the contract requires, not a sentence of that page.

**Deterministic.** The archive's members are sorted by name, each a regular file with mtime 0,
uid/gid 0, no owner names and mode 0644, in a gzip stream with mtime 0 and no file name: the same
files give the same bytes, whatever their dates on disk. Its sha256 and each file's are recorded
in ``manifest.json`` beside it.

**Published once.** The archive is written only if no object has its key and the manifest only
if none exists (``If-None-Match: *``, as a model release is published:
container/model_prep/artifact.py): a version names one content. A re-run finds the manifest
naming the same files and writes nothing; a manifest naming other files is refused, named (the
version is released under a new version). An archive left without a manifest (a run stopped
between the two writes) is taken if it is this archive, byte for byte, and refused otherwise.
"""

from __future__ import annotations

import gzip
import hashlib
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from container.model_prep.artifact import (
    AlreadyPublished,
    ArtifactLocation,
    read_manifest,
    write_manifest_once,
)
from container.model_prep.manifest import MANIFEST_NAME, sha256, verify_tree
from container.model_prep.quality_gate import failures
from typed_config.generated_names import ADAPTER_ARCHIVE

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
    """``s3://<bucket>/adapters/<adapter>/``: each version a prefix below it holding
    ``adapter.tar.gz`` (``adapter_artifact_key(adapter, version)``) and ``manifest.json``."""
    return ArtifactLocation(bucket, f"adapters/{adapter}")


def artifact_url(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


#: Gzip level of the archive: LoRA weights (fp16/bf16) barely compress; 6 is zlib's default.
GZIP_LEVEL = 6


def build_archive(prepared: PreparedAdapter, dest: Path) -> str:
    """Write ``prepared``'s files to ``dest`` as the deterministic archive of the module
    docstring, each checked against its sha256 in the release's manifest; returns the
    archive's sha256."""
    with (
        dest.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=GZIP_LEVEL) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel, digest in sorted(prepared.files.items()):
            path = prepared.root / rel
            if sha256(path) != digest:
                raise AdapterRefused(
                    f"{path}: sha256 differs from model release {prepared.release}'s "
                    "manifest; fetch the release again (make fetch-model)"
                )
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = path.stat().st_size, 0o644, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with path.open("rb") as f:
                tar.addfile(info, f)
    return sha256(dest)


#: What S3 answers a conditional write whose key exists ("Amazon S3 User Guide: Add preconditions
#: to S3 operations with conditional requests"), as container/model_prep/artifact.py reads it.
PRECONDITION_FAILED = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict"})


def _error_code(exc: Exception) -> str:
    return str((getattr(exc, "response", None) or {}).get("Error", {}).get("Code", ""))


def _sha256(s3: Any, bucket: str, key: str) -> str:
    h = hashlib.sha256()
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    for chunk in iter(lambda: body.read(8 * 2**20), b""):
        h.update(chunk)
    return h.hexdigest()


def _same_or_refused(present: dict[str, Any], prepared: PreparedAdapter, url: str) -> str:
    """A published version is taken when its manifest names the same files (the archive may
    differ byte for byte only through another zlib build); anything else is refused."""
    if present.get("files") != prepared.files:
        raise AdapterRefused(
            f"{url} is published with other files than model release {prepared.release}'s "
            f"{prepared.adapter} {prepared.version} (from {present.get('release')}): a version "
            "names one content; release it under a new version"
        )
    return f"already published from {present.get('release')}: nothing written"


def _put_archive_once(s3: Any, path: Path, digest: str, *, bucket: str, key: str) -> str:
    """Upload the archive unless an object has its key; an object left there by a run that
    stopped before its manifest is taken only if it is this archive. Returns what was done."""
    url = artifact_url(bucket, key)
    try:
        with path.open("rb") as body:
            s3.put_object(
                Bucket=bucket,
                Key=key,
                Body=body,
                IfNoneMatch="*",
                ContentType="application/gzip",
            )
    except Exception as exc:
        if _error_code(exc) not in PRECONDITION_FAILED:
            raise
        if _sha256(s3, bucket, key) != digest:
            raise AdapterRefused(
                f"{url} exists with no {MANIFEST_NAME} and other content than this archive "
                "(another release of this version is under way, or one stopped before its "
                "manifest): not overwritten; release under a new version, or delete the object "
                "once no release of it is running"
            ) from exc
        return "the archive a stopped run left (same sha256) kept"
    if _sha256(s3, bucket, key) != digest:
        raise AdapterRefused(f"{url}: sha256 differs after upload; not published")
    return "uploaded"


def publish(
    s3: Any, prepared: PreparedAdapter, *, bucket: str, key: str, dry_run: bool = False
) -> tuple[str, str]:
    """Publish ``prepared`` as the archive ``s3://<bucket>/<key>`` and its manifest (module
    docstring). Returns ``(ArtifactUrl, what was done)``."""
    where = location(bucket, prepared.adapter)
    assert where.key(prepared.version, ADAPTER_ARCHIVE) == key, (where, key)
    url = artifact_url(bucket, key)
    present = read_manifest(s3, where, prepared.version)
    if present is not None:
        return url, _same_or_refused(present, prepared, url)
    if dry_run:
        return (
            url,
            f"would upload {ADAPTER_ARCHIVE} ({len(prepared.files)} files) and {MANIFEST_NAME}",
        )
    with tempfile.TemporaryDirectory(prefix="adapter-release-") as tmp:
        archive = Path(tmp) / ADAPTER_ARCHIVE
        digest = build_archive(prepared, archive)
        size = archive.stat().st_size
        done = _put_archive_once(s3, archive, digest, bucket=bucket, key=key)
    manifest = {
        "version": prepared.version,
        "adapter": prepared.adapter,
        "release": prepared.release,
        "quality_gate": prepared.gate,
        "files": prepared.files,
        "archive": {"name": ADAPTER_ARCHIVE, "sha256": digest, "bytes": size},
    }
    try:
        write_manifest_once(s3, where, prepared.version, manifest, "", writer="adapter release")
    except AlreadyPublished:
        present = read_manifest(s3, where, prepared.version)
        assert present is not None
        return url, _same_or_refused(present, prepared, url)
    return url, (
        f"{ADAPTER_ARCHIVE} ({len(prepared.files)} files, {size} bytes, sha256 {digest[:12]}) "
        f"{done}, {MANIFEST_NAME} written (digests verified)"
    )
