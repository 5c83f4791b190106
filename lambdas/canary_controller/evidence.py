"""The evidence rule of a canary step: enough canary invocations, and a 5XX rate not worse than
the primary's over the same window. Pure: the controller (``rules.decide``), the simulator's
replay and the adapter release (``tools/adapter_release``) judge with the same function.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Evidence:
    """AWS/SageMaker Invocations and Invocation5XXErrors per variant over one window."""

    canary_invocations: float
    canary_errors: float
    primary_invocations: float
    primary_errors: float
    #: Why the metrics could not be read (GetMetricData failed): no evidence either way.
    error: str | None = None


@dataclass(frozen=True)
class EvidenceRules:
    min_canary_invocations: int
    #: The canary's 5XX rate may exceed the primary's by at most this many percentage points.
    max_error_rate_increase_percent: float


def judge(ev: Evidence, rules: EvidenceRules) -> tuple[str, str]:
    """``("ok" | "insufficient" | "worse", reason)``. No traffic is no evidence, never health; nor
    are metrics that could not be read."""
    if ev.error is not None:
        return "insufficient", f"the canary's metrics could not be read ({ev.error})"
    if ev.canary_invocations < rules.min_canary_invocations:
        return "insufficient", (
            f"canary served {ev.canary_invocations:.0f} invocations in the window, fewer than "
            f"the {rules.min_canary_invocations} required (rollout.min_canary_invocations_per_step)"
        )
    canary = 100 * ev.canary_errors / ev.canary_invocations
    primary = (
        100 * ev.primary_errors / ev.primary_invocations if ev.primary_invocations > 0 else 0.0
    )
    if canary > primary + rules.max_error_rate_increase_percent:
        return "worse", (
            f"canary 5XX rate {canary:.2f}% exceeds the primary's {primary:.2f}% by more than "
            f"{rules.max_error_rate_increase_percent} points "
            f"({ev.canary_errors:.0f}/{ev.canary_invocations:.0f} vs "
            f"{ev.primary_errors:.0f}/{ev.primary_invocations:.0f})"
        )
    return "ok", (
        f"{ev.canary_invocations:.0f} canary invocations, 5XX {canary:.2f}% vs primary "
        f"{primary:.2f}%"
    )
