"""Prefix-aware routing: multi-turn sessions replayed under SageMaker's routing strategies, with
vLLM's prefix cache on every instance (``python -m simulator routing``; ``make simulate`` runs it).

What SageMaker says the strategies do (API reference, ProductionVariantRoutingConfig and
PrefixAwareRoutingConfig, read November 2026):

- ``RANDOM``: "routes each request to a randomly chosen instance". SageMaker's default when a
  variant has no RoutingConfig ("By default, SageMaker endpoints have a random routing strategy",
  AWS Machine Learning Blog, "Minimize real-time inference latency by using Amazon SageMaker
  routing strategies", 2023).
- ``LEAST_OUTSTANDING_REQUESTS``: "routes requests to the specific instances that have more
  capacity to process them". Modelled as: the instance with the fewest requests in flight
  (running + waiting), ties broken at random.
- ``PREFIX_AWARE``: "routes requests that share the same prompt prefix to the same instance. When
  the number of in-flight requests on the selected instance reaches the configured threshold,
  the endpoint routes the request to an instance with more available capacity."
  ``PrefixLength`` (1024-65536): "For the SageMaker Runtime InvokeEndpoint and
  InvokeEndpointWithResponseStream APIs, this value specifies the number of bytes from the
  beginning of the request body"; "Set this value to cover shared content (such as system
  prompts) plus enough unique content to distribute workloads across instances."
  ``ConcurrencyThreshold`` (1-1024): "The maximum number of in-flight requests on the target
  instance before the endpoint routes to another instance."
  AWS does not publish how a prefix picks its instance. Assumed here: a hash of the body's first
  ``PrefixLength`` bytes (the whole body when shorter) picks one instance of the variant, so
  equal prefixes always meet there; at ``ConcurrencyThreshold`` in flight on it the request goes
  to the least-outstanding instance instead. A router that matched the longest common prefix
  against what each instance served (as SGLang's and Ray Serve's prefix-aware routers do) would
  keep follow-up turns together without any choice of PrefixLength; this model does not credit
  that.

vLLM's automatic prefix caching per instance: full blocks of ``engine.block_size`` tokens, the
longest cached prefix of the prompt is not recomputed (at least the last prompt token is). The
system prompt is cached on every instance (every request carries it). A finished request leaves
its conversation's blocks in the cache; they are evictable, least recently used first (vLLM
frees a request's blocks tail first), and running requests take their KV cache from the same
``sizing.capacity.estimate(...).kv_capacity_tokens``: a busy instance keeps little history.

Times come from the repository's speed model (sizing/speed_model.py, its :class:`StepCost` on the
variant's GPU): a request starts when the instance has a free sequence slot and KV cache
(``max_num_seqs``, the KV capacity); its first token comes after half a decode step (the step in
progress) plus the step that prefills its uncached tokens beside the other running sequences'
decode; every later token takes one decode step, in which the other running sequences' prefill
is spread over their answers. The prefill cost per token is the step cost's marginal cost of one
more prompt token (:func:`prefill_cost`), printed with the figures. The capacity each strategy
frees is the speed model's closed loop (``speed_model.closed_loop``) at the KV-bound concurrency
with the strategy's mean prompt, answer and cached tokens: the requests/minute one instance
serves.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import random
from collections import OrderedDict, deque
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, Literal

import numpy as np

from simulator.sessions import (
    Budget,
    Layout,
    Request,
    Segment,
    Session,
    SessionModel,
    build_request,
    byte_offsets,
    new_session,
    prefix_key,
)
from simulator.traces import JST, Trace
from sizing import speed_model
from sizing.capacity import estimate, sequences_that_fit
from sizing.scaling_target import concurrency_target
from typed_config import DeploymentConfig, VariantName
from typed_config.catalog import INSTANCE_CATALOG

Strategy = Literal["LEAST_OUTSTANDING_REQUESTS", "RANDOM", "PREFIX_AWARE"]
STRATEGIES: tuple[Strategy, ...] = ("RANDOM", "LEAST_OUTSTANDING_REQUESTS", "PREFIX_AWARE")
#: PrefixAwareRoutingConfig's valid ranges (API reference).
PREFIX_LENGTH_RANGE = (1024, 65536)
THRESHOLD_RANGE = (1, 1024)
#: The brief's SLO: P50 TTFT < 200 ms.
SLO_TTFT_P50_MS = 200.0


@dataclass(frozen=True)
class RouterSpec:
    """One routing configuration of a variant, and the key order of the clients' bodies."""

    strategy: Strategy
    prefix_length: int | None = None
    concurrency_threshold: int | None = None
    layout: Layout = "system-first"
    #: True: this is the variant's ``routing`` section of the config (highlighted in the table).
    configured: bool = False

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown routing strategy {self.strategy!r}")
        if self.strategy == "PREFIX_AWARE" and (
            self.prefix_length is None or self.concurrency_threshold is None
        ):
            raise ValueError("PREFIX_AWARE needs prefix_length and concurrency_threshold")

    @property
    def label(self) -> str:
        if self.strategy != "PREFIX_AWARE":
            return self.strategy
        return f"PREFIX_AWARE {self.prefix_length} B / {self.concurrency_threshold}, {self.layout}"


def configured_routing(cfg: DeploymentConfig, variant: VariantName) -> RouterSpec:
    """The variant's ``routing`` section (issue 21), or SageMaker's default (RANDOM) without one.

    Read with getattr: the section is added to typed_config by a separate change."""
    routing = getattr(cfg.variants[variant], "routing", None)
    if routing is None:
        return RouterSpec("RANDOM", configured=True)
    strategy = routing.strategy
    if strategy != "PREFIX_AWARE":
        return RouterSpec(strategy, configured=True)
    return RouterSpec(
        "PREFIX_AWARE",
        prefix_length=routing.prefix_length_bytes or PREFIX_LENGTH_RANGE[0],
        concurrency_threshold=routing.concurrency_threshold or default_threshold(cfg, variant),
        configured=True,
    )


def default_threshold(cfg: DeploymentConfig, variant: VariantName) -> int:
    """ConcurrencyThreshold when none is configured: the concurrency target tracking holds an
    instance at (``sizing.capacity.concurrency_target``): past it the instance is as full as
    autoscaling wants it."""
    return max(1, math.floor(concurrency_target(cfg, variant)))


# ------------------------------------------------------------------ speed


@dataclass(frozen=True)
class PrefillCost:
    """Marginal seconds of one more uncached prompt token in an engine step (compute-bound)."""

    seconds_per_token: float
    gpu: str
    source: str
    basis: str

    def describe(self) -> str:
        return (
            f"prefill cost {1000 * self.seconds_per_token:.3f} ms per uncached prompt token "
            f"({1 / self.seconds_per_token:,.0f} tokens/s) on the {self.gpu}: {self.basis}; "
            f"{self.source}"
        )


def prefill_cost(cost: speed_model.StepCost) -> PrefillCost:
    """2 FLOPs per linear parameter per token at the fitted share of the GPU's tensor rate (the
    speed model's linear term once a step is compute-bound); attention adds per (query, key)
    pair on top, counted per request."""
    g, e = cost.gpu, cost.eff
    share = (e.compute_w4 if cost.four_bit else e.compute) * g.efficiency
    flops = g.tflops_16 * 1e12 * share
    return PrefillCost(
        seconds_per_token=2 * cost.linear_params / flops,
        gpu=g.name,
        source=speed_model.source(g.name),
        basis=(
            f"2 x {cost.linear_params / 1e9:.2f} G linear parameters / ({g.tflops_16:g} TFLOPS "
            f"x {share:.3f} fitted share{'' if g.efficiency == 1 else ', with the GPU efficiency'})"
        ),
    )


# ------------------------------------------------------------------ the prefix cache


@dataclass
class _Entry:
    keys: tuple[tuple[object, ...], ...]
    #: Tokens up to the end of each key's segment (cumulative, system excluded).
    ends: tuple[int, ...]
    held: int


class PrefixCache:
    """vLLM's automatic prefix caching on one instance, per conversation: each session's last
    sequence (beyond the system prompt, which stays cached), evicted least recently used."""

    def __init__(self, capacity_tokens: int, block: int) -> None:
        self.capacity = capacity_tokens
        self.block = block
        self.entries: OrderedDict[int, _Entry] = OrderedDict()
        self.held = 0

    def match(self, sid: int, prompt: tuple[Segment, ...]) -> int:
        """Prompt tokens found in the cache (whole blocks, at least one token recomputed)."""
        system = prompt[0].tokens
        cached = system
        entry = self.entries.get(sid)
        if entry is not None:
            for i, seg in enumerate(prompt[1:]):
                if i >= len(entry.keys) or entry.keys[i] != seg.key:
                    break
                if entry.ends[i] > entry.held:
                    cached = system + entry.held
                    break
                cached = system + entry.ends[i]
        total = sum(s.tokens for s in prompt)
        return min(cached // self.block * self.block, (total - 1) // self.block * self.block)

    def take(self, sid: int) -> None:
        """The session's blocks are in use by a running request (not evictable, counted there)."""
        entry = self.entries.pop(sid, None)
        if entry is not None:
            self.held -= entry.held

    def store(self, sid: int, prompt: tuple[Segment, ...], answer: Segment) -> None:
        segs = (*prompt[1:], answer)
        ends, at = [], 0
        for s in segs:
            at += s.tokens
            ends.append(at)
        self.take(sid)
        self.entries[sid] = _Entry(tuple(s.key for s in segs), tuple(ends), at)
        self.held += at

    def make_room(self, free: int) -> None:
        """Evict least recently used history (tail first) until ``held`` <= ``free``."""
        while self.held > max(0, free) and self.entries:
            sid, entry = next(iter(self.entries.items()))
            cut = min(entry.held, self.held - max(0, free))
            entry.held -= cut
            self.held -= cut
            if entry.held <= 0:
                del self.entries[sid]


# ------------------------------------------------------------------ the simulation


@dataclass
class Instance:
    index: int
    cache: PrefixCache
    running: int = 0
    kv_reserved: int = 0
    ctx_tokens: float = 0.0
    waiting: deque[tuple[Request, float]] = field(default_factory=deque)
    #: Moving averages of uncached prompt tokens and answer tokens per request (other requests'
    #: prefill spread over their decode steps).
    avg_uncached: float = 300.0
    avg_output: float = 180.0
    requests: int = 0
    prefill_tokens: int = 0

    @property
    def outstanding(self) -> int:
        return self.running + len(self.waiting)


@dataclass(frozen=True)
class Window:
    """A stretch of a trace replayed with sessions: ``warmup`` minutes then ``minutes`` measured
    (only requests arriving in the measured minutes count)."""

    name: str
    start_minute: int
    minutes: int
    warmup: int
    instances: int
    rpm: tuple[float, ...]

    @property
    def mean_rpm(self) -> float:
        return float(np.mean(self.rpm[self.warmup :]))


@dataclass
class RouterResult:
    spec: RouterSpec
    requests: int
    rejected: int
    hit_rate: float
    prompt_tokens_mean: float
    cached_tokens_mean: float
    output_tokens_mean: float
    prefill_tps_per_instance: list[float]
    busiest_share: float
    spilled_share: float
    ttft_p50_ms: float
    ttft_p95_ms: float
    trimmed_share: float
    #: requests/minute per instance at the KV bound with this strategy's mean shape.
    capacity_rpm: float = 0.0

    @property
    def meets_slo(self) -> bool:
        return self.ttft_p50_ms < SLO_TTFT_P50_MS

    def as_dict(self) -> dict[str, Any]:
        return {
            "routing": self.spec.label,
            "strategy": self.spec.strategy,
            "prefix_length": self.spec.prefix_length,
            "concurrency_threshold": self.spec.concurrency_threshold,
            "body_layout": self.spec.layout,
            "configured": self.spec.configured,
            "requests": self.requests,
            "rejected_429": self.rejected,
            "prefix_cache_hit_rate": round(self.hit_rate, 4),
            "prompt_tokens_mean": round(self.prompt_tokens_mean, 1),
            "cached_tokens_mean": round(self.cached_tokens_mean, 1),
            "prefill_tokens_per_s_per_instance": [
                round(x, 1) for x in self.prefill_tps_per_instance
            ],
            "busiest_instance_share": round(self.busiest_share, 4),
            "spilled_share": round(self.spilled_share, 4),
            "ttft_p50_ms": round(self.ttft_p50_ms, 1),
            "ttft_p95_ms": round(self.ttft_p95_ms, 1),
            "meets_ttft_p50_slo": self.meets_slo,
            "trimmed_share": round(self.trimmed_share, 4),
            "capacity_rpm_per_instance": round(self.capacity_rpm),
        }


def budget_of(cfg: DeploymentConfig) -> Budget:
    """engine.context_budget, max_model_len and the body's adapter (the config's default)."""
    b, eng = cfg.engine.context_budget, cfg.engine
    return Budget(
        b.system_tokens,
        b.retrieval_tokens,
        b.generation_reserve_tokens,
        eng.max_model_len,
        adapter=cfg.default_adapter or "",
    )


def _bucket(key: tuple[object, ...], n: int) -> int:
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % n


class Fleet:
    """One variant's instances behind one router, replaying sessions (a discrete-event loop)."""

    def __init__(
        self,
        cfg: DeploymentConfig,
        variant: VariantName,
        spec: RouterSpec,
        instances: int,
        sessions: SessionModel,
        seed: int,
    ) -> None:
        inst_type = cfg.variants[variant].instance_type
        cap = estimate(cfg, inst_type)
        eng = cfg.engine
        self.cfg, self.spec, self.sessions = cfg, spec, sessions
        self.cost = speed_model.step_cost(
            cfg.architecture, cfg.model.quantization, INSTANCE_CATALOG[inst_type].gpu
        )
        self.kv_capacity = cap.kv_capacity_tokens
        self.max_num_seqs = eng.max_num_seqs
        self.admission = eng.admission_max_inflight
        self.block = eng.block_size
        self.budget = budget_of(cfg)
        self.fleet = [
            Instance(i, PrefixCache(self.kv_capacity, self.block)) for i in range(instances)
        ]
        self.route_rng = random.Random(seed * 7919 + 1)

    # -- routing
    def _least_outstanding(self, among: list[Instance]) -> Instance:
        low = min(i.outstanding for i in among)
        best = [i for i in among if i.outstanding == low]
        return best[0] if len(best) == 1 else self.route_rng.choice(best)

    def route(self, req: Request) -> tuple[Instance, bool]:
        """(instance, spilled): spilled when PREFIX_AWARE's instance was at the threshold."""
        s = self.spec
        if s.strategy == "RANDOM":
            return self.fleet[self.route_rng.randrange(len(self.fleet))], False
        if s.strategy == "LEAST_OUTSTANDING_REQUESTS":
            return self._least_outstanding(self.fleet), False
        assert s.prefix_length is not None and s.concurrency_threshold is not None
        target = self.fleet[_bucket(prefix_key(req.body, s.prefix_length), len(self.fleet))]
        if target.outstanding < s.concurrency_threshold:
            return target, False
        return self._least_outstanding(self.fleet), True

    # -- timing (sizing.speed_model's step cost)
    def _times(self, inst: Instance, req: Request, cached: int) -> tuple[float, float]:
        """(time to first token excluding queueing, service time) of ``req`` starting now."""
        c, e = self.cost, self.cost.eff
        n = inst.running
        system = req.system_tokens
        kv = inst.ctx_tokens
        if n > 1:
            kv -= (n - 1) * system * (1 - e.shared_kv_read)
        others = (n - 1) * inst.avg_uncached / max(1.0, inst.avg_output)
        decode = c.seconds(n, kv, round(n + others), 0.0)
        uncached = req.prompt_tokens - cached
        pairs = uncached * (cached + uncached / 2)
        own = c.seconds(n, kv, n - 1 + uncached, pairs)
        ttft = e.request_s + decode / 2 + own
        return ttft, ttft + (req.output_tokens - 1) * decode

    def run(self, window: Window, share: float, seed: int) -> RouterResult:
        rng = random.Random(seed)
        np_rng = np.random.default_rng(seed)
        typical_output = self.cfg.engine.typical_output_tokens
        end_s = 60.0 * (window.warmup + window.minutes)
        measure_from = 60.0 * window.warmup
        events: list[tuple[float, int, int, Any]] = []  # (time, seq, kind, payload)
        seq = 0
        sid = 0
        for m, rpm in enumerate(window.rpm):
            starts = np_rng.poisson(rpm * share / self.sessions.mean_turns)
            for t in sorted(np_rng.uniform(0, 60, starts)):
                s = new_session(sid, self.sessions, typical_output, rng)
                sid += 1
                events.append((60.0 * m + float(t), seq, 0, s))
                seq += 1
        heapq.heapify(events)
        ttfts: list[float] = []
        counted = rejected = spilled = trimmed = 0
        prompt_sum = cached_sum = output_sum = 0
        per_inst_requests = [0] * len(self.fleet)
        per_inst_prefill = [0] * len(self.fleet)

        def start(inst: Instance, req: Request, arrived: float, now: float) -> None:
            nonlocal seq, prompt_sum, cached_sum, output_sum
            cached = inst.cache.match(req.session.sid, req.prompt)
            inst.cache.take(req.session.sid)
            kv_need = req.prompt_tokens + req.output_tokens - req.system_tokens
            inst.running += 1
            inst.kv_reserved += kv_need
            ctx = req.prompt_tokens + req.output_tokens / 2
            inst.ctx_tokens += ctx
            inst.cache.make_room(self.kv_capacity - req.system_tokens - inst.kv_reserved)
            ttft, service = self._times(inst, req, cached)
            uncached = req.prompt_tokens - cached
            inst.avg_uncached += 0.02 * (uncached - inst.avg_uncached)
            inst.avg_output += 0.02 * (req.output_tokens - inst.avg_output)
            if arrived >= measure_from:
                ttfts.append(now - arrived + ttft)
                prompt_sum += req.prompt_tokens
                cached_sum += cached
                output_sum += req.output_tokens
                per_inst_prefill[inst.index] += uncached
            heapq.heappush(events, (now + service, seq, 1, (inst, req, kv_need, ctx)))
            seq += 1

        def fits(inst: Instance, req: Request) -> bool:
            need = req.prompt_tokens + req.output_tokens - req.system_tokens
            return (
                inst.running < self.max_num_seqs
                and inst.kv_reserved + need + req.system_tokens <= self.kv_capacity
            )

        while events:
            now, _, kind, payload = heapq.heappop(events)
            if kind == 0:  # a turn arrives
                session: Session = payload
                if now >= end_s:
                    continue
                req = build_request(session, self.budget, self.sessions, self.spec.layout)
                inst, spill = self.route(req)
                measured = now >= measure_from
                if measured:
                    counted += 1
                    per_inst_requests[inst.index] += 1
                    spilled += spill
                    trimmed += req.trimmed_turns > 0
                if inst.outstanding >= self.admission:
                    rejected += measured
                    continue
                if not inst.waiting and fits(inst, req):
                    start(inst, req, now, now)
                else:
                    inst.waiting.append((req, now))
            else:  # a request ends
                inst, req, kv_need, ctx = payload
                inst.running -= 1
                inst.kv_reserved -= kv_need
                inst.ctx_tokens -= ctx
                answer = Segment(("answer", req.session.sid, req.turn), req.output_tokens + 5, 0)
                inst.cache.store(req.session.sid, req.prompt, answer)
                inst.cache.make_room(self.kv_capacity - req.system_tokens - inst.kv_reserved)
                while inst.waiting and fits(inst, inst.waiting[0][0]):
                    nxt, arrived = inst.waiting.popleft()
                    start(inst, nxt, arrived, now)
                s = req.session
                s.turn += 1
                if s.turn < s.turns:
                    think = (
                        rng.expovariate(1 / self.sessions.think_seconds)
                        if (self.sessions.think_seconds > 0)
                        else 0.0
                    )
                    heapq.heappush(events, (now + think, seq, 0, s))
                    seq += 1
        span = 60.0 * window.minutes
        served = len(ttfts)
        ordered = sorted(ttfts) or [0.0]
        return RouterResult(
            spec=self.spec,
            requests=counted,
            rejected=rejected,
            hit_rate=cached_sum / prompt_sum if prompt_sum else 0.0,
            prompt_tokens_mean=prompt_sum / max(1, served),
            cached_tokens_mean=cached_sum / max(1, served),
            output_tokens_mean=output_sum / max(1, served),
            prefill_tps_per_instance=[p / span for p in per_inst_prefill],
            busiest_share=max(per_inst_requests) / max(1, counted),
            spilled_share=spilled / max(1, counted),
            ttft_p50_ms=1000 * ordered[len(ordered) // 2],
            ttft_p95_ms=1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
            trimmed_share=trimmed / max(1, counted),
        )


def capacity_rpm(cfg: DeploymentConfig, variant: VariantName, r: RouterResult) -> float:
    """Requests/minute one instance serves at the KV bound with this strategy's mean shape
    (sizing.speed_model's closed loop: what fewer prefill tokens free)."""
    inst_type = cfg.variants[variant].instance_type
    eng = cfg.engine
    prompt = max(1, round(r.prompt_tokens_mean))
    output = max(1, round(r.output_tokens_mean))
    cached = min(prompt - 1, round(r.cached_tokens_mean) // eng.block_size * eng.block_size)
    shared = min(cached, eng.context_budget.system_tokens)
    conc = max(
        1,
        sequences_that_fit(
            estimate(cfg, inst_type).kv_capacity_tokens, prompt + output, eng.max_num_seqs
        ),
    )
    s = speed_model.closed_loop(
        cfg.architecture,
        cfg.model.quantization,
        INSTANCE_CATALOG[inst_type].gpu,
        concurrency=conc,
        prompt=prompt,
        output=output,
        cached=max(0, cached),
        shared=max(0, shared),
        max_num_seqs=eng.max_num_seqs,
        max_num_batched_tokens=eng.max_num_batched_tokens,
    )
    return 60 * conc / s.e2e_p50_s


# ------------------------------------------------------------------ the comparison


def specs(cfg: DeploymentConfig, variant: VariantName) -> list[RouterSpec]:
    """The rows compared: RANDOM (SageMaker's default), LEAST_OUTSTANDING_REQUESTS, PREFIX_AWARE
    with a prefix of the minimum 1,024 bytes on the body as clients send it (system prompt
    first: the failure mode) and on a body that names the conversation first, and the config's
    own routing wherever it differs from those."""
    threshold = default_threshold(cfg, variant)
    rows = [
        RouterSpec("RANDOM"),
        RouterSpec("LEAST_OUTSTANDING_REQUESTS"),
        RouterSpec("PREFIX_AWARE", PREFIX_LENGTH_RANGE[0], threshold, "system-first"),
        RouterSpec("PREFIX_AWARE", PREFIX_LENGTH_RANGE[0], threshold, "session-first"),
    ]
    mine = configured_routing(cfg, variant)
    for i, r in enumerate(rows):
        if replace(r, configured=True) == mine:
            rows[i] = mine
            break
    else:
        rows.append(mine)
    return rows


def window_from_trace(
    trace: Trace,
    *,
    name: str,
    start_jst: str,
    minutes: int,
    warmup: int,
    instances: int,
) -> Window:
    """The measured minutes start at ``start_jst`` (HH:MM, Tokyo) on the trace's first day."""
    hh, mm = (int(x) for x in start_jst.split(":"))
    first = trace.start.astimezone(JST)
    at = first.replace(hour=hh, minute=mm)
    if at < first:
        at += timedelta(days=1)
    m = int((at - first).total_seconds() // 60)
    lo = m - warmup
    if lo < 0 or m + minutes > trace.minutes:
        raise ValueError(f"window {start_jst} JST +{minutes} min is outside trace {trace.name}")
    return Window(
        name, m, minutes, warmup, instances, tuple(float(x) for x in trace.rpm[lo : m + minutes])
    )


#: Windows of the comparison (JST, on the trace's first day): an afternoon the fleet carries and
#: the JP evening peak, where it is at max_capacity.
WINDOWS = ("15:00", "20:00")
#: Measured minutes and warm-up minutes before them (a session lasts ~2 minutes: 4.2 turns of
#: ~10 s service and 20 s think time), kept short so make simulate stays fast on 2 cores.
MINUTES, WARMUP = 8, 4


def windows(
    trace: Trace,
    in_service: np.ndarray | None,
    *,
    starts: tuple[str, ...] = WINDOWS,
    minutes: int = MINUTES,
    warmup: int = WARMUP,
    instances: int | None = None,
) -> list[Window]:
    """The windows at ``starts``, each with ``instances`` or what ``in_service`` (the scaling
    simulation's count, one value per minute) holds at its first measured minute."""
    out = []
    for start in starts:
        w = window_from_trace(
            trace, name=f"{trace.name} {start} JST", start_jst=start, minutes=minutes,
            warmup=warmup, instances=1,
        )  # fmt: skip
        if instances is None:
            if in_service is None:
                raise ValueError("give instances or the scaling simulation's in-service count")
            n = int(in_service[w.start_minute])
        else:
            n = instances
        out.append(replace(w, instances=max(1, n)))
    return out


@dataclass
class Comparison:
    window: Window
    variant: VariantName
    share: float
    results: list[RouterResult]
    prefill: PrefillCost
    sessions: SessionModel
    #: Byte offsets in a system-first body: where the system prompt ends, where the first user
    #: message ends (median).
    system_ends_at: int
    first_user_ends_at: int
    sampled_sessions_note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "window": self.window.name,
            "instances": self.window.instances,
            "variant": self.variant,
            "traffic_share": self.share,
            "mean_rpm": round(self.window.mean_rpm * self.share),
            "prefill_cost": self.prefill.describe(),
            "session_model": self.sessions.__dict__,
            "system_prompt_ends_at_byte": self.system_ends_at,
            "first_user_message_ends_at_byte": self.first_user_ends_at,
            "results": [r.as_dict() for r in self.results],
        }


def compare(
    cfg: DeploymentConfig,
    window: Window,
    *,
    variant: VariantName = "primary",
    sessions: SessionModel | None = None,
    rows: list[RouterSpec] | None = None,
    seed: int = 0,
) -> Comparison:
    """Every row on the same sessions (same seed), one fleet each."""
    sessions = sessions or SessionModel()
    weights = {v: cfg.variants[v].initial_weight for v in ("primary", "canary")}
    share = weights[variant] / sum(weights.values())
    results = []
    for spec in rows or specs(cfg, variant):
        fleet = Fleet(cfg, variant, spec, window.instances, sessions, seed)
        r = fleet.run(window, share, seed)
        r.capacity_rpm = capacity_rpm(cfg, variant, r)
        results.append(r)
    # where the system prompt and a first user message end in a system-first body
    probe = new_session(0, replace(sessions, user_tokens=(23, 23)), 180, random.Random(0))
    req = build_request(probe, budget_of(cfg), sessions, "system-first")
    ends = dict(byte_offsets(req.body))
    inst_type = cfg.variants[variant].instance_type
    cost = speed_model.step_cost(
        cfg.architecture, cfg.model.quantization, INSTANCE_CATALOG[inst_type].gpu
    )
    return Comparison(
        window=window,
        variant=variant,
        share=share,
        results=results,
        prefill=prefill_cost(cost),
        sessions=sessions,
        system_ends_at=ends[("system",)],
        first_user_ends_at=ends[("user", 0, 0)],
    )


def table(c: Comparison) -> str:
    """The routing comparison as ``make simulate`` prints it."""
    w = c.window
    base = next((r for r in c.results if r.spec.strategy == "RANDOM"), c.results[0])
    lines = [
        f"== routing, {w.name}: {w.instances} {c.variant} instances, "
        f"~{w.mean_rpm * c.share:,.0f} requests/minute ({c.share:.0%} of the trace), "
        f"{w.minutes} min measured after {w.warmup} min of warm-up",
        f"   sessions: geometric turns (mean {c.sessions.mean_turns:g}; "
        f"{c.sessions.share_over(8):.1%} over 8), think time {c.sessions.think_seconds:g} s, "
        f"retrieval {c.sessions.retrieval_tokens[0]}-{c.sessions.retrieval_tokens[1]} "
        "tokens a turn",
        f"{'routing':44}{'hit rate':>9}{'prefill tok/s/inst':>20}{'TTFT p50/p95 ms':>17}"
        f"{'SLO':>5}{'busiest':>9}{'spilled':>9}{'rpm/inst':>13}",
    ]
    for r in c.results:
        tps = r.prefill_tps_per_instance
        mark = "* " if r.spec.configured else "  "
        delta = r.capacity_rpm - base.capacity_rpm
        lines.append(
            f"{mark}{r.spec.label:42}{r.hit_rate:>9.1%}"
            f"{f'{np.mean(tps):,.0f} (max {max(tps):,.0f})':>20}"
            f"{f'{r.ttft_p50_ms:,.0f} / {r.ttft_p95_ms:,.0f}':>17}"
            f"{'ok' if r.meets_slo else 'MISS':>5}{r.busiest_share:>9.1%}"
            f"{r.spilled_share:>9.1%}{f'{r.capacity_rpm:,.0f} ({delta:+,.0f})':>13}"
        )
    lines += [
        f"   * the config's routing (variants.{c.variant}.routing; none: SageMaker's default, "
        f"RANDOM). SLO: TTFT p50 < {SLO_TTFT_P50_MS:g} ms. busiest: the busiest instance's "
        f"share of requests (fair: {1 / w.instances:.1%}). rpm/inst: requests/minute one "
        "instance serves at the KV bound with that mean shape (change vs RANDOM).",
        f"   body bytes: the system prompt ends at byte {c.system_ends_at:,} of a system-first "
        f"body, a first user message at ~{c.first_user_ends_at:,}: a PrefixLength up to "
        f"{c.system_ends_at:,} hashes every request alike.",
        f"   {c.prefill.describe()}",
    ]
    return "\n".join(lines)
