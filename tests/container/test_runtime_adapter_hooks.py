"""The adapter contract's hooks (serving/runtime_adapters.py) on a fake vLLM (an ASGI app that
answers as vLLM 0.32 was seen to answer): the load's 200 goes back only after the warmup, and a
client request naming the adapter while it warms is refused; a warmup that fails unloads the
adapter; vLLM's 500 for an adapter it cannot load becomes a 400 with the reason; a load while
draining or with the engine dead is a 503; the adapter routes pass the route guard and are never
throttled only in this shape; the record the entrypoint reloads after a restart.
(The real engine: test_runtime_adapters.)"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from _serving_support import shaping_config

from container.serving.admission import AdmissionMiddleware
from container.serving.runtime_adapters import (
    AdapterControl,
    ControlHooks,
    Registry,
    read_record,
)
from container.serving.shaping import Hooks, ShapingMiddleware

HEADER = b"x-amzn-sagemaker-adapter-identifier"


class FakeVllm:
    """vLLM's answers: POST /adapters 200 "Adapter <name> registered" (500 for ``src`` "wide"),
    DELETE 200 / 404, /invocations a chat answer naming the header's adapter (``fail_invocations``:
    a 400). ``gate`` holds each warmup request; ``calls`` records (method, path, adapter)."""

    def __init__(self) -> None:
        self.loaded: dict[str, str] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.gate: asyncio.Event | None = None
        self.fail_invocations = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = (await receive()).get("body", b"")
        headers = dict(scope["headers"])
        adapter = headers.get(HEADER, b"").decode()
        self.calls.append((scope["method"], scope["path"], adapter))
        status, answer = 200, b""
        if scope["path"] == "/adapters":
            data = json.loads(body)
            if data["src"] == "wide":
                why = (
                    "Call to add_lora method failed: LoRA rank 32 is greater than max_lora_rank 16"
                )
                status, answer = 500, json.dumps({"error": {"message": why, "code": 500}}).encode()
            else:
                self.loaded[data["name"]] = data["src"]
                answer = f"Adapter {data['name']} registered".encode()
        elif scope["path"].startswith("/adapters/"):
            name = scope["path"].removeprefix("/adapters/")
            if self.loaded.pop(name, None) is None:
                status, answer = 404, b'{"error": {"message": "cannot be found", "code": 404}}'
            else:
                answer = f"Adapter {name} unregistered".encode()
        else:  # /invocations
            if self.gate is not None:
                await self.gate.wait()
            if self.fail_invocations:
                status, answer = 400, b'{"error": {"message": "bad adapter weights"}}'
            else:
                answer = json.dumps({"model": adapter or "base", "choices": [{}]}).encode()
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": answer})


def shaping(
    vllm: FakeVllm, tmp_path: Path, *, draining: bool = False, dead: bool = False
) -> ShapingMiddleware:
    registry = Registry(str(tmp_path / "adapters.json"))
    hooks = ControlHooks(engine_dead=lambda scope: dead, draining=lambda: draining)

    def control(inner: Any) -> AdapterControl:
        return AdapterControl(
            inner, registry=registry, long_prompt_bytes=64, max_request_bytes=1 << 20,
            retry_after_seconds=30, hooks=hooks,
        )  # fmt: skip

    return ShapingMiddleware(vllm, config=shaping_config(), counter=lambda: None,
                             hooks=Hooks(), adapter_control=control)  # fmt: skip


async def request(
    app: Any, method: str, path: str, body: dict[str, Any] | None = None, adapter: str = ""
) -> tuple[int, str]:
    raw = json.dumps(body).encode() if body is not None else b""
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": raw, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(m: dict[str, Any]) -> None:
        sent.append(m)

    headers = [(b"content-type", b"application/json")]
    if adapter:
        headers.append((HEADER, adapter.encode()))
    scope = {"type": "http", "method": method, "path": path, "headers": headers,
             "query_string": b""}  # fmt: skip
    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:]).decode()


CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_the_load_answers_after_its_warmup_and_clients_wait_for_it(tmp_path: Path) -> None:
    vllm = FakeVllm()
    app = shaping(vllm, tmp_path)

    async def scenario() -> tuple[tuple[int, str], tuple[int, str], tuple[int, str]]:
        vllm.gate = asyncio.Event()
        loading = asyncio.create_task(
            request(app, "POST", "/adapters", {"name": "a1", "src": "/x"})
        )
        while ("POST", "/invocations", "a1") not in vllm.calls:  # the event: warmup began
            await asyncio.sleep(0)
        during = await request(app, "POST", "/invocations", CHAT, adapter="a1")
        assert not loading.done()  # the load has not answered while its warmup runs
        vllm.gate.set()
        loaded = await loading
        after = await request(app, "POST", "/invocations", CHAT, adapter="a1")
        return during, loaded, after

    during, loaded, after = asyncio.run(scenario())
    assert during[0] == 400 and "unknown adapter 'a1'" in during[1]
    assert loaded == (200, "Adapter a1 registered")
    assert after[0] == 200 and json.loads(after[1])["model"] == "a1"
    warm = [c for c in vllm.calls if c == ("POST", "/invocations", "a1")]
    assert len(warm) == 3  # the two warmup shapes, then the client's request
    assert read_record(tmp_path / "adapters.json") == {"a1": "/x"}


def test_a_warmup_that_fails_unloads_the_adapter_and_says_why(tmp_path: Path) -> None:
    vllm = FakeVllm()
    vllm.fail_invocations = True
    app = shaping(vllm, tmp_path)
    status, text = asyncio.run(request(app, "POST", "/adapters", {"name": "a1", "src": "/x"}))
    assert status == 422
    assert "adapter 'a1' loaded from '/x' but did not answer its warmup" in text
    assert "bad adapter weights" in text and "unloaded" in text
    assert vllm.loaded == {} and ("DELETE", "/adapters/a1", "") in vllm.calls
    assert read_record(tmp_path / "adapters.json") == {}


def test_vllms_500_for_an_adapter_it_cannot_load_is_a_400_with_the_reason(tmp_path: Path) -> None:
    app = shaping(FakeVllm(), tmp_path)
    status, text = asyncio.run(request(app, "POST", "/adapters", {"name": "w", "src": "wide"}))
    assert status == 400
    message = json.loads(text)["error"]["message"]
    assert message.startswith("adapter 'w' could not be loaded from 'wide': ")
    assert "LoRA rank 32 is greater than max_lora_rank 16" in message


def test_a_load_while_draining_or_with_the_engine_dead_is_a_503_and_loads_nothing(
    tmp_path: Path,
) -> None:
    for flags, why in (({"draining": True}, "draining"), ({"dead": True}, "engine died")):
        vllm = FakeVllm()
        app = shaping(vllm, tmp_path, **flags)
        status, text = asyncio.run(request(app, "POST", "/adapters", {"name": "a", "src": "/x"}))
        assert status == 503 and why in text and vllm.calls == []


def test_unload_refuses_clients_at_once_and_a_second_unload_is_vllms_404(tmp_path: Path) -> None:
    vllm = FakeVllm()
    app = shaping(vllm, tmp_path)

    async def scenario() -> list[tuple[int, str]]:
        await request(app, "POST", "/adapters", {"name": "a1", "src": "/x"})
        return [
            await request(app, "DELETE", "/adapters/a1"),
            await request(app, "POST", "/invocations", CHAT, adapter="a1"),
            await request(app, "DELETE", "/adapters/a1"),
        ]

    unloaded, refused, again = asyncio.run(scenario())
    assert unloaded == (200, "Adapter a1 unregistered")
    assert refused[0] == 400 and "unknown adapter 'a1'" in refused[1]
    assert again[0] == 404
    assert read_record(tmp_path / "adapters.json") == {}


def test_adapter_routes_pass_the_guard_unthrottled_only_in_the_runtime_shape() -> None:
    async def held(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    runtime = AdmissionMiddleware(held, max_inflight=1, adapter_routes=True)
    variant = AdmissionMiddleware(held, max_inflight=1)

    async def scenario() -> list[int]:
        runtime.admission.inflight = 1  # at the limit: a client request would get 429
        out = [
            (await request(runtime, "POST", "/adapters", {"name": "a", "src": "/x"}))[0],
            (await request(runtime, "DELETE", "/adapters/a"))[0],
            (await request(runtime, "POST", "/invocations", CHAT))[0],
            (await request(runtime, "POST", "/v1/load_lora_adapter", {}))[0],
            (await request(variant, "POST", "/adapters", {"name": "a", "src": "/x"}))[0],
        ]
        return out

    assert asyncio.run(scenario()) == [200, 200, 429, 404, 404]
