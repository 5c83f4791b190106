"""Charts (matplotlib, Agg) and text tables for simulation results."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import numpy as np

from simulator.run import Result

#: Summary rows shown in the text table: (key, label).
ROWS = (
    ("requests", "requests"),
    ("served", "served"),
    ("queued", "queued (waited)"),
    ("rejected_429", "rejected (429)"),
    ("rejected_pct", "rejected %"),
    ("queue_wait_p50_ms", "queue wait p50 ms"),
    ("queue_wait_p95_ms", "queue wait p95 ms"),
    ("minutes_over_slo", "minutes over SLO"),
    ("instance_hours", "instance-hours"),
    ("cost_usd", "cost USD"),
    ("cost_per_30_days_usd", "cost per 30 days USD"),
)


def mark_event(axes: Sequence[Any], label_ax: Any, x: datetime, label: str) -> None:
    """A dashed vertical line at ``x`` on every axis, labelled at the top of ``label_ax``."""
    for ax in axes:
        ax.axvline(x, color="gray", lw=0.6, ls="-.")
    label_ax.annotate(
        label,
        (mdates.date2num(x), label_ax.get_ylim()[1]),
        fontsize=7,
        va="top",
        rotation=90,
        xytext=(2, -2),
        textcoords="offset points",
    )


def chart(result: Result, path: Path, baseline: Result | None = None) -> None:
    """Traffic vs capacity, instances, rejections and queue wait over time, one PNG."""
    tr = result.trace
    tz = ZoneInfo(tr.display_tz)
    times = [tr.start + timedelta(minutes=m) for m in range(tr.minutes)]
    fig, axes = plt.subplots(3, 1, figsize=(11, 7.5), sharex=True, layout="constrained")
    ax_t, ax_i, ax_r = axes
    s = result.summary
    title = (
        f"{tr.name} | {result.label}: {s['rejected_pct']}% rejected, "
        f"{s['minutes_over_slo']} min over SLO, ${s['cost_usd']:,} "
        f"({s['instance_hours']} instance-h)"
    )
    if baseline is not None:
        b = baseline.summary
        title += (
            f"\nbaseline {baseline.label}: {b['rejected_pct']}% rejected, "
            f"{b['minutes_over_slo']} min over SLO, ${b['cost_usd']:,}"
        )
    fig.suptitle(title, fontsize=10)
    ax_t.plot(times, result.per_minute("arrivals"), color="black", lw=1, label="traffic")
    cap = result.per_minute("capacity_rpm", "max")
    ax_t.step(times, cap, where="post", color="tab:blue", label=f"capacity ({result.label})")
    if baseline is not None:
        bcap = baseline.per_minute("capacity_rpm", "max")
        ax_t.step(
            times,
            bcap,
            where="post",
            color="tab:gray",
            ls="--",
            label=f"capacity ({baseline.label})",
        )
    ax_t.set_ylabel("requests / min")
    ax_t.legend(loc="upper left", fontsize=8)
    per_min = 60 // result.runs["primary"].tick_seconds
    prim = result.runs["primary"].series
    ax_i.step(
        times,
        prim["in_service"][::per_min],
        where="post",
        color="tab:blue",
        label="primary in service",
    )
    ax_i.step(
        times,
        prim["launched"][::per_min],
        where="post",
        color="tab:cyan",
        lw=0.8,
        label="primary launched (billed)",
    )
    ax_i.step(
        times,
        prim["min_cap"][::per_min],
        where="post",
        color="tab:green",
        ls=":",
        label="min (schedules + standby)",
    )
    ax_i.step(times, prim["max_cap"][::per_min], where="post", color="tab:red", ls=":", label="max")
    if baseline is not None:
        ax_i.step(
            times,
            baseline.runs["primary"].series["in_service"][::per_min],
            where="post",
            color="tab:gray",
            ls="--",
            label=f"in service ({baseline.label})",
        )
    ax_i.set_ylabel("instances")
    ax_i.set_ylim(bottom=0)
    ax_i.legend(loc="upper left", fontsize=8, ncol=2)
    ax_r.fill_between(
        times,
        result.per_minute("rejected"),
        step="post",
        color="tab:red",
        alpha=0.6,
        label=f"429 / min ({result.label})",
    )
    if baseline is not None:
        ax_r.step(
            times,
            baseline.per_minute("rejected"),
            where="post",
            color="tab:gray",
            ls="--",
            label=f"429 / min ({baseline.label})",
        )
    ax_r.set_ylabel("rejected / min")
    ax_w = ax_r.twinx()
    waits = np.max(
        [r.series["wait_s"].reshape(-1, per_min).max(axis=1) for r in result.runs.values()], axis=0
    )
    ax_w.plot(times, waits, color="tab:orange", lw=0.8, label="worst queue wait (s)")
    ax_w.set_ylabel("queue wait s")
    ax_w.set_ylim(bottom=0)
    lines = ax_r.get_legend_handles_labels()
    more = ax_w.get_legend_handles_labels()
    ax_r.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)
    for minute, label in tr.marks:
        mark_event(axes, ax_t, times[minute], label)
    ax_r.xaxis.set_major_formatter(mdates.DateFormatter("%a %H:%M", tz=tz))
    ax_r.set_xlabel(f"time ({tr.display_tz})")
    fig.savefig(path, dpi=80)
    plt.close(fig)


def table(result: Result, baseline: Result | None = None) -> str:
    head = f"{'':24}{result.label:>16}"
    if baseline is not None:
        head += f"{baseline.label:>16}{'change':>12}"
    lines = [f"== {result.trace.name}: {result.trace.description}", head]
    for key, label in ROWS:
        value = result.summary[key]
        line = f"{label:24}{value:>16,}"
        if baseline is not None:
            other = baseline.summary[key]
            assert isinstance(value, int | float) and isinstance(other, int | float)
            line += f"{other:>16,}{value - other:>+12,.6g}"
        lines.append(line)
    return "\n".join(lines)
