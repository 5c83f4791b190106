"""The shadow variant's instance count during the shadow stage: it follows the primary's load per
instance, so that both kinds of like-load latency evidence arrive all day.

Why. The shadow comparison judges latency at like loads only, two-sided (``shadow_compare``,
``LikeLoads``): fail evidence from minutes where the shadow's load per instance is at most the
primary's, pass evidence only from minutes where it is at least. A shadow fleet fixed at its
sampled share of the day's peak (``sizing/shadow_plan.py``) runs far below the primary's load
off-peak, so a healthy build never gets pass evidence and the stage fails at max_minutes. So the
controller keeps the shadow's count at

    round(sample_percent / 100 x the primary's instances in service x shadow_per_primary)

clamped to [1, the shadow config's count] (the peak size: the most the plan prices and the quota
preflight counts). ``shadow_per_primary`` is the capacity plan's ``canary_per_primary``, the
conversion the like-load rule already uses (the shadow variant is the canary's model on the
canary's instance type). Rounding to the nearest count, not up: the shadow then runs sometimes a
little above and sometimes a little below the primary's load per instance, so its loads straddle
equality minute to minute and both fail and pass evidence arrive (rounding up would leave it
always at most the primary's: fail evidence only, the healthy build held again). Rounding is half
up (``floor(x + 0.5)``), not Python's half-to-even.

How. UpdateEndpointWeightsAndCapacities with the shadow variant's ``DesiredInstanceCount`` only
(``DesiredWeightAndCapacity``: VariantName required, DesiredInstanceCount and DesiredWeight both
optional, https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DesiredWeightAndCapacity.html),
never a weight; its count read from DescribeEndpoint's ``ShadowProductionVariants`` (the same
ProductionVariantSummary as a production variant's,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DescribeEndpoint.html) and the peak
size from the shadow config's (DescribeEndpointConfig). The API reference calls
DesiredWeightAndCapacity "weight and capacity values for a production variant" and says nothing
of shadow variants: that SageMaker takes a count change on one is not verified against AWS.

When. On every tick of the stage that finds the endpoint InService on the shadow config (a
``bake`` or ``hold``), when the count differs from the shadow's desired count (DescribeEndpoint's
``ShadowProductionVariants``). Never while the endpoint is Updating: those ticks ``wait``. Every
tick and not a cooldown of its own: the tick interval (``check_interval_minutes``, 5 in prod) is
already longer than the primary's scale-out cooldown (60 s), and a count change makes the endpoint
Updating until the new instances serve, which holds the next change back by itself. The cost of
that: while the shadow's instances start, the endpoint is Updating and the primary's autoscaling
waits (SageMaker applies one change at a time); a shadow scale-in is quick, a scale-out takes an
instance start.

Refusals (``decisions.py``): "not now" (ValidationException while Updating, throttling, no
answer) is asked again on a later tick; a ValidationException that refuses the request itself
(SageMaker may not take a count change on a shadow variant: not verified against AWS) is
recorded once (``shadow_fleet_refused``) and the stage carries on at the count it has, which the
like-load rule keeps safe (a good build held, never a bad one passed); AccessDenied raises as
every other call does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def tracking_count(
    sample_percent: float, primary_instances: int, shadow_per_primary: float, peak: int
) -> int:
    """The shadow's count at the primary's load per instance (module docstring): nearest, half
    up, within [1, ``peak``]."""
    exact = sample_percent / 100 * primary_instances * shadow_per_primary
    return min(peak, max(1, math.floor(round(exact, 9) + 0.5)))


@dataclass(frozen=True)
class ShadowFleet:
    """What the count is computed from: the stage's sample, the conversion, the peak size."""

    sample_percent: int
    #: Shadow instances that serve what one primary instance serves (``canary_per_primary``).
    shadow_per_primary: float
    #: The shadow config's InitialInstanceCount (sized for the sampled share of the peak).
    peak: int

    def count(self, primary_instances: int) -> int:
        return tracking_count(
            self.sample_percent, primary_instances, self.shadow_per_primary, self.peak
        )

    def why(self, primary_instances: int) -> str:
        """How the count came about, for the record."""
        exact = self.sample_percent / 100 * primary_instances * self.shadow_per_primary
        n = self.count(primary_instances)
        return (
            f"{n} instance{'' if n == 1 else 's'} for {self.sample_percent} % of the "
            f"primary's {primary_instances} in service x {self.shadow_per_primary:g} = "
            f"{exact:.3g}, rounded to nearest within 1..{self.peak} (the peak size): the "
            "primary's load per instance"
        )
