"""Per-instance speed of vLLM, from measurements: TTFT, decode speed, end-to-end and throughput.

One engine step of vLLM (continuous batching, chunked prefill) costs

    t_step = overhead + per_seq x running
           + max(weights read, 2 x linear params x batched tokens / compute)   (linear layers)
           + KV-cache tokens read x bytes per token / bandwidth                 (decode attention)
           + 4 x layers x heads x head_dim x (query, key) pairs / compute      (prefill attention)

where "weights read" is the 16-bit part (lm_head, and every layer unless quantized) at
``bandwidth`` and the 4-bit packed layers at ``w4_bandwidth`` of the GPU's peak memory bandwidth,
and "compute" is ``compute`` of its peak dense fp16/bf16 tensor rate (``compute_w4`` for 4-bit
weights, whose GEMMs dequantize first). The efficiencies and the two overheads are fitted to the
H100 runs in ``docs/measurements/speed_h100_vllm0.26.json`` (``python -m sizing.speed_model
--fit``); another GPU gets the same shares of *its* peak figures (:data:`GPUS`): that is the whole
carry-over, and its limits are said in docs/speed-model.md.

:func:`simulate` runs vLLM's scheduler step by step on that cost: each step decodes one token
for every running sequence, continues partial prefills and admits waiting requests (FIFO) while
the step's token budget (``max_num_batched_tokens``), ``max_num_seqs`` and the KV cache allow.
A prompt's cached tokens (prefix cache) are not prefilled but are read by attention; tokens of a
prefix that every request shares (one system prompt) are read once per step, not once per
sequence (they stay in the GPU's L2 cache between sequences: a 400-token prefix is 1.6 MiB per
layer for Llama-3-8B). Arrivals are a closed loop (``concurrency`` clients, each sending its next
request when the last one ends) or a Poisson stream (``rate_per_minute``).

Pure Python, no GPU and no AWS: the simulator and the plan call it at synth.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from typed_config import ModelArchitecture

FP16_BYTES = 2
#: AWQ / GPTQ / compressed-tensors W4A16, group 128: 4 bits + a 16-bit scale and a 4-bit zero
#: point per 128 weights (sizing.capacity.AWQ_BITS_PER_WEIGHT).
W4_BITS_PER_WEIGHT = 4 + 16 / 128 + 4 / 128
FOUR_BIT = frozenset({"awq", "gptq", "w4a16"})


@dataclass(frozen=True)
class Gpu:
    name: str
    #: Peak memory bandwidth, GB/s (vendor data sheet).
    bandwidth_gbps: float
    #: Peak dense fp16/bf16 tensor-core rate, TFLOP/s (no sparsity; vendor data sheet).
    tflops_16: float
    source: str
    #: vLLM runs 4-bit weights through Marlin here (Ampere and Ada): "close to ideal (4x)
    #: speedups [over FP16] up to batchsizes of 16-32", measured on an A10 (IST-DASLab/marlin
    #: README), i.e. 4-bit weights read at the 16-bit share of bandwidth. On Hopper vLLM picks
    #: Machete, whose share the H100 runs measured (``Efficiency.w4_bandwidth``); Turing has
    #: neither, and gets Machete's share as a stand-in.
    marlin: bool = False
    #: Multiplier on the H100-fitted shares of peak bandwidth and compute (both) for this GPU,
    #: fitted to its published measurements (``python -m sizing.speed_evidence --fit``,
    #: docs/measurements/published_gpu_points.json); 1.0 where there are none (a pure carry).
    efficiency: float = 1.0


_NV = "NVIDIA data sheet"
#: The catalog's GPUs (typed_config/catalog.py names them). Dense tensor rates are half the data
#: sheets' "with sparsity" figures; the A10G's is the A10's (AWS publishes no tensor rate for it
#: and the A10G's memory system matches the A10's 600 GB/s): an estimate, see docs/speed-model.md.
GPUS: dict[str, Gpu] = {
    g.name: g
    for g in (
        Gpu("T4", 320.0, 65.0, f"{_NV} (T4: 65 TFLOPS fp16 mixed precision)"),
        Gpu(
            "A10G",
            600.0,
            125.0,
            f"{_NV} for the A10 (125 TFLOPS fp16 dense); estimate",
            True,
            efficiency=0.981,
        ),
        Gpu(
            "L4", 300.0, 121.0, f"{_NV} (L4: 242 TFLOPS fp16 with sparsity)", True, efficiency=0.852
        ),
        Gpu("L40S", 864.0, 362.0, f"{_NV} (L40S: 733 TFLOPS fp16 with sparsity)", True),
        Gpu("A100 40GB", 1555.0, 312.0, f"{_NV} (A100 SXM 40GB)", True, efficiency=0.947),
        Gpu("H100", 3350.0, 989.0, f"{_NV} (H100 SXM: 1,979 TFLOPS bf16 with sparsity)"),
    )
}
#: The GPU the constants below were fitted on.
MEASURED_GPU = "H100"


@dataclass(frozen=True)
class Efficiency:
    """Shares of a GPU's peak and fixed costs, fitted to the H100 runs (``--fit``)."""

    #: Share of peak bandwidth reading 16-bit weights and the KV cache.
    bandwidth: float = 0.8441
    #: Share of peak bandwidth reading 4-bit packed weights with Machete (Hopper; Marlin on
    #: Ampere and Ada reads them at ``bandwidth``, see :attr:`Gpu.marlin`).
    w4_bandwidth: float = 0.3564
    #: Share of the peak dense tensor rate in prefill (bf16 weights).
    compute: float = 0.6398
    #: The same with 4-bit weights (dequantize, then multiply).
    compute_w4: float = 0.6506
    #: Seconds per engine step: scheduling, sampling, launches, output processing.
    overhead_s: float = 0.0011
    #: Seconds per running sequence per step (sampler rows, per-request bookkeeping).
    per_seq_s: float = 0.00004605
    #: Seconds from a request's arrival to the scheduler seeing it (input processing, the hop to
    #: the engine process) plus from its first token to the client: on every TTFT.
    request_s: float = 0.01345
    #: Share of a shared prefix's KV reads that still go to memory for the 2nd..nth sequence
    #: (0: read once per step and served from L2 after; 1: read once per sequence).
    shared_kv_read: float = 0.2885
    #: LoRA's added time per step (sizing/lora_cost.py; 0 without adapters), in its own terms: the
    #: kernel part, in seconds on the reference GPU (:data:`LORA_REFERENCE_BANDWIDTH`), read like
    #: the bandwidth terms (a slower or mis-modelled GPU stretches it); the host part in seconds.
    #: Each per step and per running sequence. LoRA leaves every other term alone.
    lora_gpu_step_s: float = 0.0
    lora_gpu_seq_s: float = 0.0
    lora_host_step_s: float = 0.0
    lora_host_seq_s: float = 0.0


#: The fields ``python -m sizing.speed_calibration --fit`` searches (the base engine's; LoRA's are
#: sizing.lora_fit's).
BASE_FIELDS = (
    "bandwidth",
    "w4_bandwidth",
    "compute",
    "compute_w4",
    "overhead_s",
    "per_seq_s",
    "request_s",
    "shared_kv_read",
)
#: GPU terms: shares of a GPU's peaks (an error band on the GPU multiplies them).
GPU_FIELDS = ("bandwidth", "w4_bandwidth", "compute", "compute_w4")
#: Host terms: CPU work per step, per running sequence and per request (the host's own band
#: divides them; a GPU band leaves them alone).
HOST_FIELDS = ("overhead_s", "per_seq_s", "request_s", "lora_host_step_s", "lora_host_seq_s")


FITTED = Efficiency()
#: Effective bandwidth (bytes/s) at which LoRA's measured kernel time was spent: the H100's peak
#: at the fitted share. On another GPU the kernel time is x this / that GPU's effective bandwidth.
LORA_REFERENCE_BANDWIDTH = (
    GPUS[MEASURED_GPU].bandwidth_gbps * 1e9 * GPUS[MEASURED_GPU].efficiency * FITTED.bandwidth
)


@dataclass(frozen=True)
class StepCost:
    """Seconds of one engine step on one GPU for one model and weight format."""

    gpu: Gpu
    eff: Efficiency
    linear_params: int
    #: Bytes read every step whatever the batch: 16-bit part, 4-bit part.
    weights16_bytes: int
    weights4_bytes: int
    kv_bytes_per_token: int
    #: FLOPs of attention per (query, key) pair summed over layers: 4 x layers x heads x head_dim.
    attn_flops_per_pair: int
    four_bit: bool

    def seconds(self, running: int, kv_tokens: float, tokens: int, pairs: float) -> float:
        g, e = self.gpu, self.eff
        bw = g.bandwidth_gbps * 1e9 * g.efficiency
        peak = g.tflops_16 * 1e12 * g.efficiency
        flops = peak * (e.compute_w4 if self.four_bit else e.compute)
        read = self.weights16_bytes / (bw * e.bandwidth)
        if self.weights4_bytes:
            read += self.weights4_bytes / (bw * (e.bandwidth if g.marlin else e.w4_bandwidth))
        linear = max(read, 2 * self.linear_params * tokens / flops)
        kv = kv_tokens * self.kv_bytes_per_token / (bw * e.bandwidth)
        attn = self.attn_flops_per_pair * pairs / (peak * e.compute)
        lora = (e.lora_gpu_step_s + e.lora_gpu_seq_s * running) * LORA_REFERENCE_BANDWIDTH / (
            bw * e.bandwidth
        ) + (e.lora_host_step_s + e.lora_host_seq_s * running)
        return e.overhead_s + e.per_seq_s * running + linear + kv + attn + lora


def linear_params(arch: ModelArchitecture) -> int:
    """Parameters of the decoder's Linear layers (sizing.capacity.linear_params)."""
    h, d = arch.hidden_size, arch.head_dim
    attn = h * arch.num_attention_heads * d * 2 + h * arch.num_key_value_heads * d * 2
    return arch.num_hidden_layers * (attn + 3 * h * arch.intermediate_size)


def step_cost(
    arch: ModelArchitecture, quantization: str, gpu: str, eff: Efficiency = FITTED
) -> StepCost:
    """The step cost of ``arch`` with ``quantization`` ("none", "awq", ...) on ``gpu``."""
    if gpu not in GPUS:
        raise KeyError(f"no speed figures for GPU {gpu!r}; known: {', '.join(GPUS)}")
    lin = linear_params(arch)
    four = quantization in FOUR_BIT
    head = arch.vocab_size * arch.hidden_size * FP16_BYTES  # lm_head stays 16-bit
    return StepCost(
        gpu=GPUS[gpu],
        eff=eff,
        linear_params=lin,
        weights16_bytes=head + (0 if four else lin * FP16_BYTES),
        weights4_bytes=int(lin * W4_BITS_PER_WEIGHT / 8) if four else 0,
        kv_bytes_per_token=2
        * arch.num_hidden_layers
        * arch.num_key_value_heads
        * arch.head_dim
        * FP16_BYTES,
        attn_flops_per_pair=4 * arch.num_hidden_layers * arch.num_attention_heads * arch.head_dim,
        four_bit=four,
    )


@dataclass(frozen=True)
class Workload:
    """One request shape and how it arrives."""

    prompt: int
    output: int
    #: Prompt tokens found in the prefix cache (not prefilled, still read by attention).
    cached: int = 0
    #: Of those, tokens every request shares (read once per step): a common system prompt.
    shared: int = 0
    #: Closed loop: this many clients, each sending its next request when its last one ends.
    concurrency: int = 0
    #: Open loop: Poisson arrivals at this rate (used when concurrency is 0).
    rate_per_minute: float = 0.0

    def __post_init__(self) -> None:
        if self.prompt < 1 or self.output < 1:
            raise ValueError("prompt and output must be at least one token")
        if not 0 <= self.shared <= self.cached <= self.prompt:
            raise ValueError("need 0 <= shared <= cached <= prompt")
        if (self.concurrency > 0) == (self.rate_per_minute > 0):
            raise ValueError("give exactly one of concurrency and rate_per_minute")


@dataclass(frozen=True)
class EngineLimits:
    max_num_seqs: int = 128
    max_num_batched_tokens: int = 8192
    #: KV-cache tokens (sizing.capacity); None: unbounded.
    kv_capacity_tokens: int | None = None


@dataclass(frozen=True)
class Speed:
    """What one instance does with one workload (percentiles over the measured requests)."""

    requests_per_minute: float
    #: Requests in flight on average (running + waiting); the closed loop's concurrency.
    in_flight: float
    ttft_p50_s: float
    ttft_p90_s: float
    ttft_p99_s: float
    e2e_p50_s: float
    e2e_p90_s: float
    e2e_p99_s: float
    #: Per-sequence decode speed after the first token (median over requests), tokens/s.
    decode_tps: float
    #: Requests in the percentiles.
    sample: int
    #: Time to first token, 95th percentile (the plan's figure at the scaling target).
    ttft_p95_s: float = 0.0
    #: Time per output token after the first, 95th percentile over requests (each request's
    #: (end - first token) / (output - 1)): what ``monitoring.slo_tpot_p95_ms`` holds.
    tpot_p95_s: float = 0.0


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[max(0, min(len(s) - 1, round(q / 100 * (len(s) - 1))))]


def simulate(
    cost: StepCost,
    w: Workload,
    limits: EngineLimits = EngineLimits(),
    *,
    measure: int = 0,
    seed: int = 0,
    stagger: float | None = None,
) -> Speed:
    """vLLM's scheduler, step by step, on ``cost``: the figures of ``measure`` requests after a
    warm-up (the first ``2 x concurrency + 20``, or 60 arrivals of an open loop).

    A closed loop's clients start spread over one request's time, as in the benchmark: requests
    of one shape that vLLM admits in one step finish in one step and come back together, so a
    closed loop started in lock step stays in lock step (every prefill in one step). A short
    pilot run measures that time first (``stagger``: the spread of the starts instead, as a
    benchmark run used it).
    """
    if w.concurrency > 0 and stagger is not None:
        return _run(cost, w, limits, measure=measure, seed=seed, stagger=stagger)
    if w.concurrency > 0:
        pilot = _run(cost, w, limits, measure=max(60, w.concurrency), seed=seed, stagger=None)
        return _run(cost, w, limits, measure=measure, seed=seed, stagger=pilot.e2e_p50_s)
    return _run(cost, w, limits, measure=measure, seed=seed, stagger=None)


def _run(
    cost: StepCost,
    w: Workload,
    limits: EngineLimits,
    *,
    measure: int,
    seed: int,
    stagger: float | None,
) -> Speed:
    """One run of :func:`simulate`: step by step until every measured request has completed,
    each step's time from ``cost`` for its decodes and prefill chunks (:func:`_schedule`)."""
    closed = w.concurrency > 0
    warm = 2 * w.concurrency + 20 if closed else 60
    measure = measure or (max(240, 3 * w.concurrency) if closed else 400)
    total = warm + measure
    lag = cost.eff.request_s  # a request reaches the scheduler this long after it arrives
    kv_need = _kv_need(w)
    # arrivals: (time, index), popped from the end: earliest first
    arrivals = _first_arrivals(cost, w, total, lag, stagger, seed)
    issued = len(arrivals)
    arrivals.reverse()
    arrival_time: dict[int, float] = {}
    waiting: deque[int] = deque()
    prefilling: list[list[int]] = []  # [request, tokens left to prefill]
    done_prefill: dict[int, int] = {}  # request -> prompt tokens computed so far
    first_token: dict[int, float] = {}
    decoding: list[tuple[int, int]] = []  # heap of (last step, request)
    kv_base = 0  # sum over decoding requests of (prompt - k0): context at step k = base + k
    kv_reserved = w.shared if w.shared else 0
    now, step = 0.0, 0
    resort = False
    ttft: dict[int, float] = {}
    results: dict[int, tuple[float, float]] = {}  # request -> (e2e, decode tok/s)
    busy = 0.0  # integral of requests in flight
    in_system = 0
    window_start: float | None = None
    window_end: float | None = None
    in_window = 0.0
    completed = pending = 0  # completions; measured requests (index < total) not yet done
    while pending < total:
        while arrivals and arrivals[-1][0] <= now:
            at, r = arrivals.pop()
            arrival_time[r] = at - lag
            waiting.append(r)
            in_system += 1
        n_dec = len(decoding)
        if not n_dec and not prefilling and not waiting:
            if not arrivals:
                break
            now = arrivals[-1][0]
            continue
        step += 1
        chunks, running, kv_reserved = _schedule(
            w, limits, n_dec, waiting, prefilling, done_prefill, kv_reserved
        )
        dt = _step_seconds(cost, w, running, n_dec, kv_base + n_dec * step, chunks, done_prefill)
        busy += in_system * dt
        now += dt
        for entry, c in chunks:
            r = entry[0]
            entry[1] -= c
            done_prefill[r] += c
            if entry[1] == 0:
                first_token[r] = now
                ttft[r] = now - arrival_time[r]
                heapq.heappush(decoding, (step + w.output - 1, r))
                kv_base += w.prompt - step
        prefilling = [e for e in prefilling if e[1] > 0]
        while decoding and decoding[0][0] <= step:
            _, r = heapq.heappop(decoding)
            kv_base -= w.prompt - (step - w.output + 1)
            e2e = now - arrival_time[r]
            rate = (w.output - 1) / (now - first_token[r]) if now > first_token[r] else 0.0
            results[r] = (e2e, rate)
            kv_reserved -= kv_need
            in_system -= 1
            completed += 1
            pending += r < total
            if completed == warm:
                window_start, busy = now, 0.0
            if completed == total:
                window_end, in_window = now, busy
            if closed:
                arrivals.append((now + lag, issued))
                issued += 1
                resort = True
        if resort:
            arrivals.sort(reverse=True)
            resort = False
    if window_end is None:  # the stream ended first (an open loop far below capacity)
        window_end, in_window = now, busy
    span = window_end - (window_start or 0.0)
    return _speed(w, results, ttft, warm, total, span, in_window)


def _uncached(w: Workload) -> int:
    """The prompt tokens a request prefills: vLLM recomputes at least the last prompt token."""
    return max(1, w.prompt - w.cached)


def _kv_need(w: Workload) -> int:
    """The KV-cache tokens a request reserves beyond the shared prefix."""
    return w.prompt + w.output - w.shared


def _first_arrivals(
    cost: StepCost,
    w: Workload,
    total: int,
    lag: float,
    stagger: float | None,
    seed: int,
) -> list[tuple[float, int]]:
    """The requests that reach the scheduler without waiting for another, as (time, index) in
    time order: a closed loop's clients spread over ``stagger`` (None: the pilot run, which
    estimates one request's time from decode-only steps), or an open loop's Poisson arrivals
    with a tail that keeps the load on while the last measured requests finish."""
    arrivals: list[tuple[float, int]] = []
    if w.concurrency > 0:
        if stagger is None:  # the pilot: decode-only steps at full batch, one prefill
            uncached = _uncached(w)
            c = w.concurrency
            decode_step = cost.seconds(c, c * (w.prompt + w.output / 2), c, 0.0)
            stagger = w.output * decode_step + cost.seconds(1, 0.0, uncached, uncached**2 / 2)
        for i in range(min(w.concurrency, total)):
            arrivals.append((stagger * i / w.concurrency + lag, i))
    else:
        rng, t = random.Random(seed), 0.0
        for i in range(total + total // 4):  # a tail keeps the load on while the last finish
            t += rng.expovariate(w.rate_per_minute / 60)
            arrivals.append((t + lag, i))
    return arrivals


def _schedule(
    w: Workload,
    limits: EngineLimits,
    n_dec: int,
    waiting: deque[int],
    prefilling: list[list[int]],
    done_prefill: dict[int, int],
    kv_reserved: int,
) -> tuple[list[tuple[list[int], int]], int, int]:
    """One step's token budget as vLLM's scheduler spends it: one token per decoding sequence,
    the running prefills' next chunks, then requests admitted from ``waiting`` (into
    ``prefilling``) while the budget, a sequence slot and the KV cache have room. Returns the
    prefill chunks ([request, tokens left], tokens this step), the running sequences and the
    KV tokens reserved."""
    uncached, kv_need = _uncached(w), _kv_need(w)
    budget = limits.max_num_batched_tokens - n_dec
    chunks: list[tuple[list[int], int]] = []
    for entry in prefilling:
        if budget <= 0:
            break
        c = min(entry[1], budget)
        chunks.append((entry, c))
        budget -= c
    running = n_dec + len(prefilling)
    while (
        waiting
        and budget > 0
        and running < limits.max_num_seqs
        and (
            limits.kv_capacity_tokens is None or kv_reserved + kv_need <= limits.kv_capacity_tokens
        )
    ):
        r = waiting.popleft()
        entry = [r, uncached]
        prefilling.append(entry)
        done_prefill[r] = w.prompt - uncached
        kv_reserved += kv_need
        c = min(uncached, budget)
        chunks.append((entry, c))
        budget -= c
        running += 1
    return chunks, running, kv_reserved


def _step_seconds(
    cost: StepCost,
    w: Workload,
    running: int,
    n_dec: int,
    context: int,
    chunks: list[tuple[list[int], int]],
    done_prefill: dict[int, int],
) -> float:
    """One step's time: ``n_dec`` decodes over ``context`` KV tokens and the prefill chunks,
    each chunk attending to the prompt tokens computed before it and to itself."""
    tokens = n_dec + sum(c for _, c in chunks)
    pairs = 0.0
    for entry, c in chunks:
        s = done_prefill[entry[0]]
        pairs += c * s + c * (c + 1) / 2
    kv_tokens: float = context
    if w.shared and n_dec > 1:  # a shared prefix is read from HBM once per step, mostly
        kv_tokens -= (n_dec - 1) * w.shared * (1 - cost.eff.shared_kv_read)
    return cost.seconds(running, kv_tokens, tokens, pairs)


def _speed(
    w: Workload,
    results: dict[int, tuple[float, float]],
    ttft: dict[int, float],
    warm: int,
    total: int,
    span: float,
    in_window: float,
) -> Speed:
    """The figures of the measured requests (after the warm-up), over the window from the
    warm-up's last completion to the last measured one (``span`` seconds)."""
    measured = [r for r in results if warm <= r < total] or list(results)
    e2es = [results[r][0] for r in measured]
    first = [ttft[r] for r in measured]
    rates = [results[r][1] for r in measured if results[r][1] > 0]
    return Speed(
        requests_per_minute=60 * (total - warm) / span if span > 0 else 0.0,
        in_flight=in_window / span if span > 0 else float(w.concurrency),
        ttft_p50_s=_pct(first, 50),
        ttft_p90_s=_pct(first, 90),
        ttft_p99_s=_pct(first, 99),
        e2e_p50_s=_pct(e2es, 50),
        e2e_p90_s=_pct(e2es, 90),
        e2e_p99_s=_pct(e2es, 99),
        decode_tps=_pct(rates, 50) if rates else 0.0,
        sample=len(measured),
        ttft_p95_s=_pct(first, 95),
        # the slowest 5 % of streams: the 5th percentile of per-request decode speed
        tpot_p95_s=1 / _pct(rates, 5) if rates else math.inf,
    )


@lru_cache(maxsize=4096)
def closed_loop(
    arch: ModelArchitecture,
    quantization: str,
    gpu: str,
    *,
    concurrency: int,
    prompt: int,
    output: int,
    cached: int = 0,
    shared: int = 0,
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 8192,
    eff: Efficiency = FITTED,
) -> Speed:
    """:func:`simulate` with ``concurrency`` clients (cached: the simulator and the plan ask for
    the same shapes again and again)."""
    return simulate(
        step_cost(arch, quantization, gpu, eff),
        Workload(prompt, output, cached, shared, concurrency=concurrency),
        EngineLimits(max_num_seqs, max_num_batched_tokens),
    )


def source(gpu: str) -> str:
    """Where a GPU's speed comes from, in one line (printed beside every speed)."""
    how = (
        "measured"
        if gpu == MEASURED_GPU
        else f"carried from the {MEASURED_GPU} by bandwidth and compute"
    )
    return (
        f"sizing/speed_model.py fitted to docs/measurements/speed_h100_vllm0.26.json "
        f"(vLLM 0.26.0); {gpu}: {how}"
    )


#: Where the speed model stands against measurements, per GPU: the multipliers on its throughput at
#: the pessimistic and the optimistic edge (published or measured speed over the model's). The
#: H100's is its own fit (requests/minute and decode speed of the 49 figures without a shared
#: prefix, sizing.speed_calibration: 0.884-1.170; with a shared prefix the model is more optimistic
#: still, see docs/speed-model.md). Another GPU's is the spread of its published points after its
#: ``efficiency`` (sizing.speed_evidence), widened to +-15 % where three or more points agree and to
#: +-25 % where one or two stand alone (thin evidence); a GPU with no published point gets
#: :data:`DEFAULT_SPEED_BAND`. tests/infra/test_speed_model.py recomputes them from the points.
SPEED_BANDS: dict[str, tuple[float, float]] = {
    "H100": (0.88, 1.18),
    "A10G": (0.85, 1.15),
    "L4": (0.75, 1.25),
    "A100 40GB": (0.75, 1.25),
}
#: No published point (T4, L40S): the widest band above, and at least +-30 %.
DEFAULT_SPEED_BAND = (0.70, 1.30)
_BAND_SOURCES = {
    "H100": "the H100 fit itself: 49 measured figures (vLLM 0.26.0), docs/speed-model.md",
    "A10G": "4 published vLLM 0.4.3 points (bf16, 550 + 150 tokens, 1-64 in flight, g5.2xlarge) "
    "within -3..+2 % after efficiency 0.981, widened to +-15 %; W4A16 unmeasured",
    "L4": "1 published vLLM burst point (ShareGPT, Aug 2024), its harness calibrated on an H100 "
    "SGLang run; efficiency 0.852; thin evidence, +-25 %",
    "A100 40GB": "1 published vLLM 0.23 point (bf16, one request, ~75 tok/s); efficiency 0.947; "
    "thin evidence, +-25 %",
}


#: The host's band: (pessimistic, optimistic) multipliers on the host terms' speed (per-step,
#: per-sequence and per-request CPU work, LoRA's host part), apart from any GPU band. The H100 fit's
#: host-dominated figures (the idle TTFT of a cached prompt: ``request_s`` + one 16-token step) err
#: -24..+61 %, median 10 % (``python -m sizing.speed_calibration``); the serving instance's CPU is
#: not the bench host's and is unmeasured: +-25 %, the width the GPU bands give thin evidence.
HOST_BAND = (0.75, 1.25)
HOST_BAND_SOURCE = (
    "the H100 fit's host-dominated idle TTFTs err -24..+61 %, median 10 %; the instance's CPU "
    "unmeasured"
)


def speed_band(gpu: str) -> tuple[float, float]:
    """(pessimistic, optimistic) multipliers on the model's throughput for ``gpu``: the measured
    or published error of the speed model there (docs/speed-model.md), the default where no
    published point exists. The fleet solver plans on the first."""
    if gpu not in GPUS:
        raise KeyError(f"no speed figures for GPU {gpu!r}; known: {', '.join(GPUS)}")
    return SPEED_BANDS.get(gpu, DEFAULT_SPEED_BAND)


def speed_band_source(gpu: str) -> str:
    """Where ``gpu``'s :func:`speed_band` comes from, in one line."""
    low, high = speed_band(gpu)
    why = _BAND_SOURCES.get(
        gpu, "no published point found: the widest band of the GPUs with points, at least +-30 %"
    )
    return (
        f"{gpu} speed x{low:.2f}..x{high:.2f}: {why} (docs/measurements/published_gpu_points.json)"
    )


__all__ = [
    "DEFAULT_SPEED_BAND",
    "FITTED",
    "GPUS",
    "HOST_BAND",
    "SPEED_BANDS",
    "Efficiency",
    "EngineLimits",
    "Gpu",
    "Speed",
    "StepCost",
    "Workload",
    "closed_loop",
    "simulate",
    "source",
    "speed_band",
    "speed_band_source",
    "step_cost",
]


@lru_cache(maxsize=4096)
def open_loop_at(
    arch: ModelArchitecture,
    quantization: str,
    gpu: str,
    *,
    in_flight: int,
    prompt: int,
    output: int,
    cached: int = 0,
    shared: int = 0,
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 8192,
    eff: Efficiency = FITTED,
) -> Speed:
    """Poisson arrivals at the rate that keeps ``in_flight`` requests in flight on average (what
    concurrency target tracking holds an instance at): random arrivals give the tails a closed
    loop does not (bisection on the rate)."""
    cost = step_cost(arch, quantization, gpu, eff)
    limits = EngineLimits(max_num_seqs, max_num_batched_tokens)
    closed = closed_loop(
        arch,
        quantization,
        gpu,
        concurrency=in_flight,
        prompt=prompt,
        output=output,
        cached=cached,
        shared=shared,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        eff=eff,
    )
    lo, hi = 0.0, closed.requests_per_minute
    best: Speed | None = None
    for _ in range(9):
        rate = (lo + hi) / 2
        s = simulate(
            cost,
            Workload(prompt, output, cached, shared, rate_per_minute=rate),
            limits,
            measure=800,
        )
        if s.in_flight > in_flight:
            hi = rate
        else:
            lo, best = rate, s
    return best or simulate(
        cost,
        Workload(prompt, output, cached, shared, rate_per_minute=max(lo, 1.0)),
        limits,
        measure=800,
    )


def open_loop_rate(
    arch: ModelArchitecture,
    quantization: str,
    gpu: str,
    *,
    rate_per_minute: float,
    prompt: int,
    output: int,
    cached: int = 0,
    shared: int = 0,
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 8192,
    eff: Efficiency = FITTED,
) -> Speed:
    """Poisson arrivals at ``rate_per_minute`` (what an instance given that share of the traffic
    shows): :func:`open_loop_at`'s run at a rate rather than an in-flight count."""
    return simulate(
        step_cost(arch, quantization, gpu, eff),
        Workload(prompt, output, cached, shared, rate_per_minute=max(rate_per_minute, 1.0)),
        EngineLimits(max_num_seqs, max_num_batched_tokens),
        measure=800,
    )


@dataclass(frozen=True)
class SloBound:
    """The most requests in flight per instance at which one SLO holds (0: none)."""

    slo: str
    limit: float
    concurrency: int
    #: The figure at one request in flight (the best the instance can do) and at ``ceiling``.
    best: float
    at_ceiling: float


@lru_cache(maxsize=1024)
def slo_bounds(
    arch: ModelArchitecture,
    quantization: str,
    gpu: str,
    *,
    prompt: int,
    output: int,
    cached: int,
    shared: int,
    ceiling: int,
    ttft_p50_ms: float,
    latency_p99_ms: float,
    tpot_p95_ms: float = math.inf,
    ttft_p95_ms: float = math.inf,
    max_num_seqs: int = 128,
    max_num_batched_tokens: int = 8192,
    eff: Efficiency = FITTED,
) -> tuple[SloBound, ...]:
    """For each latency SLO, the largest in-flight count up to ``ceiling`` (the KV-cache bound)
    at which the speed model meets it under Poisson arrivals (binary search: the figures grow
    with the load)."""
    kw = {
        "prompt": prompt,
        "output": output,
        "cached": cached,
        "shared": shared,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
    }

    def figure_of(attr: str) -> Callable[[int], float]:
        """The SLO's figure (ms) at ``c`` in flight: ``attr`` of the open-loop speed."""
        return lambda c: (
            1000 * getattr(open_loop_at(arch, quantization, gpu, in_flight=c, eff=eff, **kw), attr)
        )

    out = []
    for name, limit, figure in (
        ("TTFT p50", ttft_p50_ms, figure_of("ttft_p50_s")),
        ("TTFT p95", ttft_p95_ms, figure_of("ttft_p95_s")),
        ("end-to-end p99", latency_p99_ms, figure_of("e2e_p99_s")),
        ("TPOT p95", tpot_p95_ms, figure_of("tpot_p95_s")),
    ):
        lo, hi = 0, ceiling  # figure(lo) meets (or lo == 0), find the largest that does
        if figure(1) <= limit:
            lo = 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if figure(mid) <= limit:
                    lo = mid
                else:
                    hi = mid - 1
        out.append(SloBound(name, limit, lo, figure(1), figure(ceiling)))
    return tuple(out)
