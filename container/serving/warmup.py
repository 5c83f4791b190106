"""Warmup: synthetic requests through the full path (/invocations, hooks, engine) before /ping
turns 200. Every adapter and the base model, a short and a long prompt shape; at least
WARMUP_NUM_REQUESTS in total. A failed warmup request fails startup: an adapter that cannot
answer must not take traffic.

Then one request per request option that takes a code path of its own in the engine
(:data:`OPTION_PROBES`). vLLM compiles some of them with torch inductor on first use, not at
start-up: ``batched_count_greater_than`` (vllm/v1/sample/ops/logprobs.py, ``@torch.compile``)
runs on the first request that asks for logprobs, top_logprobs or prompt_logprobs, and needs a
C++ compiler on CPU (Triton's launcher needs a C compiler on GPU). An image without one served
every other request, and each logprobs request killed the EngineCore (InvalidCxxCompiler):
one client kept an instance restarting. Structured output builds its grammar backend on the
first request that asks for it. Taken here, a missing piece fails the start with the option
named, and the compile caches are warm before the first client arrives.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SYSTEM = "You are a manga shopping assistant. Answer briefly and politely."


def chat(user: str, max_tokens: int = 8, *, model: str | None = None) -> dict[str, object]:
    """A one-turn chat body behind the shopping-assistant system prompt (warmup, bench, tests),
    in the key order prefix-aware routing needs (docs/routing.md): ``model`` (when given), then
    ``messages`` (system prompt first), then the fields that vary per request."""
    head: dict[str, object] = {"model": model} if model else {}
    return {
        **head,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }


@dataclass(frozen=True)
class WarmupRequest:
    adapter: str
    shape: str  # "short" | "long", or the option an OPTION_PROBES request takes
    body: dict[str, object]


def long_prompt_bytes(max_model_len: int, system_tokens: int, reserve_tokens: int) -> int:
    """The long shape's size: half of what the context budget leaves the conversation."""
    return (max_model_len - reserve_tokens - system_tokens) // 2


def plan(adapters: list[str], total: int, long_prompt_bytes: int) -> list[WarmupRequest]:
    """Every (adapter, shape) pair once, then round-robin until ``total`` requests."""
    if total <= 0:
        return []
    long_text = ("Recommend manga similar to Frieren with a calm tone. " * 200)[:long_prompt_bytes]
    shapes = {"short": "Recommend action manga.", "long": long_text}
    pairs = [(a, s) for a in adapters for s in shapes]
    count = max(total, len(pairs))
    out = []
    for i in range(count):
        adapter, shape = pairs[i % len(pairs)]
        out.append(WarmupRequest(adapter, shape, chat(shapes[shape])))
    return out


class WarmupError(RuntimeError):
    """A warmup request was not answered as it must be; the message names which one."""


_JSON_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "volume": {"type": "integer"}},
    "required": ["title"],
}


def _has_logprobs(answer: dict[str, Any]) -> bool:
    choice = (answer.get("choices") or [{}])[0]
    logprobs = choice.get("logprobs") or {}
    return bool(logprobs.get("content") or logprobs.get("token_logprobs"))


def _has_prompt_logprobs(answer: dict[str, Any]) -> bool:
    choice = (answer.get("choices") or [{}])[0]
    entries = choice.get("prompt_logprobs") or answer.get("prompt_logprobs") or []
    return any(entry for entry in entries)  # the first prompt token has none (None)


def _answered(answer: dict[str, Any]) -> bool:
    return bool(answer.get("choices"))


#: One request per option that has an engine path of its own: (name, body, what the answer must
#: show). Sent to the base model, one sequence each (``n`` > 1 is refused by request_checks).
OPTION_PROBES: tuple[tuple[str, dict[str, Any], Callable[[dict[str, Any]], bool]], ...] = (
    ("logprobs", {**chat("Recommend a manga.", 2), "logprobs": True, "top_logprobs": 3},
     _has_logprobs),
    ("completion logprobs", {"prompt": "Manga:", "max_tokens": 2, "temperature": 0,
                             "logprobs": 2}, _has_logprobs),
    ("prompt_logprobs", {"prompt": "Recommend a manga:", "max_tokens": 1, "temperature": 0,
                         "prompt_logprobs": 1}, _has_prompt_logprobs),
    ("structured output (json_schema)",
     {**chat("Name one manga as JSON.", 8), "response_format": {
         "type": "json_schema", "json_schema": {"name": "pick", "schema": _JSON_SCHEMA}}},
     _answered),
    ("penalties", {**chat("Recommend a manga.", 4), "presence_penalty": 0.5,
                   "frequency_penalty": 0.5, "repetition_penalty": 1.1}, _answered),
    ("random sampling", {**chat("Recommend a manga.", 4), "temperature": 0.8, "top_p": 0.9,
                         "top_k": 20, "min_p": 0.05, "seed": 7}, _answered),
    ("logit_bias, stop, min_tokens", {**chat("Recommend a manga.", 4), "logit_bias": {"5": 1.0},
                                     "stop": ["\n\n"], "min_tokens": 1}, _answered),
)  # fmt: skip


def option_plan(base_model: str) -> list[WarmupRequest]:
    """:data:`OPTION_PROBES` as warmup requests to the base model (``shape`` = the option)."""
    return [WarmupRequest(base_model, name, body) for name, body, _ in OPTION_PROBES]


_CHECKS = {name: check for name, _, check in OPTION_PROBES}


def run(port: int, requests: list[WarmupRequest], timeout: float = 120.0) -> list[float]:
    """Send the plan to /invocations with the adapter header; raise :class:`WarmupError` naming
    the request on any non-200, and on an answer that does not show what its option asked for."""
    durations = []
    for req in requests:
        data = json.dumps(req.body).encode()
        http = urllib.request.Request(
            f"http://127.0.0.1:{port}/invocations",
            data=data,
            headers={
                "Content-Type": "application/json",
                "X-Amzn-SageMaker-Adapter-Identifier": req.adapter,
            },
        )
        what = f"{req.shape} request to {req.adapter!r}"
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(http, timeout=timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode(errors="replace")
            raise WarmupError(f"{what}: HTTP {exc.code}: {detail}") from None
        except OSError as exc:
            raise WarmupError(f"{what}: {exc}") from None
        durations.append(time.perf_counter() - started)
        check = _CHECKS.get(req.shape)
        if check is not None:
            try:
                answer = json.loads(raw)
            except ValueError:
                raise WarmupError(f"{what}: the answer is not JSON: {raw[:200]!r}") from None
            if not isinstance(answer, dict) or not check(answer):
                raise WarmupError(f"{what}: the answer lacks what it asked for: {raw[:300]!r}")
    return durations
