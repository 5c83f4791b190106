"""The image's model manifest: sha256 of every file, sources, quantization and adapters.

Written last in the model-prep stage; the entrypoint re-checks every checksum at startup, so a
corrupted or half-copied layer fails fast instead of serving garbage.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

MANIFEST_NAME = "manifest.json"


def sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_manifest(root: Path, **facts: Any) -> Path:
    files = {
        str(p.relative_to(root)): sha256(p)
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != MANIFEST_NAME
    }
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)
    path = root / MANIFEST_NAME
    body = {**facts, "size_bytes": size, "files": files}
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return path


class ManifestError(ValueError):
    """The files under a root do not match its manifest; the message names each file."""


def verify_tree(root: Path, *, version: str | None = None) -> dict[str, Any]:
    """Check ``root`` against its manifest: every listed file present with its sha256, no file
    the manifest does not list, and (when given) the manifest's version. Returns the manifest.
    Raises :class:`ManifestError` naming the artifact and each file that differs."""
    path = root / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(f"{root}: no {MANIFEST_NAME}: not a prepared model")
    manifest: dict[str, Any] = json.loads(path.read_text())
    name = manifest.get("version") or str(root)
    if version is not None and manifest.get("version") != version:
        raise ManifestError(
            f"{root}: manifest is version {manifest.get('version')!r}, not {version!r}"
        )
    files: dict[str, str] = manifest.get("files", {})
    bad = []
    for rel, digest in sorted(files.items()):
        target = root / rel
        if not target.is_file():
            bad.append(f"{rel}: missing")
        elif sha256(target) != digest:
            bad.append(f"{rel}: sha256 differs from the manifest")
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_file() and p != path and rel not in files:
            bad.append(f"{rel}: not in the manifest")
    if bad:
        raise ManifestError(f"model artifact {name} does not verify: " + "; ".join(bad[:20]))
    return manifest


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
