"""Validation of the base model and its LoRA adapters before they are baked into the image.

Adapters: one rank for all (vLLM sizes its LoRA
slots by --max-lora-rank; mixed ranks waste memory and hide mistakes), rank within
max_lora_rank, every target module present in the base, and the adapter's recorded base model is
the one being served. Base: config and tokenizer load, and the tokenizer has a chat template.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

#: Ranks vLLM accepts for --max-lora-rank.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class ValidationError(ValueError):
    """The base model or an adapter must not be baked into the image; the message says why."""


@dataclass(frozen=True)
class AdapterInfo:
    name: str
    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    base_model: str


def base_module_names(base: Path) -> set[str]:
    """Leaf module names of the base model (``q_proj``...), read from the safetensors headers."""
    from safetensors import safe_open

    names: set[str] = set()
    for shard in base.glob("*.safetensors"):
        with safe_open(str(shard), framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                parts = key.split(".")
                if len(parts) >= 2 and parts[-1] in {"weight", "weight_packed", "qweight"}:
                    names.add(parts[-2])
    if not names:
        raise ValidationError(f"{base}: no safetensors weights found")
    return names


def read_adapter(name: str, path: Path) -> AdapterInfo:
    config_path = path / "adapter_config.json"
    if not config_path.is_file():
        raise ValidationError(f"adapter {name}: no adapter_config.json in {path}")
    if not list(path.glob("adapter_model.safetensors")):
        raise ValidationError(f"adapter {name}: no adapter_model.safetensors (pickle is refused)")
    cfg = json.loads(config_path.read_text())
    targets = cfg.get("target_modules") or []
    if isinstance(targets, str):
        raise ValidationError(f"adapter {name}: target_modules is a regex; list module names")
    return AdapterInfo(
        name=name,
        rank=int(cfg["r"]),
        alpha=float(cfg.get("lora_alpha", cfg["r"])),
        target_modules=tuple(sorted(targets)),
        base_model=str(cfg.get("base_model_name_or_path") or ""),
    )


def validate_adapters(
    base: Path, adapters: dict[str, Path], *, max_lora_rank: int, base_names: set[str]
) -> list[AdapterInfo]:
    """Raise :class:`ValidationError` listing every problem; return the adapters' facts."""
    if max_lora_rank not in VLLM_LORA_RANKS:
        raise ValidationError(f"MAX_LORA_RANK {max_lora_rank} is not one of {VLLM_LORA_RANKS}")
    infos = [read_adapter(n, p) for n, p in adapters.items()]
    modules = base_module_names(base)
    problems = []
    for info in infos:
        if info.rank > max_lora_rank:
            problems.append(
                f"adapter {info.name}: rank {info.rank} > MAX_LORA_RANK {max_lora_rank}"
            )
        missing = [m for m in info.target_modules if m not in modules]
        if missing:
            problems.append(f"adapter {info.name}: target modules {missing} not in the base model")
        recorded = info.base_model.rstrip("/").split("/")[-1]
        if recorded and recorded not in base_names:
            problems.append(
                f"adapter {info.name}: trained on {info.base_model!r}, not on the base "
                f"({', '.join(sorted(base_names))})"
            )
    ranks = {i.rank for i in infos}
    if len(ranks) > 1:
        detail = ", ".join(f"{i.name}={i.rank}" for i in infos)
        problems.append(f"adapters must share one rank, got {detail}")
    if problems:
        raise ValidationError("; ".join(problems))
    return infos


def load_check(base: Path) -> dict[str, object]:
    """Config and tokenizer load; the tokenizer renders its chat template."""
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(base)
    tokenizer = AutoTokenizer.from_pretrained(base)
    if not getattr(tokenizer, "chat_template", None):
        raise ValidationError(f"{base}: tokenizer has no chat template")
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "ping"}], tokenize=False, add_generation_prompt=True
    )
    if not text or len(tokenizer(text)["input_ids"]) == 0:
        raise ValidationError(f"{base}: chat template renders nothing")
    return {"model_type": config.model_type, "vocab_size": len(tokenizer)}
