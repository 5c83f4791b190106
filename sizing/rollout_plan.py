"""The canary's capacity at each rollout step, planned at synth from what one instance serves.

Defined here once and read once per run: the endpoint stack derives it and hands it to the
controller Lambda as JSON in its environment (``EnvVar.CAPACITY_PLAN``), the simulator derives it
once per replay and passes it down (``simulator/blast_radius.py``, ``simulator/rollout.py``). The
Lambda never derives a plan: it reads the one it was given (``canary_controller.capacity``, the
plan's type and the arithmetic each tick does on it), so the derivation lives on the sizing floor
and only the contract (the type, its JSON) in the Lambda's bundle.
"""

from __future__ import annotations

from lambdas.canary_controller.capacity import CapacityPlan, StepCapacity, ceil_whole
from sizing.capacity import pool_capacities
from typed_config import DeploymentConfig, VariantName


def per_instance_concurrency(cfg: DeploymentConfig, variant: VariantName) -> int:
    """Sequences one instance of ``variant`` runs at once at the typical request length:
    engine.max_num_seqs capped by the KV cache (sizing.capacity.estimate); with instance
    pools, the smallest pool's, since any step's instances may land there."""
    return min(pc.runs for pc in pool_capacities(cfg, variant))


def build_plan(
    steps: tuple[int, ...] | list[int],
    *,
    primary_min: int,
    primary_max: int,
    canary_min: int,
    canary_max: int,
    primary_concurrency: float,
    canary_concurrency: float,
    release_floor: int = 0,
) -> CapacityPlan:
    """Per step ``p``: at most what ``p`` % of the primary's maximum fleet serves (so at peak the
    canary can grow with its share as far as the primary could), at least ``p`` % of its minimum;
    never below the canary's configured bounds, nor below ``release_floor`` (the canary's floor
    while a release runs, rollout.canary_instances: raised at each step, the configured
    ``canary_min`` restored after the release)."""
    ratio = primary_concurrency / canary_concurrency
    base = CapacityPlan(round(ratio, 6), primary_max, canary_min, canary_max, ())
    plan = []
    for p in steps:
        lo = max(canary_min, release_floor, ceil_whole(p / 100 * primary_min * ratio))
        hi = max(canary_max, base.from_primary_max(p), lo)
        plan.append(StepCapacity(p, lo, hi))
    return CapacityPlan(round(ratio, 6), primary_max, canary_min, canary_max, tuple(plan))


def rollout_capacity_plan(cfg: DeploymentConfig) -> CapacityPlan:
    """The canary's scalable-target bounds at each of ``rollout.steps_percent``."""
    primary, canary = cfg.scaling.variants["primary"], cfg.scaling.variants["canary"]
    return build_plan(
        cfg.rollout.steps_percent,
        primary_min=primary.min_capacity,
        primary_max=primary.max_capacity,
        canary_min=canary.min_capacity,
        canary_max=canary.max_capacity,
        primary_concurrency=per_instance_concurrency(cfg, "primary"),
        canary_concurrency=per_instance_concurrency(cfg, "canary"),
        # a canary billed only while a release runs: each step raises it to this at least
        release_floor=cfg.rollout.canary_instances or 0,
    )
