"""One typed, validated DeploymentConfig from config/<env>.yaml: the only input of the stacks.

The package by concern (each module imports only those above it):

- ``base``: the strict base model, ``ConfigError``, ``VariantName`` / ``VARIANT_NAMES``;
- ``deploy_access``: the GitHub Actions deploy role (OIDC subjects, the provider, the stack name);
- ``model``: base model, architecture, adapters, vLLM engine, image;
- ``deployment``: variants, the blue/green traffic shift and deployment policy;
- ``operations``: canary rollout, smoke gate, notifications, monitoring thresholds;
- ``timing``: local crons and time zones, scheduled actions, the release calendar, the
  ``BoundsChange`` one scheduled action makes;
- ``scaling``: target tracking, step policies, per-variant bounds, ``ScalingConfig`` and
  ``bounds_changes`` (every scheduled action of a scaling config, for the stack and the
  simulator alike);
- ``yaml_source``: the strict YAML reader (duplicate keys refused, errors name file and line);
- ``loader``: ``DeploymentConfig`` and ``load_config`` / ``parse_config``.

Import from here: ``from stacks.config import DeploymentConfig, load_config``.
"""

from stacks.config.base import VARIANT_NAMES, ConfigError, VariantName
from stacks.config.deploy_access import (
    DeployAccessConfig,
    ImmutableIds,
    deploy_access_stack_name,
    github_environments,
    github_subjects,
    pull_request_subject,
)
from stacks.config.deployment import (
    MAX_INSTANCE_POOLS,
    POOL_ENGINE_FIELDS,
    DeploymentPolicy,
    InstancePool,
    PoolEngine,
    RoutingConfig,
    TrafficShift,
    VariantConfig,
    VariantProperty,
    Variants,
    prefix_floor_bytes,
)
from stacks.config.fleet import (
    DEFAULT_SCENARIOS,
    GATE_SLOS,
    SCENARIO_NAMES,
    BestEffort,
    FleetConfig,
    GateSlo,
    MeasuredHitRate,
    ScenarioName,
)
from stacks.config.loader import (
    DeploymentConfig,
    config_path,
    guardrail_step_errors,
    load_config,
    parse_config,
    routing_errors,
)
from stacks.config.model import (
    _ADAPTER_NAME,
    AdapterConfig,
    BaseModelConfig,
    ContextBudget,
    EngineConfig,
    ImageConfig,
    LoraRank,
    ModelArchitecture,
)
from stacks.config.model_prep import (
    ModelPrepConfig,
    artifact_bucket_name,
    artifact_dir,
    artifact_location_uri,
    artifact_ref,
    artifact_version,
    release_inputs,
    release_stack_name,
)
from stacks.config.operations import (
    MetricsPath,
    MonitoringConfig,
    NotificationConfig,
    RolloutConfig,
    SmokeGateConfig,
)
from stacks.config.scaling import (
    SCALABLE_METRICS,
    ScalingConfig,
    StepAdjustment,
    StepCondition,
    StepPolicy,
    TargetTracking,
    VariantScaling,
    bounds_changes,
)
from stacks.config.timing import (
    BoundsChange,
    ReleaseEvent,
    ScheduledAction,
    aas_cron,
)

__all__ = [
    "DEFAULT_SCENARIOS",
    "GATE_SLOS",
    "MAX_INSTANCE_POOLS",
    "POOL_ENGINE_FIELDS",
    "SCALABLE_METRICS",
    "SCENARIO_NAMES",
    "VARIANT_NAMES",
    "_ADAPTER_NAME",
    "AdapterConfig",
    "BaseModelConfig",
    "BestEffort",
    "BoundsChange",
    "ConfigError",
    "ContextBudget",
    "DeployAccessConfig",
    "DeploymentConfig",
    "DeploymentPolicy",
    "EngineConfig",
    "FleetConfig",
    "GateSlo",
    "ImageConfig",
    "ImmutableIds",
    "InstancePool",
    "LoraRank",
    "MeasuredHitRate",
    "MetricsPath",
    "ModelArchitecture",
    "ModelPrepConfig",
    "MonitoringConfig",
    "NotificationConfig",
    "PoolEngine",
    "ReleaseEvent",
    "RolloutConfig",
    "RoutingConfig",
    "ScalingConfig",
    "ScenarioName",
    "ScheduledAction",
    "SmokeGateConfig",
    "StepAdjustment",
    "StepCondition",
    "StepPolicy",
    "TargetTracking",
    "TrafficShift",
    "VariantConfig",
    "VariantName",
    "VariantProperty",
    "VariantScaling",
    "Variants",
    "aas_cron",
    "artifact_bucket_name",
    "artifact_dir",
    "artifact_location_uri",
    "artifact_ref",
    "artifact_version",
    "bounds_changes",
    "config_path",
    "deploy_access_stack_name",
    "github_environments",
    "github_subjects",
    "guardrail_step_errors",
    "load_config",
    "parse_config",
    "prefix_floor_bytes",
    "pull_request_subject",
    "release_inputs",
    "release_stack_name",
    "routing_errors",
]
