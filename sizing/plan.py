"""The deployment plan: what `make synth` will deploy, in figures a platform engineer can check."""

from __future__ import annotations

import json
from typing import Any

from container.model_prep.manifest import summary
from sizing.brief_fleet import BRIEF_FLEET, brief_fleet_line
from sizing.capacity import pool_capacities
from sizing.compile_cache_plan import cache_section, render_cache
from sizing.component_plan import components_section, render_component_deploy, render_components
from sizing.day_timeline import day_section, render_day
from sizing.engine_start import render_start, start_section
from sizing.fair_comparison import comparison_warnings
from sizing.fleet_cost import (
    MonthByEdge,
    ceiling_monthly,
    monthly,
    plan_cost,
    price_per_hour,
    release_costs,
)
from sizing.plan_deploy import deploy_section, render_deploy
from sizing.ready_bound import ready_seconds
from sizing.scale_out_time import render_scale_out, scale_out_section
from sizing.scaling_target import (
    concurrency_target,
    pool_bases,
    spill_threshold,
    unmet_slo_warnings,
)
from sizing.serving_speed import PLANNING_EDGE, hit_rate_source
from sizing.shadow_plan import render_shadow, shadow_section
from sizing.slo_reach import held, left_out, unreachable, what_would_reach
from sizing.speed_plan import render_speed, speed_section
from sizing.target_costs import render_targets
from typed_config import (
    VARIANT_NAMES,
    DeploymentConfig,
    ScalingConfig,
    VariantName,
    artifact_dir,
    artifact_version,
    bounds_changes,
    prefix_floor_bytes,
)
from typed_config.catalog import HOURS_PER_MONTH, INSTANCE_CATALOG, PRICE_REGION


def unreachable_ceiling(scaling: ScalingConfig, variant: VariantName) -> str | None:
    """A warning when ``variant``'s max_capacity is never reached once a recurring schedule has
    fired: every scheduled action (schedules and the release calendar alike) writes a lower
    MaxCapacity, so the plan's max cost and quota count instances autoscaling can never add."""
    ceiling = scaling.variants[variant].max_capacity
    changes = [c for c in bounds_changes(scaling) if c.variant == variant]
    if not any(c.kind == "recurring" for c in changes):
        return None
    highest = max(c.max_capacity for c in changes)
    if highest >= ceiling:
        return None
    written = ", ".join(f"{c.name} {c.max_capacity}" for c in changes if c.kind != "restore")
    return (
        f"scaling.variants.{variant}.max_capacity {ceiling} is never reached once a schedule has "
        f"fired: the scheduled actions allow at most {highest} ({written}); the max cost and "
        f"the instance quota count {ceiling}. Lower max_capacity to {highest}, or raise a "
        "schedule's max_capacity"
    )


def release_facts(cfg: DeploymentConfig) -> dict[str, Any]:
    """The model release the image bakes: its version and, when a copy was fetched here
    (build/model-artifacts/<version>, make fetch-model), its quality gate and size read from
    its manifest. Synth stays offline: nothing is downloaded for the plan."""
    version = artifact_version(cfg)
    manifest_file = artifact_dir(version) / "manifest.json"
    if manifest_file.is_file():
        line = summary(json.loads(manifest_file.read_text()))
    else:
        line = f"{version}: not fetched here (make fetch-model: quality gate and size)"
    return {"version": version, "pinned": cfg.model.artifact is not None, "line": line}


def routing_section(cfg: DeploymentConfig, variant: VariantName) -> dict[str, Any]:
    """The variant's RoutingConfig as the template carries it, with the figures the loader
    checked it against (typed_config.routing_errors): the shortest prefix that reaches past the
    system prompt into the conversation, and what one instance runs at once."""
    routing = cfg.variants[variant].routing
    if routing is None:
        return {"strategy": None}
    out: dict[str, Any] = routing.model_dump()
    if routing.strategy == "PREFIX_AWARE":
        out["concurrency_threshold"] = spill_threshold(cfg, variant)
        out["threshold_derived"] = routing.concurrency_threshold is None
        budget = cfg.engine.context_budget
        out["prefix_floor_bytes"] = prefix_floor_bytes(
            budget.system_tokens, [a.name for a in cfg.adapters]
        )
        out["system_tokens"] = budget.system_tokens
        # every pool's instances can be prefix-selected: the smallest pool's figure
        out["instance_runs"] = min(pc.runs for pc in pool_capacities(cfg, variant))
    return out


def render_routing(r: dict[str, Any]) -> str:
    """One plan line: how SageMaker picks this variant's instance for a request."""
    if r["strategy"] is None:
        return "          routing: SageMaker's default (random; no RoutingConfig)"
    if r["strategy"] != "PREFIX_AWARE":
        return f"          routing: {r['strategy']}"
    return (
        f"          routing: PREFIX_AWARE on the body's first {r['prefix_length_bytes']:,} bytes "
        f"(>= {r['prefix_floor_bytes']:,}: a {r['system_tokens']}-token system prompt + the "
        f"conversation's start); spills from {r['concurrency_threshold']} in flight"
        + (" (the scaling target, rounded up)" if r.get("threshold_derived") else "")
        + f" (one instance runs {r['instance_runs']})"
    )


def pools_section(cfg: DeploymentConfig, variant: VariantName) -> list[dict[str, Any]]:
    """Each instance pool of ``variant`` (none without ``instance_pools``): its type, price,
    engine settings, the capacity plan on its GPU (memory terms, KV tokens, concurrency) and its
    concurrency bound (sizing.scaling_target.pool_bases; the variant's target is the lowest)."""
    if cfg.variants[variant].instance_pools is None:
        return []
    bases = {b.instance_type: b for b in pool_bases(cfg, variant)}
    out = []
    for pc in pool_capacities(cfg, variant):
        inst = INSTANCE_CATALOG[pc.pool.instance_type]
        basis = bases[pc.pool.instance_type]
        out.append(
            {
                "priority": pc.pool.priority,
                "instance_type": pc.pool.instance_type,
                "gpu": f"{inst.gpu_count} x {inst.gpu} {inst.gpu_memory_gib} GB",
                "price_per_hour": inst.price_per_hour,
                "engine_overrides": pc.pool.engine.overrides(),
                "own_model": bool(pc.pool.engine.overrides()),
                "engine": pc.cfg.engine.model_dump(exclude={"context_budget"}),
                "capacity": pc.capacity.as_dict(),
                "bound": {"binding": basis.binding, "in_flight": basis.concurrency},
            }
        )
    return out


def render_pools(v: dict[str, Any]) -> list[str]:
    """The variant's instance pools, one block each: what an instance that lands there runs."""
    pools = v.get("pools") or []
    if not pools:
        return []
    timeout = v.get("provision_timeout_seconds")
    lines = [
        f"          instance pools (SageMaker falls back on insufficient capacity, by priority; "
        f"provisioning timeout {f'{timeout} s' if timeout else 'SageMaker default'}):"
    ]
    for pool in pools:
        c, eng = pool["capacity"], pool["engine"]
        own = (
            "own Model: " + ", ".join(f"{k}={val}" for k, val in pool["engine_overrides"].items())
            if pool["own_model"]
            else "the variant's Model"
        )
        lines += [
            f"          pool {pool['priority']}: {pool['instance_type']} ({pool['gpu']}) "
            f"${pool['price_per_hour']:g}/h; {own}",
            *("  " + line for line in render_memory_terms(c, eng)),
            f"            concurrency: {c['concurrency_at_full_context']} seqs at full context, "
            f"{c['concurrency_at_typical_length']} at typical; max_num_seqs={c['max_num_seqs']}; "
            f"bound {pool['bound']['in_flight']} in flight ({pool['bound']['binding']})",
        ]
    low = min(pools, key=lambda p: p["bound"]["in_flight"])
    lines.append(
        f"            scaling target from the lowest bound, pool {low['priority']} "
        f"({low['instance_type']}): target tracking averages ConcurrentRequestsPerModel over "
        "every instance of the variant, whichever pool it landed in"
    )
    return lines


def build_plan(cfg: DeploymentConfig, templates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The plan of ``cfg`` as ``render_plan`` prints it and plan.json holds it; ``templates``
    (by stack name) give the alarms."""
    release = release_facts(cfg)
    variants = [variant_section(cfg, name, release["line"]) for name in VARIANT_NAMES]
    alarms = alarm_descriptions(templates)
    return {
        "project": cfg.project,
        "env": cfg.env,
        "region": cfg.region,
        "endpoint_name": cfg.endpoint_name,
        "model": model_section(cfg, release),
        "engine": cfg.engine.model_dump(exclude={"context_budget"}),
        "variants": variants,
        "start": start_section(
            sorted({INSTANCE_CATALOG[cfg.variants[n].instance_type].gpu for n in VARIANT_NAMES}),
            cfg.deployment.startup_health_check_timeout_seconds,
        ),
        "compile_cache": cache_section(cfg),
        "cost": cost_section(cfg),
        "components": components_section(cfg),
        "rollout": rollout_section(cfg),
        "canary_comparison": comparison_warnings(cfg),
        "alarms": alarms,
        "deploy": deploy_section(cfg),
        "fleet": fleet_section(cfg),
        "shadow": shadow_section(cfg),
    }


def variant_section(cfg: DeploymentConfig, name: VariantName, release_line: str) -> dict[str, Any]:
    """One variant: its instances, image and model release, price, scaling, capacity (its first
    pool's), routing, pools, speed and scale-out time. ``release_line``: the release the
    image bakes (:func:`release_facts`), shown unless the variant pins an image tag."""
    v = cfg.variants[name]
    sc = cfg.scaling.variants[name]
    inst = INSTANCE_CATALOG[v.instance_type]
    cap = pool_capacities(cfg, name)[0].capacity  # the first pool's
    return {
        "name": name,
        "instance_type": v.instance_type,
        "gpu": f"{inst.gpu_count} x {inst.gpu} {inst.gpu_memory_gib} GB",
        "initial_instance_count": v.initial_instance_count,
        "initial_weight": v.initial_weight,
        "min_capacity": sc.min_capacity,
        "max_capacity": sc.max_capacity,
        "image_tag": v.image_tag or cfg.image.tag or "built by CDK from container/",
        "model_release": (
            f"the release baked in image {v.image_tag}" if v.image_tag else release_line
        ),
        "price_per_hour": inst.price_per_hour,
        "scaling": scaling_section(cfg, name),
        "capacity": cap.as_dict(),
        "routing": routing_section(cfg, name),
        "pools": pools_section(cfg, name),
        "provision_timeout_seconds": v.provision_timeout_seconds,
        "speed": speed_section(cfg, name),
        "scale_out": scale_out_section(cfg, name, deploy_bound_seconds=ready_seconds(cfg)),
        "day": day_section(cfg, name),
    }


def scaling_section(cfg: DeploymentConfig, name: VariantName) -> dict[str, Any]:
    """The variant's autoscaling: its target tracking metric and target, the names of its step
    policies, schedules and releases, and a warning when max_capacity is never reached."""
    sc = cfg.scaling.variants[name]
    return {
        "target_tracking": None
        if sc.target_tracking is None
        else (
            f"ConcurrentRequestsPerModel {concurrency_target(cfg, name)}"
            if sc.target_tracking.metric == "concurrency"
            else f"InvocationsPerInstance {sc.target_tracking.invocations_per_instance}"
        ),
        "step_policies": [p.name for p in sc.step_policies],
        "schedules": [x.name for x in cfg.scaling.schedules if x.variant == name],
        "releases": [x.name for x in cfg.scaling.release_calendar if x.variant == name],
        "unreachable_ceiling": unreachable_ceiling(cfg.scaling, name),
        "unmet_slos": unmet_slo_warnings(cfg, name),
    }


def alarm_descriptions(templates: dict[str, dict[str, Any]]) -> list[str]:
    """Every CloudWatch alarm of the templates, by its description (its logical id without one),
    sorted."""
    return sorted(
        {
            res["Properties"].get("AlarmDescription", logical)
            for tpl in templates.values()
            for logical, res in tpl.get("Resources", {}).items()
            if res["Type"] == "AWS::CloudWatch::Alarm"
        }
    )


def job_image_warning(cfg: DeploymentConfig) -> str | None:
    """A warning when the model-preparation job's role can pull no image: it is granted the
    repository of ``model_prep.job_image``, else ``image.repository_name``
    (stacks/model_release_stack.py), and neither is set."""
    if cfg.model_prep.job_image is not None or cfg.image.repository_name is not None:
        return None
    return (
        "the model-preparation job's role may pull no image: neither model_prep.job_image nor "
        "image.repository_name is set, so make prepare-model's job cannot start. Set "
        "image.repository_name (the job's image is pushed there as model-prep-<digest>) or "
        "model_prep.job_image (an image URI in ECR)"
    )


def model_section(cfg: DeploymentConfig, release: dict[str, Any]) -> dict[str, Any]:
    """The base model, its quantization, the adapters, the release the image bakes and a
    warning when the preparation job has no image to pull."""
    return {
        "job_image_warning": job_image_warning(cfg),
        "source": cfg.model.source,
        "quantization": cfg.model.quantization,
        "adapters": [{"name": a.name, "version": a.version, "rank": a.rank} for a in cfg.adapters],
        "default_adapter": cfg.default_adapter,
        "release": release,
    }


def cost_section(cfg: DeploymentConfig) -> dict[str, Any]:
    """The monthly cost from :mod:`sizing.fleet_cost`, the model the simulator bills with: the
    floors the recurring schedules hold (standby included, both variants) over the week from
    its reference start (each release priced once beside it), every instance on its variant's
    first pool; with instance pools, on its dearest too (what a capacity shortage can cost).
    Autoscaling above the floors is traffic's; the simulator adds it (make simulate)."""
    floors = plan_cost(cfg)
    dearest = {
        n: max(INSTANCE_CATALOG[t].price_per_hour for t in cfg.variants[n].pool_types)
        for n in VARIANT_NAMES
    }
    dear_usd = sum(floors.usd[n] / price_per_hour(cfg, n) * dearest[n] for n in VARIANT_NAMES)
    return {
        "price_region": PRICE_REGION,
        "hours_per_month": HOURS_PER_MONTH,
        "week_from": f"{floors.start:%Y-%m-%d %H:%M} {floors.start.tzname()}",
        "monthly_at_floors": round(floors.monthly_usd, 2),
        "monthly_at_floors_by_variant": {
            n: round(monthly(floors.usd[n], floors.minutes), 2) for n in VARIANT_NAMES
        },
        "monthly_at_max_capacity": round(ceiling_monthly(cfg), 2),
        "releases_once": [
            {"name": r.name, "at": f"{r.at:%Y-%m-%d %H:%M} {r.at.tzname()}", "usd": round(r.usd, 2)}
            for r in release_costs(cfg)
        ],
        # the figures above price every instance on its first pool; these on its dearest
        "dearest_pool": {
            "monthly_at_floors": round(monthly(dear_usd, floors.minutes), 2),
            "monthly_at_max_capacity": round(
                sum(
                    cfg.scaling.variants[n].max_capacity * dearest[n] * HOURS_PER_MONTH
                    for n in VARIANT_NAMES
                ),
                2,
            ),
        }
        if any(cfg.variants[n].instance_pools for n in VARIANT_NAMES)
        else None,
        "brief_fleet": BRIEF_FLEET.as_dict(),
        "price_sources": sorted(
            {
                INSTANCE_CATALOG[t].price_source
                for n in VARIANT_NAMES
                for t in cfg.variants[n].pool_types
            }
        ),
    }


def monthly_line(month: float | MonthByEdge, budget_usd: float | None) -> tuple[str, str | None]:
    """The one monthly figure (what the fleet bills on the normal day, simulated with its
    scaling) beside the budget: the line, and a warning when it is over the budget. Given at
    each edge of the speed model's error (:class:`MonthByEdge`, simulator.user_figures.
    monthly_by_edge), the figure compared with the budget is the pessimistic edge's, the one
    decided on, with the central estimate's and the optimistic edge's beside it."""
    edges = month if isinstance(month, MonthByEdge) else None
    monthly_usd = month.pessimistic if isinstance(month, MonthByEdge) else month
    figure = f"${monthly_usd:,.0f}/month"
    if edges is not None:
        figure += (
            f" at the pessimistic edge of the speed model (central estimate "
            f"${edges.central:,.0f}, optimistic edge ${edges.optimistic:,.0f})"
        )
    if not budget_usd:
        return f"{figure} (no budget: fleet.budget_usd_per_month)", None
    line = (
        f"{figure}, {monthly_usd / budget_usd:.2f}x the budget of "
        f"${budget_usd:,.0f}/month (fleet.budget_usd_per_month)"
    )
    if monthly_usd <= budget_usd:
        return line, None
    everywhere = (
        "; over it at every edge of the speed model's error"
        if edges is not None and edges.optimistic > budget_usd
        else ""
    )
    return line, (
        f"the fleet costs ${monthly_usd - budget_usd:,.0f}/month more than the budget "
        f"(${monthly_usd:,.0f} vs ${budget_usd:,.0f}{everywhere}): raise the budget, or loosen "
        "what sizes the fleet (the plan's 'cost of each bound' and make fleet price each SLO "
        "of the scaling target)"
    )


def render_bound_costs(costs: dict[str, Any]) -> list[str]:
    """What each bound of the scaling target costs (simulator.slo_cost.BoundCosts.as_dict): the
    month if an SLO of ``target_tracking.slos`` is dropped or tightened, or one it leaves out is
    added, each against the month as configured."""
    engine = costs["binding"] in ("max_num_seqs", "KV cache")
    lines = [
        f"cost of each bound (the normal day at the {costs['edge']} edge, the floors as "
        f"configured; binding bound {costs['binding']}, target {costs['target']:g} in flight"
        + ("; an engine limit, not an SLO: nothing to drop" if engine else "")
        + "):"
    ]
    tighten = round(100 * (1 - costs["tighten_factor"]))
    # one line per SLO: its rows (dropping, tightening; or adding) joined
    by_slo: dict[str, list[str]] = {}
    for r in costs["rows"]:
        what = {
            "drop": f"dropping {r['slo']}",
            "tighten": f"tightening {r['slo']} by {tighten} % to {r['limit_ms']:,.0f} ms",
            "add": f"adding {r['slo']} at {r['limit_ms']:,.0f} ms",
        }[r["change"]]
        if r["monthly_usd"] is None:
            by_slo.setdefault(r["slo"], []).append(f"{what}: {r['note']}")
            continue
        if r["target"] == costs["target"]:
            moved = f"target {costs['target']:g} unchanged"
        else:
            moved = f"target {costs['target']:g} -> {r['target']:g}: {r['binding']} binds"
        delta = r["delta_usd"]
        money = (
            f"saves ${-delta:,.0f}/month"
            if delta < -0.5
            else (f"costs ${delta:,.0f}/month more" if delta > 0.5 else "costs nothing")
        )
        by_slo.setdefault(r["slo"], []).append(
            f"{what} ({moved}): {money} (${r['monthly_usd']:,.0f}/month)"
        )
    lines += [f"  {'; '.join(parts)}" for parts in by_slo.values()]
    return lines


def render_cost(cost: dict[str, Any]) -> list[str]:
    """The cost lines: the one monthly figure (the normal day simulated with its scaling, when
    ``make synth`` adds it: ``monthly``, with ``monthly_by_edge``) beside the budget, what each
    bound of the scaling target costs (``bound_costs``), then the floors' figure, what it
    assumes, the ceiling, and the brief's own fleet at list price."""
    by = ", ".join(f"{n} ${x:,.0f}" for n, x in cost["monthly_at_floors_by_variant"].items())
    lines = []
    if cost.get("monthly") is not None:
        edges = cost.get("monthly_by_edge")
        line, warning = monthly_line(
            MonthByEdge(**edges) if edges else cost["monthly"], cost.get("budget_usd_per_month")
        )
        lines.append(
            f"  cost    {line}: what the fleet bills, the normal day simulated with its scaling "
            f"(schedules, standby, the canary and scale-out above the floors), x "
            f"{cost['hours_per_month']} h/month; on-demand {cost['price_region']}"
        )
        if warning:
            lines.append(f"          WARNING: {warning}")
        if cost.get("bound_costs"):
            lines += [f"          {x}" for x in render_bound_costs(cost["bound_costs"])]
        lines.append(
            f"          of which ${cost['monthly_at_floors']:,.0f}/month at the floors ({by}): "
            f"MinCapacity as the recurring schedules write it, standby included, over the week "
            f"from {cost['week_from']}; at most ${cost['monthly_at_max_capacity']:,.0f}/month "
            "(every variant at max_capacity)"
        )
    else:
        lines += [
            f"  cost    ${cost['monthly_at_floors']:,.0f}/month at the floors ({by}): MinCapacity "
            f"as the recurring schedules write it, standby included, over the week from "
            f"{cost['week_from']}, x {cost['hours_per_month']} h/month; on-demand "
            f"{cost['price_region']}",
            "          the least the endpoint bills: autoscaling above the floors follows "
            "traffic (make synth and make simulate bill the normal day with the same model); "
            f"at most ${cost['monthly_at_max_capacity']:,.0f}/month (every variant at "
            "max_capacity)",
        ]
    for r in cost.get("releases_once", []):
        lines.append(
            f"          release {r['name']} ({r['at']}): +${r['usd']:,.0f} once, its pre-scale "
            "above those floors (scaling.release_calendar; not in the monthly figure)"
        )
    dear = cost.get("dearest_pool")
    if dear:
        lines.append(
            f"          those price every instance on its first pool; on its dearest pool "
            f"${dear['monthly_at_floors']:,.0f}/month at the floors (at most "
            f"${dear['monthly_at_max_capacity']:,.0f})"
        )
    if cost.get("brief_fleet"):
        lines.append(f"          {brief_fleet_line(cost['brief_fleet'])}")
    return lines


def rollout_section(cfg: DeploymentConfig) -> dict[str, Any]:
    """How a release rolls out: SageMaker's blue/green traffic shift with auto-rollback, then
    the canary controller's steps, bake time and smoke gate."""
    shift = cfg.deployment.traffic_shift
    return {
        "blue_green": {
            "type": shift.type,
            "step": (
                f"{shift.capacity_size[1]}" + (" instance(s)" if shift.step_instances else "%")
                if shift.type != "all_at_once"
                else None
            ),
            "wait_interval_seconds": shift.wait_interval_seconds,
            "termination_wait_seconds": cfg.deployment.termination_wait_seconds,
            "auto_rollback_alarms": "5XX errors and ModelLatency p99 per variant",
        },
        "canary_controller_steps_percent": cfg.rollout.steps_percent,
        "bake_minutes": cfg.rollout.bake_minutes,
        "smoke_gate": cfg.smoke_gate.enabled,
    }


def fleet_section(cfg: DeploymentConfig) -> dict[str, Any]:
    """What the capacity gate holds this config to (``fleet:``), and the planning inputs it
    uses; the gate itself replays the day (``make capacity-gate``, simulator/slo_gate.py)."""
    f = cfg.fleet
    gone = unreachable(cfg)
    return {
        "scenarios_held": f.held(),
        "best_effort": [
            {"scenario": b.scenario, "reason": b.reason, "slos": b.slos} for b in f.best_effort
        ],
        "slos_held": held(cfg),
        "slos_not_held": gone,
        "reach": {k: what_would_reach(cfg, "primary", k) for k in gone},
        "slos_left_out": left_out(cfg),
        "traffic_share": f.traffic_share,
        "speed_edge": PLANNING_EDGE,
        "prefix_cache_hit_rate": hit_rate_source(cfg),
        "budget_usd_per_month": f.budget_usd_per_month,
    }


#: Said of each SLO the fleet is not sized to hold (stacks/constructs/alarm_rules.variant_rules).
NO_SLO_ALARM = "no SLO alarm is built for it (it would stand in ALARM on a healthy fleet)"


def render_fleet(f: dict[str, Any]) -> list[str]:
    share = "" if f["traffic_share"] == 1 else f" at {f['traffic_share']:g} x the brief's traffic"
    partial = [b["scenario"] for b in f["best_effort"] if b.get("slos")]
    but = f" (in {', '.join(partial)} but the SLOs its ACCEPTED RISK names)" if partial else ""
    lines = [
        f"  fleet   capacity gate (make capacity-gate): {', '.join(f['slos_held'])} held in every "
        f"minute of {', '.join(f['scenarios_held'])}{but}{share}; speed at the "
        f"{f['speed_edge']} edge; prefix-cache hit rate {f['prefix_cache_hit_rate']}"
    ]
    for slo, why in f["slos_not_held"].items():
        reach = f["reach"].get(slo)
        more = f"; {reach}" if reach else ""
        lines.append(
            f"          not held on this instance type: {slo}: {why}{more}; {NO_SLO_ALARM}"
        )
    for slo, where in f.get("slos_left_out", {}).items():
        lines.append(
            f"          not held by the gate (fleet.slos leaves it out): {slo}: {where}; "
            f"{NO_SLO_ALARM}"
        )
    for b in f["best_effort"]:
        only = b.get("slos")
        on = f" on {', '.join(only)} only (the other SLOs held)" if only else ""
        lines.append(f"          ACCEPTED RISK: {b['scenario']} is best-effort{on}: {b['reason']}")
    if f["budget_usd_per_month"]:
        lines.append(
            f"          budget ${f['budget_usd_per_month']:,.0f}/month (fleet.budget_usd_per_month;"
            " the cost line compares the fleet's monthly cost with it)"
        )
    return lines


def render_memory_terms(c: dict[str, Any], eng: dict[str, Any]) -> list[str]:
    """One line per memory term of :func:`sizing.capacity.estimate`, estimates with their margin."""
    lines = [
        f"          memory per GPU: {c['cuda_memory_gib']} GiB as CUDA reports it (marketing "
        f"{c['gpu_memory_gib']} GB) x gpu_memory_utilization {eng['gpu_memory_utilization']} = "
        f"{c['usable_gib']} GiB, less:"
    ]
    for t in c["terms"]:
        kind = f"estimate, margin {t['margin_gib']:.2f} GiB" if t["estimate"] else "computed"
        lines.append(f"            - {t['name']:<16}{t['gib']:6.2f} GiB  ({kind}; {t['basis']})")
    lines.append(
        f"            = KV cache {c['kv_budget_gib']} GiB = {c['kv_capacity_tokens']:,} tokens "
        f"at {c['kv_bytes_per_token'] // 1024} KiB/token"
    )
    return lines


def _adapter(a: dict[str, Any]) -> str:
    """``manga_domain (v3)``: the name clients send, and the version the image bakes."""
    return f"{a['name']} ({a['version']})" if a.get("version") else a["name"]


def variant_blocks(v: dict[str, Any], eng: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """A variant's lines under its header, as named blocks in the order they print. A block the
    same as an earlier variant's prints once (:func:`render_variants`)."""
    c = v["capacity"]
    sc = v["scaling"]
    warnings = []
    if sc.get("unreachable_ceiling"):
        warnings.append(f"          WARNING: {sc['unreachable_ceiling']}")
    slo_warnings = [f"          WARNING: {w}" for w in sc.get("unmet_slos", [])]
    kv_warning = []
    if c["preempts_at_full_context"]:
        kv_warning.append(
            f"          WARNING: max_num_seqs x max_model_len needs "
            f"{c['worst_case_kv_gib']} GiB of KV cache, {c['kv_budget_gib']} GiB fit: "
            f"vLLM preempts beyond "
            f"{c['concurrency_at_full_context']} full-length sequences (a preempted "
            f"sequence waits and is recomputed: slower, not lost; vllm:num_preemptions_total "
            f"counts them). Typical requests fit {c['concurrency_at_typical_length']}; to rule "
            f"it out, lower engine.max_num_seqs to {c['concurrency_at_full_context']} or "
            f"engine.max_model_len"
        )
    blocks = [
        ("model release", [f"          model release: {v['model_release']}"]),
        (
            "memory per GPU and concurrency",
            [
                *render_memory_terms(c, eng),
                f"          concurrency: {c['concurrency_at_full_context']} seqs at full context "
                f"({eng['max_model_len']} tok), {c['concurrency_at_typical_length']} at typical "
                f"({eng['typical_prompt_tokens']}+{eng['typical_output_tokens']} tok); "
                f"max_num_seqs={c['max_num_seqs']}",
            ],
        ),
        ("pools", render_pools(v)),
        ("routing", [render_routing(v["routing"])] if "routing" in v else []),
        (
            "scaling",
            [
                f"          scaling: target tracking {sc['target_tracking'] or 'off'}; steps "
                f"{', '.join(sc['step_policies']) or 'none'}; {len(sc['schedules'])} schedules, "
                f"{len(sc['releases'])} releases"
            ],
        ),
        ("day", render_day(v.get("day"))),
        ("speed, SLOs and rollback threshold", render_speed(v["speed"]) if v.get("speed") else []),
        ("scale-out", render_scale_out(v["scale_out"]) if v.get("scale_out") else []),
        ("ceiling warning", warnings),
        ("SLO warnings", slo_warnings),
        ("KV-cache warning", kv_warning),
    ]
    return [(name, lines) for name, lines in blocks if lines]


def render_variants(plan: dict[str, Any]) -> list[str]:
    """Each variant's header and blocks; a block identical to an earlier variant's is named on
    one ``same as <variant>:`` line instead of printed again (prod's canary runs the primary's
    engine on the primary's instance type: 30 identical lines before)."""
    lines: list[str] = []
    seen: list[tuple[str, dict[str, list[str]]]] = []
    for v in plan["variants"]:
        lines.append(
            f"  variant {v['name']:<8} {v['initial_instance_count']} x {v['instance_type']} "
            f"({v['gpu']})  weight {v['initial_weight']:g}  scale {v['min_capacity']}.."
            f"{v['max_capacity']}  image: {v['image_tag']}"
        )
        blocks = variant_blocks(v, plan["engine"])
        same: dict[str, list[str]] = {}
        own: list[str] = []
        for name, block in blocks:
            earlier = next((n for n, b in seen if b.get(name) == block), None)
            if earlier is None:
                own += block
            else:
                same.setdefault(earlier, []).append(name)
        lines += [f"          same as {n}: {', '.join(names)}" for n, names in same.items()]
        lines += own
        seen.append((v["name"], dict(blocks)))
    return lines


def render_alarm_counts(alarms: list[str]) -> str:
    """The alarm list folded into one line: how many of each severity (``[CRITICAL] ...``,
    ``[WARNING] ...``) and how many roll back a deployment or drive scaling (the rest)."""
    critical = sum(a.startswith("[CRITICAL]") for a in alarms)
    warning = sum(a.startswith("[WARNING]") for a in alarms)
    return (
        f"  alarms  {len(alarms)}: {critical} critical, {warning} warning, "
        f"{len(alarms) - critical - warning} that roll back a deployment or scale"
    )


def render_plan(plan: dict[str, Any], *, alarm_list: bool = True) -> str:
    """The plan as `make synth` prints it. ``alarm_list=False``: the alarms as counts in one
    line (`make demo`, which names the file holding the whole plan)."""
    lines = [
        f"Plan: {plan['project']}/{plan['env']}  endpoint {plan['endpoint_name']}  "
        f"({plan['region']})",
        f"  model   {plan['model']['source']}  quantization={plan['model']['quantization']}  "
        f"adapters={', '.join(_adapter(a) for a in plan['model']['adapters']) or 'none'}",
    ]
    if plan["model"].get("job_image_warning"):
        lines.append(f"          WARNING: {plan['model']['job_image_warning']}")
    lines += render_variants(plan)
    if plan.get("start"):  # the engine's start, measured (sizing/engine_start.py)
        lines += render_start(plan["start"])
    if plan.get("compile_cache"):  # whose start the release's cache shortens
        lines += render_cache(plan["compile_cache"])
    lines += render_cost(plan["cost"])
    lines += render_components(plan.get("components"))  # the component shape (issue 45)
    if plan.get("targets"):  # SageMaker beside Bedrock (sizing/target_costs.py)
        lines += render_targets(plan["targets"])
    r = plan["rollout"]
    bg = r["blue_green"]
    step = f" {bg['step']}" if bg["step"] else ""
    controller = (
        # the component shape builds neither (stacks/endpoint_stack.py _component_shape); its
        # adapters roll out on their own components (the shape's lines above)
        "canary controller and smoke gate: not built in the component shape"
        if plan.get("components")
        else f"canary controller steps {r['canary_controller_steps_percent']} baking "
        f"{r['bake_minutes']} min; smoke gate {'on' if r['smoke_gate'] else 'off'}"
    )
    lines.append(
        f"  rollout adapters one at a time (above); {controller}"
        if plan.get("components")  # the component shape has no variant blue/green
        else f"  rollout blue/green {bg['type']}{step}, wait {bg['wait_interval_seconds']} s, "
        f"auto-rollback on {bg['auto_rollback_alarms']}; {controller}"
    )
    lines += [f"          WARNING: {w}" for w in plan.get("canary_comparison", [])]
    comp = plan.get("components")
    lines += render_component_deploy(comp) if comp else render_deploy(plan["deploy"])
    lines += render_fleet(plan["fleet"])
    lines += render_shadow(plan.get("shadow"))
    if alarm_list:
        lines.append(f"  alarms  {len(plan['alarms'])}:")
        lines += [f"          - {a}" for a in plan["alarms"]]
    else:
        lines.append(render_alarm_counts(plan["alarms"]))
    return "\n".join(lines)
