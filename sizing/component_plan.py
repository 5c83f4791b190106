"""The component shape's figures (issue 45; typed_config/components.py): what one base copy asks
of an instance, copies per instance, the per-copy scaling target beside the variant shape's, the
time a request at zero waits for a copy, and the shape's monthly cost beside the variant shape's.

**Scale from zero.** AWS publishes no figure for it: its guide says only that "the provisioning
process takes several minutes. During that time, any attempts to invoke the endpoint will produce
an error" (developer guide, "Scale an endpoint to zero instances",
https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html). The
figure here is built from its parts, each with its source:

- the wake-up alarm's period: ``NoCapacityInvocationFailures`` summed over 60 s, one datapoint
  (the same page's alarm; stacks/constructs/inference_components.py), so up to 60 s before the
  step policy acts;
- a new instance to serving: AWS's published scale-out P50 for the instance type with the image
  cached (container-caching post; :mod:`sizing.scale_out_time`, which also carries the figure to
  the measured engine start: vLLM 0.26 on an H100, docs/measurements/start_phases_h100_vllm0.26.json
  via :mod:`sizing.engine_start`), ``measured_cached_seconds``; at the start's pessimistic edge
  ``measured_edge_seconds``. An instance that left the endpoint at zero has no image cache on the
  new one: the uncached figure is printed beside it as the bound.

**A base update** (a new image or model: ``make deploy``) updates the base component in place:
CloudFormation calls UpdateInferenceComponent, whose ``DeploymentConfig`` "contains the desired
deployment strategy and rollback settings" (API reference, UpdateInferenceComponent,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_UpdateInferenceComponent.html): a
``RollingUpdatePolicy`` whose ``MaximumBatchSize`` is "between 5% to 50% of the copy count"; "for
each step, SageMaker AI provisions capacity on the new endpoint fleet, routes traffic to that
fleet, and terminates capacity on the old endpoint fleet", ``WaitIntervalInSeconds`` (0-3600) is
"the baking period, during which SageMaker AI monitors alarms for each batch on the new fleet",
``RollbackMaximumBatchSize`` defaults to 100 % of the capacity (API reference,
InferenceComponentRollingUpdatePolicy,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_InferenceComponentRollingUpdatePolicy.html),
and ``AutoRollbackConfiguration`` names the alarms. Not a variant's blue/green: no second endpoint
fleet, no traffic shift between variants, no canary controller. The template sets no
``DeploymentConfig`` on the base component (stacks/constructs/inference_components.py), and the
simulator does not replay a base update (its gate reports deploy-at-peak as not replayed): the
plan's line says both.

**A month at zero.** dev is idle outside working hours; :data:`DEV_BUSY_HOURS` states the schedule
the plan prices (AWS's own monthly convention, 730 h). At zero a copy runs only in busy hours,
plus one scale-in cooldown after each busy spell; the variant shape bills its floors all month.
"""

from __future__ import annotations

import math
from typing import Any

from sizing.capacity import lora_bytes, weight_bytes
from sizing.fleet_cost import plan_cost
from sizing.scale_out_time import time_to_serve
from sizing.scaling_target import concurrency_target
from typed_config import DeploymentConfig
from typed_config.adapter_rollout import evidence_thresholds
from typed_config.catalog import HOURS_PER_MONTH, INSTANCE_CATALOG
from typed_config.components import GPUS_PER_COPY

MB = 1024 * 1024
#: The stated idle schedule a month at zero is priced on: someone calls the dev endpoint 10 hours a
#: working day (08:00-18:00), 5 days a week; nobody at night or at weekends. 10 x 5 x 52 / 12 =
#: 216.7 h of a 730 h month. An assumption of the plan, printed with the figure.
DEV_BUSY_HOURS_PER_DAY = 10
DEV_BUSY_DAYS_PER_WEEK = 5
#: Where the busy hours start (local time of the traces, Asia/Tokyo) and which weekdays are busy
#: (Monday 0): the simulator's idle week (simulator/components.py) replays the same schedule.
DEV_BUSY_START_HOUR = 8
DEV_BUSY_WEEKDAYS = tuple(range(DEV_BUSY_DAYS_PER_WEEK))
DEV_BUSY_HOURS = DEV_BUSY_HOURS_PER_DAY * DEV_BUSY_DAYS_PER_WEEK * 52 / 12
#: Busy spells a month (one per working day): each ends with a scale-in cooldown at one copy.
DEV_BUSY_SPELLS = DEV_BUSY_DAYS_PER_WEEK * 52 / 12
#: The wake-up alarm's period (stacks/constructs/inference_components.py, AWS's example: 60 s).
WAKE_ALARM_SECONDS = 60.0


def copy_memory_mb(cfg: DeploymentConfig) -> int:
    """MinMemoryRequiredInMb of one base copy: the host memory its engine holds at least, the
    weights read through host memory at load plus every LoRA slot (:mod:`sizing.capacity`'s
    figures), rounded up to a MB. A floor SageMaker reserves on the instance, not a limit
    (MaxMemoryRequiredInMb is left unset)."""
    arch, eng = cfg.architecture, cfg.engine
    total = weight_bytes(arch, cfg.model.quantization) + lora_bytes(
        arch, eng.max_lora_rank, eng.max_loras
    )
    return max(128, math.ceil(total / MB))  # botocore MemoryInMb: min 128


def components_section(cfg: DeploymentConfig) -> dict[str, Any] | None:
    """The plan's component-shape figures; None in the variant shape."""
    ic = cfg.inference_components
    if ic is None:
        return None
    inst = INSTANCE_CATALOG[ic.instance_type]
    price = inst.price_per_hour
    per_instance = ic.copies_per_instance
    memory_mb = copy_memory_mb(cfg)
    start = time_to_serve(cfg, "primary", ic.instance_type)
    wake = WAKE_ALARM_SECONDS + start.measured_cached_seconds
    wake_edge = WAKE_ALARM_SECONDS + start.measured_edge_seconds
    wake_uncached = WAKE_ALARM_SECONDS + start.measured_uncached_seconds
    floor_instances = -(-ic.base.copies.min // per_instance) if ic.base.copies.min else 0
    floor_instances = max(floor_instances, ic.instances.min)
    always_on = floor_instances * price * HOURS_PER_MONTH
    variant = plan_cost(cfg).monthly_usd
    # the adapter release's rules: inference_components.rollout, else the canary's (rollout:)
    evidence = evidence_thresholds(ic.rollout, cfg.rollout)
    section: dict[str, Any] = {
        "instance_type": ic.instance_type,
        "gpus_per_instance": inst.gpu_count,
        "copies_per_instance": per_instance,
        "gpus_per_copy": GPUS_PER_COPY,
        "copy_memory_mb": memory_mb,
        "instance_memory_mb_per_copy": inst.ram_gib * 1024 // per_instance,
        "instances": {"min": ic.instances.min, "max": ic.instances.max},
        "copies": {"min": ic.base.copies.min, "max": ic.base.copies.max},
        "target_requests_per_copy": ic.base.target_requests_per_copy,
        "variant_target_per_instance": concurrency_target(cfg, "primary"),
        "adapters": [a.name for a in cfg.adapters],
        "price_per_hour": price,
        "monthly_at_floor": round(always_on, 2),
        "monthly_at_max": round(ic.instances.max * price * HOURS_PER_MONTH, 2),
        "variant_monthly_at_floors": round(variant, 2),
        "scales_to_zero": ic.scales_to_zero,
        "adapter_rollout": {
            "bake_minutes": ic.rollout.bake_minutes,
            "min_invocations": evidence.min_invocations,
            "max_error_rate_increase_percent": evidence.max_error_rate_increase_percent,
            "watch_minutes": ic.rollout.watch_minutes,
        },
    }
    if ic.scales_to_zero:
        cooldown_h = ic.base.scale_in_cooldown_seconds / 3600
        copy_hours = DEV_BUSY_HOURS + DEV_BUSY_SPELLS * cooldown_h
        section["zero"] = {
            "wake_seconds": round(wake),
            "wake_edge_seconds": round(wake_edge),
            "wake_uncached_seconds": round(wake_uncached),
            "alarm_seconds": WAKE_ALARM_SECONDS,
            "busy_hours_per_month": round(DEV_BUSY_HOURS, 1),
            "busy_schedule": (
                f"{DEV_BUSY_HOURS_PER_DAY} h a day, {DEV_BUSY_DAYS_PER_WEEK} days a week"
            ),
            "billed_hours_per_month": round(copy_hours, 1),
            # one copy on one instance through the busy hours: what a working day asks of dev
            "monthly_at_zero": round(copy_hours * price, 2),
            "start_source": "AWS container-caching P50 less the assumed engine start plus the "
            "measured one (sizing/scale_out_time.py, sizing/engine_start.py)",
        }
    return section


def render_component_deploy(c: dict[str, Any]) -> list[str]:
    """The plan's deploy line in the component shape (module docstring: a base update)."""
    return [
        "  deploy  the base component updated in place (make deploy: CloudFormation's "
        "UpdateInferenceComponent), not a variant blue/green: AWS's rolling update replaces "
        "copies in batches of 5-50 % of the copy count on new capacity, each baked "
        "WaitIntervalInSeconds (0-3600 s) while AutoRollbackConfiguration's alarms are watched "
        "(InferenceComponentDeploymentConfig)",
        "          the template sets no DeploymentConfig on the base component: no batches, "
        "bake or alarm rollback of SageMaker's are configured, and the simulator does not "
        f"replay a base update; an adapter version needs no deploy (make release-adapter): "
        f"{', '.join(c['adapters']) or 'no adapter'}",
    ]


def render_components(c: dict[str, Any] | None) -> list[str]:
    """The plan's lines for the component shape (none in the variant shape)."""
    if c is None:
        return []
    lines = [
        f"  shape   inference components on {c['instance_type']}: {c['copies_per_instance']} "
        f"base cop{'y' if c['copies_per_instance'] == 1 else 'ies'} per instance "
        f"({c['gpus_per_instance']} GPU(s), {c['gpus_per_copy']} per copy; "
        f"{c['copy_memory_mb']:,} MB host memory per copy of {c['instance_memory_mb_per_copy']:,}"
        f" MB), instances {c['instances']['min']}-{c['instances']['max']} (managed instance "
        f"scaling), base copies {c['copies']['min']}-{c['copies']['max']}, adapter components "
        f"{', '.join(c['adapters']) or 'none'}",
        f"          per-copy scaling: {c['target_requests_per_copy']:g} concurrent requests per "
        f"copy (SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution); the variant "
        f"shape's target is {c['variant_target_per_instance']:g} per instance",
        f"          cost: ${c['monthly_at_floor']:,.0f}/month at the floor "
        f"({c['instances']['min']} instance(s) always on), at most ${c['monthly_at_max']:,.0f}; "
        f"the variant shape's floors: ${c['variant_monthly_at_floors']:,.0f}/month",
    ]
    r = c.get("adapter_rollout")
    if r:
        lines.append(
            f"          adapter releases: one adapter version at a time (make release-adapter), "
            f"no image build, the base untouched: a candidate component bakes "
            f"{r['bake_minutes']} min, needs >= {r['min_invocations']} invocations and a 5XX "
            f"rate at most {r['max_error_rate_increase_percent']:g} points above the live "
            f"version's, then the swap is watched {r['watch_minutes']} min"
        )
    z = c.get("zero")
    if z:
        saved = c["variant_monthly_at_floors"] - z["monthly_at_zero"]
        lines += [
            f"          scale from zero: ~{z['wake_seconds']} s (up to {z['wake_edge_seconds']} s "
            f"at the start's edge, {z['wake_uncached_seconds']} s without the image cached) from "
            f"the first request to a copy serving: the {z['alarm_seconds']:g} s wake alarm + a "
            f'new instance ({z["start_source"]}); AWS publishes no figure ("several minutes"), '
            "and every request meanwhile fails (NoCapacityInvocationFailures): the client "
            "retries or falls back",
            f"          a month at zero: ${z['monthly_at_zero']:,.0f} "
            f"({z['billed_hours_per_month']:g} h billed: busy {z['busy_schedule']}, "
            f"{z['busy_hours_per_month']:g} h, plus a "
            f"scale-in cooldown after each day) vs ${c['variant_monthly_at_floors']:,.0f} always "
            f"on in the variant shape: ${saved:,.0f}/month less",
        ]
    return lines
