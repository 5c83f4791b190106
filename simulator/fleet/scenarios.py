"""The traffic scenarios the capacity gate replays (``fleet.scenarios``), each as per-minute,
per-variant figures the SLOs are checked on.

Every scenario runs the config's own fleet with the simulator's own code: the built-in traces
(simulator/traces.py) through :func:`simulator.run.simulate`, the deploy at the evening peak through
simulator/scenarios/deploy.py (``make deploy`` at 20:00 and at 17:30, and the same evening with no
deploy), and the canary ramp through simulator/rollout.py (the controller's own rules).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import numpy as np

from simulator import week
from simulator.assumptions import Assumptions
from simulator.rollout import simulate_rollout
from simulator.run import Result, simulate
from simulator.scenarios import deploy
from simulator.schedule import timeline
from simulator.traces import BUILTIN, JST, Trace, day_at, normal_day, spike_at
from typed_config import SCENARIO_NAMES, VARIANT_NAMES, DeploymentConfig, ScenarioName, VariantName


@dataclass
class VariantMinutes:
    """One variant's figures, one value per minute of one run."""

    variant: VariantName
    instance_type: str
    demand_rpm: np.ndarray
    rejected: np.ndarray
    #: The minute's p95 queue wait (the worst of its ticks, weighted by requests), ms.
    queue_wait_p95_ms: np.ndarray
    #: The minute's median time to first token (queue wait + the speed model at the concurrency
    #: each instance runs), ms; NaN where the run does not time requests (the canary ramp).
    ttft_p50_ms: np.ndarray
    #: Requests in flight per in-service instance (running + waiting).
    in_flight_per_instance: np.ndarray
    in_service: np.ndarray
    desired: np.ndarray
    max_cap: np.ndarray
    #: MinCapacity in force (the minute's highest; NaN where the run does not say).
    min_cap: np.ndarray
    #: Which scaling bound set the minimum at that minute: a schedule's name, a release's
    #: prescale, or "variant" (scaling.variants.<v>.min_capacity).
    floor_owner: list[str]
    #: Instances billed, summed over the minute's ticks / ticks per minute (instance-minutes).
    billed: np.ndarray
    price_per_hour: float


@dataclass
class ScenarioRun:
    scenario: ScenarioName
    #: One label per run of the scenario (the deploy scenario has three).
    label: str
    start: datetime
    variants: dict[VariantName, VariantMinutes]
    #: The share of the week's days this run stands for (simulator/week.py: days whose bounds
    #: are the same replay once); the normal day's cost is weighted by it.
    share_of_week: float = 1.0

    def when(self, minute: int) -> str:
        at = self.start + timedelta(minutes=minute)
        return f"{at.astimezone(JST):%a %H:%M} JST ({at:%H:%M} UTC)"


def _floor_owners(
    cfg: DeploymentConfig, variant: VariantName, start: datetime, minutes: int
) -> list[str]:
    """Which bound entry holds the minimum at each minute (a release's restore goes back to the
    recurring schedule in force before its prescale)."""
    (_lo, _hi, first), changes = timeline(
        cfg.scaling, variant, start, start + timedelta(minutes=minutes)
    )
    # before the first change: the entry in force at the start (a restore's recurring schedule is
    # not known from here, so it reads as the variant's own min)
    recurring = first if ":" not in first else "variant"
    owner = recurring if first.endswith(":restore") else first
    out, k = [], 0
    for m in range(minutes):
        at = start + timedelta(minutes=m, seconds=59)
        while k < len(changes) and changes[k].at <= at:
            name = changes[k].name
            if name.endswith(":restore"):
                owner = recurring
            else:
                owner = name
                if ":" not in name:
                    recurring = name
            k += 1
        out.append(owner)
    return out


def _from_result(cfg: DeploymentConfig, res: Result) -> dict[VariantName, VariantMinutes]:
    out: dict[VariantName, VariantMinutes] = {}
    minutes = res.trace.minutes
    for v, run in res.runs.items():
        s = run.series
        per = 60 // run.tick_seconds

        def m(
            key: str, how: str = "sum", s: dict[str, np.ndarray] = s, per: int = per
        ) -> np.ndarray:
            arr = s[key].reshape(minutes, per)
            if how == "max":
                return np.asarray(arr.max(axis=1))
            if how == "min":
                return np.asarray(arr.min(axis=1))
            if how == "mean":
                return np.asarray(arr.mean(axis=1))
            return np.asarray(arr.sum(axis=1))

        admitted = (s["arrivals"] - s["rejected"]).reshape(minutes, per)
        waits = s["wait_s"].reshape(minutes, per)
        ttfts = s["ttft_s"].reshape(minutes, per)
        n = s["in_service"].reshape(minutes, per)
        inflight = (s["running"] + s["waiting"]).reshape(minutes, per)
        per_inst = np.divide(inflight, n, out=np.full_like(inflight, np.inf), where=n > 0)
        out[v] = VariantMinutes(
            variant=v,
            instance_type=run.instance.instance_type,
            demand_rpm=m("arrivals"),
            rejected=m("rejected"),
            queue_wait_p95_ms=1000 * _row_pct(waits, admitted, 95),
            ttft_p50_ms=1000 * _row_pct(ttfts, admitted, 50),
            in_flight_per_instance=per_inst.max(axis=1),
            in_service=m("in_service", "min"),
            desired=m("desired", "max"),
            max_cap=m("max_cap", "min"),
            min_cap=m("min_cap", "max"),
            floor_owner=_floor_owners(cfg, v, res.trace.start, minutes),
            billed=m("launched", "mean"),
            price_per_hour=run.instance.price_per_hour,
        )
    return out


def _row_pct(values: np.ndarray, weights: np.ndarray, q: float) -> np.ndarray:
    """Per row: the weighted ``q``-th percentile of ``values`` (0 for a row with no weight)."""
    out = np.zeros(values.shape[0])
    for i in range(values.shape[0]):
        w = weights[i]
        if w.sum() <= 0:
            continue
        order = np.argsort(values[i])
        cum = np.cumsum(w[order])
        out[i] = values[i][order][min(len(order) - 1, np.searchsorted(cum, q / 100 * cum[-1]))]
    return out


def scaled(cfg: DeploymentConfig, trace: Trace) -> Trace:
    """``trace`` at this environment's share of the traffic (``fleet.traffic_share``)."""
    share = cfg.fleet.traffic_share
    return trace if share == 1.0 else replace(trace, rpm=trace.rpm * share)


#: Normal-day replays by (config, assumptions, day group): the gate's normal day and its spikes'
#: weakest hours read the same replay (the solver evaluates many configs: the oldest go first).
_DAY_CACHE: OrderedDict[tuple[str, Assumptions, datetime], ScenarioRun] = OrderedDict()
_DAY_CACHE_SIZE = 32


def normal_day_run(cfg: DeploymentConfig, g: week.DayGroup, a: Assumptions) -> ScenarioRun:
    """The ordinary day replayed on day group ``g`` (cached per config, assumptions and group;
    callers only read it)."""
    key = (cfg.model_dump_json(), a, g.start)
    hit = _DAY_CACHE.get(key)
    if hit is not None:
        _DAY_CACHE.move_to_end(key)
        return hit
    tr = scaled(cfg, day_at("normal-day", g.start, f"ordinary day, {g.label}"))
    res = simulate(cfg, tr, a)
    run = ScenarioRun(
        "normal-day", g.label, res.trace.start, _from_result(cfg, res), g.share_of_week
    )
    _DAY_CACHE[key] = run
    while len(_DAY_CACHE) > _DAY_CACHE_SIZE:
        _DAY_CACHE.popitem(last=False)
    return run


def in_service_by_minute(cfg: DeploymentConfig, run: ScenarioRun) -> np.ndarray:
    """Per minute of ``run``: the instances in service on every variant with weight (the fleet
    that meets traffic arriving then)."""
    minutes = len(next(iter(run.variants.values())).in_service)
    total = np.zeros(minutes)
    for v, vm in run.variants.items():
        if cfg.variants[v].initial_weight > 0:
            total += vm.in_service
    return total


def spike_hour(cfg: DeploymentConfig, g: week.DayGroup, a: Assumptions) -> int:
    """The weakest hour of day group ``g`` (simulator/week.py): fewest instances in service on
    the group's own normal-day replay."""
    return week.weakest_hour(in_service_by_minute(cfg, normal_day_run(cfg, g, a)))


def _normal_week(cfg: DeploymentConfig, a: Assumptions) -> list[ScenarioRun]:
    """The ordinary day on every day of the week whose bounds differ (simulator/week.py), each
    run labelled with the days it stands for."""
    return [normal_day_run(cfg, g, a) for g in week.day_groups(cfg)]


def _spike_week(
    name: ScenarioName, factor: float
) -> Callable[[DeploymentConfig, Assumptions], list[ScenarioRun]]:
    """The unannounced spike at the weakest hour of every day whose bounds differ
    (simulator/week.py), each run labelled with the day and hour."""

    def run(cfg: DeploymentConfig, a: Assumptions) -> list[ScenarioRun]:
        runs = []
        for g in week.day_groups(cfg):
            hour = spike_hour(cfg, g, a)
            at = g.start + timedelta(hours=hour)
            label = f"{g.label}: weakest hour {hour:02d}:00 JST"
            tr = scaled(cfg, spike_at(name, factor, at, BUILTIN[name].description))
            res = simulate(cfg, tr, a)
            runs.append(ScenarioRun(name, label, res.trace.start, _from_result(cfg, res)))
        return runs

    return run


def _trace(name: str) -> Callable[[DeploymentConfig, Assumptions], list[ScenarioRun]]:
    def run(cfg: DeploymentConfig, a: Assumptions) -> list[ScenarioRun]:
        res = simulate(cfg, scaled(cfg, BUILTIN[name]), a)
        return [ScenarioRun(name, name, res.trace.start, _from_result(cfg, res))]  # type: ignore[arg-type]

    return run


def _deploy_at_peak(cfg: DeploymentConfig, a: Assumptions) -> list[ScenarioRun]:
    """The evening without a deploy, and ``make deploy`` (counts retained, raised first) at each
    of the scenario's deploy times; today's ``cdk deploy`` with counts reset is the what-not-to-do
    the scenario's own report shows, not a run the fleet must carry."""
    runs = []
    factor = deploy.BUSY_FACTOR * cfg.fleet.traffic_share
    for i, case in enumerate(deploy.run(cfg, a, factor)):
        for key in ("no deploy", "after") if i == 0 else ("after",):
            res = case.results[key]
            label = "no deploy" if key == "no deploy" else f"make deploy {case.label}"
            runs.append(
                ScenarioRun("deploy-at-peak", label, res.trace.start, _from_result(cfg, res))
            )
    return runs


def _canary_rollout(cfg: DeploymentConfig, a: Assumptions) -> list[ScenarioRun]:
    """The ramp 5 -> 100 % on a normal day with the controller's own rules: the replay serves
    each minute up to capacity (no queue times), so it is held on rejections and on demand above
    capacity (a queue that would grow)."""
    # a canary raised only while a release runs: the controller's plan raises it at each step
    # (sizing.rollout_plan: rollout.canary_instances), which the replay follows
    rep = simulate_rollout(cfg, a, trace=scaled(cfg, normal_day()))
    rows = rep["rows"]
    tr = rep["trace"]
    out: dict[VariantName, VariantMinutes] = {}
    for v in VARIANT_NAMES:
        arr = np.array([r[f"{v}_arrivals"] for r in rows])
        cap = np.array([r[f"{v}_capacity"] for r in rows])
        n = np.array([r[f"{v}_in_service"] for r in rows], dtype=float)
        over = arr > cap + 1e-9
        itype = cfg.variants[v].instance_type
        out[v] = VariantMinutes(
            variant=v,
            instance_type=itype,
            demand_rpm=arr,
            rejected=np.array([r[f"{v}_rejected"] for r in rows]),
            # a minute whose demand exceeds capacity queues: held as an unbounded wait
            queue_wait_p95_ms=np.where(over, np.inf, 0.0),
            ttft_p50_ms=np.full(len(rows), np.nan),
            in_flight_per_instance=np.full(len(rows), np.nan),
            in_service=n,
            desired=np.array([r[f"{v}_launched"] for r in rows], dtype=float),
            max_cap=np.array([r[f"{v}_max"] for r in rows], dtype=float),
            min_cap=np.full(len(rows), np.nan),
            floor_owner=_floor_owners(cfg, v, tr.start, len(rows)),
            billed=np.array([r[f"{v}_launched"] for r in rows], dtype=float),
            price_per_hour=0.0,
        )
    return [ScenarioRun("canary-rollout", "canary ramp", tr.start, out)]


RUNNERS: dict[ScenarioName, Callable[[DeploymentConfig, Assumptions], list[ScenarioRun]]] = {
    "normal-day": _normal_week,
    "announced-release": _trace("announced-release"),
    "unannounced-3x": _spike_week("unannounced-3x", 3.0),
    "unannounced-4x": _spike_week("unannounced-4x", 4.0),
    "deploy-at-peak": _deploy_at_peak,
    "canary-rollout": _canary_rollout,
}
assert tuple(RUNNERS) == SCENARIO_NAMES, "typed_config.fleet.ScenarioName and RUNNERS disagree"


def run_scenario(cfg: DeploymentConfig, name: ScenarioName, a: Assumptions) -> list[ScenarioRun]:
    return RUNNERS[name](cfg, a)
