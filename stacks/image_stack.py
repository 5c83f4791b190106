"""ImageStack: the ECR repository and the serving image (built by CDK or an existing tag)."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct
from pydantic import ValidationError

from stacks.constructs.image import ServingImage, image_build_args
from typed_config import ConfigError, DeploymentConfig, ImageConfig


class ImageStack(Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, cfg: DeploymentConfig, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.image = ServingImage(
            self,
            "ServingImage",
            image=cfg.image,
            build_args=image_build_args(cfg),
            name_prefix=f"{cfg.project}-{cfg.env}",
            in_use_tags=[
                tag
                for tag in (
                    cfg.image.tag,
                    cfg.variants.primary.image_tag,
                    cfg.variants.canary.image_tag,
                    *keep_tags(self.node.try_get_context(KEEP_TAGS_CONTEXT)),
                )
                if tag is not None
            ],
        )


#: ``-c keep_tags=a,b``: tags the live endpoint's variants run (``make deploy-repository`` reads
#: them with ``python -m tools.live_images keep-tags``), protected by the lifecycle policy beside
#: the tags this deploy names: a repository deploy for a new tag, whose release then fails, never
#: leaves a running tag under "keep the last N".
KEEP_TAGS_CONTEXT = "keep_tags"


def keep_tags(value: object) -> list[str]:
    """The ``keep_tags`` context: comma-separated tags, each validated like ``image.tag``."""
    if value is None or value == "":
        return []
    tags = [t.strip() for t in str(value).split(",") if t.strip()]
    for tag in tags:
        try:
            ImageConfig(mode="tag", tag=tag)
        except ValidationError as exc:
            raise ConfigError(
                f"keep_tags: {tag!r} is not a valid image tag ({exc.errors()[0]['msg']})"
            ) from None
    return tags
