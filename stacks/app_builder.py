"""Build the CDK app for one environment: load config, check capacity, add stacks and cdk-nag."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from sizing.deploy_options import DeployOptions
from sizing.fit_checks import check_deployable, load_config
from stacks.deploy_access_stack import DeployAccessStack
from stacks.endpoint_stack import EndpointStack
from stacks.execution_policy_stack import ExecutionPolicyStack
from stacks.image_stack import ImageStack
from stacks.model_release_stack import ModelReleaseStack
from typed_config import (
    ConfigError,
    DeploymentConfig,
    config_path,
    deploy_access_stack_name,
    execution_policy_stack_name,
    release_stack_name,
)
from typed_config.stack_names import stack_name

#: The repository root: config/<env>.yaml of a promotion's source environment is read from it.
REPO_ROOT = Path(__file__).resolve().parents[1]


def cdk_json_context(repo_root: Path) -> dict[str, object]:
    """The feature flags committed in cdk.json, for synths that do not go through the CDK CLI."""
    context: dict[str, object] = json.loads((repo_root / "cdk.json").read_text())["context"]
    return context


def promotion_source(cfg: DeploymentConfig) -> DeploymentConfig | None:
    """The ``promotion.from_env`` environment's config (config/<from_env>.yaml), or None. Refused
    where the two are not one account and region: the source's repository, bucket and key
    policies would have to let this account read (not built; typed_config/promotion.py)."""
    if cfg.promotion is None:
        return None
    source = load_config(config_path(REPO_ROOT, cfg.promotion.from_env), env=cfg.promotion.from_env)
    if source.region != cfg.region or (
        source.account and cfg.account and source.account != cfg.account
    ):
        raise ConfigError(
            f"promotion.from_env: {source.env} deploys to {source.account or 'its account'} in "
            f"{source.region}, {cfg.env} to {cfg.account or 'its account'} in {cfg.region}: "
            "promotion copies within one account and region only"
        )
    return source


def build_stacks(
    app: cdk.App, cfg: DeploymentConfig, options: DeployOptions | None = None
) -> tuple[ImageStack, EndpointStack]:
    """``cfg`` as loaded from YAML; ``options`` (one deploy's inputs) are applied here.

    Also adds the ``<project>-<env>-model-release`` stack (ModelReleaseStack, found with
    ``app.node.find_child``); it depends on neither stack returned. With a ``deploy_access``
    section, also ``<project>-<env>-deploy-access`` (DeployAccessStack), likewise on its own;
    and always ``<project>-<env>-execution-policy`` (ExecutionPolicyStack: the CloudFormation
    execution policies a person deploys before ``cdk bootstrap``)."""
    options = options or DeployOptions()
    cfg = options.apply(cfg)
    check_deployable(cfg)
    env = cdk.Environment(account=cfg.account, region=cfg.region)
    release = ModelReleaseStack(app, release_stack_name(cfg), cfg=cfg, env=env)
    image = ImageStack(app, stack_name(cfg, "image"), cfg=cfg, env=env)
    endpoint = EndpointStack(
        app,
        stack_name(cfg, "endpoint"),
        cfg=cfg,
        image=image.image,
        suspend_scaling=options.suspend_scaling,
        env=env,
    )
    access = (
        [
            DeployAccessStack(
                app,
                deploy_access_stack_name(cfg),
                cfg=cfg,
                promotion_source=promotion_source(cfg),
                env=env,
            )
        ]
        if cfg.deploy_access is not None
        else []
    )
    policy = ExecutionPolicyStack(app, execution_policy_stack_name(cfg), cfg=cfg, env=env)
    for stack in (release, image, endpoint, *access, policy):
        cdk.Tags.of(stack).add("project", cfg.project)
        cdk.Tags.of(stack).add("env", cfg.env)
    cdk.Aspects.of(app).add(AwsSolutionsChecks(verbose=True))
    return image, endpoint


def build_app(
    app: cdk.App,
    *,
    repo_root: Path,
    env: str,
    options: DeployOptions | None = None,
    config: Path | None = None,
) -> DeploymentConfig:
    """Returns the config the stacks were built from (``options`` applied). ``config``: a
    config file to read instead of ``config/<env>.yaml`` (its ``env:`` must still be ``env``)."""
    options = options or DeployOptions()
    cfg = options.apply(load_config(config or config_path(repo_root, env), env=env))
    build_stacks(app, cfg, options)
    return cfg
