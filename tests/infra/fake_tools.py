"""A PATH of fake commands for tests that run the project's shell scripts for real
(tools/container_engine.sh, .ci/run): each fake appends its command line to $CALLS, then runs its
body; the few real tools a script reads with are linked beside them."""

from __future__ import annotations

import shutil
from pathlib import Path


def fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f'#!/bin/bash\necho "{name} $*" >> "$CALLS"\n{body}\n')
    path.chmod(0o755)


def link_real(bin_dir: Path, tools: tuple[str, ...]) -> None:
    for tool in tools:
        (bin_dir / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
