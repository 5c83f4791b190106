"""The planned prefix-cache hit rates (sizing/prefix_hit_rate.py) are what the routing simulation
finds: re-run at the evening peak (20:00 JST, 8 instances), where every strategy is lowest."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.routing import compare
from simulator.routing_windows import windows
from simulator.traces import resolve
from sizing.fit import load_config
from sizing.prefix_hit_rate import ROUTING_SIM_HIT_RATE, routing_hit_rate
from sizing.serving_speed import planned_hit_rate
from tests.fixtures import config_fixture

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def peak() -> dict[str, float]:
    cfg = load_config(config_fixture("prod"), env="prod")
    (window,) = windows(resolve("normal-day"), None, starts=("20:00",), instances=8)
    rates: dict[str, float] = {}
    for r in compare(cfg, window).results:
        rates[r.spec.strategy] = min(rates.get(r.spec.strategy, 1.0), r.hit_rate)
    return rates


@pytest.mark.parametrize("strategy", sorted(ROUTING_SIM_HIT_RATE))
def test_each_planned_rate_is_the_simulations_within_3_points_and_never_above(
    peak: dict[str, float], strategy: str
) -> None:
    planned = ROUTING_SIM_HIT_RATE[strategy]
    assert planned <= peak[strategy] + 0.005, "the planned rate must not exceed the simulation's"
    assert planned >= peak[strategy] - 0.03


def test_the_brief_72_percent_is_not_planned_on() -> None:
    cfg = load_config(config_fixture("prod"), env="prod")
    assert planned_hit_rate(cfg) == routing_hit_rate("PREFIX_AWARE") < 0.72
    assert routing_hit_rate(None) == ROUTING_SIM_HIT_RATE["RANDOM"]
