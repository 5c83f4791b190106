"""How one adapter version is rolled out in the component shape (``make release-adapter``).

Referenced as ``inference_components.rollout`` (the section is ic-infra's, typed_config/
components.py; it takes this model with its defaults). Each evidence figure left unset is the
canary's own (``rollout:``, typed_config/operations.py): an adapter is judged by the same rules as
a build, per adapter (tools/adapter_release/rollout.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from typed_config.base import Strict
from typed_config.operations import RolloutConfig


class AdapterRollout(Strict):
    """The candidate adapter component's bake, evidence and watch (tools/adapter_release)."""

    bake_minutes: Annotated[int, Field(ge=1, le=1440)] = 15
    """Minutes the candidate version's own component serves the probes (and the alarms are
    watched) before its evidence is judged (1-1440)."""
    check_interval_seconds: Annotated[int, Field(ge=10, le=600)] = 60
    """Seconds between looks at the alarms and the components while baking and watching."""
    min_invocations: Annotated[int, Field(ge=1)] | None = None
    """Invocations the candidate must have served in the bake (AWS/SageMaker Invocations of its
    component); the release sends this many probes. None: the canary's
    rollout.min_canary_invocations_per_step."""
    max_error_rate_increase_percent: Annotated[float, Field(ge=0, le=100)] | None = None
    """The candidate's 5XX rate may exceed the live version's over the same window by at most this
    many points. None: the canary's rollout.max_error_rate_increase_percent."""
    evidence_timeout_minutes: Annotated[int, Field(ge=0, le=1440)] = 15
    """After the bake, how long to wait for enough evidence before the candidate is rolled back."""
    watch_minutes: Annotated[int, Field(ge=0, le=1440)] = 10
    """After the live component takes the new version, how long its alarms are watched before the
    candidate component is deleted; an alarm in that time puts the previous version back."""
    component_timeout_minutes: Annotated[int, Field(ge=1, le=180)] = 30
    """How long a component may stay Creating, Updating or Deleting before the release stops."""
    alarm_names: list[str] = []
    """CloudWatch alarms whose ALARM rolls the adapter back (the stack's per-adapter alarms and
    any others), watched during the bake and the watch."""


@dataclass(frozen=True)
class AdapterEvidence:
    """The evidence thresholds in force: this section's, else the canary's."""

    min_invocations: int
    max_error_rate_increase_percent: float


def evidence_thresholds(rollout: AdapterRollout, canary: RolloutConfig) -> AdapterEvidence:
    return AdapterEvidence(
        min_invocations=rollout.min_invocations or canary.min_canary_invocations_per_step,
        max_error_rate_increase_percent=(
            canary.max_error_rate_increase_percent
            if rollout.max_error_rate_increase_percent is None
            else rollout.max_error_rate_increase_percent
        ),
    )
