"""Where the sizing gets a model's architecture: from the model, never from a copy beside it.

The capacity plan (weights, LoRA slots, KV bytes per token) is computed from the base model's
``config.json``. A copy of those figures written in the deployment config goes stale the moment
``model.source`` changes (issue 44: a 70B source planned as an 8B, 5.39 GiB of weights), so the
architecture is established from the source itself, in this order:

1. ``model.architecture_file``: the model's own config.json (from its release or its Hugging Face
   repository), a path relative to the YAML. Checked against 2 and 3 where they know the model.
2. A ``local://`` source: ``<dir>/config.json`` of that directory.
3. :data:`KNOWN_MODELS`: the config.json figures of the models this catalog lists, each with the
   URL they were read from.

A source none of these establishes is refused at load, naming ``model.source`` and the two ways
to supply it (:func:`unknown_source_message`).

Adding a model: a :class:`KnownModel` row with the figures :class:`~typed_config.model.
ModelArchitecture` takes from its config.json (``from_hf_config`` reads the same keys) and the
URL of that config.json, ideally at a commit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from typed_config.model import ModelArchitecture

#: The file that lists the models: what the refusal names.
CATALOG_FILE = "typed_config/model_catalog.py"


@dataclass(frozen=True)
class KnownModel:
    source: str
    #: The config.json keys the capacity model reads (ModelArchitecture's fields).
    config: dict[str, Any]
    #: Where those figures were read.
    config_source: str

    @property
    def architecture(self) -> ModelArchitecture:
        return ModelArchitecture(**self.config)


_HF = "https://huggingface.co/{}/blob/main/config.json"
_READ = (
    " (Hugging Face is not reachable from the machines this catalog was built on: the figures "
    "are the published config.json's, cross-checked against copies in public repositories)"
)


def _llama(layers: int, heads: int, hidden: int, intermediate: int, context: int) -> dict[str, Any]:
    return dict(
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=8,
        head_dim=128, hidden_size=hidden, intermediate_size=intermediate, vocab_size=128256,
        max_position_embeddings=context,
    )  # fmt: skip


_LLAMA3_8B = _llama(32, 32, 4096, 14336, 8192)
_LLAMA3_70B = _llama(80, 64, 8192, 28672, 8192)
_LLAMA31_8B = _llama(32, 32, 4096, 14336, 131072)
_LLAMA31_70B = _llama(80, 64, 8192, 28672, 131072)

_MISTRAL_7B_V03 = dict(
    num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
    hidden_size=4096, intermediate_size=14336, vocab_size=32768, max_position_embeddings=32768,
)  # fmt: skip
_QWEN25_7B = dict(
    num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4, head_dim=128,
    hidden_size=3584, intermediate_size=18944, vocab_size=152064, max_position_embeddings=32768,
)  # fmt: skip

#: Hugging Face repository -> its config.json's figures.
_PUBLISHED: dict[str, dict[str, Any]] = {
    "meta-llama/Meta-Llama-3-8B": _LLAMA3_8B,
    "meta-llama/Meta-Llama-3-70B-Instruct": _LLAMA3_70B,
    "meta-llama/Meta-Llama-3-70B": _LLAMA3_70B,
    "meta-llama/Llama-3.1-8B-Instruct": _LLAMA31_8B,
    "meta-llama/Llama-3.1-70B-Instruct": _LLAMA31_70B,
    "meta-llama/Llama-3.3-70B-Instruct": _LLAMA31_70B,
    "mistralai/Mistral-7B-Instruct-v0.3": _MISTRAL_7B_V03,
    "Qwen/Qwen2.5-7B-Instruct": _QWEN25_7B,
}

KNOWN_MODELS: dict[str, KnownModel] = {
    m.source: m
    for m in (
        KnownModel(
            "hf://meta-llama/Meta-Llama-3-8B-Instruct",
            _LLAMA3_8B,
            _HF.format("meta-llama/Meta-Llama-3-8B-Instruct")
            + "; the figures prod.yaml carried inline since the first release",
        ),
        *(KnownModel(f"hf://{repo}", config, _HF.format(repo) + _READ)
          for repo, config in _PUBLISHED.items()),
    )
}  # fmt: skip


def known_architecture(source: str) -> tuple[ModelArchitecture, str] | None:
    """The catalog's architecture of ``source`` and where it was read, if listed."""
    model = KNOWN_MODELS.get(source)
    return (model.architecture, f"{CATALOG_FILE}: {model.config_source}") if model else None


def local_source_dir(source: str, base_dir: Path) -> Path | None:
    """The directory of a ``local://`` source (relative paths from the config's directory)."""
    if not source.startswith("local://"):
        return None
    path = Path(source[len("local://") :])
    return path if path.is_absolute() else (base_dir / path).resolve()


def read_config_json(path: Path) -> ModelArchitecture:
    """A config.json as the capacity model needs it; ValueError naming the file if unreadable."""
    try:
        return ModelArchitecture.from_hf_config(path)
    except (OSError, KeyError, json.JSONDecodeError, ValidationError) as exc:
        raise ValueError(f"cannot read {path}: {exc}") from None


def unknown_source_message(source: str) -> str:
    """Why ``source``'s size cannot be planned, and the two ways to supply its architecture."""
    return (
        f"{source}: the product cannot establish this model's architecture (layers, heads, "
        f"sizes: the GPU memory plan is computed from them), so it will not guess a size; "
        f"either set model.architecture_file to the model's config.json (from its release or "
        f"its Hugging Face repository; a path relative to this file), or add the model to "
        f"{CATALOG_FILE} with its config.json's figures and URL. Listed there: "
        f"{', '.join(KNOWN_MODELS)}"
    )


def differences(given: ModelArchitecture, model: ModelArchitecture) -> str:
    """``field given vs model`` for each figure that differs."""
    a, b = given.model_dump(), model.model_dump()
    return ", ".join(f"{k} {a[k]} vs {b[k]}" for k in a if a[k] != b[k])
