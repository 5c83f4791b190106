"""Hand-checked traces: exact instance counts under cooldowns, steps, schedules, min/max.

Arithmetic used below (prod engine on ml.g5.xlarge, default assumptions): 74 concurrent
sequences per instance, 4.0336 s per request, admission limit 256 in flight per instance.
InvocationsPerInstance (Average over 60 s) = requests per minute / instances in service.
"""

from __future__ import annotations

from dataclasses import replace

from sim_helpers import (
    IDLE_IN,
    LEGACY_SPEED,
    desired_at_minute,
    flat_trace,
    in_service_at_minute,
    make_cfg,
    run,
)

from container.serving import metrics_contract as mc
from simulator.metrics import SUPPORTED_METRICS

SLOW = replace(
    LEGACY_SPEED, provision_seconds=3600, startup_seconds=0
)  # nothing arrives during a test


def step_out(cooldown: int = 600, **kw: object) -> dict[str, object]:
    return {
        "name": "inv-out",
        "direction": "out",
        "metric": "InvocationsPerInstance",
        "statistic": "Average",
        "comparison": ">",
        "threshold": 500,
        "period_seconds": 60,
        "evaluation_periods": 1,
        "cooldown_seconds": cooldown,
        "steps": [
            {"lower": 0, "upper": 300, "change": 1},
            {"lower": 300, "upper": 700, "change": 2},
            {"lower": 700, "change": 3},
        ],
        **kw,
    }


def primary(**kw: object) -> dict[str, object]:
    return {"min_capacity": 2, "max_capacity": 8, **kw}


def test_step_intervals_are_offsets_from_the_threshold() -> None:
    # 2 instances: 1,500 rpm -> 750/instance, 250 over 500 -> +1; 1,600 -> exactly 300 over:
    # lower bounds are inclusive -> +2; 1,800 -> 400 over -> +2; 2,600 -> 800 over -> +3.
    cfg = make_cfg(primary(step_policies=[step_out()]))
    for rpm, expected in ((1500, 3), (1600, 4), (1800, 4), (2600, 5), (1000, 2)):
        res = run(cfg, flat_trace([(5, rpm)]), SLOW)
        assert desired_at_minute(res, 1) == expected, rpm


def test_scale_out_cooldown_counts_capacity_already_added() -> None:
    # +1 at the end of minute 1 (750/instance); from minute 3 the load asks for +3: still in the
    # 600 s cooldown, so only 3 - 1 = 2 more are added (AAS semantics), then nothing until the
    # cooldown set by that second activity (at 240 s) ends at 840 s, when +3 applies again.
    cfg = make_cfg(primary(step_policies=[step_out()]))
    res = run(cfg, flat_trace([(3, 1500), (20, 2600)]), SLOW)
    acts = [(a.seconds, a.desired_from, a.desired_to) for a in res.runs["primary"].activities]
    assert acts == [(60, 2, 3), (240, 3, 5), (840, 5, 8)]


def test_scale_out_without_cooldown_repeats_every_period_until_max() -> None:
    cfg = make_cfg(primary(max_capacity=6, step_policies=[step_out(cooldown=0)]))
    res = run(cfg, flat_trace([(6, 1500)]), SLOW)
    assert [desired_at_minute(res, m) for m in (0.5, 1, 2, 3, 4, 5)] == [2, 3, 4, 5, 6, 6]


def test_scale_in_waits_for_evaluation_periods_and_cooldown_and_stops_at_min() -> None:
    cfg = make_cfg(primary(step_policies=[IDLE_IN]), initial=6)
    res = run(cfg, flat_trace([(40, 0)]))
    counts = [in_service_at_minute(res, m) for m in (4.9, 5, 9.9, 10, 15, 20, 25, 39)]
    assert counts == [6, 5, 5, 4, 3, 2, 2, 2]


def test_new_instances_serve_only_after_provisioning_and_startup() -> None:
    cfg = make_cfg(primary(step_policies=[step_out(cooldown=3600)]))
    a = replace(LEGACY_SPEED, provision_seconds=300, startup_seconds=75)
    res = run(cfg, flat_trace([(15, 1500)]), a)
    # decided at 60 s, serving from the first 10 s tick at or after 60 + 375 = 435 s: 440 s
    in_service = res.runs["primary"].series["in_service"]
    assert [int(in_service[i]) for i in (6, 43, 44, 60)] == [2, 2, 3, 3]
    assert res.runs["primary"].series["launched"][7] == 3  # billed while starting


def test_target_tracking_invocations_out_after_three_minutes_in_after_fifteen() -> None:
    tt = {
        "metric": "invocations",
        "invocations_per_instance": 1000,
        "scale_out_cooldown_seconds": 60,
        "scale_in_cooldown_seconds": 600,
    }
    cfg = make_cfg(primary(target_tracking=tt))
    res = run(
        cfg,
        flat_trace([(20, 3000), (40, 1000)]),
        replace(LEGACY_SPEED, provision_seconds=600, startup_seconds=0),
    )
    acts = [(a.seconds, a.desired_to) for a in res.runs["primary"].activities]
    # 1,500/instance > 1,000 for minutes 0-2 -> ceil(2 x 1500 / 1000) = 3 at 180 s; in service
    # at 780 s (1,000/instance: not above target). From minute 20: 333/instance < 900 for 15
    # one-minute datapoints (minutes 20-34) -> ceil(3 x 333 / 1000) = 1, held at min 2 at 2100 s.
    assert acts == [(180, 3), (2100, 2)]


def test_target_tracking_high_resolution_concurrency_reacts_after_three_10s_datapoints() -> None:
    cfg = make_cfg(primary(target_tracking={"metric": "concurrency"}))
    res = run(cfg, flat_trace([(2, 20000)]), SLOW)
    # saturated: 256 in flight per instance (admission limit) vs target 0.85 x 74 = 62.9
    # (74 = sequences the KV cache holds at typical length, below max_num_seqs 128)
    # -> ceil(2 x 256 / 62.9) = 9, capped at max_capacity 8, after the third 10 s datapoint
    acts = [(a.seconds, a.desired_to) for a in res.runs["primary"].activities]
    assert acts[0] == (30, 8)


def test_max_capacity_caps_every_policy() -> None:
    cfg = make_cfg(primary(max_capacity=3, step_policies=[step_out(cooldown=0)]))
    res = run(cfg, flat_trace([(10, 5000)]))
    assert int(res.runs["primary"].series["in_service"].max()) == 3
    assert int(res.runs["primary"].series["desired"].max()) == 3


def test_disabled_policy_is_left_out() -> None:
    cfg = make_cfg(primary(step_policies=[step_out()]))
    a = replace(
        LEGACY_SPEED, provision_seconds=60, startup_seconds=0, disabled_policies=("inv-out",)
    )
    res = run(cfg, flat_trace([(5, 2600)]), a)
    assert res.runs["primary"].activities == []


def test_serialized_updates_wait_for_starting_instances() -> None:
    cfg = make_cfg(primary(step_policies=[step_out(cooldown=0)]))
    a = replace(LEGACY_SPEED, provision_seconds=240, startup_seconds=0)
    res = run(cfg, flat_trace([(12, 1500)]), a)
    launched = res.runs["primary"].series["launched"]
    # +1 decided at 60 s (3 launched); desired rises by 1 every minute (4, 5, 6, then 7 at
    # 300 s, still measured on 2 instances), but the next instances launch only once the first
    # is in service at 300 s: straight to 7.
    assert [int(launched[m * 6]) for m in (2, 4, 5, 6)] == [3, 3, 7, 7]
    free = replace(LEGACY_SPEED, provision_seconds=240, startup_seconds=0, serialize_updates=False)
    res2 = run(cfg, flat_trace([(12, 1500)]), free)
    assert int(res2.runs["primary"].series["launched"][2 * 6]) == 4


def test_the_simulator_models_metrics_under_the_names_the_stacks_alarm_on() -> None:
    """Every metric a simulated policy can watch is one the contract or SageMaker publishes."""
    published = set(mc.BY_NAME) | mc.SAGEMAKER_INVOCATION_METRICS | mc.SAGEMAKER_INSTANCE_METRICS
    assert published >= SUPPORTED_METRICS
    assert mc.QUEUE_DEPTH.name in SUPPORTED_METRICS and mc.TTFT_P95.name in SUPPORTED_METRICS


def test_a_comparison_writes_its_own_directory_and_a_readable_table(tmp_path, monkeypatch) -> None:
    """The docs' compare example overwrote make simulate's sim-out/prod/summary.json, and its
    header read `primary max 12baseline prod.yaml`."""
    import contextlib
    import io
    from pathlib import Path

    from simulator.cli import main

    monkeypatch.chdir(tmp_path)
    repo = Path(__file__).resolve().parents[2]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main([
            "run", "--config", str(repo / "config/examples/prod-max12.yaml"),
            "--label", "primary max 12", "--baseline", str(repo / "config/prod.yaml"),
            "--trace", "unannounced-3x", "--no-charts",
        ])  # fmt: skip
    assert code == 0
    out = tmp_path / "sim-out" / "compare" / "primary-max-12-vs-prod"
    assert (out / "summary.json").exists() and (out / "unannounced-3x.json").exists()
    assert not (tmp_path / "sim-out" / "prod").exists()
    header = printed.getvalue().splitlines()[1]
    assert "primary max 12  baseline prod.yaml" in header
