"""Every stack's name, one definition: the app builds the stacks by them, the make targets and
tools deploy and read them by them (``python -m tools.stack_name``), the deploy role is scoped to
them, and the preflight looks them up."""

from __future__ import annotations

from typed_config import generated_names as gn
from typed_config.loader import DeploymentConfig

#: The stacks of one environment besides the model release's (``<project>-<env>-<part>``).
STACK_PARTS = ("image", "endpoint")


def stack_name(cfg: DeploymentConfig, part: str) -> str:
    """``<project>-<env>-image`` or ``-endpoint``: the name make targets deploy one stack by."""
    if part not in STACK_PARTS:
        raise ValueError(f"no {part!r} stack: one of {STACK_PARTS}")
    return gn.stack_name(cfg.project, cfg.env, part)


def release_stack_name(cfg: DeploymentConfig) -> str:
    """The ModelReleaseStack's name: deployed on its own before the first prepare-model
    (``make deploy-model-release``), since a build-mode image needs a release to exist."""
    return gn.stack_name(cfg.project, cfg.env, "model-release")


def deploy_access_stack_name(cfg: DeploymentConfig) -> str:
    """DeployAccessStack's name (``make deploy-access``)."""
    return gn.stack_name(cfg.project, cfg.env, "deploy-access")


def execution_policy_stack_name(cfg: DeploymentConfig) -> str:
    """ExecutionPolicyStack's name (``make deploy-execution-policy``): the CloudFormation
    execution policies ``cdk bootstrap --cloudformation-execution-policies`` takes."""
    return gn.stack_name(cfg.project, cfg.env, "execution-policy")


#: The product's CloudFormation execution policies, one per group of services (an IAM managed
#: policy holds at most 6,144 characters, so one would not hold them all).
EXECUTION_POLICY_PARTS = gn.EXECUTION_POLICY_PARTS


def execution_policy_names(cfg: DeploymentConfig) -> list[str]:
    """The customer-managed policies ExecutionPolicyStack creates, ``<project>-<env>-cfn-exec-
    <part>``: the bootstrap's execution role must carry every one (the preflight checks)."""
    return [gn.execution_policy_name(cfg.project, cfg.env, p) for p in EXECUTION_POLICY_PARTS]


def environment_stack_names(cfg: DeploymentConfig) -> list[str]:
    """Every stack of this environment deployed through the CDK bootstrap's roles (the
    execution policy's own stack is deployed with a person's credentials, not among them);
    the deploy-access stack only where the config has its section."""
    names = [release_stack_name(cfg), *(stack_name(cfg, part) for part in STACK_PARTS)]
    return names + ([deploy_access_stack_name(cfg)] if cfg.deploy_access is not None else [])
