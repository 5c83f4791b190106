"""Every alarm the canary controller watches stays quiet on a healthy variant at its scaling
target (issue 33: the blast-radius replay found prod's alarms rolling back a healthy build):
synth refuses a threshold a healthy fleet crosses, naming the field, the rule and both figures.
The ModelLatency p99 rule is tests/infra/test_rollback_latency.py's."""

from __future__ import annotations

import copy
import math
import re
from typing import Any

import aws_cdk as cdk
import pytest

from sizing.alarm_headroom import (
    HEADROOM,
    healthy_latency_ratio,
    ratio_problems,
    watched_alarm_problems,
)
from sizing.fit_checks import check_deployable
from sizing.speed_plan import healthy_ttft_p95_ms, speed_at
from stacks.app_builder import build_stacks, cdk_json_context
from typed_config import ConfigError

from .conftest import REPO_ROOT, load_env, parse


def test_a_ttft_threshold_a_healthy_fleet_crosses_fails_synth_naming_both_figures(
    prod_raw: Any,
) -> None:
    raw = copy.deepcopy(prod_raw)
    raw.setdefault("monitoring", {})["ttft_p95_ms"] = 500  # the original team's figure
    cfg = parse(raw)
    healthy, itype = healthy_ttft_p95_ms(cfg, "canary")
    assert itype == "ml.g6e.xlarge" and healthy > 500 * HEADROOM
    app = cdk.App(context=cdk_json_context(REPO_ROOT))
    with pytest.raises(ConfigError) as err:
        build_stacks(app, cfg)
    message = str(err.value)
    assert re.search(
        r"^  monitoring\.ttft_p95_ms( \(.*?\))?: 500 ms is below what a healthy primary",
        message,
        re.M,
    ), message
    assert "healthy canary answers in at its scaling target" in message
    assert f"TTFT p95 {healthy:,.0f} ms" in message and "at 109 in flight" in message
    assert f"above the healthy figure by {HEADROOM:g} x ({healthy * HEADROOM:,.0f} ms)" in message
    assert f"Set at least {math.ceil(healthy * HEADROOM / 100) * 100} ms" in message


def test_the_ttft_figure_is_the_speed_models_p99_at_the_target(prod_raw: Any) -> None:
    """The speed model has no p95: the next percentile up stands for it (the pessimistic edge for
    a threshold that must stay above it), at the concurrency target tracking holds."""
    cfg = load_env("prod")
    at_target = speed_at(cfg.for_pool(cfg.variants.canary.pools[0]), "ml.g6e.xlarge", 109)
    assert healthy_ttft_p95_ms(cfg, "canary")[0] == pytest.approx(1000 * at_target.ttft_p99_s)
    assert at_target.ttft_p99_s > at_target.ttft_p90_s


@pytest.mark.parametrize("ratio", [1.1, 1.2])
def test_a_ratio_within_the_headroom_of_a_healthy_canary_is_refused_naming_the_field(
    prod_raw: Any, ratio: float
) -> None:
    """Same instance type and engine: a healthy canary at like loads answers as the primary does
    (1 x), so a ratio under 1.25 x would roll back a healthy canary on the model's error alone."""
    raw = copy.deepcopy(prod_raw)
    raw.setdefault("rollout", {})["max_latency_ratio"] = ratio
    cfg = parse(raw)
    assert healthy_latency_ratio(cfg)[0] == 1.0
    with pytest.raises(ConfigError) as err:
        check_deployable(cfg)
    message = str(err.value)
    assert re.search(
        rf"^  rollout\.max_latency_ratio( \(.*?\))?: {ratio:g} is below what a healthy",
        message,
        re.M,
    ), message
    assert "1.00 x (the same instance type (ml.g6e.xlarge)" in message
    assert f"by {HEADROOM:g} x (1.25)" in message and "Set at least 1.25" in message


def test_another_canary_type_is_compared_at_its_own_speed(prod_raw: Any) -> None:
    """A canary on another type (ml.g5.2xlarge, an A10G, beside the primary's ml.g6e.xlarge, an
    L40S) is compared at its own speed from the speed model, not assumed to be 1 x."""
    raw = copy.deepcopy(prod_raw)
    raw["variants"]["canary"]["instance_type"] = "ml.g5.2xlarge"
    raw["variants"]["canary"].pop("routing", None)
    cfg = parse(raw)
    ratio, what = healthy_latency_ratio(cfg)
    # the A10G at its target is slower than the L40S at the like load (in capacity units: the
    # capacity plan's canary_per_primary), so the ratio is the speed model's, above 1
    assert ratio > 1.0
    assert "the canary's ml.g5.2xlarge at its target, the primary's ml.g6e.xlarge" in what
    # the rule follows that figure: a ratio below it with the headroom is refused, naming it
    need = math.ceil(ratio * HEADROOM * 100) / 100
    raw["rollout"]["max_latency_ratio"] = need - 0.05
    with pytest.raises(ConfigError) as err:
        check_deployable(parse(raw))
    assert re.search(
        rf"^  rollout\.max_latency_ratio( \(.*?\))?: {need - 0.05:g} is below what a healthy "
        rf"canary shows against the primary at like loads: {ratio:.2f} x",
        str(err.value),
        re.M,
    ), err.value
    raw["rollout"]["max_latency_ratio"] = need
    assert ratio_problems(parse(raw)) == []


def test_the_committed_configs_pass_every_watched_alarm_rule() -> None:
    for env in ("dev", "prod"):
        cfg = load_env(env)
        assert watched_alarm_problems(cfg) == [], env
        for variant in ("primary", "canary"):
            healthy, _ = healthy_ttft_p95_ms(cfg, variant)
            assert cfg.monitoring.ttft_p95_ms >= healthy * HEADROOM
