"""``rollout.shadow``: parsed into the comparison's thresholds; bad values named by their path."""

from __future__ import annotations

import copy
from typing import Any

from .conftest import assert_names_yaml_path, parse

SHADOW = {
    "sample_percent": 10,
    "min_requests_per_adapter": 300,
    "min_minutes": 120,
    "max_minutes": 2880,
    "comparison": {
        "max_latency_p95_ratio": 1.2,
        "content_checks": [
            {"name": "no-apology", "pattern": r"(?i)\bsorry\b"},
            {"name": "cites-title", "pattern": "Vol\\.", "expect": "match", "adapters": ["x"]},
        ],
    },
}


def with_shadow(prod_raw: dict[str, Any], **changes: Any) -> dict[str, Any]:
    raw = copy.deepcopy(prod_raw)
    shadow = copy.deepcopy(SHADOW)
    shadow.update(changes)
    raw.setdefault("rollout", {})["shadow"] = shadow
    raw["variants"]["canary"]["initial_weight"] = 0  # a config with a shadow stage must
    return raw


def test_no_shadow_stage_by_default(prod_raw: dict[str, Any]) -> None:
    raw = copy.deepcopy(prod_raw)
    del raw["rollout"]["shadow"]
    assert parse(raw).rollout.shadow is None


def test_shadow_stage_becomes_the_comparisons_thresholds(prod_raw: dict[str, Any]) -> None:
    stage = parse(with_shadow(prod_raw)).rollout.shadow
    assert stage is not None
    limits = stage.thresholds
    assert limits.min_requests_per_adapter == 300
    assert limits.max_latency_p95_ratio == 1.2
    assert limits.max_ttft_p95_ratio == 1.25  # the default
    apology, cites = limits.content_checks
    assert (apology.must_match, apology.adapters) == (False, ())
    assert (cites.must_match, cites.adapters) == (True, ("x",))
    assert cites.passes("see Vol. 3") and not apology.passes("Sorry, no.")


def test_a_pattern_that_does_not_compile_is_named(prod_raw: dict[str, Any]) -> None:
    raw = with_shadow(prod_raw)
    raw["rollout"]["shadow"]["comparison"]["content_checks"][0]["pattern"] = "(unclosed"
    assert_names_yaml_path(
        raw, "rollout.shadow.comparison.content_checks.0.pattern", "not a regular expression"
    )


def test_a_window_that_cannot_close_is_named(prod_raw: dict[str, Any]) -> None:
    assert_names_yaml_path(
        with_shadow(prod_raw, max_minutes=60), "rollout.shadow.max_minutes", "could never reach"
    )


def test_sampling_out_of_range_is_named(prod_raw: dict[str, Any]) -> None:
    assert_names_yaml_path(
        with_shadow(prod_raw, sample_percent=0), "rollout.shadow.sample_percent", "greater than"
    )


def test_a_canary_that_would_serve_users_after_the_shadow_stage_is_named(
    prod_raw: dict[str, Any],
) -> None:
    raw = with_shadow(prod_raw)
    raw["variants"]["canary"]["initial_weight"] = 5
    assert_names_yaml_path(raw, "variants.canary.initial_weight", "would serve users")


def test_prod_runs_its_releases_through_a_shadow_stage(prod_raw: dict[str, Any]) -> None:
    """prod.yaml as shipped: the brief's shadow phase on, the canary at weight 0 until its
    steps."""
    cfg = parse(prod_raw)
    stage = cfg.rollout.shadow
    assert stage is not None and stage.sample_percent == 10
    assert [c.name for c in stage.comparison.content_checks] == ["no-system-prompt-leak"]
    assert cfg.variants.canary.initial_weight == 0


def test_a_canary_step_policy_with_a_shadow_stage_is_named(prod_raw: dict[str, Any]) -> None:
    """The controller registers the canary's bounds and target tracking only: a step policy
    would be silently dropped."""
    raw = copy.deepcopy(prod_raw)
    primary = raw["scaling"]["variants"]["primary"]
    raw["scaling"]["variants"]["canary"]["step_policies"] = [primary["step_policies"][0]]
    assert_names_yaml_path(
        raw, "scaling.variants.canary.step_policies", "controller owns the canary's autoscaling"
    )


def test_a_canary_schedule_with_a_shadow_stage_is_named(prod_raw: dict[str, Any]) -> None:
    raw = copy.deepcopy(prod_raw)
    raw["scaling"]["schedules"][0]["variant"] = "canary"
    assert_names_yaml_path(raw, "scaling.schedules.0.variant", "registers no scheduled action")
