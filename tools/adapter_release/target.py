"""What one adapter release acts on: the endpoint, its base component, the adapter's live
component and its candidate component, and the rollout settings, read from the config in one
place.

The names are the shared contract (typed_config/generated_names.py: ``base_component_name``,
``adapter_component_name``, ``adapter_artifact_key``). The settings are
``inference_components.rollout`` (typed_config/components.py, typed by
typed_config/adapter_rollout.py), its defaults where the config leaves it out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from typed_config import ConfigError, DeploymentConfig
from typed_config.adapter_rollout import (
    AdapterEvidence,
    AdapterRollout,
    evidence_thresholds,
)
from typed_config.generated_names import (
    adapter_artifact_key,
    adapter_component_name,
    base_component_name,
)

#: An InferenceComponentName: letters, digits and hyphens, at most 63 (botocore's sagemaker
#: service model, shape InferenceComponentName).
COMPONENT_NAME = re.compile(r"[a-zA-Z0-9]([\-a-zA-Z0-9]*[a-zA-Z0-9])?")
COMPONENT_NAME_MAX = 63
#: The candidate component's suffix: one candidate per adapter at a time, so a second release of
#: the same adapter is refused by SageMaker itself (a name exists once) while one is under way.
CANDIDATE_SUFFIX = "-next"


@dataclass(frozen=True)
class ReleaseTarget:
    adapter: str
    version: str
    endpoint: str
    base_component: str
    live_component: str
    candidate_component: str
    rollout: AdapterRollout
    evidence: AdapterEvidence

    def artifact_key(self) -> str:
        return adapter_artifact_key(self.adapter, self.version)


def rollout_settings(cfg: DeploymentConfig) -> AdapterRollout:
    """``inference_components.rollout`` (its defaults where the section leaves it out); the
    defaults for a config without the section (a variant-shape endpoint, which the rollout
    refuses before any change)."""
    section = cfg.inference_components
    return AdapterRollout() if section is None else section.rollout


def release_target(cfg: DeploymentConfig, adapter: str, version: str) -> ReleaseTarget:
    """The release of ``adapter`` at ``version`` on ``cfg``'s endpoint. Refuses an adapter the
    config does not list and a version other than the config's: the next ``make deploy`` puts the
    config's version back on the adapter's component, so the config says which version is live."""
    where = f"config/{cfg.env}.yaml"
    listed = {a.name: a for a in cfg.adapters}
    if adapter not in listed:
        raise ConfigError(
            f"{where}: adapters: no adapter named {adapter!r} (listed: {sorted(listed)}); "
            "ADAPTER= names one of them"
        )
    configured = listed[adapter].version
    if configured != version:
        raise ConfigError(
            f"{where}: adapters.{adapter}.version is {configured!r}, not {version!r}: set it to "
            f"{version} (and make prepare-model) first, so the next make deploy keeps the version "
            "this release puts live"
        )
    live = adapter_component_name(cfg.project, cfg.env, adapter)
    candidate = f"{live}{CANDIDATE_SUFFIX}"
    for name in (live, candidate):
        if len(name) > COMPONENT_NAME_MAX or not COMPONENT_NAME.fullmatch(name):
            raise ConfigError(
                f"{where}: adapters.{adapter}.name: the component name {name!r} is not an "
                f"InferenceComponentName (letters, digits and hyphens, at most "
                f"{COMPONENT_NAME_MAX}): shorten the adapter's name or the project's"
            )
    settings = rollout_settings(cfg)
    return ReleaseTarget(
        adapter=adapter,
        version=version,
        endpoint=cfg.endpoint_name,
        base_component=base_component_name(cfg.project, cfg.env),
        live_component=live,
        candidate_component=candidate,
        rollout=settings,
        evidence=evidence_thresholds(settings, cfg.rollout),
    )
