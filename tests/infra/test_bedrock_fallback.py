"""The fallback route (clients/bedrock_fallback.py) against botocore's own SageMaker Runtime and
Bedrock Runtime models (Stubber validates every request against the real API shape): 429 and 5xx
from the endpoint go to the imported model of the same adapter, a client's own error never does,
an adapter without a copy and a cold copy are named; a timeout is injected in botocore's send."""

from __future__ import annotations

import io
import json
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ReadTimeoutError
from botocore.response import StreamingBody
from botocore.stub import Stubber
from moto import mock_aws

from clients.bedrock_fallback import FallbackFailed, FallbackRoute, imported_models
from container.model_prep.artifact import ArtifactLocation
from tools.bedrock_import import Package, record

ENDPOINT = "mangaassist-vllm-prod"
ARN = "arn:aws:bedrock:us-east-1:123456789012:imported-model/abcdefgh1234"
MESSAGES = [{"role": "user", "content": "Recommend one action manga."}]


def body(text: str) -> StreamingBody:
    raw = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
    return StreamingBody(io.BytesIO(raw), len(raw))


@pytest.fixture
def clients():
    no_retry = Config(retries={"total_max_attempts": 1})
    sm = boto3.client("sagemaker-runtime", region_name="us-east-1", config=no_retry,
                      aws_access_key_id="x", aws_secret_access_key="x")  # fmt: skip
    br = boto3.client("bedrock-runtime", region_name="us-east-1",
                      aws_access_key_id="x", aws_secret_access_key="x")  # fmt: skip
    with Stubber(sm) as sm_stub, Stubber(br) as br_stub:
        yield sm, br, sm_stub, br_stub
        sm_stub.assert_no_pending_responses()
        br_stub.assert_no_pending_responses()


def route(sm: Any, br: Any) -> FallbackRoute:
    return FallbackRoute(sm, br, endpoint_name=ENDPOINT, bedrock_models={"manga_domain": ARN})


def sagemaker_fails(stub: Stubber, code: str, status: int, **modeled: Any) -> None:
    stub.add_client_error("invoke_endpoint", code, "refused", http_status_code=status,
                          modeled_fields=modeled or None)  # fmt: skip


def bedrock_answers(stub: Stubber) -> None:
    stub.add_response(
        "invoke_model",
        {"body": body("From Bedrock: Frieren."), "contentType": "application/json"},
        {"modelId": ARN, "body": json.dumps({"messages": MESSAGES, "max_tokens": 64,
         "temperature": 0.0}).encode(), "contentType": "application/json",
         "accept": "application/json"},
    )  # fmt: skip


def test_an_answering_endpoint_is_the_only_target(clients) -> None:
    sm, br, sm_stub, _ = clients
    sm_stub.add_response("invoke_endpoint", {"Body": body("From SageMaker.")})
    answer = route(sm, br).chat(MESSAGES, adapter="manga_domain", max_tokens=64)
    assert answer.served_by == "sagemaker" and answer.fallback_reason is None
    assert answer.body["choices"][0]["message"]["content"] == "From SageMaker."


@pytest.mark.parametrize(
    ("code", "status", "modeled", "reason"),
    [
        ("ModelError", 424, {"OriginalStatusCode": 429}, "the container answered HTTP 429"),
        ("ModelError", 424, {"OriginalStatusCode": 503}, "the container answered HTTP 503"),
        ("ServiceUnavailable", 503, {}, "SageMaker answered ServiceUnavailable"),
        ("InternalFailure", 500, {}, "SageMaker answered InternalFailure"),
        ("ThrottlingException", 400, {}, "SageMaker answered ThrottlingException"),
    ],
)
def test_429_and_5xx_go_to_the_same_adapters_bedrock_copy(
    clients, code, status, modeled, reason
) -> None:
    sm, br, sm_stub, br_stub = clients
    sagemaker_fails(sm_stub, code, status, **modeled)
    bedrock_answers(br_stub)
    answer = route(sm, br).chat(MESSAGES, adapter="manga_domain", max_tokens=64)
    assert answer.served_by == "bedrock" and answer.fallback_reason == reason
    assert answer.body["choices"][0]["message"]["content"] == "From Bedrock: Frieren."


@pytest.mark.parametrize(
    ("code", "status", "modeled"),
    [("ModelError", 424, {"OriginalStatusCode": 400}), ("ModelError", 424,
     {"OriginalStatusCode": 413}), ("ValidationError", 400, {})],
)  # fmt: skip
def test_a_clients_own_error_is_never_sent_to_bedrock(clients, code, status, modeled) -> None:
    sm, br, sm_stub, _ = clients
    sagemaker_fails(sm_stub, code, status, **modeled)
    with pytest.raises(ClientError) as caught:
        route(sm, br).chat(MESSAGES, adapter="manga_domain", max_tokens=64)
    assert caught.value.response["Error"]["Code"] == code  # no invoke_model was stubbed or made


def test_an_adapter_without_a_bedrock_copy_is_named_not_answered_by_another(clients) -> None:
    sm, br, sm_stub, _ = clients
    sagemaker_fails(sm_stub, "ModelError", 424, OriginalStatusCode=503)
    with pytest.raises(FallbackFailed, match=r"adapter 'jp_style' has no Bedrock copy"):
        route(sm, br).chat(MESSAGES, adapter="jp_style", max_tokens=64)


def test_a_cold_bedrock_copy_is_named(clients) -> None:
    sm, br, sm_stub, br_stub = clients
    sagemaker_fails(sm_stub, "ModelError", 424, OriginalStatusCode=429)
    br_stub.add_client_error("invoke_model", "ModelNotReadyException", http_status_code=429)
    with pytest.raises(FallbackFailed, match=r"HTTP 429; .*ModelNotReadyException \(.*cold"):
        route(sm, br).chat(MESSAGES, adapter="manga_domain", max_tokens=64)


def test_an_endpoint_that_does_not_answer_in_time_falls_back(clients) -> None:
    """The timeout is raised where botocore sends the request (its before-send event)."""
    sm, br, sm_stub, br_stub = clients
    sm_stub.deactivate()

    def timeout(request: Any, **_: Any) -> None:
        raise ReadTimeoutError(endpoint_url=request.url)

    sm.meta.events.register("before-send.sagemaker-runtime.InvokeEndpoint", timeout)
    bedrock_answers(br_stub)
    answer = route(sm, br).chat(MESSAGES, adapter="manga_domain", max_tokens=64)
    assert answer.served_by == "bedrock"
    assert answer.fallback_reason == "no answer from the endpoint (ReadTimeoutError)"


def test_the_route_reads_the_copies_make_bedrock_import_recorded() -> None:
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="releases")
        where = ArtifactLocation("releases", "models/bedrock-v1")
        package = Package("m-0123456789abcdef", "d" * 64, {}, where)
        record(s3, package, "manga_domain", {"model": "manga_domain", "imported_model_arn": ARN})
        assert imported_models(s3, where.uri("m-0123456789abcdef")) == {"manga_domain": ARN}
