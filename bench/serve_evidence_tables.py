"""Markdown tables from bench/serve_evidence.py's JSON (lora-ab windows, start-phases runs).

python3 bench/serve_evidence_tables.py docs/measurements/lora_http_vllm0.26.json [start_phases.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def f(x, nd=3):
    return "-" if x is None else (f"{x:,.{nd}f}" if isinstance(x, float) else str(x))


def lora_table(d: dict) -> str:
    rows = [
        "| prompt | in flight | engine | req/min | TTFT p50 / p95 (s) | e2e p50 (s) | "
        "decode tok/s/seq p50 | ITL p50 / p95 (ms) | ITL mean (ms) | SM MHz p50 (min-max) | "
        "W p50 | LoRA/base req/min |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    by = {}
    for w in d["windows"]:
        by.setdefault((w["prompt_tokens"], w["concurrency"]), {})[w["engine"]] = w
    for (p, c), e in sorted(by.items()):
        for eng in ("base", "lora"):
            w = e.get(eng)
            if not w:
                continue
            g = w.get("gpu", {})
            ratio = ""
            if eng == "lora" and "base" in e:
                ratio = f"**{w['req_per_min'] / e['base']['req_per_min']:.2f}**"
            itl = w["itl_s"]
            rows.append(
                f"| {p:,} | {c} | {'LoRA' if eng == 'lora' else 'no LoRA'} | "
                f"{w['req_per_min']:,.0f} | "
                f"{f(w['ttft_s']['p50'])} / {f(w['ttft_s']['p95'])} | "
                f"{f(w['e2e_s']['p50'], 2)} | "
                f"{f(w['decode_tps']['p50'], 1)} | "
                f"{itl['p50'] * 1e3:.1f} / {itl['p95'] * 1e3:.1f} | "
                f"{itl['mean'] * 1e3:.1f} | "
                f"{f(g.get('sm_mhz_p50'), 0)} ({f(g.get('sm_mhz_min'), 0)}-"
                f"{f(g.get('sm_mhz_max'), 0)}) | {f(g.get('power_w_p50'), 0)} | {ratio} |"
            )
    return "\n".join(rows)


def start_table(d: dict) -> str:
    rows = [
        "| run | /health 200 (s) | first answer (s) | all 3 adapters answered (s) | "
        "to load start | weights load | torch.compile (log) | compile+profile run | "
        "KV + graph capture | graph capture (log) | engine ready to app ready | KV tokens |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in d["runs"]:
        ph = r.get("phases", {})
        sp, ln = ph.get("spans_s", {}), ph.get("lines", {})
        tc = ln.get("torch_compile_done", {}).get("values", ["-"])[0]
        gc = ln.get("graph_capture_done", {}).get("values", ["-", "-"])
        kv = ln.get("kv_tokens", {}).get("values", ["-"])[0]
        rows.append(
            f"| {r['run']} | {f(r.get('health_200_s'), 1)} | {f(r.get('first_answer_s'), 1)} | "
            f"{f(r.get('all_adapters_answered_s'), 1)} | {f(sp.get('python_start_to_load'), 1)} | "
            f"{f(sp.get('weights_load'), 1)} | {tc} s | "
            f"{f(sp.get('compile_and_profile_run'), 1)} | "
            f"{f(sp.get('kv_cache_and_graph_capture'), 1)} | {gc[0]} s, {gc[1]} GiB | "
            f"{f(sp.get('engine_ready_to_app_ready'), 1)} | {kv} |"
        )
    return "\n".join(rows)


def main() -> None:
    for path in sys.argv[1:]:
        d = json.loads(Path(path).read_text())
        print(lora_table(d) if "windows" in d else start_table(d))
        print()


if __name__ == "__main__":
    main()
