"""The canary's capacity at each rollout step, planned at synth from what one instance serves.

No CDK here: the canary construct puts the plan in the controller Lambda's environment, and the
simulator replays the same plan (``simulator/rollout.py``). The arithmetic itself is the
controller's (``lambdas.canary_controller.rules.build_plan``).
"""

from __future__ import annotations

from lambdas.canary_controller.rules import CapacityPlan, build_plan
from stacks.capacity import estimate
from stacks.config import DeploymentConfig, VariantName


def per_instance_concurrency(cfg: DeploymentConfig, variant: VariantName) -> int:
    """Sequences one instance of ``variant`` runs at once at the typical request length:
    engine.max_num_seqs capped by the KV cache (stacks.capacity.estimate)."""
    cap = estimate(cfg, cfg.variants[variant].instance_type)
    return max(1, min(cfg.engine.max_num_seqs, cap.concurrency_at_typical_length))


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
    )
