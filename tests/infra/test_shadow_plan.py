"""The shadow stage in the plan and the quota preflight (sizing.shadow_plan): the shadow variant
sized for its sampled share of the primary's peak, the stage and its two endpoint updates priced,
the quota they hold counted."""

from __future__ import annotations

import copy
import math
from typing import Any

from sizing.plan import build_plan, render_plan
from sizing.rollout_plan import per_instance_concurrency
from sizing.shadow_plan import shadow_instances, shadow_section
from tools.canary import rollout_wait_minutes
from tools.preflight import quotas_needed
from typed_config.catalog import INSTANCE_CATALOG

from .conftest import parse
from .test_shadow_config import with_shadow


def test_the_shadow_variant_is_sized_for_its_share_of_the_primarys_peak(
    prod_raw: dict[str, Any],
) -> None:
    cfg = parse(with_shadow(prod_raw, sample_percent=10))
    peak = cfg.scaling.variants["primary"].max_capacity
    ratio = per_instance_concurrency(cfg, "primary") / per_instance_concurrency(cfg, "canary")
    assert shadow_instances(cfg) == math.ceil(0.10 * peak * ratio) == 6  # prod: 51 at peak
    assert shadow_instances(parse(with_shadow(prod_raw, sample_percent=1))) == 1


def test_the_plan_prices_the_stage_and_its_two_updates(prod_raw: dict[str, Any]) -> None:
    cfg = parse(with_shadow(prod_raw))
    s = shadow_section(cfg)
    assert s is not None
    hourly = 6 * INSTANCE_CATALOG[cfg.variants.canary.instance_type].price_per_hour
    assert s["hourly_usd"] == round(hourly, 2)
    assert s["cost_at_max_usd"] == round(hourly * 2880 / 60, 2)
    assert s["moves"] == 2 and s["moves_extra_cost_usd"] > 0
    text = render_plan(build_plan(cfg, {}))
    assert "  shadow  6 x ml.g6e.xlarge for 10 % of the primary's peak (54 x ml.g6e.xlarge)" in text
    # sized at the stage's start to the primary's load (shadow_fleet.py); the plan prices its
    # upper bound
    assert "sized at the start to the primary's load per instance, 1..6), $2.34..$14.02/h" in text
    assert s["hourly_usd_at_least"] == round(hourly / 6, 2)
    without = copy.deepcopy(prod_raw)
    del without["rollout"]["shadow"]
    assert build_plan(parse(without), {})["shadow"] is None


def test_the_quota_preflight_counts_a_stage_move_at_the_primarys_peak(
    prod_raw: dict[str, Any],
) -> None:
    cfg = parse(with_shadow(prod_raw))
    s = shadow_section(cfg)
    assert s is not None
    name = f"{cfg.variants.primary.instance_type} for endpoint usage"
    without = quotas_needed(parse(prod_raw))[name]
    stage = s["instance_quota_needed"][cfg.variants.primary.instance_type]
    assert stage == 2 * 54 + 6 + cfg.variants.canary.initial_instance_count  # prod's peak: 54
    assert quotas_needed(cfg)[name] == max(without, stage)


def test_canary_wait_allows_for_the_stage_and_its_two_moves(prod_raw: dict[str, Any]) -> None:
    cfg = parse(with_shadow(prod_raw))
    dep = cfg.deployment
    move = (dep.max_execution_timeout_seconds + dep.termination_wait_seconds) / 60
    without = copy.deepcopy(prod_raw)
    del without["rollout"]["shadow"]
    added = rollout_wait_minutes(cfg) - rollout_wait_minutes(parse(without))
    assert added == 2880 + 2 * move == 3020  # max_minutes + 2 x (3600 s + 600 s)
