"""What the fleet costs at each edge of the speed model's error, what each bound of the scaling
target costs, and the brief's fleet at list price (issue 42 item 5), on the frozen configs:
relations, never prod's figures."""

from __future__ import annotations

from typing import Any

import pytest

import simulator.slo_cost as slo_cost
from simulator.assumptions import Assumptions
from simulator.slo_cost import TIGHTEN_FACTOR, BoundCosts, bound_costs, limit_ms
from simulator.slo_gate import GateReport, ScenarioVerdict
from simulator.user_figures import monthly_bill, monthly_by_edge
from sizing.brief_fleet import BRIEF_FLEET, BriefFleet, brief_fleet_line
from sizing.fleet_cost import MonthByEdge
from sizing.plan import cost_section, monthly_line, render_bound_costs, render_cost
from sizing.scaling_target import SLO_LIMITS, concurrency_target, target_basis
from tests.fixtures import load_fixture, raw_fixture
from tests.infra.conftest import parse
from typed_config import DeploymentConfig
from typed_config.catalog import HOURS_PER_MONTH, INSTANCE_CATALOG

BOTH = ["ttft_p50", "tpot_p95"]


def _prod(slos: list[str]) -> DeploymentConfig:
    """The frozen prod with ``slos`` allowed to bind both variants' targets."""
    raw: dict[str, Any] = raw_fixture("prod")
    for v in ("primary", "canary"):
        raw["scaling"]["variants"][v]["target_tracking"]["slos"] = slos
    return parse(raw)


@pytest.fixture(scope="module")
def prod() -> DeploymentConfig:
    return load_fixture("prod")


@pytest.fixture(scope="module")
def edges(prod: DeploymentConfig) -> MonthByEdge:
    return monthly_by_edge(prod)


@pytest.fixture(scope="module")
def replays() -> list[tuple[float, ...]]:
    """The targets :func:`bound_costs` replayed on prod with both user SLOs binding."""
    return []


@pytest.fixture(scope="module")
def costs(replays: list[tuple[float, ...]]) -> BoundCosts:
    cfg = _prod(BOTH)
    counted = slo_cost.monthly_bill

    def counting(c: DeploymentConfig, a: Assumptions | None = None) -> float:
        replays.append(slo_cost._targets(c))
        return counted(c, a)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(slo_cost, "monthly_bill", counting)
        return bound_costs(cfg)


def test_a_faster_engine_never_bills_more_for_the_same_fleet(edges: MonthByEdge) -> None:
    assert edges.optimistic <= edges.central <= edges.pessimistic
    # prod's fleet scales above its floors on the normal day: the edges differ
    assert edges.optimistic < edges.pessimistic


def test_the_pessimistic_edge_is_the_plans_one_figure(
    prod: DeploymentConfig, edges: MonthByEdge
) -> None:
    assert edges.pessimistic == monthly_bill(prod)
    # a month the caller already has is not replayed: it is taken as given
    given = monthly_by_edge(prod, known={"pessimistic": 1.0, "central": 2.0, "optimistic": 3.0})
    assert given == MonthByEdge(1.0, 2.0, 3.0)


def test_the_monthly_line_compares_the_pessimistic_edge_with_the_budget() -> None:
    line, warning = monthly_line(MonthByEdge(30_000, 20_000, 9_000), 10_000)
    assert line.startswith("$30,000/month at the pessimistic edge")
    assert "central estimate $20,000, optimistic edge $9,000" in line
    assert "3.00x the budget of $10,000/month" in line
    assert warning is not None and "$20,000/month more than the budget" in warning
    assert "every edge" not in warning  # the optimistic edge is within it
    warning = monthly_line(MonthByEdge(30_000, 20_000, 12_000), 10_000)[1]
    assert warning is not None and "over it at every edge of the speed model's error" in warning
    assert "make fleet prints the cost of each SLO and scenario" not in warning
    assert monthly_line(MonthByEdge(9_000, 8_000, 7_000), 10_000)[1] is None


def test_dropping_a_bound_never_costs_more(costs: BoundCosts) -> None:
    drops = [r for r in costs.rows if r.change == "drop"]
    assert {r.slo for r in drops} == set(BOTH)
    for r in drops:
        assert r.monthly_usd is not None and r.delta_usd is not None
        assert r.delta_usd <= 0, r
        assert r.target >= costs.target, r


def test_dropping_the_binding_slo_hands_the_target_to_the_next_bound(costs: BoundCosts) -> None:
    cfg = _prod(BOTH)
    binding = next(k for k, (name, _) in SLO_LIMITS.items() if name == costs.binding)
    assert binding in BOTH, costs.binding  # one of the user SLOs binds prod's L40S
    rest = [k for k in BOTH if k != binding]
    without = _prod(rest)
    row = next(r for r in costs.rows if r.change == "drop" and r.slo == binding)
    assert row.target == concurrency_target(without, "primary") > costs.target
    assert row.binding == target_basis(without, "primary").binding
    assert row.monthly_usd == monthly_bill(without)
    assert costs.target == concurrency_target(cfg, "primary")
    # the other one does not bind: dropping it moves nothing and costs nothing
    other = next(r for r in costs.rows if r.change == "drop" and r.slo == rest[0])
    assert other.target == costs.target and other.delta_usd == 0


def test_tightening_a_bound_never_saves(costs: BoundCosts) -> None:
    cfg = _prod(BOTH)
    for r in (r for r in costs.rows if r.change == "tighten"):
        assert r.limit_ms == pytest.approx(limit_ms(cfg, r.slo) * TIGHTEN_FACTOR)
        if r.monthly_usd is None:
            assert "not reachable at the central estimate" in r.note
            continue
        assert r.target <= costs.target and r.delta_usd is not None and r.delta_usd >= 0, r


def test_an_slo_the_type_cannot_reach_is_named_not_priced(costs: BoundCosts) -> None:
    row = next(r for r in costs.rows if r.slo == "latency_p99")
    assert row.change == "add" and row.monthly_usd is None
    assert "cannot bind" in row.note


def test_each_distinct_target_is_replayed_once(
    costs: BoundCosts, replays: list[tuple[float, ...]]
) -> None:
    configured = tuple(concurrency_target(_prod(BOTH), v) for v in ("primary", "canary"))
    assert replays[0] == configured  # the month as configured, once
    assert len(replays) == len(set(replays)), replays  # never the same target twice
    moved = {r.target for r in costs.rows if r.monthly_usd is not None} - {costs.target}
    assert len(replays) == 1 + len(moved)  # then one per target a change moves to


def test_the_plan_prints_each_bounds_cost_under_the_cost_line(
    prod: DeploymentConfig, costs: BoundCosts, edges: MonthByEdge
) -> None:
    cost = cost_section(prod)
    cost.update(
        monthly=edges.pessimistic,
        monthly_by_edge=edges.as_dict(),
        bound_costs=costs.as_dict(),
        budget_usd_per_month=prod.fleet.budget_usd_per_month,
    )
    text = "\n".join(render_cost(cost))
    assert text.startswith(f"  cost    ${edges.pessimistic:,.0f}/month at the pessimistic edge")
    assert f"central estimate ${edges.central:,.0f}" in text
    assert f"binding bound {costs.binding}, target {costs.target:g} in flight" in text
    drop = next(r for r in costs.rows if r.change == "drop" and r.delta_usd)
    assert drop.delta_usd is not None
    assert (
        f"dropping {drop.slo} (target {costs.target:g} -> {drop.target:g}: {drop.binding} binds): "
        f"saves ${-drop.delta_usd:,.0f}/month"
    ) in text
    assert "adding latency_p99 at 2,000 ms: not reachable at the central estimate" in text
    assert brief_fleet_line(BRIEF_FLEET.as_dict()) in text


def test_an_engine_limit_that_binds_has_nothing_to_drop() -> None:
    lines = render_bound_costs(
        {
            "target": 108.8,
            "binding": "max_num_seqs",
            "monthly_usd": 100.0,
            "edge": "pessimistic",
            "tighten_factor": 0.8,
            "rows": [],
        }
    )
    assert "binding bound max_num_seqs, target 108.8 in flight; an engine limit" in lines[0]


def test_the_gate_prints_the_month_at_each_edge_when_priced() -> None:
    day = ScenarioVerdict(
        "normal-day", None, [], {}, cost_usd={"Tue": 10.0}, share_of_week={"Tue": 1}
    )
    report = GateReport("prod", {"primary": "ml.g6e.xlarge"}, "pessimistic", [], {}, [day])
    assert "optimistic edge" not in report.render()
    report.monthly_by_edge = MonthByEdge(report.monthly_usd, 200.0, 100.0)
    text = report.render()
    assert f"${report.monthly_usd:,.0f}/month at the pessimistic edge" in text
    assert "central estimate $200, optimistic edge $100" in text


def test_the_briefs_fleet_is_its_count_at_the_catalogs_list_price() -> None:
    price = INSTANCE_CATALOG[BRIEF_FLEET.instance_type].price_per_hour
    assert BRIEF_FLEET.list_usd_per_month == BRIEF_FLEET.count * price * HOURS_PER_MONTH
    assert (BRIEF_FLEET.instance_type, BRIEF_FLEET.count) == ("ml.g5.xlarge", 4)
    assert BRIEF_FLEET.budget_usd_per_month == 9_200
    line = brief_fleet_line(BRIEF_FLEET.as_dict())
    assert f"at list: ${BRIEF_FLEET.list_usd_per_month:,.0f}/month vs its budget $9,200" in line
    assert f"{9_200 / BRIEF_FLEET.list_usd_per_month:.2f}x its list price" in line
    assert "000_fd5aaeaa804144d2.txt" in line


@pytest.mark.parametrize(
    ("itype", "count", "budget"), [("ml.nope.xlarge", 4, 9_200.0), ("ml.g5.xlarge", 0, 9_200.0)]
)
def test_a_brief_fleet_the_catalog_cannot_price_is_refused(
    itype: str, count: int, budget: float
) -> None:
    with pytest.raises(ValueError):
        BriefFleet(itype, count, budget, "test")
