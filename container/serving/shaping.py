"""Request shaping, the innermost hook: adapter selection, context budget, OOM containment.

- Adapter: the ``X-Amzn-SageMaker-Adapter-Identifier`` header, else the body's ``model``, else
  DEFAULT_ADAPTER (empty: the base model). An unknown name is a 400 listing the known ones.
  vLLM's /invocations copies the header into the body's ``model`` and, with no header, replaces
  the body's model by the base model (FACTS.md); so the resolved name is written to the header
  for /invocations and to the body for /v1/*.
- Budget: chat requests go through :func:`budget.apply_budget`; over-long conversations lose their
  oldest turns with a marker and ``max_tokens`` is capped so prompt + answer fit max_model_len.
- OOM containment: a 5xx or exception naming out-of-memory is retried once with half the older
  turns dropped; a second one becomes a 503 with a reason. Other responses stream through as they
  are produced (nothing is buffered unless the status is 5xx).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .admission import ASGIApp, Message, Receive, Scope, Send
from .budget import BudgetConfig, BudgetError, TokenCounter, apply_budget

ADAPTER_HEADER = b"x-amzn-sagemaker-adapter-identifier"
SHAPED_PATHS = frozenset({"/invocations", "/v1/chat/completions", "/v1/completions"})
OOM_MARKERS = ("out of memory", "outofmemoryerror", "cuda error: out of memory")


class RequestError(ValueError):
    """A client error: answered 400 with this message."""


@dataclass
class Hooks:
    """Callbacks into the metrics counters (no-ops in unit tests)."""

    on_trim: Callable[[], None] = lambda: None
    on_oom: Callable[[], None] = lambda: None
    on_done: Callable[[str, float], None] = lambda adapter, seconds: None


@dataclass(frozen=True)
class ShapingConfig:
    base_model: str
    adapters: frozenset[str]
    default_adapter: str
    budget: BudgetConfig

    def resolve(self, requested: str | None) -> str:
        name = requested or self.default_adapter or self.base_model
        if name == self.base_model or name in self.adapters:
            return name
        known = ", ".join([self.base_model, *sorted(self.adapters)])
        raise RequestError(f"unknown adapter {name!r}; known adapters: {known}")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1") or None
    return None


def shape_body(
    body: dict[str, Any], header_adapter: str | None, path: str, config: ShapingConfig,
    counter: TokenCounter | None,
) -> tuple[dict[str, Any], str, bool]:  # fmt: skip
    """Validate and rewrite one request body. Returns (body, adapter, trimmed)."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("'model' must be a string naming an adapter")
    adapter = config.resolve(header_adapter or model)
    body = {**body, "model": adapter}
    messages = body.get("messages")
    if messages is None:
        body.pop("retrieval", None)
        if "prompt" not in body:
            raise RequestError("request needs 'messages' (chat) or 'prompt' (completion)")
        return body, adapter, False
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list of {role, content} objects")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(f"messages[{i}] must be an object with a string 'role'")
    retrieval = body.pop("retrieval", None) or []
    if isinstance(retrieval, str):
        retrieval = [retrieval]
    if not isinstance(retrieval, list) or not all(isinstance(d, str) for d in retrieval):
        raise RequestError("'retrieval' must be a string or a list of strings (ranked)")
    if counter is None:
        return body, adapter, False
    key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    requested = body.get(key)
    if requested is not None and (not isinstance(requested, int) or requested < 1):
        raise RequestError(f"'{key}' must be a positive integer")
    try:
        result = apply_budget(
            messages, retrieval=retrieval, max_tokens=requested, config=config.budget,
            counter=counter,
        )  # fmt: skip
    except BudgetError as exc:
        raise RequestError(str(exc)) from exc
    body["messages"] = result.messages
    body[key] = result.max_tokens
    return body, adapter, result.trimmed


def compress(body: dict[str, Any]) -> dict[str, Any] | None:
    """Drop half of the older turns (between the system prompt and the last message)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or len(messages) < 3:
        return None
    n_system = 0
    while n_system < len(messages) - 1 and messages[n_system].get("role") == "system":
        n_system += 1
    turns = messages[n_system:-1]
    if not turns:
        return None
    keep = turns[(len(turns) + 1) // 2 :]
    return {**body, "messages": [*messages[:n_system], *keep, messages[-1]]}


def _json_response(status: int, message: str, kind: str) -> tuple[Message, Message]:
    body = json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
    }
    return start, {"type": "http.response.body", "body": body}


def _is_oom(text: str) -> bool:
    lowered = text.lower()
    return any(m in lowered for m in OOM_MARKERS)


class ShapingMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        config: ShapingConfig,
        counter: Callable[[], TokenCounter | None],
        hooks: Hooks | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.counter = counter
        self.hooks = hooks or Hooks()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in SHAPED_PATHS:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        raw = await _read_body(receive)
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            await _send_all(
                send, _json_response(400, f"body is not valid JSON: {exc}", "BadRequest")
            )
            return
        if not isinstance(parsed, dict):
            await _send_all(send, _json_response(400, "body must be a JSON object", "BadRequest"))
            return
        header_adapter = _header(scope, ADAPTER_HEADER)
        try:
            body, adapter, trimmed = shape_body(
                parsed, header_adapter, scope["path"], self.config, self.counter()
            )
        except RequestError as exc:
            await _send_all(send, _json_response(400, str(exc), "BadRequest"))
            return
        if trimmed:
            self.hooks.on_trim()
        if scope["path"] == "/invocations":
            headers = [(k, v) for k, v in scope["headers"] if k.lower() != ADAPTER_HEADER]
            scope = {**scope, "headers": [*headers, (ADAPTER_HEADER, adapter.encode())]}
        oom = await self._call(scope, body, receive, send)
        if oom:
            self.hooks.on_oom()
            retry = compress(body)
            oom = retry is None or await self._call(scope, retry, receive, send)
            if oom:
                await _send_all(
                    send,
                    _json_response(
                        503,
                        "the engine ran out of memory on this request, also after dropping half "
                        "of the older turns; retry with a shorter conversation",
                        "ServiceUnavailable",
                    ),
                )
        self.hooks.on_done(adapter, time.perf_counter() - started)

    async def _call(self, scope: Scope, body: dict[str, Any], receive: Receive, send: Send) -> bool:
        """Run the app on ``body``. Returns True when it failed with an out-of-memory error
        before sending anything (so the request can be retried); other responses are sent."""
        payload = json.dumps(body).encode()
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(payload)).encode())]}
        held: list[Message] = []
        state = {"sent": False}

        async def replay() -> Message:
            if not state.get("replayed"):
                state["replayed"] = True
                return {"type": "http.request", "body": payload, "more_body": False}
            return await receive()

        async def capture(message: Message) -> None:
            if held or (message["type"] == "http.response.start" and message["status"] >= 500):
                held.append(message)
                return
            state["sent"] = True
            await send(message)

        try:
            await self.app(scope, replay, capture)
        except Exception as exc:
            if state["sent"] or not _is_oom(f"{type(exc).__name__} {exc}"):
                raise
            return True
        if held:
            text = b"".join(m.get("body", b"") for m in held[1:]).decode("utf-8", "replace")
            if _is_oom(text) and not state["sent"]:
                return True
            await _send_all(send, held)
        return False


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _send_all(send: Send, messages: Iterable[Message]) -> None:
    for message in messages:
        await send(message)
