"""ImageStack: the ECR repository and the serving image (built by CDK or an existing tag)."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from constructs import Construct

from stacks.config import DeploymentConfig
from stacks.constructs.image import ServingImage, image_build_args


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
                )
                if tag is not None
            ],
        )
