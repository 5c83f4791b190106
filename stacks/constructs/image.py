"""ECR repository for the serving image, and the image each variant runs.

Two paths (config ``image.mode``):
- ``build``: CDK builds ``container/`` at deploy time (DockerImageAsset; synth needs no Docker)
  and publishes it to the CDK bootstrap asset repository under its content hash. It bakes the
  config's model release (``model.artifact``, or the version its inputs derive), which
  ``make deploy`` downloads and verifies first: the build itself calls no AWS API.
- ``tag``: CI built and pushed ``<repository>:<tag>`` once; every environment deploys that tag.
The repository scans on push, refuses tag overwrites and expires old images.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from aws_cdk import Duration
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from stacks.constructs.python_lambda import checkov_skip
from stacks.constructs.retention import KEEP_EXCEPT_FAILED_CREATE
from typed_config import DeploymentConfig, ImageConfig, artifact_dir, artifact_version

CONTAINER_DIR = Path(__file__).resolve().parents[2] / "container"


#: The Dockerfile's named build context that holds the prepared model (container/Dockerfile).
MODEL_CONTEXT = "model-artifact"


def image_build_args(cfg: DeploymentConfig) -> dict[str, str]:
    """The Dockerfile's build args (container/Dockerfile), from config: which model release the
    ``model-artifact`` context must hold, and the LoRA rank the engine sizes its slots for."""
    return {
        "MODEL_ARTIFACT_VERSION": artifact_version(cfg),
        "MAX_LORA_RANK": str(cfg.engine.max_lora_rank),
    }


#: The model-preparation job's images share the serving repository (tools/prepare_model.py):
#: ``model-prep-<digest>``. They get a rule of their own, so "keep the last N" serving images
#: never expires the job image a preparation is about to run, and old ones still go.
JOB_IMAGE_TAG_PREFIX = "model-prep-"
JOB_IMAGES_KEPT = 5

#: The BuildKit registry cache of ``make push-image`` (tools/push_image.py): the one tag the
#: repository lets a push replace (IMMUTABLE_WITH_EXCLUSION; the exclusion filter is a WILDCARD
#: pattern, Amazon ECR API reference, ImageTagMutabilityExclusionFilter). With plain IMMUTABLE the
#: cache would be written once and never refreshed. Every other tag stays immutable.
BUILD_CACHE_TAG = "buildcache"


def lifecycle_rules(keep_last: int, in_use_tags: Sequence[str]) -> list[ecr.LifecycleRule]:
    """Expire untagged layers after a day and keep the last ``keep_last`` images, but never a
    tag a variant runs: scale-out and instance replacement pull it again.

    Amazon ECR User Guide, "How lifecycle policies work": rules are evaluated from the lowest
    rulePriority up, "an image that matches the tagging requirements of a higher priority rule
    cannot be expired by a rule with a lower priority", and the rule with tagStatus ``any`` must
    come last. So each in-use tag gets a rule of its own ahead of "keep the last N" that selects
    exactly that tag (``tagPatternList``, no wildcard; tags are immutable, so one image) and
    keeps up to 9,999 of it: it is matched, never expired, and the last rule cannot take it.
    """
    rules = [
        ecr.LifecycleRule(
            description="expire untagged layers after a day",
            tag_status=ecr.TagStatus.UNTAGGED,
            max_image_age=Duration.days(1),
            rule_priority=1,
        )
    ]
    rules.append(
        ecr.LifecycleRule(
            description=f"keep the last {JOB_IMAGES_KEPT} model-prep job images",
            tag_status=ecr.TagStatus.TAGGED,
            tag_pattern_list=[f"{JOB_IMAGE_TAG_PREFIX}*"],
            max_image_count=JOB_IMAGES_KEPT,
            rule_priority=2,
        )
    )
    rules.append(
        ecr.LifecycleRule(
            description=f"keep the build cache ({BUILD_CACHE_TAG})",
            tag_status=ecr.TagStatus.TAGGED,
            tag_pattern_list=[BUILD_CACHE_TAG],
            max_image_count=9999,
            rule_priority=3,
        )
    )
    for i, tag in enumerate(sorted(set(in_use_tags)), start=4):
        rules.append(
            ecr.LifecycleRule(
                description=f"never expire {tag}: a variant runs it",
                tag_status=ecr.TagStatus.TAGGED,
                tag_pattern_list=[tag],
                max_image_count=9999,
                rule_priority=i,
            )
        )
    rules.append(
        ecr.LifecycleRule(
            description=f"keep the last {keep_last} images",
            tag_status=ecr.TagStatus.ANY,
            max_image_count=keep_last,
            rule_priority=len(rules) + 1,
        )
    )
    return rules


class ServingImage(Construct):
    """The ECR repository plus a way to name the image URI for a variant.

    ``image`` is the config's section of that name; ``build_args`` (:func:`image_build_args`)
    are used in ``build`` mode only; ``name_prefix`` (``<project>-<env>``) names the key;
    ``in_use_tags`` are the tags the variants run (:func:`lifecycle_rules` never expires them).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        image: ImageConfig,
        build_args: Mapping[str, str],
        name_prefix: str,
        in_use_tags: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "RepositoryKey",
            enable_key_rotation=True,
            description=f"{name_prefix} serving image repository encryption",
            removal_policy=KEEP_EXCEPT_FAILED_CREATE,
        )
        self.repository = ecr.Repository(
            self,
            "Repository",
            repository_name=image.repository_name,
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE_WITH_EXCLUSION,
            image_tag_mutability_exclusion_filters=[
                ecr.ImageTagMutabilityExclusionFilter.wildcard(BUILD_CACHE_TAG)
            ],
            encryption=ecr.RepositoryEncryption.KMS,
            encryption_key=self.key,
            removal_policy=KEEP_EXCEPT_FAILED_CREATE,
            lifecycle_rules=lifecycle_rules(image.keep_last_images, in_use_tags),
        )
        checkov_skip(
            self.repository,
            {
                "CKV_AWS_51": f"tags are immutable except {BUILD_CACHE_TAG!r}, the BuildKit "
                "registry cache make push-image refreshes on every build; no image runs it"
            },
        )
        self.asset: ecr_assets.DockerImageAsset | None = None
        if image.mode == "build":
            # The model release is a named build context (build/model-artifacts/<version>,
            # fetched and verified by `make deploy` before cdk deploy builds): it is not part of
            # the hashed directory, so the version goes into the asset hash instead.
            version = build_args["MODEL_ARTIFACT_VERSION"]
            self.asset = ecr_assets.DockerImageAsset(
                self,
                "Image",
                directory=str(CONTAINER_DIR),
                build_args=dict(build_args),
                build_contexts={MODEL_CONTEXT: str(artifact_dir(version))},
                extra_hash=version,
                platform=ecr_assets.Platform.LINUX_AMD64,
            )
        self._default_tag = image.tag

    def image_uri(self, tag_override: str | None = None) -> str:
        """URI for a variant: its own tag if set, else the built asset or the configured tag."""
        tag = tag_override or self._default_tag
        if tag is not None:
            return self.repository.repository_uri_for_tag(tag)
        assert self.asset is not None, "config guarantees a tag or a build"
        return self.asset.image_uri

    def grant_pull(self, grantee: iam.IGrantable) -> None:
        """Pull rights on the repository (and its key), and on the asset repo when building."""
        self.repository.grant_pull(grantee)
        self.key.grant_decrypt(grantee)
        if self.asset is not None:
            self.asset.repository.grant_pull(grantee)
