"""The Bedrock package of the tiny model's release (container/model_prep/bedrock_package.py), built
from the release inputs by its own entry point and published to an S3 API served on this machine
(moto's server), then read back through the same verified fetch a release uses and checked
against every Custom Model Import rule (container/model_prep/bedrock_rules.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _serving_support import ADAPTERS, BUCKET, CREDS, REPO, s3_client

from container.model_prep import artifact, bedrock_rules
from container.model_prep.release import build_inputs

PACKAGES = bedrock_rules.package_prefix("models")


def write_inputs(tiny_src: Path, path: Path) -> str:
    inputs = build_inputs(
        base_source=f"local://{tiny_src / 'base'}", base_revision="", quantization="awq",
        min_agreement=0.5, max_lora_rank=16,
        adapters=[(n, f"local://{tiny_src / 'adapters' / n}", "v1", 16) for n in ADAPTERS],
        calibration=tiny_src / "calibration.jsonl", heldout=tiny_src / "heldout.jsonl",
    )  # fmt: skip
    path.write_text(json.dumps(inputs.to_json()))
    return inputs.version


def package(url: str, inputs: Path, work: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "container.model_prep.bedrock_package", "train", "--local",
         "--inputs", str(inputs), "--publish", f"s3://{BUCKET}/models", "--endpoint-url", url,
         "--workdir", str(work)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, **CREDS, "PYTHONPATH": str(REPO)},
    )  # fmt: skip


def test_the_package_is_published_once_and_every_model_passes_the_import_rules(
    s3_api, tiny_src, tmp_path
) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from container.model_prep.lora_delta import deltas

    version = write_inputs(tiny_src, tmp_path / "inputs.json")
    first = package(s3_api, tmp_path / "inputs.json", tmp_path / "w1")
    assert first.returncode == 0, first.stderr[-3000:]
    assert f"published s3://{BUCKET}/{PACKAGES}/{version}/ (4 model(s))" in first.stdout

    where = artifact.ArtifactLocation(BUCKET, PACKAGES)
    fetched = artifact.fetch(s3_client(s3_api), where, version, tmp_path / "fetched")
    assert fetched["format"] == bedrock_rules.PACKAGE_FORMAT
    assert fetched["release"] == f"s3://{BUCKET}/models/{version}"
    assert sorted(fetched["models"]) == sorted(["base", *ADAPTERS])
    root = tmp_path / "fetched"
    facts = bedrock_rules.check_package(root, ADAPTERS)
    assert {f.architecture for f in facts.values()} == {"LlamaForCausalLM"}
    assert {f.dtype for f in facts.values()} == {"bfloat16"}

    # Unquantized bf16 base; each merged model is the base plus exactly its adapter's delta.
    base = load_file(str(root / "base" / "model.safetensors"))
    assert {t.dtype for t in base.values() if t.is_floating_point()} == {torch.bfloat16}
    original = load_file(str(tiny_src / "base" / "model.safetensors"))
    lora = deltas(tiny_src / "adapters" / "manga_domain")
    module, (a, b, scale) = sorted(lora.items())[0]
    merged = load_file(str(root / "merged" / "manga_domain" / "model.safetensors"))
    expected = (original[f"{module}.weight"].float() + (b.float() @ a.float()) * scale).bfloat16()
    assert torch.equal(merged[f"{module}.weight"], expected)
    assert not torch.equal(merged[f"{module}.weight"], base[f"{module}.weight"])
    untouched = next(k for k in base if "embed_tokens" in k)
    assert torch.equal(merged[untouched], base[untouched])

    # The config and tokenizer in transformers 4.51.3's form, still loadable by this one.
    config = json.loads((root / "base" / "config.json").read_text())
    assert config["torch_dtype"] == "bfloat16" and "rope_parameters" not in config
    assert config["transformers_version"] == bedrock_rules.TRANSFORMERS_VERSION
    tok_config = json.loads((root / "base" / "tokenizer_config.json").read_text())
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert tok_config["chat_template"] == (tiny_src / "base" / "chat_template.jinja").read_text()
    tok = AutoTokenizer.from_pretrained(root / "merged" / "jp_style")
    rendered = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert "<|user|>" in rendered

    again = package(s3_api, tmp_path / "inputs.json", tmp_path / "w2")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already published: nothing to do" in again.stdout
    assert "bedrock-package: fetch" not in again.stdout


def test_an_adapter_changed_since_the_release_publishes_nothing(s3_api, tiny_src, tmp_path):
    """The package is the release's: an adapter whose files differ from the ones the version was
    derived from is refused, named, before any weight is written."""
    import shutil

    copy = tmp_path / "src"
    shutil.copytree(tiny_src, copy)
    version = write_inputs(copy, tmp_path / "inputs.json")
    (copy / "adapters" / "jp_style" / "adapter_config.json").write_text(
        (copy / "adapters" / "jp_style" / "adapter_config.json").read_text() + "\n"
    )
    done = package(s3_api, tmp_path / "inputs.json", tmp_path / "w")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("bedrock-package FAILED: adapter jp_style"), last
    assert "differs from the one the release version was derived from" in last
    listed = s3_client(s3_api).list_objects_v2(Bucket=BUCKET, Prefix=f"{PACKAGES}/{version}/")
    assert listed.get("KeyCount", 0) == 0
