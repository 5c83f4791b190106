"""model_prep on the tiny model: adapter validation (a bad rank fails), manifest checksums,
AWQ quantization with llmcompressor and the quality gate (in the quantization venv)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _serving_support import REPO, adapters_arg

from container.serving.entrypoint import StartupError, verify_manifest

QUANT_PYTHON = os.environ.get("QUANT_PYTHON", str(REPO / ".venv-quant" / "bin" / "python"))


def prepare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "container.model_prep.prepare", *args],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip


def test_manifest_lists_every_file_with_sources_and_ranks(model_dir: Path) -> None:
    manifest = json.loads((model_dir / "manifest.json").read_text())
    files = set(manifest["files"])
    assert "base/config.json" in files and "lora/jp_style/adapter_model.safetensors" in files
    assert all(len(h) == 64 for h in manifest["files"].values())
    assert {a["rank"] for a in manifest["adapters"].values()} == {16}
    assert manifest["quantization"] == "none" and manifest["base"]["revision"] == "local"
    assert verify_manifest(model_dir / "manifest.json", model_dir) == len(files)


def test_tampered_file_fails_the_manifest_check(model_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    with (copy / "base" / "config.json").open("a") as f:
        f.write(" ")
    with pytest.raises(StartupError, match=r"base/config\.json: checksum mismatch"):
        verify_manifest(copy / "manifest.json", copy)


def test_adapter_rank_above_max_lora_rank_fails_validation(tiny_src: Path, tmp_path: Path) -> None:
    bad = f"{adapters_arg(tiny_src)},too_wide={tiny_src / 'bad_adapters' / 'too_wide'}"
    r = prepare("--base-model", str(tiny_src / "base"), "--adapters", bad, "--quantization",
                "none", "--max-lora-rank", "16", "--workdir", str(tmp_path / "w"),
                "--out", str(tmp_path / "out"))  # fmt: skip
    assert r.returncode == 1
    assert "adapter too_wide: rank 32 > MAX_LORA_RANK 16" in r.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_mixed_ranks_fail_even_within_max_lora_rank(tiny_src: Path, tmp_path: Path) -> None:
    bad = f"{adapters_arg(tiny_src)},too_wide={tiny_src / 'bad_adapters' / 'too_wide'}"
    r = prepare("--base-model", str(tiny_src / "base"), "--adapters", bad, "--quantization",
                "none", "--max-lora-rank", "32", "--workdir", str(tmp_path / "w"),
                "--out", str(tmp_path / "out"))  # fmt: skip
    assert r.returncode == 1 and "adapters must share one rank" in r.stderr


def test_adapter_for_another_base_or_missing_module_fails(tiny_src: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(tiny_src / "adapters" / "jp_style", other)
    cfg = json.loads((other / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = "meta-llama/Llama-3-8B"
    cfg["target_modules"] = ["q_proj", "gate_up_fused"]
    (other / "adapter_config.json").write_text(json.dumps(cfg))
    r = prepare("--base-model", str(tiny_src / "base"), "--adapters", f"other={other}",
                "--quantization", "none", "--workdir", str(tmp_path / "w"),
                "--out", str(tmp_path / "out"))  # fmt: skip
    assert r.returncode == 1
    assert "trained on 'meta-llama/Llama-3-8B'" in r.stderr
    assert "['gate_up_fused'] not in the base model" in r.stderr


def test_awq_quantization_and_quality_gate(tiny_src: Path, tmp_path: Path) -> None:
    assert Path(QUANT_PYTHON).is_file(), "the quantization venv is missing (make quant-venv)"
    out = tmp_path / "out"
    r = prepare("--base-model", str(tiny_src / "base"), "--adapters", adapters_arg(tiny_src),
                "--quantization", "awq", "--min-agreement", "0.5",
                "--calibration", str(tiny_src / "calibration.jsonl"),
                "--heldout", str(tiny_src / "heldout.jsonl"), "--quant-python", QUANT_PYTHON,
                "--workdir", str(tmp_path / "w"), "--out", str(out))  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    print(r.stdout)  # the gate's figures, visible with -s
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["quantization"].startswith("awq-w4a16")
    gate = manifest["quality_gate"]
    assert gate["passed"] and 0.5 <= gate["next_token_agreement"] <= 1.0
    config = json.loads((out / "base" / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
    # The same gate fails the build when the threshold is above what the model reaches.
    strict = subprocess.run(
        [QUANT_PYTHON, str(REPO / "container/model_prep/quality_gate.py"),
         "--reference", str(tiny_src / "base"), "--candidate", str(out / "base"),
         "--heldout", str(tiny_src / "heldout.jsonl"), "--min-agreement", "0.999"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert strict.returncode == 1 and "quality gate FAILED" in strict.stderr
    # A source that is already quantized is not quantized again.
    again = prepare("--base-model", str(out / "base"), "--quantization", "awq",
                    "--calibration", str(tiny_src / "calibration.jsonl"),
                    "--heldout", str(tiny_src / "heldout.jsonl"), "--quant-python", QUANT_PYTHON,
                    "--workdir", str(tmp_path / "w2"), "--out", str(tmp_path / "out2"))  # fmt: skip
    assert again.returncode == 0 and "skipped: source already quantized" in again.stdout
