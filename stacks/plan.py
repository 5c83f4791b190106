"""The deployment plan: what `make synth` will deploy, in figures a platform engineer can check."""

from __future__ import annotations

import json
from typing import Any

from container.model_prep.manifest import summary
from stacks.capacity import estimate
from stacks.catalog import HOURS_PER_MONTH, INSTANCE_CATALOG, PRICE_REGION
from stacks.config import (
    VARIANT_NAMES,
    DeploymentConfig,
    ScalingConfig,
    VariantName,
    artifact_dir,
    artifact_version,
    bounds_changes,
)
from stacks.plan_deploy import deploy_section, render_deploy
from stacks.scaling_target import concurrency_target
from stacks.speed_plan import render_speed, speed_section


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


def build_plan(cfg: DeploymentConfig, templates: dict[str, dict[str, Any]]) -> dict[str, Any]:
    release = release_facts(cfg)
    variants: list[dict[str, Any]] = []
    monthly_initial = monthly_min = monthly_max = 0.0
    for name in VARIANT_NAMES:
        v = cfg.variants[name]
        sc = cfg.scaling.variants[name]
        inst = INSTANCE_CATALOG[v.instance_type]
        cap = estimate(cfg, v.instance_type)
        monthly_initial += v.initial_instance_count * inst.monthly_price
        monthly_min += sc.min_capacity * inst.monthly_price
        monthly_max += sc.max_capacity * inst.monthly_price
        variants.append(
            {
                "name": name,
                "instance_type": v.instance_type,
                "gpu": f"{inst.gpu_count} x {inst.gpu} {inst.gpu_memory_gib} GB",
                "initial_instance_count": v.initial_instance_count,
                "initial_weight": v.initial_weight,
                "min_capacity": sc.min_capacity,
                "max_capacity": sc.max_capacity,
                "image_tag": v.image_tag or cfg.image.tag or "built by CDK from container/",
                "model_release": (
                    f"the release baked in image {v.image_tag}" if v.image_tag else release["line"]
                ),
                "price_per_hour": inst.price_per_hour,
                "scaling": {
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
                },
                "capacity": cap.as_dict(),
                "speed": speed_section(cfg, name),
            }
        )
    alarms = sorted(
        {
            res["Properties"].get("AlarmDescription", logical)
            for tpl in templates.values()
            for logical, res in tpl.get("Resources", {}).items()
            if res["Type"] == "AWS::CloudWatch::Alarm"
        }
    )
    shift = cfg.deployment.traffic_shift
    return {
        "project": cfg.project,
        "env": cfg.env,
        "region": cfg.region,
        "endpoint_name": cfg.endpoint_name,
        "model": {
            "source": cfg.model.source,
            "quantization": cfg.model.quantization,
            "adapters": [
                {"name": a.name, "version": a.version, "rank": a.rank} for a in cfg.adapters
            ],
            "default_adapter": cfg.default_adapter,
            "release": release,
        },
        "engine": cfg.engine.model_dump(exclude={"context_budget"}),
        "variants": variants,
        "cost": {
            "price_region": PRICE_REGION,
            "hours_per_month": HOURS_PER_MONTH,
            "monthly_at_initial_counts": round(monthly_initial, 2),
            "monthly_at_min_capacity": round(monthly_min, 2),
            "monthly_at_max_capacity": round(monthly_max, 2),
            "price_sources": sorted(
                {INSTANCE_CATALOG[v["instance_type"]].price_source for v in variants}
            ),
        },
        "rollout": {
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
        },
        "alarms": alarms,
        "deploy": deploy_section(cfg),
    }


def render_memory_terms(c: dict[str, Any], eng: dict[str, Any]) -> list[str]:
    """One line per memory term of :func:`stacks.capacity.estimate`, estimates with their margin."""
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
        sc = v["scaling"]
        lines.append(
            f"          scaling: target tracking {sc['target_tracking'] or 'off'}; steps "
            f"{', '.join(sc['step_policies']) or 'none'}; {len(sc['schedules'])} schedules, "
            f"{len(sc['releases'])} releases"
        )
        if v.get("speed"):
            lines += render_speed(v["speed"])
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
    lines.append(f"  alarms  {len(plan['alarms'])}:")
    lines += [f"          - {a}" for a in plan["alarms"]]
    return "\n".join(lines)
