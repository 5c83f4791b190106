"""Canary rollout scenario: the controller's own rules (lambdas.canary_controller.rules) replayed
against the normal-day trace under prod's config: the committed (solved) fleet, and prod's fleet
before issue 36 (sim_helpers.legacy_prod: ml.g5.xlarge, canary 2..2), which is short at the
modelled speed and so shows what the rollout does when capacity runs out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_helpers import legacy_prod

from lambdas.canary_controller import rules
from simulator.cli import main
from simulator.rollout import controller_rules, simulate_rollout
from sizing.fit_checks import load_config
from tests.fixtures import config_fixture
from typed_config import RolloutConfig

PROD = config_fixture("prod")


@pytest.fixture(scope="module")
def prod():  # type: ignore[no-untyped-def]
    return load_config(PROD, env="prod")


@pytest.fixture(scope="module")
def legacy():  # type: ignore[no-untyped-def]
    return legacy_prod()


@pytest.fixture(scope="module")
def after(prod):  # type: ignore[no-untyped-def]
    """The committed fleet at the modelled speed (pessimistic edge, LoRA, the routing simulation's
    hit rate): the solved fleet carries the normal day through the whole ramp."""
    return simulate_rollout(prod)


def test_at_the_modelled_speed_the_canary_is_short_only_at_its_ceiling(legacy) -> None:  # type: ignore[no-untyped-def]
    """With the speed model's A10G the normal-day peak needs more than the legacy canary's
    max_capacity: the rollout still puts capacity first, and every minute over capacity is at
    the ceiling."""
    s = simulate_rollout(legacy)["summary"]
    assert s["canary_minutes_over_capacity"] == s["canary_minutes_over_capacity_at_ceiling"]
    assert s["canary_minutes_over_capacity"] > 0
    assert (
        s["canary_peak_rpm"]
        > legacy.scaling.variants["canary"].max_capacity * (s["canary_rpm_per_instance"])
    )


def test_every_step_keeps_the_canary_within_its_capacity(after) -> None:  # type: ignore[no-untyped-def]
    s = after["summary"]
    assert after["status"] == "COMPLETED"
    assert [p["percent"] for p in s["steps"]] == [5, 25, 50, 75, 100]
    assert s["canary_minutes_over_capacity"] == 0 and s["canary_rejected"] == 0
    assert all(p["min_headroom_rpm"] >= 0 for p in s["steps"])
    # Capacity came before weight: at every shift the canary already had the planned instances.
    assert len(after["steps"]) == 5
    for step in after["steps"]:
        assert step["planned"] >= 1 and step["canary_in_service"] >= step["planned"]


def test_weights_only_as_before_overruns_the_canary(legacy, prod) -> None:  # type: ignore[no-untyped-def]
    before = simulate_rollout(legacy, capacity_first=False)
    s = before["summary"]
    assert s["canary_minutes_over_capacity"] > 0 and s["canary_rejected"] > 0
    assert max(p["canary_instances_max"] for p in s["steps"]) <= 2  # config max: 2
    # the solved fleet too: its canary's target tracking lags the weight shifts
    s = simulate_rollout(prod, capacity_first=False)["summary"]
    assert s["canary_minutes_over_capacity"] > 0 and s["canary_rejected"] > 0


def test_the_scenario_replays_the_controllers_evidence_rule(prod) -> None:  # type: ignore[no-untyped-def]
    silent = prod.model_copy(
        update={"rollout": RolloutConfig(min_canary_invocations_per_step=10**9)}
    )
    result = simulate_rollout(silent)
    kinds = [kind for _, kind, _ in result["decisions"]]
    assert "hold" in kinds and kinds[-1] == "rollback"
    assert [p["percent"] for p in result["summary"]["steps"]] == [5]
    assert controller_rules(silent).evidence == rules.EvidenceRules(10**9, 0.5)


def test_make_simulate_writes_the_rollout_report(tmp_path: Path) -> None:
    config = str(config_fixture("prod"))
    args = ["rollout", "--env", "prod", "--config", config, "--out", str(tmp_path), "--no-charts"]
    assert main(args) == 0
    report = json.loads((tmp_path / "canary-rollout.json").read_text())
    first, before = report["capacity_first"], report["weights_only_before"]
    # short only at the fleet's ceiling (a sizing warning, exit 0), never by the rollout's order
    assert first["canary_minutes_over_capacity"] == first["canary_minutes_over_capacity_at_ceiling"]
    assert before["canary_minutes_over_capacity"] > first["canary_minutes_over_capacity"]
