"""The planned prefix-cache hit rates (sizing/prefix_hit_rate.py) are the routing simulation's at
the fleet's own load: the fixed point of hit rate -> fleet -> hit rate (simulator/hit_rate_loop.py),
which converges within its tolerance or fails naming every rate it went through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from simulator.assumptions import Assumptions
from simulator.hit_rate_loop import MAX_ITERATIONS, TOLERANCE, NoFixedPoint, fixed_point
from simulator.routing.compare import compare
from simulator.routing.windows import windows
from simulator.traces import resolve
from sizing.fit_checks import load_config, parse_config
from sizing.prefix_hit_rate import ROUTING_SIM_HIT_RATE, hit_rate_error, routing_hit_rate
from sizing.serving_speed import planned_hit_rate
from tests.fixtures import config_fixture
from typed_config import DeploymentConfig

REPO = Path(__file__).resolve().parents[2]
DEV = config_fixture("dev")


def small(**fleet: Any) -> DeploymentConfig:
    """dev's model behind prefix-aware routing (the threshold derived) at a twentieth of the
    brief's traffic: a fleet of a few instances, seconds per iteration."""
    data: dict[str, Any] = yaml.safe_load(DEV.read_text())
    data["variants"]["primary"]["routing"] = {
        "strategy": "PREFIX_AWARE",
        "prefix_length_bytes": 2048,
    }
    data["scaling"]["variants"]["primary"]["max_capacity"] = 20
    data["fleet"] = {"scenarios": ["normal-day"], "traffic_share": 0.05, **fleet}
    return parse_config(data, env="dev", source=DEV, base_dir=DEV.parent)


def test_the_loop_converges_within_its_tolerance_and_says_how() -> None:
    fp = fixed_point(small(), Assumptions(), start=0.0)
    assert 1 <= len(fp.iterations) <= MAX_ITERATIONS
    last_in, last_out = fp.iterations[-1]
    assert abs(last_out - last_in) <= TOLERANCE and fp.rate == last_out
    # every earlier step moved by more than the tolerance (else it would have stopped there)
    assert all(abs(o - i) > TOLERANCE for i, o in fp.iterations[:-1])
    assert fp.iterations[0][0] == 0.0 and fp.rate > 0.3
    assert fp.spread >= 0 and "fixed point after" in fp.line()


def test_a_loop_that_does_not_settle_is_an_error_naming_each_rate_and_the_fix() -> None:
    # from 0 % the first step moves by ~40 points: one iteration cannot settle
    with pytest.raises(NoFixedPoint) as err:
        fixed_point(small(), Assumptions(), start=0.0, max_iterations=1)
    msg = str(err.value)
    assert "did not settle within 1 iterations (tolerance 1.0%): 0.0% -> " in msg
    assert "fleet.prefix_cache_hit_rate" in msg and "concurrency_threshold" in msg


def test_a_measured_rate_wins() -> None:
    measured = {"rate": 0.55, "source": "prod, vllm counters, week 49"}
    fp = fixed_point(small(prefix_cache_hit_rate=measured), Assumptions())
    assert fp.rate == 0.55 and not fp.iterations and "week 49" in fp.line()


@pytest.fixture(scope="module")
def prod() -> DeploymentConfig:
    return load_config(config_fixture("prod"), env="prod")


def test_prefix_aware_plans_on_the_fixed_point_of_prods_fleet(prod) -> None:
    fp = fixed_point(prod, Assumptions())
    planned = routing_hit_rate("PREFIX_AWARE")
    assert planned <= fp.rate + 0.005, "the planned rate must not exceed the fixed point"
    assert planned >= fp.rate - TOLERANCE - 0.005
    # the exported error covers the spread over fleets that hold the load
    assert hit_rate_error("PREFIX_AWARE") >= fp.spread / 2
    assert hit_rate_error("PREFIX_AWARE") >= TOLERANCE


@pytest.mark.parametrize("strategy", ["RANDOM", "LEAST_OUTSTANDING_REQUESTS"])
def test_strategies_that_keep_no_conversation_plan_on_their_lowest(prod, strategy: str) -> None:
    (window,) = windows(resolve("normal-day"), None, starts=("20:00",), instances=8)
    rates = [r.hit_rate for r in compare(prod, window).results if r.spec.strategy == strategy]
    planned = ROUTING_SIM_HIT_RATE[strategy]
    assert planned <= min(rates) + 0.005 and planned >= min(rates) - 0.03


def test_the_brief_72_percent_is_not_planned_on(prod) -> None:
    assert planned_hit_rate(prod) == routing_hit_rate("PREFIX_AWARE") < 0.72
    assert routing_hit_rate(None) == ROUTING_SIM_HIT_RATE["RANDOM"]
