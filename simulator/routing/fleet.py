"""One variant's instances behind one router (:class:`Fleet`), replaying multi-turn sessions
in a discrete-event loop: the routing comparison's simulation (:mod:`simulator.routing.compare`).

Times come from the repository's speed model (sizing/speed_model.py, its :class:`StepCost` on the
variant's GPU) with the step-cost constants the capacity gate times requests by
(sizing.serving_speed.efficiency: the planning edge, LoRA included where the config serves
adapters), so the two simulations agree on how long a request runs: a request starts when the
instance has a free sequence slot and KV cache (``max_num_seqs``, the KV capacity); its first
token comes after half a decode step (the step in progress) plus the step that prefills its
uncached tokens beside the other running sequences' decode; every later token takes one decode
step at the instance's *current* batch (every running sequence advances one token per step, so a
request that arrives slows the others down: an instance's clock counts tokens per sequence and
each request ends when the clock reaches its last token), in which the other running
sequences' prefill is spread over their answers. (Until issue 42 a request's service time was
fixed when it started, so instances ran 5-8x emptier than the gate's at the same load.)
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.prefix_cache import PrefixCache
from simulator.routing.strategies import RouterSpec
from simulator.routing.windows import Window
from simulator.sessions import (
    Budget,
    Request,
    Segment,
    Session,
    SessionModel,
    build_request,
    new_session,
    prefix_key,
)
from sizing import speed_model
from sizing.capacity import estimate
from sizing.serving_speed import PLANNING_EDGE, Edge, efficiency
from typed_config import DeploymentConfig, VariantName
from typed_config.catalog import INSTANCE_CATALOG


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
    #: Tokens each running sequence has decoded since the start (the instance's clock), when it
    #: was last advanced, and the running requests by the clock reading at which they end.
    clock: float = 0.0
    clock_at: float = 0.0
    ends: list[tuple[float, int, Any]] = field(default_factory=list)
    #: Bumped at every change: an end event of an older version is stale.
    version: int = 0

    @property
    def outstanding(self) -> int:
        return self.running + len(self.waiting)


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
    #: The config's TTFT p50 SLO (monitoring.slo_ttft_p50_ms; the brief's < 200 ms).
    slo_ttft_p50_ms: float
    #: requests/minute per instance at the KV bound with this strategy's mean shape.
    capacity_rpm: float = 0.0

    @property
    def meets_slo(self) -> bool:
        return self.ttft_p50_ms < self.slo_ttft_p50_ms

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
        edge: Edge = PLANNING_EDGE,
    ) -> None:
        inst_type = cfg.variants[variant].instance_type
        cap = estimate(cfg, inst_type)
        eng = cfg.engine
        self.cfg, self.spec, self.sessions = cfg, spec, sessions
        gpu = INSTANCE_CATALOG[inst_type].gpu
        # the gate's speed: the same step-cost constants (edge, LoRA) the capacity gate uses
        self.cost = speed_model.step_cost(
            cfg.architecture, cfg.model.quantization, gpu, efficiency(cfg, gpu, edge)
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
    def _decode_step(self, inst: Instance, system: int) -> float:
        """Seconds of one decode step of ``inst`` at its current batch."""
        c, e = self.cost, self.cost.eff
        n = max(1, inst.running)
        kv = inst.ctx_tokens
        if n > 1:
            kv -= (n - 1) * system * (1 - e.shared_kv_read)
        others = (n - 1) * inst.avg_uncached / max(1.0, inst.avg_output)
        return c.seconds(n, kv, round(n + others), 0.0)

    def _times(self, inst: Instance, req: Request, cached: int) -> tuple[float, float]:
        """(time to first token excluding queueing, one decode step now) of ``req`` starting
        now (it is already counted in ``inst.running``)."""
        c, e = self.cost, self.cost.eff
        n = inst.running
        kv = inst.ctx_tokens
        if n > 1:
            kv -= (n - 1) * req.system_tokens * (1 - e.shared_kv_read)
        decode = self._decode_step(inst, req.system_tokens)
        uncached = req.prompt_tokens - cached
        pairs = uncached * (cached + uncached / 2)
        own = c.seconds(n, kv, n - 1 + uncached, pairs)
        return e.request_s + decode / 2 + own, decode

    def _advance(self, inst: Instance, now: float) -> None:
        """Move ``inst``'s clock to ``now`` at the step time of the batch since its last change."""
        if inst.running and now > inst.clock_at:
            inst.clock += (now - inst.clock_at) / self._decode_step(inst, self.budget.system_tokens)
        inst.clock_at = now

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
            self._advance(inst, now)  # the batch so far ran at its own step time
            cached = inst.cache.match(req.session.sid, req.prompt)
            inst.cache.take(req.session.sid)
            kv_need = req.prompt_tokens + req.output_tokens - req.system_tokens
            inst.running += 1
            inst.kv_reserved += kv_need
            ctx = req.prompt_tokens + req.output_tokens / 2
            inst.ctx_tokens += ctx
            inst.cache.make_room(self.kv_capacity - req.system_tokens - inst.kv_reserved)
            ttft, decode = self._times(inst, req, cached)
            uncached = req.prompt_tokens - cached
            inst.avg_uncached += 0.02 * (uncached - inst.avg_uncached)
            inst.avg_output += 0.02 * (req.output_tokens - inst.avg_output)
            if arrived >= measure_from:
                ttfts.append(now - arrived + ttft)
                prompt_sum += req.prompt_tokens
                cached_sum += cached
                output_sum += req.output_tokens
                per_inst_prefill[inst.index] += uncached
            # its first token is worth ttft / decode steps of the instance's clock now; then one
            # token per step, at whatever batch the instance runs
            done = inst.clock + ttft / decode + req.output_tokens - 1
            heapq.heappush(inst.ends, (done, seq, (req, kv_need, ctx)))
            seq += 1
            reschedule(inst, now)

        def reschedule(inst: Instance, now: float) -> None:
            """The wall time of ``inst``'s next end at its current step time (older ones stale)."""
            nonlocal seq
            inst.version += 1
            if inst.ends:
                step = self._decode_step(inst, self.budget.system_tokens)
                at = now + max(0.0, inst.ends[0][0] - inst.clock) * step
                heapq.heappush(events, (at, seq, 1, (inst, inst.version)))
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
                inst, version = payload
                if version != inst.version:
                    continue  # the instance changed since: a later event stands for it
                self._advance(inst, now)
                _, _, (req, kv_need, ctx) = heapq.heappop(inst.ends)
                inst.running -= 1
                inst.kv_reserved -= kv_need
                inst.ctx_tokens -= ctx
                answer = Segment(("answer", req.session.sid, req.turn), req.output_tokens + 5, 0)
                inst.cache.store(req.session.sid, req.prompt, answer)
                inst.cache.make_room(self.kv_capacity - req.system_tokens - inst.kv_reserved)
                while inst.waiting and fits(inst, inst.waiting[0][0]):
                    nxt, arrived = inst.waiting.popleft()
                    start(inst, nxt, arrived, now)
                reschedule(inst, now)
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
            slo_ttft_p50_ms=self.cfg.monitoring.slo_ttft_p50_ms,
        )
