"""``make promote ENV=prod``: the canary's image becomes the primary's, in one resumable command.

Steps, each printed with what it changed or why it had nothing to do:

1. **check**: the rollout COMPLETED (the canary carries 100 % of traffic), read through the
   canary controller like ``make canary-status``. Anything else is refused before any change,
   except a promotion already under way or done (resume, below).
2. **deploy**: ``make deploy ENV=... IMAGE_TAG=<canary's tag> RESET=DesiredWeight``: both
   variants on the tag the canary runs (read from the live endpoint: endpoint config, then each
   variant's Model), weights back to the configured ones. Skipped when the primary already runs
   the canary's tag (a promotion that failed after this step).
3. **canary idle**: ``make canary-rollback REASON=promoted``: the canary back to weight 0 and its
   configured scaling bounds (the controller raised them outside CloudFormation). Skipped when
   the controller's record already is that rollback.

Run it again after a failure at any step: it reads where the fleet is and goes on from there.
The tag it deploys is given on the command line, not written to the YAML: a later config change
is deployed with ``IMAGE_TAG=live`` (tools/live_images.py), and without it ``make deploy``
refuses to replace the promoted tag with an image built from container/.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from lambdas.canary_controller.names import COMPLETED, ROLLED_BACK, ROLLING_BACK
from tools import REPO_ROOT
from tools.aws_command import client, run_on_config
from tools.canary import ControllerError, invoke
from typed_config import VARIANT_NAMES, DeploymentConfig

#: The reason the promotion's canary rollback records (and resumes by).
PROMOTED = "promoted"


class PromoteRefused(RuntimeError):
    """The promotion cannot go on; the message says why and what to do."""


def live_images(sm: Any, endpoint: str) -> dict[str, str]:
    """``{variant: image URI}`` the live endpoint runs: DescribeEndpoint names the endpoint
    config, whose production variants name their Models, whose PrimaryContainer names the
    image (SageMaker API reference: DescribeEndpointConfig, DescribeModel)."""
    config = sm.describe_endpoint(EndpointName=endpoint)["EndpointConfigName"]
    variants = sm.describe_endpoint_config(EndpointConfigName=config)["ProductionVariants"]
    images = {}
    for v in variants:
        model = sm.describe_model(ModelName=v["ModelName"])
        images[v["VariantName"]] = str(model["PrimaryContainer"]["Image"])
    return images


def split_image(uri: str) -> tuple[str, str]:
    """``registry/repository:tag`` -> (repository, tag); a digest reference has no tag."""
    if "@" in uri:
        raise PromoteRefused(f"{uri} is pinned by digest, not a tag: promote by hand")
    path = uri.split("/", 1)[1] if "/" in uri else uri
    repository, _, tag = path.rpartition(":")
    return repository, tag


def promoted_already(state: dict[str, Any]) -> bool:
    return state.get("status") == ROLLED_BACK and str(state.get("rollback_reason", "")).startswith(
        PROMOTED
    )


def promote(
    cfg: DeploymentConfig,
    *,
    status: Callable[[], dict[str, Any]],
    images: Callable[[], dict[str, str]],
    deploy: Callable[[str], int],
    idle_canary: Callable[[], dict[str, Any]],
    out: Callable[[str], None] = print,
) -> int:
    state = status()
    now = state.get("status")
    resuming = promoted_already(state) or (
        now == ROLLING_BACK and str(state.get("rollback_reason", "")).startswith(PROMOTED)
    )
    if now != COMPLETED and not resuming:
        raise PromoteRefused(
            f"no rollout COMPLETED on {cfg.endpoint_name} (status {now!r}): promote once "
            f"make canary-status ENV={cfg.env} shows {COMPLETED}; nothing was changed"
        )
    out(f"1. check: rollout {state.get('rollout_id')} is {now}")
    live = images()
    missing = [v for v in VARIANT_NAMES if v not in live]
    if missing:
        raise PromoteRefused(f"the live endpoint has no {missing} variant: nothing was changed")
    repository, tag = split_image(live["canary"])
    if cfg.image.repository_name and repository != cfg.image.repository_name:
        raise PromoteRefused(
            f"the canary runs {live['canary']}, not an image of image.repository_name "
            f"({cfg.image.repository_name}): a promotion deploys tags of that repository"
        )
    if split_image(live["primary"]) == (repository, tag):
        out(f"2. deploy: the primary already runs {tag}: nothing to do")
    else:
        out(f"2. deploy: primary {split_image(live['primary'])[1]} -> {tag}, weights reset "
            f"(make deploy ENV={cfg.env} IMAGE_TAG={tag} RESET=DesiredWeight)")  # fmt: skip
        rc = deploy(tag)
        if rc != 0:
            out(f"promote stopped at step 2 (deploy exited {rc}); run make promote "
                f"ENV={cfg.env} again once fixed: it resumes here")  # fmt: skip
            return rc
    if promoted_already(state):
        out("3. canary idle: already at weight 0 with its configured bounds: nothing to do")
    elif now == ROLLING_BACK:
        out("3. canary idle: the promotion's rollback is under way (make canary-status)")
    else:
        try:
            after = idle_canary()
        except Exception:
            out(f"promote stopped at step 3 (canary idle): the primary runs {tag} and the "
                f"rollout is still {now}; run make promote ENV={cfg.env} again once fixed: it "
                "resumes here without deploying again")  # fmt: skip
            raise
        out(f"3. canary idle: weight 0 and configured bounds requested ({after.get('status')})")
    out(f"promoted: both variants run {tag}. The next config change: make deploy "
        f"ENV={cfg.env} IMAGE_TAG=live keeps it (or IMAGE_TAG={tag})")  # fmt: skip
    return 0


def main(argv: list[str] | None = None, *, clients: dict[str, Any] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.promote",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--env", required=True)
    args = parser.parse_args(argv)
    given = clients or {}

    def command(cfg: DeploymentConfig) -> int:
        from tools import deploy as deploy_tool

        lam = client(given, "lambda", cfg.region)
        sm = client(given, "sagemaker", cfg.region)

        def run_deploy(tag: str) -> int:
            if "deploy" in given:
                return int(given["deploy"](tag))
            argv = ["--env", cfg.env, "--image-tag", tag, "--reset", "DesiredWeight"]
            return deploy_tool.main(argv, clients=given)  # the same clients (tests: one account)

        return promote(
            cfg,
            status=lambda: invoke(lam, cfg, {"action": "status"}),
            images=lambda: live_images(sm, cfg.endpoint_name),
            deploy=run_deploy,
            idle_canary=lambda: invoke(
                lam, cfg, {"action": "rollback", "reason": PROMOTED, "requested_by": "promote"}
            ),
        )

    try:
        return run_on_config(REPO_ROOT, args.env, command, refused=PromoteRefused)
    except ControllerError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
