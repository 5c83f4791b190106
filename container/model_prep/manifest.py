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
    path = root / MANIFEST_NAME
    path.write_text(json.dumps({**facts, "files": files}, indent=2, sort_keys=True) + "\n")
    return path
