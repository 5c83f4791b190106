"""The component shape in the simulator (issue 45 item 5): scale from zero, per-copy scaling,
the month at zero, an adapter release replayed like a canary, and the gate for the shape.
Relations on the example configs and fixtures derived from them, never prod's figures."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from simulator.adapter_rollout import replay_release
from simulator.assumptions import Assumptions
from simulator.bad_builds import bad_builds
from simulator.component_gate import evaluate_components
from simulator.components import (
    NO_CAPACITY_METRIC,
    cold_spells,
    idle_week,
    simulate_components,
    start_times,
    summary,
)
from simulator.traces import JST, Trace, normal_day
from sizing.fit_checks import FIT_CHECKS, load_config
from sizing.fleet_cost import monthly
from typed_config import DeploymentConfig
from typed_config.catalog import HOURS_PER_MONTH
from typed_config.loader import parse_config_data

REPO = Path(__file__).resolve().parents[2]
DEV_IC = REPO / "config" / "examples" / "dev-components.yaml"
PROD_IC = REPO / "config" / "examples" / "prod-components.yaml"
A = Assumptions()


def _parse(raw: dict[str, Any]) -> DeploymentConfig:
    return parse_config_data(
        raw, env=raw["env"], source=DEV_IC, base_dir=DEV_IC.parent, fit_checks=FIT_CHECKS
    )


@pytest.fixture(scope="module")
def dev_ic() -> DeploymentConfig:
    return load_config(DEV_IC, env="dev")


def _quiet_then_busy(cfg: DeploymentConfig, quiet: int, busy: int, rpm: float) -> Trace:
    start = normal_day().start
    values = np.concatenate([np.zeros(quiet), np.full(busy, rpm)])
    return Trace("quiet-then-busy", start, values)


def test_the_wake_alarm_reads_the_metric_the_stack_alarms_on() -> None:
    from stacks.constructs.inference_components import NO_CAPACITY_METRIC as STACK_METRIC

    assert NO_CAPACITY_METRIC == STACK_METRIC


def test_requests_at_zero_fail_as_cold_until_the_first_copy_serves(
    dev_ic: DeploymentConfig,
) -> None:
    """At zero every request fails (NoCapacityInvocationFailures), never as a 429; the wake
    alarm adds a copy at the end of the first minute with a failure, and from the tick the copy
    serves (after a new instance's start) no request is cold."""
    run = simulate_components(dev_ic, _quiet_then_busy(dev_ic, 30, 60, 20.0), A)
    s = run.series
    assert s["in_service"][0] == 0 and s["instances"][0] == 0
    first_cold = int(np.flatnonzero(s["cold"] > 0)[0])
    serving = int(np.flatnonzero(s["in_service"] > 0)[0])
    assert first_cold == 30 * 60 // run.tick_seconds
    # every request before the first copy serves is cold; none after; none is a 429
    assert s["cold"][first_cold:serving].sum() == pytest.approx(
        s["arrivals"][first_cold:serving].sum()
    )
    assert s["cold"][serving:].sum() == 0
    assert s["rejected"].sum() == 0
    wake = next(x for x in run.activities if x[1] == "copies" and x[2] == 0)
    assert wake[4] == "step:wake-from-zero"
    assert wake[0] == (30 + 1) * 60  # the end of the first minute with failures
    assert serving * run.tick_seconds >= wake[0] + start_times(dev_ic, A).on_new_instance
    (spell,) = cold_spells(run)
    assert spell.requests == pytest.approx(s["cold"].sum())
    assert spell.longest_wait_s >= start_times(dev_ic, A).on_new_instance
    assert summary(run)["cold_failures"] == round(float(s["cold"].sum()))


def test_copies_scale_out_on_free_gpus_before_instances(dev_ic: DeploymentConfig) -> None:
    """On a four-GPU instance the per-copy policy adds copies on the instance it has (each
    serving after the engine's start alone) before managed instance scaling adds an instance."""
    raw = yaml.safe_load(DEV_IC.read_text())
    raw = copy.deepcopy(raw)
    raw["variants"]["primary"]["instance_type"] = "ml.g5.12xlarge"
    raw["variants"]["canary"]["instance_type"] = "ml.g5.12xlarge"
    raw["inference_components"]["instance_type"] = "ml.g5.12xlarge"
    raw["inference_components"]["instances"] = {"min": 1, "max": 2}
    raw["inference_components"]["base"]["copies"] = {"min": 1, "max": 8}
    cfg = _parse(raw)
    ic = cfg.inference_components
    assert ic is not None and ic.copies_per_instance == 4
    a = replace(A, warm_start=False)
    one_copy_rpm = simulate_components(cfg, _quiet_then_busy(cfg, 1, 1, 0.0), a).copy
    per_copy_rpm = 60 * ic.base.target_requests_per_copy / one_copy_rpm.service_seconds
    rpm = np.concatenate([np.full(40, 3 * per_copy_rpm), np.full(60, 7 * per_copy_rpm)])
    run = simulate_components(cfg, Trace("ramp", normal_day().start, rpm), a)
    copies = [x for x in run.activities if x[1] == "copies" and x[3] > x[2]]
    instances = [x for x in run.activities if x[1] == "instances" and x[3] > x[2]]
    assert copies and instances
    # the first scale-out fits the instance's free GPUs: no instance is added for it
    assert copies[0][3] <= ic.copies_per_instance and copies[0][0] < instances[0][0]
    s = run.series
    ticks_before = int(instances[0][0] // run.tick_seconds)
    # copies were placed on the first instance's free GPUs, and served there, before it
    assert s["copies_placed"][:ticks_before].max() > 1
    assert s["in_service"][: ticks_before + 1].max() > 1
    assert s["instances"][:ticks_before].max() == 1
    assert s["instances"].max() == 2 and s["copies_placed"].max() > ic.copies_per_instance


def test_the_idle_week_at_zero_costs_less_than_always_on(dev_ic: DeploymentConfig) -> None:
    tr = idle_week(dev_ic)
    local = [(tr.start + timedelta(minutes=m)).astimezone(JST) for m in (0, 3 * 60, 9 * 60)]
    assert tr.rpm[0] == 0 and tr.rpm[3 * 60] == 0 and local[2].weekday() < 5
    run = simulate_components(dev_ic, tr, A)
    s = summary(run)
    ic = dev_ic.inference_components
    assert ic is not None
    always_on = ic.instances.max * run.price_per_hour * HOURS_PER_MONTH
    one_always_on = run.price_per_hour * HOURS_PER_MONTH
    assert 0 < s["cost_per_month_usd"] < one_always_on < always_on  # type: ignore[operator]
    assert s["cost_per_month_usd"] == round(monthly(float(s["cost_usd"]), tr.minutes))  # type: ignore[arg-type]
    assert s["nights_at_zero"] == 7
    # one wake per busy day, each counted apart from the 429s
    assert len(s["cold_spells"]) == 5  # type: ignore[arg-type]
    assert s["cold_failures"] > 0 and s["rejected_429"] == 0  # type: ignore[operator]


def _adapter(cfg: DeploymentConfig) -> str:
    return cfg.adapters[0].name


def test_a_failing_adapter_version_is_rolled_back_at_the_bake_with_its_answers_counted(
    dev_ic: DeploymentConfig,
) -> None:
    builds = {b.key: b for b in bad_builds({_adapter(dev_ic): 1.0})}
    ic = dev_ic.inference_components
    assert ic is not None
    for key in ("one-adapter", "errors-2pct"):
        o = replay_release(dev_ic, _adapter(dev_ic), builds[key])
        assert o.result == "rolled back", o.reason
        assert o.decided_after_minutes == ic.rollout.bake_minutes
        assert o.answered_users == 0  # the candidate served only the probes
        assert o.failed == pytest.approx(o.probes * builds[key].error_share({_adapter(dev_ic): 1}))
        assert o.failed > 0
    healthy = replay_release(dev_ic, _adapter(dev_ic), builds["healthy"])
    assert healthy.result == "promoted" and healthy.failed == 0


def test_a_version_the_evidence_cannot_see_answers_the_adapter_to_the_day_end(
    dev_ic: DeploymentConfig,
) -> None:
    """A slower version passes the 5XX evidence and, with no alarm watched, takes every request
    of the adapter from the swap on; more traffic means more bad answers."""
    build = next(b for b in bad_builds({_adapter(dev_ic): 1.0}) if b.key == "latency-2x")
    small = replay_release(dev_ic, _adapter(dev_ic), build)
    raw = yaml.safe_load(DEV_IC.read_text())
    raw["fleet"]["traffic_share"] = 0.1
    big = replay_release(_parse(raw), _adapter(dev_ic), build)
    assert small.result == big.result == "promoted"
    assert 0 < small.answered_users < big.answered_users
    assert big.users_share_of_day_percent == pytest.approx(small.users_share_of_day_percent)


def test_the_component_gate_fails_on_a_copy_ceiling_and_names_it() -> None:
    raw = yaml.safe_load(PROD_IC.read_text())
    raw["fleet"]["scenarios"] = ["normal-day"]
    raw["fleet"]["best_effort"] = []
    raw["inference_components"]["base"]["copies"] = {"min": 2, "max": 3}
    raw["inference_components"]["instances"] = {"min": 2, "max": 3}
    raw["env"] = "prod"
    report = evaluate_components(_parse(raw), A)
    assert not report.passed
    (verdict,) = report.verdicts
    assert verdict.misses
    assert any("inference_components.base.copies.max (3)" in m.held_by for m in verdict.misses)


def test_a_partial_best_effort_entry_accepts_only_its_own_slos_in_the_component_gate() -> None:
    raw = yaml.safe_load(PROD_IC.read_text())
    raw["fleet"]["scenarios"] = ["normal-day"]
    raw["inference_components"]["base"]["copies"] = {"min": 2, "max": 3}
    raw["inference_components"]["instances"] = {"min": 2, "max": 3}
    raw["env"] = "prod"
    reason = "queue waits on this small fleet are accepted for the test"
    raw["fleet"]["best_effort"] = [
        {"scenario": "normal-day", "reason": reason, "slos": ["queue_wait_p95"]}
    ]
    report = evaluate_components(_parse(raw), A)
    (verdict,) = report.verdicts
    # the queue waits are accepted risk, reported with the reason; the 429s still fail the gate
    assert verdict.accepted and {m.slo for m in verdict.accepted} == {"queue_wait_p95"}
    assert verdict.misses and {m.slo for m in verdict.misses} == {"rejected"}
    assert not report.passed and verdict.best_effort is None
    text = report.render()
    assert (
        f"accepted risk (fleet.best_effort, queue_wait_p95 only; the other SLOs held): {reason}"
        in text
    )
    assert "  FAIL" in text and "accepted: normal-day" in text
    # the whole scenario accepted: reported, and the gate passes
    raw["fleet"]["best_effort"] = [{"scenario": "normal-day", "reason": reason}]
    whole = evaluate_components(_parse(raw), A)
    assert whole.passed and whole.verdicts[0].best_effort == reason


def test_the_component_gate_passes_dev_and_names_what_it_does_not_replay(
    dev_ic: DeploymentConfig,
) -> None:
    report = evaluate_components(dev_ic, A)
    assert report.passed
    names = {v.scenario: v for v in report.verdicts}
    assert names["deploy-at-peak"].not_replayed and not names["deploy-at-peak"].figures
    assert "idle-week" in names  # scale to zero: the plan's idle week is held too
    assert "NOT REPLAYED deploy-at-peak" in report.render()


def test_the_plan_describes_a_base_update_not_a_variant_blue_green(
    dev_ic: DeploymentConfig,
) -> None:
    from sizing.plan import build_plan, render_plan

    lines = render_plan(build_plan(dev_ic, {}), alarm_list=False).splitlines()
    deploy = [x for x in lines if x.startswith("  deploy")]
    assert deploy and "UpdateInferenceComponent" in deploy[0]
    assert not any("blue/green," in x or "rollout blue/green" in x for x in lines)
    assert any("sets no DeploymentConfig" in x for x in lines)
    variant = render_plan(
        build_plan(load_config(REPO / "config" / "dev.yaml", env="dev"), {}), alarm_list=False
    )
    assert "  deploy  blue/green" in variant and "UpdateInferenceComponent" not in variant


def test_the_cli_gates_the_shape_a_components_config_ships(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from simulator.cli import main

    assert main(["gate", "--config", str(DEV_IC), "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "capacity-gate.json").read_text())
    assert report["shape"] == "inference_components" and report["passed"] is True
    assert main(["rollout", "--config", str(DEV_IC), "--out", str(tmp_path)]) == 0
    assert "rollout: skipped" in capsys.readouterr().out
    assert not (tmp_path / "canary-rollout.json").exists()
