"""LoRA's cost in the speed model (sizing/lora_cost.py) against the device's measurements."""

from __future__ import annotations

from pathlib import Path

import pytest

from sizing import speed_model
from sizing.fit import load_config
from sizing.lora_cost import MEASURED
from sizing.serving_speed import efficiency, serves_adapters, with_lora
from tests.fixtures import config_fixture

REPO = Path(__file__).resolve().parents[2]
CFG = load_config(config_fixture("prod"), env="prod")


def _speed(concurrency: int, eff: speed_model.Efficiency) -> speed_model.Speed:
    return speed_model.closed_loop(
        CFG.architecture, "awq", "H100", concurrency=concurrency, prompt=1200, output=180,
        eff=eff,
    )  # fmt: skip


@pytest.mark.parametrize(("c", "without", "with_", "_t0", "_t1"), MEASURED)
def test_the_throughput_ratio_is_within_5_percent_of_each_measured_point(
    c: int, without: float, with_: float, _t0: float, _t1: float
) -> None:
    ratio = (
        _speed(c, with_lora(speed_model.FITTED)).requests_per_minute
        / _speed(c, speed_model.FITTED).requests_per_minute
    )
    assert ratio == pytest.approx(with_ / without, rel=0.05)


def test_the_model_is_not_more_optimistic_than_the_lowest_measured_ratio_where_the_fleet_runs() -> (
    None
):
    c, without, with_, *_ = max(MEASURED)  # the most in flight: where target tracking holds it
    ratio = (
        _speed(c, with_lora(speed_model.FITTED)).requests_per_minute
        / _speed(c, speed_model.FITTED).requests_per_minute
    )
    assert ratio <= with_ / without + 0.005


def test_a_config_with_adapters_plans_on_lora_and_one_without_does_not() -> None:
    assert serves_adapters(CFG)
    bare = CFG.model_copy(update={"adapters": [], "default_adapter": None})
    assert efficiency(bare, "A10G").bandwidth > efficiency(CFG, "A10G").bandwidth
    assert efficiency(bare, "A10G").compute > efficiency(CFG, "A10G").compute
