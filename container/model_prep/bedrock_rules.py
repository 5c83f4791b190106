"""What Amazon Bedrock Custom Model Import takes, checked against a model directory: one rule per
documented constraint, each failure naming the file and the field.

Used by the package build (container/model_prep/bedrock_package.py: nothing that fails is
published), by ``make bedrock-import`` before any import job is created (tools/bedrock_import.py)
and by the tests (``make test`` checks the tiny model's package on the local S3 API). Standard
library only: safetensors headers are read by hand (an 8-byte little-endian length, then a JSON
header naming each tensor's dtype, shape and offsets; safetensors' own format description,
https://huggingface.co/docs/safetensors/index "Format"), so a check needs no torch.

What AWS documents, and the reading chosen here:

- "Import a customized model into Amazon Bedrock" (Bedrock User Guide,
  https://docs.aws.amazon.com/bedrock/latest/userguide/model-customization-import-model.html;
  the product brief's table, seeds 002 section 12, "validated 2026-03-25", copies it):
  the weights in Hugging Face format, as ``.safetensors``; ``config.json``,
  ``tokenizer_config.json``, ``tokenizer.json``, ``tokenizer.model``; the architectures below;
  imported model under 200 GB for text and 100 GB for multimodal; context length under 128K;
  transformers 4.51.3 "when fine-tuning for import compatibility"; embedding models are not
  imported; no batch inference and no CloudFormation.
- Sizes: the page says "GB" without saying 10^9 or 2^30; the smaller reading (10^9) is taken.
- Context: "128K" is read as 131,072 tokens (what Llama 3.1's 128K context is), the field read
  is ``max_position_embeddings``; anything above is refused.
- ``tokenizer.model`` (a SentencePiece model): the page lists it beside tokenizer.json, but the
  Llama 3 family, which the page lists as supported, ships no tokenizer.model (its tokenizer is
  tokenizer.json only). So it is required when the tokenizer class is a slow SentencePiece one
  (it cannot load without it) and whenever the source shipped one (it is then copied).
- Quantized weights: the page asks for Hugging Face weights and names no quantized format; the
  pessimistic reading refuses any ``quantization_config`` and any tensor that is not
  BF16, F16 or F32 (packed int4 weights are I32/U8 tensors).
- transformers 4.51.3: the pessimistic reading is that Bedrock's loader is that version, so
  ``config.json`` must carry the keys 4.51.3 reads (``torch_dtype``; ``rope_theta`` rather than
  transformers 5's ``rope_parameters``) and ``tokenizer_config.json`` a tokenizer class 4.51.3
  has (transformers 5 writes ``TokenizersBackend``, which 4.51.3 cannot load).
- ``generation_config.json``: not in the page's required list but in its example layout (and
  the brief's); required here, so a model's stop tokens are the ones it was trained with.
- A chat template: an imported model answers the OpenAI chat-completion body through InvokeModel
  (seeds 002 section 12), and chat messages become a prompt through the model's own template; a
  model without one is refused here, for this product, whose clients send chat messages.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Architectures (config.json ``architectures[0]``) Custom Model Import lists, with their kind:
#: the size limit differs for multimodal ones. Llama 2/3/3.1/3.2/3.3 and Mllama, Mistral,
#: Mixtral, Flan-T5, GPTBigCode, Qwen2/2.5/2-VL/2.5-VL/3, GPT-OSS (module docstring's page).
SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "text",
    "MllamaForConditionalGeneration": "multimodal",
    "MistralForCausalLM": "text",
    "MixtralForCausalLM": "text",
    "T5ForConditionalGeneration": "text",
    "GPTBigCodeForCausalLM": "text",
    "Qwen2ForCausalLM": "text",
    "Qwen2VLForConditionalGeneration": "multimodal",
    "Qwen2_5_VLForConditionalGeneration": "multimodal",
    "Qwen3ForCausalLM": "text",
    "Qwen3MoeForCausalLM": "text",
    "GptOssForCausalLM": "text",
}
#: Imported model size limits, bytes (10^9 per GB: the smaller reading).
MAX_BYTES = {"text": 200 * 10**9, "multimodal": 100 * 10**9}
MAX_CONTEXT_TOKENS = 131_072
#: The transformers version the page names; config.json's ``transformers_version`` above it is
#: refused (a newer writer's keys may not be read).
TRANSFORMERS_VERSION = "4.51.3"
#: Unquantized tensor dtypes (safetensors header names) and their config.json ``torch_dtype``.
WEIGHT_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
#: Files every imported model needs (module docstring).
REQUIRED_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
)
#: Pickled weights: never imported (the page asks for safetensors), never packaged.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
#: Tokenizer classes transformers 4.51.3 has (tokenizer_config.json ``tokenizer_class``) for the
#: supported families; the slow SentencePiece ones need tokenizer.model.
FAST_TOKENIZERS = {
    "PreTrainedTokenizerFast",
    "LlamaTokenizerFast",
    "CodeLlamaTokenizerFast",
    "GPT2TokenizerFast",
    "Qwen2TokenizerFast",
    "T5TokenizerFast",
    "GPTBigCodeTokenizerFast",
}
SENTENCEPIECE_TOKENIZERS = {"LlamaTokenizer", "CodeLlamaTokenizer", "T5Tokenizer"}
#: A safetensors header larger than this is not one (the format caps it at 100 MB).
MAX_HEADER_BYTES = 100 * 2**20

#: The package's place beside its release: ``<artifact prefix>/<PACKAGE_FORMAT>/<version>/``,
#: one directory per model under the upload (``base/`` and ``merged/<adapter>/``), each the S3
#: prefix one import job reads. A change of the package recipe is a new format name, so one
#: (format, release version) always names the same bytes.
PACKAGE_FORMAT = "bedrock-v1"
BASE_MODEL_DIR = "base"
MERGED_DIR = "merged"


class BedrockPackageError(ValueError):
    """A model directory Custom Model Import would refuse (or this product would); the message
    names each file and field."""


@dataclass(frozen=True)
class ModelFacts:
    """What a checked model directory is, for the package manifest and the import."""

    architecture: str
    kind: str
    dtype: str
    size_bytes: int
    max_position_embeddings: int
    files: int

    def to_json(self) -> dict[str, Any]:
        return {
            "architecture": self.architecture,
            "kind": self.kind,
            "dtype": self.dtype,
            "size_bytes": self.size_bytes,
            "max_position_embeddings": self.max_position_embeddings,
            "files": self.files,
        }


def package_prefix(artifact_prefix: str) -> str:
    """Where Bedrock packages live in the artifact bucket, beside the releases."""
    return f"{artifact_prefix.strip('/')}/{PACKAGE_FORMAT}" if artifact_prefix else PACKAGE_FORMAT


def model_dirs(adapters: list[str] | tuple[str, ...]) -> dict[str, str]:
    """Model name -> its directory in the package: the base, and one merged model per adapter
    (Custom Model Import takes whole models, not adapters: docs/bedrock.md)."""
    if BASE_MODEL_DIR in adapters:
        raise BedrockPackageError(f"adapter {BASE_MODEL_DIR!r}: the name of the base model's model")
    return {BASE_MODEL_DIR: BASE_MODEL_DIR, **{a: f"{MERGED_DIR}/{a}" for a in adapters}}


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file; raises :class:`BedrockPackageError` naming it."""
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise BedrockPackageError(f"{path.name}: not a safetensors file (shorter than 8 bytes)")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES:
            raise BedrockPackageError(f"{path.name}: not a safetensors file (header {length} B)")
        raw = f.read(length)
    try:
        header = json.loads(raw)
    except ValueError as exc:
        raise BedrockPackageError(f"{path.name}: not a safetensors file: {exc}") from exc
    if not isinstance(header, dict):
        raise BedrockPackageError(f"{path.name}: not a safetensors file (header is not an object)")
    return header


def _json(path: Path, problems: list[str]) -> dict[str, Any] | None:
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        problems.append(f"{path.name}: not JSON: {exc}")
        return None
    if not isinstance(body, dict):
        problems.append(f"{path.name}: not a JSON object")
        return None
    return body


def _version_tuple(text: str) -> tuple[int, ...] | None:
    parts = []
    for part in text.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            return None
        parts.append(int(digits))
    return tuple(parts)


def _config_problems(config: dict[str, Any]) -> tuple[list[str], str, int]:
    out = []
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else ""
    if not arch:
        out.append("config.json: architectures: missing (Bedrock detects the model from it)")
    elif arch not in SUPPORTED_ARCHITECTURES:
        out.append(
            f"config.json: architectures: {arch} is not an architecture Custom Model Import "
            f"supports ({', '.join(sorted(SUPPORTED_ARCHITECTURES))})"
        )
    if config.get("quantization_config"):
        method = config["quantization_config"].get("quant_method", "?")
        out.append(
            f"config.json: quantization_config: quantized weights ({method}); Custom Model "
            "Import takes unquantized Hugging Face weights (bf16, fp16 or fp32)"
        )
    dtype = config.get("torch_dtype")
    if dtype not in WEIGHT_DTYPES.values():
        found = f"{dtype!r}" if dtype is not None else "missing"
        also = f" (transformers 5 wrote dtype={config['dtype']!r})" if "dtype" in config else ""
        out.append(
            f"config.json: torch_dtype: {found}{also}; transformers {TRANSFORMERS_VERSION} "
            f"reads torch_dtype, one of {sorted(WEIGHT_DTYPES.values())}"
        )
    if "rope_parameters" in config and "rope_theta" not in config:
        out.append(
            "config.json: rope_parameters: transformers 5's form; transformers "
            f"{TRANSFORMERS_VERSION} reads rope_theta (and rope_scaling), and would run the "
            "default RoPE base instead"
        )
    written = str(config.get("transformers_version", ""))
    wanted = _version_tuple(TRANSFORMERS_VERSION)
    got = _version_tuple(written)
    if got is None or wanted is None or got > wanted:
        out.append(
            f"config.json: transformers_version: {written or 'missing'}; Bedrock reads models "
            f"as transformers {TRANSFORMERS_VERSION} does (write the config in that form)"
        )
    context = config.get("max_position_embeddings")
    if not isinstance(context, int) or context < 1:
        out.append("config.json: max_position_embeddings: missing (the context length)")
        context = 0
    elif context > MAX_CONTEXT_TOKENS:
        out.append(
            f"config.json: max_position_embeddings: {context} tokens; Custom Model Import "
            f"takes a context up to 128K ({MAX_CONTEXT_TOKENS})"
        )
    return out, arch, context


def _tokenizer_problems(root: Path, tok: dict[str, Any]) -> list[str]:
    out = []
    cls = tok.get("tokenizer_class")
    if cls in SENTENCEPIECE_TOKENIZERS and not (root / "tokenizer.model").is_file():
        out.append(
            f"tokenizer.model: missing; tokenizer_config.json names {cls}, a SentencePiece "
            "tokenizer that cannot load without it"
        )
    elif cls not in FAST_TOKENIZERS | SENTENCEPIECE_TOKENIZERS:
        out.append(
            f"tokenizer_config.json: tokenizer_class: {cls!r} is not a class transformers "
            f"{TRANSFORMERS_VERSION} loads for these models "
            f"({', '.join(sorted(FAST_TOKENIZERS | SENTENCEPIECE_TOKENIZERS))})"
        )
    if not tok.get("chat_template") and not (root / "chat_template.jinja").is_file():
        out.append(
            "tokenizer_config.json: chat_template: missing; chat requests are rendered with "
            "the model's own template"
        )
    return out


def _weight_problems(root: Path, shards: list[Path]) -> tuple[list[str], set[str]]:
    out: list[str] = []
    dtypes: set[str] = set()
    for shard in shards:
        try:
            header = safetensors_header(shard)
        except BedrockPackageError as exc:
            out.append(str(exc))
            continue
        bad = sorted(
            {
                f"{name} ({info.get('dtype')})"
                for name, info in header.items()
                if name != "__metadata__"
                and isinstance(info, dict)
                and info.get("dtype") not in WEIGHT_DTYPES
            }
        )
        if bad:
            out.append(
                f"{shard.name}: tensors that are not bf16/fp16/fp32 (quantized weights?): "
                + ", ".join(bad[:5])
                + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
            )
        dtypes |= {
            str(info.get("dtype"))
            for name, info in header.items()
            if name != "__metadata__" and isinstance(info, dict)
        }
    index = root / "model.safetensors.index.json"
    if len(shards) > 1 and not index.is_file():
        out.append(f"{index.name}: missing; {len(shards)} safetensors shards need their index")
    if index.is_file():
        body = _json(index, out)
        weight_map = (body or {}).get("weight_map")
        if not isinstance(weight_map, dict):
            out.append(f"{index.name}: weight_map: missing")
        else:
            named = set(weight_map.values())
            present = {s.name for s in shards}
            for name in sorted(named - present):
                out.append(f"{index.name}: weight_map: names {name}, which is not in the model")
            for name in sorted(present - named):
                out.append(f"{name}: not in {index.name}'s weight_map")
    return out, dtypes


def problems(root: Path) -> tuple[list[str], ModelFacts | None]:
    """Every reason Custom Model Import (or this product) would refuse the model at ``root``,
    one line each naming the file and field, and the model's facts when there is none."""
    out: list[str] = []
    if not root.is_dir():
        return [f"{root}: not a directory"], None
    for name in REQUIRED_FILES:
        if not (root / name).is_file():
            out.append(f"{name}: missing (Custom Model Import needs it)")
    files = sorted(p for p in root.rglob("*") if p.is_file())
    for p in files:
        if p.suffix in PICKLE_SUFFIXES:
            out.append(f"{p.relative_to(root)}: pickled weights; only .safetensors are imported")
    shards = sorted(root.glob("*.safetensors"))
    if not shards:
        out.append("*.safetensors: no weights (Custom Model Import reads safetensors only)")
    arch, context = "", 0
    config = _json(root / "config.json", out) if (root / "config.json").is_file() else None
    if config is not None:
        found, arch, context = _config_problems(config)
        out += found
    tok_path = root / "tokenizer_config.json"
    tok = _json(tok_path, out) if tok_path.is_file() else None
    if tok is not None:
        out += _tokenizer_problems(root, tok)
    if (root / "generation_config.json").is_file():
        _json(root / "generation_config.json", out)
    weight_problems, dtypes = _weight_problems(root, shards)
    out += weight_problems
    declared = (config or {}).get("torch_dtype")
    stored = {WEIGHT_DTYPES[d] for d in dtypes if d in WEIGHT_DTYPES}
    if declared in WEIGHT_DTYPES.values() and stored and stored != {declared}:
        out.append(
            f"config.json: torch_dtype: {declared}, but the weights are {', '.join(sorted(stored))}"
        )
    kind = SUPPORTED_ARCHITECTURES.get(arch, "text")
    size = sum(p.stat().st_size for p in files)
    if size > MAX_BYTES[kind]:
        out.append(
            f"{root.name}: {size / 10**9:.1f} GB; Custom Model Import takes a {kind} model up "
            f"to {MAX_BYTES[kind] // 10**9} GB"
        )
    if out:
        return out, None
    return [], ModelFacts(arch, kind, str(declared), size, context, len(files))


def check(root: Path, *, name: str | None = None) -> ModelFacts:
    """The facts of the model at ``root``; raises :class:`BedrockPackageError` naming it and
    every problem."""
    found, facts = problems(root)
    if found or facts is None:
        raise BedrockPackageError(
            f"{name or root.name}: Custom Model Import would refuse it: " + "; ".join(found)
        )
    return facts


def check_package(root: Path, adapters: list[str] | tuple[str, ...]) -> dict[str, ModelFacts]:
    """Every model of a package (the base and one merged model per adapter); one error naming
    each model and each problem."""
    facts: dict[str, ModelFacts] = {}
    failures = []
    for name, rel in model_dirs(adapters).items():
        try:
            facts[name] = check(root / rel, name=rel)
        except BedrockPackageError as exc:
            failures.append(str(exc))
    if failures:
        raise BedrockPackageError(" | ".join(failures))
    return facts


def manifest_problems(manifest: dict[str, Any], name: str) -> list[str]:
    """Why model ``name`` of a published package (its ``manifest.json``, as the package build
    wrote it) cannot be imported, read from the manifest alone (no download): a model the
    package lacks, required files it does not list, and its recorded facts against the rules
    (architecture, dtype, size, context). make bedrock-import runs this before any import job."""
    record = (manifest.get("models") or {}).get(name)
    if not isinstance(record, dict):
        return [
            f"models.{name}: not in the package (it has {sorted(manifest.get('models') or {})})"
        ]
    rel = str(record.get("path", ""))
    files = set((manifest.get("files") or {}).keys())
    out = [
        f"{rel}/{req}: not in the package's manifest"
        for req in REQUIRED_FILES
        if f"{rel}/{req}" not in files
    ]
    if not any(f.startswith(f"{rel}/") and f.endswith(".safetensors") for f in files):
        out.append(f"{rel}/*.safetensors: no weights in the package's manifest")
    arch = record.get("architecture")
    if arch not in SUPPORTED_ARCHITECTURES:
        out.append(f"models.{name}.architecture: {arch!r} is not one Custom Model Import supports")
    if record.get("dtype") not in WEIGHT_DTYPES.values():
        out.append(f"models.{name}.dtype: {record.get('dtype')!r} is not bf16, fp16 or fp32")
    kind = SUPPORTED_ARCHITECTURES.get(str(arch), "text")
    size = record.get("size_bytes")
    if not isinstance(size, int) or size > MAX_BYTES[kind]:
        out.append(f"models.{name}.size_bytes: {size} is over the {kind} limit ({MAX_BYTES[kind]})")
    context = record.get("max_position_embeddings")
    if not isinstance(context, int) or context > MAX_CONTEXT_TOKENS:
        out.append(f"models.{name}.max_position_embeddings: {context} is over {MAX_CONTEXT_TOKENS}")
    return out
