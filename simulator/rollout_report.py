"""Text table and chart of the canary rollout scenario (simulator/rollout.py)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt

from simulator.rollout import NAME
from simulator.traces import JST


def chart(result: dict[str, Any], path: Path, before: dict[str, Any] | None = None) -> None:
    """Canary traffic against canary capacity, instances and bounds, weight and 429s."""
    tr, s = result["trace"], result["summary"]
    first = min(st["minute"] for st in result["steps"]) - 30 if result["steps"] else 0
    last = min(len(result["rows"]), max(st["minute"] for st in result["steps"]) + 150)
    rows = result["rows"][max(0, first) : last]
    times = [tr.start + timedelta(minutes=x["minute"]) for x in rows]
    fig, (ax_t, ax_i, ax_w) = plt.subplots(3, 1, figsize=(11, 8), sharex=True, layout="constrained")
    title = (
        f"{NAME}: {' -> '.join(str(p['percent']) for p in s['steps'])} % from {s['start']} | "
        f"canary over capacity {s['canary_minutes_over_capacity']} min, "
        f"{s['canary_rejected']:,} rejected, canary ${s['canary_cost_usd']:,}"
    )
    if before is not None:
        b = before["summary"]
        title += (
            f"\nweights only (before): over capacity {b['canary_minutes_over_capacity']} min, "
            f"{b['canary_rejected']:,} rejected"
        )
    fig.suptitle(title, fontsize=10)
    ax_t.plot(
        times, [x["canary_arrivals"] for x in rows], color="black", lw=1, label="canary traffic"
    )
    ax_t.step(
        times,
        [x["canary_capacity"] for x in rows],
        where="post",
        color="tab:blue",
        label="canary capacity (capacity first)",
    )
    if before is not None:
        brows = before["rows"][max(0, first) : last]
        ax_t.step(
            times,
            [x["canary_capacity"] for x in brows],
            where="post",
            color="tab:gray",
            ls="--",
            label="canary capacity (weights only)",
        )
        ax_t.plot(
            times,
            [x["canary_arrivals"] for x in brows],
            color="tab:gray",
            lw=0.8,
            ls=":",
            label="canary traffic (weights only)",
        )
    ax_t.set_ylabel("requests / min")
    ax_t.legend(loc="upper left", fontsize=8)
    ax_i.step(
        times,
        [x["canary_in_service"] for x in rows],
        where="post",
        color="tab:blue",
        label="canary in service",
    )
    ax_i.step(
        times,
        [x["canary_min"] for x in rows],
        where="post",
        color="tab:green",
        ls=":",
        label="canary min (controller)",
    )
    ax_i.step(
        times,
        [x["canary_max"] for x in rows],
        where="post",
        color="tab:red",
        ls=":",
        label="canary max (controller)",
    )
    ax_i.step(
        times,
        [x["primary_in_service"] for x in rows],
        where="post",
        color="tab:purple",
        lw=0.8,
        label="primary in service",
    )
    ax_i.set_ylabel("instances")
    ax_i.set_ylim(bottom=0)
    ax_i.legend(loc="upper left", fontsize=8, ncol=2)
    ax_w.step(
        times,
        [x["canary_weight"] for x in rows],
        where="post",
        color="tab:orange",
        label="canary weight %",
    )
    ax_w.set_ylabel("canary weight %")
    ax_r = ax_w.twinx()
    ax_r.fill_between(
        times,
        [x["canary_rejected"] for x in rows],
        step="post",
        color="tab:red",
        alpha=0.5,
        label="canary 429 / min",
    )
    if before is not None:
        ax_r.step(
            times,
            [x["canary_rejected"] for x in before["rows"][max(0, first) : last]],
            where="post",
            color="tab:gray",
            ls="--",
            label="canary 429 / min (weights only)",
        )
    ax_r.set_ylabel("rejected / min")
    lines, more = ax_w.get_legend_handles_labels(), ax_r.get_legend_handles_labels()
    ax_w.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)
    ax_w.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=JST))
    ax_w.set_xlabel("time (Asia/Tokyo)")
    fig.savefig(path, dpi=80)
    plt.close(fig)


def table(result: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    s = result["summary"]
    lines = [
        f"== {NAME}: rollout {' -> '.join(str(p['percent']) for p in s['steps'])} % from "
        f"{s['start']} to {s['end']} on the normal-day trace: {s['status']}",
        f"{'step':>6} {'at':>10} {'canary inst.':>13} {'max inst.':>10} {'peak traffic':>13} "
        f"{'min capacity':>13} {'min headroom':>13} "
        f"{'rejected':>9}",
    ]
    for p in s["steps"]:
        lines.append(
            f"{p['percent']:>5}% {p['at']:>10} {p['canary_instances_at_shift']:>13} "
            f"{p['canary_instances_max']:>10} {p['canary_traffic_peak_rpm']:>13,} "
            f"{p['canary_capacity_min_rpm']:>13,} {p['min_headroom_rpm']:>13,} "
            f"{p['canary_rejected']:>9,}"
        )
    rows = [
        ("canary minutes over capacity", "canary_minutes_over_capacity"),
        ("canary rejected (429)", "canary_rejected"),
        ("primary rejected (429)", "primary_rejected"),
        ("canary instance-hours", "canary_instance_hours"),
        ("canary cost USD", "canary_cost_usd"),
    ]
    head = f"{'':32}{'capacity first':>16}" + (f"{'weights only':>16}" if before else "")
    lines.append(head)
    for label, key in rows:
        line = f"{label:32}{s[key]:>16,}"
        if before:
            line += f"{before['summary'][key]:>16,}"
        lines.append(line)
    return "\n".join(lines)
