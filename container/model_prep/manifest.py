"""The model manifest, one definition for every side: sha256 of every file, sources,
quantization and adapters, and the check of a tree against it.

Written last by the preparation job (prepare.py) and checked by it (artifact.py, and verify.py
in the image build's model stage). The serving image carries this file too, beside serving/
(``/opt/app/model_prep/manifest.py``: container/Dockerfile), and the entrypoint checks the model
against it at every start, so a corrupted or half-copied layer fails fast instead of serving
garbage, and each fault reads the same wherever it is found. Standard library only: the serving
image carries no other file of model_prep (tests/container/test_manifest_contract.py holds it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

MANIFEST_NAME = "manifest.json"

#: What a check says after a file's path (``base/config.json: missing``); artifact.py says the
#: same of the objects in S3.
MISSING = "missing"
CHANGED = "sha256 differs from the manifest"
UNLISTED = "not in the manifest"
#: At most this many files are named in one message.
MAX_NAMED = 20


class ManifestError(ValueError):
    """The files under a root do not match its manifest, or the manifest is not one; the
    message names each file."""


def sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _entries(root: Path, manifest: Path) -> list[Path]:
    """Everything under ``root`` but its directories and the manifest itself: what a manifest
    lists, and what a check refuses when it is not listed (a broken link, a fifo included)."""
    return [p for p in sorted(root.rglob("*")) if p != manifest and not p.is_dir()]


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def write_manifest(root: Path, **facts: Any) -> Path:
    path = root / MANIFEST_NAME
    entries = _entries(root, path)
    for p in entries:
        if not p.is_file():
            raise ManifestError(f"{root}: {_rel(p, root)}: not a file: cannot be listed")
    files = {_rel(p, root): sha256(p) for p in entries}
    size = sum(p.stat().st_size for p in entries)
    body = {**facts, "size_bytes": size, "files": files}
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return path


def parse_manifest(data: bytes | str, where: object) -> dict[str, Any]:
    """The manifest in ``data``, read from ``where`` (a path, an S3 URI). Raises
    :class:`ManifestError` naming ``where`` when it is not one: not JSON, or no ``files`` object
    of path -> sha256."""
    try:
        manifest = json.loads(data)
    except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError
        raise ManifestError(f"{where}: malformed manifest: {exc}") from exc
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in files.items()
    ):
        raise ManifestError(f'{where}: malformed manifest: no "files" object of path -> sha256')
    return manifest


def verify(
    manifest: Path, root: Path | None = None, *, version: str | None = None
) -> dict[str, Any]:
    """Check ``root`` (the manifest's directory unless given) against ``manifest``: every listed
    file present with its sha256, nothing the manifest does not list, and (when given) the
    manifest's version. Returns the manifest. Raises :class:`ManifestError` naming the artifact
    and each file that differs."""
    root = manifest.parent if root is None else root
    if not manifest.is_file():
        raise ManifestError(f"{root}: no {manifest.name}: not a prepared model")
    body = parse_manifest(manifest.read_bytes(), manifest)
    name = body.get("version") or str(root)
    if version is not None and body.get("version") != version:
        raise ManifestError(f"{root}: manifest is version {body.get('version')!r}, not {version!r}")
    files: dict[str, str] = body["files"]
    bad = []
    for rel, digest in sorted(files.items()):
        target = root / rel
        if not target.is_file():
            bad.append(f"{rel}: {MISSING}")
        elif sha256(target) != digest:
            bad.append(f"{rel}: {CHANGED}")
    bad += [
        f"{rel}: {UNLISTED}"
        for p in _entries(root, manifest)
        if (rel := _rel(p, root)) not in files
    ]
    if bad:
        raise ManifestError(f"model artifact {name} does not verify: " + "; ".join(bad[:MAX_NAMED]))
    return body


def verify_tree(root: Path, *, version: str | None = None) -> dict[str, Any]:
    """:func:`verify` of ``root`` against its own ``manifest.json``."""
    return verify(root / MANIFEST_NAME, root, version=version)


def summary(manifest: dict[str, Any]) -> str:
    """One line on a release: ``m-... quality gate passed (agreement 0.9712 >= 0.9), 5.71 GiB,
    31 files``."""
    gate = manifest.get("quality_gate") or {}
    if gate:
        verdict = "passed" if gate.get("passed") else "FAILED"
        quality = (
            f"quality gate {verdict} (agreement {gate.get('next_token_agreement', 0):.4f} >= "
            f"{gate.get('min_agreement')})"
        )
    else:
        quality = f"quality gate not run (quantization {manifest.get('quantization')})"
    return f"{manifest.get('version')}: {quality}, {size_text(manifest.get('size_bytes'))}, " + (
        f"{len(manifest.get('files', {}))} files"
    )


def size_text(size: object) -> str:
    if not isinstance(size, int):
        return "size unknown"
    return f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"
