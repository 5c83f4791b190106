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

from clients.bedrock_fallback import ColdStart, FallbackFailed, FallbackRoute, imported_models
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


# --- a cold (scaled-to-zero) inference component: issue 45 ---------------------------------

#: InvokeEndpoint's documented answer while a component has no copy (clients/bedrock_fallback.py).
NO_CAPACITY = (
    "Inference Component has no capacity to process this request. ApplicationAutoScaling may be "
    "in-progress (if configured) or try to increase the capacity by invoking "
    "UpdateInferenceComponentRuntimeConfig API."
)
COMPONENTS = {"base": "mangaassist-dev-base", "manga_domain": "mangaassist-dev-lora-manga-domain"}


def no_copy(stub: Stubber, component: str = COMPONENTS["manga_domain"]) -> None:
    stub.add_client_error(
        "invoke_endpoint", "ValidationError", NO_CAPACITY, http_status_code=400,
        expected_params=invoke_params(component),
    )  # fmt: skip


def invoke_params(component: str) -> dict[str, Any]:
    """The component names the adapter: the body carries none."""
    request = {"messages": MESSAGES, "max_tokens": 64, "temperature": 0.0}
    return {"EndpointName": ENDPOINT, "InferenceComponentName": component,
            "ContentType": "application/json", "Accept": "application/json",
            "Body": json.dumps(request).encode()}  # fmt: skip


def cold_route(sm: Any, br: Any, slept: list[float], **cold: float) -> FallbackRoute:
    return FallbackRoute(
        sm, br, endpoint_name=ENDPOINT, bedrock_models={"manga_domain": ARN},
        inference_components=COMPONENTS,
        cold_start=ColdStart(**cold) if cold else None, sleep=slept.append,
    )  # fmt: skip


def test_a_cold_component_is_retried_with_backoff_until_its_first_copy_serves(clients) -> None:
    sm, br, sm_stub, _ = clients
    for _ in range(3):
        no_copy(sm_stub)
    sm_stub.add_response("invoke_endpoint", {"Body": body("From the first copy.")},
                         invoke_params(COMPONENTS["manga_domain"]))  # fmt: skip
    slept: list[float] = []
    answer = cold_route(sm, br, slept, max_wait_seconds=600).chat(
        MESSAGES, adapter="manga_domain", max_tokens=64
    )
    assert answer.served_by == "sagemaker" and answer.fallback_reason is None
    assert answer.attempts == 4 and slept == [5.0, 10.0, 20.0] and answer.waited_seconds == 35.0
    assert answer.body["choices"][0]["message"]["content"] == "From the first copy."


def test_past_the_bound_the_cold_component_falls_back_to_bedrock_naming_it(clients) -> None:
    """Delays 5, 10, 20, 40, then 25 (trimmed to the 100 s bound): six calls, never a seventh."""
    sm, br, sm_stub, br_stub = clients
    for _ in range(6):
        no_copy(sm_stub)
    bedrock_answers(br_stub)
    slept: list[float] = []
    answer = cold_route(sm, br, slept, max_wait_seconds=100).chat(
        MESSAGES, adapter="manga_domain", max_tokens=64
    )
    assert slept == [5.0, 10.0, 20.0, 40.0, 25.0] and sum(slept) == 100.0
    assert answer.served_by == "bedrock" and answer.attempts == 6 and answer.waited_seconds == 100
    assert answer.fallback_reason == (
        "inference component 'mangaassist-dev-lora-manga-domain' has no copy (scaled to zero; "
        "SageMaker answered ValidationError 'no capacity') after 6 attempt(s) over 100 s of backoff"
    )


def test_by_default_a_cold_component_falls_back_at_once(clients) -> None:
    sm, br, sm_stub, br_stub = clients
    no_copy(sm_stub)
    bedrock_answers(br_stub)
    slept: list[float] = []
    answer = cold_route(sm, br, slept).chat(MESSAGES, adapter="manga_domain", max_tokens=64)
    assert answer.served_by == "bedrock" and answer.attempts == 1 and slept == []
    assert "has no copy (scaled to zero" in str(answer.fallback_reason)


def test_a_cold_component_without_a_bedrock_copy_fails_naming_both(clients) -> None:
    sm, br, sm_stub, _ = clients
    for _ in range(3):
        no_copy(sm_stub, COMPONENTS["base"])
    slept: list[float] = []
    with pytest.raises(FallbackFailed) as caught:
        cold_route(sm, br, slept, max_wait_seconds=15).chat(MESSAGES, adapter=None, max_tokens=64)
    assert caught.value.attempts == 3 and caught.value.waited_seconds == 15 and slept == [5, 10]
    assert "'mangaassist-dev-base' has no copy" in str(caught.value)
    assert "adapter 'base' has no Bedrock copy" in str(caught.value)


def test_any_other_validation_error_is_the_clients_own_and_never_retried(clients) -> None:
    sm, br, sm_stub, _ = clients
    sm_stub.add_client_error("invoke_endpoint", "ValidationError",
                             "Inference component mangaassist-dev-base not found.",
                             http_status_code=400)  # fmt: skip
    slept: list[float] = []
    with pytest.raises(ClientError):
        cold_route(sm, br, slept, max_wait_seconds=600).chat(MESSAGES, adapter=None, max_tokens=64)
    assert slept == []


def test_an_adapter_without_a_component_is_a_configuration_error(clients) -> None:
    sm, br, _, _ = clients
    with pytest.raises(ValueError, match=r"adapter 'jp_style' has no inference component"):
        cold_route(sm, br, []).chat(MESSAGES, adapter="jp_style", max_tokens=64)


def test_the_backoff_never_sleeps_past_its_bound() -> None:
    for bound in (0, 1, 5, 7.5, 64, 600, 3600):
        delays = list(ColdStart(max_wait_seconds=bound).delays())
        assert sum(delays) == bound and all(0 < d <= 60 for d in delays)
    with pytest.raises(ValueError, match="max_wait_seconds >= 0"):
        ColdStart(max_wait_seconds=-1)
