"""Request shaping, the innermost hook: limits, request checks, adapter selection, context
budget, engine-death answers.

- Limits: a body over MAX_REQUEST_BYTES (by Content-Length, or counted while it streams in) or a
  ``messages`` list over MAX_MESSAGES is answered 413 naming the limit, before any parsing.
- Checks (:mod:`request_checks`): every malformed body is a 4xx that says what is wrong; JSON
  nested past the parser's recursion limit is a 400. An unexpected exception inside the hooks is
  logged with its traceback and answered 400 naming it, never a 500 (5XX feeds the rollback
  alarms: a hook's 500 would let any client roll a deployment back).
- Adapter: the ``X-Amzn-SageMaker-Adapter-Identifier`` header, else the body's ``model``, else
  DEFAULT_ADAPTER (empty: the base model). An unknown name is a 400 listing the known ones. With
  SERVING_ADAPTERS_AT_RUNTIME the known ones include the adapters loaded through SageMaker's
  adapter routes once warmed, which this hook also answers (:mod:`runtime_adapters`).
  vLLM's /invocations copies the header into the body's ``model`` and, with no header, replaces
  the body's model by the base model (seen on vLLM 0.32); so the resolved name is written to the
  header for /invocations and to the body for /v1/*.
- Budget: chat requests go through :func:`budget.apply_budget`; over-long conversations lose their
  oldest turns with a marker and ``max_tokens`` is capped so prompt + answer fit max_model_len.
  The client is told what was dropped: the response carries ``X-Amzn-SageMaker-Custom-Attributes:
  context-dropped-turns=N,context-dropped-documents=M`` (:data:`DROPPED_HEADER`), the header
  SageMaker forwards verbatim as InvokeEndpoint's ``CustomAttributes`` ("If the customer wants the
  custom attribute returned, the model must set the custom attribute to be included on the way
  back", SageMaker Runtime API reference, InvokeEndpoint response); a request nothing was dropped
  from carries none.
  Bodies over SHAPING_OFFLOAD_BYTES are parsed, counted and re-serialized in a worker thread so
  the event loop keeps answering /ping (SageMaker's ping timeout is 2 s).
- Engine death (vLLM V1: a CUDA OOM kills the EngineCore process, the API server then answers
  "EngineCore encountered an issue" with a 500): while the engine is dead, or when it dies under
  a request before anything was sent, the answer is a 503 with Retry-After and the reason; the
  entrypoint restarts the engine. While draining (SIGTERM) new requests get a 503 too.
- Answer times: each answer that reaches the engine carries its own TTFT, end-to-end and queue
  times in one extra field (:mod:`answer_timing`), timed from this hook's arrival.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from . import answer_timing
from .admission import (
    ENGINE_PATHS,
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    is_adapter_route,
    read_body,
    send_error,
)
from .budget import BudgetConfig, BudgetError, TokenCounter, apply_budget
from .request_checks import (
    LimitExceeded,
    RequestError,
    check_max_tokens,
    check_messages,
    check_retrieval,
    check_sequences,
    check_tools,
)
from .request_schema import check_fields
from .runtime_adapters import ADAPTER_HEADER, AdapterControl

log = logging.getLogger("serving.shaping")

#: The response header SageMaker returns to the client as InvokeEndpoint's CustomAttributes
#: (at most 1024 visible ASCII characters): what the context budget dropped, when it dropped any.
DROPPED_HEADER = b"x-amzn-sagemaker-custom-attributes"
#: Text of vLLM's answer when its engine died under a request (EngineDeadError).
ENGINE_DEAD_MARKERS = ("enginecore encountered an issue", "enginedeaderror", "engine is dead")
#: Bodies at least this large are shaped in a worker thread (small ones inline: a thread hop
#: costs more than shaping them).
SHAPING_OFFLOAD_BYTES = 64 * 1024
#: Two threads: large bodies queue here instead of each taking a thread (and the GIL).
_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="shaping")

__all__ = [
    "Dropped",
    "Hooks",
    "RequestError",
    "ShapingConfig",
    "ShapingMiddleware",
    "shape_body",
]


@dataclass
class Hooks:
    """Callbacks into the metrics counters and the server's state (no-ops in unit tests)."""

    on_trim: Callable[[], None] = lambda: None
    on_done: Callable[[str, float], None] = lambda adapter, seconds: None
    on_engine_unavailable: Callable[[], None] = lambda: None
    #: True while the engine is dead (given the request's scope: the app holds the engine).
    engine_dead: Callable[[Scope], bool] = lambda scope: False
    #: True after SIGTERM: new requests are refused while in-flight ones drain.
    draining: Callable[[], bool] = lambda: False


@dataclass(frozen=True)
class Dropped:
    """What the context budget dropped from one request: its oldest conversation turns, and
    retrieved documents past the retrieval budget. False when nothing was dropped."""

    turns: int = 0
    documents: int = 0

    def __bool__(self) -> bool:
        return bool(self.turns or self.documents)

    def header(self) -> tuple[bytes, bytes]:
        """The response header that tells the client (:data:`DROPPED_HEADER`)."""
        value = f"context-dropped-turns={self.turns},context-dropped-documents={self.documents}"
        return DROPPED_HEADER, value.encode()


@dataclass(frozen=True)
class ShapingConfig:
    base_model: str
    adapters: frozenset[str]
    default_adapter: str
    budget: BudgetConfig
    max_request_bytes: int = 2 * 1024 * 1024
    max_messages: int = 1024
    engine_retry_after_seconds: int = 30

    def resolve(self, requested: str | None, runtime: frozenset[str] = frozenset()) -> str:
        """The adapter a request names (or the default); ``runtime``: the adapters loaded at run
        time and warmed (serving/runtime_adapters.py)."""
        name = requested or self.default_adapter or self.base_model
        if name == self.base_model or name in self.adapters or name in runtime:
            return name
        known = ", ".join([self.base_model, *sorted(self.adapters | runtime)])
        raise RequestError(f"unknown adapter {name!r}; known adapters: {known}")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1") or None
    return None


def shape_body(
    body: dict[str, Any], header_adapter: str | None, config: ShapingConfig,
    counter: TokenCounter | None, runtime: frozenset[str] = frozenset(),
) -> tuple[dict[str, Any], str, Dropped]:  # fmt: skip
    """Validate and rewrite one request body. Returns (body, adapter, what the budget dropped)."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("'model' must be a string naming an adapter")
    adapter = config.resolve(header_adapter or model, runtime)
    check_sequences(body)
    body = {**body, "model": adapter}
    messages = body.get("messages")
    if messages is None:
        body.pop("retrieval", None)
        if "prompt" not in body:
            raise RequestError("request needs 'messages' (chat) or 'prompt' (completion)")
        check_max_tokens(body)
        check_fields(body)
        return body, adapter, Dropped()
    messages = check_messages(messages, config.max_messages)
    tools = check_tools(body)
    retrieval = check_retrieval(body.pop("retrieval", None))
    key, requested = check_max_tokens(body)
    check_fields(body)
    if counter is None:
        return body, adapter, Dropped()
    try:
        result = apply_budget(
            messages,
            retrieval=retrieval,
            max_tokens=requested,
            config=config.budget,
            counter=counter,
            tools=tools,
        )
    except BudgetError as exc:
        raise RequestError(str(exc)) from exc
    body["messages"] = result.messages
    body[key] = result.max_tokens
    return body, adapter, Dropped(result.trimmed_turns, result.dropped_documents)


@dataclass(slots=True)
class Prepared:
    """A shaped request ready for the engine, or the error answer instead."""

    payload: bytes = b""
    adapter: str = ""
    dropped: Dropped = Dropped()
    error: tuple[int, str, str] | None = None  # (status, message, type)


def prepare(
    raw: bytes, header_adapter: str | None, config: ShapingConfig,
    counter: TokenCounter | None, runtime: frozenset[str] = frozenset(),
) -> Prepared:  # fmt: skip
    """Parse, check, shape and re-serialize one body. Never raises: every failure is an answer."""
    try:
        try:
            parsed = json.loads(raw)
        except RecursionError:
            return Prepared(error=(400, "body is nested too deeply to parse", "BadRequest"))
        except ValueError as exc:
            return Prepared(error=(400, f"body is not valid JSON: {exc}", "BadRequest"))
        if not isinstance(parsed, dict):
            return Prepared(error=(400, "body must be a JSON object", "BadRequest"))
        body, adapter, dropped = shape_body(parsed, header_adapter, config, counter, runtime)
        return Prepared(json.dumps(body).encode(), adapter, dropped)
    except LimitExceeded as exc:
        return Prepared(error=(413, str(exc), "PayloadTooLarge"))
    except RequestError as exc:
        return Prepared(error=(400, str(exc), "BadRequest"))
    except RecursionError:
        return Prepared(error=(400, "body is nested too deeply to process", "BadRequest"))
    except Exception as exc:  # a hook bug must not become a client-triggered 500
        log.exception("request shaping failed on a %d-byte body", len(raw))
        detail = f"{type(exc).__name__}: {exc}"[:300]
        return Prepared(error=(400, f"request could not be processed ({detail})", "BadRequest"))


def _is_engine_dead(text: str) -> bool:
    lowered = text.lower()
    return any(m in lowered for m in ENGINE_DEAD_MARKERS)


def _declared_length(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    return int(value) if value is not None and value.isdigit() else None


class ShapingMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        config: ShapingConfig,
        counter: Callable[[], TokenCounter | None],
        hooks: Hooks | None = None,
        adapter_control: Callable[[ASGIApp], AdapterControl] | None = None,
    ) -> None:
        self.app = app
        self.config = config
        self.counter = counter
        self.hooks = hooks or Hooks()
        #: SageMaker's adapter routes (SERVING_ADAPTERS_AT_RUNTIME), built on this app
        self.adapter_control = adapter_control(app) if adapter_control is not None else None
        self.retry_after = str(config.engine_retry_after_seconds).encode()

    async def _unavailable(self, send: Send, message: str) -> None:
        """503 + Retry-After. ``Connection: close``: a client must not keep a connection to a
        server whose engine is dead (or that drains); its next request opens a new connection,
        which reaches the restarted server once it listens."""
        self.hooks.on_engine_unavailable()
        headers = ((b"retry-after", self.retry_after), (b"connection", b"close"))
        await send_error(send, 503, message, "ServiceUnavailable", headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        control = self.adapter_control
        if control is not None and scope["type"] == "http" and is_adapter_route(scope["path"]):
            await control(scope, receive, send)
            return
        if scope["type"] != "http" or scope["path"] not in ENGINE_PATHS:
            await self.app(scope, receive, send)
            return
        if self.hooks.draining():
            await self._unavailable(
                send,
                "server is draining (shutting down); retry on "
                "another instance after the Retry-After delay",
            )
            return
        if self.hooks.engine_dead(scope):
            await self._unavailable(
                send,
                "the inference engine died and is restarting; retry after the Retry-After delay",
            )
            return
        clock = answer_timing.Clock.start()
        started = clock.started
        limit = self.config.max_request_bytes
        declared = _declared_length(scope)
        too_big = declared is not None and declared > limit
        raw = None if too_big else await read_body(receive, limit)
        if raw is None:
            await send_error(
                send,
                413,
                f"request body exceeds MAX_REQUEST_BYTES ({limit} bytes)",
                "PayloadTooLarge",
            )
            return
        header_adapter = _header(scope, ADAPTER_HEADER)
        runtime = control.registry.names() if control is not None else frozenset()
        args = (raw, header_adapter, self.config, self.counter(), runtime)
        if len(raw) >= SHAPING_OFFLOAD_BYTES:
            done = await asyncio.get_running_loop().run_in_executor(_POOL, prepare, *args)
        else:
            done = prepare(*args)
        if done.error is not None:
            await send_error(send, *done.error)
            return
        if done.dropped:
            self.hooks.on_trim()
            send = _with_header(send, done.dropped.header())
        if scope["path"] == "/invocations":
            headers = [(k, v) for k, v in scope["headers"] if k.lower() != ADAPTER_HEADER]
            scope = {**scope, "headers": [*headers, (ADAPTER_HEADER, done.adapter.encode())]}
        timed = answer_timing.CURRENT.set(clock)
        try:
            await self._call(scope, done.payload, receive, answer_timing.timed_send(send, clock))
        finally:
            answer_timing.CURRENT.reset(timed)
        self.hooks.on_done(done.adapter, time.perf_counter() - started)

    async def _call(self, scope: Scope, payload: bytes, receive: Receive, send: Send) -> None:
        """Run the app on ``payload``. A 5xx start is held back until its body shows whether the
        engine died under the request (then a 503 with Retry-After replaces it); every other
        response streams through as it is produced."""
        headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
        scope = {**scope, "headers": [*headers, (b"content-length", str(len(payload)).encode())]}
        held: list[Message] = []
        state = {"sent": False, "replayed": False}

        async def replay() -> Message:
            if not state["replayed"]:
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
        except Exception:
            if state["sent"] or not self.hooks.engine_dead(scope):
                raise
            await self._unavailable(
                send,
                "the inference engine died during this request and is "
                "restarting; retry after the Retry-After delay",
            )
            return
        if held:
            text = b"".join(m.get("body", b"") for m in held[1:]).decode("utf-8", "replace")
            if not state["sent"] and (_is_engine_dead(text) or self.hooks.engine_dead(scope)):
                await self._unavailable(
                    send,
                    "the inference engine died during this request "
                    "and is restarting; retry after the Retry-After delay",
                )
                return
            await _send_all(send, held)


def _with_header(send: Send, header: tuple[bytes, bytes]) -> Send:
    """``send`` with ``header`` added to the response's start (replacing one of the same name)."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            kept = [(k, v) for k, v in message.get("headers", ()) if k.lower() != header[0]]
            message = {**message, "headers": [*kept, header]}
        await send(message)

    return sending


async def _send_all(send: Send, messages: Iterable[Message]) -> None:
    for message in messages:
        await send(message)
