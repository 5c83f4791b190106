"""Which image each variant gets from ``make deploy``, given what the live endpoint runs.

A CI release deploys tags given on the command line (``IMAGE_TAG=``), so after it the YAML no
longer says what runs: ``config/prod.yaml`` may still say ``image.mode: build``. A later
``make deploy`` of a config change (scaling, alarms) would then give a variant the image built
from ``container/`` at whatever commit is checked out, and blue/green would put it on all of that
variant's traffic. A Model's image cannot change in place (SageMaker has no UpdateModel: a new
image is a new Model, a new EndpointConfig and an UpdateEndpoint, developer guide "Update a
multi-container endpoint"; CloudFormation replaces an AWS::SageMaker::Model whose
``PrimaryContainer`` changes). So, per variant, :func:`resolve` decides:

- named on the command line (``IMAGE_TAG=TAG``, ``IMAGE_TAG=canary=TAG``): that tag;
  ``live`` for a variant (``IMAGE_TAG=live``, ``IMAGE_TAG=primary=live``): the tag of
  ``image.repository_name`` it runs now (refused when it runs anything else);
- not named while another variant is (``IMAGE_TAG=canary=TAG``): keeps the repository tag it runs
  (a release's canary deploy never moves the primary; a release re-run after ``make promote``
  does not undo the promotion); on the first deploy, with no endpoint yet, it starts on the tag
  given (nothing runs to keep), so CI's first release needs no other command;
- nothing named, and the variant runs a repository tag while the config would build it from
  ``container/`` (image.mode build, no ``variants.<name>.image_tag``): refused, naming
  ``IMAGE_TAG=live`` (keep what runs) and ``IMAGE_TAG=<tag>``. A YAML that names a tag
  (``image.tag``, ``variants.<name>.image_tag``) is deployed as written: it is a decision.

``live`` is resolved here only: ``make synth`` and ``make diff`` never read the endpoint, and
sizing.deploy_options refuses it there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sizing.deploy_options import LIVE_TAG, DeployOptions
from sizing.fit_checks import load_config
from typed_config import VARIANT_NAMES, ConfigError, DeploymentConfig, VariantName, config_path


class ImageRefused(RuntimeError):
    """The deploy would change what a variant runs without being asked; the message says how."""


def live_image_uris(sm: Any, models: Mapping[str, str]) -> dict[str, str]:
    """``{variant: image URI}``: each live variant's Model's PrimaryContainer image
    (SageMaker API reference, DescribeModel); ``models`` is ``{variant: ModelName}``."""
    return {
        variant: str(sm.describe_model(ModelName=model)["PrimaryContainer"]["Image"])
        for variant, model in models.items()
        if model
    }


def repository_tag(uri: str, repository: str | None) -> str | None:
    """The tag when ``uri`` is ``<registry>/<repository>:<tag>``, else None (another repository,
    such as the CDK asset repository of image.mode build, or a digest reference)."""
    if not repository or "@" in uri:
        return None
    name, _, tag = uri.split("/", 1)[-1].rpartition(":")
    return tag if name == repository and tag else None


def builds_from_source(cfg: DeploymentConfig, variant: VariantName) -> bool:
    """True when ``cfg`` gives ``variant`` the image CDK builds from container/."""
    return cfg.image.mode == "build" and cfg.variants[variant].image_tag is None


def refuse_builds(
    cfg: DeploymentConfig, wanted: Mapping[str, str | None], tags: Mapping[str, str]
) -> None:
    """``image.deploy_builds: false``: a variant left on an image CDK builds is refused
    (typed_config/model.py says why)."""
    if cfg.image.deploy_builds:
        return
    built = [
        v for v in VARIANT_NAMES
        if v not in tags and wanted[v] is None and builds_from_source(cfg, v)
    ]  # fmt: skip
    if built:
        raise ImageRefused(
            f"config/{cfg.env}.yaml sets image.deploy_builds: false, and {', '.join(built)} "
            f"would get an image CDK builds from container/ (published to the CDK asset "
            f"repository: no scan on push, no customer key). Deploy a pushed tag: "
            f"IMAGE_TAG=<tag> (make push-image ENV={cfg.env} TAG=<tag>) or IMAGE_TAG={LIVE_TAG}; "
            "nothing was changed"
        )


def resolve(
    cfg: DeploymentConfig, release: DeployOptions, images: Mapping[str, str]
) -> DeployOptions:
    """``release`` with every variant's image decided (module docstring). ``cfg``: the config as
    written (before the release inputs); ``images``: :func:`live_image_uris` ({} before the first
    deploy)."""
    repository = cfg.image.repository_name
    named = dict(release.image_tags)
    every = named.pop("", None)
    wanted: dict[str, str | None] = {v: named.get(v, every) for v in VARIANT_NAMES}
    tags: dict[str, str] = {}
    for variant in VARIANT_NAMES:
        uri = images.get(variant)
        running = repository_tag(uri, repository) if uri else None
        want = wanted[variant]
        if want == LIVE_TAG:
            if running is None:
                raise ImageRefused(
                    f"IMAGE_TAG={LIVE_TAG}: {variant} runs "
                    f"{uri or 'nothing yet (no endpoint)'}, not a tag of {repository}: name its "
                    f"tag (IMAGE_TAG={variant}=<tag>)"
                )
            tags[variant] = running
        elif want is not None:
            tags[variant] = want
        elif not images and len(set(filter(None, wanted.values())) - {LIVE_TAG}) == 1:
            # The first deploy (no endpoint yet) of a release that names one variant: nothing
            # runs to keep or to compare with, so every variant starts on the tag given.
            first = next(t for t in wanted.values() if t and t != LIVE_TAG)
            print(f"no endpoint yet: {variant} starts on {first} too (IMAGE_TAG names one tag)")
            tags[variant] = first
        elif any(wanted.values()) and uri:
            if running is not None:
                print(f"IMAGE_TAG does not name {variant}: it keeps {uri}")
                tags[variant] = running
            else:
                print(f"IMAGE_TAG does not name {variant}: it runs {uri}, not a tag of "
                      f"{repository}, so it gets the config's image")  # fmt: skip
        elif running is not None and builds_from_source(cfg, variant):
            raise ImageRefused(
                f"{variant} runs {uri} (a release's image), and config/{cfg.env}.yaml would "
                f"replace it with an image built from container/ (image.mode build). Deploy with "
                f"IMAGE_TAG={LIVE_TAG} to keep what each variant runs, or IMAGE_TAG=<tag> / "
                f"IMAGE_TAG={variant}=<tag> for another; nothing was changed"
            )
    refuse_builds(cfg, wanted, tags)
    if not tags:
        return release
    if every is not None and every != LIVE_TAG and set(tags.values()) == {every}:
        resolved: dict[str, str] = {"": every}  # one tag for all: image.mode tag, as given
    else:
        resolved = tags
    return DeployOptions(image_tags=resolved, model_artifact=release.model_artifact)


def running_tags(sm: Any, cfg: DeploymentConfig) -> list[str]:
    """Every tag of ``image.repository_name`` a variant of the live endpoint runs, or is being
    deployed to (an update in progress: DescribeEndpoint's PendingDeploymentSummary names the
    endpoint config being applied; SageMaker API reference, DescribeEndpoint), read through each
    endpoint config's Models (DescribeEndpointConfig, DescribeModel). [] before the first deploy
    (DescribeEndpoint answers ValidationException "Could not find endpoint")."""
    try:
        endpoint = sm.describe_endpoint(EndpointName=cfg.endpoint_name)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ValidationException":
            return []
        raise
    configs = [endpoint["EndpointConfigName"]]
    pending = endpoint.get("PendingDeploymentSummary", {}).get("EndpointConfigName")
    if pending and pending not in configs:
        configs.append(pending)
    tags: set[str] = set()
    for name in configs:
        variants = sm.describe_endpoint_config(EndpointConfigName=name)["ProductionVariants"]
        models = {str(v["VariantName"]): str(v.get("ModelName", "")) for v in variants}
        for uri in live_image_uris(sm, models).values():
            tag = repository_tag(uri, cfg.image.repository_name)
            if tag:
                tags.add(tag)
    return sorted(tags)


def main(argv: list[str] | None = None, *, sm: Any = None) -> int:
    """``python -m tools.live_images keep-tags --env ENV``: the cdk context that keeps the running
    tags protected (``-c keep_tags=a,b``), nothing before the first deploy."""
    from tools import REPO_ROOT

    parser = argparse.ArgumentParser(prog="python -m tools.live_images")
    parser.add_argument("command", choices=["keep-tags"])
    parser.add_argument("--env", required=True)
    args = parser.parse_args(argv)
    try:
        cfg = load_config(config_path(REPO_ROOT, args.env), env=args.env)
        if sm is None:
            import boto3

            sm = boto3.client("sagemaker", region_name=cfg.region)
        tags = running_tags(sm, cfg)
    except ConfigError as exc:
        print(f"keep-tags: {exc}", file=sys.stderr)
        return 2
    except (ClientError, BotoCoreError) as exc:
        why = f"could not read what {cfg.endpoint_name} runs ({exc})"
        print(f"keep-tags: {why}: the lifecycle policy would stop protecting it, so nothing is "
              "deployed", file=sys.stderr)  # fmt: skip
        return 1
    if tags:
        print(f"-c keep_tags={','.join(tags)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
