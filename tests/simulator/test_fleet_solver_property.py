"""The fleet solver cannot go backwards (issue 42): a faster engine, lower demand or a looser SLO
never yields a costlier fleet, and a miss is repaired where it can be repaired.

The fixture is small on purpose (dev's model on ml.g5.xlarge, two evening schedules in two time
zones, two scenarios, a tenth to a third of the brief's traffic): the solver on prod takes
minutes. Speed is the simulator's constant per-sequence decode speed (``Assumptions``'s what-if),
so one knob moves the engine's speed alone; demand is ``fleet.traffic_share``; the SLOs are the
queue wait and the per-token bound; the policies are the searched ones (a canary raised only
while a release runs, scale-in that follows traffic). hypothesis is not in the venv: a grid,
every easier neighbour of every point compared.
"""

from __future__ import annotations

import itertools
from functools import cache

import pytest
from sim_helpers import SOLVER_TYPE as ITYPE
from sim_helpers import solver_fixture

from simulator.assumptions import Assumptions
from simulator.fleet.solver import Bounds, Solution, _repair, lead_cron, solve_type
from simulator.slo_gate import Miss
from typed_config import DeploymentConfig

SPEEDS = (35.0, 60.0)  # decode tokens/s per sequence
SHARES = (0.15, 0.3)  # of the brief's traffic
TPOT_MS = (80.0, 150.0)  # monitoring.slo_tpot_p95_ms
QUEUE_MS = (50.0, 500.0)  # monitoring.slo_queue_wait_p95_ms


def fixture(share: float, tpot_ms: float, queue_ms: float) -> DeploymentConfig:
    return solver_fixture(share, tpot_ms, queue_ms)


@cache
def solved(speed: float, share: float, tpot_ms: float, queue_ms: float) -> Solution:
    a = Assumptions(decode_tokens_per_second=speed, prefill_tokens_per_second=10_000.0)
    return solve_type(fixture(share, tpot_ms, queue_ms), ITYPE, a)


POINTS = list(itertools.product(SPEEDS, SHARES, TPOT_MS, QUEUE_MS))


def _easier(p: tuple[float, ...], q: tuple[float, ...]) -> bool:
    """``q`` is no harder than ``p`` on every axis: as fast, as little demand, SLOs as loose."""
    return q != p and q[0] >= p[0] and q[1] <= p[1] and q[2] >= p[2] and q[3] >= p[3]


@pytest.mark.parametrize("point", POINTS, ids=lambda p: "speed{}-share{}-tpot{}-wait{}".format(*p))
def test_an_easier_problem_never_costs_more(point: tuple[float, float, float, float]) -> None:
    harder = solved(*point)
    assert harder.solved, harder.why_not
    for q in POINTS:
        if not _easier(point, q):
            continue
        easier = solved(*q)
        assert easier.solved, f"{q} has no fleet though {point} has one: {easier.why_not}"
        assert easier.monthly_usd <= harder.monthly_usd + 0.01, (
            f"{q} costs ${easier.monthly_usd:,.0f}/month, more than the harder {point}'s "
            f"${harder.monthly_usd:,.0f} ({easier.bounds} vs {harder.bounds})"
        )


def _miss(
    owner: str, age: int, short: int = 2, at_max: bool = False, floor_rose: bool = True
) -> Miss:
    return Miss(
        scenario="normal-day", run="normal-day", variant="primary", minute=600, when="",
        slo="rejected", figure=9.0, limit=0.0, shortfall_instances=short, shortfall_rpm=9.0,
        floor_owner=owner, at_max=at_max, bound_age_minutes=age, lag_minutes=4,
        floor_rose=floor_rose,
    )  # fmt: skip


BOUNDS = Bounds(ITYPE, 1, 30, 1, 1, {"jp-evening-peak": 3, "jp-evening-end": 1})
CRONS = {"jp-evening-peak": "45 17 * * *", "jp-evening-end": "0 23 * * *"}


def test_a_miss_before_a_schedules_instances_can_serve_starts_the_schedule_earlier() -> None:
    out = _repair(BOUNDS, [_miss("jp-evening-peak", age=1)], CRONS)
    assert out is not None
    # 4 min of scale-out, 1 min in force: 3 min early, a 5-minute step; the count is untouched
    assert out.schedule_lead == {"jp-evening-peak": 5}
    assert out.schedule_min == BOUNDS.schedule_min and out.primary_min == BOUNDS.primary_min
    assert lead_cron(CRONS["jp-evening-peak"], 5) == "40 17 * * *"


def test_a_miss_long_after_a_bound_started_raises_that_bound_not_the_all_day_floor() -> None:
    out = _repair(BOUNDS, [_miss("jp-evening-peak", age=120, short=2)], CRONS)
    assert out is not None
    assert out.schedule_min["jp-evening-peak"] == 5 and out.primary_min == 1
    assert not out.schedule_lead


def test_a_miss_just_after_a_schedule_lowered_the_floor_raises_it_never_moves_it() -> None:
    # an evening's end (23:00) lowers the floor; a spike minutes after it is short of the count
    # the end leaves, which starting the end earlier could only make worse
    out = _repair(BOUNDS, [_miss("jp-evening-end", age=1, short=3, floor_rose=False)], CRONS)
    assert out is not None
    assert out.schedule_min["jp-evening-end"] == 4 and not out.schedule_lead


def test_a_cron_that_cannot_move_earlier_falls_back_to_a_raise() -> None:
    assert lead_cron("0 0 * * *", 5) is None  # would fire the day before
    assert lead_cron("*/15 8 * * *", 5) is None
    out = _repair(BOUNDS, [_miss("jp-evening-end", age=0)], {"jp-evening-end": "0 0 * * *"})
    assert out is not None and out.schedule_min["jp-evening-end"] == 3


def test_no_fleet_says_why() -> None:
    # 100 instances cannot carry a ceiling miss already at 100
    full = Bounds(ITYPE, 1, 100, 1, 1, {"jp-evening-peak": 3, "jp-evening-end": 1})
    assert _repair(full, [_miss("variant", age=500, at_max=True)], CRONS) is None
