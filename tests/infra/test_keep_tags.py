"""``make deploy-repository`` keeps every tag the live endpoint runs protected (issue 31, item 10).

The repository deploy of a release names only the new tag; before it, the ECR lifecycle policy
protected the primary's live tag only because the last deploy named it. Now the live endpoint is
read first (``python -m tools.live_images keep-tags``: Stubber-ed SageMaker calls, the faults
included) and its tags are passed as ``-c keep_tags=...``, protected beside the new one."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from typing import Any

import aws_cdk as cdk
import boto3
import pytest
from aws_cdk.assertions import Template
from botocore.stub import Stubber

from sizing.deploy_options import DeployOptions
from stacks.app_builder import build_stacks, cdk_json_context
from stacks.image_stack import KEEP_TAGS_CONTEXT
from tools import live_images
from typed_config import ConfigError, DeploymentConfig

from .conftest import REPO_ROOT

REGISTRY = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
REPOSITORY = "mangaassist-vllm-prod"  # config/prod.yaml image.repository_name


def protected_tags(cfg: DeploymentConfig, context: dict[str, Any], new_tag: str) -> set[str]:
    app = cdk.App(context={**cdk_json_context(REPO_ROOT), **context})
    image, _ = build_stacks(app, cfg, DeployOptions(image_tags={"": new_tag}))
    [repo] = Template.from_stack(image).find_resources("AWS::ECR::Repository").values()
    rules = json.loads(repo["Properties"]["LifecyclePolicy"]["LifecyclePolicyText"])["rules"]
    return {t for r in rules for t in r["selection"].get("tagPatternList", [])}


def test_the_live_tags_stay_protected_beside_the_new_one(prod_cfg) -> None:
    tags = protected_tags(
        prod_cfg, {KEEP_TAGS_CONTEXT: "a1b2c3d4e5f6,0f0f0f0f0f0f"}, "f6e5d4c3b2a1"
    )
    assert tags == {"f6e5d4c3b2a1", "a1b2c3d4e5f6", "0f0f0f0f0f0f", "model-prep-*", "buildcache"}


def test_a_malformed_keep_tag_is_refused_naming_the_context(prod_cfg) -> None:
    with pytest.raises(ConfigError, match="keep_tags: 'bad tag' is not a valid image tag"):
        protected_tags(prod_cfg, {KEEP_TAGS_CONTEXT: "a1b2c3d4e5f6,bad tag"}, "f6e5d4c3b2a1")


def sagemaker() -> tuple[Any, Stubber]:
    sm = boto3.client(
        "sagemaker", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t"
    )
    return sm, Stubber(sm)


def endpoint(stub: Stubber, config: str, pending: str | None = None) -> None:
    answer: dict[str, Any] = {
        "EndpointName": "mangaassist-vllm-prod",
        "EndpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/mangaassist-vllm-prod",
        "EndpointConfigName": config,
        "EndpointStatus": "Updating" if pending else "InService",
        "CreationTime": datetime(2026, 11, 1, tzinfo=UTC),
        "LastModifiedTime": datetime(2026, 11, 2, tzinfo=UTC),
    }
    if pending:
        answer["PendingDeploymentSummary"] = {"EndpointConfigName": pending}
    stub.add_response("describe_endpoint", answer, {"EndpointName": "mangaassist-vllm-prod"})


def endpoint_config(stub: Stubber, name: str, images: dict[str, str]) -> None:
    variants = [{"VariantName": v, "ModelName": f"{name}-{v}"} for v in images]
    stub.add_response(
        "describe_endpoint_config",
        {"EndpointConfigName": name, "EndpointConfigArn": f"arn:aws:sagemaker:::{name}",
         "ProductionVariants": variants, "CreationTime": datetime(2026, 11, 1, tzinfo=UTC)},
        {"EndpointConfigName": name},
    )  # fmt: skip
    for variant, image in images.items():
        stub.add_response(
            "describe_model",
            {"ModelName": f"{name}-{variant}", "ModelArn": "arn:aws:sagemaker:::m",
             "PrimaryContainer": {"Image": image},
             "CreationTime": datetime(2026, 11, 1, tzinfo=UTC)},
            {"ModelName": f"{name}-{variant}"},
        )  # fmt: skip


def test_keep_tags_reads_every_variant_and_an_update_in_progress(prod_cfg, capsys) -> None:
    sm, stub = sagemaker()
    endpoint(stub, "cfg-1", pending="cfg-2")
    endpoint_config(stub, "cfg-1", {"primary": f"{REGISTRY}/{REPOSITORY}:a1b2c3d4e5f6",
                                    "canary": f"{REGISTRY}/{REPOSITORY}:0f0f0f0f0f0f"})  # fmt: skip
    # the pending config: the canary on a new tag; a CDK asset image is not this repository's
    endpoint_config(stub, "cfg-2", {"primary": f"{REGISTRY}/cdk-hnb659fds-container:abc",
                                    "canary": f"{REGISTRY}/{REPOSITORY}:1234567890ab"})  # fmt: skip
    stub.activate()
    assert live_images.main(["keep-tags", "--env", "prod"], sm=sm) == 0
    assert capsys.readouterr().out == "-c keep_tags=0f0f0f0f0f0f,1234567890ab,a1b2c3d4e5f6\n"
    stub.assert_no_pending_responses()


def test_before_the_first_deploy_there_is_nothing_to_keep(capsys) -> None:
    sm, stub = sagemaker()
    stub.add_client_error(
        "describe_endpoint", "ValidationException", "Could not find endpoint mangaassist-vllm-prod."
    )
    stub.activate()
    assert live_images.main(["keep-tags", "--env", "prod"], sm=sm) == 0
    assert capsys.readouterr().out == ""


def test_an_unreadable_endpoint_stops_the_repository_deploy(capsys) -> None:
    """Deploying the lifecycle policy without the live tags is the window this closes."""
    sm, stub = sagemaker()
    stub.add_client_error("describe_endpoint", "AccessDeniedException", "not authorized", 400)
    stub.activate()
    assert live_images.main(["keep-tags", "--env", "prod"], sm=sm) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "could not read what mangaassist-vllm-prod runs" in captured.err
    assert "so nothing is deployed" in captured.err


def test_make_deploy_repository_passes_the_live_tags_to_cdk() -> None:
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "deploy-repository", "ENV=prod",
         "IMAGE_TAG=f6e5d4c3b2a1"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    ).stdout.replace("\\\n", " ")  # fmt: skip
    keep = "keep=$(.venv/bin/python -m tools.live_images keep-tags --env prod);"
    assert keep in out
    deploy = out[out.index(keep) :]
    assert "npx cdk deploy" in deploy and " $keep " in deploy
