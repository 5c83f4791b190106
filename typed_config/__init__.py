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
- ``loader``: ``DeploymentConfig`` and ``read_config`` / ``parse_config_data``.

The package imports nothing above it (no CDK, no sizing model, no tools). The rules that need
the capacity model (can the model fit this pool, does this routing threshold fit the instance)
live one floor up in ``sizing.fit_checks``, which hands them in through the validation context:
read a config to act on it with ``sizing.fit_checks.load_config``.

Import from here: ``from typed_config import DeploymentConfig``.
"""

from typed_config.base import VARIANT_NAMES, ConfigError, VariantName
from typed_config.bedrock import IMPORT_REGIONS, BedrockConfig
from typed_config.deploy_access import DeployAccessConfig, ImmutableIds
from typed_config.deployment import (
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
from typed_config.derived import (
    artifact_bucket_name,
    artifact_location_uri,
    artifact_ref,
    artifact_version,
    bedrock_package_job_prefix,
    github_environments,
    github_subjects,
    preparation_job_prefix,
    preparation_job_version_prefix,
    pull_request_subject,
    release_inputs,
)
from typed_config.fleet import (
    DEFAULT_SCENARIOS,
    GATE_SLOS,
    SCENARIO_NAMES,
    BestEffort,
    FleetConfig,
    GateSlo,
    MeasuredHitRate,
    ScenarioName,
)
from typed_config.loader import (
    ARCHITECTURE_CONTEXT,
    FIT_CHECKS_CONTEXT,
    NEW_ENV_COMMAND,
    DeploymentConfig,
    FitCheck,
    config_path,
    env_config_path,
    existing_envs,
    guardrail_step_errors,
    parse_config_data,
    read_config,
    routing_errors,
)
from typed_config.model import (
    _ADAPTER_NAME,
    AdapterConfig,
    BaseModelConfig,
    ContextBudget,
    EngineConfig,
    ImageConfig,
    LoraRank,
    ModelArchitecture,
)
from typed_config.model_prep import ModelPrepConfig, artifact_dir
from typed_config.operations import (
    MetricsPath,
    MonitoringConfig,
    NotificationConfig,
    RolloutConfig,
    SmokeGateConfig,
)
from typed_config.promotion import PromotionConfig
from typed_config.scaling import (
    SCALABLE_METRICS,
    ScalingConfig,
    StepAdjustment,
    StepCondition,
    StepPolicy,
    TargetTracking,
    VariantScaling,
    bounds_changes,
)
from typed_config.shadow import ShadowComparison, ShadowStage
from typed_config.stack_names import (
    EXECUTION_POLICY_PARTS,
    STACK_PARTS,
    deploy_access_stack_name,
    environment_stack_names,
    execution_policy_names,
    execution_policy_stack_name,
    release_stack_name,
    stack_name,
)
from typed_config.timing import (
    BoundsChange,
    ReleaseEvent,
    ScheduledAction,
    aas_cron,
)

__all__ = [
    "ARCHITECTURE_CONTEXT",
    "DEFAULT_SCENARIOS",
    "EXECUTION_POLICY_PARTS",
    "FIT_CHECKS_CONTEXT",
    "GATE_SLOS",
    "IMPORT_REGIONS",
    "MAX_INSTANCE_POOLS",
    "NEW_ENV_COMMAND",
    "POOL_ENGINE_FIELDS",
    "SCALABLE_METRICS",
    "SCENARIO_NAMES",
    "STACK_PARTS",
    "VARIANT_NAMES",
    "_ADAPTER_NAME",
    "AdapterConfig",
    "BaseModelConfig",
    "BedrockConfig",
    "BestEffort",
    "BoundsChange",
    "ConfigError",
    "ContextBudget",
    "DeployAccessConfig",
    "DeploymentConfig",
    "DeploymentPolicy",
    "EngineConfig",
    "FitCheck",
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
    "PromotionConfig",
    "ReleaseEvent",
    "RolloutConfig",
    "RoutingConfig",
    "ScalingConfig",
    "ScenarioName",
    "ScheduledAction",
    "ShadowComparison",
    "ShadowStage",
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
    "bedrock_package_job_prefix",
    "bounds_changes",
    "config_path",
    "deploy_access_stack_name",
    "env_config_path",
    "environment_stack_names",
    "execution_policy_names",
    "execution_policy_stack_name",
    "existing_envs",
    "github_environments",
    "github_subjects",
    "guardrail_step_errors",
    "parse_config_data",
    "prefix_floor_bytes",
    "preparation_job_prefix",
    "preparation_job_version_prefix",
    "pull_request_subject",
    "read_config",
    "release_inputs",
    "release_stack_name",
    "routing_errors",
    "stack_name",
]
