"""Every stack's name, one definition: the app builds the stacks by them, the make targets and
tools deploy and read them by them (``python -m tools.stack_name``), the deploy role is scoped to
them, and the preflight looks them up."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # type hints only: the loader imports the modules that import this one
    from typed_config.loader import DeploymentConfig

#: The stacks of one environment besides the model release's (``<project>-<env>-<part>``).
STACK_PARTS = ("image", "endpoint")


def stack_name(cfg: DeploymentConfig, part: str) -> str:
    """``<project>-<env>-image`` or ``-endpoint``: the name make targets deploy one stack by."""
    if part not in STACK_PARTS:
        raise ValueError(f"no {part!r} stack: one of {STACK_PARTS}")
    return f"{cfg.project}-{cfg.env}-{part}"


def release_stack_name(cfg: DeploymentConfig) -> str:
    """The ModelReleaseStack's name: deployed on its own before the first prepare-model
    (``make deploy-model-release``), since a build-mode image needs a release to exist."""
    return f"{cfg.project}-{cfg.env}-model-release"


def deploy_access_stack_name(cfg: DeploymentConfig) -> str:
    """DeployAccessStack's name (``make deploy-access``)."""
    return f"{cfg.project}-{cfg.env}-deploy-access"
