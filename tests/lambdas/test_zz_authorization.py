"""The Lambdas' roles against every AWS call their code made in this suite (collected last, so
every other test's calls are in :data:`aws_calls.AWS_CALLS`), by AWS's own data: each call's
action and the resources the Service Authorization Reference says it requires, plus what AWS
documents a service doing with the caller's permissions (a KMS grant when an endpoint moves to a
config that names a key), evaluated against the roles prod synthesizes with a maintained IAM
evaluator (tools/authorization/). The calls name the test world's resources; they are mapped to
prod's through the controller's environment, the contract between the construct and the code.
A failure names the principal, the action, the ARN and the call that needs it."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest

from lambdas.canary_controller import names
from lambdas.canary_controller.settings import Settings
from tests.infra.test_execution_policy import ACCOUNT, deployed_through_bootstrap, synth
from tests.lambdas.aws_calls import AWS_CALLS
from tests.lambdas.conftest import ALARMS, ENDPOINT
from tests.lambdas.shadow_world import BUCKET, CANARY_CONFIG, SHADOW_CONFIG
from tools.authorization import runtime
from tools.authorization.check import denials
from tools.authorization.recorder import Call
from tools.authorization.templates import Deployment

#: The endpoint the Stubber-driven tests name (test_canary_shadow_fleet.py).
STUBBED_ENDPOINT = "ep"
#: principal -> its Lambda handler in the template
HANDLERS = {
    "canary controller": "canary_controller.handler.handler",
    "smoke gate": "smoke_gate.handler.handler",
}


@cache
def prod() -> Deployment:
    cfg, templates = synth("prod")
    return Deployment(deployed_through_bootstrap(cfg, templates), "aws", cfg.region, ACCOUNT)


def world_to_prod(d: Deployment) -> dict[str, str]:
    """The test world's names -> prod's: what the controller's environment says in each."""
    s = Settings.from_env(runtime.function_environment(d, HANDLERS["canary controller"]))
    assert s.shadow is not None  # prod's releases start with the shadow stage
    (endpoint,) = [r for r, res in d.resources() if res["Type"] == "AWS::SageMaker::Endpoint"]
    serving = d.render(endpoint.stack, d.resource(endpoint)["Properties"]["EndpointConfigName"])
    assert serving is not None
    prod_sized = names.sized_shadow_config_prefix(s.endpoint_name)
    return {
        ENDPOINT: s.endpoint_name,
        STUBBED_ENDPOINT: s.endpoint_name,
        names.sized_shadow_config_prefix(ENDPOINT): prod_sized,
        names.sized_shadow_config_prefix(STUBBED_ENDPOINT): prod_sized,
        f"arn:aws:states:us-east-1:{ACCOUNT}:stateMachine:{ENDPOINT}-canary-rollout": (
            s.state_machine_arn
        ),
        "rollout-state": s.table_name,
        f"arn:aws:sns:us-east-1:{ACCOUNT}:alerts": s.topic_arn,
        SHADOW_CONFIG: s.shadow.config_name,
        CANARY_CONFIG: serving,
        BUCKET: s.shadow.capture_uri.removeprefix("s3://").split("/")[0],
        **dict(zip(ALARMS, s.alarm_names, strict=False)),
    }


def policies(d: Deployment) -> dict[str, list[dict[str, Any]]]:
    return {p: runtime.role_policies(d, runtime.function_role(d, h)) for p, h in HANDLERS.items()}


def recorded() -> list[Call]:
    calls = list(AWS_CALLS.calls)
    by_principal = {c.principal for c in calls}
    if by_principal != set(HANDLERS):
        pytest.fail(
            f"calls recorded for {sorted(by_principal)} only: this check judges the calls of the "
            "whole tests/lambdas suite; run it with the suite (make test-lambdas)"
        )
    return calls


def test_the_lambdas_roles_allow_every_call_their_code_makes() -> None:
    d = prod()
    requests, unresolved = runtime.requests(d, recorded(), world_to_prod(d))
    assert unresolved == [], unresolved
    denied = denials(requests, policies(d), ACCOUNT)
    assert denied == [], (
        f"{len(denied)} requests the Lambdas' roles do not allow (grant them in their "
        "constructs under stacks/constructs/):\n" + "\n".join(map(str, denied))
    )


def test_moving_to_the_shadow_config_needs_a_grant_on_its_key() -> None:
    """Finding 5 of issue 41: the shadow config names a KmsKeyId, so UpdateEndpoint to it needs
    the caller's kms:CreateGrant; without the grant the check names it."""
    d = prod()
    requests, _ = runtime.requests(d, recorded(), world_to_prod(d))
    grants = [r for r in requests if r.action == "kms:CreateGrant"]
    assert grants and all("UpdateEndpoint" in r.why for r in grants)
    assert denied_without("StageConfigsKey") == {
        ("canary controller", "kms:CreateGrant"),
        ("canary controller", "kms:DescribeKey"),
    }


def denied_without(sid: str) -> set[tuple[str, str]]:
    """(principal, action) of every recorded request the roles deny once the controller's
    statement ``sid`` is taken out."""
    d = prod()
    requests, _ = runtime.requests(d, recorded(), world_to_prod(d))
    stripped = policies(d)
    for doc in stripped["canary controller"]:
        doc["Statement"] = [s for s in doc["Statement"] if s.get("Sid") != sid]
    return {(x.request.principal, x.request.action) for x in denials(requests, stripped, ACCOUNT)}


def test_the_stage_probes_need_the_invoke_grant() -> None:
    """Issue 41, item 4: the shadow stage's probes call InvokeEndpoint and
    InvokeEndpointWithResponseStream on the endpoint; without the controller's StageProbes
    statement the check names both actions."""
    assert denied_without("StageProbes") == {
        ("canary controller", "sagemaker:InvokeEndpoint"),
        ("canary controller", "sagemaker:InvokeEndpointWithResponseStream"),
    }
