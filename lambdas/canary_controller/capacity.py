"""The canary's capacity plan as the controller reads it, and the instance arithmetic on it.

The plan itself is derived at synth, once per run, from the config and what one instance serves
(``sizing.rollout_plan.rollout_capacity_plan``, which builds it with ``build_plan``); the stack
hands it to the Lambda as JSON in its environment (``EnvVar.CAPACITY_PLAN``:
:meth:`CapacityPlan.to_json` there, :meth:`CapacityPlan.from_json` here), and the simulator
replays the same object. What is here runs at every tick: a step's instances for the demand the
primary shows (:func:`instances_for_step`), the primary's instances before a rollback moves the
weight (:func:`primary_instances_needed`) and the bounds that raise and put them back. Pure
functions on plain data: the Lambda's decisions (``rules.decide``), the stacks and the simulator
run the same arithmetic.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from .state import PrimaryBounds


@dataclass(frozen=True)
class StepCapacity:
    """The canary's scalable-target bounds while it holds ``percent`` of the traffic."""

    percent: int
    min_capacity: int
    max_capacity: int


@dataclass(frozen=True)
class CapacityPlan:
    """Computed at synth from sizing.capacity and the config; handed to the Lambda as JSON."""

    #: Canary instances that serve what one primary instance serves (per-instance concurrency
    #: of the primary's instance type / the canary's).
    canary_per_primary: float
    primary_max: int
    #: The canary's configured bounds, restored after a rollback.
    canary_min: int
    canary_max: int
    steps: tuple[StepCapacity, ...]

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    def from_primary_max(self, percent: float) -> int:
        """Canary instances that serve ``percent`` % of what the primary's max fleet serves: a
        step's ceiling, unless the canary's own max_capacity is higher
        (``sizing.rollout_plan.build_plan``)."""
        return ceil_whole(percent / 100 * self.primary_max * self.canary_per_primary)

    @classmethod
    def from_json(cls, text: str) -> CapacityPlan:
        raw = json.loads(text)
        return cls(
            canary_per_primary=float(raw["canary_per_primary"]),
            primary_max=int(raw["primary_max"]),
            canary_min=int(raw["canary_min"]),
            canary_max=int(raw["canary_max"]),
            steps=tuple(StepCapacity(**s) for s in raw["steps"]),
        )


def ceil_whole(x: float) -> int:
    """``x`` instances rounded up, a float's noise (``2.0000000001``) not counted as one more."""
    return math.ceil(round(x, 9))


def instances_for_step(
    plan: CapacityPlan,
    index: int,
    *,
    primary_instances: int,
    primary_weight: float,
    canary_weight: float,
) -> int:
    """Canary instances step ``index`` needs before it gets its share.

    Demand is measured in primary instances: the primary's instances divided by the share of
    traffic they serve now (autoscaling sizes the primary to its share). The canary needs its
    step's share of that demand, converted to its instance type, within the step's bounds.
    """
    step = plan.steps[index]
    total = primary_weight + canary_weight
    share = primary_weight / total if total > 0 else 0.0
    demand = primary_instances / share if share > 0 else float(plan.primary_max)
    need = ceil_whole(step.percent / 100 * demand * plan.canary_per_primary)
    return min(max(need, step.min_capacity), step.max_capacity)


def primary_instances_needed(
    plan: CapacityPlan,
    *,
    primary_instances: int,
    primary_weight: float,
    canary_instances: int,
    canary_weight: float,
) -> int:
    """Primary instances a rollback gives the primary before it takes the whole traffic.

    Demand in primary instances, as :func:`instances_for_step` measures it: the primary's
    instances plus the canary's converted back (``/ canary_per_primary``), each variant counted as
    sized to its share; but no more than the primary's instances divided by its share while it has
    one, since a canary at an early step runs its step's minimum, not its share (prod: 2 canary
    instances at 5 %), and counting that floor as demand would make such a rollback wait an
    instance start for instances nobody needs. Capped at the primary's configured maximum (its
    scalable target could not hold more). Rounded to the nearest instance, not up: the primary's
    autoscaling keeps headroom per instance (target tracking below what one serves), which takes
    less than half an instance of extra load; rounding up would hold every rollback from the first
    step (primary at 95 %) an instance start for 5 % more load.

    Examples (same instance type): primary 2 at 0 %, canary 8 at 100 % -> 10, capped at 8;
    primary 4 at 50 %, canary 3 -> 7; primary 4 at 95 %, canary 1 -> 4.2 -> 4 (no wait).
    """
    demand = primary_instances + canary_instances / plan.canary_per_primary
    total = primary_weight + canary_weight
    share = primary_weight / total if total > 0 else 0.0
    if share > 0:
        demand = min(demand, primary_instances / share)
    return min(plan.primary_max, math.floor(round(demand, 9) + 0.5))


def primary_raise_bounds(need: int, live: tuple[int, int] | None) -> tuple[int, int] | None:
    """The primary's scalable-target bounds for a rollback that needs ``need`` instances, from its
    live ``(MinCapacity, MaxCapacity)``: MinCapacity raised to ``need`` (RegisterScalableTarget
    moves the count into the range, and no scale-in policy goes below it), MaxCapacity at least
    that. None: nothing to register (no scalable target, whose registration would create one; or a
    minimum already that high, never lowered)."""
    if live is None or live[0] >= need:
        return None
    return (need, max(need, live[1]))


def primary_restore_bounds(
    recorded: PrimaryBounds | None, live: tuple[int, int] | None
) -> tuple[tuple[int, int] | None, str]:
    """What the rollback puts back on the primary's scalable target once the canary's weight is 0:
    ``(bounds or None, what is said)``. ``recorded`` is the record's ``primary_bounds``
    (``before``/``set``). The bounds found before the raise come back only if the target still
    shows what the rollback set; otherwise a scheduled action or a deploy set them since, and they
    are theirs."""
    raised = recorded.get("set") if recorded else None
    if not recorded or not raised:
        return None, ""
    before, done = recorded["before"], (raised[0], raised[1])
    if before is not None and live == (before[0], before[1]):  # a restore whose record was lost
        return None, f"the primary's bounds back to {before[0]}..{before[1]}"
    if live != done:
        now = "no scalable target" if live is None else f"{live[0]}..{live[1]}"
        return None, (
            f"the primary's bounds left at {now}: changed since the rollback set "
            f"{done[0]}..{done[1]} (a scheduled action or a deploy)"
        )
    assert before is not None  # a raise is only registered on a target whose bounds were read
    return (before[0], before[1]), f"the primary's bounds back to {before[0]}..{before[1]}"
