"""The whole deployment (:class:`DeploymentConfig`) and its loader: read the YAML, resolve the
architecture file, validate, and report every error with its YAML path.

Every model forbids unknown keys (a typo fails synth instead of passing silently). Errors are
collected by pydantic and re-raised as one ``ConfigError`` whose lines each start with the YAML
path of the offending value, e.g. ``scaling.variants.primary.max_capacity: ...``.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import ErrorDetails

from typed_config.aws_limits import SAGEMAKER_INFERENCE_COMPONENT
from typed_config.base import (
    ENV_PATTERN,
    PATTERN_WORDS,
    SECTION_RULES_OFF,
    VARIANT_NAMES,
    ConfigError,
    Strict,
    VariantName,
    worded,
)
from typed_config.bedrock import BedrockConfig, bedrock_errors
from typed_config.catalog import INSTANCE_CATALOG, unknown_type_message
from typed_config.components import InferenceComponentsConfig
from typed_config.deploy_access import DeployAccessConfig
from typed_config.deployment import (
    FIRST_TURN_BYTES,
    SYSTEM_PROMPT_BYTES_PER_TOKEN,
    DeploymentPolicy,
    InstancePool,
    RoutingConfig,
    VariantConfig,
    Variants,
    prefix_floor_bytes,
)
from typed_config.error_report import ConfigSource
from typed_config.fleet import FleetConfig
from typed_config.generated_names import (
    adapter_component_name,
    base_component_name,
    bedrock_model_name_errors,
    project_env_name_errors,
)
from typed_config.model import (
    AdapterConfig,
    BaseModelConfig,
    EngineConfig,
    ImageConfig,
    ModelArchitecture,
)
from typed_config.model_catalog import (
    CATALOG_FILE,
    differences,
    known_architecture,
    local_source_dir,
    read_config_json,
    unknown_source_message,
)
from typed_config.model_prep import ModelPrepConfig, gated_source_errors
from typed_config.operations import (
    MonitoringConfig,
    NotificationConfig,
    RolloutConfig,
    SmokeGateConfig,
)
from typed_config.promotion import PromotionConfig
from typed_config.scaling import ScalingConfig
from typed_config.shadow import controller_owned_scaling_errors
from typed_config.yaml_source import LineMap, read_yaml_with_lines

#: No dash: every name and IAM grant is scoped by ``<project>-<env>-``, and env has no dash, so
#: a project without one makes that prefix one environment's only ((manga, prod) would otherwise
#: be a prefix of (manga-prod, dev): its grants and ``make bedrock-import``'s cleanup would reach
#: the other's resources). It also keeps S3's reserved ``xn--``/``sthree-`` prefixes out.
_PROJECT = worded(
    r"^[a-z][a-z0-9]{1,30}$",
    "a project name: 2-31 lowercase letters and digits starting with a letter, no dashes "
    "(<project>-<env>- must name one environment only), e.g. shop",
)
_REGION = worded(
    r"^[a-z]{2}(-[a-z]+)+-\d$",
    "an AWS region code: two letters, a place and a digit, e.g. us-east-1, eu-west-2 or "
    "ap-northeast-1",
)
_ACCOUNT = worded(r"^\d{12}$", "a 12-digit AWS account id, e.g. 123456789012")
_ENDPOINT_NAME = worded(
    r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$",
    "a SageMaker endpoint name: up to 63 letters, digits and dashes, starting and ending with a "
    "letter or digit, e.g. shop-vllm-prod",
)
#: Validation-context key under which ``parse_config`` hands DeploymentConfig the architecture it
#: read from ``model.architecture_file`` (pydantic: ``model_validate(data, context=...)``).
ARCHITECTURE_CONTEXT = "architecture_from_file"
#: Validation-context key set by ``parse_config_data``: the data is a YAML file as written (not a
#: config dumped by code), so ``model.architecture`` in it is refused.
FROM_YAML_CONTEXT = "from_yaml"
#: Validation-context key of the checks that need the capacity model
#: (``sizing.fit_checks.FIT_CHECKS``): this package sits below the sizing model and cannot import
#: it, so the sizing floor hands its checks in. ``sizing.fit_checks.load_config`` / ``parse_config``
#: / ``validate_config`` always do; a config validated without them has had only the rules this
#: package can state.
FIT_CHECKS_CONTEXT = "fit_checks"

#: One check a config must pass: each broken rule as ``field: why``.
FitCheck = Callable[["DeploymentConfig"], list[str]]


class DeploymentConfig(Strict):
    project: Annotated[str, Field(pattern=_PROJECT)]
    """The product's name: the first part of every stack and resource name
    (``<project>-<env>-...``); 2-31 lowercase letters, digits and dashes, starting with a letter."""
    env: Annotated[str, Field(pattern=ENV_PATTERN)]
    """This environment's name: must match the file's (``config/<env>.yaml``); omitted, the loader
    takes the file's. 2-16 lowercase letters and digits, starting with a letter."""
    region: Annotated[str, Field(pattern=_REGION)]
    """The AWS region the stacks deploy to, e.g. ``us-east-1``, ``eu-west-2``,
    ``ap-northeast-1``."""
    account: Annotated[str, Field(pattern=_ACCOUNT)] | None = None
    """The 12-digit AWS account id the stacks may deploy to; omitted: the account of the credentials
    at deploy time."""
    endpoint_name: Annotated[str, Field(pattern=_ENDPOINT_NAME)]
    """Fixed endpoint name: autoscaling resource ids, alarms and operators address it by name."""
    model: BaseModelConfig
    """The base model: where it comes from, its revision, quantization and architecture (the
    capacity model sizes the GPU from it)."""
    adapters: Annotated[list[AdapterConfig], Field(max_length=64)] = []
    """The LoRA adapters baked into the image, at most 64; every one is loaded on every GPU at once
    (engine.max_loras slots) and shares one rank."""
    default_adapter: str | None = None
    """The adapter that answers a request naming none (no adapter header, no body ``model``), on the
    endpoint and on the local server; one of ``adapters``. Omitted: the base model answers."""
    engine: EngineConfig = EngineConfig()
    """The vLLM engine's settings (each maps to one ``vllm serve`` flag or serving variable);
    omitted fields take the container's defaults."""
    image: ImageConfig = ImageConfig()
    """The serving image: built from container/ by CDK, or an existing tag in
    ``repository_name``."""
    model_prep: ModelPrepConfig = ModelPrepConfig()
    """The model preparation job (``make prepare-model``: fetch, quantize, quality gate, manifest)
    and its artifact bucket. Empty or omitted: the defaults."""
    variants: Variants
    """The endpoint's two production variants, ``primary`` and ``canary``: instance type, counts,
    weights."""
    deployment: DeploymentPolicy = DeploymentPolicy()
    """How a deploy replaces the variants (SageMaker's blue/green DeploymentConfig) and the alarms
    that roll it back."""
    scaling: ScalingConfig
    """Autoscaling per variant (bounds, target tracking, step policies), recurring schedules and the
    release calendar."""
    rollout: RolloutConfig = RolloutConfig()
    """The canary rollout the canary controller drives (``make canary-start``): steps, bake time,
    evidence, the optional shadow stage."""
    smoke_gate: SmokeGateConfig = SmokeGateConfig()
    """The post-deploy smoke gate: a request to every adapter before a deploy counts as done; a
    failure rolls the deploy back."""
    notifications: NotificationConfig = NotificationConfig()
    """Who is told (SNS e-mail subscriptions) when an alarm fires or a rollout ends."""
    monitoring: MonitoringConfig = MonitoringConfig()
    """Alarm thresholds and SLO targets; the SLOs also drive the scaling target and the capacity
    gate."""
    fleet: FleetConfig = FleetConfig()
    """The scenarios and SLOs the capacity gate holds the fleet to (typed_config/fleet.py)."""
    deploy_access: DeployAccessConfig | None = None
    """The GitHub Actions deploy role (DeployAccessStack); absent: no such stack."""
    promotion: PromotionConfig | None = None
    """Where this environment's releases come from (typed_config/promotion.py); absent: the release
    workflow builds them for this environment."""
    bedrock: BedrockConfig = BedrockConfig()
    """Bedrock Custom Model Import as a second target (typed_config/bedrock.py); off by default."""
    inference_components: InferenceComponentsConfig | None = None
    """The component shape (typed_config/components.py): the base model and each adapter as
    SageMaker inference components, copies scaled per component, scale to zero possible. Absent:
    the variant shape (primary and canary variants, adapters baked into the image)."""
    _file_architecture: ModelArchitecture | None = PrivateAttr(default=None)
    """The architecture read from ``model.architecture_file``: handed over by the loader in the
    validation context (``ARCHITECTURE_CONTEXT``), never a field, so no YAML file can set it and the
    JSON schema (config/schema.json) does not offer it."""
    _fit_checks: tuple[FitCheck, ...] = PrivateAttr(default=())
    """The fit checks handed in by the validation context (``FIT_CHECKS_CONTEXT``)."""
    _source: ConfigSource | None = PrivateAttr(default=None)
    """The file it was read from (``parse_config_data``): what a later rule's error names."""

    @field_validator("endpoint_name")
    @classmethod
    def _lowercase_endpoint(cls, value: str) -> str:
        """SageMaker keeps an endpoint name's case ("The name is case-insensitive in
        CreateEndpoint, but the case is preserved and must be matched in InvokeEndpoint":
        SageMaker API reference, CreateEndpoint) but writes it in lower case in the endpoint's
        ARN, while IAM compares ARNs and the log group, alarm and scaling names keep the case:
        one name in two cases would make grants that name one where AWS checks the other."""
        if value != value.lower():
            raise ValueError(
                f"{value!r} has upper case: SageMaker lowercases it in the endpoint's ARN but "
                "keeps it in the log group, alarm and scaling names the product's IAM grants "
                f"name; use {value.lower()!r}"
            )
        return value

    @model_validator(mode="after")
    def _cross_field(self, info: ValidationInfo) -> DeploymentConfig:
        """The rules across sections, every broken one reported (one line each)."""
        if info.context:
            self._file_architecture = info.context.get(ARCHITECTURE_CONTEXT)
            self._fit_checks = tuple(info.context.get(FIT_CHECKS_CONTEXT, ()))
        errors = self.architecture_errors(
            from_yaml=bool((info.context or {}).get(FROM_YAML_CONTEXT))
        )
        errors += self.cross_section_errors()
        if errors:
            raise ValueError("\n".join(errors))
        return self

    def architecture_errors(self, *, from_yaml: bool) -> list[str]:
        """The architecture must come from the model (typed_config/model_catalog.py): none
        established is refused naming ``model.source``; a config.json (or a dumped copy) that
        contradicts the catalog's figures for the same source is refused naming its field; a
        YAML file writing ``model.architecture`` is refused (it goes stale with the source)."""
        model = self.model
        if from_yaml and model.architecture is not None:
            return [
                "model.architecture: an architecture written beside model.source goes stale "
                "when the source changes (a 70B planned with an 8B's figures); delete it: the "
                f"architecture comes from the model ({CATALOG_FILE} lists known sources; for "
                "another, model.architecture_file names its config.json)"
            ]
        if self._known_architecture is None:
            return [f"model.source: {unknown_source_message(model.source)}"]
        listed = known_architecture(model.source)
        given = self._file_architecture or model.architecture
        if listed is None or given is None or given == listed[0]:
            return []
        field = "architecture_file" if model.architecture_file else "architecture"
        return [
            f"model.{field}: does not describe {model.source} ({differences(given, listed[0])}; "
            f"the second figure is the model's, {listed[1]}): a config.json of another model? "
            f"Remove model.{field} (the catalog supplies it) or point it at this model's "
            "config.json"
        ]

    def cross_section_errors(self) -> list[str]:
        """Each rule across sections this config breaks, as ``field: why``."""
        # every name AWS sees that project and env make (typed_config/generated_names.py)
        errors: list[str] = project_env_name_errors(self.project, self.env)
        names = [a.name for a in self.adapters]
        errors += self._adapter_errors(names)
        errors += self._repository_errors()
        arch = self._known_architecture
        if arch and self.engine.max_model_len > arch.max_position_embeddings:
            errors.append(
                f"engine.max_model_len: {self.engine.max_model_len} exceeds the model's "
                f"max_position_embeddings ({arch.max_position_embeddings})"
            )
        errors += self._initial_count_errors()
        errors += [
            f"fleet.candidates.{i}: {unknown_type_message(t)}"
            for i, t in enumerate(self.fleet.candidates)
            if t not in INSTANCE_CATALOG
        ]
        if self.rollout.shadow is not None and self.variants.canary.initial_weight != 0:
            errors.append(
                f"variants.canary.initial_weight: {self.variants.canary.initial_weight:g} with "
                "rollout.shadow: after the shadow stage the endpoint goes back to the canary "
                "config, whose canary comes back at its initial weight and would serve users "
                "before any canary step; set 0 (the controller's steps give it its share)"
            )
        errors += controller_owned_scaling_errors(self.rollout.shadow, self.scaling)
        errors += gated_source_errors(self.model.source, self.model_prep)
        errors += bedrock_errors(self.bedrock, region=self.region, adapters=names)
        errors += bedrock_model_name_errors(self.project, self.env, self.bedrock.models)
        for check in self._fit_checks:  # sizing.fit_checks: the checks that need the capacity model
            errors += check(self)
        errors += provision_timeout_errors(self)
        errors += routing_errors(self)
        errors += component_errors(self)
        if not errors:  # the step sizes and timeouts below assume bounds that hold
            errors += guardrail_step_errors(self)[:1]
        if not errors:
            errors += self._linear_shift_timeout_errors()
        return errors

    def _adapter_errors(self, names: list[str]) -> list[str]:
        """The adapters against each other (unique names, one rank) and against what names them
        (default_adapter, the latency baselines) or sizes their slots (engine)."""
        errors: list[str] = []
        if len(set(names)) != len(names):
            errors.append(f"adapters: names must be unique: {names}")
        if self.default_adapter is not None and self.default_adapter not in names:
            errors.append(
                f"default_adapter: {self.default_adapter!r} is not one of the adapters {names}"
            )
        unknown = sorted(set(self.monitoring.adapter_latency_baseline_ms) - set(names))
        if unknown:
            errors.append(
                f"monitoring.adapter_latency_baseline_ms: {unknown} are not adapters {names}"
            )
        ranks = [a.rank for a in self.adapters]
        if len(set(ranks)) > 1:
            # the rank most adapters share is taken as meant; each other one is named
            usual = max(sorted(set(ranks)), key=ranks.count)
            errors += [
                f"adapters.{i}.rank: {rank} differs from the other adapters' {usual}: all "
                "adapters must share one rank (vLLM sizes every LoRA slot by the largest)"
                for i, rank in enumerate(ranks)
                if rank != usual
            ]
        errors += [
            f"adapters.{i}.rank: {rank} exceeds engine.max_lora_rank ({self.engine.max_lora_rank})"
            " (raise engine.max_lora_rank, which every LoRA slot's memory is sized by)"
            for i, rank in enumerate(ranks)
            if rank > self.engine.max_lora_rank
        ]
        if len(self.adapters) > self.engine.max_loras:
            errors.append(
                f"adapters: {len(self.adapters)} adapters but engine.max_loras is "
                f"{self.engine.max_loras}; every adapter must fit on the GPU at once"
            )
        return errors

    def _repository_errors(self) -> list[str]:
        """Promotion and deploy_access: each needs this environment's own image repository."""
        errors: list[str] = []
        if self.promotion is not None and self.promotion.from_env == self.env:
            errors.append(f"promotion.from_env: {self.env} cannot promote its own release")
        if self.promotion is not None and self.image.repository_name is None:
            errors.append(
                "image.repository_name: promotion needs it: the promoted image is copied into "
                "this environment's repository"
            )
        if self.deploy_access is not None and self.image.repository_name is None:
            errors.append(
                "image.repository_name: deploy_access needs it: the deploy role may push to "
                "and read this one repository only (name it; the image stack creates it)"
            )
        return errors

    def _initial_count_errors(self) -> list[str]:
        """Each variant's initial instance count within its scaling bounds."""
        errors: list[str] = []
        for vname in VARIANT_NAMES:
            variant = self.variants[vname]
            sc = self.scaling.variants[vname]
            if not sc.min_capacity <= variant.initial_instance_count <= sc.max_capacity:
                errors.append(
                    f"variants.{vname}.initial_instance_count: {variant.initial_instance_count} "
                    f"must lie within scaling.variants.{vname} min_capacity..max_capacity "
                    f"({sc.min_capacity}..{sc.max_capacity})"
                )
        return errors

    def _linear_shift_timeout_errors(self) -> list[str]:
        """A linear traffic shift's steps over the largest fleet, plus the termination wait,
        within the deployment's max execution timeout (asked only of a config whose bounds
        hold: the fleet sizes come from them)."""
        dep, shift = self.deployment, self.deployment.traffic_shift
        if shift.type != "linear" or shift.step_instances is None:
            return []
        largest = max(max(self.deploy_fleet_sizes(v)) for v in VARIANT_NAMES)
        steps = -(-largest // shift.step_instances)
        needed = steps * shift.wait_interval_seconds + dep.termination_wait_seconds
        if needed <= dep.max_execution_timeout_seconds:
            return []
        return [
            f"deployment.max_execution_timeout_seconds: {dep.max_execution_timeout_seconds}"
            f" is shorter than {steps} linear steps of {shift.step_instances} instance(s) "
            f"on a {largest}-instance fleet plus termination wait ({needed} s)"
        ]

    def error(self, found: list[str]) -> ConfigError:
        """A rule checked after loading (``field: why`` each) as a config error: the file, the
        field as written and its line, like a loading error."""
        source = self._source or ConfigSource(Path("<config built in code>"))
        return ConfigError(source.report(found))

    def with_source_of(self, other: DeploymentConfig) -> DeploymentConfig:
        """This config (derived from ``other``: deploy options applied) reporting errors
        against ``other``'s file."""
        self._source = other._source
        return self

    def deploy_fleet_sizes(self, variant: VariantName) -> list[int]:
        """Instance counts ``variant``'s new (green) fleet can have at a deploy: the live
        desired count anywhere in its scaling bounds when counts are retained, else the
        initial count (sizing.update_semantics explains both)."""
        initial = self.variants[variant].initial_instance_count
        if "DesiredInstanceCount" in self.deployment.reset_on_update:
            return [initial]
        sc = self.scaling.variants[variant]
        return sorted({initial, *range(sc.min_capacity, sc.max_capacity + 1)})

    def for_pool(self, pool: InstancePool) -> DeploymentConfig:
        """This config with ``pool``'s engine settings (``instance_pools.<i>.engine``) in place
        of the variant's: what the pool's capacity plan, container environment and scaling
        bound are computed from. The same config when the pool sets none."""
        overrides = pool.engine.overrides()
        if not overrides:
            return self
        engine = EngineConfig.model_validate({**self.engine.model_dump(), **overrides})
        return self.model_copy(update={"engine": engine})

    @property
    def _known_architecture(self) -> ModelArchitecture | None:
        """Read by the loader (``model.architecture_file``, a ``local://`` source's
        config.json), carried in a dumped config, or the catalog's for the source (None when
        nothing establishes it: typed_config/model_catalog.py)."""
        if self._file_architecture or self.model.architecture:
            return self._file_architecture or self.model.architecture
        listed = known_architecture(self.model.source)
        return listed[0] if listed else None

    @property
    def architecture(self) -> ModelArchitecture:
        """The base model's architecture, established from the model itself
        (typed_config/model_catalog.py)."""
        arch = self._known_architecture
        assert arch is not None  # guaranteed by the loader
        return arch

    @model_serializer(mode="wrap")
    def _architecture_inline(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A dump carries the architecture read from ``architecture_file`` inline, so
        ``model_validate(cfg.model_dump())`` (deploy options, simulator variants) keeps it."""
        data: dict[str, Any] = handler(self)
        model = data.get("model")
        if self._file_architecture is not None and isinstance(model, dict):
            model.pop("architecture_file", None)
            model["architecture"] = self._file_architecture.model_dump()
        return data


def guardrail_step_errors(cfg: DeploymentConfig) -> list[str]:
    """Every (variant, fleet size) whose blue/green step SageMaker would refuse.

    TrafficRoutingConfig (SageMaker API reference,
    https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_TrafficRoutingConfig.html):
    CanarySize "must be less than or equal to 50% of the variant's total instance count";
    LinearStepSize "must be 10-50% of the variant's total instance count". Traffic moves by
    whole instances, so a step must also turn on at least one whole instance: 10% of a
    1-instance canary variant is 0.1 instance, a size no fleet of that variant can satisfy.
    The rule applies to every variant (the update replaces every variant's fleet) at every
    fleet size a deploy can meet (DeploymentConfig.deploy_fleet_sizes). Those are the only
    configs it is applied to: the shadow stage's configs (the shadow variant among them) are
    moved to by the canary controller without a deployment configuration, since a blue/green
    update cannot rename variants (lambdas/canary_controller/aws.py, ``update_endpoint``), so no
    CanarySize is ever applied to them.
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


def provision_timeout_errors(cfg: DeploymentConfig) -> list[str]:
    """Each ``variants.<name>.provision_timeout_seconds`` a blue/green update would cut short.

    The update's green fleet is provisioned like any other: SageMaker searches the pools for
    capacity for up to VariantInstanceProvisionTimeoutInSeconds, which "applies only to
    capacity provisioning and does not include the time for model download or container
    startup" (API reference, ProductionVariant), so the container's start
    (ContainerStartupHealthCheckTimeoutInSeconds) comes after it. The whole update must fit in
    MaximumExecutionTimeoutInSeconds, which "should be larger than the total waiting time
    specified in TerminationWaitInSeconds and WaitIntervalInSeconds" (API reference,
    BlueGreenUpdatePolicy). An update whose limit ends before the fallback pool's instances can
    start rolls back exactly when the fallback was needed.
    """
    dep = cfg.deployment
    shift = dep.traffic_shift
    waits = shift.shift_steps * shift.wait_interval_seconds + dep.termination_wait_seconds
    errors = []
    for vname in VARIANT_NAMES:
        timeout = cfg.variants[vname].provision_timeout_seconds
        if timeout is None:
            continue
        needed = timeout + dep.startup_health_check_timeout_seconds + waits
        if needed > dep.max_execution_timeout_seconds:
            errors.append(
                f"variants.{vname}.provision_timeout_seconds: {timeout} s of capacity search + "
                f"deployment.startup_health_check_timeout_seconds "
                f"{dep.startup_health_check_timeout_seconds} + the traffic shift and termination "
                f"wait ({waits} s) = {needed} s exceed deployment.max_execution_timeout_seconds "
                f"({dep.max_execution_timeout_seconds}): a blue/green update that must fall back "
                "to another pool would time out and roll back"
            )
    return errors


def prefix_aware_routings(
    cfg: DeploymentConfig,
) -> Iterator[tuple[str, VariantConfig, RoutingConfig]]:
    """``(field, variant, routing)`` of each variant that routes PREFIX_AWARE, ``field`` its
    YAML path (``variants.<name>.routing``): what both routing rules walk."""
    for vname in VARIANT_NAMES:
        variant = cfg.variants[vname]
        routing = variant.routing
        if routing is not None and routing.strategy == "PREFIX_AWARE":
            yield f"variants.{vname}.routing", variant, routing


def routing_errors(cfg: DeploymentConfig) -> list[str]:
    """Each PREFIX_AWARE routing (variants.<name>.routing) whose prefix the requests defeat:

    ``prefix_length_bytes`` below :func:`typed_config.deployment.prefix_floor_bytes`: every
      request starts with the same system prompt, so a prefix that ends inside it (or before
      the conversation's first turn) is the same for everyone, and SageMaker sends every request
      to one instance until ConcurrencyThreshold spills it (PrefixAwareRoutingConfig: "cover
      shared content (such as system prompts) plus enough unique content to distribute
      workloads across instances").
    ``concurrency_threshold`` against what one instance runs is a fit check
    (sizing.fit_checks.routing_threshold_errors): it needs the capacity model.
    """
    errors = []
    budget = cfg.engine.context_budget
    floor = prefix_floor_bytes(budget.system_tokens, [a.name for a in cfg.adapters])
    for field, _variant, routing in prefix_aware_routings(cfg):
        prefix = routing.prefix_length_bytes
        if prefix is not None and prefix < floor:
            errors.append(
                f"{field}.prefix_length_bytes: {prefix} bytes end inside the system prompt or "
                f"before the conversation: engine.context_budget.system_tokens "
                f"{budget.system_tokens} x {SYSTEM_PROMPT_BYTES_PER_TOKEN} bytes/token, the "
                f"body's JSON and {FIRST_TURN_BYTES} bytes of the first user turn need {floor}; "
                "a shorter prefix is the same for every conversation, so one instance takes "
                "every request until the threshold (docs/routing.md)"
            )
    return errors


_FIELD_PREFIX = re.compile(r"^([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)*): ")


def _format_errors(source: ConfigSource, errors: list[ErrorDetails]) -> str:
    """One line per mistake: the full YAML path (list items as the file names them), why, and
    the line of the file to fix (:mod:`typed_config.error_report`).

    Cross-field validators start their message with the field they blame ("field: why"); that
    field is appended to the location pydantic reports (the model holding both fields). A
    misspelt key is one mistake, not two: its "unknown key" and the "Field required" of the key
    it meant become one line that says which key was meant (:func:`_did_you_mean`).
    """
    return source.report(error_lines(errors))


def _model_at(loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The config model that holds the keys at ``loc`` (list items and mapping values walked
    through their annotations), or None where ``loc`` leaves the models."""
    current: Any = DeploymentConfig
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return None
            current = field.annotation
        elif get_origin(current) in (list, tuple) and isinstance(part, int):
            current = get_args(current)[0]
        elif get_origin(current) is dict:
            current = get_args(current)[1]
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    """``X`` from ``Annotated[X, ...]``, ``X | None`` and ``Optional[X]``."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                return annotation
            annotation = args[0]
        else:
            return annotation


def _did_you_mean(errors: list[ErrorDetails]) -> list[ErrorDetails]:
    """``errors`` with each unknown key that is a misspelling of a key its section takes told
    so, and the "Field required" of that key dropped when it was the one meant."""
    missing = {tuple(e["loc"]): e for e in errors if e["type"] == "missing"}
    meant: set[tuple[Any, ...]] = set()
    out: list[ErrorDetails] = []
    for e in errors:
        if e["type"] != "extra_forbidden":
            out.append(e)
            continue
        *parent, key = e["loc"]
        model = _model_at(tuple(parent))
        keys = sorted(model.model_fields) if model else []
        close = difflib.get_close_matches(str(key), keys, n=1, cutoff=0.75)
        if not close:
            out.append(e)
            continue
        required = (*parent, close[0]) in missing
        if required:
            meant.add((*parent, close[0]))
        hint = f"unknown key; did you mean {close[0]!r}?" + (
            f" ({close[0]} is required)" if required else ""
        )
        out.append({**e, "type": "value_error", "msg": hint})
    return [e for e in out if not (e["type"] == "missing" and tuple(e["loc"]) in meant)]


def _in_words(e: ErrorDetails) -> str:
    """The error's message; a value that does not match its field's pattern is told what a valid
    one looks like (``PATTERN_WORDS``), not shown the regular expression."""
    words = PATTERN_WORDS.get(str((e.get("ctx") or {}).get("pattern")))
    if e["type"] == "string_pattern_mismatch" and words:
        return f"{e['input']!r} is not {words}"
    return e["msg"]


def error_lines(errors: list[ErrorDetails]) -> list[str]:
    """``loc: why`` per error; a validator that found several reports them one per line."""
    out: list[str] = []
    for e in _did_you_mean(errors):
        base = ".".join(str(p) for p in e["loc"])
        for msg in _in_words(e).removeprefix("Value error, ").split("\n"):
            loc = base
            blamed = _FIELD_PREFIX.match(msg)
            if blamed:
                loc = f"{loc}.{blamed.group(1)}" if loc else blamed.group(1)
                msg = msg[blamed.end() :]
            if e["type"] == "extra_forbidden":
                msg = "unknown key (check the spelling; unknown keys are errors)"
            line = f"{loc or '<top level>'}: {msg}"
            if line not in out:
                out.append(line)
    return out


def parse_config_data(
    raw: Any,
    *,
    env: str,
    source: Path,
    base_dir: Path,
    fit_checks: Sequence[FitCheck] = (),
    lines: LineMap | None = None,
) -> DeploymentConfig:
    """Validate an already-parsed YAML document against this package's rules and
    ``fit_checks`` (``sizing.fit_checks.parse_config`` passes the capacity model's)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys to values")
    data = dict(raw)
    data.setdefault("env", env)
    if data["env"] != env:
        raise ConfigError(f"{source}: env: file says {data['env']!r} but {env!r} was selected")
    context: dict[str, Any] = {FIT_CHECKS_CONTEXT: tuple(fit_checks), FROM_YAML_CONTEXT: True}
    model_raw = data.get("model")
    model: dict[str, Any] = model_raw if isinstance(model_raw, dict) else {}
    arch_file, model_source = model.get("architecture_file"), model.get("source")
    local_dir = local_source_dir(model_source, base_dir) if isinstance(model_source, str) else None
    if isinstance(arch_file, str):
        arch_path = (base_dir / arch_file).resolve()
        try:
            context[ARCHITECTURE_CONTEXT] = read_config_json(arch_path)
        except ValueError as exc:
            raise ConfigError(f"{source}: model.architecture_file: {exc}") from None
    elif local_dir is not None and (local_dir / "config.json").is_file():
        try:  # the model's own directory: its config.json is the architecture
            context[ARCHITECTURE_CONTEXT] = read_config_json(local_dir / "config.json")
        except ValueError as exc:
            raise ConfigError(f"{source}: model.source: {exc}") from None
    where = ConfigSource(source, lines, raw)
    try:
        cfg = DeploymentConfig.model_validate(data, context=context)
    except ValidationError as err:
        errors = err.errors()
    else:
        cfg._source = where
        return cfg
    raise ConfigError(_format_errors(where, errors + _cross_section_pass(data, context, errors)))


def _cross_section_pass(
    data: dict[str, Any], context: dict[str, Any], first: list[ErrorDetails]
) -> list[ErrorDetails]:
    """The second pass: when the first failed, validate again without the unknown keys and with
    the rules within sections off (``SECTION_RULES_OFF``), and keep what the rules across
    sections (``DeploymentConfig.cross_section_errors``) add. A section that broke its own rule,
    or a typo, no longer hides them. Field errors (a wrong type, a value out of range) still do:
    the rules across sections need the values they compare."""
    if any(e["type"] not in ("value_error", "extra_forbidden") for e in first):
        return []
    stripped = copy.deepcopy(data)
    for e in first:
        if e["type"] == "extra_forbidden":
            *parents, key = e["loc"]
            holder: Any = stripped
            for part in parents:
                holder = holder[part]
            holder.pop(key, None)
    try:
        DeploymentConfig.model_validate(stripped, context={**context, SECTION_RULES_OFF: True})
    except ValidationError as err:
        return [e for e in err.errors() if e["loc"] == () and e["type"] == "value_error"]
    return []


def read_config(path: Path, *, env: str, fit_checks: Sequence[FitCheck] = ()) -> DeploymentConfig:
    """Read and validate ``config/<env>.yaml`` (duplicate keys refused: ``yaml_source``); every
    caller that acts on a config reads it through ``sizing.fit_checks.load_config``, which passes
    the fit checks."""
    raw, lines = read_yaml_with_lines(path)
    return parse_config_data(
        raw, env=env, source=path, base_dir=path.parent, fit_checks=fit_checks, lines=lines
    )


#: How a new environment's config is made from an existing one (tools/new_env.py; Makefile).
NEW_ENV_COMMAND = "make new-env ENV={env} FROM={source}"


def env_config_path(repo_root: Path, env: str) -> Path:
    """``config/<env>.yaml``, whether or not it exists (``env`` checked: letters and digits)."""
    if not re.fullmatch(ENV_PATTERN, env):
        raise ConfigError(
            f"env {env!r}: 2-16 characters, a lowercase letter then lowercase letters and digits "
            "(e.g. dev, prod, staging)"
        )
    return repo_root / "config" / f"{env}.yaml"


def existing_envs(repo_root: Path) -> list[str]:
    """The environments ``config/`` has a file for."""
    return sorted(p.stem for p in (repo_root / "config").glob("*.yaml"))


def config_path(repo_root: Path, env: str) -> Path:
    """``config/<env>.yaml``; an environment without one is an error naming the command that
    makes it from an existing environment."""
    path = env_config_path(repo_root, env)
    if not path.is_file():
        envs = existing_envs(repo_root)
        source = "dev" if "dev" in envs else (envs[0] if envs else "dev")
        raise ConfigError(
            f"{path}: no environment {env!r} (config/ has {', '.join(envs) or 'none'}). Make "
            f"one from an existing environment: {NEW_ENV_COMMAND.format(env=env, source=source)}"
            " (docs/make-it-yours.md)"
        )
    return path


def component_errors(cfg: DeploymentConfig) -> list[str]:
    """Each rule between ``inference_components`` and the rest of the config this one breaks, as
    ``field: why and the fix``; none without the section."""
    ic = cfg.inference_components
    if ic is None:
        return []
    errors = []
    primary = cfg.variants.primary
    if primary.instance_type != ic.instance_type:
        errors.append(
            f"inference_components.instance_type: {ic.instance_type} differs from "
            f"variants.primary.instance_type ({primary.instance_type}), which the capacity check "
            "and the plan size the GPU by; name the same type in both"
        )
    for vname in ("primary", "canary"):
        if cfg.variants[vname].instance_pools:
            errors.append(
                f"variants.{vname}.instance_pools: not built with inference_components (the "
                "component shape places copies on inference_components.instance_type only); "
                "remove instance_pools or the inference_components section"
            )
    if cfg.variants.canary.initial_weight != 0:
        errors.append(
            f"variants.canary.initial_weight: {cfg.variants.canary.initial_weight:g} with "
            "inference_components: the component shape has no canary variant (an adapter "
            "version rolls out on its own component: inference_components.rollout); set 0"
        )
    if cfg.rollout.shadow is not None:
        errors.append(
            "rollout.shadow: the shadow stage swaps variant endpoint configs; the component shape "
            "has none to swap; remove rollout.shadow or the inference_components section"
        )
    if cfg.scaling.schedules or cfg.scaling.release_calendar:
        field = "schedules" if cfg.scaling.schedules else "release_calendar"
        errors.append(
            f"scaling.{field}: scheduled actions set variant capacity; with "
            "inference_components SageMaker's managed instance scaling owns the instances and "
            "the copies scale on inference_components.base.copies; remove scaling.schedules "
            "and scaling.release_calendar"
        )
    errors += [
        f"scaling.variants.{v}.step_policies: variant step scaling is not built with "
        "inference_components (the copies scale on concurrent requests per copy); remove them"
        for v, sc in cfg.scaling.variants.items()
        if sc.step_policies
    ]
    if ic.base.target_requests_per_copy > cfg.engine.admission_max_inflight:
        errors.append(
            f"inference_components.base.target_requests_per_copy: "
            f"{ic.base.target_requests_per_copy:g} exceeds engine.admission_max_inflight "
            f"({cfg.engine.admission_max_inflight}): a copy refuses requests (429) before its "
            "scaling target is reached, so scale-out never fires; lower the target"
        )
    errors += _name_errors(cfg)
    for i, adapter in enumerate(cfg.adapters):
        if adapter.version is None:
            errors.append(
                f"adapters.{i}.version: required with inference_components: adapter "
                f"{adapter.name!r} is published and deployed by version "
                "(adapters/<name>/<version>/ in the models bucket); add e.g. version: v1"
            )
    return errors


def _name_errors(cfg: DeploymentConfig) -> list[str]:
    """Each component name SageMaker would refuse (InferenceComponentName: at most 63 letters,
    digits and hyphens, botocore's ``InferenceComponentName`` shape), with the fix."""
    errors = []
    base = base_component_name(cfg.project, cfg.env)
    problems = SAGEMAKER_INFERENCE_COMPONENT.problems(base)
    if problems:
        errors.append(
            f"project: {cfg.project!r} with env {cfg.env!r} makes the base component name "
            f"{base!r}, which SageMaker refuses ({'; '.join(problems)}); shorten project"
        )
    for i, adapter in enumerate(cfg.adapters):
        name = adapter_component_name(cfg.project, cfg.env, adapter.name)
        problems = SAGEMAKER_INFERENCE_COMPONENT.problems(name)
        if problems:
            room = SAGEMAKER_INFERENCE_COMPONENT.max_length - len(name) + len(adapter.name)
            errors.append(
                f"adapters.{i}.name: {adapter.name!r} makes the adapter component name {name!r}, "
                f"which SageMaker refuses ({'; '.join(problems)}; "
                f"{SAGEMAKER_INFERENCE_COMPONENT.source}); shorten the adapter name to at most "
                f"{max(room, 0)} characters"
            )
    return errors
