"""The authorization check (tools/authorization/) on the synthesized templates of dev and prod
(and the component shape's dev example, config/examples/dev-components.yaml),
by AWS's own data: the Service Authorization Reference's required resource types per action and
IAM's evaluation of the real policies, never the product's own mapping of AWS.

Each request the CloudFormation execution role makes (every handler permission of every
resource, on every resource the reference says the action requires, plus the calls AWS documents
a service making with the caller's permissions) must be allowed by the execution policies; a
failure names the principal, the action, the ARN and why the request is made."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import pytest

from stacks.constructs import execution_policy as ep
from tools.authorization import aws_iam, execution_role
from tools.authorization.check import denials
from tools.authorization.templates import Deployment

from .test_execution_policy import ACCOUNT, APPS, EXAMPLES, deployed_through_bootstrap, names, synth


@cache
def deployment(env: str) -> Deployment:
    cfg, templates = synth(env)
    return Deployment(deployed_through_bootstrap(cfg, templates), "aws", cfg.region, ACCOUNT)


@cache
def execution_role_requests(env: str) -> tuple[list[aws_iam.Request], list[Any]]:
    return execution_role.requests(deployment(env), not_granted=ep.NOT_GRANTED)


def execution_policies(env: str) -> dict[str, list[dict[str, Any]]]:
    cfg, _ = synth(env)
    return {execution_role.PRINCIPAL: list(ep.policy_documents(names(cfg)).values())}


@pytest.mark.parametrize("env", APPS)
def test_the_execution_policies_allow_every_request_cloudformation_makes(env: str) -> None:
    requests, _ = execution_role_requests(env)
    # every handler permission of ~100 resources (~70 in the component shape: no canary
    # controller, smoke gate or variant scaling)
    assert len(requests) > (400 if env in EXAMPLES else 500)
    denied = denials(requests, execution_policies(env), ACCOUNT)
    assert denied == [], (
        f"{len(denied)} requests of {env}'s deploy the execution policy does not allow; extend "
        "GRANTS in stacks/constructs/execution_policy.py:\n" + "\n".join(map(str, denied))
    )


def test_the_check_fails_on_a_policy_that_grants_create_endpoint_on_the_endpoint_only() -> None:
    """Finding 1 of issue 41: CreateEndpoint and UpdateEndpoint require the endpoint *and* the
    endpoint config (Service Authorization Reference); a grant on ``endpoint/...`` alone is
    AccessDenied on ``endpoint-config/<name>`` (aws/aws-cdk#11594)."""
    requests, _ = execution_role_requests("prod")
    policies = copy.deepcopy(execution_policies("prod"))
    for doc in policies[execution_role.PRINCIPAL]:  # the policy as it was before the fix
        doc["Statement"] = [s for s in doc["Statement"] if s["Sid"] != "EndpointOnItsConfig"]
    denied = {(d.request.action, d.request.resource.split(":")[-1].split("/")[0])
              for d in denials(requests, policies, ACCOUNT)}  # fmt: skip
    assert ("sagemaker:CreateEndpoint", "endpoint-config") in denied
    assert ("sagemaker:UpdateEndpoint", "endpoint-config") in denied
    message = str(next(d for d in denials(requests, policies, ACCOUNT)))
    assert message.startswith(execution_role.PRINCIPAL) and "endpoint-config/" in message


def test_the_check_fails_without_the_scaling_permissions_aws_documents() -> None:
    """Finding 2: registering a SageMaker variant as a scalable target needs the caller's
    sagemaker:UpdateEndpointWeightsAndCapacities (Application Auto Scaling's guide)."""
    requests, _ = execution_role_requests("prod")
    policies = copy.deepcopy(execution_policies("prod"))
    for doc in policies[execution_role.PRINCIPAL]:
        for statement in doc["Statement"]:
            statement["Action"] = [
                a
                for a in statement["Action"]
                if a != "sagemaker:UpdateEndpointWeightsAndCapacities"
            ]
    denied = denials(requests, policies, ACCOUNT)
    assert [d.request.action for d in denied] == [
        "sagemaker:UpdateEndpointWeightsAndCapacities"
    ] * len(denied) and denied
    assert all(":endpoint/" in d.request.resource for d in denied)


def test_every_required_resource_type_of_the_endpoint_is_asked_for() -> None:
    """The requests come from the reference's required types, not from one ARN per resource."""
    requests, _ = execution_role_requests("prod")
    create = {r.resource.split(":")[5].split("/")[0] for r in requests
              if r.action == "sagemaker:CreateEndpoint"}  # fmt: skip
    assert create == {"endpoint", "endpoint-config"}
    action = aws_iam.describe(["sagemaker:CreateEndpoint"])["sagemaker:CreateEndpoint"]
    assert {t.name for t in action.required} == {"endpoint", "endpoint-config"}


def test_a_kms_key_is_judged_with_its_key_policy() -> None:
    """KMS requires the key policy to allow (or delegate to IAM): the check passes each key's
    policy from the template, so a key policy that stops delegating fails it."""
    requests, _ = execution_role_requests("prod")
    keyed = [r for r in requests if r.action == "kms:DescribeKey" and r.resource_policy]
    assert keyed
    closed = [
        aws_iam.Request(r.principal, r.action, r.resource, r.why, r.context,
                        '{"Version": "2012-10-17", "Statement": []}')
        for r in keyed
    ]  # fmt: skip
    assert denials(closed, execution_policies("prod"), ACCOUNT)
    assert not denials(keyed, execution_policies("prod"), ACCOUNT)


def test_an_action_the_reference_does_not_know_is_reported() -> None:
    assert not aws_iam.describe(["sagemaker:NoSuchAction"])["sagemaker:NoSuchAction"].exists
    assert aws_iam.data_version().startswith("0.")


def test_a_call_made_in_a_worker_thread_is_the_submitting_codes() -> None:
    """S3's managed transfers make their requests in a thread pool: the Recorder gives each to
    the principal whose code submitted the work."""
    from concurrent.futures import ThreadPoolExecutor

    import boto3
    from botocore.stub import Stubber

    from tools.authorization.recorder import Recorder

    recorder = Recorder({f"{__file__}:_submitter": "submitter"})
    s3 = boto3.client("s3", region_name="us-east-1", aws_access_key_id="t",
                      aws_secret_access_key="t")  # fmt: skip
    recorder.install()
    try:
        with Stubber(s3) as stub:
            stub.add_response("head_bucket", {}, {"Bucket": "b"})
            stub.add_response("head_bucket", {}, {"Bucket": "b"})
            _submitter(s3)
            with ThreadPoolExecutor(1) as pool:  # submitted by this test: nobody's
                pool.submit(s3.head_bucket, Bucket="b").result()
    finally:
        recorder.uninstall()
    assert [(c.principal, c.operation) for c in recorder.calls] == [("submitter", "s3:HeadBucket")]


def _submitter(s3: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        pool.submit(s3.head_bucket, Bucket="b").result()


def test_the_check_fails_on_the_component_shape_without_its_inference_component_grant() -> None:
    """The component shape's requests reach the evaluator: without the InferenceComponents
    statement, CloudFormation's creates of the base and adapter components (on
    ``inference-component/<project>-<env>-...``) are denied, named."""
    requests, _ = execution_role_requests("dev-components")
    policies = copy.deepcopy(execution_policies("dev-components"))
    for doc in policies[execution_role.PRINCIPAL]:
        doc["Statement"] = [s for s in doc["Statement"] if s["Sid"] != "InferenceComponents"]
    denied = {
        (d.request.action, d.request.resource.split(":")[-1].split("/")[0])
        for d in denials(requests, policies, ACCOUNT)
    }
    assert ("sagemaker:CreateInferenceComponent", "inference-component") in denied
    assert ("sagemaker:DeleteInferenceComponent", "inference-component") in denied
    assert {resource for _, resource in denied} == {"inference-component"}
