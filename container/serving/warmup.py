"""Warmup: synthetic requests through the full path (/invocations, hooks, engine) before /ping
turns 200. Every adapter and the base model, a short and a long prompt shape; at least
WARMUP_NUM_REQUESTS in total. A failed warmup request fails startup: an adapter that cannot
answer must not take traffic.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass

SYSTEM = "You are a manga shopping assistant. Answer briefly and politely."


def chat(user: str, max_tokens: int = 8) -> dict[str, object]:
    """A one-turn chat body behind the shopping-assistant system prompt (warmup, bench, tests)."""
    return {
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
        "max_tokens": max_tokens,
        "temperature": 0,
    }


@dataclass(frozen=True)
class WarmupRequest:
    adapter: str
    shape: str  # "short" | "long"
    body: dict[str, object]


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


def run(port: int, requests: list[WarmupRequest], timeout: float = 120.0) -> list[float]:
    """Send the plan to /invocations with the adapter header; raise on any non-200."""
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
        started = time.perf_counter()
        with urllib.request.urlopen(http, timeout=timeout) as resp:
            resp.read()
        durations.append(time.perf_counter() - started)
    return durations
