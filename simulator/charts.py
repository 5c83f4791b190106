"""What the simulator's charts share: the figure, lines from a table, event marks, the time axis.

matplotlib with the Agg backend (no display): charts are written as PNG files.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from numpy.typing import ArrayLike

#: Line style keyword arguments for matplotlib (color, ls, lw, alpha).
Style = dict[str, Any]
#: One line of a chart: its values, legend label and style.
Line = tuple[ArrayLike, str, Style]


def figure(height: float) -> tuple[Any, tuple[Any, Any, Any]]:
    """Three stacked panels sharing the time axis."""
    fig, (top, middle, bottom) = plt.subplots(
        3, 1, figsize=(11, height), sharex=True, layout="constrained"
    )
    return fig, (top, middle, bottom)


def step_lines(ax: Any, times: Sequence[datetime], lines: Iterable[Line]) -> None:
    """Each line as a step plot (a value holds until the next one)."""
    for values, label, style in lines:
        ax.step(times, values, where="post", label=label, **style)


#: Marks closer than this share of the time axis get one label (their texts side by side).
CLOSE_MARKS = 0.03


def group_marks(
    marks: Sequence[tuple[datetime, str]], start: datetime, end: datetime
) -> list[tuple[datetime, list[str]]]:
    """``marks`` in time order, those within :data:`CLOSE_MARKS` of the axis of the group's
    first merged into one: (where the label goes, the texts). Two events a minute apart (a deploy
    that starts, then calls UpdateEndpoint) were written on top of each other."""
    gap = (end - start) * CLOSE_MARKS
    groups: list[tuple[datetime, list[str]]] = []
    for x, label in sorted(marks, key=lambda m: m[0]):
        if groups and x - groups[-1][0] <= gap:
            groups[-1][1].append(label)
        else:
            groups.append((x, [label]))
    return groups


def mark_events(axes: Sequence[Any], label_ax: Any, marks: Sequence[tuple[datetime, str]]) -> None:
    """A dashed vertical line at each mark on every axis; one label per group of close marks
    (:func:`group_marks`) at the top of ``label_ax``, its texts in parallel columns."""
    if not marks:
        return
    for ax in axes:
        for x, _ in marks:
            ax.axvline(x, color="gray", lw=0.6, ls="-.")
    lo, hi = (mdates.num2date(v) for v in label_ax.get_xlim())
    for x, labels in group_marks(marks, lo, hi):
        label_ax.annotate(
            "\n".join(labels),
            (mdates.date2num(x), label_ax.get_ylim()[1]),
            fontsize=7,
            va="top",
            rotation=90,
            xytext=(2, -2),
            textcoords="offset points",
            # above the legend, readable over the lines it crosses
            zorder=10,
            bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
        )


def merged_legend(ax: Any, twin: Any) -> None:
    """One legend on ``ax`` for its lines and those of its twin axis."""
    lines, more = ax.get_legend_handles_labels(), twin.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)


def save(fig: Any, bottom: Any, path: Path, tz: tzinfo, tz_name: str, time_format: str) -> None:
    """Label the shared time axis on the ``bottom`` panel, write the PNG, free the figure."""
    bottom.xaxis.set_major_formatter(mdates.DateFormatter(time_format, tz=tz))
    bottom.set_xlabel(f"time ({tz_name})")
    fig.savefig(path, dpi=80)
    plt.close(fig)
