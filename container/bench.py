"""`make bench`: bare vLLM against the product (entrypoint + hooks), side by side in one run.

Both servers run at once on the same tiny model with the same flags (settings.vllm_args); the
only difference is the product's hooks (ping, admission, shaping with the context budget). The
load alternates between them in rounds (A B A B ...) so machine drift hits both equally. Each
round sends REQUESTS requests from CONCURRENCY client threads to /invocations with the adapter
header, rotating over the adapters. Reports p50/p99 latency and throughput and the ratios
product/bare. Target (issue 4): the hooks add at most 2% and at most 1 ms to p50.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from .serving import settings as settings_mod
from .serving import warmup

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "6"))
REQUESTS = int(os.environ.get("BENCH_REQUESTS", "48"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "4"))
BARE_PORT = int(os.environ.get("BENCH_BARE_PORT", "18090"))
PRODUCT_PORT = BARE_PORT + 1
LARGE_SECONDS = float(os.environ.get("BENCH_LARGE_SECONDS", "20"))
LARGE_SENDERS = int(os.environ.get("BENCH_LARGE_SENDERS", "2"))
LARGE_BYTES = int(os.environ.get("BENCH_LARGE_BYTES", str(1_500_000)))
REPO = Path(__file__).resolve().parents[1]
PROMPT = "Recommend a manga like Frieren for a new reader."
#: The adapter travels in the header here; a body that names it puts ``model`` first
#: (:func:`adapter_body`): the key order prefix-aware routing needs (docs/routing.md).
BODY = warmup.chat(PROMPT, max_tokens=16)


def adapter_body(adapter: str) -> bytes:
    """The bench's body with the adapter in ``model``, as a client of the endpoint sends it."""
    return json.dumps(warmup.chat(PROMPT, max_tokens=16, model=adapter)).encode()


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url}: not ready in {timeout}s")


def run_round(port: int, adapters: list[str]) -> tuple[list[float], float]:
    body = BODY

    def one(i: int) -> float:
        headers = {"X-Amzn-SageMaker-Adapter-Identifier": adapters[i % len(adapters)]}
        started = time.perf_counter()
        r = client.post(f"http://127.0.0.1:{port}/invocations", json=body, headers=headers)
        took = time.perf_counter() - started
        if r.status_code != 200:
            raise RuntimeError(f"port {port}: {r.status_code} {r.text[:200]}")
        return took

    with httpx.Client(timeout=120) as client, ThreadPoolExecutor(CONCURRENCY) as pool:
        started = time.perf_counter()
        latencies = list(pool.map(one, range(REQUESTS)))
        wall = time.perf_counter() - started
    return latencies, wall


def hooks_cost_us(s: settings_mod.Settings, n: int = 3000) -> float:
    """The hooks' own CPU time per request: Admission(Shaping(no-op app)) in-process, with the
    real tokenizer and the bench's request body. Independent of engine and machine noise."""
    import asyncio

    from transformers import AutoTokenizer

    from .serving.admission import AdmissionMiddleware
    from .serving.budget import BudgetConfig, counter_from_tokenizer
    from .serving.shaping import ShapingConfig, ShapingMiddleware

    counter = counter_from_tokenizer(AutoTokenizer.from_pretrained(s.model_path))
    config = ShapingConfig(
        base_model=s.served_model_name,
        adapters=frozenset(s.adapters()),
        default_adapter="",
        budget=BudgetConfig(s.vllm_max_model_len, s.budget_system_tokens,
                            s.budget_retrieval_tokens, s.budget_generation_reserve_tokens),
    )  # fmt: skip

    async def noop(scope, receive, send):  # type: ignore[no-untyped-def]
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    app = AdmissionMiddleware(
        ShapingMiddleware(noop, config=config, counter=lambda: counter), max_inflight=8
    )
    body = adapter_body(next(iter(config.adapters), s.served_model_name))

    async def one() -> None:
        sent = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive():  # type: ignore[no-untyped-def]
            return sent.pop() if sent else {"type": "http.disconnect"}

        async def send(message):  # type: ignore[no-untyped-def]
            return None

        scope = {"type": "http", "path": "/invocations", "headers": []}
        await app(scope, receive, send)

    async def loop() -> float:
        for _ in range(200):
            await one()
        started = time.perf_counter()
        for _ in range(n):
            await one()
        return (time.perf_counter() - started) / n * 1e6

    return asyncio.run(loop())


def large_body(size: int) -> bytes:
    """A long chat (about ``size`` bytes, under MAX_MESSAGES) whose oldest turns must go."""
    turns = max(2, min(1000, size // 1500))
    filler = "Is this One Piece volume in stock, and does it ship to Osaka tomorrow? "
    text = (filler * (size // turns // len(filler) + 1))[: size // turns]
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{i} {text}"}
                for i in range(turns)]  # fmt: skip
    messages.append({"role": "user", "content": "And box sets?"})
    return json.dumps({"messages": messages, "max_tokens": 4, "temperature": 0}).encode()


def ping_under_large_bodies(port: int) -> dict[str, float]:
    """Ping every 20 ms while LARGE_SENDERS threads send large conversations for LARGE_SECONDS."""
    import threading

    body = large_body(LARGE_BYTES)
    stop = threading.Event()
    sent: list[int] = []

    def sender() -> None:
        with httpx.Client(timeout=120) as c:
            while not stop.is_set():
                r = c.post(f"http://127.0.0.1:{port}/invocations", content=body,
                           headers={"Content-Type": "application/json"})  # fmt: skip
                sent.append(r.status_code)

    threads = [threading.Thread(target=sender, daemon=True) for _ in range(LARGE_SENDERS)]
    for t in threads:
        t.start()
    pings: list[float] = []
    deadline = time.monotonic() + LARGE_SECONDS
    with httpx.Client(timeout=10) as c:
        while time.monotonic() < deadline:
            started = time.perf_counter()
            c.get(f"http://127.0.0.1:{port}/ping")
            pings.append(time.perf_counter() - started)
            time.sleep(0.02)
    stop.set()
    for t in threads:
        t.join(120)
    return {
        "pings": len(pings),
        "ping_p50_ms": round(pct(pings, 0.5) * 1000, 2),
        "ping_p99_ms": round(pct(pings, 0.99) * 1000, 2),
        "ping_max_ms": round(max(pings) * 1000, 2),
        "large_requests": len(sent),
        "large_statuses": dict(sorted(Counter(map(str, sent)).items())),
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    s = settings_mod.load()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    bare_settings = settings_mod.load({**os.environ, "VLLM_PORT": str(BARE_PORT)})
    bare = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
         *settings_mod.vllm_args(bare_settings)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    product = subprocess.Popen(
        [sys.executable, "-m", "container.serving.entrypoint", "serve"],
        env={**env, "VLLM_PORT": str(PRODUCT_PORT), "METRICS_INTERVAL_SECONDS": "60"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        wait_ready(f"http://127.0.0.1:{BARE_PORT}/health", bare)
        wait_ready(f"http://127.0.0.1:{PRODUCT_PORT}/ping", product)
        adapters = [s.served_model_name, *s.adapters()]
        run_round(BARE_PORT, adapters)  # warm the bare server like the product's warmup did
        results: dict[str, dict[str, list[float]]] = {
            "bare": {"lat": [], "wall": []},
            "product": {"lat": [], "wall": []},
        }
        for i in range(ROUNDS):
            order = [("bare", BARE_PORT), ("product", PRODUCT_PORT)]
            for name, port in order if i % 2 == 0 else reversed(order):
                lat, wall = run_round(port, adapters)
                results[name]["lat"] += lat
                results[name]["wall"].append(wall)
        summary = {}
        for name, r in results.items():
            summary[name] = {
                "requests": len(r["lat"]),
                "p50_ms": round(pct(r["lat"], 0.5) * 1000, 2),
                "p99_ms": round(pct(r["lat"], 0.99) * 1000, 2),
                "throughput_rps": round(len(r["lat"]) / sum(r["wall"]), 2),
                "round_p50_ms": [
                    round(statistics.median(r["lat"][k * REQUESTS : (k + 1) * REQUESTS]) * 1000, 1)
                    for k in range(ROUNDS)
                ],
            }
        b, p = summary["bare"], summary["product"]
        summary["ratios_product_over_bare"] = {
            "p50": round(p["p50_ms"] / b["p50_ms"], 4),
            "p99": round(p["p99_ms"] / b["p99_ms"], 4),
            "throughput": round(p["throughput_rps"] / b["throughput_rps"], 4),
            "p50_added_ms": round(p["p50_ms"] - b["p50_ms"], 2),
            # Paired by round (each product round runs next to a bare round): the median of the
            # per-round p50 ratios is less sensitive to drift across the run than pooled p50s.
            "p50_paired_round_median": round(
                statistics.median(
                    pr / br for pr, br in zip(p["round_p50_ms"], b["round_p50_ms"], strict=True)
                ),
                4,
            ),
        }
        summary["hooks_only_us_per_request"] = round(hooks_cost_us(s), 1)
        summary["ping_under_large_bodies"] = {
            "body_bytes": len(large_body(LARGE_BYTES)),
            "seconds": LARGE_SECONDS,
            "senders": LARGE_SENDERS,
            "bare": ping_under_large_bodies(BARE_PORT),
            "product": ping_under_large_bodies(PRODUCT_PORT),
            "target_ping_p99_ms": 100,
        }
        summary["side_by_side"] = {
            "p50_ratio_product_over_bare": summary["ratios_product_over_bare"]["p50"],
            "hooks_us_per_request": summary["hooks_only_us_per_request"],
            "ping_p99_ms_under_large_bodies": summary["ping_under_large_bodies"]["product"][
                "ping_p99_ms"
            ],
        }
        summary["load"] = {"rounds": ROUNDS, "requests_per_round": REQUESTS,
                           "concurrency": CONCURRENCY, "max_tokens": 16}  # fmt: skip
        print(json.dumps(summary, indent=2))
        return 0
    finally:
        for proc in (bare, product):
            proc.terminate()
        for proc in (bare, product):
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)


if __name__ == "__main__":
    sys.exit(main())
