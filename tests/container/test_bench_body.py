"""The bench sends bodies in the key order prefix-aware routing needs (docs/routing.md): the
adapter, then the conversation (system prompt first), then the fields that vary per request."""

from __future__ import annotations

import json

from container import bench
from container.serving import warmup


def test_bench_body_with_an_adapter_starts_with_model_then_the_conversation() -> None:
    raw = bench.adapter_body("manga_domain")
    body = json.loads(raw)
    assert list(body) == ["model", "messages", "max_tokens", "temperature"]
    assert raw.startswith(b'{"model": "manga_domain", "messages": [{"role": "system", "content": ')
    assert body["messages"][0]["content"] == warmup.SYSTEM


def test_bench_body_without_an_adapter_starts_with_the_conversation() -> None:
    assert list(bench.BODY) == ["messages", "max_tokens", "temperature"]
    assert list(json.loads(bench.large_body(20_000))) == ["messages", "max_tokens", "temperature"]
