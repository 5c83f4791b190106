"""Chart and text table of one simulation result (and its baseline)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np

from simulator.charts import Line, figure, mark_events, merged_legend, save, step_lines
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
    ("ttft_p50_ms", "TTFT p50 ms"),
    ("ttft_p95_ms", "TTFT p95 ms"),
    ("e2e_p50_ms", "end-to-end p50 ms"),
    ("e2e_p95_ms", "end-to-end p95 ms"),
    ("minutes_over_slo", "minutes over SLO"),
    ("instance_hours", "instance-hours"),
    ("cost_usd", "cost USD"),
    ("cost_per_month_usd", "cost per month USD"),
    ("floor_cost_per_month_usd", "  of it at the floors"),
)
#: The primary's instance lines: (series, label, style).
PRIMARY_LINES = (
    ("in_service", "primary in service", {"color": "tab:blue"}),
    ("launched", "primary launched (billed)", {"color": "tab:cyan", "lw": 0.8}),
    ("min_cap", "min (schedules + standby)", {"color": "tab:green", "ls": ":"}),
    ("max_cap", "max", {"color": "tab:red", "ls": ":"}),
)
BASELINE = {"color": "tab:gray", "ls": "--"}


def _headline(result: Result, baseline: Result | None) -> str:
    tr, s = result.trace, result.summary
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
    return title


#: Each variant's colour in the traffic-and-capacity panel.
VARIANT_COLOURS = {"primary": "tab:blue", "canary": "tab:orange"}


def capacity_lines(result: Result) -> list[Line]:
    """Per variant, the traffic its weight sends it and the capacity its own instances serve
    (requests/minute). One summed capacity line counted the canary's instances against traffic
    they never get: it sat above the peak while the primary queued 20 s."""
    lines: list[Line] = []
    for v, run in result.runs.items():
        colour = VARIANT_COLOURS.get(v, "tab:gray")
        share = f"{100 * run.share:.0f} %"
        lines += [
            (result.variant_per_minute("arrivals", v), f"traffic to {v} ({share})",
             {"color": colour, "lw": 0.8, "alpha": 0.7}),
            (result.variant_per_minute("capacity_rpm", v, "max"), f"{v} capacity",
             {"color": colour, "lw": 1.6}),
        ]  # fmt: skip
    return lines


def chart(result: Result, path: Path, baseline: Result | None = None) -> None:
    """Traffic vs capacity, instances, rejections and queue wait over time, one PNG."""
    tr = result.trace
    times = [tr.start + timedelta(minutes=m) for m in range(tr.minutes)]
    fig, axes = figure(7.5)
    ax_t, ax_i, ax_r = axes
    fig.suptitle(_headline(result, baseline), fontsize=10)
    step_lines(ax_t, times, capacity_lines(result))
    if baseline is not None:
        label = f"primary capacity ({baseline.label})"
        step_lines(
            ax_t,
            times,
            [(baseline.variant_per_minute("capacity_rpm", "primary", "max"), label, BASELINE)],
        )
    ax_t.set_ylabel("requests / min")
    ax_t.legend(loc="center left", fontsize=8, ncol=2)  # the top holds the event labels
    step_lines(ax_i, times, [(result.sampled(k), label, st) for k, label, st in PRIMARY_LINES])
    if baseline is not None:
        label = f"in service ({baseline.label})"
        step_lines(ax_i, times, [(baseline.sampled("in_service"), label, BASELINE)])
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
        label = f"429 / min ({baseline.label})"
        step_lines(ax_r, times, [(baseline.per_minute("rejected"), label, BASELINE)])
    ax_r.set_ylabel("rejected / min")
    ax_w = ax_r.twinx()
    per_min = 60 // result.runs["primary"].tick_seconds
    waits = np.max(
        [r.series["wait_s"].reshape(-1, per_min).max(axis=1) for r in result.runs.values()], axis=0
    )
    ax_w.plot(times, waits, color="tab:orange", lw=0.8, label="worst queue wait (s)")
    ax_w.set_ylabel("queue wait s")
    ax_w.set_ylim(bottom=0)
    merged_legend(ax_r, ax_w)
    mark_events(axes, ax_t, [(times[minute], label) for minute, label in tr.marks])
    save(fig, ax_r, path, ZoneInfo(tr.display_tz), tr.display_tz, "%a %H:%M")


def table(result: Result, baseline: Result | None = None) -> str:
    """The summary rows side by side; each column as wide as its label needs (a long label
    once ran into the next column: ``primary max 12baseline prod.yaml``)."""
    width = max(16, len(result.label) + 2)
    head = f"{'':24}{result.label:>{width}}"
    base_width = max(16, len(baseline.label) + 2) if baseline is not None else 0
    if baseline is not None:
        head += f"{baseline.label:>{base_width}}{'change':>12}"
    lines = [f"== {result.trace.name}: {result.trace.description}", head]
    capped = False
    for key, label in ROWS:
        value = result.summary[key]
        line = f"{label:24}{value:>{width},}"
        at_cap = [at_queue_cap(r.summary, key) for r in (result, baseline) if r is not None]
        if baseline is not None:
            other = baseline.summary[key]
            assert isinstance(value, int | float) and isinstance(other, int | float)
            line += f"{other:>{base_width},}{value - other:>+12,.6g}"
        if any(at_cap):
            capped = True
            line += "  <- the admission cap" + (
                " in both: no comparison" if all(at_cap) and len(at_cap) > 1 else ""
            )
        lines.append(line)
    if capped:
        cap = result.summary["queue_wait_cap_ms"]
        limits = sorted({r.instance.admission_limit for r in result.runs.values()})
        lines.append(
            f"admission cap: {cap:,} ms is the wait in a full queue, not a measured spread: an "
            "instance holds at most engine.admission_max_inflight "
            f"({', '.join(map(str, limits))}) requests and answers 429 beyond, so the wait "
            "stops growing there and the overflow shows as rejected (429) instead"
        )
    sources = {r.instance.speed_source for r in result.runs.values()}
    lines += [f"speed: {src}" for src in sorted(sources)]
    return "\n".join(lines)


#: The rows a request's queue wait caps (its TTFT and end-to-end add the service on top).
QUEUE_WAIT_ROWS = ("queue_wait_p50_ms", "queue_wait_p95_ms")


def at_queue_cap(summary: dict[str, object], key: str) -> bool:
    """Whether ``key``'s figure is the admission cap (simulator.run.queue_wait_cap_s), to 0.1 ms."""
    cap = summary.get("queue_wait_cap_ms")
    value = summary.get(key)
    return (
        key in QUEUE_WAIT_ROWS
        and isinstance(cap, int | float)
        and isinstance(value, int | float)
        and cap > 0
        and abs(value - cap) <= 0.1
    )
