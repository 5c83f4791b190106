"""What a tool prints when run directly, outside make."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_a_tool_run_directly_prints_no_node_banner_as_byte_strings(tmp_path) -> None:
    """`python -m tools.synth` outside make once printed jsii's Node 20 end-of-life banner as
    b'!!...' lines: the tools put the venv's Node 24 first on PATH, as the Makefile does, and
    nothing silences the warning (no JSII_SILENCE_* variable in the environment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JSII_SILENCE")}
    done = subprocess.run(
        [sys.executable, "-m", "tools.synth", "--env", "dev", "--out", str(tmp_path / "out")],
        cwd=Path(__file__).resolve().parents[2], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "b'!!" not in done.stdout + done.stderr
    assert "end-of-life" not in done.stdout + done.stderr
