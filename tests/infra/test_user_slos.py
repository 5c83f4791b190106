"""SLOs a chat user feels bind the fleet (issue 42): time per output token beside TTFT and queue
wait, reachability judged at the central estimate of the speed model, the plan's figures at the
scaling target, and one monthly cost beside the budget."""

from __future__ import annotations

from typing import Any

import pytest

from sizing.plan import monthly_line, render_cost
from sizing.scaling_target import MIN_USEFUL_SHARE, concurrency_target, target_basis
from sizing.slo_reach import unreachable, what_would_reach
from sizing.speed_plan import render_speed, speed_section
from typed_config import DeploymentConfig

from .conftest import parse, raw_config


def _prod(slos: list[str], **monitoring: float) -> DeploymentConfig:
    """prod (ml.g6e.xlarge) with ``slos`` allowed to bind the target and the gate's default SLOs."""
    raw: dict[str, Any] = raw_config("prod")
    for v in ("primary", "canary"):
        raw["scaling"]["variants"][v]["target_tracking"]["slos"] = slos
    raw.setdefault("monitoring", {}).update(monitoring)
    raw["fleet"].pop("slos", None)
    return parse(raw)


@pytest.fixture(scope="module")
def tpot_binds() -> DeploymentConfig:
    return _prod(["tpot_p95"])


def test_the_per_token_slo_defaults_to_mlperfs_server_bound_for_an_8b_llama() -> None:
    from typed_config.operations import MonitoringConfig

    assert MonitoringConfig().slo_tpot_p95_ms == 100  # llama3_1-8b.Server.tpot_latency


def test_the_per_token_slo_binds_the_target_at_the_planning_edge(
    tpot_binds: DeploymentConfig,
) -> None:
    basis = target_basis(tpot_binds, "primary")
    tpot = next(b for b in basis.slo if b.slo == "TPOT p95")
    assert basis.binding == "TPOT p95"
    assert 0 < basis.concurrency == tpot.concurrency < basis.engine_bound
    # the central estimate holds it further out: the target sits at the planning edge's bound
    assert basis.central_bound("tpot_p95").concurrency >= tpot.concurrency
    assert concurrency_target(tpot_binds, "primary") < concurrency_target(_prod([]), "primary")


def test_an_slo_is_unreachable_only_at_the_central_estimate(tpot_binds: DeploymentConfig) -> None:
    basis = target_basis(tpot_binds, "primary")
    ttft = next(b for b in basis.slo if b.slo == "TTFT p50")
    central = basis.central_bound("ttft_p50")
    # prod's TTFT p50 < 200 ms: reachable because it holds over the useful share at the central
    # estimate (the pessimistic edge holds it no further), so the gate holds it
    assert ttft.concurrency <= central.concurrency
    assert MIN_USEFUL_SHARE * basis.engine_bound <= central.concurrency
    assert basis.reachable("ttft_p50")
    gone = unreachable(tpot_binds)
    assert "ttft_p50" not in gone and "tpot_p95" not in gone
    # end-to-end p99 < 2 s for a 180-token answer misses even alone at the central estimate
    assert "latency_p99" in gone and "at the central estimate" in gone["latency_p99"]


def test_what_would_reach_an_unreachable_slo_is_named() -> None:
    cfg = _prod(["tpot_p95"], slo_tpot_p95_ms=5)  # 200 tok/s per user: no L40S stream does it
    assert "tpot_p95" in unreachable(cfg)
    advice = what_would_reach(cfg, "primary", "tpot_p95")
    assert "speculative decoding" in advice and "docs.vllm.ai" in advice
    assert "instance type" in advice
    # and the fleet is still solved for a bound: the engine's own, not a dropped SLO's zero
    assert target_basis(cfg, "primary").binding in ("max_num_seqs", "KV cache")
    p99 = what_would_reach(cfg, "primary", "latency_p99")
    assert "output tokens" in p99  # a shorter answer


def test_the_plan_prints_what_a_user_sees_at_the_scaling_target(
    tpot_binds: DeploymentConfig,
) -> None:
    s = speed_section(tpot_binds, "primary")
    at = s["at_target"]
    assert at["in_flight"] == concurrency_target(tpot_binds, "primary")
    for edge in ("pessimistic", "central"):
        f = at[edge]
        assert f["ttft_p95_s"] >= f["ttft_p50_s"] > 0
        assert f["tokens_per_second_per_user"] > 0
        assert f["e2e_p50_s"] > f["ttft_p50_s"]
    # held at the target: the per-token bound the target was set from
    assert at["pessimistic"]["tpot_p95_ms"] <= tpot_binds.monitoring.slo_tpot_p95_ms
    text = "\n".join(render_speed(s))
    assert "at the scaling target" in text and "tok/s per user" in text
    assert "TTFT p50" in text and "/ p95" in text and "end-to-end p50" in text


def test_one_monthly_figure_beside_the_budget_warns_when_over() -> None:
    line, warning = monthly_line(30_558, 9_200)
    assert "$30,558/month" in line and "3.32x the budget of $9,200/month" in line
    assert warning is not None and "$21,358/month more than the budget" in warning
    assert monthly_line(8_000, 9_200)[1] is None
    assert "no budget" in monthly_line(8_000, None)[0]
    cost = {
        "monthly": 30_558.0,
        "budget_usd_per_month": 9_200.0,
        "monthly_at_floors": 16_591.0,
        "monthly_at_floors_by_variant": {"primary": 11_475.0, "canary": 5_116.0},
        "monthly_at_max_capacity": 184_170.0,
        "week_from": "2026-12-01 00:00 JST",
        "hours_per_month": 730,
        "price_region": "us-east-1",
    }
    lines = render_cost(cost)
    assert lines[0].startswith("  cost    $30,558/month")
    assert lines[1].startswith("          WARNING: the fleet costs $21,358/month more")
    assert "of which $16,591/month at the floors" in lines[2]
