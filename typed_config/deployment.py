"""The endpoint's variants and how a deploy replaces them (the blue/green DeploymentConfig)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from typed_config.base import Strict, VariantName, section_rule
from typed_config.catalog import INSTANCE_CATALOG, unknown_type_message
from typed_config.model import IMAGE_TAG

#: Bytes of request body per token of an English system prompt: Llama 3's tokenizer encodes
#: English at about 4 characters per token (Meta, "The Llama 3 Herd of Models", 2024, Model
#: Architecture: compression "from 3.17 to 3.94 characters per token" over Llama 2's tokenizer;
#: DeepLearning.AI, "Introducing Multimodal Llama 3.2", lesson Tokenization: "from roughly 3.2 to
#: 4 characters per token"), and an ASCII character is one byte of JSON. Rounded up: the floor
#: below must not be met by a prefix that ends inside the system prompt. A system prompt in
#: Japanese is far longer in bytes (json.dumps escapes each character as 6 bytes of ``\uXXXX``).
SYSTEM_PROMPT_BYTES_PER_TOKEN = 4
#: How far into the first user turn the routing prefix must reach at least: 32 tokens of it, a
#: one-sentence question, so two conversations that start differently get different prefixes.
FIRST_TURN_BYTES = 128


def prefix_floor_bytes(system_tokens: int, adapters: list[str]) -> int:
    """The shortest PrefixLength that holds the system prompt and the start of the conversation
    in a body shaped as docs/routing.md says: ``{"model": <adapter>, "messages": [{"role":
    "system", ...}, {"role": "user", ...}, ...], <per-request fields>}``. The JSON around the
    two messages is measured (json.dumps, the longest adapter name), the system prompt is
    ``system_tokens`` x :data:`SYSTEM_PROMPT_BYTES_PER_TOKEN`, then :data:`FIRST_TURN_BYTES`."""
    model = max(adapters, key=len, default="")
    skeleton = {
        "model": model,
        "messages": [{"role": "system", "content": ""}, {"role": "user", "content": ""}],
    }
    framing = len(json.dumps(skeleton).encode()) - len('"}]}')
    return framing + system_tokens * SYSTEM_PROMPT_BYTES_PER_TOKEN + FIRST_TURN_BYTES


class RoutingConfig(Strict):
    """How SageMaker routes a variant's requests among its instances (ProductionVariant
    ``RoutingConfig``). Absent: no RoutingConfig in the template, so SageMaker's default, random
    routing ("By default, SageMaker endpoints have a random routing strategy": AWS Machine
    Learning blog, "Minimize real-time inference latency by using Amazon SageMaker routing
    strategies", 2023).

    SageMaker API reference, ProductionVariantRoutingConfig
    (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ProductionVariantRoutingConfig.html):
    ``LEAST_OUTSTANDING_REQUESTS`` routes to "the specific instances that have more capacity to
    process them", ``RANDOM`` to "a randomly chosen instance", ``PREFIX_AWARE`` "routes requests
    that share the same prompt prefix to the same instance. When the number of in-flight requests
    on the selected instance reaches the configured threshold, the endpoint routes the request to
    an instance with more available capacity"; PrefixAwareRoutingConfig is given "only when you
    set RoutingStrategy to PREFIX_AWARE".

    PrefixAwareRoutingConfig
    (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_PrefixAwareRoutingConfig.html):
    ``PrefixLength`` 1024-65536, "the maximum length of the prefix used for routing decisions":
    for InvokeEndpoint and InvokeEndpointWithResponseStream "the number of bytes from the
    beginning of the request body" (for the OpenAI-compatible API, characters of the messages'
    text); "Set this value to cover shared content (such as system prompts) plus enough unique
    content to distribute workloads across instances". ``ConcurrencyThreshold`` 1-1024, "the
    maximum number of in-flight requests on the target instance before the endpoint routes to
    another instance". Both "Required when RoutingStrategy is PREFIX_AWARE". CloudFormation
    (AWS::SageMaker::EndpointConfig PrefixAwareRoutingConfig): update requires replacement, like
    every EndpointConfig property here (a new config, then a blue/green update).

    The rules against the engine (DeploymentConfig.cross_section_errors, routing_errors): the
    prefix must reach past the system prompt into the conversation (:func:`prefix_floor_bytes`),
    and the threshold must not exceed what one instance runs at once.
    """

    strategy: Literal["LEAST_OUTSTANDING_REQUESTS", "RANDOM", "PREFIX_AWARE"]
    """SageMaker's routing strategy: ``LEAST_OUTSTANDING_REQUESTS``, ``RANDOM`` or ``PREFIX_AWARE``
    (the same prompt prefix to the same instance)."""
    prefix_length_bytes: Annotated[int, Field(ge=1024, le=65536)] | None = None
    """PREFIX_AWARE only: bytes from the start of the request body that pick the instance."""
    concurrency_threshold: Annotated[int, Field(ge=1, le=1024)] | None = None
    """PREFIX_AWARE only: in-flight requests on the prefix-selected instance before a request goes
    to an instance with more capacity. Omitted: derived from the variant's scaling target
    (sizing.scaling_target.spill_threshold: the target rounded up, so an instance spills only
    once it is as full as autoscaling holds it); a value below the target is refused."""

    @section_rule
    def _prefix_fields_with_prefix_aware(self) -> RoutingConfig:
        fields = ("prefix_length_bytes", "concurrency_threshold")
        given = [f for f in fields if getattr(self, f) is not None]
        if self.strategy == "PREFIX_AWARE":
            # the threshold may be left out: the scaling target's (sizing.scaling_target)
            missing = [f for f in fields[:1] if f not in given]
            if missing:
                raise ValueError(
                    "\n".join(f"{f}: required with strategy PREFIX_AWARE" for f in missing)
                )
        elif given:
            raise ValueError(
                "\n".join(
                    f"{f}: only with strategy PREFIX_AWARE (AWS refuses PrefixAwareRoutingConfig "
                    f"with {self.strategy})"
                    for f in given
                )
            )
        return self


#: Engine fields an instance pool may set for its own GPU (:class:`PoolEngine`). Everything else
#: (max_model_len, LoRA slots, adapters, the context budget, request limits) is the variant's
#: contract with its clients and stays the same on every pool: SageMaker picks the pool, the client
#: cannot tell which one answers, so a request one pool accepts every pool must accept.
POOL_ENGINE_FIELDS = (
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "enforce_eager",
    "admission_max_inflight",
)
#: ProductionVariant.InstancePools: "Array Members: Minimum number of 1 item. Maximum number of 5
#: items" (SageMaker API reference, ProductionVariant).
MAX_INSTANCE_POOLS = 5
#: BlueGreenUpdatePolicy.MaximumExecutionTimeoutInSeconds: "Valid Range: Minimum value of 600.
#: Maximum value of 28800" (SageMaker API reference, BlueGreenUpdatePolicy,
#: https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_BlueGreenUpdatePolicy.html;
#: botocore's service model says the same).
MAX_EXECUTION_TIMEOUT_LIMIT_SECONDS = 28800


def _catalog_type(value: str) -> str:
    if value not in INSTANCE_CATALOG:
        raise ValueError(unknown_type_message(value))
    return value


class PoolEngine(Strict):
    """Engine settings of one instance pool that differ from the variant's ``engine`` section
    (:data:`POOL_ENGINE_FIELDS`). A pool with any gets its own Model (its container environment
    differs), named in the pool's ``ModelNameOverride``; the synth checks the pool's capacity plan
    with them (sizing.capacity.estimate on the pool's GPU)."""

    gpu_memory_utilization: Annotated[float, Field(gt=0.1, le=0.98)] | None = None
    """This pool's engine.gpu_memory_utilization (0.1-0.98); omitted: the variant's."""
    max_num_seqs: Annotated[int, Field(ge=1, le=1024)] | None = None
    """This pool's engine.max_num_seqs; omitted: the variant's."""
    max_num_batched_tokens: Annotated[int, Field(ge=256)] | None = None
    """This pool's engine.max_num_batched_tokens; omitted: the variant's."""
    enforce_eager: bool | None = None
    """This pool's engine.enforce_eager; omitted: the variant's."""
    admission_max_inflight: Annotated[int, Field(ge=1)] | None = None
    """This pool's engine.admission_max_inflight; omitted: the variant's."""

    def overrides(self) -> dict[str, object]:
        """The fields this pool sets, as ``{field: value}`` (empty: the variant's engine)."""
        return self.model_dump(exclude_none=True)


class InstancePool(Strict):
    """One entry of ProductionVariant.InstancePools.

    SageMaker API reference, InstancePool
    (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_InstancePool.html) and the
    CloudFormation/CDK InstancePoolProperty: ``InstanceType`` (required), ``Priority``
    (required; "SageMaker attempts to provision instances in order of priority, starting with the
    lowest value ... Valid values: 1 to 5, where 1 is the highest priority") and
    ``ModelNameOverride`` ("The name of a SageMaker model to use for this instance pool instead of
    the model specified for the production variant. Use this to deploy a different model
    optimized for the instance type in this pool"), which the stack sets when ``engine`` differs.
    """

    instance_type: str
    """The pool's SageMaker instance type (ml.<family>.<size>), one of the instance catalog's."""
    priority: Annotated[int, Field(ge=1, le=5)]
    """1 (tried first) to 5: SageMaker provisions from the lowest number and falls back in order on
    insufficient capacity."""
    engine: PoolEngine = PoolEngine()
    """Engine settings for this pool's GPU; omitted fields are the variant's ``engine``."""

    _known_instance = field_validator("instance_type")(_catalog_type)


def _type_or_pools(schema: dict[str, Any]) -> None:
    """The JSON schema (config/schema.json): ``instance_type`` or ``instance_pools``, or both."""
    schema["required"] = [f for f in schema.get("required", []) if f != "instance_type"]
    schema["anyOf"] = [{"required": ["instance_type"]}, {"required": ["instance_pools"]}]


class VariantConfig(Strict):
    """One production variant.

    ``instance_type`` alone: one instance type (ProductionVariant.InstanceType). With
    ``instance_pools``, SageMaker's instance pools (SageMaker developer guide, "Deploy to
    multiple instance types with instance pools",
    https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints-heterogeneous.html): "you
    replace the InstanceType parameter in your production variant with an InstancePools list",
    so the template carries InstancePools and no InstanceType; "SageMaker AI tries to provision
    instances from the highest-priority pool (priority 1). If SageMaker AI encounters an
    insufficient capacity error (ICE) for the current instance type, it automatically falls back
    to the next pool in priority order ... until the required number of instances is
    provisioned, all pools are exhausted, or the total provisioning timeout
    (VariantInstanceProvisionTimeoutInSeconds) is reached". ``instance_type`` may then be
    omitted: it is read as the first pool's type (the one the variant runs on when capacity
    allows); given, it must be that type.

    Rules (each a synth error naming the field): at most :data:`MAX_INSTANCE_POOLS` pools (API
    reference, ProductionVariant: "Maximum number of 5 items"); priorities 1-5 (InstancePool);
    each type and each priority once (ours: a type twice is one pool, and two pools of one
    priority leave the fallback order to chance); every pool's GPU holds the model with its own
    engine settings (DeploymentConfig.cross_section_errors, the pool's capacity plan).
    """

    model_config = ConfigDict(**Strict.model_config, json_schema_extra=_type_or_pools)

    instance_type: str
    """The variant's SageMaker instance type (e.g. ml.g6e.xlarge), one of the instance catalog's;
    with instance_pools, the first pool's (may be omitted)."""
    initial_instance_count: Annotated[int, Field(ge=1, le=100)]
    """Instances the variant starts with (1-100); a deploy keeps the live count unless
    deployment.reset_on_update says otherwise."""
    initial_weight: Annotated[float, Field(ge=0, le=100)]
    """The variant's share of traffic relative to the other's (0-100); 0: it serves no users until
    the canary controller gives it a share."""
    image_tag: Annotated[str, Field(pattern=IMAGE_TAG)] | None = None
    """Image tag override for this variant (the canary often runs a newer tag)."""
    volume_size_gb: Annotated[int, Field(ge=1, le=512)] | None = None
    """The ML storage volume per instance in GB (1-512); omitted: SageMaker's default for the type
    (types with NVMe take none)."""
    routing: RoutingConfig | None = None
    """How SageMaker spreads this variant's requests over its instances (absent: random)."""
    instance_pools: (
        Annotated[
            list[InstancePool],
            Field(min_length=1, json_schema_extra={"maxItems": MAX_INSTANCE_POOLS}),
        ]
        | None
    ) = None
    """Instance types by priority that SageMaker falls back through on insufficient capacity
    (ProductionVariant.InstancePools); absent: ``instance_type`` alone."""
    provision_timeout_seconds: Annotated[int, Field(ge=300, le=3600)] | None = None
    """VariantInstanceProvisionTimeoutInSeconds: "The timeout value, in seconds, for provisioning
    instances for the production variant. When SageMaker encounters an insufficient capacity error
    while provisioning instances, it retries with the next instance pool (if configured) or waits
    until the timeout expires. This timeout applies only to capacity provisioning and does not
    include the time for model download or container startup. Valid values: 300 to 3600" (API
    reference, ProductionVariant)."""

    _known_instance = field_validator("instance_type")(_catalog_type)

    @model_validator(mode="before")
    @classmethod
    def _type_from_pools(cls, data: Any) -> Any:
        """``instance_type`` omitted beside ``instance_pools``: the first pool's type."""
        if isinstance(data, dict) and "instance_type" not in data:
            pools = data.get("instance_pools")
            if isinstance(pools, list) and pools and all(isinstance(p, dict) for p in pools):
                first = min(
                    pools,
                    key=lambda p: p.get("priority") if isinstance(p.get("priority"), int) else 99,
                )
                if "instance_type" in first:
                    return {**data, "instance_type": first["instance_type"]}
        return data

    @field_validator("instance_pools", mode="before")
    @classmethod
    def _at_most_five(cls, pools: Any) -> Any:
        """Counted before the pools are read, so six pools say so even when a sixth priority
        is out of range too."""
        if isinstance(pools, list) and len(pools) > MAX_INSTANCE_POOLS:
            raise ValueError(
                f"{len(pools)} pools; ProductionVariant.InstancePools takes at most "
                f"{MAX_INSTANCE_POOLS} (SageMaker API reference, ProductionVariant)"
            )
        return pools

    @section_rule
    def _pools_coherent(self) -> VariantConfig:
        if self.instance_pools is None:
            return self
        errors = []
        types = [p.instance_type for p in self.instance_pools]
        priorities = [p.priority for p in self.instance_pools]
        for i, pool in enumerate(self.instance_pools):
            if types.index(pool.instance_type) != i:
                errors.append(
                    f"instance_pools.{i}.instance_type: {pool.instance_type} is already pool "
                    f"item {types.index(pool.instance_type) + 1}'s; give each type once"
                )
            if priorities.index(pool.priority) != i:
                errors.append(
                    f"instance_pools.{i}.priority: {pool.priority} is already pool item "
                    f"{priorities.index(pool.priority) + 1}'s; each priority once, so the fallback "
                    "order is the one written"
                )
        first = self.pools[0].instance_type
        if not errors and self.instance_type != first:
            errors.append(
                f"instance_type: {self.instance_type} is not the first pool's type ({first}, "
                f"priority {self.pools[0].priority}); omit instance_type beside instance_pools, "
                "or name the first pool's type"
            )
        if errors:
            raise ValueError("\n".join(errors))
        return self

    @property
    def pools(self) -> tuple[InstancePool, ...]:
        """The variant's pools by priority; without ``instance_pools``, ``instance_type`` as the
        only one (priority 1, the variant's engine)."""
        if self.instance_pools is None:
            return (InstancePool(instance_type=self.instance_type, priority=1),)
        return tuple(sorted(self.instance_pools, key=lambda p: p.priority))

    @property
    def pool_types(self) -> tuple[str, ...]:
        """Instance types the variant may run on, by priority."""
        return tuple(p.instance_type for p in self.pools)

    @property
    def placement(self) -> str:
        """The types as one key, ``ml.g5.xlarge+ml.g6.xlarge`` by priority (tools/deploy.py
        compares it with the live endpoint's and pins it: ``-c pin_instance_type=``)."""
        return "+".join(self.pool_types)


class Variants(Strict):
    primary: VariantConfig
    """The variant that serves most traffic."""
    canary: VariantConfig
    """The variant a new release goes to first (the canary controller moves its weight)."""

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
    """``canary``: one step then the rest; ``linear``: equal steps; ``all_at_once``: the whole new
    fleet at once."""
    step_percent: Annotated[int, Field(ge=1, le=99)] | None = None
    """CAPACITY_PERCENT of the new fleet shifted per step (canary size or linear step); 10 when
    neither this nor step_instances is given."""
    step_instances: Annotated[int, Field(ge=1, le=100)] | None = None
    """INSTANCE_COUNT per step instead of step_percent (one whole instance is the smallest
    canary)."""
    wait_interval_seconds: Annotated[int, Field(ge=0, le=3600)] = 600
    """Seconds between traffic shift steps (the alarms are watched meanwhile)."""

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
    """How traffic moves from the old (blue) fleet to the new (green) one."""
    termination_wait_seconds: Annotated[int, Field(ge=0, le=3600)] = 600
    """Seconds the old fleet is kept after all traffic moved, for a rollback without waiting on
    instances."""
    max_execution_timeout_seconds: Annotated[
        int, Field(ge=600, le=MAX_EXECUTION_TIMEOUT_LIMIT_SECONDS)
    ] = 3600
    """Seconds a blue/green deploy may take in all (600-28800, SageMaker's range): the new
    instances' start at the plan's per-start bound (sizing.ready_bound), the traffic shift and
    the termination wait must fit."""
    rollback_5xx_errors_per_minute: Annotated[int, Field(ge=1)] = 5
    """Rollback when 5XX errors per minute exceed this for 2 of 3 minutes."""
    rollback_model_latency_p99_ms: Annotated[int, Field(ge=10)] = 22000
    """Rollback when ModelLatency p99 exceeds this. Not the latency SLO (monitoring.slo_*): a
    regression signal the healthy fleet must stay under, so synth refuses a value below the speed
    model's p99 at the scaling target x 1.25 (sizing/speed_plan.py): 17.5 s on an ml.g5.xlarge for
    the typical request under Poisson arrivals, so 22 s."""
    startup_health_check_timeout_seconds: Annotated[int, Field(ge=60, le=3600)] = 600
    """Seconds a new instance has to pass /ping (ContainerStartupHealthCheckTimeoutInSeconds): image
    pull, model load, adapters and warmup."""
    reset_on_update: list[VariantProperty] = []
    """What a deploy resets to the EndpointConfig's initial values. Empty (the default): every
    deploy keeps the live instance counts and weights (RetainAllVariantProperties). Reset on
    purpose, e.g. DesiredWeight for the deploy that promotes a canary (``make deploy
    RESET=DesiredWeight`` sets it for one deploy); see sizing.update_semantics."""

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
