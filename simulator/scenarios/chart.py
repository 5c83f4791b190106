"""Chart of one operator scenario: demand against capacity, instances, rejections, per run."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np

from simulator.charts import figure, mark_events, save, step_lines
from simulator.run import Result

STYLES = {
    "no deploy": {"color": "tab:gray", "ls": "--"},
    "before": {"color": "tab:red", "ls": "-"},
    "after": {"color": "tab:blue", "ls": "-"},
}


def deploy_chart(results: dict[str, Result], at: datetime, label: str, path: Path) -> None:
    any_res = next(iter(results.values()))
    tr = any_res.trace
    times = [tr.start + timedelta(minutes=m) for m in range(tr.minutes)]
    fig, (ax_c, ax_i, ax_r) = figure(8)
    head = ", ".join(
        f"{k}: {r.summary['rejected_429']:,} rejected, ${r.summary['cost_usd']:,}"
        for k, r in results.items()
    )
    fig.suptitle(f"deploy {label} | {tr.description}\n{head}", fontsize=9)
    demand = any_res.variant_per_minute("arrivals", "primary")
    ax_c.plot(times, demand, color="black", lw=1, label="primary demand")
    for key, res in results.items():
        st = STYLES.get(key, {})
        # the primary's own capacity against its own demand (the canary's serve its share only)
        cap = res.variant_per_minute("capacity_rpm", "primary", "min")
        capacity = (cap, f"primary capacity ({res.label})", st)
        step_lines(ax_c, times, [capacity])
        per_min = 60 // res.runs["primary"].tick_seconds
        billed = np.sum([r.series["launched"] for r in res.runs.values()], axis=0)[::per_min]
        billed_style = {"lw": 0.7, "alpha": 0.6, "color": st.get("color"), "ls": ":"}
        step_lines(
            ax_i,
            times,
            [
                (res.sampled("in_service"), f"primary serving ({key})", st),
                (billed, f"billed, both variants ({key})", billed_style),
            ],
        )
        step_lines(ax_r, times, [(res.per_minute("rejected"), f"429 / min ({key})", st)])
    ax_c.set_ylabel("requests / min")
    ax_i.set_ylabel("instances")
    ax_i.set_ylim(bottom=0)
    ax_r.set_ylabel("rejected / min")
    for ax in (ax_c, ax_i, ax_r):
        ax.legend(loc="upper left", fontsize=7, ncol=2)
    after = results.get("after")
    marks = [(0.0, "deploy starts")]
    if after is not None:
        offset = (at - tr.start).total_seconds()
        marks = [
            (t - offset, what.split(": ", 1)[-1]) for t, what in after.runs["primary"].operator_log
        ]
    mark_events((ax_c, ax_i, ax_r), ax_c, [(at + timedelta(seconds=t), what) for t, what in marks])
    save(fig, ax_r, path, ZoneInfo(tr.display_tz), tr.display_tz, "%H:%M")
