"""Admission control: at ADMISSION_MAX_INFLIGHT in-flight requests, answer 429 at once.

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

#: Paths that run the engine. /ping, /health and /metrics are never throttled.
GUARDED_PATHS = frozenset({"/invocations", "/v1/chat/completions", "/v1/completions"})


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
    ) -> None:
        self.app = app
        self.admission = Admission(max_inflight)
        self.retry_after = str(retry_after_seconds).encode()
        self.on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in GUARDED_PATHS:
            await self.app(scope, receive, send)
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


async def _reject(send: Send, retry_after: bytes, limit: int) -> None:
    body = json.dumps(
        {
            "error": {
                "message": f"server at its admission limit of {limit} in-flight requests; "
                "retry after the Retry-After delay",
                "type": "TooManyRequests",
                "code": 429,
            }
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [
                (b"content-type", b"application/json"),
                (b"retry-after", retry_after),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
