"""Quality gate: the quantized model against the unquantized one on held-out prompts.

    python quality_gate.py --reference DIR --candidate DIR --heldout FILE --min-agreement 0.9

Figures: next-token agreement (share of positions where both models' argmax token is the same,
teacher-forced over the held-out texts) and each model's perplexity. Exit 1 when agreement is
below QUALITY_GATE_MIN_AGREEMENT, so the image build fails. Runs in the quantization venv
(loading a compressed-tensors checkpoint in transformers needs compressed-tensors).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def evaluate(reference: Path, candidate: Path, texts: list[str]) -> dict[str, float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(reference)
    ref = AutoModelForCausalLM.from_pretrained(reference, dtype=torch.float32).eval()
    cand = AutoModelForCausalLM.from_pretrained(candidate, dtype=torch.float32).eval()
    same = total = 0
    nll_ref = nll_cand = 0.0
    with torch.no_grad():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt")["input_ids"]
            if ids.shape[1] < 2:
                continue
            logits_ref = ref(ids).logits[0, :-1].float()
            logits_cand = cand(ids).logits[0, :-1].float()
            target = ids[0, 1:]
            same += int((logits_ref.argmax(-1) == logits_cand.argmax(-1)).sum())
            total += int(target.numel())
            nll_ref += float(torch.nn.functional.cross_entropy(logits_ref, target, reduction="sum"))
            nll_cand += float(
                torch.nn.functional.cross_entropy(logits_cand, target, reduction="sum")
            )
    if total == 0:
        raise ValueError("held-out set has no text long enough to score")
    return {
        "positions": float(total),
        "next_token_agreement": same / total,
        "perplexity_reference": math.exp(nll_ref / total),
        "perplexity_candidate": math.exp(nll_cand / total),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="quantized vs unquantized quality gate")
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument("--candidate", type=Path, required=True)
    parser.add_argument("--heldout", type=Path, required=True)
    parser.add_argument("--min-agreement", type=float, required=True)
    parser.add_argument("--report", type=Path)
    args = parser.parse_args(argv)
    if not 0.0 <= args.min_agreement <= 1.0:
        parser.error("--min-agreement must be within 0..1")
    texts = [json.loads(line)["text"] for line in args.heldout.read_text().splitlines() if line]
    figures = evaluate(args.reference, args.candidate, texts)
    passed = figures["next_token_agreement"] >= args.min_agreement
    report = {**figures, "min_agreement": args.min_agreement, "passed": passed}
    print("quality gate:", json.dumps(report))
    if args.report:
        args.report.write_text(json.dumps(report, indent=2) + "\n")
    if not passed:
        print(
            f"quality gate FAILED: next-token agreement {figures['next_token_agreement']:.4f} "
            f"< {args.min_agreement}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
