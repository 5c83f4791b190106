"""The routing comparison (:mod:`simulator.routing.compare`) as a table: what ``make simulate`` and
``python -m simulator routing`` print per window."""

from __future__ import annotations

import numpy as np

from simulator.routing.compare import Comparison


def table(c: Comparison) -> str:
    """The routing comparison as ``make simulate`` prints it."""
    w = c.window
    base = next((r for r in c.results if r.spec.strategy == "RANDOM"), c.results[0])
    lines = [
        f"== routing, {w.name}: {w.instances} {c.variant} instances, "
        f"~{w.mean_rpm * c.share:,.0f} requests/minute ({c.share:.0%} of the trace), "
        f"{w.minutes} min measured after {w.warmup} min of warm-up",
        f"   sessions: geometric turns (mean {c.sessions.mean_turns:g}; "
        f"{c.sessions.share_over(8):.1%} over 8), think time {c.sessions.think_seconds:g} s, "
        f"retrieval {c.sessions.retrieval_tokens[0]}-{c.sessions.retrieval_tokens[1]} "
        "tokens a turn",
        f"{'routing':44}{'hit rate':>9}{'prefill tok/s/inst':>20}{'TTFT p50/p95 ms':>17}"
        f"{'SLO':>5}{'busiest':>9}{'spilled':>9}{'rpm/inst':>13}",
    ]
    for r in c.results:
        tps = r.prefill_tps_per_instance
        mark = "* " if r.spec.configured else "  "
        delta = r.capacity_rpm - base.capacity_rpm
        lines.append(
            f"{mark}{r.spec.label:42}{r.hit_rate:>9.1%}"
            f"{f'{np.mean(tps):,.0f} (max {max(tps):,.0f})':>20}"
            f"{f'{r.ttft_p50_ms:,.0f} / {r.ttft_p95_ms:,.0f}':>17}"
            f"{'ok' if r.meets_slo else 'MISS':>5}{r.busiest_share:>9.1%}"
            f"{r.spilled_share:>9.1%}{f'{r.capacity_rpm:,.0f} ({delta:+,.0f})':>13}"
        )
    lines += [
        f"   * the config's routing (variants.{c.variant}.routing; none: SageMaker's default, "
        f"RANDOM). TTFT and SLO: at this window's load on {w.instances} instance(s) (TTFT p50 < "
        f"{base.slo_ttft_p50_ms:g} ms); the plan's figures, at the scaling target: "
        + "; ".join(c.at_target)
        + ". busiest: the busiest instance's "
        f"share of requests (fair: {1 / w.instances:.1%}). rpm/inst: requests/minute one "
        "instance serves at the KV bound with that mean shape (change vs RANDOM).",
        f"   body bytes: the system prompt ends at byte {c.system_ends_at:,} of a system-first "
        f"body, a first user message at ~{c.first_user_ends_at:,}: a PrefixLength up to "
        f"{c.system_ends_at:,} hashes every request alike.",
        f"   {c.prefill.describe()}",
    ]
    return "\n".join(lines)
