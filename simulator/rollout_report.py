"""Text table and chart of the canary rollout scenario (simulator/rollout.py)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from simulator.charts import Line, Style, figure, merged_legend, save, step_lines
from simulator.rollout import NAME
from simulator.traces import JST

#: Per-minute rollout rows on the instances panel: (row key, label, style).
INSTANCE_LINES = (
    ("canary_in_service", "canary in service", {"color": "tab:blue"}),
    ("canary_min", "canary min (controller)", {"color": "tab:green", "ls": ":"}),
    ("canary_max", "canary max (controller)", {"color": "tab:red", "ls": ":"}),
    ("primary_in_service", "primary in service", {"color": "tab:purple", "lw": 0.8}),
)
WEIGHTS_ONLY = {"color": "tab:gray", "ls": "--"}


def _column(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [x[key] for x in rows]


def _title(result: dict[str, Any], before: dict[str, Any] | None) -> str:
    s = result["summary"]
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
    return title


def chart(result: dict[str, Any], path: Path, before: dict[str, Any] | None = None) -> None:
    """Canary traffic against canary capacity, instances and bounds, weight and 429s."""
    tr = result["trace"]
    first = min(st["minute"] for st in result["steps"]) - 30 if result["steps"] else 0
    last = min(len(result["rows"]), max(st["minute"] for st in result["steps"]) + 150)
    rows = result["rows"][max(0, first) : last]
    brows = before["rows"][max(0, first) : last] if before is not None else []
    times = [tr.start + timedelta(minutes=x["minute"]) for x in rows]
    fig, (ax_t, ax_i, ax_w) = figure(8)
    fig.suptitle(_title(result, before), fontsize=10)
    ax_t.plot(times, _column(rows, "canary_arrivals"), color="black", lw=1, label="canary traffic")
    capacity: list[Line] = [
        (
            _column(rows, "canary_capacity"),
            "canary capacity (capacity first)",
            {"color": "tab:blue"},
        )
    ]
    if before is not None:
        label = "canary capacity (weights only)"
        capacity.append((_column(brows, "canary_capacity"), label, WEIGHTS_ONLY))
    step_lines(ax_t, times, capacity)
    if before is not None:
        ax_t.plot(
            times,
            _column(brows, "canary_arrivals"),
            color="tab:gray",
            lw=0.8,
            ls=":",
            label="canary traffic (weights only)",
        )
    ax_t.set_ylabel("requests / min")
    ax_t.legend(loc="upper left", fontsize=8)
    step_lines(ax_i, times, [(_column(rows, k), label, st) for k, label, st in INSTANCE_LINES])
    ax_i.set_ylabel("instances")
    ax_i.set_ylim(bottom=0)
    ax_i.legend(loc="upper left", fontsize=8, ncol=2)
    weight: Style = {"color": "tab:orange"}
    step_lines(ax_w, times, [(_column(rows, "canary_weight"), "canary weight %", weight)])
    ax_w.set_ylabel("canary weight %")
    ax_r = ax_w.twinx()
    ax_r.fill_between(
        times,
        _column(rows, "canary_rejected"),
        step="post",
        color="tab:red",
        alpha=0.5,
        label="canary 429 / min",
    )
    if before is not None:
        label = "canary 429 / min (weights only)"
        step_lines(ax_r, times, [(_column(brows, "canary_rejected"), label, WEIGHTS_ONLY)])
    ax_r.set_ylabel("rejected / min")
    merged_legend(ax_w, ax_r)
    save(fig, ax_w, path, JST, "Asia/Tokyo", "%H:%M")


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
    return "\n".join(lines + LEGEND)


#: Every column of the two tables above, said once under them.
LEGEND = [
    "   step: the canary's traffic weight; at: when the controller moved it there; canary inst.: "
    "canary instances serving at that moment; max inst.: the most during the step; peak traffic,"
    " min capacity, min headroom: requests/minute the canary got at most, could answer at least,"
    " and their least difference during the step; rejected: the canary's 429s in the step",
    "   capacity first: the controller as shipped (the canary's instances raised and in service "
    "before each weight move); weights only: the controller before that, moving weights alone",
]
