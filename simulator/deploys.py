"""A deploy replayed on one variant, with SageMaker's documented blue/green semantics.

Every rule comes from sizing.update_semantics (the functions the stack, the plan and
tools/deploy.py use), applied to the config as the stack synthesizes it for that deploy
(sizing.deploy_options), so the simulator cannot drift from the template:

- ``make deploy`` first raises desired counts to what the update needs (``prescale_counts``:
  the schedules' highest minimum during the update), waits for InService, then calls
  UpdateEndpoint. A bare `cdk deploy` (``Deploy(prescale=False)``) skips that.
- UpdateEndpoint provisions a green fleet of ``green_fleet_size`` instances (the retained
  desired count, or InitialInstanceCount when DesiredInstanceCount is reset) beside the blue
  one: both are billed and both count against the instance quota until the blue fleet is
  terminated (``update_phases``).
- Traffic stays on the blue fleet's capacity until the last shift, then on the green fleet's
  (the canary step's instances serve a share of the traffic the blue fleet could serve anyway,
  so this is the conservative reading).
- Autoscaling is blocked for the whole update: alarms keep evaluating, their scaling actions and
  scheduled capacity changes do nothing until the update completes (SageMaker developer guide,
  "Update endpoints that use auto scaling").
- Weights: the simulator holds each variant's configured initial weight throughout, so resetting
  or retaining DesiredWeight changes nothing here until a canary replay moves weights.

Approximations: variants are simulated one at a time, so ``prescale_counts`` sees the other
variant at its initial count and weight, and each variant calls "its" UpdateEndpoint once its own
raised instances serve (on AWS one UpdateEndpoint waits for every variant's).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from simulator.assumptions import Assumptions
from simulator.events import Deploy
from simulator.schedule import schedule_floor
from sizing.deploy_options import DeployOptions
from sizing.update_semantics import (
    VARIANT_NAMES,
    UpdatePhases,
    green_fleet_size,
    prescale_counts,
    update_phases,
)
from typed_config import DeploymentConfig, VariantName


def deploy_config(cfg: DeploymentConfig, event: Deploy) -> DeploymentConfig:
    """The config the stack synthesizes for this deploy (its one-off reset applied)."""
    return DeployOptions(reset=event.reset).apply(cfg)


def prescale_target(
    cfg: DeploymentConfig,
    variant: VariantName,
    *,
    desired: int,
    max_capacity: int,
    now: datetime,
    a: Assumptions,
) -> int:
    """The desired count ``make deploy`` sets for ``variant`` before UpdateEndpoint."""
    window = update_phases(cfg, ready_seconds=a.new_tag_seconds(cfg), fleet=desired).complete
    floor = schedule_floor(cfg.scaling, variant, now, now + timedelta(seconds=window))
    live = {v: int(cfg.variants[v].initial_instance_count) for v in VARIANT_NAMES}
    live[variant] = desired
    weights = {v: float(cfg.variants[v].initial_weight) for v in VARIANT_NAMES}
    counts = prescale_counts(
        cfg,
        live_desired=live,
        live_weights=weights,
        floors={variant: floor},
        caps={variant: max_capacity},
    )
    return counts[variant]


@dataclass
class ActiveUpdate:
    """One blue/green update in progress on a variant (times in seconds from trace start)."""

    label: str
    start: float
    phases: UpdatePhases
    blue: list[float]
    green: list[float]

    @property
    def green_size(self) -> int:
        return len(self.green)

    def serving(self, t: float) -> int:
        fleet = self.blue if t < self.start + self.phases.all_shifted else self.green
        return sum(1 for r in fleet if r <= t)

    def launched(self) -> int:
        return len(self.blue) + len(self.green)

    def done(self, t: float) -> bool:
        return t >= self.start + self.phases.complete


def begin_update(
    cfg: DeploymentConfig,
    variant: VariantName,
    event: Deploy,
    *,
    desired: int,
    blue: list[float],
    t: float,
    a: Assumptions,
) -> ActiveUpdate:
    """UpdateEndpoint at ``t``: the green fleet is launched now and serves after provisioning."""
    size = green_fleet_size(cfg, variant, desired)
    ready = a.new_tag_seconds(cfg)
    phases = update_phases(cfg, ready_seconds=ready, fleet=size)
    return ActiveUpdate(event.label, t, phases, list(blue), [t + ready] * size)
