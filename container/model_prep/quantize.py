"""AWQ W4A16 quantization with llmcompressor (runs in its own venv: .venv-quant / /opt/quant).

    python quantize.py --model DIR --out DIR --calibration calibration.jsonl

Domain calibration (AWQ keeps the weights the calibration text activates most; generic text
protects the wrong ones and quality drops on the domain's requests): each line of the JSONL
file is ``{"text": ...}``. Output is compressed-tensors ``pack-quantized``
(group size 128); vLLM detects it from config.json, no --quantization flag. A model whose
config already has a ``quantization_config`` is copied unchanged (exit 0, "skipped").
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path


def already_quantized(model: Path) -> bool:
    config = json.loads((model / "config.json").read_text())
    return "quantization_config" in config


def _cpu_pin_memory_workaround() -> None:
    """llmcompressor 0.14 pins CPU intermediates, which fails without an accelerator
    ("Cannot access accelerator device when none is available"). Pinning only speeds
    host-to-GPU copies, so on a CPU-only machine it is skipped."""
    import torch
    from llmcompressor.pipelines.cache import IntermediatesCache

    if torch.cuda.is_available():
        return
    IntermediatesCache._pin_intermediate = classmethod(lambda cls, intermediate: None)  # type: ignore[method-assign,assignment]


def quantize(model: Path, out: Path, calibration: Path, *, max_seq_len: int = 512) -> None:
    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.awq import AWQModifier
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _cpu_pin_memory_workaround()
    texts = [json.loads(line)["text"] for line in calibration.read_text().splitlines() if line]
    tokenizer = AutoTokenizer.from_pretrained(model)
    lm = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    dataset = Dataset.from_dict({"text": texts}).map(
        lambda row: tokenizer(row["text"], truncation=True, max_length=max_seq_len),
        remove_columns=["text"],
    )
    recipe = [AWQModifier(scheme="W4A16_ASYM", targets=["Linear"], ignore=["lm_head"])]
    oneshot(
        model=lm,
        dataset=dataset,
        recipe=recipe,
        max_seq_length=max_seq_len,
        num_calibration_samples=len(texts),
    )
    out.mkdir(parents=True, exist_ok=True)
    lm.save_pretrained(out, save_compressed=True)
    tokenizer.save_pretrained(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="AWQ W4A16 with llmcompressor")
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--calibration", type=Path, required=True)
    args = parser.parse_args(argv)
    if already_quantized(args.model):
        print(f"quantize: {args.model} is already quantized: skipped")
        if args.out.resolve() != args.model.resolve():
            shutil.copytree(args.model, args.out, dirs_exist_ok=True)
        return 0
    quantize(args.model, args.out, args.calibration)
    print(f"quantize: AWQ W4A16_ASYM written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
