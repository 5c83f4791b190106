"""The figures a user acts on, computed once for every command that prints them: the monthly cost
(:func:`monthly_bill`) and what a user sees at the scaling target (:func:`at_target_lines`: TTFT
p50/p95, tokens per second per user, TPOT p95, the typical answer's end-to-end time). The plan
(``make synth``), ``make simulate``, ``make fleet``, the routing table and the capacity gate
import these, so one config prints one set of figures (issue 42: the same config once read TTFT
p50 52, 246, 457 or 502 ms and a month $16,591 or $30,558 depending on the command).

The month: the normal day replayed with the fleet's scaling on every day of the week whose bounds
differ (simulator/week.py), each day's billed instance-minutes weighted by the share of the week
it stands for, x 730 h / 24 h, plus a canary raised only while a release runs for the release
hours of the month (sizing.fleet_cost.release_canary_monthly). :func:`monthly_by_edge` gives the
same month at each edge of the speed model's error band (issue 42: the pessimistic figure is the
one the product decides on; the central and optimistic ones say what the error is worth).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from simulator.assumptions import Assumptions
from simulator.fleet.scenarios import ScenarioRun, run_scenario
from sizing.fleet_cost import MonthByEdge, monthly, release_canary_monthly
from sizing.serving_speed import EDGES, Edge
from sizing.speed_plan import at_target, render_at_target
from typed_config import DeploymentConfig, VariantName


def run_cost_usd(run: ScenarioRun) -> float:
    """What one scenario run bills: every variant's instance-minutes at its price."""
    return sum(float(vm.billed.sum()) / 60 * vm.price_per_hour for vm in run.variants.values())


def week_monthly(
    day_usd: dict[str, float], share_of_week: dict[str, float], release_usd: float = 0.0
) -> float:
    """The month from the week's normal-day runs (label -> billed USD, label -> share of the
    week), plus ``release_usd`` a month (0 when there is no day)."""
    if not day_usd:
        return 0.0
    weights = {k: share_of_week.get(k, 1.0) for k in day_usd}
    total = sum(weights.values()) or 1.0
    day = sum(c * weights[k] for k, c in day_usd.items()) / total
    return monthly(day, 24 * 60) + release_usd


def monthly_bill(cfg: DeploymentConfig, a: Assumptions | None = None) -> float:
    """The one monthly figure of ``cfg`` (see the module): the plan's, the gate's, the fleet
    table's and make simulate's."""
    runs = run_scenario(cfg, "normal-day", a or Assumptions())
    return week_monthly(
        {r.label: run_cost_usd(r) for r in runs},
        {r.label: r.share_of_week for r in runs},
        release_canary_monthly(cfg),
    )


def monthly_by_edge(
    cfg: DeploymentConfig, a: Assumptions | None = None, known: Mapping[Edge, float] | None = None
) -> MonthByEdge:
    """:func:`monthly_bill` at the pessimistic edge, the central estimate and the optimistic edge
    of the speed model (``a`` with its ``speed_edge`` replaced: the same fleet, floors and
    traffic). ``known``: months a caller has already replayed, by edge (the gate's, the solver's
    optimistic replay), which are not replayed again."""
    a = a or Assumptions()
    given = {e: x for e, x in (known or {}).items() if x}
    month = {e: given.get(e) or monthly_bill(cfg, replace(a, speed_edge=e)) for e in EDGES}
    return MonthByEdge(month["pessimistic"], month["central"], month["optimistic"])


def at_target_lines(cfg: DeploymentConfig, variant: VariantName = "primary") -> list[str]:
    """What a user of ``variant`` sees at the scaling target, as the plan prints it
    (sizing.speed_plan.at_target: the planning edge and the central estimate)."""
    return [line.strip() for line in render_at_target(at_target(cfg, variant))]
