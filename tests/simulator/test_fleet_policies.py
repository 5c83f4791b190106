"""The policies the fleet solver searches (issue 42): a canary billed only while a release runs,
scale-in that follows traffic, and unannounced spikes as best-effort when the config says so.

Small fixtures (dev's model on ml.g5.xlarge, a tenth of the brief's traffic, the simulator's
constant decode speed) keep each solve to seconds."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from simulator.assumptions import Assumptions
from simulator.fleet.solver import Policy, apply, current, solve_policy
from simulator.run import simulate
from simulator.slo_gate import evaluate
from simulator.traces import Trace
from sizing.fit_checks import parse_config
from sizing.fleet_cost import release_canary_monthly, release_hours
from sizing.rollout_plan import rollout_capacity_plan
from typed_config import DeploymentConfig

DEV = Path(__file__).resolve().parents[2] / "config" / "dev.yaml"
ITYPE = "ml.g5.xlarge"
FAST = Assumptions(decode_tokens_per_second=45.0, prefill_tokens_per_second=10_000.0)


def fixture(**fleet: Any) -> DeploymentConfig:
    data: dict[str, Any] = yaml.safe_load(DEV.read_text())
    data["scaling"] = {
        "variants": {
            "primary": {
                "min_capacity": 1,
                "max_capacity": 30,
                "target_tracking": {"slos": [], "scale_in": False},
                # prod's idle-in: scale in only while the GPU idles (never under load)
                "step_policies": [
                    {
                        "name": "idle-in", "direction": "in", "metric": "QueueDepth",
                        "comparison": "<", "threshold": 5, "evaluation_periods": 5,
                        "cooldown_seconds": 600,
                        "also_require": {"metric": "GPUUtilization", "comparison": "<",
                                         "threshold": 20},
                        "steps": [{"upper": 0, "change": -1}],
                    }
                ],
            },
            "canary": {"min_capacity": 3, "max_capacity": 30, "target_tracking": {"slos": []}},
        },
        "schedules": [],
        "release_calendar": [],
    }  # fmt: skip
    data["variants"]["primary"].update(initial_weight=100, initial_instance_count=3)
    data["variants"]["canary"].update(initial_weight=0, initial_instance_count=3)
    data["fleet"] = {
        "scenarios": ["normal-day", "canary-rollout"],
        "traffic_share": 0.1,
        "slos": ["rejected", "queue_wait_p95"],
        **fleet,
    }
    return parse_config(data, env="dev", source=DEV, base_dir=DEV.parent)


def test_a_canary_only_while_a_release_runs_costs_less_and_holds() -> None:
    cfg = fixture()
    standing = solve_policy(cfg, ITYPE, FAST, Policy(canary_release_only=False))
    release = solve_policy(cfg, ITYPE, FAST, Policy(canary_release_only=True))
    assert standing.solved and release.solved, (standing.why_not, release.why_not)
    assert release.cfg is not None and standing.cfg is not None
    # between releases the canary stands at the least a deploy accepts, below its floor
    between = release.cfg.scaling.variants["canary"].min_capacity
    raised = release.cfg.rollout.canary_instances
    assert raised is not None and between < raised
    assert between < standing.cfg.scaling.variants["canary"].min_capacity
    # the raise is billed for the release hours of the month, and the gate holds every scenario
    # (the canary ramp replayed with the raise) on the config the solver writes
    assert release.report is not None and release.report.release_canary_usd_per_month > 0
    assert release.report.release_canary_usd_per_month == release_canary_monthly(release.cfg)
    assert release_hours(release.cfg) * release.cfg.fleet.releases_per_month < 730
    again = evaluate(release.cfg, FAST)
    assert again.passed and again.monthly_usd == release.monthly_usd
    assert release.monthly_usd < standing.monthly_usd


def test_the_release_path_raises_the_canary_at_each_step_and_restores_its_floor() -> None:
    cfg = fixture()
    out = apply(cfg, replace(current(cfg), canary_min=4, policy=Policy(canary_release_only=True)))
    plan = rollout_capacity_plan(out)
    standing = out.scaling.variants["canary"].min_capacity
    assert out.rollout.canary_instances == 4 and standing < 4
    # the controller's plan: every step's floor at least the raise, the standing floor restored
    assert all(step.min_capacity >= 4 for step in plan.steps) and plan.canary_min == standing


def test_no_releases_a_month_bills_no_raise() -> None:
    cfg = fixture(releases_per_month=0)
    out = apply(cfg, replace(current(cfg), policy=Policy(canary_release_only=True)))
    assert out.rollout.canary_instances == 3
    assert release_canary_monthly(out) == 0.0


def _falling() -> Trace:
    """An hour at 6,000 requests/minute, then three at 600."""
    rpm = np.concatenate([np.full(60, 6000.0), np.full(180, 600.0)])
    return Trace("falling", datetime(2026, 12, 8, 3, tzinfo=UTC), rpm, "falling demand")


def test_scale_in_that_follows_traffic_follows_a_falling_trace() -> None:
    cfg = fixture()
    follows = apply(cfg, replace(current(cfg), policy=Policy(scale_in_follows=True)))
    tt = follows.scaling.variants["primary"].target_tracking
    assert tt is not None and tt.scale_in and tt.scale_in_cooldown_seconds == 300
    assert follows.scaling.variants["primary"].step_policies == []
    kept = simulate(cfg, _falling(), FAST).variant_per_minute("in_service", "primary", "min")
    followed = simulate(follows, _falling(), FAST)
    fell = followed.variant_per_minute("in_service", "primary", "min")
    # both carry the hour's peak; the config's idle-in (one instance per 10 minutes while the GPU
    # idles) steps down slowly, target tracking comes down to what the demand needs within its
    # low alarm's 15 datapoints and a cooldown of the drop
    assert fell[55] == kept[55] > 3
    low = int(fell[-1])
    assert np.all(fell[60 + 15 + 5 + 10 :] == low)
    assert fell[90] < kept[90] and low < kept[-1]
    assert followed.summary["rejected_429"] == 0


def test_unannounced_spikes_best_effort_are_reported_not_failed() -> None:
    data_fleet = {"scenarios": ["normal-day", "unannounced-3x"], "traffic_share": 1.0}
    held = fixture(**data_fleet)
    soft = fixture(**data_fleet, unannounced_spikes="best-effort")
    assert "unannounced-3x" in held.fleet.held() and "unannounced-3x" not in soft.fleet.held()
    # too few for the spike
    cfg = apply(soft, replace(current(soft), primary_max=2, canary_min=1, canary_max=1))
    report = evaluate(cfg, FAST)
    spike = next(v for v in report.verdicts if v.scenario == "unannounced-3x")
    assert spike.misses and spike.best_effort and "fleet.unannounced_spikes" in spike.best_effort
    assert all(m.scenario != "unannounced-3x" for m in report.misses)
    assert "BEST-EFFORT unannounced-3x" in report.render()
