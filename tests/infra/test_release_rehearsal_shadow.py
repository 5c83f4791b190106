"""The release rehearsal (test_release_rehearsal.py) with a shadow stage (issue 33, item 5): the
same make targets through their tools' real ``main`` on the fake account (botocore-validated
clients), on prod.yaml and its ``rollout.shadow``. A clean release runs shadow, comparison pass,
canary, ramp, promote, with the canary's autoscaling deregistered for the stage and registered
again (bounds and target tracking) before its first step; a failing comparison stops it in the
shadow stage with no canary weight ever set, the canary's autoscaling back, and nothing after
``make canary-wait`` run. The account refuses what SageMaker would (issue 41, item 3): a
blue/green move that renames variants and a shadow resize, which the controller never asks for
(its moves are plain UpdateEndpoints, the shadow sized in the config it enters); a move refused
for good ends the stage at once with a verdict, naming the message."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from lambdas.canary_controller import aws, canary_scaling, shadow_stage
from lambdas.canary_controller.shadow_fleet import tracking_count
from sizing.rollout_plan import rollout_capacity_plan
from typed_config.shadow import CONTROLLER_OWNED_VARIANT

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
    # in (to a sized copy of the stack's shadow config, created first), then back
    moves = ("sagemaker.CreateEndpointConfig", "sagemaker.UpdateEndpoint")
    sagemaker = [c for c in account.calls if c in moves]
    assert sagemaker == [
        "sagemaker.CreateEndpointConfig", "sagemaker.UpdateEndpoint", "sagemaker.UpdateEndpoint",
    ], account.calls  # fmt: skip
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
    # the shadow's count: the primary's load per instance when the stage started, in the config
    # the move went to (the stack's is the peak size)
    cfg, peak = account.cfg, account.configs[SHADOW_CONFIG]["shadow"]["count"]
    per_primary = rollout_capacity_plan(cfg).canary_per_primary
    ((primary, count),) = account.shadow_counts
    assert count == tracking_count(10, primary, per_primary, peak) != peak, (primary, count)


def test_the_account_refuses_a_renaming_blue_green_move_and_a_shadow_resize(
    account: Account,
    steps_of_release: list[Any],
    capsys: Any,
) -> None:
    """As SageMaker would (tests/sagemaker_refusals.py): a move between the canary and the
    shadow config that re-applies the stack's blue/green policy, and a count for the shadow
    variant; the controller asks for neither, so its stage still reaches its verdict."""
    sm, ep = account.clients()["sagemaker"], account.cfg.endpoint_name
    canary_config = account.endpoint["config"]
    with pytest.raises(ClientError, match="requires the same variant names"):
        sm.update_endpoint(
            EndpointName=ep, EndpointConfigName=SHADOW_CONFIG,
            RetainAllVariantProperties=True, RetainDeploymentConfig=True,
        )  # fmt: skip
    assert account.endpoint["config"] != SHADOW_CONFIG
    aas, spec = account.clients()["application-autoscaling"], account.controller.shadow
    assert spec is not None and spec.canary_scaling is not None
    canary_scaling.release(aas, ep, CONTROLLER_OWNED_VARIANT)  # as the stage does first
    aws.update_endpoint(sm, ep, SHADOW_CONFIG)  # the controller's own move is taken...
    with pytest.raises(ClientError, match='"shadow" is/are not present'):
        aws.set_instances(sm, ep, "shadow", 1)  # ...a shadow resize is not
    aws.update_endpoint(sm, ep, canary_config)
    canary_scaling.register(aas, ep, CONTROLLER_OWNED_VARIANT, spec.canary_scaling)
    steps = release(account, steps_of_release, capsys)
    assert [(s.target, s.rc) for s in steps][-1] == ("promote", 0)
    seen = decisions(account)
    assert seen.index("enter-shadow") < seen.index("leave-shadow") < seen.index("complete")


def test_a_move_sagemaker_refuses_for_good_ends_the_stage_at_once_with_a_verdict(
    account: Account,
    steps_of_release: list[Any],
    capsys: Any,
) -> None:
    """A ValidationException that is not "in progress" on the move into the stage ends the
    release FAILED at once, naming SageMaker's message; the endpoint never left the canary
    config, and the canary's autoscaling is back."""
    account.fail("sagemaker.UpdateEndpoint", ("ValidationException", 400))
    steps = release(account, steps_of_release, capsys)
    assert [(s.target, s.rc) for s in steps] == [
        ("deploy", 0), ("canary-start", 0), ("canary-wait", 1),
    ]  # fmt: skip
    assert "ValidationException (injected)" in steps[2].err
    account.sleep(3600)
    status, _ = account.controller.handle({"action": "status"})
    assert status["status"] == "FAILED" and status["last_decision"] == "shadow-end", status
    assert decisions(account)[-2:] == ["rollback", "shadow-end"], decisions(account)
    assert "shift" not in decisions(account) and "leave-shadow" not in decisions(account)
    assert account.calls.count("sagemaker.UpdateEndpoint (failed: ValidationException)") == 1
    assert account.state()["images"] == {"primary": LAST, "canary": SHA}
    assert account.targets["canary"] == (3, 54)


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


def test_a_stage_whose_ground_is_missing_ends_failed_within_minutes_not_at_max_minutes(
    account: Account,
    steps_of_release: list[Any],
    capsys: Any,
) -> None:
    """Issue 41, item 4: capture not written for the shadow ends the release at once with the
    reason, never a hold to max_minutes."""
    missing = "no capture object of shadow yet"
    account.controller.shadow_ground = shadow_stage.Ground((missing,), "data capture Started")
    started = account.now
    steps = release(account, steps_of_release, capsys)
    assert [(s.target, s.rc) for s in steps][-1] == ("canary-wait", 1)
    assert missing in steps[-1].err
    assert account.now - started < 3600  # max_minutes is 240 here
    account.sleep(3600)
    status, _ = account.controller.handle({"action": "status"})
    assert status["status"] == "FAILED" and status["last_decision"] == "shadow-end", status
    assert "compare" not in " ".join(decisions(account))
