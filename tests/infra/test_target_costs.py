"""SageMaker beside Bedrock for the same traffic (sizing/target_costs.py and
simulator/target_compare.py): Bedrock's copies per 5-minute window and its month, the fleet's
billed instance-minutes, and the plan's lines."""

from __future__ import annotations

import pytest

from simulator.assumptions import Assumptions
from simulator.fleet.scenarios import _from_result, scaled
from simulator.run import simulate
from simulator.target_compare import targets_section
from simulator.traces import normal_day
from sizing import target_costs as tc

from .conftest import load_env


def test_a_window_bills_the_copies_its_busiest_minute_needs() -> None:
    demand = [100, 700, 50, 0, 0] + [0] * 5 + [1, 0, 0, 0, 0]
    assert tc.copies_per_window(demand, copy_rpm=326) == [3, 0, 1]


def test_a_month_of_bedrock_is_copies_times_units_times_price_per_window_plus_storage() -> None:
    demand = [652.0] * 10  # two windows, two copies each
    month = tc.bedrock_month(demand, copy_rpm=326, cmus_per_copy=2, models=3)
    day = 2 * 2 * 2 * tc.CMU_PRICE_PER_MINUTE * 5
    assert month["peak_copies"] == 2 and month["idle_windows"] == 0
    assert month["monthly_inference"] == pytest.approx(day * tc.DAYS_PER_MONTH, abs=0.01)
    assert month["monthly_storage"] == pytest.approx(3 * 2 * 1.95)
    assert month["monthly_at_listed_price"] < month["monthly"]


def test_the_fleet_side_is_the_simulated_fleets_billed_instance_minutes() -> None:
    cfg = load_env("dev")
    section = targets_section(cfg)
    res = simulate(cfg, scaled(cfg, normal_day()), Assumptions(), label="check")
    billed = [(float(m.billed.sum()), m.price_per_hour) for m in _from_result(cfg, res).values()]
    assert section["sagemaker_monthly"] == tc.sagemaker_month(billed)
    assert section["sagemaker_monthly"] > 0
    peak = max(scaled(cfg, normal_day()).rpm)
    assert section["bedrock"]["peak_copies"] == -(-peak // cfg.bedrock.copy_requests_per_minute)


def test_the_plan_prints_both_targets_and_what_each_lacks() -> None:
    targets = {
        "traffic": "normal-day",
        "traffic_share": 1.0,
        "models": 1,
        "sagemaker_monthly": 29399.0,
        "bedrock": tc.bedrock_month([3641.0] * 5, copy_rpm=326, cmus_per_copy=2, models=1),
    }
    text = "\n".join(tc.render_targets(targets))
    assert "SageMaker (this fleet, simulated with its scaling): $29,399/month" in text
    assert "12 copies at the peak (3,641 req/min" in text
    assert "multi-LoRA: each adapter is its own imported model" in text
    assert "scale to zero" in text


def test_the_plan_prints_the_targets_after_its_own_cost() -> None:
    from sizing.plan import build_plan, render_plan

    cfg = load_env("dev")
    plan = build_plan(cfg, {})
    without = render_plan(plan)
    assert "Bedrock Custom Model Import" not in without
    plan["targets"] = {
        "traffic": "normal-day", "traffic_share": 0.1, "models": 1, "sagemaker_monthly": 1.0,
        "bedrock": tc.bedrock_month([30.0] * 5, copy_rpm=326, cmus_per_copy=2, models=1),
    }  # fmt: skip
    lines = render_plan(plan).splitlines()
    cost = next(i for i, line in enumerate(lines) if line.startswith("  cost "))
    targets = next(i for i, line in enumerate(lines) if line.startswith("  targets "))
    assert targets > cost, "the targets come after the plan's own cost"
    between = lines[cost + 1 : targets]
    assert all(line.startswith(" " * 10) for line in between), between  # the cost's own lines
    assert lines[targets].startswith("  targets for normal-day (x0.1)")
