"""AWQ W4A16 quantization with llmcompressor (runs in its own venv: .venv-quant / /opt/quant).

    python quantize.py --model DIR --out DIR --calibration calibration.jsonl

Domain calibration (AWQ keeps the weights the calibration text activates most; generic text
protects the wrong ones and quality drops on the domain's requests): each line of the JSONL
file is ``{"text": ...}``. Output is compressed-tensors ``pack-quantized``
(group size 128); vLLM detects it from config.json, no --quantization flag. A model whose
config already has a ``quantization_config`` is copied unchanged (exit 0, "skipped").

With a CUDA GPU the model loads in bf16 into host memory and llmcompressor's sequential
pipeline onloads one decoder layer at a time onto the GPU (peak GPU memory is about one layer
plus the calibration activations, not the whole model); without one it runs in float32 on
the CPU (the tiny test model). The last line before the result is
``model-prep-resources: {json}``: wall time per phase, peak GPU memory (torch's allocator:
allocated and reserved, GiB; null on CPU) and peak host RSS, so the real job logs what it
needed (docs/measurements/model_prep_h100.md sizes the job's instance from these figures).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

try:
    from .step_resources import resources  # imported as a package module
except ImportError:  # run as a script: python quantize.py
    from step_resources import resources  # type: ignore[import-not-found,no-redef,unused-ignore]


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


def quantize(
    model: Path, out: Path, calibration: Path, *, max_seq_len: int = 512
) -> dict[str, object]:
    started = time.monotonic()
    import torch
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform.awq import AWQModifier
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    _cpu_pin_memory_workaround()
    phases: dict[str, float] = {"imports": time.monotonic() - started}
    t = time.monotonic()
    texts = [json.loads(line)["text"] for line in calibration.read_text().splitlines() if line]
    tokenizer = AutoTokenizer.from_pretrained(model)
    # bf16 on a GPU (an 8B model is 16 GB in bf16, 32 GB in float32); the model stays in host
    # memory and the sequential pipeline moves one layer at a time to the GPU.
    lm = AutoModelForCausalLM.from_pretrained(
        model, dtype=torch.bfloat16 if cuda else torch.float32
    )
    dataset = Dataset.from_dict({"text": texts}).map(
        lambda row: tokenizer(row["text"], truncation=True, max_length=max_seq_len),
        remove_columns=["text"],
    )
    phases["load"] = time.monotonic() - t
    t = time.monotonic()
    # AWQ's smoothing, then the W4A16 quantization it prepares for: the recipe the old
    # ``llmcompressor.modifiers.awq.AWQModifier(scheme=..., targets=..., ignore=...)`` expanded
    # to (llmcompressor 0.14 keeps that path as a shim that warns it will be removed).
    recipe = [
        AWQModifier(),
        QuantizationModifier(scheme="W4A16_ASYM", targets=["Linear"], ignore=["lm_head"]),
    ]
    oneshot(
        model=lm,
        dataset=dataset,
        recipe=recipe,
        max_seq_length=max_seq_len,
        num_calibration_samples=len(texts),
    )
    phases["calibrate"] = time.monotonic() - t
    t = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    lm.save_pretrained(out, save_compressed=True)
    tokenizer.save_pretrained(out)
    phases["save"] = time.monotonic() - t
    figures = resources("quantize", started, phases)
    figures["calibration_samples"] = len(texts)
    figures["max_seq_len"] = max_seq_len
    figures["calibration_tokens"] = sum(len(ids) for ids in dataset["input_ids"])
    print("model-prep-resources:", json.dumps(figures), flush=True)
    return figures


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
