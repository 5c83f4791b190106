"""Closed-loop streaming load over HTTP against an OpenAI-compatible ``/v1/completions``
(``vllm serve``).

Standard library only (asyncio streams, HTTP/1.1, chunked SSE), so it runs on the GPU machine's
image and here without installs. Issue 42 item 2: LoRA's cost measured on the production path
(HTTP).

A *window* is ``concurrency`` clients, each sending its next request as soon as its last one ended,
for ``warmup_s + measure_s`` seconds. Prompts are random token ids (``prompt`` as a list of ints: no
tokenizer on the path, no prefix-cache hits), outputs exactly ``output_tokens`` (``ignore_eos``). A
client's first request asks for a random 1..output_tokens tokens so the clients fall out of step at
once (no waves of simultaneous prefills); starts are staggered over ``stagger_s``. ``models`` are
used round robin: client i's k-th request names ``models[(i + k) % len(models)]`` (the LoRA
adapters, so every adapter is in every batch).

Figures are taken by event time inside the measurement window [t0 + warmup_s, t0 + warmup_s +
measure_s] (a stationary sample, no bias against long requests):

- ``req_per_min``: output tokens streamed inside the window / window / output_tokens x 60 (the
  steady-state completion rate; partial requests count), and ``completed_per_min`` (requests of full
  length that ended inside the window);
- ``ttft_s``: requests whose first token arrived inside the window;
- ``e2e_s``, ``decode_tps`` ((tokens - 1) / (e2e - ttft), the speed one sequence sees): full-length
  requests that ended inside the window;
- ``itl_s``: gaps between streamed chunks that ended inside the window (a chunk of k tokens counts
  as k gaps of gap/k; ``continuous_usage_stats`` gives the token count of every chunk).

    python3 bench/http_load.py --port 8000 --model base --concurrency 64 --prompt 1500 --output 180
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from typing import Any

TOKEN_LOW, TOKEN_HIGH = 1000, 127000  # ordinary ids of the Llama-3 vocabulary (no specials)


def pct(xs: list[float], q: float) -> float | None:
    """The q-quantile (0..1) by linear interpolation; None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def body(model: str, prompt: list[int], max_tokens: int) -> bytes:
    return json.dumps(
        {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "min_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 1.0,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    ).encode()


async def stream_completion(host: str, port: int, payload: bytes, rec: dict[str, Any]) -> None:
    """POST one streaming completion; fills rec in place (so a cancelled request keeps its chunks).

    rec gets: start (perf_counter), chunks [(time, completion_tokens so far)], end, status,
    error."""
    rec["start"] = time.perf_counter()
    rec["chunks"] = []
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            b"Accept: text/event-stream\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (host.encode(), len(payload))
            + payload
        )
        await writer.drain()
        status = await reader.readline()
        rec["status"] = int(status.split()[1])
        chunked = False
        length = None
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            if k.strip().lower() == "transfer-encoding" and "chunked" in v.lower():
                chunked = True
            if k.strip().lower() == "content-length":
                length = int(v.strip())
        buf = b""

        def events(data: bytes) -> bool:
            nonlocal buf
            buf += data
            done = False
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                for ln in ev.split(b"\n"):
                    if not ln.startswith(b"data:"):
                        continue
                    d = ln[5:].strip()
                    if d == b"[DONE]":
                        done = True
                        continue
                    obj = json.loads(d)
                    if "error" in obj and not obj.get("choices"):
                        rec["error"] = str(obj["error"])[:300]
                        continue
                    if obj.get("choices"):
                        usage = obj.get("usage") or {}
                        rec["chunks"].append((time.perf_counter(), usage.get("completion_tokens")))
            return done

        if rec["status"] != 200:
            rest = await (reader.readexactly(length) if length else reader.read(4000))
            rec["error"] = f"HTTP {rec['status']}: {rest[:300]!r}"
        elif chunked:
            while True:
                size_line = await reader.readline()
                if not size_line:
                    break
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    break
                data = await reader.readexactly(size + 2)
                if events(data[:-2]):
                    break
        else:
            while True:
                data = await reader.read(65536)
                if not data or events(data):
                    break
        rec["end"] = time.perf_counter()
    finally:
        writer.close()


def chunk_tokens(chunks: list[tuple[float, int | None]]) -> list[tuple[float, int]]:
    """(time, tokens in this chunk): from cumulative completion_tokens, or 1 a chunk if absent."""
    out, prev = [], 0
    for t, cum in chunks:
        if cum is None:
            out.append((t, 1))
            continue
        if cum > prev:
            out.append((t, cum - prev))
            prev = cum
    return out


def summarize(
    records: list[dict[str, Any]], w0: float, w1: float, output_tokens: int
) -> dict[str, Any]:
    """Figures of one window from its request records (times are perf_counter seconds)."""
    tokens_in, ttft, e2e, dec, itl = 0, [], [], [], []
    completed = errors = 0
    for r in records:
        if r.get("error"):
            errors += 1
        ct = chunk_tokens(r.get("chunks", []))
        if not ct:
            continue
        prev_t = None
        for t, n in ct:
            if w0 <= t <= w1:
                tokens_in += n
            if prev_t is not None and w0 <= t <= w1:
                itl.extend([(t - prev_t) / n] * n)
            prev_t = t
        first = ct[0][0]
        if w0 <= first <= w1:
            ttft.append(first - r["start"])
        ntok = sum(n for _, n in ct)
        end = r.get("end")
        if (
            end is not None
            and w0 <= end <= w1
            and r.get("max_tokens") == output_tokens
            and ntok == output_tokens
            and not r.get("error")
        ):
            completed += 1
            e2e.append(end - r["start"])
            if end - first > 0:
                dec.append((ntok - 1) / (end - first))
    span = w1 - w0

    def p(xs, q, nd=4):
        v = pct(xs, q)
        return None if v is None else round(v, nd)

    return {
        "window_s": round(span, 3),
        "req_per_min": round(tokens_in / span / output_tokens * 60, 1),
        "completed_per_min": round(completed / span * 60, 1),
        "output_tok_per_s": round(tokens_in / span, 1),
        "ttft_s": {
            "n": len(ttft),
            "p50": p(ttft, 0.5),
            "p95": p(ttft, 0.95),
            "mean": p([statistics.fmean(ttft)] if ttft else [], 0),
        },
        "e2e_s": {"n": len(e2e), "p50": p(e2e, 0.5), "p95": p(e2e, 0.95)},
        "decode_tps": {"n": len(dec), "p50": p(dec, 0.5, 2), "p05": p(dec, 0.05, 2)},
        "itl_s": {
            "n": len(itl),
            "p50": p(itl, 0.5, 5),
            "p95": p(itl, 0.95, 5),
            "mean": p([statistics.fmean(itl)] if itl else [], 0, 5),
        },
        "errors": errors,
    }


async def run_window(
    host: str,
    port: int,
    models: list[str],
    concurrency: int,
    prompt_tokens: int,
    output_tokens: int,
    warmup_s: float,
    measure_s: float,
    stagger_s: float = 1.0,
    seed: int = 0,
) -> dict[str, Any]:
    rng = random.Random(seed)
    records: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    w0, w1 = t0 + warmup_s, t0 + warmup_s + measure_s

    async def client(i: int) -> None:
        await asyncio.sleep(stagger_s * i / max(concurrency, 1))
        k = 0
        while time.perf_counter() < w1:
            mt = rng.randint(1, output_tokens) if k == 0 else output_tokens
            model = models[(i + k) % len(models)]
            prompt = [rng.randrange(TOKEN_LOW, TOKEN_HIGH) for _ in range(prompt_tokens)]
            rec: dict[str, Any] = {"client": i, "k": k, "model": model, "max_tokens": mt}
            records.append(rec)
            try:
                await stream_completion(host, port, body(model, prompt, mt), rec)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                rec["error"] = f"{type(e).__name__}: {e}"[:300]
                await asyncio.sleep(0.2)
            k += 1

    tasks = [asyncio.create_task(client(i)) for i in range(concurrency)]
    await asyncio.sleep(max(0.0, w1 - time.perf_counter()))
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    out = summarize(records, w0, w1, output_tokens)
    out.update(
        {
            "concurrency": concurrency,
            "prompt_tokens": prompt_tokens,
            "output_tokens": output_tokens,
            "warmup_s": warmup_s,
            "measure_s": measure_s,
            "stagger_s": stagger_s,
            "models": models,
            "requests_sent": len(records),
        }
    )
    out["_records"] = [
        {
            "start": round(r["start"] - t0, 4),
            "model": r["model"],
            "max_tokens": r["max_tokens"],
            "ttft": round(r["chunks"][0][0] - r["start"], 4) if r.get("chunks") else None,
            "end": round(r["end"] - t0, 4) if r.get("end") else None,
            "tokens": (r["chunks"][-1][1] if r.get("chunks") else 0),
            "error": r.get("error"),
        }
        for r in records
        if "start" in r
    ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--model", action="append", required=True, help="repeat for round robin")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=1500)
    ap.add_argument("--output", type=int, default=180)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--measure", type=float, default=15.0)
    a = ap.parse_args()
    res = asyncio.run(
        run_window(a.host, a.port, a.model, a.concurrency, a.prompt, a.output, a.warmup, a.measure)
    )
    res.pop("_records")
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
