"""The deployment plan: what `make synth` will deploy, in figures a platform engineer can check."""

from __future__ import annotations

import json
from typing import Any

from container.model_prep.manifest import summary
from sizing.capacity import pool_capacities
from sizing.plan_deploy import deploy_section, render_deploy
from sizing.scale_out_time import render_scale_out, scale_out_section
from sizing.scaling_target import concurrency_target, pool_bases
from sizing.serving_speed import PLANNING_EDGE, hit_rate_source
from sizing.shadow_plan import render_shadow, shadow_section
from sizing.slo_reach import held, unreachable
from sizing.speed_plan import render_speed, speed_section
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
        f"conversation's start); spills from {r['concurrency_threshold']} in flight (one "
        f"instance runs {r['instance_runs']})"
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
        "cost": cost_section(cfg),
        "rollout": rollout_section(cfg),
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
        "scale_out": scale_out_section(cfg, name),
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


def model_section(cfg: DeploymentConfig, release: dict[str, Any]) -> dict[str, Any]:
    """The base model, its quantization, the adapters and the release the image bakes."""
    return {
        "source": cfg.model.source,
        "quantization": cfg.model.quantization,
        "adapters": [{"name": a.name, "version": a.version, "rank": a.rank} for a in cfg.adapters],
        "default_adapter": cfg.default_adapter,
        "release": release,
    }


def cost_section(cfg: DeploymentConfig) -> dict[str, Any]:
    """Monthly cost at the initial counts, min_capacity and max_capacity, every instance priced
    on its variant's first pool; with instance pools, on its dearest too (what a capacity
    shortage can cost)."""
    monthly_initial = monthly_min = monthly_max = 0.0
    # every instance on its variant's dearest pool: what a capacity shortage can cost
    dearest_initial = dearest_min = dearest_max = 0.0
    for name in VARIANT_NAMES:
        v = cfg.variants[name]
        sc = cfg.scaling.variants[name]
        price = INSTANCE_CATALOG[v.instance_type].monthly_price
        monthly_initial += v.initial_instance_count * price
        monthly_min += sc.min_capacity * price
        monthly_max += sc.max_capacity * price
        dear = max(INSTANCE_CATALOG[t].monthly_price for t in v.pool_types)
        dearest_initial += v.initial_instance_count * dear
        dearest_min += sc.min_capacity * dear
        dearest_max += sc.max_capacity * dear
    return {
        "price_region": PRICE_REGION,
        "hours_per_month": HOURS_PER_MONTH,
        "monthly_at_initial_counts": round(monthly_initial, 2),
        "monthly_at_min_capacity": round(monthly_min, 2),
        "monthly_at_max_capacity": round(monthly_max, 2),
        # the figures above price every instance on its first pool; these on its dearest
        "dearest_pool": {
            "monthly_at_initial_counts": round(dearest_initial, 2),
            "monthly_at_min_capacity": round(dearest_min, 2),
            "monthly_at_max_capacity": round(dearest_max, 2),
        }
        if any(cfg.variants[n].instance_pools for n in VARIANT_NAMES)
        else None,
        "price_sources": sorted(
            {
                INSTANCE_CATALOG[t].price_source
                for n in VARIANT_NAMES
                for t in cfg.variants[n].pool_types
            }
        ),
    }


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
    return {
        "scenarios_held": f.held(),
        "best_effort": [{"scenario": b.scenario, "reason": b.reason} for b in f.best_effort],
        "slos_held": held(cfg),
        "slos_not_held": unreachable(cfg),
        "traffic_share": f.traffic_share,
        "speed_edge": PLANNING_EDGE,
        "prefix_cache_hit_rate": hit_rate_source(cfg),
        "budget_usd_per_month": f.budget_usd_per_month,
    }


def render_fleet(f: dict[str, Any]) -> list[str]:
    share = "" if f["traffic_share"] == 1 else f" at {f['traffic_share']:g} x the brief's traffic"
    lines = [
        f"  fleet   capacity gate (make capacity-gate): {', '.join(f['slos_held'])} held in every "
        f"minute of {', '.join(f['scenarios_held'])}{share}; speed at the {f['speed_edge']} "
        f"edge; prefix-cache hit rate {f['prefix_cache_hit_rate']}"
    ]
    for slo, why in f["slos_not_held"].items():
        lines.append(f"          not held on this instance type: {slo}: {why}")
    for b in f["best_effort"]:
        lines.append(f"          ACCEPTED RISK: {b['scenario']} is best-effort: {b['reason']}")
    if f["budget_usd_per_month"]:
        lines.append(
            f"          budget ${f['budget_usd_per_month']:,.0f}/month (fleet.budget_usd_per_month)"
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


def render_plan(plan: dict[str, Any]) -> str:
    lines = [
        f"Plan: {plan['project']}/{plan['env']}  endpoint {plan['endpoint_name']}  "
        f"({plan['region']})",
        f"  model   {plan['model']['source']}  quantization={plan['model']['quantization']}  "
        f"adapters={', '.join(_adapter(a) for a in plan['model']['adapters']) or 'none'}",
    ]
    eng = plan["engine"]
    for v in plan["variants"]:
        c = v["capacity"]
        lines += [
            f"  variant {v['name']:<8} {v['initial_instance_count']} x {v['instance_type']} "
            f"({v['gpu']})  weight {v['initial_weight']:g}  scale {v['min_capacity']}.."
            f"{v['max_capacity']}  image: {v['image_tag']}",
            f"          model release: {v['model_release']}",
            *render_memory_terms(c, eng),
            f"          concurrency: {c['concurrency_at_full_context']} seqs at full context "
            f"({eng['max_model_len']} tok), {c['concurrency_at_typical_length']} at typical "
            f"({eng['typical_prompt_tokens']}+{eng['typical_output_tokens']} tok); "
            f"max_num_seqs={c['max_num_seqs']}",
        ]
        lines += render_pools(v)
        if "routing" in v:
            lines.append(render_routing(v["routing"]))
        sc = v["scaling"]
        lines.append(
            f"          scaling: target tracking {sc['target_tracking'] or 'off'}; steps "
            f"{', '.join(sc['step_policies']) or 'none'}; {len(sc['schedules'])} schedules, "
            f"{len(sc['releases'])} releases"
        )
        if v.get("speed"):
            lines += render_speed(v["speed"])
        if v.get("scale_out"):
            lines += render_scale_out(v["scale_out"])
        if sc.get("unreachable_ceiling"):
            lines.append(f"          WARNING: {sc['unreachable_ceiling']}")
        if c["preempts_at_full_context"]:
            lines.append(
                f"          WARNING: max_num_seqs x max_model_len needs "
                f"{c['worst_case_kv_gib']} GiB of KV cache, {c['kv_budget_gib']} GiB fit: "
                f"vLLM preempts beyond "
                f"{c['concurrency_at_full_context']} full-length sequences"
            )
    cost = plan["cost"]
    lines.append(
        f"  cost    ${cost['monthly_at_initial_counts']:,.0f}/month at initial counts "
        f"(min ${cost['monthly_at_min_capacity']:,.0f}, "
        f"max ${cost['monthly_at_max_capacity']:,.0f});"
        f" on-demand {cost['price_region']}, {cost['hours_per_month']} h/month"
    )
    dear = cost.get("dearest_pool")
    if dear:
        lines.append(
            f"          those price every instance on its first pool; on its dearest pool "
            f"${dear['monthly_at_initial_counts']:,.0f}/month at initial counts (min "
            f"${dear['monthly_at_min_capacity']:,.0f}, max ${dear['monthly_at_max_capacity']:,.0f})"
        )
    r = plan["rollout"]
    bg = r["blue_green"]
    step = f" {bg['step']}" if bg["step"] else ""
    lines.append(
        f"  rollout blue/green {bg['type']}{step}, wait {bg['wait_interval_seconds']} s, "
        f"auto-rollback on {bg['auto_rollback_alarms']}; canary controller steps "
        f"{r['canary_controller_steps_percent']} baking {r['bake_minutes']} min; smoke gate "
        f"{'on' if r['smoke_gate'] else 'off'}"
    )
    lines += render_deploy(plan["deploy"])
    lines += render_fleet(plan["fleet"])
    lines += render_shadow(plan.get("shadow"))
    lines.append(f"  alarms  {len(plan['alarms'])}:")
    lines += [f"          - {a}" for a in plan["alarms"]]
    return "\n".join(lines)
