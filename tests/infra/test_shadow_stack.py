"""The shadow stage in the endpoint stack (``rollout.shadow``): its endpoint config (the primary
and the canary's Model as the shadow variant, sized by sizing.shadow_plan), data capture of both
variants to a KMS-encrypted bucket that expires it, the controller's least-privilege access; the
template still passes cdk-nag, cfn-lint and checkov."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Match, Template

from tools.synth import synth
from tools.validate import run_cfn_lint, run_checkov, templates_in

from .conftest import parse, raw_config, synth_templates
from .test_shadow_config import with_shadow
from .test_validators import CHECKOV


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Template, list[str]]:
    root = tmp_path_factory.mktemp("shadow")
    config = root / "prod.yaml"
    config.write_text(yaml.safe_dump(with_shadow(raw_config("prod"), capture_retention_days=14)))
    out = root / "cdk.out"
    templates, nag_errors = synth("prod", out, config=config)
    (name,) = [n for n in templates if n.endswith("-endpoint")]
    return out, Template.from_json(templates[name]), nag_errors


def resources(template: Template, kind: str) -> dict[str, Any]:
    return template.find_resources(kind)


def test_the_shadow_config_has_the_primary_and_the_canary_model_as_shadow(synthesized) -> None:
    _, template, _ = synthesized
    configs = resources(template, "AWS::SageMaker::EndpointConfig")
    (shadow,) = [c for c in configs.values() if "ShadowProductionVariants" in c["Properties"]]
    props = shadow["Properties"]
    (primary,) = props["ProductionVariants"]
    (variant,) = props["ShadowProductionVariants"]
    assert primary["VariantName"] == "primary"
    assert variant["VariantName"] == "shadow" and variant["InitialInstanceCount"] == 6
    assert variant["InitialVariantWeight"] == pytest.approx(95 * 10 / 100)
    canary_model = [
        c["Properties"]["ProductionVariants"][1]["ModelName"]
        for c in configs.values()
        if "ShadowProductionVariants" not in c["Properties"]
    ]
    assert variant["ModelName"] == canary_model[0]  # the new build: the canary's Model
    capture = props["DataCaptureConfig"]
    assert capture["EnableCapture"] is True and capture["InitialSamplingPercentage"] == 100
    (key,) = [k for k in resources(template, "AWS::KMS::Key") if k.startswith("EndpointKey")]
    assert capture["KmsKeyId"] == {"Fn::GetAtt": [key, "Arn"]}  # the product's key
    assert [o["CaptureMode"] for o in capture["CaptureOptions"]] == ["Input", "Output"]


def test_the_capture_bucket_is_encrypted_with_the_key_and_expires_the_capture(
    synthesized,
) -> None:
    _, template, _ = synthesized
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    Match.object_like(
                        {"ServerSideEncryptionByDefault": Match.object_like(
                            {"SSEAlgorithm": "aws:kms"})}
                    )
                ]
            },
            "LifecycleConfiguration": {
                "Rules": Match.array_with(
                    [Match.object_like({"Id": "capture-retention", "ExpirationInDays": 14})]
                )
            },
        },
    )  # fmt: skip


def test_the_controller_may_move_the_endpoint_between_the_two_configs_and_read_the_capture(
    synthesized,
) -> None:
    _, template, _ = synthesized
    policies = resources(template, "AWS::IAM::Policy")
    statements = [
        s
        for p in policies.values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Sid", "").startswith(("Stage", "ShadowCapture"))
    ]
    by_sid = {s["Sid"]: s for s in statements}
    assert by_sid["StageConfigs"]["Action"] == "sagemaker:UpdateEndpoint"
    # the canary config, the stack's shadow config and the copies the controller sizes
    assert len(by_sid["StageConfigs"]["Resource"]) == 3
    sized = by_sid["StageSizedConfigs"]["Resource"]
    assert by_sid["StageSizedConfigs"]["Action"] == "sagemaker:CreateEndpointConfig"
    assert ":endpoint-config/mangaassist-vllm-prod-shadow-*" in json.dumps(sized)
    assert sized in by_sid["StageConfigs"]["Resource"]
    assert by_sid["ShadowCaptureList"]["Condition"]["StringLike"]["s3:prefix"] == [
        "datacapture/mangaassist-vllm-prod/*"
    ]
    assert by_sid["ShadowCaptureRead"]["Action"] == "s3:GetObject"
    assert by_sid["ShadowCaptureDecrypt"]["Action"] == "kms:Decrypt"
    assert by_sid["ShadowCaptureWrite"]["Action"] == "s3:PutObject"  # the execution role's
    # the stage's probes: whole and streamed requests to this endpoint only
    probes = by_sid["StageProbes"]
    assert set(probes["Action"]) == {
        "sagemaker:DescribeEndpoint",
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithResponseStream",
    }
    assert json.dumps(probes["Resource"]).endswith(':endpoint/mangaassist-vllm-prod"]]}'), probes


def test_the_controller_is_handed_the_stage(synthesized) -> None:
    _, template, _ = synthesized
    functions = resources(template, "AWS::Lambda::Function")
    (env,) = [
        f["Properties"]["Environment"]["Variables"]
        for f in functions.values()
        if "SHADOW_STAGE" in f["Properties"].get("Environment", {}).get("Variables", {})
    ]
    text = json.dumps(env["SHADOW_STAGE"])
    for part in ('\\"shadow_variant\\":\\"shadow\\"', '\\"sample_percent\\":10',
                 '\\"capture_percent\\":100',
                 '\\"max_seconds\\":172800', "EndpointConfigName"):  # fmt: skip
        assert part in text, text


def test_cdk_nag_and_cfn_lint_pass(synthesized) -> None:
    out, _, nag_errors = synthesized
    assert nag_errors == []
    assert run_cfn_lint(templates_in(out), "us-east-1") == []


@pytest.mark.skipif(not CHECKOV.exists(), reason="run `make checkov-venv` (make test does)")
def test_checkov_passes(synthesized) -> None:
    out, _, _ = synthesized
    _, failed = run_checkov(CHECKOV, templates_in(out))
    assert failed == [], failed


def test_the_canarys_scaling_is_the_controllers_not_the_stacks(synthesized) -> None:
    """With ``rollout.shadow`` the stack registers no target, policy or scheduled action for the
    canary (the stage removes it from the endpoint: canary_scaling.py); the controller is handed
    its bounds and target tracking, and may deregister it, put its policy and manage the
    policy's alarms, those named after this endpoint's canary only."""
    _, template, _ = synthesized
    targets = resources(template, "AWS::ApplicationAutoScaling::ScalableTarget")
    assert [t["Properties"]["ResourceId"] for t in targets.values()] == [
        "endpoint/mangaassist-vllm-prod/variant/primary"
    ]
    (primary,) = targets
    for policy in resources(template, "AWS::ApplicationAutoScaling::ScalingPolicy").values():
        assert policy["Properties"]["ScalingTargetId"]["Ref"] == primary
    (env,) = [
        f["Properties"]["Environment"]["Variables"]
        for f in resources(template, "AWS::Lambda::Function").values()
        if "SHADOW_STAGE" in f["Properties"].get("Environment", {}).get("Variables", {})
    ]
    text = json.dumps(env["SHADOW_STAGE"])
    for part in ('\\"canary_scaling\\":{\\"min_capacity\\":3,\\"max_capacity\\":54',
                 '\\"TargetValue\\":108.8',
                 "SageMakerVariantConcurrentRequestsPerModelHighResolution",
                 '\\"DisableScaleIn\\":false'):  # fmt: skip
        assert part in text, text
    by_sid = {
        s["Sid"]: s
        for p in resources(template, "AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Sid", "").startswith("Canary")
    }
    assert sorted(by_sid["CanaryScalingOwned"]["Action"]) == [
        "application-autoscaling:DeregisterScalableTarget",
        "application-autoscaling:PutScalingPolicy",
    ]
    alarms = json.dumps(by_sid["CanaryTrackingAlarms"]["Resource"])
    assert ":alarm:TargetTracking-endpoint/mangaassist-vllm-prod/variant/canary-*" in alarms


def test_without_a_shadow_stage_the_stack_has_none() -> None:
    raw = raw_config("prod")
    del raw["rollout"]["shadow"]
    raw["variants"]["canary"]["initial_weight"] = 5
    template = synth_templates(parse(raw))["endpoint"]
    assert not template.find_resources("AWS::S3::Bucket")
    envs = [
        f["Properties"]["Environment"]["Variables"]
        for f in template.find_resources("AWS::Lambda::Function").values()
        if "SHADOW_STAGE" in f["Properties"].get("Environment", {}).get("Variables", {})
    ]
    assert [e["SHADOW_STAGE"] for e in envs] == [""]
    targets = template.find_resources("AWS::ApplicationAutoScaling::ScalableTarget")
    assert sorted(t["Properties"]["ResourceId"].rsplit("/", 1)[1] for t in targets.values()) == [
        "canary",
        "primary",
    ]  # without a stage the stack owns the canary's scaling
