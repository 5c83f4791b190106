"""Per-instance speed of vLLM on one GPU: a closed-loop sweep of concurrency, request shapes and
prefix-cache hits, written as JSON (issue 24; the speed model in ``sizing/speed_model.py`` is
fitted to what this writes).

Runs on a GPU machine with vLLM installed (``bench/run_gpu.sh`` sets one up from the files
``/work/shared/gpu/build-carry.sh`` builds; docs/speed-model.md says how). It drives vLLM's own
asynchronous engine in-process (``AsyncLLM``, the engine ``vllm serve`` wraps), not the HTTP
server: the same scheduler, continuous batching, chunked prefill and prefix cache, without the
HTTP and SSE framing (which FACTS.md's ``vllm serve`` runs include: compare them to see its cost).

Each *phase* is a closed loop: ``concurrency`` clients, each sending a request as soon as its last
one finished (starts staggered over ``stagger_s`` so prefills do not arrive in lock step), for
``warmup_s + measure_s`` seconds. Requests are token ids (no tokenizer on the path), outputs are
exactly ``output`` tokens (``ignore_eos``), and each prompt starts with a unique token unless the
phase shares a ``prefix`` of that many tokens (block-aligned) across all its requests: that is the
prefix-cache hit case. Per request it records start, TTFT (first streamed token), end-to-end and
tokens; per phase it reports

- ``requests_per_minute``: requests completed inside the measurement window / its length;
- ``ttft_s``, ``e2e_s``: percentiles over requests that started after the warm-up and early enough
  to finish under full load (start <= window end - the longest end-to-end seen);
- ``decode_tps``: per-request ``(tokens - 1) / (e2e - ttft)``, percentiles: the speed one sequence
  sees while the others run (prefill chunks of newcomers included: chunked-prefill interference);
- ``output_tps``: all output tokens of the window / its length (the engine's throughput).

Probes on an idle engine add the prefill speed: TTFT of one request of N prompt tokens, cold, and
again with the same prompt cached (prefix hit).

Usage (on the GPU machine)::

    python3 bench/speed_bench.py --engine bf16 --model /tmp/model --plan full \
        --deadline EPOCH_SECONDS --out $OUT/speed_bf16.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

#: Engine settings: the product's (config/prod.yaml's engine section) and FACTS.md's earlier run.
ENGINE = {
    "gpu_memory_utilization": 0.92,
    "max_model_len": 4096,
    "max_num_seqs": 128,
    "max_num_batched_tokens": 8192,
    "block_size": 16,
    "enable_prefix_caching": True,
}
TOKEN_LOW, TOKEN_HIGH = 1000, 127000  # ordinary vocabulary ids of the Llama-3 config (no specials)


@dataclass
class Phase:
    name: str
    concurrency: int
    prompt: int
    output: int
    warmup_s: float
    measure_s: float
    stagger_s: float = 0.0
    #: Tokens shared by every request of the phase (prefix-cache hits); 0: every prompt unique.
    prefix: int = 0
    lora: bool = False
    #: Open loop: requests arrive as a Poisson process at this rate (per minute) whatever is in
    #: flight (``concurrency`` is then only a label); 0: the closed loop above.
    rate_per_min: float = 0.0

    @property
    def seconds(self) -> float:
        return self.warmup_s + self.measure_s


def _p(c: int, prompt: int, output: int, prefix: int = 0, lora: bool = False) -> Phase:
    """A phase with a warm-up and window long enough for its expected end-to-end time."""
    e2e_guess = 0.6 + output / max(30.0, 190.0 - 1.2 * c) + prompt * c / 60_000
    stagger = min(6.0, 0.8 * e2e_guess) if c > 1 else 0.0
    warmup = stagger + min(4.0, 0.6 * e2e_guess) + 1.0
    measure = max(14.0, min(28.0, 5.0 * e2e_guess))
    tag = f"c{c}-p{prompt}-o{output}" + (f"-prefix{prefix}" if prefix else "")
    return Phase(tag, c, prompt, output, warmup, measure, stagger, prefix, lora)


def _poisson(rate: float, prompt: int, output: int, prefix: int = 0) -> Phase:
    """Open loop at ``rate`` requests/minute: 8 s of warm-up, 40 s measured."""
    tag = f"poisson{rate:g}-p{prompt}-o{output}" + (f"-prefix{prefix}" if prefix else "")
    return Phase(tag, 0, prompt, output, 8.0, 40.0, 0.0, prefix, rate_per_min=rate)


#: Plans, most important first: a phase that cannot end before --deadline is skipped.
PLANS: dict[str, list[Phase]] = {
    "full": [
        _p(74, 1200, 180),
        _p(24, 1200, 180),
        _p(128, 1200, 180),
        _p(8, 1200, 180),
        _p(1, 1200, 180),
        _p(48, 1200, 180),
        _p(74, 1200, 180, prefix=864),  # 72 % of the prompt cached: the simulator's default
        _p(74, 400, 180),
        _p(74, 3000, 180),
        _p(24, 1200, 180, prefix=864),
        _p(24, 3000, 180),
        _p(24, 400, 180),
        _p(128, 400, 180),
    ],
    "lora": [
        _p(74, 1200, 180, lora=True),
        _p(24, 1200, 180, lora=True),
        _p(128, 1200, 180, lora=True),
        _p(74, 1200, 180, prefix=864, lora=True),
    ],
    "poisson": [
        _poisson(600, 1200, 180),
        _poisson(900, 1200, 180),
        _poisson(1100, 1200, 180),
        _poisson(300, 1200, 180),
        _poisson(1000, 1200, 180, prefix=864),
        _poisson(1000, 1200, 180),
        _poisson(1400, 1200, 180, prefix=864),
        _poisson(800, 1200, 180),
    ],
    # LoRA's cost (issue 36): the same phases with and without --lora (``lora`` follows the flag),
    # windows long enough for a 3x slower engine (a 12 s end-to-end at 74 still fits 1.5 rounds).
    "lora-cost": [
        Phase("c74-p1200-o180", 74, 1200, 180, warmup_s=10.0, measure_s=30.0, stagger_s=5.0),
        Phase("c8-p1200-o180", 8, 1200, 180, warmup_s=4.0, measure_s=20.0, stagger_s=1.5),
        Phase("c32-p1200-o180", 32, 1200, 180, warmup_s=6.0, measure_s=24.0, stagger_s=2.5),
    ],
    # FP8 KV cache against the default dtype (issue 36): where the cache or max_num_seqs binds.
    "fp8kv": [_p(74, 1200, 180), _p(128, 1200, 180)],
    "smoke": [_p(8, 256, 32), _poisson(600, 256, 32)],
}
PROBE_LENGTHS = (256, 1024, 2048, 4000)


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (None for no values)."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, round(q / 100 * (len(s) - 1))))
    return round(s[k], 4)


def summarize(ph: Phase, records: list[tuple[float, float, float, int]]) -> dict[str, Any]:
    """Per-phase figures from (start, ttft, e2e, tokens) records (times from the phase start)."""
    lo, hi = ph.warmup_s, ph.seconds
    done = [r for r in records if lo <= r[0] + r[2] <= hi]
    longest = max((r[2] for r in records), default=0.0)
    steady = [r for r in records if r[0] >= lo and r[0] + longest <= hi]
    if len(steady) < 8:  # short window: fall back to every request started after the warm-up
        steady = [r for r in records if r[0] >= lo]
    ttft = [r[1] for r in steady]
    e2e = [r[2] for r in steady]
    decode = [(r[3] - 1) / (r[2] - r[1]) for r in steady if r[3] > 1 and r[2] > r[1]]
    tokens_in_window = sum(r[3] for r in done)
    # time-average requests in flight over the window (Little's law check of the open loop)
    busy = sum(max(0.0, min(hi, r[0] + r[2]) - max(lo, r[0])) for r in records)
    return {
        **asdict(ph),
        "completed_in_window": len(done),
        "latency_sample": len(steady),
        "requests_per_minute": round(60 * len(done) / ph.measure_s, 1),
        "output_tps": round(tokens_in_window / ph.measure_s, 1),
        "mean_in_flight": round(busy / ph.measure_s, 1),
        "ttft_s": {q: pct(ttft, float(q)) for q in ("50", "90", "95", "99")},
        "e2e_s": {q: pct(e2e, float(q)) for q in ("50", "90", "95", "99")},
        "decode_tps": {
            "p10": pct(decode, 10),
            "p50": pct(decode, 50),
            "p90": pct(decode, 90),
            "mean": round(statistics.fmean(decode), 2) if decode else None,
        },
        "tokens_per_request_min": min((r[3] for r in steady), default=None),
    }


@dataclass
class Bench:
    engine: Any
    sampling: Any
    rng: random.Random
    lora_requests: list[Any] = field(default_factory=list)
    counter: int = 0

    token_range: tuple[int, int] = (TOKEN_LOW, TOKEN_HIGH)

    def tokens(self, n: int) -> list[int]:
        return [self.rng.randrange(*self.token_range) for _ in range(n)]

    async def one(
        self, prompt: list[int], output: int, lora: Any = None
    ) -> tuple[float, float, float, int]:
        """One request: (start on the perf clock, ttft, e2e, output tokens)."""
        from vllm.inputs import TokensPrompt

        self.counter += 1
        params = self.sampling(output)
        start = time.perf_counter()
        first = None
        n = 0
        async for out in self.engine.generate(
            TokensPrompt(prompt_token_ids=prompt), params, f"r{self.counter}", lora_request=lora
        ):
            n += len(out.outputs[0].token_ids)
            if first is None and n:
                first = time.perf_counter()
        end = time.perf_counter()
        return start, (first or end) - start, end - start, n

    async def phase(self, ph: Phase) -> list[tuple[float, float, float, int]]:
        records: list[tuple[float, float, float, int]] = []
        prefix = self.tokens(ph.prefix)
        t0 = time.perf_counter()
        stop = t0 + ph.seconds

        async def client(i: int) -> None:
            await asyncio.sleep(ph.stagger_s * i / ph.concurrency)
            k = 0
            while time.perf_counter() < stop:
                lora = (
                    self.lora_requests[(i + k) % len(self.lora_requests)]
                    if ph.lora and self.lora_requests
                    else None
                )
                prompt = prefix + self.tokens(ph.prompt - ph.prefix)
                s, ttft, e2e, n = await self.one(prompt, ph.output, lora)
                records.append((round(s - t0, 4), round(ttft, 4), round(e2e, 4), n))
                k += 1

        async def arrivals() -> None:
            """Open loop: one request per Poisson arrival, whatever is in flight."""
            k = 0
            t = t0
            while True:
                t += self.rng.expovariate(ph.rate_per_min / 60)
                if t >= stop:
                    return
                await asyncio.sleep(max(0.0, t - time.perf_counter()))
                inflight.append(asyncio.create_task(request(k)))
                k += 1

        async def request(k: int) -> None:
            prompt = prefix + self.tokens(ph.prompt - ph.prefix)
            s, ttft, e2e, n = await self.one(prompt, ph.output)
            records.append((round(s - t0, 4), round(ttft, 4), round(e2e, 4), n))

        inflight: list[asyncio.Task[None]] = []
        if ph.rate_per_min:
            tasks = [asyncio.create_task(arrivals())]
        else:
            tasks = [asyncio.create_task(client(i)) for i in range(ph.concurrency)]
        await asyncio.sleep(max(0.0, stop - time.perf_counter()))
        tasks += inflight
        for t in tasks:
            t.cancel()  # in-flight requests are aborted (vLLM frees their KV blocks)
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(1.0)  # let aborts land before the next phase
        return records

    async def probes(self, lengths: list[int]) -> list[dict[str, Any]]:
        """Idle engine: TTFT of one request of N prompt tokens, cold and then cached."""
        out = []
        for n in lengths:
            cold, warm = [], []
            for _ in range(3):
                prompt = self.tokens(n)
                cold.append((await self.one(prompt, 2))[1])
                warm.append((await self.one(prompt + self.tokens(16), 2))[1])
            out.append(
                {
                    "prompt": n,
                    "ttft_cold_s": round(statistics.median(cold), 4),
                    "ttft_cached_s": round(statistics.median(warm), 4),
                    "prefill_tps_cold": round(n / statistics.median(cold)),
                }
            )
        return out


def write_lora(root: Path, names: list[str], rank: int = 16) -> list[Path]:
    """Random rank-``rank`` LoRA adapters on q,k,v,o,gate,up,down of the Llama-3-8B config."""
    import torch
    from safetensors.torch import save_file

    h, kv, inter, layers = 4096, 1024, 14336, 32
    shapes = {
        "self_attn.q_proj": (h, h),
        "self_attn.k_proj": (h, kv),
        "self_attn.v_proj": (h, kv),
        "self_attn.o_proj": (h, h),
        "mlp.gate_proj": (h, inter),
        "mlp.up_proj": (h, inter),
        "mlp.down_proj": (inter, h),
    }
    paths = []
    for j, name in enumerate(names):
        g = torch.Generator().manual_seed(j)
        tensors = {}
        for layer in range(layers):
            for mod, (fan_in, fan_out) in shapes.items():
                base = f"base_model.model.model.layers.{layer}.{mod}"
                tensors[f"{base}.lora_A.weight"] = (
                    torch.randn(rank, fan_in, generator=g, dtype=torch.float32) * 0.01
                ).to(torch.bfloat16)
                tensors[f"{base}.lora_B.weight"] = (
                    torch.randn(fan_out, rank, generator=g, dtype=torch.float32) * 0.01
                ).to(torch.bfloat16)
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        save_file(tensors, str(d / "adapter_model.safetensors"))
        (d / "adapter_config.json").write_text(
            json.dumps(
                {
                    "peft_type": "LORA",
                    "task_type": "CAUSAL_LM",
                    "r": rank,
                    "lora_alpha": 2 * rank,
                    "lora_dropout": 0.0,
                    "bias": "none",
                    "target_modules": [m.split(".")[1] for m in shapes],
                    "base_model_name_or_path": "dummy-llama-3-8b",
                }
            )
        )
        paths.append(d)
    return paths


def meta(args: argparse.Namespace, engine_seconds: float) -> dict[str, Any]:
    import torch
    import vllm

    gpu: dict[str, Any] = {"gpu": "none (CPU smoke run)"}
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu = {
            "gpu": torch.cuda.get_device_name(0),
            "gpu_memory_bytes": props.total_memory,
            "gpu_multiprocessors": props.multi_processor_count,
        }
    return {
        "engine": args.engine,
        "model": args.model,
        "architecture": "Llama-3-8B config, load_format=dummy (random weights, real compute)",
        "vllm": vllm.__version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        **gpu,
        "driver_api": "vllm.v1.engine.async_llm.AsyncLLM in-process (no HTTP), token-id prompts, "
        "streamed outputs (RequestOutputKind.DELTA), ignore_eos, temperature 1.0",
        "settings": {
            **ENGINE,
            **json.loads(args.engine_args),
            "load_format": "dummy",
            "lora": args.lora,
        },
        "env": {
            k: os.environ.get(k)
            for k in (
                "VLLM_USE_FLASHINFER_SAMPLER",
                "HF_HUB_OFFLINE",
                "VLLM_WORKER_MULTIPROC_METHOD",
            )
        },
        "engine_start_s": round(engine_seconds, 1),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


async def main_async(args: argparse.Namespace) -> int:
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    result: dict[str, Any] = {"meta": {}, "phases": [], "probes": [], "skipped": []}
    out = Path(args.out)

    def save() -> None:
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(out)

    lora_requests = []
    extra: dict[str, Any] = {}
    if args.lora:
        from vllm.lora.request import LoRARequest

        names = ["manga_domain", "general_support", "jp_style"]
        # Written in a child process: torch's CPU thread pool must not run in this process before
        # vLLM starts its engine core (with the fork start method that child can hang; the
        # LoRA run of 2026-11-24 hung in engine start after the adapters were written here).
        code = (
            "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
            "import speed_bench as b; b.write_lora(Path(sys.argv[2]), sys.argv[3:])"
        )
        here = str(Path(__file__).resolve().parent)
        subprocess.run([sys.executable, "-c", code, here, "/tmp/lora", *names], check=True)
        paths = [Path("/tmp/lora") / n for n in names]
        lora_requests = [
            LoRARequest(n, i + 1, str(p)) for i, (n, p) in enumerate(zip(names, paths, strict=True))
        ]
        extra = {"enable_lora": True, "max_loras": 4, "max_lora_rank": 16}
    t = time.perf_counter()
    engine = AsyncLLM.from_engine_args(
        AsyncEngineArgs(
            model=args.model,
            load_format="dummy",
            seed=0,
            **{**ENGINE, **json.loads(args.engine_args)},
            **extra,
        )
    )
    result["meta"] = meta(args, time.perf_counter() - t)
    result["meta"]["settings"].update(extra)
    cache = engine.vllm_config.cache_config
    blocks = cache.num_gpu_blocks or 0
    result["meta"]["kv_cache"] = {
        "dtype": str(cache.cache_dtype),
        "num_gpu_blocks": blocks,
        "block_size": cache.block_size,
        "tokens": blocks * cache.block_size,
    }
    print(f"KV cache (engine): {result['meta']['kv_cache']}", flush=True)
    print(f"engine ready in {result['meta']['engine_start_s']} s", flush=True)
    save()

    def sampling(output: int) -> Any:
        return SamplingParams(
            temperature=1.0, ignore_eos=True, max_tokens=output, output_kind=RequestOutputKind.DELTA
        )

    bench = Bench(engine, sampling, random.Random(args.seed), lora_requests)
    if args.max_token_id:  # a small test model (CPU smoke run)
        bench.token_range = (3, args.max_token_id)
    try:
        await bench.one(
            bench.tokens(min(args.probe_lengths)), 8
        )  # first request: lazy initialisation
        for lr in lora_requests:  # load every adapter before the phases (vLLM loads them lazily)
            await bench.one(bench.tokens(min(args.probe_lengths)), 8, lr)
        if args.probes:
            result["probes"] = await bench.probes(args.probe_lengths)
            save()
            for p in result["probes"]:
                print("probe", p, flush=True)
        for ph in PLANS[args.plan]:
            if args.lora:
                ph = replace(ph, lora=True)
            left = args.deadline - time.time()
            if ph.seconds + 3 > left:
                result["skipped"].append(ph.name)
                print(f"skip {ph.name}: {left:.0f} s left", flush=True)
                continue
            records = await bench.phase(ph)
            s = summarize(ph, records)
            s["records"] = records
            result["phases"].append(s)
            save()
            print(
                f"{args.engine:12} {ph.name:26} {s['requests_per_minute']:7.0f} req/min  "
                f"TTFT p50 {s['ttft_s']['50']} p95 {s['ttft_s']['95']}  "
                f"e2e p50 {s['e2e_s']['50']} p99 {s['e2e_s']['99']}  "
                f"decode p50 {s['decode_tps']['p50']} tok/s  n={s['latency_sample']}",
                flush=True,
            )
    finally:
        save()
        engine.shutdown()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", required=True, help="label: bf16, w4a16, w4a16-lora")
    ap.add_argument("--model", required=True, help="a directory mkmodel.py wrote")
    ap.add_argument("--plan", default="full", choices=sorted(PLANS))
    ap.add_argument("--lora", action="store_true", help="three rank-16 adapters, round robin")
    ap.add_argument("--probes", action="store_true", help="idle prefill probes first")
    ap.add_argument("--deadline", type=float, default=time.time() + 540, help="epoch seconds")
    ap.add_argument(
        "--probe-lengths",
        type=lambda v: [int(x) for x in v.split(",")],
        default=list(PROBE_LENGTHS),
        help="prompt lengths of the idle probes (comma-separated)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-token-id", type=int, default=0, help="small vocabularies (smoke runs)")
    ap.add_argument("--engine-args", default="{}", help="JSON overriding ENGINE (smoke runs)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
