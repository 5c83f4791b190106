"""make promote: one command, refused before any change unless a rollout COMPLETED, and resumable
after a failure at any step (the fleet says where it stopped). The fleet is a small fake that
changes as the real one would; the AWS reads go through botocore's Stubber."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from tools import promote as tool
from tools.canary import ControllerError

REPO = "123456789012.dkr.ecr.us-east-1.amazonaws.com/mangaassist-vllm-prod"


class Fleet:
    """The endpoint and the controller's record, as the promotion's steps change them."""

    def __init__(self, status: str = "COMPLETED", *, fail_deploy: int = 0, fail_idle: int = 0):
        self.state: dict[str, Any] = {"rollout_id": "rollout-1", "status": status}
        self.images = {"primary": f"{REPO}:sha-old", "canary": f"{REPO}:sha-new"}
        self.fail_deploy, self.fail_idle = fail_deploy, fail_idle
        self.calls: list[str] = []

    def deploy(self, tag: str) -> int:
        self.calls.append(f"deploy {tag}")
        if self.fail_deploy:
            self.fail_deploy -= 1
            return 1  # CloudFormation rolled back: the primary still runs the old tag
        self.images = {v: f"{REPO}:{tag}" for v in self.images}
        return 0

    def idle(self) -> dict[str, Any]:
        self.calls.append("idle")
        if self.fail_idle:
            self.fail_idle -= 1
            raise ControllerError("ThrottlingException: Rate exceeded")
        self.state = {"rollout_id": "rollback-9", "status": "ROLLED_BACK",
                      "rollback_reason": "promoted (by promote)"}  # fmt: skip
        return self.state

    def run(self, cfg) -> tuple[int, list[str]]:
        lines: list[str] = []
        rc = tool.promote(cfg, status=lambda: dict(self.state), images=lambda: dict(self.images),
                          deploy=self.deploy, idle_canary=self.idle, out=lines.append)  # fmt: skip
        return rc, lines


def test_a_completed_rollout_is_promoted_in_order(prod_cfg) -> None:
    fleet = Fleet()
    rc, lines = fleet.run(prod_cfg)
    assert rc == 0
    assert fleet.calls == ["deploy sha-new", "idle"]
    assert lines[1].startswith("2. deploy: primary sha-old -> sha-new, weights reset")
    assert "IMAGE_TAG=sha-new RESET=DesiredWeight" in lines[1]
    assert fleet.images["primary"].endswith(":sha-new") and fleet.state["status"] == "ROLLED_BACK"


@pytest.mark.parametrize("status", ["RUNNING", "ROLLING_BACK", "ROLLED_BACK", "FAILED", None])
def test_no_completed_rollout_is_refused_before_any_change(prod_cfg, status) -> None:
    fleet = Fleet(status)
    with pytest.raises(tool.PromoteRefused, match=r"no rollout COMPLETED .* nothing was changed"):
        fleet.run(prod_cfg)
    assert fleet.calls == []


def test_a_failed_deploy_stops_and_the_next_run_deploys_again(prod_cfg) -> None:
    fleet = Fleet(fail_deploy=1)
    rc, lines = fleet.run(prod_cfg)
    assert rc == 1 and fleet.calls == ["deploy sha-new"]
    assert "promote stopped at step 2" in lines[-1]
    rc, _ = fleet.run(prod_cfg)
    assert rc == 0 and fleet.calls == ["deploy sha-new", "deploy sha-new", "idle"]


def test_a_failure_after_the_deploy_resumes_without_deploying_again(prod_cfg) -> None:
    fleet = Fleet(fail_idle=1)
    with pytest.raises(ControllerError):
        fleet.run(prod_cfg)
    assert fleet.calls == ["deploy sha-new", "idle"]
    rc, lines = fleet.run(prod_cfg)
    assert rc == 0 and fleet.calls == ["deploy sha-new", "idle", "idle"]
    assert lines[1] == "2. deploy: the primary already runs sha-new: nothing to do"


def test_a_finished_promotion_run_again_changes_nothing(prod_cfg) -> None:
    fleet = Fleet()
    fleet.run(prod_cfg)
    fleet.calls.clear()
    rc, lines = fleet.run(prod_cfg)
    assert rc == 0 and fleet.calls == []
    assert "nothing to do" in lines[1] and "nothing to do" in lines[2]


def test_a_canary_image_from_another_repository_is_refused(prod_cfg) -> None:
    fleet = Fleet()
    fleet.images["canary"] = "123456789012.dkr.ecr.us-east-1.amazonaws.com/cdk-assets:abc"
    with pytest.raises(tool.PromoteRefused, match=r"not an image of image\.repository_name"):
        fleet.run(prod_cfg)
    assert fleet.calls == []


def sagemaker_reading(images: dict[str, str]) -> tuple[Any, Stubber]:
    sm = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="t",
                      aws_secret_access_key="t")  # fmt: skip
    stub = Stubber(sm)
    now = datetime(2026, 11, 24, tzinfo=UTC)
    stub.add_response(
        "describe_endpoint",
        {
            "EndpointName": "e",
            "EndpointArn": "arn:aws:sagemaker:us-east-1:1:endpoint/e",
            "EndpointConfigName": "e-config-2",
            "EndpointStatus": "InService",
            "CreationTime": now,
            "LastModifiedTime": now,
        },
        {"EndpointName": "mangaassist-vllm-prod"},
    )
    stub.add_response(
        "describe_endpoint_config",
        {
            "EndpointConfigName": "e-config-2",
            "EndpointConfigArn": "arn:aws:sagemaker:us-east-1:1:endpoint-config/e-config-2",
            "ProductionVariants": [{"VariantName": v, "ModelName": f"model-{v}"} for v in images],
            "CreationTime": now,
        },
        {"EndpointConfigName": "e-config-2"},
    )
    for v, image in images.items():
        stub.add_response(
            "describe_model",
            {
                "ModelName": f"model-{v}",
                "PrimaryContainer": {"Image": image},
                "ModelArn": f"arn:aws:sagemaker:us-east-1:1:model/model-{v}",
                "CreationTime": now,
            },
            {"ModelName": f"model-{v}"},
        )
    return sm, stub  # fmt: skip


class Controller:
    """Lambda's Invoke answers of the canary controller."""

    def __init__(self, states: list[dict[str, Any]]) -> None:
        self.states, self.events = states, []

    def invoke(self, **kw: Any) -> dict[str, Any]:
        self.events.append(json.loads(kw["Payload"]))
        return {"StatusCode": 200, "Payload": io.BytesIO(json.dumps(self.states.pop(0)).encode())}


def test_make_promote_reads_the_live_images_and_asks_the_controller(capsys) -> None:
    sm, stub = sagemaker_reading({"primary": f"{REPO}:sha-old", "canary": f"{REPO}:sha-new"})
    lam = Controller([{"rollout_id": "r1", "status": "COMPLETED"},
                      {"rollout_id": "rollback-1", "status": "ROLLED_BACK"}])  # fmt: skip
    deployed: list[str] = []
    given = {"sagemaker": sm, "lambda": lam, "deploy": lambda tag: deployed.append(tag) or 0}
    with stub:
        rc = tool.main(["--env", "prod"], clients=given)
    assert rc == 0 and deployed == ["sha-new"]
    assert [e["action"] for e in lam.events] == ["status", "rollback"]
    assert lam.events[1]["reason"] == "promoted"
    stub.assert_no_pending_responses()
    assert "promoted: both variants run sha-new" in capsys.readouterr().out


def test_make_promote_refused_names_the_status(capsys) -> None:
    lam = Controller([{"rollout_id": "r1", "status": "RUNNING"}])
    given = {"sagemaker": object(), "lambda": lam, "deploy": lambda t: pytest.fail("deployed")}
    rc = tool.main(["--env", "prod"], clients=given)
    assert rc == 1
    assert "no rollout COMPLETED on mangaassist-vllm-prod (status 'RUNNING')" in (
        capsys.readouterr().err
    )
