"""One typed, validated DeploymentConfig from config/<env>.yaml: the only input of the stacks.

Every model forbids unknown keys (a typo fails synth instead of passing silently). Errors are
collected by pydantic and re-raised as one ``ConfigError`` whose lines each start with the YAML
path of the offending value, e.g. ``scaling.variants.primary.max_capacity: ...``.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from croniter import croniter
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from container.model_prep.validate import VLLM_LORA_RANKS
from container.serving import metrics_contract as mc
from stacks.catalog import INSTANCE_CATALOG


def _lora_rank(rank: int) -> int:
    if rank not in VLLM_LORA_RANKS:
        raise ValueError(f"rank {rank} is not one vLLM accepts {VLLM_LORA_RANKS}")
    return rank


#: A LoRA rank vLLM accepts for --max-lora-rank (the list lives with the image's adapter checks).
LoraRank = Annotated[int, AfterValidator(_lora_rank)]

_NAME = r"^[a-zA-Z][a-zA-Z0-9-]{0,62}$"
#: Within ^[A-Za-z0-9_-]+$ (model_prep.sources.ADAPTER_NAME): an adapter name becomes a directory
#: in the image, so no dot or slash can ever make it a path ("../base", "/etc").
_ADAPTER_NAME = r"^[a-zA-Z][a-zA-Z0-9_-]{0,62}$"
_SOURCE = r"^(hf://[\w.-]+/[\w.-]+|s3://[a-z0-9.-]{3,63}/.*|local://[\w./-]+)$"


#: The endpoint's two production variants; every per-variant mapping is keyed by these.
VariantName = Literal["primary", "canary"]
VARIANT_NAMES: tuple[VariantName, ...] = get_args(VariantName)


class ConfigError(ValueError):
    """A config file failed validation; the message names each offending YAML path."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


class ModelArchitecture(_Strict):
    """What the capacity model needs from the base model's config.json."""

    num_hidden_layers: Annotated[int, Field(gt=0)]
    num_attention_heads: Annotated[int, Field(gt=0)]
    num_key_value_heads: Annotated[int, Field(gt=0)]
    head_dim: Annotated[int, Field(gt=0)]
    hidden_size: Annotated[int, Field(gt=0)]
    intermediate_size: Annotated[int, Field(gt=0)]
    vocab_size: Annotated[int, Field(gt=0)]
    max_position_embeddings: Annotated[int, Field(gt=0)]
    tie_word_embeddings: bool = False

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelArchitecture:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads: ({self.num_key_value_heads}) must divide "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        return self

    @classmethod
    def from_hf_config(cls, path: Path) -> ModelArchitecture:
        raw = json.loads(path.read_text())
        heads = raw["num_attention_heads"]
        return cls(
            num_hidden_layers=raw["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=raw.get("num_key_value_heads", heads),
            head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            vocab_size=raw["vocab_size"],
            max_position_embeddings=raw["max_position_embeddings"],
            tie_word_embeddings=raw.get("tie_word_embeddings", False),
        )


class BaseModelConfig(_Strict):
    """The base LLM: where it comes from, how it is quantized, its architecture."""

    source: Annotated[str, Field(pattern=_SOURCE)]
    revision: str = "main"
    quantization: Literal["awq", "none"] = "awq"
    #: Architecture inline, or ``architecture_file``: a config.json path relative to the YAML.
    architecture: ModelArchitecture | None = None
    architecture_file: str | None = None
    quality_gate_min_agreement: Annotated[float, Field(gt=0, le=1)] = 0.9

    @model_validator(mode="after")
    def _one_architecture(self) -> BaseModelConfig:
        if (self.architecture is None) == (self.architecture_file is None):
            raise ValueError("architecture: give exactly one of architecture or architecture_file")
        return self


class AdapterConfig(_Strict):
    name: Annotated[str, Field(pattern=_ADAPTER_NAME)]
    source: Annotated[str, Field(pattern=_SOURCE)]
    rank: LoraRank


class ContextBudget(_Strict):
    """Seeds 000 scenario 5: system 400, retrieval 1,400, reserve 600; turns get the rest."""

    system_tokens: Annotated[int, Field(gt=0)] = 400
    retrieval_tokens: Annotated[int, Field(ge=0)] = 1400
    generation_reserve_tokens: Annotated[int, Field(gt=0)] = 600


class EngineConfig(_Strict):
    """vLLM engine settings; defaults are the seeds' env var table (002 section 10)."""

    gpu_memory_utilization: Annotated[float, Field(gt=0.1, le=0.98)] = 0.92
    max_model_len: Annotated[int, Field(ge=256)] = 4096
    max_num_seqs: Annotated[int, Field(ge=1, le=1024)] = 128
    max_num_batched_tokens: Annotated[int, Field(ge=256)] = 8192
    block_size: Literal[8, 16, 32, 64, 128] = 16
    enable_prefix_caching: bool = True
    max_loras: Annotated[int, Field(ge=1, le=64)] = 4
    max_lora_rank: LoraRank = 16
    #: --enforce-eager: no CUDA graphs (slower decode), so no graph memory taken from the KV cache.
    enforce_eager: bool = False
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    warmup_num_requests: Annotated[int, Field(ge=0, le=100)] = 10
    admission_max_inflight: Annotated[int, Field(ge=1)] = 256
    #: Request limits answered 413 naming the limit (MAX_REQUEST_BYTES, MAX_MESSAGES).
    max_request_bytes: Annotated[int, Field(ge=1024, le=64 * 1024 * 1024)] = 2 * 1024 * 1024
    max_messages: Annotated[int, Field(ge=1, le=100_000)] = 1024
    shutdown_timeout_seconds: Annotated[int, Field(ge=0, le=3600)] = 30
    metrics_interval_seconds: Annotated[int, Field(ge=1, le=300)] = 60
    #: Typical request shape, for capacity estimates and the simulator.
    typical_prompt_tokens: Annotated[int, Field(gt=0)] = 1200
    typical_output_tokens: Annotated[int, Field(gt=0)] = 180
    context_budget: ContextBudget = ContextBudget()

    @model_validator(mode="after")
    def _coherent(self) -> EngineConfig:
        if self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens: {self.max_num_batched_tokens} must be >= "
                f"max_model_len ({self.max_model_len}) or long prompts are never scheduled"
            )
        b = self.context_budget
        fixed = b.system_tokens + b.retrieval_tokens + b.generation_reserve_tokens
        if fixed >= self.max_model_len:
            raise ValueError(
                f"context_budget: system+retrieval+generation_reserve ({fixed}) leaves no room "
                f"for conversation turns within max_model_len ({self.max_model_len})"
            )
        if self.admission_max_inflight < self.max_num_seqs:
            raise ValueError(
                f"admission_max_inflight: {self.admission_max_inflight} must be >= "
                f"max_num_seqs ({self.max_num_seqs}) or the engine can never fill its batch"
            )
        return self


class ImageConfig(_Strict):
    """Build the image from container/ with CDK, or deploy an existing tag (CI builds once)."""

    mode: Literal["build", "tag"] = "build"
    repository_name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._/-]{1,255}$")] | None = None
    tag: Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")] | None = None
    keep_last_images: Annotated[int, Field(ge=1, le=1000)] = 20

    @model_validator(mode="after")
    def _tag_when_needed(self) -> ImageConfig:
        if self.mode == "tag" and not self.tag:
            raise ValueError("tag: mode 'tag' needs tag (the image tag CI pushed)")
        if self.mode == "build" and self.tag:
            raise ValueError("tag: only used with mode 'tag'")
        return self


class VariantConfig(_Strict):
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


class Variants(_Strict):
    primary: VariantConfig
    canary: VariantConfig

    def __getitem__(self, name: VariantName) -> VariantConfig:
        """``cfg.variants[name]``: the variant's config by its name."""
        return self.primary if name == "primary" else self.canary

    @model_validator(mode="after")
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


class TrafficShift(_Strict):
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

    @model_validator(mode="after")
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


class DeploymentPolicy(_Strict):
    """Blue/green update policy and the auto-rollback alarms (SageMaker DeploymentConfig)."""

    traffic_shift: TrafficShift = TrafficShift()
    termination_wait_seconds: Annotated[int, Field(ge=0, le=3600)] = 600
    max_execution_timeout_seconds: Annotated[int, Field(ge=600, le=14400)] = 3600
    #: Rollback when 5XX errors per minute exceed this for 2 of 3 minutes.
    rollback_5xx_errors_per_minute: Annotated[int, Field(ge=1)] = 5
    #: Rollback when ModelLatency p99 exceeds this (seeds: P99 < 2 s).
    rollback_model_latency_p99_ms: Annotated[int, Field(ge=10)] = 2000
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

    @model_validator(mode="after")
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


# ---------------------------------------------------------------- scaling


def _check_timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{value!r} is not an IANA time zone (e.g. Asia/Tokyo)") from None
    return value


#: Metrics step scaling may watch: per-variant contract metrics and SageMaker's real-time metrics.
SCALABLE_METRICS: frozenset[str] = (
    frozenset(m.name for m in mc.ALL_METRICS if m.dimensions == mc.VARIANT_DIMENSIONS)
    | mc.SAGEMAKER_INVOCATION_METRICS
    | mc.SAGEMAKER_INSTANCE_METRICS
)


def _check_metric(name: str) -> str:
    if name == "ApproximateBacklogSizePerInstance":
        raise ValueError(
            f"{name} is published for asynchronous endpoints only; a real-time endpoint "
            "scaling on it never scales"
        )
    if name not in SCALABLE_METRICS:
        raise ValueError(
            f"metric {name!r} is neither a per-variant metric of the metrics contract nor one "
            "SageMaker publishes for a real-time endpoint; known: "
            + ", ".join(sorted(SCALABLE_METRICS))
        )
    return name


class TargetTracking(_Strict):
    """Track concurrency per instance or invocations per instance.

    Concurrency target = ``target_fraction_of_concurrency`` x what one instance really runs at
    once: engine.max_num_seqs capped by the KV cache at the typical request length
    (stacks.capacity.concurrency_target). Seeds: scale out at 85%.
    """

    metric: Literal["concurrency", "invocations"] = "concurrency"
    #: For ``concurrency``: target = this fraction x engine.max_num_seqs.
    target_fraction_of_concurrency: Annotated[float, Field(gt=0, le=1)] = 0.85
    #: For ``invocations``: InvocationsPerInstance per minute.
    invocations_per_instance: Annotated[int, Field(gt=0)] = 1000
    scale_out_cooldown_seconds: Annotated[int, Field(ge=0, le=3600)] = 60
    scale_in_cooldown_seconds: Annotated[int, Field(ge=0, le=3600)] = 600
    #: False synthesizes ``DisableScaleIn``: the policy only scales out and a step policy with
    #: ``direction: in`` owns scale-in (one scale-in authority per target, VariantScaling).
    scale_in: bool = True

    @model_validator(mode="after")
    def _scale_in_slower(self) -> TargetTracking:
        if self.scale_in_cooldown_seconds < self.scale_out_cooldown_seconds:
            raise ValueError(
                f"scale_in_cooldown_seconds ({self.scale_in_cooldown_seconds}) must be >= "
                f"scale_out_cooldown_seconds ({self.scale_out_cooldown_seconds}): scale in slowly"
            )
        return self


class StepAdjustment(_Strict):
    """Bounds are offsets from the alarm threshold, like Application Auto Scaling's."""

    lower: float | None = None
    upper: float | None = None
    change: int


class StepPolicy(_Strict):
    """A step-scaling policy driven by one alarm on a contract or SageMaker metric."""

    name: Annotated[str, Field(pattern=_NAME)]
    direction: Literal["out", "in"]
    metric: str
    statistic: Literal["Average", "Maximum", "Minimum", "Sum", "p50", "p90", "p95", "p99"] = (
        "Average"
    )
    comparison: Literal[">=", ">", "<=", "<"]
    threshold: float
    period_seconds: Literal[10, 30, 60, 120, 300, 600] = 60
    evaluation_periods: Annotated[int, Field(ge=1, le=60)] = 1
    datapoints_to_alarm: Annotated[int, Field(ge=1, le=60)] | None = None
    cooldown_seconds: Annotated[int, Field(ge=0, le=3600)] = 60
    #: Extra condition that must also hold (AND), e.g. scale in only while GPU utilisation is low.
    also_require: StepCondition | None = None
    steps: Annotated[list[StepAdjustment], Field(min_length=1)]

    @field_validator("metric")
    @classmethod
    def _metric_known(cls, value: str) -> str:
        return _check_metric(value)

    @model_validator(mode="after")
    def _coherent(self) -> StepPolicy:
        if self.direction == "out" and (
            self.comparison.startswith("<") or any(s.change <= 0 for s in self.steps)
        ):
            raise ValueError("comparison: a scale-out policy needs > or >= and positive changes")
        if self.direction == "in" and (
            self.comparison.startswith(">") or any(s.change >= 0 for s in self.steps)
        ):
            raise ValueError("comparison: a scale-in policy needs < or <= and negative changes")
        if self.datapoints_to_alarm and self.datapoints_to_alarm > self.evaluation_periods:
            raise ValueError("datapoints_to_alarm: must be <= evaluation_periods")
        _check_intervals(self.steps)
        return self


class StepCondition(_Strict):
    metric: str
    statistic: Literal["Average", "Maximum", "Minimum", "Sum"] = "Average"
    comparison: Literal[">=", ">", "<=", "<"]
    threshold: float

    @field_validator("metric")
    @classmethod
    def _metric_known(cls, value: str) -> str:
        return _check_metric(value)


def _check_intervals(steps: list[StepAdjustment]) -> None:
    """Steps must be sorted, contiguous and non-overlapping; one open end at most each side."""
    lo = [float("-inf") if s.lower is None else s.lower for s in steps]
    hi = [float("inf") if s.upper is None else s.upper for s in steps]
    for i, (a, b) in enumerate(zip(lo, hi, strict=True)):
        if a >= b:
            raise ValueError(f"steps.{i}.lower: {a} must be below upper ({b})")
        if i and a != hi[i - 1]:
            kind = "overlap" if a < hi[i - 1] else "leave a gap"
            raise ValueError(
                f"steps.{i}.lower: steps {i - 1} and {i} {kind}: upper {hi[i - 1]} vs lower {a}"
            )


StepPolicy.model_rebuild()


class VariantScaling(_Strict):
    min_capacity: Annotated[int, Field(ge=1, le=100)]
    max_capacity: Annotated[int, Field(ge=1, le=100)]
    target_tracking: TargetTracking | None = TargetTracking()
    step_policies: list[StepPolicy] = []

    @model_validator(mode="after")
    def _bounds(self) -> VariantScaling:
        if self.min_capacity > self.max_capacity:
            raise ValueError(
                f"min_capacity: {self.min_capacity} must be <= max_capacity ({self.max_capacity})"
            )
        names = [p.name for p in self.step_policies]
        if len(set(names)) != len(names):
            raise ValueError(f"step_policies: names must be unique: {names}")
        authorities = self.scale_in_authorities
        if len(authorities) > 1:
            field = (
                "target_tracking.scale_in"
                if self.target_tracking is not None and self.target_tracking.scale_in
                else "step_policies"
            )
            raise ValueError(
                f"{field}: {len(authorities)} scale-in authorities on one scalable target "
                f"({', '.join(authorities)}). Application Auto Scaling runs every policy and a "
                "step scale-in is not blocked by target tracking (PutScalingPolicy), so they "
                "undo each other; keep one: target_tracking.scale_in: false lets the step "
                "policy own scale-in, or remove the step scale-in policy"
            )
        return self

    @property
    def scale_in_authorities(self) -> list[str]:
        """Every policy that can lower this target's desired capacity."""
        tt = self.target_tracking
        return (["target_tracking"] if tt is not None and tt.scale_in else []) + [
            f"step policy {p.name}" for p in self.step_policies if p.direction == "in"
        ]


def aas_cron(cron: str) -> str:
    """A 5-field cron (minute hour dom month dow, 0/7 = Sunday) as Application Auto Scaling's
    6-field ``cron(minute hour dom month dow year)``: one of dom/dow is ``?``, numeric
    days of week are 1 = Sunday .. 7 = Saturday, and ``*/n`` steps start from the field's minimum.
    """
    minute, hour, dom, month, dow = cron.split()

    def step_from(field: str, start: int) -> str:
        return f"{start}/{field[2:]}" if field.startswith("*/") else field

    def dow_number(match: re.Match[str]) -> str:
        return str(int(match.group()) % 7 + 1)

    dow = "?" if dow == "*" else re.sub(r"\d+", dow_number, dow)
    dom = "?" if dom == "*" and dow != "?" else step_from(dom, 1)
    return f"cron({step_from(minute, 0)} {step_from(hour, 0)} {dom} {step_from(month, 1)} {dow} *)"


class ScheduledAction(_Strict):
    """A recurring capacity change in local time: ``cron`` has 5 fields (m h dom mon dow)."""

    name: Annotated[str, Field(pattern=_NAME)]
    variant: VariantName = "primary"
    cron: str
    timezone: str
    min_capacity: Annotated[int, Field(ge=1, le=100)]
    max_capacity: Annotated[int, Field(ge=1, le=100)]
    #: Instances kept provisioned above min_capacity from this action until the next one.
    standby_instances: Annotated[int, Field(ge=0, le=50)] = 0

    @field_validator("timezone")
    @classmethod
    def _valid_tz(cls, value: str) -> str:
        return _check_timezone(value)

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        if len(value.split()) != 5 or not croniter.is_valid(value):
            raise ValueError(
                f"{value!r} is not a 5-field cron expression (minute hour dom mon dow)"
            )
        _, _, dom, _, dow = value.split()
        if dom != "*" and dow != "*":
            raise ValueError(
                f"{value!r} restricts both day-of-month and day-of-week; Application Auto "
                "Scaling accepts only one of them (the other becomes '?')"
            )
        if "/" in dow or re.search(r"[LW#]", value):
            raise ValueError(f"{value!r}: steps in day-of-week and L/W/# are not supported")
        if re.search(r"(?<!\d)7(?!\d)", dow):
            raise ValueError(f"{value!r}: write Sunday as 0 or SUN, not 7")
        return value

    @property
    def aas_schedule(self) -> str:
        """The schedule expression written to Application Auto Scaling (local to ``timezone``)."""
        return aas_cron(self.cron)

    @property
    def written_min_capacity(self) -> int:
        """MinCapacity written to AAS: the floor plus the standby instances kept provisioned."""
        return self.min_capacity + self.standby_instances

    def last_fire(self, when: datetime) -> datetime:
        """The latest firing at or before ``when`` (aware), as an aware UTC datetime."""
        local = (when + timedelta(seconds=1)).astimezone(ZoneInfo(self.timezone))
        return croniter(self.cron, local).get_prev(datetime).astimezone(UTC)

    def first_fire_after(self, when: datetime) -> datetime:
        """The first firing at or after ``when`` (aware), as an aware UTC datetime."""
        local = (when - timedelta(seconds=1)).astimezone(ZoneInfo(self.timezone))
        return croniter(self.cron, local).get_next(datetime).astimezone(UTC)

    @model_validator(mode="after")
    def _bounds(self) -> ScheduledAction:
        floor = self.min_capacity + self.standby_instances
        if floor > self.max_capacity:
            raise ValueError(
                f"standby_instances: min_capacity + standby_instances ({floor}) must be <= "
                f"max_capacity ({self.max_capacity})"
            )
        return self


class ReleaseEvent(_Strict):
    """A known release: pre-scale ``prescale_hours`` before, restore ``restore_after_hours``
    after."""

    name: Annotated[str, Field(pattern=_NAME)]
    variant: VariantName = "primary"
    at: datetime
    timezone: str
    prescale_hours: Annotated[float, Field(gt=0, le=48)] = 2
    restore_after_hours: Annotated[float, Field(gt=0, le=48)] = 4
    min_capacity: Annotated[int, Field(ge=1, le=100)]
    max_capacity: Annotated[int, Field(ge=1, le=100)]

    @field_validator("timezone")
    @classmethod
    def _valid_tz(cls, value: str) -> str:
        return _check_timezone(value)

    @field_validator("at")
    @classmethod
    def _naive_local(cls, value: datetime) -> datetime:
        if value.tzinfo is not None:
            raise ValueError("write 'at' as local time without an offset; 'timezone' places it")
        return value

    @model_validator(mode="after")
    def _bounds(self) -> ReleaseEvent:
        if self.min_capacity > self.max_capacity:
            raise ValueError(
                f"min_capacity: {self.min_capacity} must be <= max_capacity ({self.max_capacity})"
            )
        return self

    @property
    def window(self) -> tuple[datetime, datetime]:
        """(pre-scale, restore) as aware datetimes in ``timezone`` (elapsed hours, DST-safe)."""
        tz = ZoneInfo(self.timezone)
        at = self.at.replace(tzinfo=tz).astimezone(UTC)
        return (
            (at - timedelta(hours=self.prescale_hours)).astimezone(tz),
            (at + timedelta(hours=self.restore_after_hours)).astimezone(tz),
        )


class ScalingConfig(_Strict):
    variants: dict[VariantName, VariantScaling]
    schedules: list[ScheduledAction] = []
    release_calendar: list[ReleaseEvent] = []

    @model_validator(mode="after")
    def _within_variant_bounds(self) -> ScalingConfig:
        missing = set(VARIANT_NAMES) - set(self.variants)
        if missing:
            raise ValueError(f"variants: needs an entry for {sorted(missing)}")
        names = [s.name for s in self.schedules] + [r.name for r in self.release_calendar]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"schedules: schedule/release names must be unique: {dupes}")
        groups: tuple[tuple[str, list[ScheduledAction | ReleaseEvent]], ...] = (
            ("schedules", [*self.schedules]),
            ("release_calendar", [*self.release_calendar]),
        )
        for kind, items in groups:
            for i, item in enumerate(items):
                bound = self.variants[item.variant].max_capacity
                if item.max_capacity > bound:
                    raise ValueError(
                        f"{kind}.{i}.max_capacity: {item.max_capacity} ({item.name}) exceeds "
                        f"scaling.variants.{item.variant}.max_capacity ({bound}); raise that too"
                    )
                floor = self.variants[item.variant].min_capacity
                if item.min_capacity < floor:
                    raise ValueError(
                        f"{kind}.{i}.min_capacity: {item.min_capacity} ({item.name}) is below "
                        f"scaling.variants.{item.variant}.min_capacity ({floor}), the floor "
                        "the endpoint must never go under"
                    )
        for i, event in enumerate(self.release_calendar):
            start, end = event.window
            for j, sched in enumerate(self.schedules):
                fire = sched.first_fire_after(start)
                if sched.variant == event.variant and fire < end:
                    raise ValueError(
                        f"release_calendar.{i}: {event.name}: schedules.{j} ({sched.name}) "
                        f"fires at {fire.astimezone(start.tzinfo):%Y-%m-%d %H:%M} {event.timezone}"
                        f" inside the pre-scale window {start:%Y-%m-%d %H:%M}.."
                        f"{end:%Y-%m-%d %H:%M} and would undo it; end the window at or before it"
                    )
        return self

    def recurring_bounds_at(self, variant: VariantName, when: datetime) -> tuple[int, int]:
        """(min, max) the recurring schedules hold for ``variant`` at ``when``: the last one to
        fire at or before it, or the variant's own bounds when it has no schedule."""
        mine = [s for s in self.schedules if s.variant == variant]
        if not mine:
            base = self.variants[variant]
            return base.min_capacity, base.max_capacity
        last = max(mine, key=lambda s: s.last_fire(when))
        return last.written_min_capacity, last.max_capacity


# ---------------------------------------------------------------- rollout, smoke gate, alarms


class RolloutConfig(_Strict):
    """Progressive canary rollout driven by the canary controller Lambda."""

    steps_percent: Annotated[list[int], Field(min_length=1)] = [5, 25, 50, 75, 100]
    bake_minutes: Annotated[int, Field(ge=1, le=10080)] = 60
    check_interval_minutes: Annotated[int, Field(ge=1, le=60)] = 5
    extra_alarm_names: list[str] = []
    #: Evidence per step: the canary must have served at least this many invocations since its
    #: weight last moved (AWS/SageMaker Invocations) before it may take the next step.
    min_canary_invocations_per_step: Annotated[int, Field(ge=1)] = 100
    #: ...and its 5XX rate may exceed the primary's over the same window by at most this many
    #: percentage points, or it rolls back.
    max_error_rate_increase_percent: Annotated[float, Field(ge=0, le=100)] = 0.5
    #: After a bake, how long to wait for that evidence before rolling back a silent canary.
    evidence_timeout_minutes: Annotated[int, Field(ge=0, le=10080)] = 60

    @field_validator("steps_percent")
    @classmethod
    def _increasing(cls, steps: list[int]) -> list[int]:
        if any(not 0 < s <= 100 for s in steps) or steps != sorted(set(steps)):
            raise ValueError(f"steps_percent must be strictly increasing within 1..100: {steps}")
        return steps


class SmokeGateConfig(_Strict):
    enabled: bool = True
    prompt: str = "Recommend one action manga in one sentence."
    max_tokens: Annotated[int, Field(ge=1, le=512)] = 16
    timeout_seconds: Annotated[int, Field(ge=10, le=840)] = 300


class NotificationConfig(_Strict):
    emails: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]] = []


class MonitoringConfig(_Strict):
    """Alarm thresholds and SLO targets; defaults are the seeds' (000 section 8: alerting rules
    and SLO definitions)."""

    ttft_p95_ms: Annotated[float, Field(gt=0)] = 500
    queue_depth_critical: Annotated[float, Field(gt=0)] = 80
    kv_cache_usage_percent: Annotated[float, Field(gt=0, le=100)] = 95
    prefix_cache_hit_rate_min_percent: Annotated[float, Field(ge=0, lt=100)] = 50
    #: Adapter P95 baseline (ms) per adapter name; adapters not listed use the default.
    adapter_latency_baseline_ms: dict[str, Annotated[float, Field(gt=0)]] = {}
    default_adapter_latency_baseline_ms: Annotated[float, Field(gt=0)] = 1000
    adapter_latency_regression_factor: Annotated[float, Field(gt=1)] = 2
    slo_availability_percent: Annotated[float, Field(gt=90, lt=100)] = 99.9
    slo_ttft_p50_ms: Annotated[float, Field(gt=0)] = 200
    slo_latency_p99_ms: Annotated[float, Field(gt=0)] = 2000
    slo_queue_wait_p95_ms: Annotated[float, Field(gt=0)] = 100
    slo_error_rate_percent: Annotated[float, Field(gt=0, lt=10)] = 0.1

    def adapter_threshold_ms(self, adapter: str) -> float:
        base = self.adapter_latency_baseline_ms.get(
            adapter, self.default_adapter_latency_baseline_ms
        )
        return base * self.adapter_latency_regression_factor


# ---------------------------------------------------------------- the whole deployment


class DeploymentConfig(_Strict):
    project: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{1,30}$")]
    env: Annotated[str, Field(pattern=r"^[a-z][a-z0-9]{1,15}$")]
    region: Annotated[str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")]
    account: Annotated[str, Field(pattern=r"^\d{12}$")] | None = None
    #: Fixed endpoint name: autoscaling resource ids, alarms and operators address it by name.
    endpoint_name: Annotated[str, Field(pattern=r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")]
    model: BaseModelConfig
    adapters: Annotated[list[AdapterConfig], Field(max_length=64)] = []
    default_adapter: str | None = None
    engine: EngineConfig = EngineConfig()
    image: ImageConfig = ImageConfig()
    variants: Variants
    deployment: DeploymentPolicy = DeploymentPolicy()
    scaling: ScalingConfig
    rollout: RolloutConfig = RolloutConfig()
    smoke_gate: SmokeGateConfig = SmokeGateConfig()
    notifications: NotificationConfig = NotificationConfig()
    monitoring: MonitoringConfig = MonitoringConfig()
    #: Set by the loader from ``model.architecture_file``, never by a YAML file: left out of the
    #: JSON schema (config/schema.json) so editors do not offer it.
    resolved_architecture: SkipJsonSchema[ModelArchitecture | None] = None

    @model_validator(mode="after")
    def _cross_field(self) -> DeploymentConfig:
        names = [a.name for a in self.adapters]
        if len(set(names)) != len(names):
            raise ValueError(f"adapters: names must be unique: {names}")
        if self.default_adapter is not None and self.default_adapter not in names:
            raise ValueError(
                f"default_adapter: {self.default_adapter!r} is not one of the adapters {names}"
            )
        unknown = sorted(set(self.monitoring.adapter_latency_baseline_ms) - set(names))
        if unknown:
            raise ValueError(
                f"monitoring.adapter_latency_baseline_ms: {unknown} are not adapters {names}"
            )
        ranks = {a.rank for a in self.adapters}
        if len(ranks) > 1:
            raise ValueError(
                f"adapters: all adapters must share one rank (seeds 004 q11), got {sorted(ranks)}"
            )
        if ranks and max(ranks) > self.engine.max_lora_rank:
            raise ValueError(
                f"adapters: rank {max(ranks)} exceeds engine.max_lora_rank "
                f"({self.engine.max_lora_rank})"
            )
        if len(self.adapters) > self.engine.max_loras:
            raise ValueError(
                f"adapters: {len(self.adapters)} adapters but engine.max_loras is "
                f"{self.engine.max_loras}; every adapter must fit on the GPU at once"
            )
        arch = self.resolved_architecture or self.model.architecture
        if arch and self.engine.max_model_len > arch.max_position_embeddings:
            raise ValueError(
                f"engine.max_model_len: {self.engine.max_model_len} exceeds the model's "
                f"max_position_embeddings ({arch.max_position_embeddings})"
            )
        for vname in VARIANT_NAMES:
            variant = self.variants[vname]
            sc = self.scaling.variants[vname]
            if not sc.min_capacity <= variant.initial_instance_count <= sc.max_capacity:
                raise ValueError(
                    f"variants.{vname}.initial_instance_count: {variant.initial_instance_count} "
                    f"must lie within scaling.variants.{vname} min_capacity..max_capacity "
                    f"({sc.min_capacity}..{sc.max_capacity})"
                )
        errors = guardrail_step_errors(self)
        if errors:
            raise ValueError(errors[0])
        dep, shift = self.deployment, self.deployment.traffic_shift
        if shift.type == "linear" and shift.step_instances is not None:
            largest = max(max(self.deploy_fleet_sizes(v)) for v in VARIANT_NAMES)
            steps = -(-largest // shift.step_instances)
            needed = steps * shift.wait_interval_seconds + dep.termination_wait_seconds
            if needed > dep.max_execution_timeout_seconds:
                raise ValueError(
                    f"deployment.max_execution_timeout_seconds: {dep.max_execution_timeout_seconds}"
                    f" is shorter than {steps} linear steps of {shift.step_instances} instance(s) "
                    f"on a {largest}-instance fleet plus termination wait ({needed} s)"
                )
        return self

    def deploy_fleet_sizes(self, variant: VariantName) -> list[int]:
        """Instance counts ``variant``'s new (green) fleet can have at a deploy: the live
        desired count anywhere in its scaling bounds when counts are retained, else the
        initial count (stacks.update_semantics explains both)."""
        initial = self.variants[variant].initial_instance_count
        if "DesiredInstanceCount" in self.deployment.reset_on_update:
            return [initial]
        sc = self.scaling.variants[variant]
        return sorted({initial, *range(sc.min_capacity, sc.max_capacity + 1)})

    @property
    def architecture(self) -> ModelArchitecture:
        arch = self.resolved_architecture or self.model.architecture
        assert arch is not None  # guaranteed by the loader
        return arch


def guardrail_step_errors(cfg: DeploymentConfig) -> list[str]:
    """Every (variant, fleet size) whose blue/green step SageMaker would refuse.

    TrafficRoutingConfig (SageMaker API reference,
    https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_TrafficRoutingConfig.html):
    CanarySize "must be less than or equal to 50% of the variant's total instance count";
    LinearStepSize "must be 10-50% of the variant's total instance count". Traffic moves by
    whole instances, so a step must also turn on at least one whole instance: 10% of a
    1-instance canary variant is 0.1 instance, a size no fleet of that variant can satisfy.
    The rule applies to every variant (the update replaces every variant's fleet) at every
    fleet size a deploy can meet (DeploymentConfig.deploy_fleet_sizes).
    """
    shift = cfg.deployment.traffic_shift
    if shift.type == "all_at_once":
        return []
    field = f"deployment.traffic_shift.{shift.step_field}"
    kind, value = shift.capacity_size
    what = "CanarySize" if shift.type == "canary" else "LinearStepSize"
    low = 0.0 if shift.type == "canary" else 0.1
    errors = []
    for variant in VARIANT_NAMES:
        for fleet in cfg.deploy_fleet_sizes(variant):
            step = shift.step_size_instances(fleet)
            if step < 1 or step > fleet / 2 or step < low * fleet:
                unit = " instance(s)" if kind == "INSTANCE_COUNT" else "%"
                errors.append(
                    f"{field}: {shift.type.upper()} step {value}{unit} is {step:g} instance(s) of "
                    f"variant {variant}'s {fleet}-instance fleet; {what} must be at least one "
                    f"whole instance and {'10-' if low else '<= '}50% of the variant's instance "
                    f"count (a deploy can meet {variant} at "
                    f"{', '.join(map(str, cfg.deploy_fleet_sizes(variant)))} instances: "
                    "scaling bounds, or initial_instance_count when counts are reset)"
                )
                break
    return errors


_FIELD_PREFIX = re.compile(r"^([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*): ")


def _format_errors(path: Path, err: ValidationError) -> str:
    """One line per error: the full YAML path, then why.

    Cross-field validators start their message with the field they blame ("field: why"); that
    field is appended to the location pydantic reports (the model holding both fields).
    """
    lines = [f"{path}: {err.error_count()} invalid value(s)"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        blamed = _FIELD_PREFIX.match(msg)
        if blamed:
            loc = f"{loc}.{blamed.group(1)}" if loc else blamed.group(1)
            msg = msg[blamed.end() :]
        loc = loc or "<top level>"
        if e["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; unknown keys are errors)"
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def parse_config(raw: Any, *, env: str, source: Path, base_dir: Path) -> DeploymentConfig:
    """Validate an already-parsed YAML document."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys to values")
    data = dict(raw)
    if "resolved_architecture" in data:
        raise ConfigError(f"{source}: resolved_architecture: unknown key (set by the loader)")
    data.setdefault("env", env)
    if data["env"] != env:
        raise ConfigError(f"{source}: env: file says {data['env']!r} but {env!r} was selected")
    arch_file = (data.get("model") or {}).get("architecture_file")
    if isinstance(arch_file, str):
        arch_path = (base_dir / arch_file).resolve()
        try:
            data["resolved_architecture"] = ModelArchitecture.from_hf_config(arch_path)
        except (OSError, KeyError, json.JSONDecodeError, ValidationError) as exc:
            raise ConfigError(
                f"{source}: model.architecture_file: cannot read {arch_path}: {exc}"
            ) from None
    try:
        return DeploymentConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(source, err)) from None


def load_config(path: Path, *, env: str) -> DeploymentConfig:
    """Read and validate ``config/<env>.yaml``."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_config(raw, env=env, source=path, base_dir=path.parent)


def config_path(repo_root: Path, env: str) -> Path:
    if not re.fullmatch(r"[a-z][a-z0-9]{1,15}", env):
        raise ConfigError(f"env {env!r}: use lowercase letters and digits (e.g. dev, prod)")
    return repo_root / "config" / f"{env}.yaml"
