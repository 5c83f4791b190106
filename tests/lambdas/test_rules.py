"""The controller's pure rules: capacity plan, instances per step, evidence."""

from __future__ import annotations

import pytest

from lambdas.canary_controller import rules as r
from sizing.rollout_plan import build_plan


def test_plan_converts_between_instance_types() -> None:
    # A canary type that runs half the sequences needs twice the instances for the same share.
    plan = build_plan(
        [10, 50, 100], primary_min=2, primary_max=8, canary_min=1, canary_max=2,
        primary_concurrency=80, canary_concurrency=40,
    )  # fmt: skip
    assert plan.canary_per_primary == 2.0
    assert [(s.min_capacity, s.max_capacity) for s in plan.steps] == [(1, 2), (2, 8), (4, 16)]
    assert r.CapacityPlan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize(
    ("index", "primary", "weights", "expected"),
    [
        (0, 4, (95, 5), 1),  # 5 % of 4.2 instances: within the step's minimum
        (1, 4, (95, 5), 2),  # 25 % of 4.2 -> 1.05 -> 2
        (2, 3, (75, 25), 2),  # 50 % of 4 -> 2
        (4, 2, (25, 75), 8),  # 100 % of 8 -> 8, the step's maximum
        (4, 4, (0, 100), 8),  # no primary share left: the step's maximum
    ],
)
def test_instances_for_step_is_the_steps_share_of_demand(
    index: int, primary: int, weights: tuple[float, float], expected: int
) -> None:
    plan = build_plan(
        [5, 25, 50, 75, 100], primary_min=2, primary_max=8, canary_min=1, canary_max=2,
        primary_concurrency=81, canary_concurrency=81,
    )  # fmt: skip
    got = r.instances_for_step(
        plan, index, primary_instances=primary, primary_weight=weights[0], canary_weight=weights[1]
    )
    assert got == expected


EV = r.EvidenceRules(min_canary_invocations=100, max_error_rate_increase_percent=0.5)


@pytest.mark.parametrize(
    ("evidence", "verdict", "words"),
    [
        (r.Evidence(0, 0, 5000, 0), "insufficient", "0 invocations"),
        (r.Evidence(99, 0, 5000, 0), "insufficient", "fewer than the 100 required"),
        (r.Evidence(1000, 5, 19000, 19), "ok", "5XX 0.50% vs primary 0.10%"),
        (r.Evidence(1000, 7, 19000, 19), "worse", "exceeds the primary's 0.10%"),
        (r.Evidence(1000, 4, 0, 0), "ok", "vs primary 0.00%"),  # primary at 0 % weight
    ],
)
def test_judge(evidence: r.Evidence, verdict: str, words: str) -> None:
    got, why = r.judge(evidence, EV)
    assert got == verdict and words in why
