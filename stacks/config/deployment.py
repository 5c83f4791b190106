"""The endpoint's variants and how a deploy replaces them (the blue/green DeploymentConfig)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from stacks.catalog import INSTANCE_CATALOG
from stacks.config.base import Strict, VariantName, section_rule


class VariantConfig(Strict):
    instance_type: str
    initial_instance_count: Annotated[int, Field(ge=1, le=100)]
    initial_weight: Annotated[float, Field(ge=0, le=100)]
    #: Image tag override for this variant (the canary often runs a newer tag).
    image_tag: Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")] | None = None
    volume_size_gb: Annotated[int, Field(ge=1, le=512)] | None = None

    @field_validator("instance_type")
    @classmethod
    def _known_instance(cls, value: str) -> str:
        if value not in INSTANCE_CATALOG:
            raise ValueError(
                f"unknown instance type {value!r}; known: {', '.join(sorted(INSTANCE_CATALOG))}"
            )
        return value


class Variants(Strict):
    primary: VariantConfig
    canary: VariantConfig

    def __getitem__(self, name: VariantName) -> VariantConfig:
        """``cfg.variants[name]``: the variant's config by its name."""
        return self.primary if name == "primary" else self.canary

    @section_rule
    def _canary_below_primary(self) -> Variants:
        if self.primary.initial_weight + self.canary.initial_weight <= 0:
            raise ValueError("primary.initial_weight: primary and canary weights cannot both be 0")
        if self.canary.initial_weight >= self.primary.initial_weight:
            raise ValueError(
                f"canary.initial_weight: {self.canary.initial_weight} must be below "
                f"primary.initial_weight ({self.primary.initial_weight})"
            )
        if self.canary.initial_instance_count > self.primary.initial_instance_count:
            raise ValueError(
                f"canary.initial_instance_count: {self.canary.initial_instance_count} must not "
                f"exceed primary.initial_instance_count ({self.primary.initial_instance_count})"
            )
        return self


#: Variant properties a blue/green update can reset to the EndpointConfig's initial values
#: (``ExcludeRetainedVariantProperties``; DataCaptureConfig is not used by this product).
VariantProperty = Literal["DesiredInstanceCount", "DesiredWeight"]


class TrafficShift(Strict):
    """The blue/green TrafficRoutingConfig. The step is ``step_percent`` of each variant's new
    fleet (CAPACITY_PERCENT) or ``step_instances`` whole instances (INSTANCE_COUNT); which sizes
    SageMaker accepts for which fleet is checked by :func:`guardrail_step_errors`."""

    type: Literal["canary", "linear", "all_at_once"] = "canary"
    #: CAPACITY_PERCENT of the new fleet shifted per step (canary size or linear step);
    #: 10 when neither this nor step_instances is given.
    step_percent: Annotated[int, Field(ge=1, le=99)] | None = None
    #: INSTANCE_COUNT per step instead of step_percent (one whole instance is the smallest canary).
    step_instances: Annotated[int, Field(ge=1, le=100)] | None = None
    wait_interval_seconds: Annotated[int, Field(ge=0, le=3600)] = 600

    @section_rule
    def _one_size(self) -> TrafficShift:
        if self.step_instances is not None and self.step_percent is not None:
            raise ValueError("step_instances: give step_percent or step_instances, not both")
        return self

    @property
    def percent(self) -> int:
        return 10 if self.step_percent is None else self.step_percent

    @property
    def step_field(self) -> str:
        """The YAML field that sizes the step."""
        return "step_instances" if self.step_instances is not None else "step_percent"

    @property
    def capacity_size(self) -> tuple[Literal["INSTANCE_COUNT", "CAPACITY_PERCENT"], int]:
        """(CapacitySize.Type, CapacitySize.Value) as written to the template."""
        if self.step_instances is not None:
            return "INSTANCE_COUNT", self.step_instances
        return "CAPACITY_PERCENT", self.percent

    def step_size_instances(self, fleet: int) -> float:
        """Instances of a ``fleet``-instance variant that one step turns on (may be fractional)."""
        kind, value = self.capacity_size
        return float(value) if kind == "INSTANCE_COUNT" else fleet * value / 100

    @property
    def shift_steps(self) -> int:
        """Baking periods of WaitIntervalInSeconds in one update (one per traffic step)."""
        if self.type == "linear":
            return -(-100 // self.percent) if self.step_instances is None else 0
        return 1


class DeploymentPolicy(Strict):
    """Blue/green update policy and the auto-rollback alarms (SageMaker DeploymentConfig)."""

    traffic_shift: TrafficShift = TrafficShift()
    termination_wait_seconds: Annotated[int, Field(ge=0, le=3600)] = 600
    max_execution_timeout_seconds: Annotated[int, Field(ge=600, le=14400)] = 3600
    #: Rollback when 5XX errors per minute exceed this for 2 of 3 minutes.
    rollback_5xx_errors_per_minute: Annotated[int, Field(ge=1)] = 5
    #: Rollback when ModelLatency p99 exceeds this. Not the latency SLO (monitoring.slo_*): a
    #: regression signal the healthy fleet must stay under, so synth refuses a value below the
    #: speed model's p99 at the scaling target x 1.25 (stacks/speed_plan.py): 17.5 s on an
    #: ml.g5.xlarge for the typical request under Poisson arrivals, so 22 s.
    rollback_model_latency_p99_ms: Annotated[int, Field(ge=10)] = 22000
    startup_health_check_timeout_seconds: Annotated[int, Field(ge=60, le=3600)] = 600
    #: What a deploy resets to the EndpointConfig's initial values. Empty (the default): every
    #: deploy keeps the live instance counts and weights (RetainAllVariantProperties). Reset on
    #: purpose, e.g. DesiredWeight for the deploy that promotes a canary (``make deploy
    #: RESET=DesiredWeight`` sets it for one deploy); see stacks.update_semantics.
    reset_on_update: list[VariantProperty] = []

    @field_validator("reset_on_update")
    @classmethod
    def _unique_reset(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"lists a property twice: {value}")
        return value

    @section_rule
    def _timeouts(self) -> DeploymentPolicy:
        shift = self.traffic_shift
        if shift.type == "linear" and shift.step_instances is not None:
            needed = self.termination_wait_seconds  # steps depend on the fleet: checked later
        else:
            needed = shift.shift_steps * shift.wait_interval_seconds + self.termination_wait_seconds
        if needed > self.max_execution_timeout_seconds:
            raise ValueError(
                f"max_execution_timeout_seconds: {self.max_execution_timeout_seconds} is shorter "
                f"than the traffic shift plus termination wait ({needed} s)"
            )
        return self
