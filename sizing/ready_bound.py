"""The per-start bound every deploy time and canary-controller wait uses: when an instance of a
new tag serves, from the request that asked for it, derived per config from the plan's measured
start (issue 46).

One start of a tag the instance has not cached is, per variant and per instance pool, the
scale-out line's ``planned_uncached_seconds`` (sizing.scale_out_time): AWS's cached P50 with its
assumed engine start replaced by this product's measured one at its pessimistic edge (from the
release's compile cache where the variant's GPU is the preparation job's, cold otherwise), plus
pulling this image at the instance type's seconds per GB. A pool passed over for capacity adds
``ICE_SECONDS`` per pool, as the scale-out line's fallbacks do. The bound is the slowest of those
starts plus :data:`MARGIN_SECONDS`, never below the assumed
``typed_config.instance_start.ASSUMED_READY_SECONDS`` (kept as a floor: the config's own rule on
``rollout.capacity_timeout_minutes`` is checked against it on the config's floor, where the
measured start is not known, and prod's waits were solved on it).

Who reads it (each through :func:`ready_bound` or :func:`rollout_waits`, nothing restates it):

- the blue/green update's timeline (sizing.update_semantics.update_phases): the plan's deploy
  estimate (sizing.plan_deploy), the deploy preflight's pre-scale window (tools/deploy.py), the
  shadow stage's moves (sizing.shadow_plan) and the simulator's deploys and canary instances
  (simulator.assumptions ``new_tag_seconds``);
- the canary controller's capacity, rollback-capacity and Updating deadlines
  (``RolloutConfig.capacity_timeout_seconds_for`` and its siblings), which reach the Lambda in its
  environment (stacks.constructs.canary_controller ``controller_environment``), and the default
  bound of ``make canary-wait`` (tools/canary.py).

Checked here (:func:`ready_bound_errors`, a fit check: sizing.fit_checks), because only here
does the figure exist:

- the whole blue/green update (green fleet serving at the bound, the traffic shift's bakes, the
  termination wait) must fit ``deployment.max_execution_timeout_seconds``: SageMaker's
  MaximumExecutionTimeoutInSeconds, "Maximum execution timeout for the deployment", valid range
  600 to 28800 (SageMaker API reference, BlueGreenUpdatePolicy,
  https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_BlueGreenUpdatePolicy.html;
  TerminationWaitInSeconds there is 0 to 3600). An update that outlasts it rolls back a healthy
  build; one that would need more than 28800 s cannot be configured at all;
- an explicit ``rollout.capacity_timeout_minutes`` must cover one start at the bound plus the
  check that sees it (the config's own rule holds it to the assumed floor only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sizing.scale_out_time import ICE_SECONDS, time_to_serve
from sizing.update_semantics import update_phases
from typed_config import VARIANT_NAMES, DeploymentConfig, RolloutConfig, VariantName
from typed_config.deployment import MAX_EXECUTION_TIMEOUT_LIMIT_SECONDS
from typed_config.instance_start import ASSUMED_READY_SECONDS

#: Added to the slowest planned new-tag start. Assumed, not measured: what the measured start
#: leaves out (sizing.engine_start: the real checkpoint's read from the instance's disk, 5.7 GB
#: of AWQ weights in prod against the measurement's dummy weights, and the product's entrypoint:
#: validation, the compile-cache copy, its warmup of every adapter). 60 s reads 5.7 GB at 95 MB/s.
MARGIN_SECONDS = 60.0


@dataclass(frozen=True)
class NewTagStart:
    """One variant's pool: launch to serving of a tag its instances have not cached."""

    variant: VariantName
    priority: int
    instance_type: str
    seconds: float
    with_cache: bool


@dataclass(frozen=True)
class ReadyBound:
    """The per-start bound of ``cfg`` and what it is made of."""

    seconds: float
    derived_seconds: float
    margin_seconds: float
    floor_seconds: float
    slowest: NewTagStart
    starts: tuple[NewTagStart, ...]

    @property
    def floored(self) -> bool:
        """Whether the assumed floor, not the measured start, sets the bound."""
        return self.seconds > self.derived_seconds


def new_tag_starts(cfg: DeploymentConfig) -> tuple[NewTagStart, ...]:
    """Every variant's every pool: its planned new-tag start (module docstring)."""
    out = []
    for v in VARIANT_NAMES:
        for pool in cfg.variants[v].pools:
            t = time_to_serve(cfg, v, pool.instance_type)
            passed_over = (pool.priority - 1) * ICE_SECONDS
            out.append(
                NewTagStart(
                    v,
                    pool.priority,
                    pool.instance_type,
                    t.planned_uncached_seconds + passed_over,
                    t.planned_with_cache,
                )
            )
    return tuple(out)


def ready_bound(cfg: DeploymentConfig) -> ReadyBound:
    """The per-start bound of ``cfg``: its slowest new-tag start plus :data:`MARGIN_SECONDS`, at
    least ``ASSUMED_READY_SECONDS``."""
    starts = new_tag_starts(cfg)
    slowest = max(starts, key=lambda s: s.seconds)
    derived = slowest.seconds + MARGIN_SECONDS
    return ReadyBound(
        seconds=max(derived, ASSUMED_READY_SECONDS),
        derived_seconds=derived,
        margin_seconds=MARGIN_SECONDS,
        floor_seconds=ASSUMED_READY_SECONDS,
        slowest=slowest,
        starts=starts,
    )


def ready_seconds(cfg: DeploymentConfig) -> float:
    """:func:`ready_bound`'s seconds: what a consumer passes as ``ready_seconds``."""
    return ready_bound(cfg).seconds


@dataclass(frozen=True)
class RolloutWaits:
    """The canary controller's deadlines for ``cfg`` at its per-start bound (the Lambda's
    ``CAPACITY_TIMEOUT_SECONDS``, ``ROLLBACK_CAPACITY_TIMEOUT_SECONDS``,
    ``UPDATING_TIMEOUT_SECONDS``; the simulator's rules)."""

    capacity_timeout_seconds: int
    rollback_capacity_timeout_seconds: int
    updating_timeout_seconds: int


def rollout_waits(cfg: DeploymentConfig, rollout: RolloutConfig | None = None) -> RolloutWaits:
    """``rollout``'s deadlines (``cfg.rollout`` unless given) at ``cfg``'s per-start bound."""
    ro, ready = rollout or cfg.rollout, ready_seconds(cfg)
    return RolloutWaits(
        capacity_timeout_seconds=ro.capacity_timeout_seconds_for(ready),
        rollback_capacity_timeout_seconds=ro.rollback_capacity_timeout_seconds_for(ready),
        updating_timeout_seconds=ro.updating_timeout_seconds_for(ready),
    )


def _update_seconds(cfg: DeploymentConfig, ready: float) -> float:
    """The longest blue/green update of ``cfg`` (every fleet size a deploy can meet)."""
    largest = max(max(cfg.deploy_fleet_sizes(v)) for v in VARIANT_NAMES)
    return update_phases(cfg, ready_seconds=ready, fleet=largest).complete


def ready_bound_errors(cfg: DeploymentConfig) -> list[str]:
    """The rules only the derived bound can check (module docstring), ``field: why and the
    fix`` each."""
    if cfg._known_architecture is None:
        return []  # the image's size needs the weights: the loader reports the architecture
    bound = ready_bound(cfg)
    s = bound.slowest
    start = (
        f"{bound.seconds:g} s per start (sizing.ready_bound: {s.variant}'s "
        f"{s.instance_type} serves a new tag {s.seconds:g} s after launch"
        f"{' from the compile cache' if s.with_cache else ' without a compile cache'}, "
        f"+ {bound.margin_seconds:g} s margin)"
    )
    dep = cfg.deployment
    errors = []
    update = math.ceil(_update_seconds(cfg, bound.seconds))
    # the shift and the termination wait alone past it: the config's own rules say so
    waits_fit = _update_seconds(cfg, 0) <= dep.max_execution_timeout_seconds
    if waits_fit and update > dep.max_execution_timeout_seconds:
        if update <= MAX_EXECUTION_TIMEOUT_LIMIT_SECONDS:
            fix = f"set it to {update} or more (SageMaker allows up to "
            fix += f"{MAX_EXECUTION_TIMEOUT_LIMIT_SECONDS})"
        else:
            fix = (
                f"that is above SageMaker's limit ({MAX_EXECUTION_TIMEOUT_LIMIT_SECONDS} s, "
                "BlueGreenUpdatePolicy): shorten deployment.traffic_shift.wait_interval_seconds "
                "or deployment.termination_wait_seconds, or the start (a compile cache made on "
                "the variant's GPU: model_prep.instance_type)"
            )
        errors.append(
            f"deployment.max_execution_timeout_seconds: {dep.max_execution_timeout_seconds} is "
            f"shorter than a blue/green update whose new instances serve within {start}, then "
            f"the traffic shift and termination wait ({update} s in all): SageMaker would roll "
            f"back a healthy build when the update times out; {fix}"
        )
    minutes = cfg.rollout.capacity_timeout_minutes
    least = cfg.rollout.capacity_wait_minutes(1, bound.seconds)
    if minutes is not None and minutes < least:
        errors.append(
            f"rollout.capacity_timeout_minutes: {minutes} is shorter than one instance start "
            f"({start}) plus one check ({least} min): every canary whose instances are still "
            f"starting would roll back; use {least} or more, or leave it out to derive it"
        )
    return errors
