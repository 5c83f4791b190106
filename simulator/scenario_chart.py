"""Chart of one operator scenario: demand against capacity, instances, rejections, per run."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import numpy as np

from simulator.report import mark_event
from simulator.run import Result

STYLES = {
    "no deploy": {"color": "tab:gray", "ls": "--"},
    "before": {"color": "tab:red", "ls": "-"},
    "after": {"color": "tab:blue", "ls": "-"},
}


def deploy_chart(results: dict[str, Result], at: datetime, label: str, path: Path) -> None:
    any_res = next(iter(results.values()))
    tr = any_res.trace
    tz = ZoneInfo(tr.display_tz)
    times = [tr.start + timedelta(minutes=m) for m in range(tr.minutes)]
    fig, (ax_c, ax_i, ax_r) = plt.subplots(3, 1, figsize=(11, 8), sharex=True, layout="constrained")
    head = ", ".join(
        f"{k}: {r.summary['rejected_429']:,} rejected, ${r.summary['cost_usd']:,}"
        for k, r in results.items()
    )
    fig.suptitle(f"deploy {label} | {tr.description}\n{head}", fontsize=9)
    ax_c.plot(times, any_res.per_minute("arrivals"), color="black", lw=1, label="demand")
    for key, res in results.items():
        st = STYLES.get(key, {})
        ax_c.step(
            times,
            res.per_minute("capacity_rpm", "min"),
            where="post",
            label=f"capacity ({res.label})",
            **st,
        )
        per_min = 60 // res.runs["primary"].tick_seconds
        prim = res.runs["primary"].series
        ax_i.step(
            times,
            prim["in_service"][::per_min],
            where="post",
            label=f"primary serving ({key})",
            **st,
        )
        billed = np.sum([r.series["launched"] for r in res.runs.values()], axis=0)[::per_min]
        ax_i.step(
            times,
            billed,
            where="post",
            lw=0.7,
            alpha=0.6,
            color=st.get("color"),
            ls=":",
            label=f"billed, both variants ({key})",
        )
        ax_r.step(times, res.per_minute("rejected"), where="post", label=f"429 / min ({key})", **st)
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
    for seconds, what in marks:
        mark_event((ax_c, ax_i, ax_r), ax_c, at + timedelta(seconds=seconds), what)
    ax_r.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=tz))
    ax_r.set_xlabel(f"time ({tr.display_tz})")
    fig.savefig(path, dpi=80)
    plt.close(fig)
