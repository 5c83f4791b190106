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


def test_synth_prints_each_warning_once_saying_what_to_do(tmp_path) -> None:
    """Issue 32: synth of a config with an SLO no concurrency meets printed each warning twice
    (CDK's validation report of the construct annotation, then tools.synth's own copy), with an
    "Acknowledge with 'Annotation::scaling:slo-unmet-0'" that nothing in the config explains.
    The product's warnings are the plan's now, each once, each saying what to do."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "config" / "dev.yaml").read_text()
    # dev's canary keeps slos: [] (accepted); the primary lists both SLOs again
    mistaken = text.replace(
        "primary: {min_capacity: 1, max_capacity: 2, target_tracking: {slos: []}}",
        "primary: {min_capacity: 1, max_capacity: 2}",
    ).replace("  repository_name: mangaassist-vllm-dev", "  # repository_name: (left out)")
    assert "primary: {min_capacity: 1, max_capacity: 2}" in mistaken
    assert "# repository_name" in mistaken
    config = tmp_path / "dev.yaml"
    config.write_text(mistaken)
    done = subprocess.run(
        [sys.executable, "-m", "tools.synth", "--env", "dev", "--config", str(config),
         "--out", str(tmp_path / "out")],
        cwd=root, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Acknowledge with" not in out and "[ack:" not in out
    for slo in ("ttft_p50", "latency_p99"):
        said = f"scaling.variants.primary.target_tracking.slos lists {slo}"
        assert out.count(said) == 1, out
    assert "scaling.variants.canary.target_tracking.slos lists" not in out
    assert out.count("To accept it: remove latency_p99 from") == 1
    assert out.count("the model-preparation job's role may pull no image") == 1
    assert "Set image.repository_name" in out
