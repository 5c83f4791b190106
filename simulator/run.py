"""Run a trace against every variant of a config and summarise what happened."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from simulator.assumptions import Assumptions
from simulator.capacity import InstanceModel, full_queue_wait_s, instance_model
from simulator.engine import VariantRun, VariantSimulation
from simulator.events import OperatorEvent, check_events
from simulator.traces import Trace
from sizing.fleet_cost import floor_cost, monthly
from typed_config import VARIANT_NAMES, DeploymentConfig, VariantName


@dataclass
class Result:
    label: str
    trace: Trace
    runs: dict[VariantName, VariantRun]
    summary: dict[str, object]

    def per_minute(self, key: str, how: Literal["sum", "min", "max"] = "sum") -> np.ndarray:
        """Series ``key`` summed over the variants, then reduced to one value per minute."""
        per_min = 60 // next(iter(self.runs.values())).tick_seconds
        total = np.sum([r.series[key] for r in self.runs.values()], axis=0).reshape(-1, per_min)
        return {"sum": total.sum, "min": total.min, "max": total.max}[how](axis=1)

    def variant_per_minute(
        self, key: str, variant: VariantName, how: Literal["sum", "min", "max"] = "sum"
    ) -> np.ndarray:
        """Series ``key`` of one variant, reduced to one value per minute."""
        run = self.runs[variant]
        per_min = run.series[key].reshape(-1, 60 // run.tick_seconds)
        if how == "min":
            return np.asarray(per_min.min(axis=1))
        return np.asarray(per_min.max(axis=1) if how == "max" else per_min.sum(axis=1))

    def sampled(self, key: str, variant: VariantName = "primary") -> np.ndarray:
        """Series ``key`` of one variant at the first tick of every minute."""
        run = self.runs[variant]
        return run.series[key][:: 60 // run.tick_seconds]


def instance_models(cfg: DeploymentConfig, a: Assumptions) -> dict[str, InstanceModel]:
    return {v: instance_model(cfg, cfg.variants[v].instance_type, a) for v in VARIANT_NAMES}


def _weighted_percentile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    mask = weights > 0
    if not mask.any():
        return 0.0
    v, w = values[mask], weights[mask]
    order = np.argsort(v)
    cum = np.cumsum(w[order])
    return float(v[order][np.searchsorted(cum, q / 100 * cum[-1])])


def simulate(
    cfg: DeploymentConfig,
    trace: Trace,
    a: Assumptions,
    label: str = "",
    events: Sequence[OperatorEvent] = (),
) -> Result:
    check_events(events, trace.start, trace.end)
    weights = {v: cfg.variants[v].initial_weight for v in VARIANT_NAMES}
    total_w = sum(weights.values())
    models = instance_models(cfg, a)
    runs = {
        v: VariantSimulation(cfg, v, models[v], a, trace, weights[v] / total_w, events).run()
        for v in VARIANT_NAMES
    }
    return Result(label or cfg.env, trace, runs, summarise(cfg, runs, trace, a))


def queue_wait_cap_s(runs: dict[VariantName, VariantRun]) -> float:
    """The wait in a full queue (:func:`simulator.capacity.full_queue_wait_s`), the most over
    the variants and the trace's request shapes (briefly more only while instances leave a
    full queue)."""
    return max(
        float(np.max(full_queue_wait_s(r.instance.admission_limit, r.series["conc"],
                                       r.series["service_s"])))
        for r in runs.values()
    )  # fmt: skip


def minute_rejected_share(
    runs: dict[VariantName, VariantRun], minutes: int, per_min: int
) -> np.ndarray:
    """Per minute: the share of the requests the minute had to place that got a 429, never above
    1. A minute rejects from its own arrivals and from the queue it inherited (a full queue
    whose instances leave, or whose running requests grow, drops what no longer fits:
    simulator.capacity.admit), so the rejected over the minute's arrivals alone read 113.76 % in
    the One Piece validation's peak minute. The denominator is the minute's arrivals plus the
    backlog waiting at its start: each tick rejects at most what it holds (backlog + arrivals),
    so the minute's sum cannot exceed it."""
    rej, arr, inherited = _rejected_offered(runs, minutes, per_min)
    offered = arr + inherited
    return np.minimum(1.0, np.divide(rej, offered, out=np.zeros_like(rej), where=offered > 0))


def _rejected_offered(
    runs: dict[VariantName, VariantRun], minutes: int, per_min: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per minute: requests rejected, arrivals, and the backlog inherited at its start."""
    rej = np.zeros(minutes)
    arr = np.zeros(minutes)
    inherited = np.zeros(minutes)
    for r in runs.values():
        rej += r.series["rejected"].reshape(minutes, per_min).sum(axis=1)
        arr += r.series["arrivals"].reshape(minutes, per_min).sum(axis=1)
        waiting = r.series["waiting"].reshape(minutes, per_min)
        inherited += np.concatenate([[0.0], waiting[:-1, -1]])
    return rej, arr, inherited


def window_rejected_pct(
    runs: dict[VariantName, VariantRun], minutes: int, per_min: int, s0: int, s1: int
) -> float:
    """Percent of the requests minutes [s0, s1) had to place that got a 429: their arrivals
    plus the backlog waiting at s0 (never above 100, as :func:`minute_rejected_share`)."""
    rej, arr, inherited = _rejected_offered(runs, minutes, per_min)
    total = float(arr[s0:s1].sum() + inherited[s0])
    return min(100.0, 100 * float(rej[s0:s1].sum()) / total) if total > 0 else 0.0


def summarise(
    cfg: DeploymentConfig, runs: dict[VariantName, VariantRun], trace: Trace, a: Assumptions
) -> dict[str, object]:
    dt = a.tick_seconds
    per_min = 60 // dt
    minutes = trace.minutes
    arrivals = np.sum([r.series["arrivals"] for r in runs.values()], axis=0)
    rejected = np.sum([r.series["rejected"] for r in runs.values()], axis=0)
    served = np.sum([r.series["served"] for r in runs.values()], axis=0)
    waits = np.concatenate([r.series["wait_s"] for r in runs.values()])
    ttfts = np.concatenate([r.series["ttft_s"] for r in runs.values()])
    e2es = np.concatenate([r.series["e2e_s"] for r in runs.values()])
    wts = np.concatenate([r.series["arrivals"] - r.series["rejected"] for r in runs.values()])
    queued = float(
        sum(
            (r.series["wait_s"] > 0) @ (r.series["arrivals"] - r.series["rejected"])
            for r in runs.values()
        )
    )
    # minute-level SLO: error share, or the worst 10-s queue wait of the minute
    worst_wait = np.max(
        [r.series["wait_s"].reshape(minutes, per_min).max(axis=1) for r in runs.values()], axis=0
    )
    err_share = minute_rejected_share(runs, minutes, per_min)
    over = (err_share > a.error_rate_slo(cfg)) | (worst_wait * 1000 > a.queue_wait_slo_ms(cfg))
    floors = floor_cost(cfg, trace.start, trace.end)
    variants, hours, cost = _variant_summaries(runs, dt)
    out: dict[str, object] = {
        "trace": trace.name,
        "start": trace.start.isoformat(),
        "minutes": minutes,
        "requests": round(float(arrivals.sum())),
        "served": round(float(served.sum())),
        "queued": round(queued),
        "rejected_429": round(float(rejected.sum())),
        "rejected_pct": round(100 * float(rejected.sum()) / max(1.0, float(arrivals.sum())), 3),
        "queue_wait_p50_ms": round(1000 * _weighted_percentile(waits, wts, 50), 1),
        "queue_wait_p95_ms": round(1000 * _weighted_percentile(waits, wts, 95), 1),
        "ttft_p50_ms": round(1000 * _weighted_percentile(ttfts, wts, 50), 1),
        "ttft_p95_ms": round(1000 * _weighted_percentile(ttfts, wts, 95), 1),
        "e2e_p50_ms": round(1000 * _weighted_percentile(e2es, wts, 50), 1),
        "e2e_p95_ms": round(1000 * _weighted_percentile(e2es, wts, 95), 1),
        "speed_source": {v: r.instance.speed_source for v, r in runs.items()},
        "minutes_over_slo": int(over.sum()),
        "queue_wait_cap_ms": round(1000 * queue_wait_cap_s(runs), 1),
        "instance_hours": round(hours, 2),
        "cost_usd": round(cost, 2),
        # one cost model with the plan (sizing.fleet_cost): the month, and the floors' share
        "cost_per_month_usd": round(monthly(cost, minutes)),
        "floor_cost_per_month_usd": round(floors.monthly_usd),
        "variants": variants,
    }
    if trace.spike_window:
        s0, s1 = trace.spike_window
        arr_m = arrivals.reshape(minutes, per_min).sum(axis=1)
        out["spike_window"] = {
            "minutes": [s0, s1],
            "requests": round(float(arr_m[s0:s1].sum())),
            "rejected_pct": round(window_rejected_pct(runs, minutes, per_min, s0, s1), 2),
        }
    rej_m = rejected.reshape(minutes, per_min).sum(axis=1)
    bad = np.flatnonzero(rej_m > 0)
    if bad.size:
        out["degraded"] = _degraded(runs, minutes, per_min, int(bad[0]), int(bad[-1]), err_share)
    return out


def _variant_summaries(
    runs: dict[VariantName, VariantRun], dt: int
) -> tuple[dict[str, object], float, float]:
    """Each variant's share, type, instance range, hours, cost, rejections and scaling
    activities; with the instance hours and cost of all variants."""
    variants: dict[str, object] = {}
    cost = hours = 0.0
    for v, r in runs.items():
        h = float(r.series["launched"].sum()) * dt / 3600
        c = h * r.instance.price_per_hour
        hours, cost = hours + h, cost + c
        variants[v] = {
            "traffic_share": round(r.share, 4),
            "instance_type": r.instance.instance_type,
            "instances_min": int(r.series["in_service"].min()),
            "instances_max": int(r.series["in_service"].max()),
            "instance_hours": round(h, 2),
            "cost_usd": round(c, 2),
            "rejected": round(float(r.series["rejected"].sum())),
            "scaling_activities": len(r.activities),
        }
    return variants, hours, cost


def _degraded(
    runs: dict[VariantName, VariantRun],
    minutes: int,
    per_min: int,
    first: int,
    last: int,
    err_share: np.ndarray,
) -> dict[str, object]:
    """The minutes from the first to the last with a rejection, and how much was rejected."""
    return {
        "first_minute": first,
        "last_minute": last,
        "rejected_pct_in_window": round(
            window_rejected_pct(runs, minutes, per_min, first, last + 1), 2
        ),
        "peak_minute_rejected_pct": round(100 * float(err_share.max()), 2),
    }
