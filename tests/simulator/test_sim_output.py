"""Simulator output a person reads right (issue 32): capacity per variant against that
variant's traffic, the admission cap named as a cap, every column of the tables explained,
event labels that do not overlap, and the canary's ceiling warning naming the field that binds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
from sim_helpers import FAST, flat_trace, make_cfg, run

from simulator.charts import group_marks
from simulator.report import capacity_lines, table
from simulator.rollout import ceiling_fields
from simulator.rollout_report import LEGEND
from simulator.scenarios.deploy import COLUMNS, ROWS, legend
from sizing.rollout_plan import build_plan


def _with_canary_share():
    """prod's legacy fleet: the canary's 2 instances at a 10 % weight, the primary's 2 at 90 %."""
    cfg = make_cfg({"min_capacity": 2, "max_capacity": 2}, initial=2)
    variants = cfg.variants.model_copy(
        update={
            "primary": cfg.variants.primary.model_copy(update={"initial_weight": 90}),
            "canary": cfg.variants.canary.model_copy(update={"initial_weight": 10}),
        }
    )
    return cfg.model_copy(update={"variants": variants})


def test_each_variants_capacity_is_drawn_against_its_own_traffic() -> None:
    """Two primary instances overloaded at 90 % of 4,000 requests/minute while the canary's two
    idle at 10 %: a summed capacity line sat above the traffic although the primary queued."""
    res = run(_with_canary_share(), flat_trace([(60, 4000.0)]), FAST)
    lines = {label: np.asarray(values) for values, label, _ in capacity_lines(res)}
    assert set(lines) == {
        "traffic to primary (90 %)", "primary capacity", "traffic to canary (10 %)",
        "canary capacity",
    }  # fmt: skip
    primary_cap, primary_traffic = lines["primary capacity"], lines["traffic to primary (90 %)"]
    assert np.allclose(primary_traffic, 3600.0)
    # the primary is short (it rejects), its own line says so; primary + canary would not
    assert primary_cap.max() < primary_traffic.min()
    assert primary_cap.max() + lines["canary capacity"].max() > 4000.0
    assert res.runs["primary"].series["rejected"].sum() > 0


def test_a_queue_wait_at_the_admission_cap_is_called_the_cap_on_both_sides() -> None:
    cfg = make_cfg({"min_capacity": 2, "max_capacity": 2}, initial=2)
    res = run(cfg, flat_trace([(60, 20_000.0)]), FAST)
    base = run(cfg, flat_trace([(60, 30_000.0)]), FAST)
    cap = res.summary["queue_wait_cap_ms"]
    assert res.summary["queue_wait_p95_ms"] == cap == base.summary["queue_wait_p95_ms"]
    text = table(res, base)
    (row,) = [line for line in text.splitlines() if line.startswith("queue wait p95 ms")]
    assert row.endswith("+0  <- the admission cap in both: no comparison")
    assert f"admission cap: {cap:,} ms is the wait in a full queue" in text
    assert "engine.admission_max_inflight (256)" in text
    # below the cap no row is marked
    quiet = run(cfg, flat_trace([(60, 100.0)]), FAST)
    assert "admission cap" not in table(quiet)


def test_the_deploy_table_legend_names_every_column_and_row() -> None:
    text = "\n".join(legend())
    for name, _ in COLUMNS:
        assert f"     {name} " in text
    for _, label, _ in ROWS:
        assert f"     {label} " in text
    assert "initial_instance_count" in text  # what "before" resets to
    assert "make deploy" in text  # what "after" runs


def test_the_rollout_legend_names_its_columns() -> None:
    text = "\n".join(LEGEND)
    for column in ("step", "at", "canary inst.", "max inst.", "peak traffic", "min capacity",
                   "min headroom", "rejected", "capacity first", "weights only"):  # fmt: skip
        assert f"{column}:" in text or f"{column}," in text


def test_event_marks_a_minute_apart_share_one_label() -> None:
    start = datetime(2026, 12, 1, 7, tzinfo=UTC)
    end = start + timedelta(hours=8)
    at = start + timedelta(hours=4)
    marks = [
        (at + timedelta(minutes=1), "UpdateEndpoint, green fleet 34"),
        (at, "started"),
        (at + timedelta(minutes=30), "blue fleet terminated"),
    ]
    assert group_marks(marks, start, end) == [
        (at, ["started", "UpdateEndpoint, green fleet 34"]),
        (at + timedelta(minutes=30), ["blue fleet terminated"]),
    ]


def test_the_canary_ceiling_warning_names_the_field_that_binds() -> None:
    # the canary's own max 10; a step's share of the primary's max 51 (same speed) is 26 at 50 %
    plan = build_plan(
        (5, 50, 100), primary_min=2, primary_max=51, canary_min=2, canary_max=10,
        primary_concurrency=108.8, canary_concurrency=108.8,
    )  # fmt: skip
    at_5, at_50 = ceiling_fields(plan, [5, 50])
    assert at_5 == "at 5 %: scaling.variants.canary.max_capacity (10)"
    assert at_50.startswith("at 50 %: scaling.variants.primary.max_capacity (51): the step allows")
    assert "26 instances" in at_50


def test_the_gate_names_a_worst_queue_wait_at_the_cap() -> None:
    from simulator.slo_gate import _fmt

    assert _fmt("queue_wait_p95", 33_911.0, 33_911.3).endswith(
        "33,911 ms (the admission cap: a full queue; the overflow got 429)"
    )
    assert _fmt("queue_wait_p95", 1_791.0, 33_911.3) == "queue_wait_p95 1,791 ms"
    assert _fmt("rejected", 940.0, 940.0) == "rejected 940"
