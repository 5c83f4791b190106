"""What the primary and the canary must share for the canary's figures to judge the release.

The canary controller moves the canary's weight only on evidence measured against the primary
over the same window (its 5XX rate at most ``rollout.max_error_rate_increase_percent`` points
above the primary's; lambdas/canary_controller/rules.py), and the rollback alarms and the
dashboard read each variant's ModelLatency side by side. A difference between the variants other
than the release shows up in those figures as if the release caused it:

- ``routing``: prefix-aware routing sends a conversation's follow-ups to the instance holding its
  prefix (TTFT ~900 ms -> ~180 ms on prod, docs/routing.md); a canary routed randomly looks slower
  for a reason no release made (prod.yaml gives the canary the primary's routing for this).
- the instance types (``instance_type`` / ``instance_pools`` by priority): another GPU answers at
  another speed.
- the scaling target (in flight per instance): an instance held at more requests answers slower.

Each is a plan warning, not an error: a canary on another type is a legitimate experiment, as long
as whoever reads its figures knows.
"""

from __future__ import annotations

from sizing.scaling_target import concurrency_target
from typed_config import VARIANT_NAMES, DeploymentConfig, VariantName


def _routing(cfg: DeploymentConfig, variant: VariantName) -> str:
    r = cfg.variants[variant].routing
    if r is None:
        return "SageMaker's default (random)"
    return ", ".join(f"{k}={v}" for k, v in r.model_dump(exclude_none=True).items())


def comparison_warnings(cfg: DeploymentConfig) -> list[str]:
    """One warning per setting the canary does not share with the primary (see the module)."""
    p, c = cfg.variants.primary, cfg.variants.canary
    out = []
    judged = (
        "the canary controller judges the release by the canary's errors beside the primary's, "
        "and the rollback alarms and the dashboard read each variant's ModelLatency against the "
        "same threshold, so this difference reads as the release's"
    )
    if p.routing != c.routing:
        out.append(
            f"variants.canary.routing ({_routing(cfg, 'canary')}) differs from "
            f"variants.primary.routing ({_routing(cfg, 'primary')}): {judged}. Give the canary "
            "the primary's routing (a YAML anchor keeps them one: routing: *name), or accept "
            "that its comparison includes routing"
        )
    if p.placement != c.placement:
        out.append(
            f"the canary runs on {c.placement}, the primary on {p.placement} "
            f"(variants.<name>.instance_type / instance_pools): {judged}. Use the primary's "
            "instance types for the canary, or accept that its comparison includes the GPU"
        )
    tp, tc = (
        concurrency_target(cfg, v) if cfg.scaling.variants[v].target_tracking else None
        for v in VARIANT_NAMES
    )
    if tp != tc:
        out.append(
            f"the canary is scaled to hold {tc if tc is not None else 'no target'} in flight per "
            f"instance, the primary {tp if tp is not None else 'no target'} "
            "(scaling.variants.<name>.target_tracking): an instance held at more requests "
            f"answers slower; {judged}. Give both the same target_tracking"
        )
    return out
