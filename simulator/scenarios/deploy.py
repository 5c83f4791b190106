"""Scenario "deploy at the JP evening peak": one deploy replayed three ways on the same evening.

- ``no deploy``: the evening as the configured policy runs it.
- ``before``: the template before issue 10 (RetainAllVariantProperties false: every deploy resets
  each variant to its InitialInstanceCount and weight) deployed with a bare `cdk deploy`.
  Replayed as this config with ``reset_on_update: [DesiredInstanceCount, DesiredWeight]``, which
  has the same effect on counts and weights, and no count raise first.
- ``after``: the config as shipped, deployed with `make deploy` (tools/deploy.py raises counts
  first when the schedules need more during the update).

The evening is the built-in ordinary Tuesday's JP evening, 16:00-24:00 JST, times ``factor``
(1.8 by default: busy enough that the policy holds 7 primary instances at 20:00, the issue's
example; 1.0 is the ordinary evening). Deploys at 20:00 (the peak) and at 17:30 (just before the
17:45 pre-scale, which an update would block). The target: ``after`` loses no capacity and
rejects nothing beyond ``no deploy`` in the hour after the deploy starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from simulator.assumptions import Assumptions
from simulator.events import Deploy
from simulator.run import Result, simulate
from simulator.traces import JST, Trace, _day_shape
from sizing.deploy_options import DeployOptions
from sizing.update_semantics import ALL_PROPERTIES
from typed_config import DeploymentConfig

NAME = "deploy-at-peak"
BUSY_FACTOR = 1.8
DEPLOY_TIMES = ((20, 0, "at the 20:00 peak"), (17, 30, "at 17:30, before the 17:45 pre-scale"))


def jp_evening(factor: float = BUSY_FACTOR) -> Trace:
    start = datetime(2026, 12, 1, 16, 0, tzinfo=JST)  # the built-in normal day's Tuesday
    rpm = _day_shape(start, 8 * 60) * factor
    return Trace(
        "jp-evening",
        start,
        rpm,
        f"JP evening 16:00-24:00 JST, ordinary Tuesday x {factor:g} "
        f"(peak {rpm.max():,.0f} requests/minute)",
    )


def todays_config(cfg: DeploymentConfig) -> DeploymentConfig:
    """The same config as today's template deploys it: counts and weights reset."""
    return DeployOptions(reset=ALL_PROPERTIES).apply(cfg)


@dataclass
class Case:
    label: str
    at: datetime
    results: dict[str, Result]


def _window(res: Result, at: datetime, minutes: int = 60) -> slice:
    first = int((at - res.trace.start).total_seconds() // 60)
    return slice(first, first + minutes)


def hour_figures(res: Result, at: datetime) -> dict[str, object]:
    """Rejections, capacity and billed instances in the hour after ``at``."""
    w = _window(res, at)
    per_min = 60 // res.runs["primary"].tick_seconds
    prim = res.runs["primary"].series
    start, stop = w.start * per_min, w.stop * per_min
    return {
        "rejected_in_hour": round(float(res.per_minute("rejected")[w].sum())),
        "primary_in_service_min_in_hour": int(prim["in_service"][start:stop].min()),
        # the primary's own: the canary's instances serve only the canary's share
        "capacity_rpm_min_in_hour": round(
            float(res.variant_per_minute("capacity_rpm", "primary", "min")[w].min())
        ),
        "demand_rpm_max_in_hour": round(
            float(res.variant_per_minute("arrivals", "primary")[w].max())
        ),
        "billed_instances_max": int(
            np.sum([r.series["launched"] for r in res.runs.values()], axis=0).max()
        ),
        "rejected_total": res.summary["rejected_429"],
        "minutes_over_slo": res.summary["minutes_over_slo"],
        "cost_usd": res.summary["cost_usd"],
    }


def run(cfg: DeploymentConfig, a: Assumptions, factor: float = BUSY_FACTOR) -> list[Case]:
    trace = jp_evening(factor)
    base = simulate(cfg, trace, a, label="no deploy")
    before_cfg = todays_config(cfg)
    cases = []
    for hour, minute, label in DEPLOY_TIMES:
        at = datetime(2026, 12, 1, hour, minute, tzinfo=JST)
        before = simulate(
            before_cfg, trace, a, "before: reset, cdk deploy", [Deploy(at, prescale=False)]
        )
        after = simulate(cfg, trace, a, "after: retained, make deploy", [Deploy(at)])
        cases.append(Case(label, at, {"no deploy": base, "before": before, "after": after}))
    return cases


def _num(value: object) -> float:
    """A figure of :func:`hour_figures` (each is an int or a float)."""
    if not isinstance(value, int | float):
        raise TypeError(f"not a number: {value!r}")
    return float(value)


def report(cases: list[Case]) -> dict[str, object]:
    out: dict[str, object] = {}
    for case in cases:
        figs = {k: hour_figures(r, case.at) for k, r in case.results.items()}
        base, after = figs["no deploy"], figs["after"]
        ops = case.results["after"].runs["primary"].operator_log
        out[case.label] = {
            "deploy_at": case.at.isoformat(),
            "runs": figs,
            "after_timeline_minutes": [
                (
                    round(
                        (t - (case.at - case.results["after"].trace.start).total_seconds()) / 60, 1
                    ),
                    what,
                )
                for t, what in ops
            ],
            "target_met": (
                _num(after["rejected_in_hour"]) <= _num(base["rejected_in_hour"])
                and _num(after["capacity_rpm_min_in_hour"])
                >= _num(base["capacity_rpm_min_in_hour"])
            ),
            "deploy_cost_usd": round(_num(after["cost_usd"]) - _num(base["cost_usd"]), 2),
        }
    return out


#: The table's rows: (key of :func:`hour_figures`, label, what it is).
ROWS = (
    ("rejected_in_hour", "rejected in the hour", "429s in the hour from the deploy's start"),
    ("primary_in_service_min_in_hour", "primary in service (min)",
     "fewest primary instances serving in that hour"),
    ("capacity_rpm_min_in_hour", "primary capacity rpm (min)",
     "least requests/minute the primary's serving instances could answer in that hour"),
    ("demand_rpm_max_in_hour", "primary demand rpm (max)",
     "most requests/minute its weight sent the primary in that hour"),
    ("billed_instances_max", "billed instances (max)",
     "most instances billed at once, both variants, blue and green fleets"),
    ("minutes_over_slo", "minutes over SLO (eve)", "minutes of the whole evening over an SLO"),
    ("cost_usd", "cost USD (evening)", "the evening's bill, both variants"),
)  # fmt: skip
#: What each column is (the module docstring has the why).
COLUMNS = (
    ("no deploy", "the same evening without a deploy: what the deploy is measured against"),
    ("before", "the deploy as it ran before this product: a bare cdk deploy whose update resets "
     "each variant to its initial_instance_count and weight"),
    ("after", "the deploy as make deploy runs it: counts raised first where the schedules need "
     "more, the live counts and weights kept (deployment.reset_on_update: [])"),
)  # fmt: skip


def legend() -> list[str]:
    """The table's legend: every column and row named, said once under the tables."""
    width = max(len(label) for _, label, _ in ROWS)
    return [
        "   columns:",
        *(f"     {name:<{width}}  {what}" for name, what in COLUMNS),
        "   rows:",
        *(f"     {label:<{width}}  {what}" for _, label, what in ROWS),
    ]


def table(summary: dict[str, object], trace: Trace) -> str:
    lines = [f"== {NAME}: {trace.description}"]
    rows = [(key, label) for key, label, _ in ROWS]
    for label, entry in summary.items():
        assert isinstance(entry, dict)
        runs = entry["runs"]
        lines.append(f"-- deploy {label}")
        lines.append(f"{'':30}{'no deploy':>12}{'before':>12}{'after':>12}")
        for key, name in rows:
            lines.append(
                f"{name:30}"
                + "".join(f"{runs[k][key]:>12,}" for k in ("no deploy", "before", "after"))
            )
        verdict = "met" if entry["target_met"] else "NOT MET"
        lines.append(
            f"target (after: no capacity lost, no rejection beyond no deploy): {verdict}; "
            f"deploy costs ${entry['deploy_cost_usd']} (green fleet while both run)"
        )
    return "\n".join(lines + legend())


def write(cfg: DeploymentConfig, a: Assumptions, out: Path, *, charts: bool = True) -> str:
    """Run, write ``deploy-at-peak.json`` (+ one chart per deploy time), return the table."""
    import json

    cases = run(cfg, a)
    summary = report(cases)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{NAME}.json").write_text(json.dumps(summary, indent=2, default=str))
    if charts:
        from simulator.scenarios.chart import deploy_chart

        for i, case in enumerate(cases):
            deploy_chart(case.results, case.at, case.label, out / f"{NAME}-{i + 1}.png")
    return table(summary, cases[0].results["no deploy"].trace)
