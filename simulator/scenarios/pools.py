"""Scenario "pool-fallback": a scale-out that finds the first instance pool out of capacity.

The JP evening (``simulator.scenarios.deploy.jp_evening``) on the primary variant, with every
request for the primary's first pool answered by an insufficient capacity error (ICE) all evening
(x 0.7: busy enough that the primary scales from 4 towards its max of 8).
Replayed two ways:

- ``one type``: the primary on its first pool's type alone. SageMaker retries that type until
  the capacity request gives up, so the scale-out adds nothing and the evening is served by
  the instances already running.
- ``instance pools``: the primary's ``instance_pools`` (or, for a config without them, its
  type plus ``ml.g6.xlarge`` as a second pool: a what-if). On ICE SageMaker "automatically
  falls back to the next pool in priority order" (developer guide, "Deploy to multiple
  instance types with instance pools", Auto-scaling with instance pools); each fallback
  instance serves at its own pool's speed and concurrency (``simulator.capacity.instance_model``
  on the pool's GPU with the pool's engine settings).

A fleet of mixed instances is beyond ``simulator.engine`` (one instance model per variant), so
this module runs its own small loop with the engine's arithmetic: requests split evenly over
the in-service instances (random routing), each instance a fluid FIFO that completes
``C / S`` requests a second (``admit``), target tracking on the average requests in flight
over every instance against the variant's concurrency target (sizing.scaling_target, the
lowest bound over the pools), scale-out only (the evening rises), one capacity change at a time.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from simulator.assumptions import Assumptions
from simulator.capacity import InstanceModel, admit, instance_model
from simulator.scenarios.deploy import jp_evening
from simulator.traces import JST, Trace
from sizing.fit_checks import validate_config
from sizing.scale_out_time import ICE_SECONDS
from sizing.scaling_target import concurrency_target
from typed_config import DeploymentConfig

NAME = "pool-fallback"
#: When the first pool's capacity runs out (JST): from the start, so every scale-out meets it.
ICE_FROM = datetime(2026, 12, 1, 16, 0, tzinfo=JST)
#: The evening's factor: the ordinary evening x 0.7 peaks at what the primary's max_capacity
#: serves at its target, so what is lost is the fallback's doing, not the ceiling's.
FACTOR = 0.7
#: The what-if fallback for a config whose primary has no instance pools: same 24 GB class.
WHAT_IF_FALLBACK = "ml.g6.xlarge"


def pooled_config(cfg: DeploymentConfig) -> DeploymentConfig:
    """``cfg`` with instance pools on the primary: its own, or its type then the what-if."""
    if cfg.variants.primary.instance_pools:
        return cfg
    data = cfg.model_dump(exclude_unset=True)
    first = cfg.variants.primary.instance_type
    data["variants"]["primary"]["instance_pools"] = [
        {"instance_type": first, "priority": 1},
        {"instance_type": WHAT_IF_FALLBACK, "priority": 2},
    ]
    return validate_config(data)


def single_type_config(cfg: DeploymentConfig) -> DeploymentConfig:
    """``cfg`` with the primary on its first pool's type alone."""
    if not cfg.variants.primary.instance_pools:
        return cfg
    data = cfg.model_dump(exclude_unset=True)
    data["variants"]["primary"].pop("instance_pools")
    data["variants"]["primary"]["instance_type"] = cfg.variants.primary.instance_type
    return validate_config(data)


@dataclass
class Instance:
    model: InstanceModel
    ready_at: float
    backlog: float = 0.0
    #: Requests running or waiting on this instance at the last tick.
    in_flight: float = 0.0


@dataclass
class PoolRun:
    label: str
    per_minute: list[dict[str, object]] = field(default_factory=list)
    rejected: float = 0.0
    cost_usd: float = 0.0


def replay(
    cfg: DeploymentConfig, a: Assumptions, trace: Trace, label: str, ice_from: datetime = ICE_FROM
) -> PoolRun:
    """The primary's evening with the first pool out of capacity from ``ice_from``."""
    v = cfg.variants.primary
    models = {p.instance_type: instance_model(cfg.for_pool(p), p.instance_type, a) for p in v.pools}
    types = list(v.pool_types)
    sc = cfg.scaling.variants["primary"]
    target = concurrency_target(cfg, "primary")
    weights = cfg.variants.primary.initial_weight + cfg.variants.canary.initial_weight
    share = cfg.variants.primary.initial_weight / weights
    dt = float(a.tick_seconds)
    ready = a.scale_out_seconds(cfg, "primary")  # launch to serving (the engine's figure)
    fleet = [Instance(models[types[0]], 0.0) for _ in range(v.initial_instance_count)]
    pending: list[tuple[float, str]] = []  # (serves at, type): one capacity change at a time
    ice_at = (ice_from - trace.start).total_seconds()
    run = PoolRun(label)
    p_tok, o_tok = cfg.engine.typical_prompt_tokens, cfg.engine.typical_output_tokens
    for i in range(int(trace.minutes * 60 // dt)):
        t = i * dt
        fleet += [Instance(models[ty], at) for at, ty in pending if at <= t]
        pending = [(at, ty) for at, ty in pending if at > t]
        serving = [x for x in fleet if x.ready_at <= t]
        arrivals = float(trace.rpm[int(t // 60)]) * share * dt / 60
        in_flight = 0.0
        for x in serving:
            m = x.model
            conc, svc = m.typical.concurrency, m.typical.service_seconds
            served, rejected, x.backlog = admit(
                x.backlog, arrivals / len(serving), conc / svc * dt, m.admission_limit - conc
            )
            run.rejected += rejected
            x.in_flight = min(conc, served / dt * svc) + x.backlog
            in_flight += x.in_flight
        run.cost_usd += sum(x.model.price_per_hour for x in fleet) * dt / 3600
        # target tracking: average requests in flight per instance against the target
        if serving and not pending and t % 60 == 0:
            want = min(sc.max_capacity, math.ceil(in_flight / target))
            for _ in range(max(0, want - len(fleet))):
                landed = next(
                    (k for k, ty in enumerate(types) if not (ty == types[0] and t >= ice_at)),
                    None,
                )
                if landed is None:  # every pool out of capacity: the request fails
                    break
                search = landed * ICE_SECONDS  # one ICE per pool passed over
                pending.append((t + search + ready, types[landed]))
        if t % 60 == 0:
            by_type: dict[str, list[Instance]] = {}
            for x in serving:
                by_type.setdefault(x.model.instance_type, []).append(x)
            run.per_minute.append(
                {
                    "minute": int(t // 60),
                    "demand_rpm": round(float(trace.rpm[int(t // 60)]) * share),
                    "in_service": {ty: len(xs) for ty, xs in by_type.items()},
                    "in_flight_per_instance": {
                        ty: round(sum(x.in_flight for x in xs) / len(xs), 1)
                        for ty, xs in by_type.items()
                    },
                    "queue_wait_s": {
                        ty: round(
                            max(
                                x.backlog
                                / (x.model.typical.concurrency / x.model.typical.service_seconds)
                                for x in xs
                            ),
                            1,
                        )
                        for ty, xs in by_type.items()
                    },
                    "e2e_s_at_target": {
                        ty: round(
                            xs[0].model.latency(math.ceil(target), p_tok, o_tok).service_seconds,
                            2,
                        )
                        for ty, xs in by_type.items()
                    },
                }
            )
    return run


def run_cases(cfg: DeploymentConfig, a: Assumptions) -> tuple[Trace, dict[str, PoolRun]]:
    trace = jp_evening(FACTOR)
    pooled = pooled_config(cfg)
    return trace, {
        "one type": replay(single_type_config(pooled), a, trace, "one type"),
        "instance pools": replay(pooled, a, trace, "instance pools"),
    }


def summary(cfg: DeploymentConfig, runs: dict[str, PoolRun]) -> dict[str, object]:
    pooled = pooled_config(cfg)
    out: dict[str, object] = {
        "pools": list(pooled.variants.primary.pool_types),
        "what_if": not cfg.variants.primary.instance_pools,
        "first_pool_out_of_capacity_from": ICE_FROM.isoformat(),
        "assumed_ice_seconds_per_pool": ICE_SECONDS,
        "concurrency_target": concurrency_target(pooled, "primary"),
    }
    for label, r in runs.items():
        last = r.per_minute[-1]
        out[label] = {
            "rejected": round(r.rejected),
            "cost_usd": round(r.cost_usd, 2),
            "in_service_at_end": last["in_service"],
            "max_queue_wait_s": max(
                (w for m in r.per_minute for w in m["queue_wait_s"].values()),  # type: ignore[attr-defined]
                default=0.0,
            ),
            "e2e_s_at_target_by_type": last["e2e_s_at_target"],
        }
    return out


def table(s: dict[str, object], trace: Trace) -> str:
    lines = [
        f"== {NAME}: {trace.description}; the primary's first pool "
        f"({s['pools'][0]}) out of capacity all evening"  # type: ignore[index]
        + (" (what-if pools: the config has none)" if s["what_if"] else ""),
        f"pools {' -> '.join(s['pools'])}; target {s['concurrency_target']} in flight per "  # type: ignore[arg-type]
        f"instance (the lowest pool bound); {s['assumed_ice_seconds_per_pool']:g} s per "
        "pool passed over (assumed)",
    ]
    for label in ("one type", "instance pools"):
        r = s[label]
        assert isinstance(r, dict)
        lines.append(
            f"-- {label:15} rejected {r['rejected']:>8,}  max queue wait "
            f"{r['max_queue_wait_s']:>7,.1f} s  in service at 24:00 {r['in_service_at_end']}  "
            f"end-to-end at target {r['e2e_s_at_target_by_type']}  ${r['cost_usd']:,.0f}"
        )
    return "\n".join(lines)


def write(cfg: DeploymentConfig, a: Assumptions, out: Path, *, charts: bool = True) -> str:
    """Run, write ``pool-fallback.json`` (summary and the per-minute fleet), return the table."""
    trace, runs = run_cases(cfg, a)
    s = summary(cfg, runs)
    out.mkdir(parents=True, exist_ok=True)
    body = {**s, "per_minute": {k: r.per_minute for k, r in runs.items()}}
    (out / f"{NAME}.json").write_text(json.dumps(body, indent=2, default=str))
    return table(s, trace)
