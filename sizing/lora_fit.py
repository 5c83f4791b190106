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

With no path it reads every run of :data:`RUNS` (the HTTP run, the production path; the in-process
runs with the default and the fp8 KV cache, kept and shown), chooses the form by leave-one-out error
over all of their points, fits its coefficients on the production path and prints every point's
measured and predicted LoRA throughput and step with their error, the production points' also
leave-one-out (:func:`analyse_runs`): what sizing/lora_cost.py commits and the speed model plans
on. With a path it fits that one windows file alone.
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
    #: Which run the point comes from (:data:`RUNS`); "" for a windows file read alone.
    run: str = ""
    #: GPU busy time per step (nvidia-smi utilisation x step) of each engine, where recorded.
    base_gpu_busy_s: float | None = None
    lora_gpu_busy_s: float | None = None

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
                base_gpu_busy_s=_busy(b, step),
                lora_gpu_busy_s=_busy(lo, _step(lo)),
            )
        )
    return out


def _busy(w: dict[str, Any], step: float) -> float | None:
    util = (w.get("gpu") or {}).get("util_pct_p50")
    return None if util is None else util / 100 * step


MEASUREMENTS = DEFAULT.parent
IN_PROCESS = MEASUREMENTS / "lora_fp8kv_h100_vllm0.26.json"


@dataclass(frozen=True)
class Run:
    """One run kept as evidence: where it is, and whether it is the path production serves."""

    name: str
    production: bool
    why: str


#: Every LoRA run kept as evidence (issue 42: "keep every run; no lowest run wins"). The form is
#: chosen over all of them; the coefficients the speed model plans on come from the production
#: path, and every other run is shown against them with its error.
RUNS: dict[str, Run] = {
    r.name: r
    for r in (
        Run(
            "http",
            True,
            "vllm serve over HTTP, default KV cache (lora_http_h100_vllm0.26.json): the path "
            "production serves (SageMaker -> vLLM's own server; prod.yaml sets no kv_cache_dtype)",
        ),
        Run(
            "in-process",
            False,
            "AsyncLLM in-process, default KV cache, two LoRA runs against one base run "
            "(lora_fp8kv_h100_vllm0.26.json, calls 2 and 4): no API server process, so none of "
            "its host work competes with the engine's; not the production path",
        ),
        Run(
            "fp8-kv",
            False,
            "AsyncLLM in-process with kv_cache_dtype fp8, LoRA + fp8 against fp8 without LoRA "
            "(lora_fp8kv_h100_vllm0.26.json, calls 3 and 4): a cache dtype production does not "
            "run, and a 22-32 % speed-up over LoRA with the default cache that is not explained",
        ),
    )
}


def _phase_point(run: str, b: dict[str, Any], lo: dict[str, Any]) -> Point:
    """A point from two in-process phases: the mean step is the mean number in flight over the
    output token rate (each running sequence decodes one token a step)."""
    p, o = b["prompt"], b["output"]
    rate = b["output_tps"]
    step = b["mean_in_flight"] / rate
    return Point(
        prompt=p,
        in_flight=b["concurrency"],
        output=o,
        base_rpm=b["requests_per_minute"],
        lora_rpm=lo["requests_per_minute"],
        base_step_s=step,
        lora_step_s=lo["mean_in_flight"] / lo["output_tps"],
        tokens_per_step=rate * (p + o) / o * step,
        decode_per_step=rate * step,
        prefill_per_step=rate * p / o * step,
        run=run,
    )


def in_process_points(path: Path = IN_PROCESS) -> list[Point]:
    """The in-process runs (default KV: each LoRA call against the base of call 2; fp8 KV: each
    LoRA + fp8 call against fp8 without LoRA of call 3), every phase that pairs."""
    data = json.loads(path.read_text())
    phases = {
        (r["device_call"], r["engine"]): {ph["concurrency"]: ph for ph in r["phases"]}
        for r in data["runs"]
    }
    pairs = (
        ("in-process", (2, "w4a16-base-cost"), ((2, "w4a16-lora-cost"), (4, "w4a16-lora-cost"))),
        ("fp8-kv", (3, "w4a16-fp8kv"), ((3, "w4a16-lora-fp8kv"), (4, "w4a16-lora-fp8kv"))),
    )
    out = []
    for run, base_key, lora_keys in pairs:
        base = phases[base_key]
        for key in lora_keys:
            for c, ph in sorted(phases[key].items()):
                if c in base:
                    out.append(_phase_point(run, base[c], ph))
    return out


def evidence() -> list[Point]:
    """Every point of every run in :data:`RUNS`."""
    http = [
        Point(**{**p.__dict__, "run": "http"})
        for p in points(json.loads(DEFAULT.read_text())["windows"])
    ]
    return http + in_process_points()


def gpu_share(pts: Sequence[Point]) -> float:
    """Share of LoRA's added step time during which the GPU runs a kernel: the added GPU busy
    time (nvidia-smi utilisation x step, LoRA minus base) over the added step time, summed over
    the points that recorded utilisation. The rest is host work or synchronisation."""
    busy = added = 0.0
    for p in pts:
        if p.base_gpu_busy_s is not None and p.lora_gpu_busy_s is not None:
            busy += p.lora_gpu_busy_s - p.base_gpu_busy_s
            added += p.added_s
    if not added:
        raise ValueError("no point recorded the GPU's utilisation")
    return max(0.0, min(1.0, busy / added))


def analyse_runs(pts: Sequence[Point] | None = None) -> dict[str, Any]:
    """The form chosen by leave-one-out over every run's points; its coefficients fitted on the
    production run's points; every point predicted by them (the production run's also
    leave-one-out: the error the plan states for LoRA is their RMS)."""
    pts = list(pts if pts is not None else evidence())
    form, scores = choose(pts)
    prod = [p for p in pts if RUNS[p.run].production]
    coef = fit(prod, form)
    rows = []
    for p in pts:
        pr = predict(p, coef)
        row = _row(p, pr)
        row["run"] = p.run
        if RUNS[p.run].production:
            loo = predict(p, fit([q for q in prod if q is not p], form))
            row["loo_rpm_err"] = round(loo["req_per_min"] / p.lora_rpm - 1, 4)
        rows.append(row)
    loo_errs = [r["loo_rpm_err"] for r in rows if "loo_rpm_err" in r]
    return {
        "form": form,
        "chosen_by_loo": form,
        "coefficients": coef,
        "loo_rms_rel_error": scores,
        "negative_term": sorted(f for f in scores if not physical(pts, f)),
        "production_loo_rms": math.sqrt(sum(e * e for e in loo_errs) / len(loo_errs)),
        "gpu_share": gpu_share(prod),
        "points": rows,
    }


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
        rows.append(_row(p, predict(p, coef)))
    return {
        "form": form,
        "chosen_by_loo": chosen,
        "coefficients": coef,
        "loo_rms_rel_error": scores,
        "negative_term": sorted(f for f in scores if not physical(pts, f)),
        "points": rows,
    }


def _row(p: Point, pr: dict[str, float]) -> dict[str, Any]:
    return {
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


TERM_UNITS = {
    "one": (1e3, "ms per step"),
    "tokens": (1e6, "us per batched token"),
    "decode": (1e6, "us per running sequence (decode token)"),
    "prefill": (1e6, "us per prefill token"),
}


def render(res: dict[str, Any]) -> str:
    c = res["coefficients"]
    terms = [f"{v * TERM_UNITS[k][0]:.3f} {TERM_UNITS[k][1]}" for k, v in c.items()]
    runs = "production run" if "production_loo_rms" in res else "points"
    out = [
        f"LoRA's added time per engine step, form '{res['form']}' "
        f"(leave-one-out choice: '{res['chosen_by_loo']}'), fitted on the {runs}: "
        + " + ".join(terms),
        "leave-one-out RMS error of LoRA req/min by form: "
        + ", ".join(
            f"{f} {'n/a' if s is None else f'{s * 100:.1f} %'}"
            f"{' (a negative term)' if f in res.get('negative_term', ()) else ''}"
            for f, s in res["loo_rms_rel_error"].items()
        ),
    ]
    if "production_loo_rms" in res:
        out.append(
            f"the LoRA form's error (planned on): {res['production_loo_rms'] * 100:.1f} % RMS, "
            "each production point predicted by a fit without it; GPU-busy share of the added "
            f"time {res['gpu_share']:.2f} (the rest is host work)"
        )
        for r in RUNS.values():
            out.append(f"  run {r.name}: {'PRODUCTION PATH' if r.production else 'kept'}: {r.why}")
    runcol = "production_loo_rms" in res
    out += [
        "",
        ("run".rjust(10) + " " if runcol else "")
        + f"{'prompt':>6} {'C':>3} {'tok/step':>8} {'base rpm':>8} {'LoRA rpm':>8} "
        f"{'pred':>7} {'err':>6} {'LOO':>6} {'ratio':>5} {'pred':>5} {'step base':>9} "
        f"{'LoRA':>6} {'pred':>6} {'err':>6}  (steps in ms)",
    ]
    for r in res["points"]:
        loo = f"{r['loo_rpm_err'] * 100:>5.1f}%" if "loo_rpm_err" in r else f"{'':>6}"
        out.append(
            (f"{r['run']:>10} " if runcol else "") + f"{r['prompt']:>6} {r['in_flight']:>3} "
            f"{r['tokens_per_step']:>8.0f} {r['base_rpm']:>8.0f} {r['lora_rpm']:>8.0f} "
            f"{r['pred_rpm']:>7.0f} {r['rpm_err'] * 100:>5.1f}% {loo} {r['ratio']:>5.2f} "
            f"{r['pred_ratio']:>5.2f} {r['base_step_ms']:>9.2f} {r['lora_step_ms']:>6.2f} "
            f"{r['pred_step_ms']:>6.2f} {r['step_err'] * 100:>5.1f}%"
        )
    for run in dict.fromkeys(r.get("run", "") for r in res["points"]):
        errs = [abs(r["rpm_err"]) for r in res["points"] if r.get("run", "") == run]
        out.append(
            f"{'in-sample' if run in ('', 'http') else 'out-of-sample'} |error| of LoRA req/min"
            f"{f' ({run})' if run else ''}: max {max(errs) * 100:.1f} %, "
            f"mean {sum(errs) / len(errs) * 100:.1f} % over {len(errs)} points"
        )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m sizing.lora_fit", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument(
        "path",
        nargs="?",
        default=None,
        help="one lora-ab JSON (its 'windows') alone; default: every run of RUNS",
    )
    ap.add_argument(
        "--form",
        choices=sorted(FORMS),
        default=None,
        help="fit this form instead of the chosen one (with a path)",
    )
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if a.path is None:
        res = analyse_runs()
    else:
        data = json.loads(Path(a.path).read_text())
        if not points(data["windows"]):
            print(f"{a.path}: no point with both a base and a LoRA window without errors")
            return 1
        res = analyse(data["windows"], a.form)
    print(json.dumps(res, indent=1) if a.json else render(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
