"""The fleet solver never proposes, for the config's own instance type, a fleet costlier than the
config's own when the gate passes that (issue 42), and it lowers every floor it owns (each
schedule's and release's, not only the all-day ones) to the least that still passes.

The fixture is the property test's shape (dev's model on ml.g5.xlarge, two evening schedules in
two time zones, two scenarios, a share of the brief's traffic, the simulator's constant decode
speed, the searched policies pinned), with the config's own schedule floors set by each test."""

from __future__ import annotations

import pytest
from sim_helpers import SOLVER_TYPE as ITYPE
from sim_helpers import solver_fixture

from simulator.assumptions import Assumptions
from simulator.fleet import solver
from simulator.fleet.report import table
from simulator.fleet.solver import (
    _lower_floors,
    apply,
    current,
    least_bounds,
    policies,
    solve_policy,
    solve_type,
)
from simulator.slo_gate import evaluate
from typed_config import DeploymentConfig

A = Assumptions(decode_tokens_per_second=45.0, prefill_tokens_per_second=10_000.0)
#: Each schedule's floor in a fleet the gate passes at this speed and share (3 holds the
#: unannounced spike at the weakest hour), the JP evening's well above that.
GENEROUS = {"jp-evening-peak": 10, "jp-evening-end": 3, "us-evening-peak": 3, "us-evening-end": 3}


def fixture(floors: dict[str, int], share: float = 0.3) -> DeploymentConfig:
    """The solver tests' config with each schedule's floor from ``floors`` (else 1)."""
    return solver_fixture(share, 150.0, 500.0, floors)


@pytest.mark.parametrize(
    "floors",
    [GENEROUS, {**GENEROUS, "jp-evening-peak": 3}, {**GENEROUS, "us-evening-end": 6}],
    ids=["evening-10", "all-3", "us-end-6"],
)
def test_the_solver_never_proposes_a_fleet_costlier_than_the_configs_own_passing_one(
    floors: dict[str, int],
) -> None:
    cfg = fixture(floors)
    own = evaluate(cfg, A, cfg.fleet.held())
    assert own.passed, own.render()
    sol = solve_type(cfg, ITYPE, A)
    assert sol.solved and sol.cfg is not None, sol.why_not
    assert sol.monthly_usd <= own.monthly_usd + 0.01, (sol.bounds, own.monthly_usd)
    assert evaluate(sol.cfg, A).passed


def test_a_search_from_the_least_that_finds_nothing_falls_back_on_the_configs_own_fleet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # one repair round is too few for the greedy start (it needs several at this point); the
    # config's own fleet passes as it stands, so the solver returns it, its floors lowered
    monkeypatch.setattr(solver, "MAX_ROUNDS", 1)
    cfg = fixture(GENEROUS)
    (policy,) = policies(cfg)
    sol = solve_policy(cfg, ITYPE, A, policy)
    assert sol.solved and sol.start == "config" and sol.bounds is not None, sol.why_not
    assert sol.rounds == 0
    assert sol.monthly_usd < evaluate(cfg, A, cfg.fleet.held()).monthly_usd
    assert sol.bounds.schedule_min["jp-evening-peak"] < GENEROUS["jp-evening-peak"]
    assert f"start, {ITYPE}: the config's own fleet; floors lowered" in table(cfg, [sol])


def test_a_schedule_floor_set_higher_than_needed_is_lowered_and_the_gate_still_passes() -> None:
    cfg = fixture(GENEROUS)
    (policy,) = policies(cfg)
    held = cfg.fleet.held()
    own = current(cfg)
    report = evaluate(apply(cfg, own), A, held)
    assert report.passed
    lowered, got = _lower_floors(cfg, own, report, least_bounds(cfg, ITYPE, policy), A, held)
    assert lowered.schedule_min["jp-evening-peak"] < GENEROUS["jp-evening-peak"]
    assert all(lowered.schedule_min[k] <= n for k, n in GENEROUS.items())
    assert got.passed and evaluate(apply(cfg, lowered), A, held).passed
    assert got.monthly_usd < report.monthly_usd
    # and the solver's answer: the JP evening's floor below the config's, on a passing fleet
    sol = solve_policy(cfg, ITYPE, A, policy)
    assert sol.solved and sol.bounds is not None and sol.cfg is not None, sol.why_not
    assert sol.bounds.schedule_min["jp-evening-peak"] < GENEROUS["jp-evening-peak"]
    assert evaluate(sol.cfg, A).passed
