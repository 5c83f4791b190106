"""The release rehearsal (test_release_rehearsal.py) with a shadow stage (issue 33, item 5): the
same make targets through their tools' real ``main`` on the fake account (botocore-validated
clients), on prod.yaml and its ``rollout.shadow``. A clean release runs shadow, comparison pass,
canary, ramp, promote, with the canary's autoscaling deregistered for the stage and registered
again (bounds and target tracking) before its first step; a failing comparison stops it in the
shadow stage with no canary weight ever set, the canary's autoscaling back, and nothing after
``make canary-wait`` run."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from lambdas.canary_controller.shadow_fleet import tracking_count
from sizing.rollout_plan import rollout_capacity_plan

from .conftest import raw_config
from .fake_account import SHADOW_CONFIG, Account, alike_answers
from .test_release_rehearsal import LAST, SHA, TARGETS, account_with, make_command, release

REPO = Path(__file__).resolve().parents[2]


class _Tracking:
    """Equal to prod's canary target tracking: the concurrency target (0.85 x 128)."""

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, dict)
            and other["TargetValue"] == 108.8
            and other["PredefinedMetricSpecification"]
            == {"PredefinedMetricType": "SageMakerVariantConcurrentRequestsPerModelHighResolution"}
        )


ANY_TRACKING = _Tracking()


@pytest.fixture(scope="module")
def steps_of_release() -> list[tuple[str, str, list[str]]]:
    """The make targets' commands, as the rehearsal runs them."""
    return [(target, *make_command(target, variable)) for target, variable in TARGETS]


@pytest.fixture
def account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Account:
    """The rehearsal's account on prod.yaml, its shadow stage's window shorter."""
    raw = copy.deepcopy(raw_config("prod"))
    raw["rollout"]["shadow"] = {**raw["rollout"]["shadow"], "min_minutes": 60, "max_minutes": 240}
    acct = account_with(raw, tmp_path, monkeypatch)
    acct.controller.canary_weights.clear()  # the last release's idle canary
    return acct


def decisions(account: Account) -> list[str]:
    return account.controller.decided


def test_a_release_with_a_shadow_stage_runs_shadow_pass_canary_ramp_promote(
    account: Account,
    steps_of_release: list[Any],
    capsys: Any,
) -> None:
    steps = release(account, steps_of_release, capsys)
    assert [(s.target, s.rc) for s in steps] == [
        ("deploy", 0), ("canary-start", 0), ("canary-wait", 0), ("promote", 0),
    ]  # fmt: skip
    moves = [c for c in account.calls if c.startswith("controller: UpdateEndpoint")]
    assert moves[0] == f"controller: UpdateEndpoint {SHADOW_CONFIG}"
    assert len(moves) == 2 and moves[1] != moves[0]  # in, then back to the canary config
    wait = steps[2]
    assert "shadow stage before step 1/5" in wait.out
    for percent in (5, 25, 50, 75, 100):
        assert f"({percent}%)" in wait.out
    # the canary's weights: the five steps, then the promotion's idle canary
    assert account.controller.canary_weights == [5, 25, 50, 75, 100, 0]
    seen = decisions(account)
    assert seen.index("enter-shadow") < seen.index("leave-shadow") < seen.index("canary-stage")
    assert seen.index("canary-stage") < seen.index("shift") and "complete" in seen
    assert account.state()["images"] == {"primary": SHA, "canary": SHA}
    assert account.state()["weights"] == {"primary": 100.0, "canary": 0.0}
    # the canary's autoscaling: the controller's, off for the stage, back before its first step
    scaling = [c for c in account.calls if c.startswith("application-autoscaling.")]
    assert "application-autoscaling.PutScalingPolicy" in scaling
    assert account.policies["canary"] == {
        "mangaassist-vllm-prod-canary-target-tracking": ANY_TRACKING
    }
    # the shadow's count: the primary's load per instance, asked for on entry (the config's is
    # the peak size)
    cfg, peak = account.cfg, account.configs[SHADOW_CONFIG]["shadow"]["count"]
    assert account.shadow_counts, account.calls
    per_primary = rollout_capacity_plan(cfg).canary_per_primary
    for primary, count in account.shadow_counts:
        assert count == tracking_count(10, primary, per_primary, peak) != peak, (primary, count)


def test_a_failing_comparison_stops_the_release_in_the_shadow_stage(
    account: Account,
    steps_of_release: list[Any],
    capsys: Any,
) -> None:
    account.controller.shadow_answers = alike_answers(account.cfg, shadow_fail_every=10)
    steps = release(account, steps_of_release, capsys)
    assert [(s.target, s.rc) for s in steps] == [
        ("deploy", 0), ("canary-start", 0), ("canary-wait", 1),
    ]  # fmt: skip
    # the wait stops at the rollback, naming the comparison; CI stops the job there
    assert "is ROLLING_BACK" in steps[2].err and "shadow comparison fail" in steps[2].err
    account.sleep(3600)  # the controller's ticks take the endpoint back to the canary config
    status, _ = account.controller.handle({"action": "status"})
    assert status["status"] == "ROLLED_BACK" and status["last_decision"] == "shadow-end"
    assert account.controller.canary_weights == []  # no canary weight ever set
    assert "shift" not in decisions(account)
    state = account.state()
    assert state["images"] == {"primary": LAST, "canary": SHA}  # the canary config, back
    assert state["weights"] == {"primary": 100.0, "canary": 0.0}
    assert account.targets["canary"] == (3, 54)  # its autoscaling back as configured
    assert "mangaassist-vllm-prod-canary-target-tracking" in account.policies["canary"]
