"""Quality gate: the quantized model against the unquantized one on held-out prompts.

    python quality_gate.py --reference DIR --candidate DIR --heldout FILE --min-agreement 0.9

Figures: next-token agreement (share of positions where both models' argmax token is the same,
teacher-forced over the held-out texts) and each model's perplexity, for the base and, with
``--adapters``, for each adapter applied to both (lora_delta.py). Exit 1 when the base's or any
adapter's agreement is below ``--min-agreement``: nothing is published. Runs in the
quantization venv (loading a compressed-tensors checkpoint in transformers needs
compressed-tensors).

With a CUDA GPU both models run on it in bf16 (logits scored in float32), one after the other
so the GPU holds one model at a time; without one, float32 on the CPU. The report (and the
``model-prep-resources: {json}`` line) carries the step's wall time, peak GPU memory and
peak host RSS under ``resources``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

try:
    from .step_resources import resources  # imported as a package module
except ImportError:  # run as a script: python quality_gate.py
    from step_resources import resources  # type: ignore[import-not-found,no-redef,unused-ignore]


Scores = dict[str, tuple[list[Any], float]]


def _score(
    path: Path, batches: list[Any], dtype: Any, device: str, adapters: dict[str, Path]
) -> Scores:
    """Load one model; for the base and then with each adapter applied, its argmax token per
    position (on the CPU) and the summed NLL. Logits are scored in float32 whatever the
    weights' dtype."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        from .lora_delta import applied, deltas  # imported as a package module
    except ImportError:  # run as a script: python quality_gate.py
        from lora_delta import applied, deltas  # type: ignore[import-not-found,no-redef,unused-ignore]

    lm = AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, device_map=device if device != "cpu" else None
    ).eval()

    def run(lm: Any) -> tuple[list[Any], float]:
        argmax: list[Any] = []
        nll = 0.0
        with torch.no_grad():
            for ids in batches:
                ids = ids.to(device)
                logits = lm(ids).logits[0, :-1].float()
                argmax.append(logits.argmax(-1).cpu())
                nll += float(torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="sum"))
        return argmax, nll

    scores: Scores = {"": run(lm)}
    for name, adapter_dir in adapters.items():
        with applied(lm, deltas(adapter_dir)):
            scores[name] = run(lm)
    del lm
    gc.collect()
    if device != "cpu":
        torch.cuda.empty_cache()
    return scores


def _figures(ref: tuple[list[Any], float], cand: tuple[list[Any], float], total: int) -> dict:
    same = sum(int((a == b).sum()) for a, b in zip(ref[0], cand[0], strict=True))
    return {
        "next_token_agreement": same / total,
        "perplexity_reference": math.exp(ref[1] / total),
        "perplexity_candidate": math.exp(cand[1] / total),
    }


def evaluate(
    reference: Path, candidate: Path, texts: list[str], adapters: dict[str, Path] | None = None
) -> dict[str, Any]:
    """One model at a time (the reference, then the candidate), so the GPU holds one model's
    weights, not both: bf16 weights on a CUDA GPU, float32 on the CPU."""
    started = time.monotonic()
    import torch
    from transformers import AutoTokenizer

    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    tokenizer = AutoTokenizer.from_pretrained(reference)
    batches = [tokenizer(text, return_tensors="pt")["input_ids"] for text in texts]
    batches = [ids for ids in batches if ids.shape[1] >= 2]
    if not batches:
        raise ValueError("held-out set has no text long enough to score")
    phases = {"imports": time.monotonic() - started}
    t = time.monotonic()
    adapters = adapters or {}
    ref = _score(reference, batches, dtype, device, adapters)
    phases["reference"] = time.monotonic() - t
    t = time.monotonic()
    cand = _score(candidate, batches, dtype, device, adapters)
    phases["candidate"] = time.monotonic() - t
    total = sum(int(ids.shape[1]) - 1 for ids in batches)
    figures = resources("quality-gate", started, phases)
    print("model-prep-resources:", json.dumps(figures), flush=True)
    return {
        "positions": float(total),
        **_figures(ref[""], cand[""], total),
        # each adapter on the original base against the same adapter on the quantized one
        "adapters": {name: _figures(ref[name], cand[name], total) for name in adapters},
        "resources": figures,
    }


def failures(
    figures: dict[str, Any], min_agreement: float, *, only: str | None = None
) -> list[str]:
    """The gate's verdict on :func:`evaluate`'s ``figures`` (or a published report's): one line
    per model below ``min_agreement``, the base and each adapter; with ``only``, that adapter
    alone (``make release-adapter`` gates one adapter version: tools/adapter_release). An
    adapter ``only`` names that the figures do not score is a failure too: never gated is not
    passed."""
    scored = [("", figures), *(figures.get("adapters") or {}).items()]
    if only is not None:
        scored = [(name, f) for name, f in scored if name == only]
        if not scored:
            return [f"adapter {only}: not scored by this quality gate"]
    return [
        f"{'' if not name else f'adapter {name}: '}next-token agreement "
        f"{f['next_token_agreement']:.4f} < {min_agreement}"
        for name, f in scored
        if f["next_token_agreement"] < min_agreement
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="quantized vs unquantized quality gate")
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--candidate", type=Path, required=True)
    parser.add_argument("--heldout", type=Path, required=True)
    parser.add_argument("--min-agreement", type=float, required=True)
    parser.add_argument("--report", type=Path)
    parser.add_argument("--adapters", default="", help="name=DIR,... (scored on both bases)")
    args = parser.parse_args(argv)
    if not 0.0 <= args.min_agreement <= 1.0:
        parser.error("--min-agreement must be within 0..1")
    texts = [json.loads(line)["text"] for line in args.heldout.read_text().splitlines() if line]
    adapters = {
        name: Path(path)
        for name, _, path in (item.partition("=") for item in args.adapters.split(",") if item)
    }
    figures = evaluate(args.reference, args.candidate, texts, adapters)
    below = failures(figures, args.min_agreement)
    report = {**figures, "min_agreement": args.min_agreement, "passed": not below}
    print("quality gate:", json.dumps(report))
    if args.report:
        args.report.write_text(json.dumps(report, indent=2) + "\n")
    for line in below:
        print(f"quality gate FAILED: {line}", file=sys.stderr)
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
