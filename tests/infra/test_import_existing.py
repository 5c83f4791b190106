"""A stack deleted and created again, or an endpoint's log group SageMaker created itself, must not
block a deploy (issue 20 item 1): every deploy command asks CloudFormation to import existing named
resources, and every resource the stacks retain is one CloudFormation can import (a static custom
name, DeletionPolicy Retain or RetainExceptOnCreate: CloudFormation user guide, "Import AWS
resources into a CloudFormation stack automatically")."""

from __future__ import annotations

import re
from pathlib import Path

import aws_cdk as cdk

from stacks.app_builder import build_stacks
from tests.infra.conftest import load_env, parse
from tools import deploy as tool

REPO = Path(__file__).resolve().parents[2]
#: The property that names each retained resource type the stacks create.
NAME_PROPERTY = {
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::ECR::Repository": "RepositoryName",
    "AWS::S3::Bucket": "BucketName",
}


def test_make_deploy_imports_existing_named_resources() -> None:
    cmd = tool.cdk_deploy_command(load_env("prod"), tool.DeployOptions(), REPO / "cdk.out" / "x")
    assert "--import-existing-resources" in cmd


def test_every_other_cdk_deploy_of_retained_resources_imports_too() -> None:
    """deploy-repository (the image stack) and deploy-model-release (the artifact bucket)."""
    makefiles = (REPO / "Makefile").read_text() + (REPO / "mk" / "release.mk").read_text()
    for target in ("deploy-repository", "deploy-model-release"):
        recipe = re.search(rf"^{target}:.*?\n((?:\t.*\n)+)", makefiles, re.M)
        assert recipe, target
        assert "--import-existing-resources" in recipe.group(1), target


def test_every_retained_resource_has_a_static_name_cloudformation_can_import(prod_raw) -> None:
    prod_raw["account"] = "123456789012"  # a config that names its account: every name static
    app = cdk.App()
    build_stacks(app, parse(prod_raw))
    retained = []
    for stack in app.synth().stacks:
        for logical, res in stack.template["Resources"].items():
            if res.get("DeletionPolicy") not in ("Retain", "RetainExceptOnCreate"):
                continue
            if res["Type"] == "AWS::KMS::Key":
                continue  # no custom name: a new key never collides with a retained one
            name = res["Properties"][NAME_PROPERTY[res["Type"]]]
            assert isinstance(name, str), (logical, name)
            retained.append(res["Type"])
    # the repository, the log groups, the artifact bucket and the shadow stage's capture bucket
    assert sorted(set(retained)) == [
        "AWS::ECR::Repository",
        "AWS::Logs::LogGroup",
        "AWS::S3::Bucket",
    ]
    assert retained.count("AWS::S3::Bucket") == 2
