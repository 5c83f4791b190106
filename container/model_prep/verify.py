"""``python -m model_prep.verify DIR [--version V]``: the image build's check of a baked artifact.

The Dockerfile's model stage runs it on the copied artifact, so a changed, missing or extra file
fails ``docker build`` naming the file, before any layer is pushed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .manifest import ManifestError, verify_tree


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="verify a prepared model against its manifest")
    p.add_argument("root", type=Path)
    p.add_argument("--version", default="", help="the version the build was asked to bake")
    args = p.parse_args(argv)
    try:
        manifest = verify_tree(args.root, version=args.version or None)
    except ManifestError as exc:
        print(f"model artifact FAILED verification: {exc}", file=sys.stderr)
        return 1
    print(f"model artifact {manifest.get('version')}: {len(manifest['files'])} files verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
