"""The plan's "deploy" section: what one `make deploy` does to the fleet for this config.

Read from sizing.update_semantics (the rules the template and the deploy tool follow) and the
per-start bound (sizing.ready_bound: the measured new-tag start plus a margin, which the deploy
tool, the canary controller and the simulator's deploys use too), so the plan, the stack and
`make simulate` state one set of figures.
"""

from __future__ import annotations

from typing import Any

from sizing.ready_bound import ready_bound
from sizing.rollout_plan import rollout_capacity_plan
from sizing.update_semantics import (
    VARIANT_NAMES,
    deploy_footprint,
    reset_properties,
    retained_properties,
    update_phases,
)
from typed_config import DeploymentConfig
from typed_config.catalog import INSTANCE_CATALOG


def _guardrail_floor(cfg: DeploymentConfig) -> int:
    """The smallest fleet on which the blue/green step is valid (1 for ALL_AT_ONCE)."""
    shift = cfg.deployment.traffic_shift
    if shift.type == "all_at_once":
        return 1
    low = 0.1 if shift.type == "linear" else 0.0
    for n in range(1, 101):
        step = shift.step_size_instances(n)
        if 1 <= step <= n / 2 and step >= low * n:
            return n
    return 101


def deploy_section(cfg: DeploymentConfig) -> dict[str, Any]:
    bound = ready_bound(cfg)
    ready = bound.seconds
    slowest = bound.slowest
    initial = {v: cfg.variants[v].initial_instance_count for v in VARIANT_NAMES}
    at_max = {v: cfg.scaling.variants[v].max_capacity for v in VARIANT_NAMES}
    typical = deploy_footprint(cfg, live=initial, ready_seconds=ready)
    worst = deploy_footprint(cfg, live=at_max, ready_seconds=ready)
    # The promotion deploy (RESET=DesiredWeight) lands while the canary still holds the bounds of
    # the controller's 100 % step and the preflight has raised the primary to its share back.
    top_step = rollout_capacity_plan(cfg).steps[-1].max_capacity
    at_promotion = {**at_max, "canary": max(at_max["canary"], top_step)}
    promotion = deploy_footprint(cfg, live=at_promotion, ready_seconds=ready)
    quota = {
        t: max(worst.peak_instances_by_type.get(t, 0), promotion.peak_instances_by_type.get(t, 0))
        for t in {**worst.peak_instances_by_type, **promotion.peak_instances_by_type}
    }
    phases = update_phases(cfg, ready_seconds=ready, fleet=max(at_max.values()))
    floor = _guardrail_floor(cfg)
    kind, value = cfg.deployment.traffic_shift.capacity_size
    per_instance = {
        t: round(INSTANCE_CATALOG[t].monthly_price, 2)
        for v in VARIANT_NAMES
        for t in cfg.variants[v].pool_types
    }
    return {
        "keeps": list(retained_properties(cfg)),
        "resets": list(reset_properties(cfg)),
        "minutes": round(phases.complete / 60, 1),
        "autoscaling_blocked_minutes": round(phases.complete / 60, 1),
        "ready_bound_seconds": ready,
        "ready_bound": {
            "slowest_start_seconds": slowest.seconds,
            "slowest": f"{slowest.variant} {slowest.instance_type}"
            + (f" (pool {slowest.priority})" if slowest.priority > 1 else ""),
            "with_cache": slowest.with_cache,
            "margin_seconds": bound.margin_seconds,
            "floor_seconds": bound.floor_seconds,
            "floored": bound.floored,
        },
        "at_initial_counts": {
            "blue": typical.blue,
            "green": typical.green,
            "peak_instances_by_type": typical.peak_instances_by_type,
            "extra_cost_usd": typical.extra_cost_usd,
        },
        "at_max_capacity": {
            "blue": worst.blue,
            "green": worst.green,
            "peak_instances_by_type": worst.peak_instances_by_type,
            "extra_cost_usd": worst.extra_cost_usd,
        },
        "at_promotion": {
            "blue": promotion.blue,
            "green": promotion.green,
            "peak_instances_by_type": promotion.peak_instances_by_type,
            "extra_cost_usd": promotion.extra_cost_usd,
        },
        "instance_quota_needed": quota,
        "guardrail": {
            "type": cfg.deployment.traffic_shift.type,
            "step": f"{value} {'instance(s)' if kind == 'INSTANCE_COUNT' else '%'}",
            "min_instances_per_variant": floor,
            "monthly_per_instance_usd": per_instance,
        },
    }


def render_deploy(d: dict[str, Any]) -> list[str]:
    def fleet(x: dict[str, Any]) -> str:
        peak = ", ".join(f"{n} x {t}" for t, n in x["peak_instances_by_type"].items())
        return (
            f"blue {sum(x['blue'].values())} + green {sum(x['green'].values())} = {peak}, "
            f"+${x['extra_cost_usd']:,.2f} for the second fleet"
        )

    g = d["guardrail"]
    price = ", ".join(f"{t} ${p:,.0f}/month" for t, p in g["monthly_per_instance_usd"].items())
    quota = ", ".join(f"{n} x {t}" for t, n in d["instance_quota_needed"].items())
    b = d["ready_bound"]
    why = (f"the assumed floor {b['floor_seconds']:g} s, above " if b["floored"] else "") + (
        f"{b['slowest']}'s new-tag start {b['slowest_start_seconds']:g} s "
        f"({'from the compile cache' if b['with_cache'] else 'without a compile cache'}, image "
        f"pull, the measured start's pessimistic edge) + {b['margin_seconds']:g} s margin"
    )
    return [
        f"  deploy  blue/green, ~{d['minutes']} min (a new tag's instances serve within "
        f"{d['ready_bound_seconds']:g} s of launch, the per-start bound of deploys and the canary "
        f"controller's waits: {why}; sizing.ready_bound); autoscaling blocked throughout (make "
        "deploy raises counts first)",
        f"          keeps {', '.join(d['keeps']) or 'nothing'}; resets "
        f"{', '.join(d['resets']) or 'nothing'} (deployment.reset_on_update, RESET= per deploy)",
        f"          at initial counts: {fleet(d['at_initial_counts'])}",
        f"          at max capacity:   {fleet(d['at_max_capacity'])}",
        f"          promotion deploy (canary on its 100% step bounds): {fleet(d['at_promotion'])}",
        f"          instance quota for endpoint usage needed: {quota}",
        f"          guardrail {g['type']} step {g['step']}: every variant needs >= "
        f"{g['min_instances_per_variant']} instance(s) at each deploy; each one held for it "
        f"costs {price}",
    ]
