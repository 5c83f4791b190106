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
from _serving_support import ADAPTERS, REPO, adapters_arg

from container.model_prep import sources
from container.serving import settings as settings_mod
from container.serving.entrypoint import StartupError, validate, verify_manifest

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
    # the version the config gave (stable names, versions in the artifact), None where none was
    assert {n: a["version"] for n, a in manifest["adapters"].items()} == {
        "manga_domain": "v3", "general_support": None, "jp_style": None,
    }  # fmt: skip
    assert manifest["quantization"] == "none" and manifest["base"]["revision"] == "local"
    assert verify_manifest(model_dir / "manifest.json", model_dir) == len(files)


def test_adapter_versions_name_listed_adapters_and_valid_versions() -> None:
    from container.model_prep.sources import parse_adapter_versions

    known = {"a": object(), "b": object()}
    assert parse_adapter_versions("a=v3, b=2026.11", known=known) == {"a": "v3", "b": "2026.11"}
    for bad, why in (("c=v1", "not an adapter"), ("a=", "expected name=version"),
                     ("a=../v1", "expected name=version")):  # fmt: skip
        with pytest.raises(ValueError, match=why):
            parse_adapter_versions(bad, known=known)


def test_tampered_file_fails_the_manifest_check(model_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    with (copy / "base" / "config.json").open("a") as f:
        f.write(" ")
    with pytest.raises(StartupError, match=r"base/config\.json: sha256 differs from the manifest"):
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
    # Each adapter is scored on both bases; the floor applies to each, and the line names it.
    per_adapter = gate["adapters"]
    assert sorted(per_adapter) == sorted(ADAPTERS)
    floor = min(f["next_token_agreement"] for f in per_adapter.values()) + 1e-6
    lowest = min(per_adapter, key=lambda n: per_adapter[n]["next_token_agreement"])
    adapters = ",".join(f"{n}={out / 'lora' / n}" for n in ADAPTERS)
    named = subprocess.run(
        [QUANT_PYTHON, str(REPO / "container/model_prep/quality_gate.py"),
         "--reference", str(tiny_src / "base"), "--candidate", str(out / "base"),
         "--heldout", str(tiny_src / "heldout.jsonl"), "--min-agreement", str(floor),
         "--adapters", adapters],
        capture_output=True, text=True,
    )  # fmt: skip
    assert named.returncode == 1
    assert f"quality gate FAILED: adapter {lowest}: next-token agreement" in named.stderr
    report = json.loads((out / "quality_report.json").read_text())
    assert report["base"]["adapters"] == per_adapter
    # A source that is already quantized is not quantized again.
    again = prepare("--base-model", str(out / "base"), "--quantization", "awq",
                    "--calibration", str(tiny_src / "calibration.jsonl"),
                    "--heldout", str(tiny_src / "heldout.jsonl"), "--quant-python", QUANT_PYTHON,
                    "--workdir", str(tmp_path / "w2"), "--out", str(tmp_path / "out2"))  # fmt: skip
    assert again.returncode == 0 and "skipped: source already quantized" in again.stdout


def test_extra_adapter_directory_not_in_the_manifest_is_refused(
    model_dir: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    shutil.copytree(copy / "lora" / "jp_style", copy / "lora" / "smuggled")
    with pytest.raises(StartupError, match=r"lora/smuggled/adapter_config\.json: not in the"):
        verify_manifest(copy / "manifest.json", copy)


def _settings(model: Path, **extra: str) -> settings_mod.Settings:
    return settings_mod.load({"MODEL_PATH": str(model / "base"), "LORA_PATH": str(model / "lora"),
                              "SERVING_DEVICE": "cpu", **extra})  # fmt: skip


def test_missing_manifest_is_fatal_when_manifest_path_is_set(
    model_dir: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "model"
    shutil.copytree(model_dir, copy)
    (copy / "manifest.json").unlink()
    with pytest.raises(StartupError, match=r"MANIFEST_PATH .* is missing"):
        validate(_settings(copy, MANIFEST_PATH=str(copy / "manifest.json")))
    assert validate(_settings(copy))["manifest_files_checked"] == 0  # unset: local runs only


def test_model_path_outside_the_manifest_directory_is_refused(
    model_dir: Path, tmp_path: Path
) -> None:
    other = tmp_path / "elsewhere"
    shutil.copytree(model_dir / "base", other / "base")
    s = _settings(other, MANIFEST_PATH=str(model_dir / "manifest.json"),
                  LORA_PATH=str(model_dir / "lora"))  # fmt: skip
    with pytest.raises(StartupError, match=r"MODEL_PATH .* is outside the manifest's directory"):
        validate(s)


@pytest.mark.parametrize("name", ["../base", "/etc", "a/b", "..", "a.b", ""])
def test_adapter_names_that_could_be_paths_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match=r"adapter name|expected name=source"):
        sources.parse_adapters(f"{name}=s3://bucket/adapters/x")


def test_prepare_refuses_a_traversing_adapter_name(tiny_src: Path, tmp_path: Path) -> None:
    r = prepare("--base-model", str(tiny_src / "base"), "--adapters",
                f"../base={tiny_src / 'adapters' / 'jp_style'}", "--quantization", "none",
                "--workdir", str(tmp_path / "w"), "--out", str(tmp_path / "out"))  # fmt: skip
    assert r.returncode == 1 and "adapter name '../base' must match" in r.stderr
    assert not (tmp_path / "out").exists()


class FakeS3:
    """The two S3 calls fetch_s3 makes, over a fixed listing (keys as S3 returns them)."""

    def __init__(self, keys: list[str]) -> None:
        self.keys, self.downloaded = keys, []

    def get_paginator(self, name: str) -> FakeS3:
        assert name == "list_objects_v2"
        return self

    def paginate(self, Bucket: str, Prefix: str) -> list[dict[str, object]]:
        return [{"Contents": [{"Key": k} for k in self.keys if k.startswith(Prefix)]}]

    def download_file(self, bucket: str, key: str, target: str) -> None:
        self.downloaded.append(target)
        Path(target).write_text(key)


@pytest.mark.parametrize("key", ["models/a/../../escape.json", "models/a/../../../etc/x",
                                 "models/a//..//..//x"])  # fmt: skip
def test_s3_keys_resolving_outside_the_destination_fail_the_build(tmp_path: Path, key: str) -> None:
    s3 = FakeS3(["models/a/config.json", key])
    dest = tmp_path / "dest"
    with pytest.raises(ValueError, match="resolves outside"):
        sources.fetch_s3(s3, sources.parse_source("s3://bucket/models/a"), dest)
    assert all(Path(t).resolve().is_relative_to(dest.resolve()) for t in s3.downloaded)
    assert not (tmp_path / "escape.json").exists()


def test_s3_keys_inside_the_destination_are_fetched(tmp_path: Path) -> None:
    s3 = FakeS3(["models/a/config.json", "models/a/sub/w.safetensors", "models/b/other"])
    count = sources.fetch_s3(s3, sources.parse_source("s3://bucket/models/a"), tmp_path)
    assert count == 2 and (tmp_path / "sub" / "w.safetensors").read_text().endswith("w.safetensors")


def test_local_source_symlinking_outside_itself_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (tmp_path / "secret").write_text("x")
    (src / "tokenizer.json").symlink_to(tmp_path / "secret")
    with pytest.raises(ValueError, match="links outside the source directory"):
        sources.fetch(sources.parse_source(str(src)), tmp_path / "dest")
