"""Prefix-aware routing: multi-turn sessions replayed under SageMaker's routing strategies, with
vLLM's prefix cache on every instance (``python -m simulator routing``; ``make simulate`` runs it).

The comparison is here: the rows compared (:func:`specs`), every row replayed on the same
sessions (:func:`compare`) and the speed figures printed with them. Its parts: SageMaker's
strategies (:mod:`simulator.routing.strategies`), vLLM's prefix cache on one instance
(:mod:`simulator.prefix_cache`), the windows of a trace replayed
(:mod:`simulator.routing.windows`), the fleet behind one router
(:mod:`simulator.routing.fleet`), the sessions (:mod:`simulator.sessions`) and the table
(:mod:`simulator.routing.report`).

The prefill cost per token is the step cost's marginal cost of one more prompt token
(:func:`prefill_cost`), printed with the figures. The capacity each strategy frees is the speed
model's closed loop (``speed_model.closed_loop``) at the KV-bound concurrency with the
strategy's mean prompt, answer and cached tokens (:func:`capacity_rpm`): the requests/minute one
instance serves.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from simulator.routing.fleet import Fleet, RouterResult, budget_of
from simulator.routing.strategies import (
    PREFIX_LENGTH_RANGE,
    RouterSpec,
    configured_routing,
    default_threshold,
)
from simulator.routing.windows import Window
from simulator.sessions import SessionModel, build_request, byte_offsets, new_session
from simulator.user_figures import at_target_lines
from sizing import speed_model
from sizing.capacity import estimate, sequences_that_fit
from typed_config import DeploymentConfig, VariantName
from typed_config.catalog import INSTANCE_CATALOG


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
    #: The plan's figures at the scaling target (simulator.user_figures.at_target_lines).
    at_target: list[str] = field(default_factory=list)

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
        at_target=at_target_lines(cfg, variant),
    )
