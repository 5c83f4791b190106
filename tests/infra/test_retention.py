"""No resource blocks the retry of a failed first deploy.

DeletionPolicy ``Retain`` keeps a resource even when the create that made it rolls back; the
endpoint's log group (fixed name ``/aws/sagemaker/Endpoints/<name>``) and a named ECR repository
then make the next create fail with "already exists". Every resource kept past its stack is
``RetainExceptOnCreate`` instead (stacks/constructs/retention.py cites CloudFormation's
DeletionPolicy reference)."""

from __future__ import annotations

import pytest

from .conftest import load_env, synth_templates


def _resources(templates):  # type: ignore[no-untyped-def]
    for stack, tpl in templates.items():
        for logical, res in tpl.to_json()["Resources"].items():
            yield stack, logical, res


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_nothing_is_retained_when_its_create_rolls_back(env, prod_templates) -> None:  # type: ignore[no-untyped-def]
    templates = prod_templates if env == "prod" else synth_templates(load_env("dev"))
    retained = [
        f"{stack}/{logical} ({res['Type']})"
        for stack, logical, res in _resources(templates)
        if res.get("DeletionPolicy") == "Retain"
    ]
    assert retained == []


def test_logs_images_and_keys_still_outlive_the_stack(prod_templates) -> None:  # type: ignore[no-untyped-def]
    kept = {
        res["Type"]
        for _, _, res in _resources(prod_templates)
        if res.get("DeletionPolicy") == "RetainExceptOnCreate"
    }
    assert {"AWS::Logs::LogGroup", "AWS::ECR::Repository", "AWS::KMS::Key"} <= kept
    (group,) = [
        res for _, _, res in _resources(prod_templates)
        if res["Type"] == "AWS::Logs::LogGroup"
        and str(res["Properties"].get("LogGroupName", "")).startswith("/aws/sagemaker/Endpoints/")
    ]  # fmt: skip
    assert group["DeletionPolicy"] == "RetainExceptOnCreate"
