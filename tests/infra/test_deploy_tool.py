"""tools/deploy.py against a stubbed live endpoint (botocore Stubber on the real clients).

The deployed state (instance types, desired counts, weights, registered scalable targets) and
the failures (endpoint not found, Updating, ValidationException on raising counts,
a failed second deploy) are injected into the AWS calls; each test asserts the end state: which
templates were deployed in which order and that every stubbed call was made.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest.mock import patch

import boto3
import pytest
from botocore.stub import Stubber

from sizing.deploy_options import DeployOptions
from tests.fixtures import fixture_root
from tools import deploy as tool
from typed_config import DeploymentConfig

from .conftest import load_env, parse, raw_config

ENDPOINT = "mangaassist-vllm-prod"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
#: 03:00 JST on a Wednesday: off-peak, the schedules hold min 2.
NIGHT = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)
#: 17:30 JST on a Tuesday: the 17:45 peak schedule (min 26 + 1 standby) fires during the update.
BEFORE_PEAK = datetime(2026, 12, 1, 8, 30, tzinfo=UTC)
BUSY = {"primary": (4, 95.0), "canary": (3, 5.0)}
#: What the live endpoint runs when it runs config/prod.yaml: its type and scaling bounds.
LIVE_TYPE = "ml.g6e.xlarge"
LIVE_BOUNDS = {"primary": (2, 54), "canary": (3, 54)}


def clients() -> tuple[Any, Stubber, Any, Stubber]:
    kw = {"region_name": "us-east-1", "aws_access_key_id": "x", "aws_secret_access_key": "x"}
    sm = boto3.client("sagemaker", **kw)
    aas = boto3.client("application-autoscaling", **kw)
    return sm, Stubber(sm), aas, Stubber(aas)


def endpoint_response(status: str, variants: dict[str, tuple[int, float]]) -> dict[str, Any]:
    return {
        "EndpointName": ENDPOINT,
        "EndpointArn": f"arn:aws:sagemaker:us-east-1:123456789012:endpoint/{ENDPOINT}",
        "EndpointConfigName": "cfg-live",
        "EndpointStatus": status,
        "CreationTime": T0,
        "LastModifiedTime": T0,
        "ProductionVariants": [
            {
                "VariantName": v,
                "CurrentWeight": w,
                "DesiredWeight": w,
                "CurrentInstanceCount": n,
                "DesiredInstanceCount": n,
            }
            for v, (n, w) in variants.items()
        ],
    }


CDK_ASSETS = "123456789012.dkr.ecr.us-east-1.amazonaws.com/cdk-hnb659fds-container-assets"


def stub_live(
    sm: Stubber,
    aas: Stubber,
    *,
    types: dict[str, str] | None = None,
    variants: dict[str, tuple[int, float]] | None = None,
    registered: tuple[str, ...] = ("primary", "canary"),
    status: str = "InService",
    images: bool = False,
) -> None:
    """The live endpoint as read_live reads it; ``images``: also each variant's Model, as
    ``make deploy`` reads them next (tools/live_images.py)."""
    types = types or {"primary": LIVE_TYPE, "canary": LIVE_TYPE}
    variants = variants or {"primary": (2, 95.0), "canary": (3, 5.0)}
    sm.add_response(
        "describe_endpoint", endpoint_response(status, variants), {"EndpointName": ENDPOINT}
    )
    sm.add_response(
        "describe_endpoint_config",
        {
            "EndpointConfigName": "cfg-live",
            "EndpointConfigArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint-config/x",
            "CreationTime": T0,
            "ProductionVariants": [
                {"VariantName": v, "ModelName": f"m-{v}", "InstanceType": t}
                for v, t in types.items()
            ],
        },
        {"EndpointConfigName": "cfg-live"},
    )
    for v in types if images else ():  # each variant's image: built by CDK here
        sm.add_response(
            "describe_model",
            {
                "ModelName": f"m-{v}",
                "ModelArn": f"arn:aws:sagemaker:us-east-1:123456789012:model/m-{v}",
                "CreationTime": T0,
                "PrimaryContainer": {"Image": f"{CDK_ASSETS}:built-{v}"},
            },
            {"ModelName": f"m-{v}"},
        )
    aas.add_response(
        "describe_scalable_targets",
        {
            "ScalableTargets": [
                {
                    "ServiceNamespace": "sagemaker",
                    "ResourceId": f"endpoint/{ENDPOINT}/variant/{v}",
                    "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
                    "MinCapacity": LIVE_BOUNDS[v][0],
                    "MaxCapacity": LIVE_BOUNDS[v][1],
                    "RoleARN": "arn:aws:iam::123456789012:role/x",
                    "CreationTime": T0,
                }
                for v in registered
            ]
        },
        {
            "ServiceNamespace": "sagemaker",
            "ResourceIds": [f"endpoint/{ENDPOINT}/variant/{v}" for v in types],
            "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        },
    )


class Recorder:
    """Stands in for `cdk deploy`: records each deploy's options, fails the ones listed."""

    def __init__(self, fail: tuple[int, ...] = ()) -> None:
        self.calls: list[dict[str, str]] = []
        self.fail = fail

    def __call__(self, options: DeployOptions) -> int:
        self.calls.append(options.as_context())
        return 1 if len(self.calls) in self.fail else 0


def g5_2xlarge_primary() -> DeploymentConfig:
    raw = raw_config("prod")
    raw["variants"]["primary"]["instance_type"] = "ml.g5.2xlarge"
    return parse(raw)


def run(
    cfg: DeploymentConfig, sm: Any, aas: Any, deploy: Recorder, now: datetime, **kw: Any
) -> int:
    live = tool.read_live(sm, aas, cfg)
    steps = tool.plan_deploy(cfg, live, now=now, **kw)
    return tool.execute(steps, cfg, sm=sm, deploy=deploy, aas=aas, live=live, sleep=lambda s: None)


def stub_minimum(aas: Stubber, variant: str, low: int, high: int) -> None:
    """RegisterScalableTarget of ``variant`` with these bounds."""
    aas.add_response(
        "register_scalable_target",
        {"ScalableTargetARN": f"arn:aws:application-autoscaling:us-east-1:1:x/{variant}"},
        {
            "ServiceNamespace": "sagemaker",
            "ResourceId": f"endpoint/{ENDPOINT}/variant/{variant}",
            "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
            "MinCapacity": low,
            "MaxCapacity": high,
        },
    )


def stub_targets_now(aas: Stubber, variant: str, low: int, high: int) -> None:
    """DescribeScalableTargets of ``variant`` after the deploy."""
    aas.add_response(
        "describe_scalable_targets",
        {
            "ScalableTargets": [
                {
                    "ServiceNamespace": "sagemaker",
                    "ResourceId": f"endpoint/{ENDPOINT}/variant/{variant}",
                    "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
                    "MinCapacity": low,
                    "MaxCapacity": high,
                    "RoleARN": "arn:aws:iam::123456789012:role/x",
                    "CreationTime": T0,
                }
            ]
        },
    )


def test_instance_type_change_deregisters_scaling_first_then_deploys_the_config() -> None:
    sm, sms, aas, aass = clients()
    stub_live(sms, aass)
    deploy = Recorder()
    with sms, aass:
        assert run(g5_2xlarge_primary(), sm, aas, deploy, NIGHT) == 0
        sms.assert_no_pending_responses()
    assert deploy.calls == [
        {"suspend_scaling": "primary", "pin_instance_type": f"primary={LIVE_TYPE}"},
        {},
    ]


def test_a_failed_type_change_deploys_the_live_type_with_scaling_registered_again() -> None:
    sm, sms, aas, aass = clients()
    stub_live(sms, aass)
    deploy = Recorder(fail=(2,))
    with sms, aass:
        assert run(g5_2xlarge_primary(), sm, aas, deploy, NIGHT) == 1
    assert deploy.calls[-1] == {"pin_instance_type": f"primary={LIVE_TYPE}"}  # no suspension
    assert len(deploy.calls) == 3


def test_type_change_of_an_unregistered_variant_is_one_deploy() -> None:
    sm, sms, aas, aass = clients()
    stub_live(sms, aass, registered=("canary",))
    deploy = Recorder()
    with sms, aass:
        assert run(g5_2xlarge_primary(), sm, aas, deploy, NIGHT) == 0
    assert deploy.calls == [{}]


def test_a_canary_type_change_deregisters_the_controllers_scaling_itself_then_deploys() -> None:
    """With rollout.shadow the canary's scalable target is the canary controller's, in no
    template: a suspending deploy would leave it registered and the type change would fail, so
    the tool deregisters it itself, then deploys once (the controller registers it again at the
    next rollout's canary stage)."""
    raw = raw_config("prod")
    raw["variants"]["canary"]["instance_type"] = "ml.g5.2xlarge"
    cfg = parse(raw)
    assert cfg.rollout.shadow is not None
    sm, sms, aas, aass = clients()
    stub_live(sms, aass)
    aass.add_response(
        "deregister_scalable_target",
        {},
        {
            "ServiceNamespace": "sagemaker",
            "ResourceId": f"endpoint/{ENDPOINT}/variant/canary",
            "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
        },
    )
    deploy = Recorder()
    with sms, aass:
        live = tool.read_live(sm, aas, cfg)
        steps = tool.plan_deploy(cfg, live, now=NIGHT)
        assert [s.action for s in steps] == ["release-scaling", "deploy"]
        assert "the canary controller's" in steps[0].why
        rc = tool.execute(steps, cfg, sm=sm, deploy=deploy, aas=aas, live=live,
                          sleep=lambda s: None)  # fmt: skip
        aass.assert_no_pending_responses()
    assert rc == 0
    assert deploy.calls == [{}]  # one deploy: nothing for CloudFormation to suspend


def test_deploy_before_the_peak_raises_counts_first_retrying_while_updating() -> None:
    """The registered minimum goes up first (a scale-in policy cannot take the count back while
    the update waits), one variant per capacity call, and the minimum comes back after."""
    sm, sms, aas, aass = clients()
    stub_live(sms, aass, variants=BUSY)
    stub_minimum(aass, "primary", 27, 54)  # live bounds 2..54 (stub_live)
    stub_targets_now(aass, "primary", 27, 54)  # nobody changed it meanwhile
    stub_minimum(aass, "primary", 2, 54)
    raise_params = {
        "EndpointName": ENDPOINT,
        "DesiredWeightsAndCapacities": [{"VariantName": "primary", "DesiredInstanceCount": 27}],
    }
    # autoscaling is acting: the first call is refused, the tool waits for InService, retries
    sms.add_client_error(
        "update_endpoint_weights_and_capacities",
        service_error_code="ValidationException",
        service_message="Cannot update in-progress endpoint",
        expected_params=raise_params,
    )
    sms.add_response(
        "describe_endpoint", endpoint_response("Updating", BUSY), {"EndpointName": ENDPOINT}
    )
    sms.add_response(
        "describe_endpoint", endpoint_response("InService", BUSY), {"EndpointName": ENDPOINT}
    )
    sms.add_response(
        "update_endpoint_weights_and_capacities",
        {"EndpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/x"},
        raise_params,
    )
    sms.add_response(
        "describe_endpoint", endpoint_response("Updating", BUSY), {"EndpointName": ENDPOINT}
    )
    sms.add_response(
        "describe_endpoint", endpoint_response("InService", BUSY), {"EndpointName": ENDPOINT}
    )
    deploy = Recorder()
    with sms, aass:
        assert run(load_env("prod"), sm, aas, deploy, BEFORE_PEAK) == 0
        sms.assert_no_pending_responses()
        aass.assert_no_pending_responses()
    assert deploy.calls == [{}]


def test_a_raised_minimum_is_restored_after_a_failed_deploy_unless_someone_else_set_it() -> None:
    sm, sms, aas, aass = clients()
    stub_live(sms, aass, variants=BUSY)
    stub_minimum(aass, "primary", 27, 54)
    stub_targets_now(aass, "primary", 27, 54)
    stub_minimum(aass, "primary", 2, 54)
    raise_ok(sms, "primary", 27)
    deploy = Recorder(fail=(1,))
    with sms, aass:
        assert run(load_env("prod"), sm, aas, deploy, BEFORE_PEAK) == 1
        aass.assert_no_pending_responses()  # restored although the deploy failed
    # a schedule (or the deploy's template) set another minimum meanwhile: left alone
    sm, sms, aas, aass = clients()
    stub_live(sms, aass, variants=BUSY)
    stub_minimum(aass, "primary", 27, 54)
    stub_targets_now(aass, "primary", 28, 40)
    raise_ok(sms, "primary", 27)
    with sms, aass:
        assert run(load_env("prod"), sm, aas, Recorder(), BEFORE_PEAK) == 0
        aass.assert_no_pending_responses()


def raise_ok(sms: Stubber, variant: str, count: int) -> None:
    sms.add_response(
        "update_endpoint_weights_and_capacities",
        {"EndpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/x"},
        {
            "EndpointName": ENDPOINT,
            "DesiredWeightsAndCapacities": [
                {"VariantName": variant, "DesiredInstanceCount": count}
            ],
        },
    )
    sms.add_response(
        "describe_endpoint", endpoint_response("InService", BUSY), {"EndpointName": ENDPOINT}
    )


def test_promotion_reset_of_weights_first_gives_the_idle_primary_its_share() -> None:
    # after a canary reached 100%: primary idled down to 2 at weight 0, canary holds 3 at 100;
    # the primary's 95 % of those 5 instances is ceil(4.75) = 5
    sm, sms, aas, aass = clients()
    stub_live(sms, aass, variants={"primary": (2, 0.0), "canary": (3, 100.0)})
    stub_minimum(aass, "primary", 5, 54)
    stub_targets_now(aass, "primary", 5, 54)
    stub_minimum(aass, "primary", 2, 54)
    sms.add_response(
        "update_endpoint_weights_and_capacities",
        {"EndpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/x"},
        {
            "EndpointName": ENDPOINT,
            "DesiredWeightsAndCapacities": [{"VariantName": "primary", "DesiredInstanceCount": 5}],
        },
    )
    sms.add_response(
        "describe_endpoint", endpoint_response("InService", BUSY), {"EndpointName": ENDPOINT}
    )
    deploy = Recorder()
    with sms, aass:
        assert run(load_env("prod"), sm, aas, deploy, NIGHT, reset=("DesiredWeight",)) == 0
        sms.assert_no_pending_responses()
    assert deploy.calls == [{"reset": "DesiredWeight"}]


def test_first_deploy_when_the_endpoint_does_not_exist() -> None:
    sm, sms, aas, aass = clients()
    sms.add_client_error(
        "describe_endpoint",
        service_error_code="ValidationException",
        service_message=f'Could not find endpoint "{ENDPOINT}".',
    )
    deploy = Recorder()
    with sms, aass:
        assert run(load_env("prod"), sm, aas, deploy, NIGHT) == 0
    assert deploy.calls == [{}]


class NoRollout:
    """The canary controller's status answer when no rollout was ever started (Lambda's Invoke
    response format); the rollout refusal itself is tested in tests/lambdas."""

    def invoke(self, **_: Any) -> dict[str, Any]:
        return {"StatusCode": 200, "Payload": io.BytesIO(b'{"status": null}')}


def main(
    *argv: str, stub: Callable[[Stubber, Stubber], None], now: datetime = NIGHT
) -> tuple[int, Recorder]:
    """``make deploy ENV=prod`` (tools.deploy.main) on stubbed clients at ``now`` (default: a
    night in every zone, no schedule's floor due), reading the frozen prod
    (tests/fixtures/configs): its exit code and what it deployed; every stubbed call was made."""
    sm, sms, aas, aass = clients()
    stub(sms, aass)
    deploy = Recorder()
    with (
        tempfile.TemporaryDirectory() as root,
        patch.object(tool, "REPO_ROOT", fixture_root(Path(root))),
        sms,
        aass,
    ):
        rc = tool.main(
            ["--env", "prod", *argv],
            clients={
                "sagemaker": sm,
                "application-autoscaling": aas,
                "lambda": NoRollout(),
                "deploy": deploy,
            },
            now=lambda: now,
        )
    return rc, deploy


def test_an_updating_endpoint_is_refused_and_nothing_is_deployed(capsys) -> None:
    rc, deploy = main(
        "--image-tag",
        "abc",
        stub=lambda sms, aass: stub_live(sms, aass, status="Updating", images=True),
    )
    assert rc == 1 and deploy.calls == []
    assert "refused: mangaassist-vllm-prod is Updating" in capsys.readouterr().err


def test_prod_refuses_to_deploy_an_image_cdk_builds(capsys) -> None:
    """image.deploy_builds: false (config/prod.yaml): the CDK-built image would go to the CDK
    asset repository (no scan on push, no customer key); refused before anything changes."""
    rc, deploy = main(stub=lambda sms, aass: stub_live(sms, aass, images=True))
    assert rc == 1 and deploy.calls == []
    err = capsys.readouterr().err
    assert "image.deploy_builds: false" in err and "IMAGE_TAG=<tag>" in err


def test_dry_run_prints_the_steps_and_deploys_nothing(capsys) -> None:
    busy = {"primary": (8, 95.0), "canary": (3, 5.0)}
    rc, deploy = main(
        "--dry-run", "--image-tag", "abc",
        stub=lambda sms, aass: stub_live(sms, aass, variants=busy, images=True),
    )  # fmt: skip
    assert rc == 0 and deploy.calls == []
    assert "step 1: deploy" in capsys.readouterr().out


def test_dry_run_before_a_peak_raises_the_counts_first(capsys) -> None:
    """The same deploy within the update's block of prod's evening floor (17:45 JST): the
    counts are raised before the update (the step a wall-clock run met at 17:30 JST)."""
    busy = {"primary": (8, 95.0), "canary": (3, 5.0)}
    rc, deploy = main(
        "--dry-run", "--image-tag", "abc",
        stub=lambda sms, aass: stub_live(sms, aass, variants=busy, images=True),
        now=BEFORE_PEAK,
    )  # fmt: skip
    assert rc == 0 and deploy.calls == []
    out = capsys.readouterr().out
    assert out.startswith("step 1: raise {'primary': 27}") and "step 2: deploy" in out


def test_a_failed_aws_call_exits_1_naming_the_region_and_deploys_nothing(capsys) -> None:
    def denied(sms: Stubber, _: Stubber) -> None:
        sms.add_client_error(
            "describe_endpoint", "AccessDeniedException", "denied: sagemaker:DescribeEndpoint"
        )

    rc, deploy = main(stub=denied)
    assert rc == 1 and deploy.calls == []
    err = capsys.readouterr().err
    assert "AWS call failed (us-east-1)" in err and "sagemaker:DescribeEndpoint" in err


def test_cdk_command_carries_the_options_as_context() -> None:
    opts = DeployOptions(
        suspend_scaling=frozenset({"primary"}), pin_instance_types={"primary": "ml.g5.xlarge"}
    )
    cmd = tool.cdk_deploy_command(load_env("prod"), opts, tool.REPO_ROOT / "cdk.out" / "prod")
    # the release, image and endpoint stacks by name: never the deploy-access stack (IAM for CI)
    assert cmd[:6] == ["npx", "cdk", "deploy", *tool.deployed_stacks(load_env("prod"))]
    assert cmd[3:6] == [
        "mangaassist-prod-model-release", "mangaassist-prod-image", "mangaassist-prod-endpoint",
    ]  # fmt: skip
    ctx = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-c"]
    assert ctx == ["env=prod", "suspend_scaling=primary", "pin_instance_type=primary=ml.g5.xlarge"]
    assert DeployOptions.from_context(dict(c.split("=", 1) for c in ctx[1:]).get) == opts


@pytest.mark.parametrize("bad", ["DesiredCount", "Weight"])
def test_bad_reset_value_is_a_usage_error(bad: str, capsys) -> None:
    assert tool.main(["--env", "prod", "--reset", bad], clients={"sagemaker": object()}) == 2
    assert bad in capsys.readouterr().err
