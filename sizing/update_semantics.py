"""What a deploy (an UpdateEndpoint to a new EndpointConfig) does to the live fleet.

One definition read by the endpoint construct (what the template says), the plan (what
`make synth` prints), the deploy preflight (tools/deploy.py) and the simulator's deploy replay
(simulator/deploys.py), so none of them restates SageMaker's rules.

Retained properties. UpdateEndpoint's ``RetainAllVariantProperties`` "defaults to false": a new
EndpointConfig resets every variant's DesiredInstanceCount to InitialInstanceCount and its
DesiredWeight to InitialVariantWeight, undoing what autoscaling and the canary controller did
(SageMaker API reference, UpdateEndpoint,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_UpdateEndpoint.html; CloudFormation
passes the same flags from ``AWS::SageMaker::Endpoint``, see aws/aws-cdk#23151, where a CDK
deploy reset an autoscaled endpoint to its initial count). The stack therefore sets
RetainAllVariantProperties true and lists in ``ExcludeRetainedVariantProperties`` only what the
config's ``deployment.reset_on_update`` asks to reset on purpose (e.g. DesiredWeight for the
deploy that promotes a canary).

Blue/green timeline (SageMaker developer guide, "Blue/Green Deployments" and "Use canary traffic
shifting", https://docs.aws.amazon.com/sagemaker/latest/dg/deployment-guardrails-blue-green.html):
SageMaker provisions a whole new (green) fleet beside the old (blue) one, so the account's
instance quota must hold both; it then shifts traffic in steps, each followed by a baking period
of WaitIntervalInSeconds (one for ALL_AT_ONCE and CANARY, one per step for LINEAR), and terminates
the blue fleet TerminationWaitInSeconds after the last shift. The green fleet starts at the
retained desired count, or at InitialInstanceCount when DesiredInstanceCount is reset.

Autoscaling during an update ("Update endpoints that use auto scaling", SageMaker developer
guide, https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-scaling-update.html):
scaling activities cannot run while the endpoint is Updating, and an update that changes a
variant's instance type fails while that variant is registered as a scalable target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from typed_config import VARIANT_NAMES, DeploymentConfig, VariantName, VariantProperty
from typed_config.catalog import INSTANCE_CATALOG

ALL_PROPERTIES: tuple[VariantProperty, ...] = ("DesiredInstanceCount", "DesiredWeight")


def reset_properties(cfg: DeploymentConfig) -> tuple[VariantProperty, ...]:
    """ExcludeRetainedVariantProperties: what a deploy resets to the config's initial values."""
    return tuple(p for p in ALL_PROPERTIES if p in cfg.deployment.reset_on_update)


def retained_properties(cfg: DeploymentConfig) -> tuple[VariantProperty, ...]:
    """What a deploy keeps from the live endpoint (RetainAllVariantProperties minus resets)."""
    return tuple(p for p in ALL_PROPERTIES if p not in cfg.deployment.reset_on_update)


def green_fleet_size(cfg: DeploymentConfig, variant: VariantName, live_desired: int) -> int:
    """Instances the new fleet of ``variant`` is provisioned with at a deploy."""
    if "DesiredInstanceCount" in reset_properties(cfg):
        return int(cfg.variants[variant].initial_instance_count)
    return live_desired


def weights_after_update(
    cfg: DeploymentConfig, live: dict[VariantName, float]
) -> dict[VariantName, float]:
    """Variant weights once the update completes: live ones, or initial ones when reset."""
    if "DesiredWeight" in reset_properties(cfg):
        return {v: float(cfg.variants[v].initial_weight) for v in VARIANT_NAMES}
    return dict(live)


@dataclass(frozen=True)
class UpdatePhases:
    """Seconds from UpdateEndpoint: green fleet in service, last traffic shift, blue fleet gone.

    Autoscaling is blocked from 0 to ``complete`` (the endpoint is Updating)."""

    green_ready: float
    first_shift: float
    all_shifted: float
    complete: float


def shift_steps(cfg: DeploymentConfig, fleet: int) -> int:
    """Traffic steps (each followed by one baking period) for a ``fleet``-instance variant."""
    shift = cfg.deployment.traffic_shift
    if shift.type != "linear":
        return 1
    return max(1, math.ceil(fleet / max(1.0, shift.step_size_instances(fleet))))


def update_phases(cfg: DeploymentConfig, *, ready_seconds: float, fleet: int) -> UpdatePhases:
    """The blue/green timeline of one update whose green instances serve ``ready_seconds`` after
    UpdateEndpoint (provisioning + container start). Canary: one step of the green fleet, a bake,
    then the rest; linear: one bake per step; all at once: one bake after the single shift."""
    dep = cfg.deployment
    wait = dep.traffic_shift.wait_interval_seconds
    steps = shift_steps(cfg, fleet)
    if dep.traffic_shift.type == "all_at_once":
        first = ready_seconds
        shifted = ready_seconds
        complete = ready_seconds + wait + dep.termination_wait_seconds
    else:
        first = ready_seconds
        shifted = ready_seconds + steps * wait
        complete = shifted + dep.termination_wait_seconds
    return UpdatePhases(ready_seconds, first, shifted, complete)


@dataclass(frozen=True)
class DeployFootprint:
    """What one deploy costs at given fleet sizes: instances during the overlap and dollars."""

    blue: dict[VariantName, int]
    green: dict[VariantName, int]
    minutes: float
    peak_instances_by_type: dict[str, int]
    extra_cost_usd: float


def deploy_footprint(
    cfg: DeploymentConfig, *, live: dict[VariantName, int], ready_seconds: float
) -> DeployFootprint:
    """Blue + green instances (the quota a deploy needs) and the green fleet's cost while both
    run. ``live`` is each variant's desired count when the deploy starts.

    SageMaker's instance quotas are per instance type ("The account-level service limit
    'ml.g4dn.xlarge for endpoint usage' is 0 Instances", ResourceLimitExceeded from
    CreateEndpoint) and a blue/green update runs both fleets at once (FACTS.md). With instance
    pools, SageMaker places each instance on whichever pool has capacity ("Deploy to multiple
    instance types with instance pools": fallback on an insufficient capacity error, pool by
    pool), so any one type can end up holding the whole variant: each pool's type is counted
    with the variant's whole blue + green fleet, and the green fleet is priced on the dearest
    pool (an upper bound; the plan prints both)."""
    green = {v: green_fleet_size(cfg, v, live[v]) for v in VARIANT_NAMES}
    by_type: dict[str, int] = {}
    extra = 0.0
    longest = 0.0
    for v in VARIANT_NAMES:
        for itype in cfg.variants[v].pool_types:
            by_type[itype] = by_type.get(itype, 0) + live[v] + green[v]
        phases = update_phases(cfg, ready_seconds=ready_seconds, fleet=green[v])
        longest = max(longest, phases.complete)
        price = max(INSTANCE_CATALOG[t].price_per_hour for t in cfg.variants[v].pool_types)
        extra += green[v] * phases.complete / 3600 * price
    return DeployFootprint(dict(live), green, longest / 60, by_type, round(extra, 2))


def prescale_counts(
    cfg: DeploymentConfig,
    *,
    live_desired: dict[VariantName, int],
    live_weights: dict[VariantName, float],
    floors: dict[VariantName, int],
    caps: dict[VariantName, int],
) -> dict[VariantName, int]:
    """Desired counts to set before UpdateEndpoint, since autoscaling is blocked for the whole
    update ("Update endpoints that use auto scaling" suggests raising instance counts with
    UpdateEndpointWeightsAndCapacities first). Per variant, the largest of:

    - its live desired count (a deploy never lowers a fleet),
    - ``floors``: the highest minimum its schedules hold while the update runs,
    - when this deploy resets DesiredWeight: its share of today's traffic after the reset,
      ``ceil(live instances of all variants x new weight share)`` (the promotion deploy gives a
      primary that idled at weight 0 its 95% back),

    capped at ``caps`` (the scalable target's max capacity then) and never below live."""
    total = sum(live_desired.values())
    after = weights_after_update(cfg, live_weights)
    weight_sum = sum(after.values()) or 1.0
    reset_weights = "DesiredWeight" in reset_properties(cfg)
    out: dict[VariantName, int] = {}
    for v in VARIANT_NAMES:
        want = max(live_desired[v], floors.get(v, 0))
        if reset_weights:
            want = max(want, math.ceil(total * after[v] / weight_sum))
        out[v] = max(live_desired[v], min(want, caps.get(v, want)))
    return out
