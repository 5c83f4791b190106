"""The variant's scaling policies, evaluated the way Application Auto Scaling applies them.

At each alarm period boundary the fleet's metrics (:mod:`simulator.metrics`) are aggregated
with the alarm's statistic and the policies propose a desired capacity:

- Target tracking: scale out when ``tt_out_datapoints`` consecutive datapoints exceed the target
  (10 s datapoints of ConcurrentRequestsPerModel, or 1-minute InvocationsPerInstance) to
  ``ceil(in-service x metric / target)``; scale in when ``tt_in_datapoints`` 1-minute datapoints
  are all below ``tt_in_fraction x target``, to the same formula, at most once per scale-in
  cooldown. Its scale-out cooldown has no effect here: AAS counts capacity added during the
  cooldown towards the next scale-out, which the ``max(desired, needed)`` rule already does.
- Step scaling: the alarm is in ALARM when ``datapoints_to_alarm`` of the last
  ``evaluation_periods`` period datapoints breach (and ``also_require`` holds in the same
  period); while in ALARM the policy is invoked at every period. The step whose interval holds
  ``value - threshold`` applies (lower inclusive above the threshold, upper inclusive below).
  Scale-out during its cooldown adds only what exceeds the capacity it added at the start of
  the cooldown; scale-in during its cooldown is blocked.
- When several policies act in one period the largest scale-out wins; a scale-in applies only
  if nothing scales out, and the mildest scale-in wins (:func:`arbitrate`). Target tracking with
  ``scale_in: false`` (DisableScaleIn in the template) never proposes a scale-in.
"""

from __future__ import annotations

import math
import operator
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from container.serving import metrics_contract as mc
from simulator.assumptions import Assumptions
from simulator.metrics import SUPPORTED_METRICS, FleetMetrics
from sizing.scaling_target import concurrency_target
from typed_config import DeploymentConfig, StepPolicy, VariantName

COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


class SimulationError(ValueError):
    """The config asks for something the simulator cannot model; the message says what."""


def step_change(policy: StepPolicy, value: float) -> int | None:
    """The change of the step whose interval holds ``value - threshold`` (None: no step)."""
    diff = value - policy.threshold
    above = policy.direction == "out"
    for s in policy.steps:
        lo = -math.inf if s.lower is None else s.lower
        hi = math.inf if s.upper is None else s.upper
        if (lo <= diff < hi) if above else (lo < diff <= hi):
            return s.change
    return None


@dataclass
class StepScaling:
    """One step policy and its alarm's recent datapoints."""

    policy: StepPolicy
    ticks: int
    breaches: deque[bool]
    cooldown_until: float = -math.inf
    added_in_cooldown: int = 0

    @property
    def source(self) -> str:
        return f"step:{self.policy.name}"

    def propose(self, metrics: FleetMetrics, i: int, end: float, desired: int) -> int | None:
        """Desired capacity this policy asks for at the end of tick ``i`` (None: nothing)."""
        p = self.policy
        if end % p.period_seconds:
            return None
        value = metrics.aggregate(p.metric, p.statistic, i, self.ticks)
        if value is None:
            return None
        breach = COMPARE[p.comparison](value, p.threshold)
        if breach and p.also_require is not None:
            r = p.also_require
            other = metrics.aggregate(r.metric, r.statistic, i, self.ticks)
            breach = other is not None and COMPARE[r.comparison](other, r.threshold)
        self.breaches.append(breach)
        if sum(self.breaches) < (p.datapoints_to_alarm or p.evaluation_periods):
            return None
        change = step_change(p, value)
        if change is None:
            return None
        if p.direction == "out":
            extra = change - self.added_in_cooldown if end < self.cooldown_until else change
            return desired + extra if extra > 0 else None
        return desired + change if end >= self.cooldown_until else None

    def acted(self, end: float, old: int, new: int) -> None:
        in_cooldown = end < self.cooldown_until
        self.added_in_cooldown = (self.added_in_cooldown if in_cooldown else 0) + new - old
        self.cooldown_until = end + self.policy.cooldown_seconds


@dataclass
class TargetTracking:
    """The variant's target tracking policy and its two alarms' recent datapoints."""

    target: float
    metric: str
    out_ticks: int
    scale_in: bool
    scale_in_cooldown_seconds: float
    a: Assumptions
    out_points: deque[float | None] = field(init=False)
    in_points: deque[float | None] = field(init=False)
    in_cooldown_until: float = -math.inf
    source = "target-tracking"

    def __post_init__(self) -> None:
        self.out_points = deque(maxlen=self.a.tt_out_datapoints)
        self.in_points = deque(maxlen=self.a.tt_in_datapoints)

    def propose(
        self, metrics: FleetMetrics, i: int, end: float, n: int
    ) -> tuple[int | None, int | None]:
        """(scale-out, scale-in) desired capacity at the end of tick ``i`` with ``n`` serving."""
        dt = metrics.tick_seconds
        out = scale_in = None
        if end % (self.out_ticks * dt) == 0:
            self.out_points.append(metrics.aggregate(self.metric, "Average", i, self.out_ticks))
            last = self.out_points[-1]
            if (
                len(self.out_points) == self.out_points.maxlen
                and last is not None
                and all(v is not None and v > self.target for v in self.out_points)
            ):
                out = math.ceil(n * last / self.target)
        if end % 60 == 0 and self.scale_in:  # DisableScaleIn otherwise
            self.in_points.append(metrics.aggregate(self.metric, "Average", i, 60 // dt))
            last = self.in_points[-1]
            limit = self.a.tt_in_fraction * self.target
            if (
                len(self.in_points) == self.in_points.maxlen
                and last is not None
                and end >= self.in_cooldown_until
                and all(v is not None and v < limit for v in self.in_points)
            ):
                scale_in = max(1, math.ceil(n * last / self.target))
        return out, scale_in

    def acted(self, end: float, old: int, new: int) -> None:
        if new < old:
            self.in_cooldown_until = end + self.scale_in_cooldown_seconds


Policy = StepScaling | TargetTracking


def arbitrate(
    outs: list[tuple[int, Policy]], ins: list[tuple[int, Policy]], desired: int
) -> tuple[int, list[Policy]] | None:
    """(new desired, the policies that set it): the largest scale-out, else the mildest scale-in."""
    if outs and max(v for v, _ in outs) > desired:
        chosen = outs
    elif ins and max(v for v, _ in ins) < desired:
        chosen = ins
    else:
        return None
    new = max(v for v, _ in chosen)
    return new, [p for v, p in chosen if v == new]


def step_policies(cfg: DeploymentConfig, variant: VariantName, a: Assumptions) -> list[StepScaling]:
    """The variant's step policies the simulator replays (``--disable-policy`` left out)."""
    known = {p.name for v in cfg.scaling.variants.values() for p in v.step_policies}
    unknown = sorted(set(a.disabled_policies) - known)
    if unknown:
        raise SimulationError(
            f"--disable-policy: no step policy named {unknown} (known: {sorted(known)})"
        )
    dt = a.tick_seconds
    steps: list[StepScaling] = []
    for i, p in enumerate(cfg.scaling.variants[variant].step_policies):
        if p.name in a.disabled_policies:
            continue
        where = f"scaling.variants.{variant}.step_policies[{i}] ({p.name})"
        for metric in [p.metric] + ([p.also_require.metric] if p.also_require else []):
            if metric not in SUPPORTED_METRICS:
                raise SimulationError(
                    f"{where}: the simulator cannot model metric {metric!r}; "
                    f"it models {', '.join(sorted(SUPPORTED_METRICS))}"
                )
        if p.period_seconds % dt:
            raise SimulationError(
                f"{where}: period_seconds {p.period_seconds} is not a "
                f"multiple of the simulation tick ({dt} s)"
            )
        steps.append(StepScaling(p, p.period_seconds // dt, deque(maxlen=p.evaluation_periods)))
    return steps


def target_tracking(
    cfg: DeploymentConfig, variant: VariantName, a: Assumptions
) -> TargetTracking | None:
    """The variant's target tracking policy (None: it has none)."""
    tt = cfg.scaling.variants[variant].target_tracking
    if tt is None:
        return None
    concurrency = tt.metric == "concurrency"
    out_s = a.tt_out_datapoint_seconds or (10 if concurrency else 60)
    if out_s % a.tick_seconds or 60 % a.tick_seconds:
        raise SimulationError(
            f"target tracking datapoints ({out_s} s, 60 s) are not "
            f"multiples of the simulation tick ({a.tick_seconds} s)"
        )
    return TargetTracking(
        target=(
            concurrency_target(cfg, variant) if concurrency else float(tt.invocations_per_instance)
        ),
        metric=mc.CONCURRENT_REQUESTS_PER_MODEL if concurrency else mc.INVOCATIONS_PER_INSTANCE,
        out_ticks=out_s // a.tick_seconds,
        scale_in=tt.scale_in,
        scale_in_cooldown_seconds=tt.scale_in_cooldown_seconds,
        a=a,
    )
