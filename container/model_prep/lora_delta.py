"""A LoRA adapter as weight deltas, for the quality gate's per-adapter figures.

Quantization changes what each adapter is applied to, so the gate measures every adapter too:
reference (original base + adapter) against candidate (quantized base + adapter), the way vLLM
serves it (the adapter's low-rank product added to the layer's output). Merging
``B @ A * scale`` into the dense weight gives the same layer output and needs no peft: the quality
gate's venv pins llmcompressor's own libraries. Runs in that venv (torch, safetensors).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: peft's key form: base_model.model.<module path>.lora_A.weight / .lora_B.weight
_PREFIX = "base_model.model."


def deltas(adapter: Path) -> dict[str, tuple[Any, Any, float]]:
    """``{module path: (A, B, scale)}`` for every LoRA pair in the adapter; the product is
    formed per module when applied, so a full-size delta is never held for all of them."""
    from safetensors.torch import load_file

    cfg = json.loads((adapter / "adapter_config.json").read_text())
    rank = int(cfg["r"])
    alpha = float(cfg.get("lora_alpha", rank))
    scale = alpha / math.sqrt(rank) if cfg.get("use_rslora") else alpha / rank
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    out: dict[str, tuple[Any, Any, float]] = {}
    for key, a in tensors.items():
        if not key.endswith(".lora_A.weight"):
            continue
        module = key[: -len(".lora_A.weight")].removeprefix(_PREFIX)
        out[module] = (a, tensors[key.replace(".lora_A.", ".lora_B.")], scale)
    if not out:
        raise ValueError(f"adapter {adapter.name}: no lora_A/lora_B pairs")
    return out


@contextmanager
def applied(model: Any, adapter: dict[str, tuple[Any, Any, float]]) -> Iterator[None]:
    """The model with ``B @ A * scale`` added to each target's dense weight (formed in float32
    on the weight's device), restored afterwards from a host copy of the weights it changed
    (in bf16, adding and then subtracting would not give the same weights back)."""
    import torch

    saved = []
    try:
        for name, (a, b, scale) in adapter.items():
            weight = model.get_submodule(name).weight
            saved.append((weight, weight.data.to("cpu", copy=True)))
            delta = (
                b.to(weight.device, torch.float32) @ a.to(weight.device, torch.float32)
            ) * scale
            weight.data += delta.to(weight.dtype)
        yield
    finally:
        for weight, original in saved:
            weight.data.copy_(original.to(weight.device))
