"""Smoke gate custom resource: moto for the endpoint, botocore Stubber for the runtime answers.

moto's sagemaker-runtime returns canned bodies and has no response streaming, so the runtime
client is stubbed: every call's parameters are checked (endpoint, variant, adapter in the body,
streaming flag) and each test decides what the model answers.
"""

from __future__ import annotations

import io
import json
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from lambdas.smoke_gate import handler as gate
from tests.lambdas.conftest import ENDPOINT, REGION, set_endpoint_status

ADAPTERS = ["manga_domain_v3", "general_support_v2", "jp_style_v1"]
VARIANTS = ["primary", "canary"]


def event(request_type: str = "Create", **overrides: Any) -> dict[str, Any]:
    props: dict[str, Any] = {
        "ServiceToken": "arn:aws:lambda:us-east-1:123456789012:function:provider",
        "EndpointName": ENDPOINT,
        "EndpointConfigName": "cfg-1",
        "Variants": VARIANTS,
        "Adapters": ADAPTERS,
        "Prompt": "Recommend one action manga in one sentence.",
        "MaxTokens": "16",  # CloudFormation passes scalars as strings
        "TimeoutSeconds": "60",
        **overrides,
    }
    return {
        "RequestType": request_type,
        "ResourceProperties": props,
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/s/1",
        "RequestId": "req-1",
        "LogicalResourceId": "SmokeGate",
    }


def chat(text: str, model: str) -> dict[str, Any]:
    body = json.dumps(
        {
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
        }
    ).encode()
    return {"Body": StreamingBody(io.BytesIO(body), len(body)), "ContentType": "application/json"}


def sse(*chunks: str, error: dict[str, Any] | None = None) -> dict[str, Any]:
    lines = [
        "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": c}}]}) + "\n\n"
        for c in chunks
    ]
    parts: list[dict[str, Any]] = [{"PayloadPart": {"Bytes": ln.encode()}} for ln in lines]
    parts.append({"PayloadPart": {"Bytes": b"data: [DONE]\n\n"}})
    if error:
        parts.insert(1, error)
    return {"Body": parts, "ContentType": "text/event-stream"}


class Body:
    """Matches a request body naming ``adapter`` in ``model``, the prompt, and the stream flag."""

    def __init__(self, adapter: str | None, stream: bool) -> None:
        self.adapter, self.stream = adapter, stream

    def __eq__(self, raw: object) -> bool:
        body = json.loads(raw)  # type: ignore[arg-type]
        return (
            body.get("model") == self.adapter
            and bool(body.get("stream")) == self.stream
            and body["messages"]
            == [{"role": "user", "content": event()["ResourceProperties"]["Prompt"]}]
            and body["max_tokens"] == 16
        )

    def __ne__(self, raw: object) -> bool:
        return not self == raw

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Body(model={self.adapter!r}, stream={self.stream})"


class EventStreamStubber(Stubber):
    """Stubber validates a response stream's Body as one event; the real Body is an iterable of
    events (``{"PayloadPart": {"Bytes": ...}}``), so each event is validated on its own."""

    def _validate_operation_response(self, operation_name: str, service_response: Any) -> None:
        body = service_response.get("Body")
        if operation_name == "InvokeEndpointWithResponseStream" and isinstance(body, list):
            for part in body:
                super()._validate_operation_response(
                    operation_name, {**service_response, "Body": part}
                )
            return
        super()._validate_operation_response(operation_name, service_response)


class Runtime:
    """A stubbed sagemaker-runtime client expecting the gate's calls in order."""

    def __init__(self) -> None:
        self.client = boto3.client("sagemaker-runtime", region_name=REGION)
        self.stub = EventStreamStubber(self.client)

    def expect(
        self, variant: str, adapter: str | None, response: Any, stream: bool = False
    ) -> None:
        op = "invoke_endpoint_with_response_stream" if stream else "invoke_endpoint"
        params = {
            "EndpointName": ENDPOINT,
            "TargetVariant": variant,
            "ContentType": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
            "Body": Body(adapter, stream),
        }
        if isinstance(response, Exception):
            code, status = response.args
            self.stub.add_client_error(
                op,
                service_error_code=code,
                service_message=f"Received server error ({status}) from primary",
                http_status_code=424,
                expected_params=params,
                modeled_fields={"OriginalStatusCode": status},
            )
        else:
            self.stub.add_response(op, response, params)

    def happy(self, variant: str, skip: set[str] | None = None) -> None:
        for adapter in ADAPTERS:
            if skip and adapter in skip:
                continue
            self.expect(variant, adapter, chat("Try Vinland Saga.", adapter))
        self.expect(variant, ADAPTERS[0], sse("Try ", "Berserk."), stream=True)

    def run(self, ev: dict[str, Any]) -> dict[str, Any]:
        sm = boto3.client("sagemaker", region_name=REGION)
        with self.stub:
            return gate.handler(
                ev, None, clients={"sagemaker": sm, "sagemaker-runtime": self.client}
            )

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.stub.assert_no_pending_responses()


@pytest.fixture
def runtime(endpoint: str) -> Any:
    with Runtime() as rt:
        yield rt


def test_every_adapter_and_streaming_answer_passes(runtime: Runtime) -> None:
    for variant in VARIANTS:
        runtime.happy(variant)
    result = runtime.run(event())
    assert result == {"PhysicalResourceId": f"smoke-gate-{ENDPOINT}", "Data": {"Calls": "8"}}


def test_update_keeps_the_physical_id(runtime: Runtime) -> None:
    for variant in VARIANTS:
        runtime.happy(variant)
    ev = event("Update")
    ev["PhysicalResourceId"] = "smoke-gate-existing"
    assert runtime.run(ev)["PhysicalResourceId"] == "smoke-gate-existing"


def test_failing_adapter_fails_the_deployment_naming_variant_and_adapter(runtime: Runtime) -> None:
    runtime.happy("primary")
    runtime.expect("canary", ADAPTERS[0], chat("ok", ADAPTERS[0]))
    runtime.expect("canary", ADAPTERS[1], Exception("ModelError", 400))
    runtime.expect("canary", ADAPTERS[2], chat("ok", ADAPTERS[2]))
    runtime.expect("canary", ADAPTERS[0], sse("ok"), stream=True)
    with pytest.raises(gate.SmokeGateError) as err:
        runtime.run(event())
    msg = str(err.value)
    assert msg.startswith(f"smoke gate failed 1 of 8 calls on {ENDPOINT}")
    assert "variant canary, adapter general_support_v2: ModelError: model answered HTTP 400" in msg


def test_answer_from_the_base_model_instead_of_the_adapter_fails(runtime: Runtime) -> None:
    runtime.expect("primary", ADAPTERS[0], chat("ok", "base"))
    with pytest.raises(gate.SmokeGateError, match="answered by model 'base', not adapter"):
        runtime.run(event(Variants=["primary"], Adapters=[ADAPTERS[0]]))


def test_empty_answer_fails(runtime: Runtime) -> None:
    runtime.expect("primary", ADAPTERS[0], chat("   ", ADAPTERS[0]))
    runtime.expect("primary", ADAPTERS[0], sse("fine"), stream=True)
    with pytest.raises(gate.SmokeGateError, match="adapter manga_domain_v3: answer is empty"):
        runtime.run(event(Variants=["primary"], Adapters=[ADAPTERS[0]]))


def test_streaming_error_event_fails(runtime: Runtime) -> None:
    runtime.expect("primary", None, chat("hello", "base"))
    err = {"ModelStreamError": {"Message": "CUDA error: out of memory", "ErrorCode": "500"}}
    runtime.expect("primary", None, sse("partial", error=err), stream=True)
    with pytest.raises(gate.SmokeGateError) as exc:
        runtime.run(event(Variants=["primary"], Adapters=[]))
    assert "variant primary, streaming, adapter base model: stream error ModelStreamError" in str(
        exc.value
    )
    assert "out of memory" in str(exc.value)


def test_stream_without_text_fails(runtime: Runtime) -> None:
    runtime.expect("primary", None, chat("hello", "base"))
    runtime.expect("primary", None, sse(), stream=True)
    with pytest.raises(gate.SmokeGateError, match="stream ended without generated text"):
        runtime.run(event(Variants=["primary"], Adapters=[]))


def test_streaming_call_rejected_fails(runtime: Runtime) -> None:
    runtime.expect("primary", None, chat("hello", "base"))
    runtime.expect("primary", None, Exception("ModelError", 503), stream=True)
    with pytest.raises(gate.SmokeGateError, match="streaming, adapter base model: ModelError: mod"):
        runtime.run(event(Variants=["primary"], Adapters=[]))


def test_endpoint_not_in_service_fails_before_any_call(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_endpoint_status("Failed")
    with pytest.raises(gate.SmokeGateError, match="is Failed, not InService"):
        runtime.run(event())


def test_delete_does_nothing(runtime: Runtime) -> None:
    ev = event("Delete", EndpointName="does-not-exist")
    ev["PhysicalResourceId"] = "smoke-gate-x"
    # No stubbed responses: any AWS call would raise. The endpoint does not even exist.
    assert runtime.run(ev) == {"PhysicalResourceId": "smoke-gate-x"}


@pytest.mark.parametrize(
    ("ev", "message"),
    [
        ({"RequestType": "Create"}, "ResourceProperties missing"),
        ({"ResourceProperties": {}}, "RequestType missing"),
        (event(Variants=[]), "Variants must be a non-empty list"),
        (event(Adapters="a,b"), "Adapters must be a list"),
        (event(MaxTokens="many"), "MaxTokens and TimeoutSeconds must be integers"),
        (
            {"RequestType": "Create", "ResourceProperties": {"EndpointName": "x"}},
            "missing EndpointConfigName, Variants",
        ),
    ],
)
def test_malformed_events_are_rejected(runtime: Runtime, ev: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        runtime.run(ev)


# ------------------------------------------------------------------ item 8


def test_endpoint_back_on_the_previous_config_fails_the_deploy(runtime: Runtime) -> None:
    # moto's endpoint serves cfg-1; the deploy asked for cfg-2 and SageMaker rolled it back.
    with pytest.raises(gate.SmokeGateError) as err:
        runtime.run(event(EndpointConfigName="cfg-2"))
    assert "InService on cfg-1, not on the deployed cfg-2" in str(err.value)
    assert "rolled the deployment back" in str(err.value)


def test_missing_endpoint_config_name_is_rejected(runtime: Runtime) -> None:
    ev = event()
    del ev["ResourceProperties"]["EndpointConfigName"]
    with pytest.raises(ValueError, match="missing EndpointConfigName"):
        runtime.run(ev)


class SlowRuntime:
    """Each call takes ``seconds`` on the fake clock, then answers through the stub."""

    def __init__(self, rt: Runtime, clock: list[float], seconds: float) -> None:
        self.rt, self.clock, self.seconds = rt, clock, seconds

    def invoke_endpoint(self, **kw: Any) -> Any:
        self.clock[0] += self.seconds
        return self.rt.client.invoke_endpoint(**kw)

    def invoke_endpoint_with_response_stream(self, **kw: Any) -> Any:
        self.clock[0] += self.seconds
        return self.rt.client.invoke_endpoint_with_response_stream(**kw)


def test_one_deadline_covers_every_call(runtime: Runtime) -> None:
    now = [1000.0]
    for adapter in ADAPTERS[:3]:
        runtime.expect("primary", adapter, chat("ok", adapter))
    slow = SlowRuntime(runtime, now, 25)
    sm = boto3.client("sagemaker", region_name=REGION)
    with runtime.stub, pytest.raises(gate.SmokeGateError) as err:
        gate.handler(
            event(TimeoutSeconds="60"),
            None,
            clients={"sagemaker": sm, "sagemaker-runtime": slow, "clock": lambda: now[0]},
        )
    msg = str(err.value)
    # Calls at t=0, 25, 50 ran; at t=75 the 60 s deadline had passed: the other five never ran.
    assert msg.startswith(f"smoke gate failed 5 of 8 calls on {ENDPOINT}")
    assert (
        "variant primary, streaming, adapter manga_domain_v3: not run, the gate's deadline" in msg
    )
    assert "variant canary, adapter manga_domain_v3: not run" in msg


class Context:
    def __init__(self, remaining_ms: int) -> None:
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def test_deadline_never_outlives_the_lambda() -> None:
    props = {"timeout": 840}
    assert gate.deadline_for(props, None, 0) == 840
    # An 840 s function: the gate stops starting calls early enough for one to finish in time.
    assert gate.deadline_for(props, Context(840_000), 0) == 840 - gate.CALL_OVERRUN_SECONDS
