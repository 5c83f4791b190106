"""Admission control and the route guard, the outermost hook.

Routes: vLLM 0.32 mounts many more routes than this endpoint serves (``/v1/responses``,
``/v1/messages``, ``/v1/chat/completions/batch``, embeddings, pooling, LoRA loading, profiling,
sleep/wake, ... depending on flags). Only :data:`SERVED_PATHS` pass; every other path (and every
websocket) is refused with a 404 naming the served ones, so no generation route reaches the
engine without admission and shaping. With SERVING_ADAPTERS_AT_RUNTIME, SageMaker's adapter routes
pass too (:data:`ADAPTERS_PATH`); vLLM's own ``/v1/load_lora_adapter`` stays refused.

Admission: at ADMISSION_MAX_INFLIGHT in-flight requests, answer 429 at once.

A pure ASGI middleware (no BaseHTTPMiddleware: it would buffer streaming bodies and add a task
per request). A request counts as in flight from its first byte until its last response byte
is sent, so a long stream holds its slot for its whole life. vLLM runs one API server process,
so a process-local counter is the whole truth.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Paths that run the engine: admitted here and shaped by the shaping hook (one set for both).
ENGINE_PATHS = frozenset({"/invocations", "/v1/chat/completions", "/v1/completions"})
#: Paths that never run the engine and are never throttled.
OPEN_PATHS = frozenset({"/ping", "/health", "/metrics", "/v1/models", "/version"})
#: Everything this endpoint serves; any other path is refused before it reaches vLLM.
SERVED_PATHS = ENGINE_PATHS | OPEN_PATHS
#: SageMaker's adapter contract (``POST /adapters``, ``DELETE /adapters/{name}``), served only
#: with SERVING_ADAPTERS_AT_RUNTIME (serving/runtime_adapters.py). Never throttled: SageMaker's
#: control plane calls it, and a 429 would fail the adapter component's creation.
ADAPTERS_PATH = "/adapters"


def is_adapter_route(path: str) -> bool:
    """``/adapters`` or ``/adapters/<name>``."""
    return path == ADAPTERS_PATH or path.startswith(ADAPTERS_PATH + "/")


class Admission:
    """The counter and the decision, separate from ASGI so it is unit-testable."""

    def __init__(self, max_inflight: int) -> None:
        self.max_inflight = max_inflight
        self.inflight = 0
        self.rejected = 0

    def try_acquire(self) -> bool:
        if self.inflight >= self.max_inflight:
            self.rejected += 1
            return False
        self.inflight += 1
        return True

    def release(self) -> None:
        self.inflight -= 1


class AdmissionMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        max_inflight: int,
        retry_after_seconds: int = 1,
        on_reject: Callable[[], None] | None = None,
        adapter_routes: bool = False,
    ) -> None:
        self.app = app
        self.adapter_routes = adapter_routes
        self.admission = Admission(max_inflight)
        self.retry_after = str(retry_after_seconds).encode()
        self.on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008})
            return
        if kind != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path not in ENGINE_PATHS:
            if path in OPEN_PATHS or (self.adapter_routes and is_adapter_route(path)):
                await self.app(scope, receive, send)
            else:
                served = sorted(SERVED_PATHS | ({ADAPTERS_PATH} if self.adapter_routes else set()))
                await send_error(
                    send,
                    404,
                    f"route {path} is not served by this endpoint; served: {', '.join(served)}",
                    "NotFound",
                )
            return
        if not self.admission.try_acquire():
            if self.on_reject is not None:
                self.on_reject()
            await _reject(send, self.retry_after, self.admission.max_inflight)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self.admission.release()


async def send_error(
    send: Send, status: int, message: str, kind: str, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    """One JSON error response in the OpenAI error shape ``{"error": {message, type, code}}``."""
    body = json.dumps({"error": {"message": message, "type": kind, "code": status}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _reject(send: Send, retry_after: bytes, limit: int) -> None:
    await send_error(
        send,
        429,
        f"server at its admission limit of {limit} in-flight requests; "
        "retry after the Retry-After delay",
        "TooManyRequests",
        ((b"retry-after", retry_after),),
    )


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None as soon as it grows past ``limit`` bytes."""
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
