"""What a whole config derives: the model release's inputs and version, the artifact bucket,
the preparation job's name prefix, and the GitHub subjects the deploy role trusts.

Here, above the loader (it imports ``DeploymentConfig``), so the sections' own modules
(``model_prep``, ``deploy_access``) stay below the loader and no import runs in a circle.
"""

from __future__ import annotations

from container.model_prep.release import ReleaseInputs, build_inputs, version_of
from typed_config import generated_names as gn
from typed_config.deploy_access import DeployAccessConfig
from typed_config.loader import DeploymentConfig


def artifact_bucket_name(cfg: DeploymentConfig, account: str) -> str:
    """The artifact bucket's name: configured, or ``<project>-<env>-models-<account>`` (S3 bucket
    names are global: the account id keeps two accounts' from colliding)."""
    return cfg.model_prep.artifact_bucket or gn.models_bucket_name(cfg.project, cfg.env, account)


def capture_bucket_name(cfg: DeploymentConfig, account: str) -> str:
    """The shadow stage's data-capture bucket: ``<project>-<env>-capture-<account>``, a static
    name, so a retained bucket can be imported again (``--import-existing-resources``) and the
    CloudFormation execution policy names it (stacks/constructs/execution_policy.py)."""
    return gn.capture_bucket_name(cfg.project, cfg.env, account)


def artifact_location_uri(cfg: DeploymentConfig, account: str) -> str:
    return f"s3://{artifact_bucket_name(cfg, account)}/{cfg.model_prep.artifact_prefix}"


def release_inputs(cfg: DeploymentConfig) -> ReleaseInputs:
    """The config's model inputs: what ``make prepare-model`` prepares and, unless
    ``model.artifact`` pins another version, what ``make build-image`` bakes."""
    return build_inputs(
        base_source=cfg.model.source,
        base_revision=cfg.model.revision,
        quantization=cfg.model.quantization,
        min_agreement=cfg.model.quality_gate_min_agreement,
        max_lora_rank=cfg.engine.max_lora_rank,
        adapters=[(a.name, a.source, a.version, a.rank) for a in cfg.adapters],
    )


def artifact_ref(cfg: DeploymentConfig) -> str:
    """``model.artifact`` if set, else the version the config's inputs derive."""
    return cfg.model.artifact or release_inputs(cfg).version


def artifact_version(cfg: DeploymentConfig) -> str:
    """The version the image bakes (the last part of an ``s3://.../<version>`` reference)."""
    return version_of(artifact_ref(cfg))


def preparation_job_prefix(cfg: DeploymentConfig) -> str:
    """The name every preparation job of ``cfg`` starts with: the deploy role may act on the
    training jobs named so (stacks/deploy_access_stack.py), and tools/prepare_model.py names
    each ``<prefix><version hex>-<time>`` (:func:`preparation_job_version_prefix`)."""
    return gn.preparation_job_prefix(cfg.project, cfg.env)


def preparation_job_version_prefix(cfg: DeploymentConfig, version: str) -> str:
    """What every preparation job of ``version`` is named with: ``<project>-<env>-prep-<hex>-``
    (the creation time follows)."""
    return gn.preparation_job_version_prefix(cfg.project, cfg.env, version)


def bedrock_package_job_prefix(cfg: DeploymentConfig, version: str) -> str:
    """``<project>-<env>-prep-bedrock-<hex>-``: a preparation job's name (the deploy role may run
    those), apart from the release's own jobs (``<project>-<env>-prep-<hex>-``)."""
    return gn.bedrock_package_job_prefix(cfg.project, cfg.env, version)


def github_environments(cfg: DeploymentConfig) -> list[str]:
    """The GitHub environments whose jobs may deploy ``cfg``: configured, else ``[cfg.env]``."""
    access = cfg.deploy_access
    if access is None:
        return []
    return list(access.github_environments or [cfg.env])


def _repository_claim(access: DeployAccessConfig) -> str:
    """``repo:OWNER/NAME``, or its immutable form ``repo:OWNER@<id>/NAME@<id>``."""
    owner, _, name = access.repository.partition("/")
    if access.immutable_ids is not None:
        owner = f"{owner}@{access.immutable_ids.owner_id}"
        name = f"{name}@{access.immutable_ids.repository_id}"
    return f"repo:{owner}/{name}"


def github_subjects(cfg: DeploymentConfig) -> list[str]:
    """The exact ``sub`` claims the deploy role trusts, one per GitHub environment."""
    access = cfg.deploy_access
    if access is None:
        return []
    return [f"{_repository_claim(access)}:environment:{e}" for e in github_environments(cfg)]


def pull_request_subject(cfg: DeploymentConfig) -> str | None:
    """The ``sub`` of a job of a pull request that names no environment
    (``repo:OWNER/NAME:pull_request``, GitHub "OpenID Connect", example subject claims): the
    one the read-only diff role trusts."""
    access = cfg.deploy_access
    return None if access is None else f"{_repository_claim(access)}:pull_request"
