"""LoRA's cost as added kernel time per engine step, fitted to the HTTP A/B run (issue 42
item 2).

Reads the windows ``bench/serve_evidence.py lora-ab`` writes (the same ``vllm serve`` engine with
and without LoRA, back to back at each prompt length P and in-flight count C, closed loop, O output
tokens) and, per point, derives from each engine's window:

- ``step_s``: the mean engine step, taken as the mean gap between streamed tokens (ITL mean). With
  chunked prefill every running sequence gets one token per step, so the mean gap is the mean step,
  prefill chunks included;
- ``tokens_per_step``: the tokens the engine runs per step, prompt and output: the output token
  rate x (P + O) / O x ``step_s``; split into ``decode_per_step`` (output rate x step) and
  ``prefill_per_step``.

LoRA's added time per step is ``d = step_lora - step_base``. Candidate forms (x from the base
window, which is what a speed model knows before LoRA is added):

- ``step``: ``d = a`` (a fixed cost per step: kernel launches);
- ``token``: ``d = b x tokens_per_step``;
- ``step+token``: ``d = a + b x tokens_per_step``;
- ``step+sequence``: ``d = a + b x decode_per_step`` (each running sequence decodes one token a
  step, so this is per sequence in the batch; with a fixed output length it is also per request, O
  requests end per O tokens);
- ``step+decode+prefill``: ``d = a + b_d x decode_per_step + b_p x prefill_per_step`` (6 points or
  more).

Each is fitted by least squares and scored by leave-one-out error on the LoRA engine's throughput;
a form whose fit has a negative term (a LoRA that saves time per token) is not chosen; of the rest,
the one with the lowest score is kept, unless one with fewer terms comes within 5 % of it. The
prediction of the LoRA engine from its base window is ``step' = step_base + d``,
``req/min' = req/min_base x step_base / step'`` (the batch per step is set by C and P, not by the
engine), ``ITL mean' = step'``.

    python -m sizing.lora_fit [docs/measurements/lora_http_*.json]

prints every point's measured and predicted LoRA throughput and ITL with their error, the
coefficients and every form's leave-one-out error. This module does not change the speed model
(sizing/serving_speed.py): it says what the measured form is.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT = (
    Path(__file__).resolve().parent.parent
    / "docs"
    / "measurements"
    / "lora_http_h100_vllm0.26.json"
)

FORMS: dict[str, tuple[str, ...]] = {
    "step": ("one",),
    "token": ("tokens",),
    "step+token": ("one", "tokens"),
    "step+sequence": ("one", "decode"),
    "step+decode+prefill": ("one", "decode", "prefill"),
}
#: a form with fewer terms is kept if its leave-one-out error is within this share of the best one's
SIMPLER_WITHIN = 0.05


@dataclass(frozen=True)
class Point:
    prompt: int
    in_flight: int
    output: int
    base_rpm: float
    lora_rpm: float
    base_step_s: float
    lora_step_s: float
    tokens_per_step: float  # base window
    decode_per_step: float
    prefill_per_step: float
    base_itl_p50: float | None = None
    lora_itl_p50: float | None = None

    @property
    def added_s(self) -> float:
        return self.lora_step_s - self.base_step_s

    def x(self, name: str) -> float:
        return {
            "one": 1.0,
            "tokens": self.tokens_per_step,
            "decode": self.decode_per_step,
            "prefill": self.prefill_per_step,
        }[name]


def _step(w: dict[str, Any]) -> float:
    itl = w["itl_s"]
    return float(itl["mean"] if itl.get("mean") is not None else itl["p50"])


def points(windows: Sequence[dict[str, Any]]) -> list[Point]:
    """Pairs each (prompt, in flight) point's base and LoRA windows (the last of each, if
    repeated)."""
    by: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    for w in windows:
        if w.get("errors"):
            continue
        by.setdefault((w["prompt_tokens"], w["concurrency"]), {})[w["engine"]] = w
    out = []
    for (p, c), e in sorted(by.items()):
        if "base" not in e or "lora" not in e:
            continue
        b, lo = e["base"], e["lora"]
        o = b["output_tokens"]
        step = _step(b)
        rate = b["output_tok_per_s"]
        out.append(
            Point(
                prompt=p,
                in_flight=c,
                output=o,
                base_rpm=b["req_per_min"],
                lora_rpm=lo["req_per_min"],
                base_step_s=step,
                lora_step_s=_step(lo),
                tokens_per_step=rate * (p + o) / o * step,
                decode_per_step=rate * step,
                prefill_per_step=rate * p / o * step,
                base_itl_p50=b["itl_s"].get("p50"),
                lora_itl_p50=lo["itl_s"].get("p50"),
            )
        )
    return out


def _solve(a: list[list[float]], y: list[float]) -> list[float]:
    """Least squares by the normal equations, Gaussian elimination with partial pivoting."""
    n = len(a[0])
    m = [
        [sum(r[i] * r[j] for r in a) for j in range(n)]
        + [sum(r[i] * v for r, v in zip(a, y, strict=True))]
        for i in range(n)
    ]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[piv][col]) < 1e-300:
            raise ValueError("singular fit")
        m[col], m[piv] = m[piv], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                m[r] = [x - f * z for x, z in zip(m[r], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit(pts: Sequence[Point], form: str) -> dict[str, float]:
    names = FORMS[form]
    # weight each point by 1 / base step: the fit minimises relative error in the step time
    rows = [[p.x(nm) / p.base_step_s for nm in names] for p in pts]
    ys = [p.added_s / p.base_step_s for p in pts]
    return dict(zip(names, _solve(rows, ys), strict=True))


def added(p: Point, coef: dict[str, float]) -> float:
    return sum(v * p.x(k) for k, v in coef.items())


def predict(p: Point, coef: dict[str, float]) -> dict[str, float]:
    step = p.base_step_s + added(p, coef)
    return {"step_s": step, "req_per_min": p.base_rpm * p.base_step_s / step}


def loo_error(pts: Sequence[Point], form: str) -> float | None:
    """Root mean square relative error of the LoRA req/min, each point predicted by a fit without
    it."""
    n = len(FORMS[form])
    if len(pts) <= n:
        return None
    errs = []
    for i, p in enumerate(pts):
        try:
            coef = fit([q for j, q in enumerate(pts) if j != i], form)
        except ValueError:
            return None
        errs.append(predict(p, coef)["req_per_min"] / p.lora_rpm - 1)
    return math.sqrt(sum(e * e for e in errs) / len(errs))


def physical(pts: Sequence[Point], form: str) -> bool:
    """No negative term: LoRA adds kernels and host work, it saves nothing per step or per token."""
    try:
        return all(v >= 0 for v in fit(pts, form).values())
    except ValueError:
        return False


def choose(pts: Sequence[Point]) -> tuple[str, dict[str, float | None]]:
    scores = {
        f: loo_error(pts, f) for f in FORMS if len(pts) >= max(2 * len(FORMS[f]), len(FORMS[f]) + 1)
    }
    ok = {f: s for f, s in scores.items() if s is not None and physical(pts, f)}
    if not ok:
        return "step", scores
    best = min(ok, key=lambda f: ok[f])
    simpler = [
        f
        for f in ok
        if len(FORMS[f]) < len(FORMS[best]) and ok[f] <= ok[best] * (1 + SIMPLER_WITHIN)
    ]
    if simpler:
        best = min(simpler, key=lambda f: (len(FORMS[f]), ok[f]))
    return best, scores


def analyse(windows: Sequence[dict[str, Any]], form: str | None = None) -> dict[str, Any]:
    pts = points(windows)
    chosen, scores = choose(pts)
    form = form or chosen
    coef = fit(pts, form)
    rows = []
    for p in pts:
        pr = predict(p, coef)
        rows.append(
            {
                "prompt": p.prompt,
                "in_flight": p.in_flight,
                "base_rpm": p.base_rpm,
                "lora_rpm": p.lora_rpm,
                "pred_rpm": round(pr["req_per_min"], 1),
                "rpm_err": round(pr["req_per_min"] / p.lora_rpm - 1, 4),
                "ratio": round(p.lora_rpm / p.base_rpm, 3),
                "pred_ratio": round(pr["req_per_min"] / p.base_rpm, 3),
                "base_step_ms": round(p.base_step_s * 1e3, 2),
                "lora_step_ms": round(p.lora_step_s * 1e3, 2),
                "pred_step_ms": round(pr["step_s"] * 1e3, 2),
                "step_err": round(pr["step_s"] / p.lora_step_s - 1, 4),
                "tokens_per_step": round(p.tokens_per_step, 1),
                "added_ms": round(p.added_s * 1e3, 3),
            }
        )
    return {
        "form": form,
        "chosen_by_loo": chosen,
        "coefficients": coef,
        "loo_rms_rel_error": scores,
        "negative_term": sorted(f for f in scores if not physical(pts, f)),
        "points": rows,
    }


def render(res: dict[str, Any]) -> str:
    c = res["coefficients"]
    terms = []
    for k, v in c.items():
        terms.append(
            {
                "one": f"{v * 1e3:.3f} ms per step",
                "tokens": f"{v * 1e6:.3f} us per batched token",
                "decode": f"{v * 1e6:.3f} us per running sequence (decode token)",
                "prefill": f"{v * 1e6:.3f} us per prefill token",
            }[k]
        )
    out = [
        f"LoRA's added time per engine step, form '{res['form']}' "
        f"(leave-one-out choice: '{res['chosen_by_loo']}'): " + " + ".join(terms),
        "leave-one-out RMS error of LoRA req/min by form: "
        + ", ".join(
            f"{f} {'n/a' if s is None else f'{s * 100:.1f} %'}"
            f"{' (a negative term)' if f in res.get('negative_term', ()) else ''}"
            for f, s in res["loo_rms_rel_error"].items()
        ),
        "",
        f"{'prompt':>6} {'C':>3} {'tok/step':>8} {'base rpm':>8} {'LoRA rpm':>8} {'pred':>7} "
        f"{'err':>6} {'ratio':>5} {'pred':>5} {'step base':>9} {'LoRA':>6} {'pred':>6} "
        f"{'err':>6}  (steps in ms)",
    ]
    for r in res["points"]:
        out.append(
            f"{r['prompt']:>6} {r['in_flight']:>3} {r['tokens_per_step']:>8.0f} "
            f"{r['base_rpm']:>8.0f} {r['lora_rpm']:>8.0f} {r['pred_rpm']:>7.0f} "
            f"{r['rpm_err'] * 100:>5.1f}% {r['ratio']:>5.2f} {r['pred_ratio']:>5.2f} "
            f"{r['base_step_ms']:>9.2f} {r['lora_step_ms']:>6.2f} {r['pred_step_ms']:>6.2f} "
            f"{r['step_err'] * 100:>5.1f}%"
        )
    errs = [abs(r["rpm_err"]) for r in res["points"]]
    if errs:
        out.append(
            f"\nin-sample |error| of LoRA req/min: max {max(errs) * 100:.1f} %, "
            f"mean {sum(errs) / len(errs) * 100:.1f} % over {len(errs)} points"
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sizing.lora_fit", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("path", nargs="?", default=str(DEFAULT), help="lora-ab JSON (its 'windows')")
    ap.add_argument(
        "--form",
        choices=sorted(FORMS),
        default=None,
        help="fit this form instead of the chosen one",
    )
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    data = json.loads(Path(a.path).read_text())
    if not points(data["windows"]):
        print(f"{a.path}: no point with both a base and a LoRA window without errors")
        return 1
    res = analyse(data["windows"], a.form)
    print(json.dumps(res, indent=1) if a.json else render(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
