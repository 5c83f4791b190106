"""The shadow variant's instance count in the shadow stage: the primary's load per instance when
the stage starts, so that both kinds of like-load latency evidence arrive.

Why. The shadow comparison judges latency at like loads only, two-sided (``shadow_compare``,
``LikeLoads``): fail evidence from minutes where the shadow's load per instance is at most the
primary's, pass evidence only from minutes where it is at least (and at most
``shadow_compare.PASS_LOAD_SLACK`` above: far above is no like load). A shadow fleet fixed at its
sampled share of the day's peak (``sizing/shadow_plan.py``) runs far below the primary's load
off-peak, so a healthy build never gets pass evidence and the stage fails at max_minutes. So the
controller sizes the shadow at

    round(sample_percent / 100 x the primary's instances in service x shadow_per_primary)

clamped to [1, the shadow config's count] (the peak size: the most the plan prices and the quota
preflight counts). ``shadow_per_primary`` is the capacity plan's ``canary_per_primary``, the
conversion the like-load rule already uses (the shadow variant is the canary's model on the
canary's instance type). Rounding to the nearest count, not up: the shadow then runs a little
above or a little below the primary's load per instance, so its loads straddle equality as the
primary scales and both fail and pass evidence arrive (rounding up would leave it
always at most the primary's: fail evidence only, the healthy build held again). Rounding is half
up (``floor(x + 0.5)``), not Python's half-to-even.

How. Once, when the stage starts: the config the stage enters is a copy of the stack's shadow
config with the shadow's InitialInstanceCount at this count for the primary's instances in
service at that moment (``aws.create_sized_config``, ``names.sized_shadow_config``); the
peak size is the stack's shadow config's count (DescribeEndpointConfig). Not afterwards:
UpdateEndpointWeightsAndCapacities documents ``DesiredWeightAndCapacity`` as "weight and capacity
values for a production variant"
(https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DesiredWeightAndCapacity.html) and
nothing documents a count change for a shadow variant (docs/limits.md). A count fixed at the
start still gives both kinds of evidence over a day: when the primary scales out the shadow's
load per instance rises above the primary's (pass evidence), when it scales in it falls below
(fail evidence); the count at the start, rounded to the nearest, sits near equality.
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
