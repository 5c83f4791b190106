"""Stubs for the smoke gate's tests: CloudFormation events as the Provider framework passes them,
and a botocore-Stubbed sagemaker-runtime client (moto's has canned bodies and no streaming).

Every stubbed call's parameters are checked (endpoint, variant, adapter in the body, streaming
flag) and each test decides what the model answers.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import boto3
from botocore.response import StreamingBody
from botocore.stub import Stubber

from lambdas.smoke_gate import handler as gate
from tests.lambdas.conftest import ENDPOINT, REGION

#: The fake wall clock at on_event (epoch seconds).
STARTED = 1_000_000.0

ADAPTERS = ["manga_domain", "general_support", "jp_style"]
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

    def clients(self, clock: Callable[[], float] = lambda: STARTED) -> dict[str, Any]:
        sm = boto3.client("sagemaker", region_name=REGION)
        return {"sagemaker": sm, "sagemaker-runtime": self.client, "clock": clock}

    def run(self, ev: dict[str, Any], context: Any = None, **clients: Any) -> dict[str, Any]:
        """What the Provider framework does: on_event, its answer merged into the event, then
        one is_complete call. Returns is_complete's answer."""
        with self.stub:
            return gate.is_complete(started(ev), context, clients={**self.clients(), **clients})

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None:
            self.stub.assert_no_pending_responses()


def started(ev: dict[str, Any], at: float = STARTED) -> dict[str, Any]:
    """The event is_complete receives: the request merged with on_event's answer (framework)."""
    return {**ev, **gate.on_event(ev, None, clients={"clock": lambda: at})}
