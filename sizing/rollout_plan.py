"""The canary's capacity at each rollout step, planned at synth from what one instance serves.

No CDK here: the canary construct puts the plan in the controller Lambda's environment, and the
simulator replays the same plan (``simulator/rollout.py``). The arithmetic itself is the
controller's (``lambdas.canary_controller.rules.build_plan``).
"""

from __future__ import annotations

from lambdas.canary_controller.rules import CapacityPlan, build_plan
from sizing.capacity import pool_capacities
from typed_config import DeploymentConfig, VariantName


def per_instance_concurrency(cfg: DeploymentConfig, variant: VariantName) -> int:
    """Sequences one instance of ``variant`` runs at once at the typical request length:
    engine.max_num_seqs capped by the KV cache (sizing.capacity.estimate); with instance
    pools, the smallest pool's, since any step's instances may land there."""
    return min(pc.runs for pc in pool_capacities(cfg, variant))


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
