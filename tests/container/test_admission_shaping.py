"""Admission and shaping middlewares on a fake ASGI app: the limit, release after streaming, the
route guard, the body limits, and the answers while the engine is dead or the server drains
(the live engine's death is in test_engine_death)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from _serving_support import shaping_config

from container.serving.admission import ENGINE_PATHS, Admission, AdmissionMiddleware
from container.serving.shaping import Hooks, ShapingMiddleware

CONFIG = shaping_config()


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
        while mw.admission.inflight == 0:  # the event: the first request holds the slot
            await asyncio.sleep(0)
        second = await call(mw, "/invocations", b"{}")
        ping = await call(mw, "/ping", b"")  # never throttled
        gate.set()
        await first
        assert mw.admission.inflight == 0
        return second, ping

    second, ping = asyncio.run(scenario())
    assert second[0]["status"] == 429 and (b"retry-after", b"1") in second[0]["headers"]
    assert ping[0]["status"] == 200 and rejections == [1]


def engine_dead_app(seen: list[dict]):  # type: ignore[no-untyped-def]
    """vLLM V1 after its EngineCore died under a request: a 500 naming EngineCore."""

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        seen.append(json.loads((await receive())["body"]))
        payload = b'{"error": {"message": "EngineCore encountered an issue. See stack trace"}}'
        await send({"type": "http.response.start", "status": 500, "headers": []})
        await send({"type": "http.response.body", "body": payload})

    return app


def long_chat() -> bytes:
    msgs = [{"role": "system", "content": "sys"}]
    for i in range(6):
        msgs += [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]
    return json.dumps({"messages": [*msgs, {"role": "user", "content": "last"}]}).encode()


def test_engine_dying_under_a_request_becomes_a_503_with_retry_after_and_a_reason() -> None:
    seen: list[dict] = []
    mw = ShapingMiddleware(engine_dead_app(seen), config=CONFIG, counter=lambda: None)
    sent = asyncio.run(call(mw, "/invocations", long_chat()))
    assert len(seen) == 1
    assert sent[0]["status"] == 503 and (b"retry-after", b"30") in sent[0]["headers"]
    assert "engine died" in json.loads(sent[1]["body"])["error"]["message"]


def test_dead_engine_answers_503_without_calling_the_app() -> None:
    seen: list[dict] = []
    unavailable: list[int] = []
    hooks = Hooks(
        engine_dead=lambda scope: True, on_engine_unavailable=lambda: unavailable.append(1)
    )
    mw = ShapingMiddleware(engine_dead_app(seen), config=CONFIG, counter=lambda: None, hooks=hooks)
    sent = asyncio.run(call(mw, "/v1/chat/completions", long_chat()))
    assert seen == [] and unavailable == [1]
    assert sent[0]["status"] == 503 and (b"retry-after", b"30") in sent[0]["headers"]
    assert "restarting" in json.loads(sent[1]["body"])["error"]["message"]


def test_draining_server_refuses_new_requests_with_503() -> None:
    seen: list[dict] = []
    hooks = Hooks(draining=lambda: True)
    mw = ShapingMiddleware(engine_dead_app(seen), config=CONFIG, counter=lambda: None, hooks=hooks)
    sent = asyncio.run(call(mw, "/invocations", long_chat()))
    assert seen == [] and sent[0]["status"] == 503
    assert "draining" in json.loads(sent[1]["body"])["error"]["message"]


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


async def _ok(scope, receive, send):  # type: ignore[no-untyped-def]
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


def test_routes_other_than_the_served_ones_are_refused_before_the_engine() -> None:
    mw = AdmissionMiddleware(_ok, max_inflight=4)
    for path in ("/v1/responses", "/v1/messages", "/v1/chat/completions/batch", "/pooling",
                 "/v1/load_lora_adapter", "/sleep"):  # fmt: skip
        sent = asyncio.run(call(mw, path, b"{}"))
        assert sent[0]["status"] == 404, path
        assert f"route {path} is not served" in json.loads(sent[1]["body"])["error"]["message"]
    for path in ("/ping", "/health", "/metrics", "/v1/models", "/invocations"):
        assert asyncio.run(call(mw, path, b"{}"))[0]["status"] == 200, path


def test_body_over_max_request_bytes_is_413_naming_the_limit_without_reading_it_all() -> None:
    small = shaping_config(max_request_bytes=1000)
    mw = ShapingMiddleware(_ok, config=small, counter=lambda: None)
    body = json.dumps({"messages": [{"role": "user", "content": "x" * 5000}]}).encode()
    sent = asyncio.run(call(mw, "/invocations", body))
    assert sent[0]["status"] == 413
    assert "MAX_REQUEST_BYTES (1000 bytes)" in json.loads(sent[1]["body"])["error"]["message"]
    declared = asyncio.run(
        call(mw, "/invocations", b"{}", ((b"content-length", b"999999"),))
    )  # refused on the declared length alone
    assert declared[0]["status"] == 413


def test_shaping_acts_on_exactly_the_paths_admission_counts() -> None:
    mw = ShapingMiddleware(_ok, config=shaping_config(max_messages=1), counter=lambda: None)
    body = json.dumps({"messages": [{"role": "user", "content": "x"}] * 2}).encode()
    for path in ENGINE_PATHS:
        assert asyncio.run(call(mw, path, body))[0]["status"] == 413, path
    for path in ("/ping", "/health", "/metrics", "/v1/models"):
        assert asyncio.run(call(mw, path, body))[0]["status"] == 200, path


def test_too_many_messages_is_413_naming_the_limit() -> None:
    small = shaping_config(max_messages=3)
    mw = ShapingMiddleware(_ok, config=small, counter=lambda: None)
    body = json.dumps({"messages": [{"role": "user", "content": "x"}] * 4}).encode()
    sent = asyncio.run(call(mw, "/invocations", body))
    assert sent[0]["status"] == 413
    assert "MAX_MESSAGES allows 3" in json.loads(sent[1]["body"])["error"]["message"]


def test_more_than_one_sequence_per_request_is_refused_with_a_reason() -> None:
    mw = ShapingMiddleware(_ok, config=CONFIG, counter=lambda: None)
    chat = {"messages": [{"role": "user", "content": "x"}]}
    for extra, reason in (({"n": 256}, "'n': 256 is not supported"),
                          ({"best_of": 4}, "'best_of': 4 is not supported"),
                          ({"use_beam_search": True}, "'use_beam_search' is not supported"),
                          ({"n": "2"}, "'n' must be a positive integer")):  # fmt: skip
        sent = asyncio.run(call(mw, "/invocations", json.dumps({**chat, **extra}).encode()))
        assert sent[0]["status"] == 400, extra
        assert reason in json.loads(sent[1]["body"])["error"]["message"]
    assert (
        asyncio.run(call(mw, "/invocations", json.dumps({**chat, "n": 1}).encode()))[0]["status"]
        == 200
    )


def test_large_bodies_are_shaped_off_the_event_loop() -> None:
    import threading

    from container.serving.budget import TokenCounter

    threads: set[str] = set()

    def encode_len(text: str) -> int:
        threads.add(threading.current_thread().name)
        return len(text)

    counter = TokenCounter(lambda m, t=None: json.dumps(m), encode_len, 4, 4)
    mw = ShapingMiddleware(_ok, config=CONFIG, counter=lambda: counter)
    turns = [{"role": "user", "content": f"turn {i} " + "x" * 100} for i in range(1000)]
    sent = asyncio.run(call(mw, "/invocations", json.dumps({"messages": turns}).encode()))
    assert sent[0]["status"] == 200
    assert threads and all(name.startswith("shaping") for name in threads), threads
    threads.clear()
    small = json.dumps({"messages": [{"role": "user", "content": "x" * 900}]})  # over the bound
    asyncio.run(call(mw, "/invocations", small.encode()))
    assert threads == {threading.main_thread().name}  # small bodies: inline, no thread hop


def test_a_bad_field_value_is_a_400_naming_the_field_on_every_route() -> None:
    """vLLM's /invocations answered `{"messages":[...],"temperature":"hot"}` with the completion
    model's "Either prompt or prompt_embeds must be provided": the shaping hook validates the
    body against vLLM's own model for its shape and names the field (request_schema.py)."""
    mw = ShapingMiddleware(_ok, config=CONFIG, counter=lambda: None)
    chat = {"messages": [{"role": "user", "content": "x"}]}
    cases = (
        ({**chat, "temperature": "hot"}, "body.temperature: Input should be a valid number"),
        ({**chat, "top_p": "a"}, "body.top_p: Input should be a valid number"),
        ({"prompt": "x", "temperature": [1]}, "body.temperature"),
        ({**chat, **{k: "x" for k in ("seed", "top_k", "min_p", "presence_penalty", "top_p")}},
         "; and 2 more"),
        ({**chat, "logprobs": True, "top_logprobs": "x"},
         "body.top_logprobs: `top_logprobs` must be"),
    )  # fmt: skip
    for path in ("/invocations", "/v1/chat/completions"):
        for body, reason in cases:
            if path != "/invocations" and "prompt" in body:
                continue
            sent = asyncio.run(call(mw, path, json.dumps(body).encode()))
            assert sent[0]["status"] == 400, (path, body)
            message = json.loads(sent[1]["body"])["error"]["message"]
            assert reason in message, message
            assert "prompt_embeds" not in message
    ok = asyncio.run(call(mw, "/invocations", json.dumps({**chat, "temperature": 0.5}).encode()))
    assert ok[0]["status"] == 200


def test_the_client_is_told_how_many_turns_and_documents_the_budget_dropped() -> None:
    """The marker tells the model; the response's custom attributes header (InvokeEndpoint's
    CustomAttributes) tells the client, on every engine route, and only when something was
    dropped."""
    from container.serving.budget import TokenCounter
    from container.serving.shaping import DROPPED_HEADER

    counter = TokenCounter(lambda m, t=None: json.dumps(m), len, 4, 4)
    mw = ShapingMiddleware(_ok, config=CONFIG, counter=lambda: counter)
    budget = CONFIG.budget
    turn = "x" * (budget.max_model_len // 4)
    long = [{"role": "user" if i % 2 == 0 else "assistant", "content": turn} for i in range(9)]
    docs = ["d" * budget.retrieval_tokens, "e" * 10]  # the second is past the retrieval budget
    for path in ("/invocations", "/v1/chat/completions"):
        body = json.dumps({"messages": long, "retrieval": docs}).encode()
        start = asyncio.run(call(mw, path, body))[0]
        assert start["status"] == 200
        attributes = dict(start["headers"])[DROPPED_HEADER].decode()
        turns = int(attributes.split("context-dropped-turns=")[1].split(",")[0])
        assert turns >= 6 and turns % 2 == 0  # whole exchanges, the oldest first
        assert attributes.endswith(",context-dropped-documents=1")
        short = json.dumps({"messages": long[:1]}).encode()
        start = asyncio.run(call(mw, path, short))[0]
        assert DROPPED_HEADER not in dict(start["headers"])


def test_a_request_naming_no_adapter_goes_to_the_default_adapter_on_every_route() -> None:
    """DEFAULT_ADAPTER (the endpoint's default_adapter; make serve-local passes the same) answers
    a request that names none: in the body for /v1/*, in the adapter header for /invocations
    (vLLM's /invocations takes the model from that header)."""
    import dataclasses

    from container.serving.shaping import ADAPTER_HEADER

    seen: list[tuple[dict, dict]] = []

    async def engine(scope, receive, send):  # type: ignore[no-untyped-def]
        seen.append((json.loads((await receive())["body"]), dict(scope["headers"])))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    config = shaping_config()
    defaulted = ShapingMiddleware(
        engine, config=dataclasses.replace(config, default_adapter="b"), counter=lambda: None
    )
    chat = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    for path in ("/invocations", "/v1/chat/completions"):
        assert asyncio.run(call(defaulted, path, chat))[0]["status"] == 200
    (inv_body, inv_headers), (v1_body, _) = seen
    assert inv_body["model"] == "b" and inv_headers[ADAPTER_HEADER] == b"b"
    assert v1_body["model"] == "b"
    seen.clear()
    plain = ShapingMiddleware(engine, config=config, counter=lambda: None)
    asyncio.run(call(plain, "/invocations", chat))
    assert seen[0][0]["model"] == "base"  # no default adapter: the base model
