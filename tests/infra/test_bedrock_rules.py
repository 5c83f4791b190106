"""Custom Model Import's rules (container/model_prep/bedrock_rules.py) on model directories written
here file by file: a good one passes with its facts, and each bad one is refused naming the file
and the field (the package build, CI and make bedrock-import all run these rules)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from container.model_prep import bedrock_rules as rules


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A real safetensors file (header + zeroed data) with the given dtypes and shapes."""
    width = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "U8": 1}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = width[dtype]
        for n in shape:
            size *= n
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def good_model(root: Path) -> Path:
    root.mkdir(parents=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "torch_dtype": "bfloat16",
        "rope_theta": 500000.0,
        "max_position_embeddings": 8192,
        "transformers_version": "4.51.3",
    }
    (root / "config.json").write_text(json.dumps(config))
    (root / "tokenizer.json").write_text("{}")
    (root / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": "{{ x }}"})
    )
    (root / "generation_config.json").write_text(json.dumps({"eos_token_id": 1}))
    write_safetensors(root / "model.safetensors", {"model.embed_tokens.weight": ("BF16", [8, 4])})
    return root


def edit(path: Path, **changes: object) -> None:
    body = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    path.write_text(json.dumps(body))


def refused(root: Path) -> str:
    with pytest.raises(rules.BedrockPackageError) as caught:
        rules.check(root)
    return str(caught.value)


def test_a_model_in_the_documented_form_passes_with_its_facts(tmp_path: Path) -> None:
    facts = rules.check(good_model(tmp_path / "m"))
    assert facts.architecture == "LlamaForCausalLM" and facts.kind == "text"
    assert facts.dtype == "bfloat16" and facts.max_position_embeddings == 8192
    assert facts.files == 5 and facts.size_bytes > 64


def test_a_missing_tokenizer_file_is_named(tmp_path: Path) -> None:
    root = good_model(tmp_path / "m")
    (root / "tokenizer.json").unlink()
    assert "tokenizer.json: missing (Custom Model Import needs it)" in refused(root)


def test_quantized_weights_are_refused_naming_the_config_field_and_the_tensors(
    tmp_path: Path,
) -> None:
    root = good_model(tmp_path / "m")
    edit(root / "config.json", quantization_config={"quant_method": "compressed-tensors"})
    write_safetensors(
        root / "model.safetensors",
        {
            "model.layers.0.mlp.down_proj.weight_packed": ("I32", [4, 2]),
            "model.layers.0.mlp.down_proj.weight_scale": ("BF16", [4, 1]),
        },
    )
    message = refused(root)
    assert "config.json: quantization_config: quantized weights (compressed-tensors)" in message
    assert "model.safetensors: tensors that are not bf16/fp16/fp32" in message
    assert "model.layers.0.mlp.down_proj.weight_packed (I32)" in message


def test_an_unsupported_architecture_is_named(tmp_path: Path) -> None:
    root = good_model(tmp_path / "m")
    edit(root / "config.json", architectures=["Gemma3ForCausalLM"])
    assert "config.json: architectures: Gemma3ForCausalLM is not an architecture" in refused(root)


def test_a_context_above_128k_is_named(tmp_path: Path) -> None:
    root = good_model(tmp_path / "m")
    edit(root / "config.json", max_position_embeddings=262_144)
    assert "config.json: max_position_embeddings: 262144 tokens" in refused(root)


def test_a_transformers_5_config_and_tokenizer_are_named_field_by_field(tmp_path: Path) -> None:
    """What the tiny model's source looks like (transformers 5.19): read by 4.51.3, its RoPE base
    and dtype would be lost and its tokenizer class would not load."""
    root = good_model(tmp_path / "m")
    edit(
        root / "config.json",
        torch_dtype=None,
        rope_theta=None,
        dtype="float32",
        rope_parameters={"rope_theta": 10000.0, "rope_type": "default"},
        transformers_version="5.19.0",
    )
    edit(root / "tokenizer_config.json", tokenizer_class="TokenizersBackend", chat_template=None)
    message = refused(root)
    assert "config.json: torch_dtype: missing (transformers 5 wrote dtype='float32')" in message
    assert "config.json: rope_parameters: transformers 5's form" in message
    assert "config.json: transformers_version: 5.19.0" in message
    assert "tokenizer_config.json: tokenizer_class: 'TokenizersBackend'" in message
    assert "tokenizer_config.json: chat_template: missing" in message


def test_a_sentencepiece_tokenizer_needs_its_model_file(tmp_path: Path) -> None:
    root = good_model(tmp_path / "m")
    edit(root / "tokenizer_config.json", tokenizer_class="LlamaTokenizer")
    assert "tokenizer.model: missing; tokenizer_config.json names LlamaTokenizer" in refused(root)
    (root / "tokenizer.model").write_bytes(b"sp")
    assert rules.check(root).files == 6


def test_pickled_weights_and_shards_without_their_index_are_named(tmp_path: Path) -> None:
    root = good_model(tmp_path / "m")
    (root / "pytorch_model.bin").write_bytes(b"pickle")
    write_safetensors(root / "model-00002-of-00002.safetensors", {"lm_head.weight": ("BF16", [8])})
    message = refused(root)
    assert "pytorch_model.bin: pickled weights; only .safetensors are imported" in message
    assert "model.safetensors.index.json: missing; 2 safetensors shards need their index" in message


def test_weights_of_another_dtype_than_the_config_says_are_named(tmp_path: Path) -> None:
    root = good_model(tmp_path / "m")
    write_safetensors(root / "model.safetensors", {"model.embed_tokens.weight": ("F32", [8, 4])})
    assert "config.json: torch_dtype: bfloat16, but the weights are float32" in refused(root)


def test_a_package_names_the_model_that_fails(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    good_model(root / "base")
    bad = good_model(root / "merged" / "jp_style")
    (bad / "generation_config.json").unlink()
    with pytest.raises(rules.BedrockPackageError) as caught:
        rules.check_package(root, ["jp_style"])
    assert str(caught.value).startswith("merged/jp_style: Custom Model Import would refuse it")
    assert "generation_config.json: missing" in str(caught.value)
    assert "base:" not in str(caught.value)


def test_the_package_sits_beside_the_releases_under_its_format() -> None:
    assert rules.package_prefix("models") == "models/bedrock-v1"
    assert rules.model_dirs(("a", "b")) == {"base": "base", "a": "merged/a", "b": "merged/b"}


def test_the_package_writes_a_transformers_5_source_in_the_form_the_rules_take(tmp_path) -> None:
    """What bedrock_package writes from the tiny model's transformers-5 files passes the config
    and tokenizer rules; a quantized source is refused naming the field."""
    from container.model_prep import bedrock_package as pkg

    source = {
        "architectures": ["LlamaForCausalLM"], "dtype": "float32", "transformers_version": "5.19.0",
        "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0},
        "max_position_embeddings": 8192,
    }  # fmt: skip
    config = pkg.config_for_import(source)
    assert config["torch_dtype"] == "bfloat16" and "dtype" not in config
    assert config["rope_theta"] == 500000.0
    assert config["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0}
    tok = pkg.tokenizer_config_for_import(
        {"backend": "tokenizers", "tokenizer_class": "TokenizersBackend",
         "extra_special_tokens": ["<|user|>"]}, "{{ messages }}",
    )  # fmt: skip
    assert tok == {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "additional_special_tokens": ["<|user|>"],
        "chat_template": "{{ messages }}",
    }
    root = good_model(tmp_path / "m")
    (root / "config.json").write_text(json.dumps(config))
    (root / "tokenizer_config.json").write_text(json.dumps(tok))
    assert rules.check(root).architecture == "LlamaForCausalLM"
    with pytest.raises(rules.BedrockPackageError, match=r"config\.json: quantization_config"):
        pkg.config_for_import({**source, "quantization_config": {"quant_method": "awq"}})
