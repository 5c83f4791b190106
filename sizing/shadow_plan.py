"""What a release's shadow stage (``rollout.shadow``) needs and costs: the shadow variant's
instances, the stage's price, the two endpoint updates around it and the instance quota they hold.

The shadow variant's config count is sized for its sampled share of the peak: ``sample_percent``
% of the primary's ``max_capacity`` (the most any scenario of the config uses: the fleet solver
sized it with the speed model at its pessimistic edge, docs/fleet.md), converted to the shadow's
instance type by what one instance of each runs at once
(``sizing.rollout_plan.per_instance_concurrency``, the same conversion the canary's step plan
uses). A shadow stage can run through the day's peak,
so it is sized for it; a shadow variant short of capacity would answer slowly or with 429s and
fail the comparison on latency or errors: the safe direction (a good build held back, never a bad
one let through), but a wasted stage.

How the shadow variant is sized: the canary controller sizes it when the stage starts, at the
primary's load per instance then (lambdas/canary_controller/shadow_fleet.py: round(sample_percent
x the primary's instances in service x the conversion below), from 1 to this count), in a copy of
the stack's shadow config that the stage's move goes to; so the count follows the primary's load
at the start and this count, the peak size, is its upper bound. It is not changed during the
stage: no documented call changes a shadow variant's count (docs/limits.md). No Application Auto
Scaling: the stack registers no scalable target for it (only the primary and the canary are in
``scaling.variants``), and whether Application Auto Scaling takes a shadow variant as a target is
not said on the pages read (SageMaker developer guide, "Testing models with shadow variants",
"Create a shadow test"). So the plan prices the stage at this count, the most it can cost, and
the quota preflight counts it.

Around the stage, two UpdateEndpoint calls (to the shadow config and back) each run a blue/green
update: SageMaker provisions a new fleet for every variant of the new config, moves traffic, then
terminates the old one (FACTS.md: a blue/green update provisions a whole new fleet beside the old
one for its duration); the primary's instances are replaced twice, each time paying for a second
primary fleet for the update's duration (``sizing.update_semantics.update_phases``) and holding
the quota for both.
"""

from __future__ import annotations

import math
from typing import Any

from sizing.ready_bound import ready_seconds
from sizing.rollout_plan import per_instance_concurrency
from sizing.update_semantics import update_phases
from typed_config import DeploymentConfig
from typed_config.catalog import INSTANCE_CATALOG

#: The endpoint updates a shadow stage makes: into the shadow config and back to the canary's.
STAGE_MOVES = 2


def shadow_instances(cfg: DeploymentConfig) -> int:
    """The shadow variant's instance count (module docstring); at least 1."""
    stage = cfg.rollout.shadow
    assert stage is not None
    primary_peak = cfg.scaling.variants["primary"].max_capacity
    ratio = per_instance_concurrency(cfg, "primary") / per_instance_concurrency(cfg, "canary")
    return max(1, math.ceil(round(stage.sample_percent / 100 * primary_peak * ratio, 9)))


def shadow_section(cfg: DeploymentConfig) -> dict[str, Any] | None:
    """The plan's shadow stage: None without ``rollout.shadow``."""
    stage = cfg.rollout.shadow
    if stage is None:
        return None
    n = shadow_instances(cfg)
    itype = cfg.variants.canary.instance_type
    hourly = n * INSTANCE_CATALOG[itype].price_per_hour
    primary_peak = cfg.scaling.variants["primary"].max_capacity
    primary_type = cfg.variants.primary.instance_type
    move = update_phases(cfg, ready_seconds=ready_seconds(cfg), fleet=primary_peak)
    second_fleet = (
        primary_peak * move.complete / 3600 * INSTANCE_CATALOG[primary_type].price_per_hour
    )
    # the most a move holds at once, at the primary's peak: blue + green primary, the shadow
    # fleet, and on the way back the canary at its initial count
    quota: dict[str, int] = {}
    for t, count in (
        (primary_type, 2 * primary_peak),
        (itype, n),
        (cfg.variants.canary.instance_type, cfg.variants.canary.initial_instance_count),
    ):
        quota[t] = quota.get(t, 0) + count
    return {
        "sample_percent": stage.sample_percent,
        "instances": n,
        "instance_type": itype,
        "sized_for": f"{stage.sample_percent} % of the primary's peak ({primary_peak} x "
        f"{primary_type})",
        "hourly_usd": round(hourly, 2),
        #: the fewest instances the controller runs it at (shadow_fleet: never below 1)
        "hourly_usd_at_least": round(INSTANCE_CATALOG[itype].price_per_hour, 2),
        "min_minutes": stage.min_minutes,
        "max_minutes": stage.max_minutes,
        "cost_at_min_usd": round(hourly * stage.min_minutes / 60, 2),
        "cost_at_max_usd": round(hourly * stage.max_minutes / 60, 2),
        "moves": STAGE_MOVES,
        "move_minutes": round(move.complete / 60, 1),
        "moves_extra_cost_usd": round(STAGE_MOVES * second_fleet, 2),
        "instance_quota_needed": quota,
        "capture_percent": stage.capture_percent,
        "capture_retention_days": stage.capture_retention_days,
    }


def render_shadow(s: dict[str, Any] | None) -> list[str]:
    """The plan's lines for the shadow stage (none without one)."""
    if s is None:
        return []
    quota = ", ".join(f"{n} x {t}" for t, n in s["instance_quota_needed"].items())
    return [
        f"  shadow  {s['instances']} x {s['instance_type']} for {s['sized_for']} "
        f"(sample {s['sample_percent']} %; sized at the start to the primary's load per instance, "
        f"1..{s['instances']}), ${s['hourly_usd_at_least']:,.2f}..${s['hourly_usd']:,.2f}/h, "
        f"at most ${s['cost_at_min_usd']:,.2f} at min_minutes ({s['min_minutes']}), "
        f"${s['cost_at_max_usd']:,.2f} at max_minutes ({s['max_minutes']})",
        f"          {s['moves']} blue/green updates (in, and back to the canary config), "
        f"~{s['move_minutes']} min each, primary replaced each time: "
        f"+${s['moves_extra_cost_usd']:,.2f} at its peak; quota held: {quota}",
        f"          data capture {s['capture_percent']} % of both variants' requests, kept "
        f"{s['capture_retention_days']} days (S3, the endpoint's KMS key)",
    ]
