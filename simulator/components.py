"""The component shape replayed (issue 45; typed_config/components.py): instances under managed
instance scaling, base copies on them, per-copy target tracking, and scale from zero.

Every ``tick_seconds`` (the variant replay's rules, :mod:`simulator.engine`, where they carry):

1. **Copies towards desired.** One copy takes one GPU (:data:`typed_config.components.
   GPUS_PER_COPY`), so an instance holds ``copies_per_instance``. A new copy goes on a free GPU of
   an instance the endpoint has (it serves after the engine's measured start, the image already on
   the instance: :func:`sizing.engine_start.measured`); with none free, managed instance scaling
   provisions an instance, within ``instances.max``, "to accommodate an increase in traffic" (API
   reference, ProductionVariantManagedInstanceScaling,
   https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ProductionVariantManagedInstanceScaling.html),
   and the copy serves after the plan's new-instance figure (:func:`sizing.scale_out_time.
   time_to_serve`'s ``measured_cached_seconds``, as the plan's wake line). Scale-in removes the
   newest copies, and an instance left with no copy is released, down to ``instances.min``
   ("IDLE_RELEASE: Releases instances that have no hosted inference component copies", API
   reference, ProductionVariantManagedInstanceScalingScaleInPolicy,
   https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ProductionVariantManagedInstanceScalingScaleInPolicy.html);
   copies are kept packed (the fewest instances), the optimistic edge for the bill. With
   ``serialize_updates`` a further change waits while a copy is starting (the variant replay's
   rule: one capacity change at a time).
2. **Traffic.** Each serving copy is one engine of :mod:`simulator.capacity` (the instance model
   with one GPU), the pooled FIFO queue and the 429 beyond ``admission_max_inflight`` per copy
   (:func:`simulator.capacity.admit`). With no copy serving every request fails with
   InvokeEndpoint's ValidationError "Inference Component has no capacity to process this
   request" and counts in
   ``NoCapacityInvocationFailures`` (clients/bedrock_fallback.py cites both): a **cold** request,
   counted apart from the 429s. The client route (``ColdStart``) retries or falls back; the replay
   records how long each cold request would wait for the first copy.
3. **Per-copy target tracking** on ``ConcurrentRequestsPerCopy`` (the high-resolution metric:
   "these high-resolution metrics emit data every 10 seconds" and "when traffic to your model
   decreases, the policy scales in at the same speed as it does for standard metrics", developer
   guide, "Define a scaling policy",
   https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-add-code-define.html):
   :class:`simulator.scaling_policies.TargetTracking` itself, fed running + waiting per serving
   copy (the arithmetic of ConcurrentRequestsPerModel per instance, per copy), with 10 s
   scale-out datapoints and 1-minute scale-in ones. At zero traffic with ``copies.min`` 0 its
   formula ``ceil(n x 0 / target)`` is 0: the copies go to zero ("you can allow the scale-in
   process to reduce the number of in-service instances to zero", developer guide, "Scale an
   endpoint to zero instances",
   https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html).
4. **Scale from zero**: the stack's wake-up step policy (stacks/constructs/inference_components.py:
   ``NoCapacityInvocationFailures`` Sum over 60 s ``>= 1``, one datapoint, +1 copy, cooldown
   ``scale_out_cooldown_seconds``) as :class:`simulator.scaling_policies.StepScaling` replays any
   step policy: in ALARM it acts every period, so while requests keep failing it asks for one
   more copy each minute past its cooldown.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np

from container.serving import metrics_contract as mc
from simulator.assumptions import Assumptions
from simulator.capacity import InstanceModel, RequestShape, instance_model
from simulator.engine import decide, proposals, record_fleet, serve_tick
from simulator.metrics import FleetMetrics, Series
from simulator.scaling_policies import SimulationError, StepScaling, TargetTracking
from simulator.traces import JST, Trace, normal_day
from sizing.component_plan import (
    DEV_BUSY_HOURS_PER_DAY,
    DEV_BUSY_START_HOUR,
    DEV_BUSY_WEEKDAYS,
    WAKE_ALARM_SECONDS,
)
from sizing.engine_start import measured
from sizing.fleet_cost import PLAN_WINDOW, REFERENCE_START, monthly
from sizing.scale_out_time import time_to_serve
from typed_config import DeploymentConfig
from typed_config.components import InferenceComponentsConfig
from typed_config.scaling import StepAdjustment, StepPolicy

assert WAKE_ALARM_SECONDS == 60, "the wake policy's period below is the wake alarm's"

#: The metric SageMaker emits for a request that finds no copy: the stack's wake alarm reads it
#: (stacks/constructs/inference_components.py NO_CAPACITY_METRIC; tests round-trip the two).
NO_CAPACITY_METRIC = "NoCapacityInvocationFailures"
#: Scale-out datapoints of the per-copy metric, seconds (the high-resolution period).
COPY_DATAPOINT_SECONDS = 10


def section(cfg: DeploymentConfig) -> InferenceComponentsConfig:
    """The config's ``inference_components:``; an error naming the fix when it has none."""
    if cfg.inference_components is None:
        raise SimulationError(
            f"{cfg.env}: no inference_components section: the component replay needs the "
            "component shape (config/examples/dev-components.yaml shows one); the variant shape "
            "replays with `python -m simulator run`"
        )
    return cfg.inference_components


@dataclass(frozen=True)
class StartTimes:
    """Decision to serving of a copy, seconds, and where each figure comes from."""

    on_free_gpu: float
    on_new_instance: float
    source: str


def start_times(cfg: DeploymentConfig, a: Assumptions) -> StartTimes:
    ic = section(cfg)
    if a.provision_seconds is not None:  # a what-if: the same override as the variant replay
        return StartTimes(
            a.startup_seconds,
            a.provision_seconds + a.startup_seconds,
            "--provision-seconds + --startup-seconds",
        )
    t = time_to_serve(cfg, "primary", ic.instance_type)
    engine = measured().warm_seconds
    return StartTimes(
        engine,
        float(t.measured_cached_seconds),
        f"a copy on a free GPU {engine:g} s (the engine's measured start, sizing/engine_start.py)"
        f"; on a new instance {t.measured_cached_seconds:g} s (the plan's figure: AWS's P50 "
        "with the image cached less its assumed engine start plus the measured one)",
    )


@dataclass
class ComponentMetrics(FleetMetrics):
    """The fleet's metrics with copies as the serving unit, plus ``NoCapacityInvocationFailures``
    (a count per minute, published with no copy serving: that is when it counts)."""

    cold: list[float] = field(default_factory=list)

    def value(self, name: str, i: int) -> float | None:
        if name == NO_CAPACITY_METRIC:
            return self.cold[i] * 60 / self.tick_seconds
        return super().value(name, i)

    def sample_seconds(self, name: str) -> float:
        return 60.0 if name == NO_CAPACITY_METRIC else super().sample_seconds(name)


def wake_policy(ic: InferenceComponentsConfig) -> StepPolicy:
    """The stack's wake-up step policy and its alarm, as a step policy the replay evaluates
    (``model_construct``: the metric is SageMaker's, not one of a variant's scalable metrics)."""
    return StepPolicy.model_construct(
        name="wake-from-zero",
        direction="out",
        metric=NO_CAPACITY_METRIC,
        statistic="Sum",
        comparison=">=",
        threshold=1.0,
        period_seconds=60,  # WAKE_ALARM_SECONDS, the stack's alarm period
        evaluation_periods=1,
        datapoints_to_alarm=1,
        cooldown_seconds=ic.base.scale_out_cooldown_seconds,
        also_require=None,
        steps=[StepAdjustment(lower=0, upper=None, change=1)],
    )


@dataclass
class ComponentRun:
    """One replay: per-tick arrays, the scaling activities and the cold requests' waits."""

    trace: Trace
    tick_seconds: int
    copy: InstanceModel
    price_per_hour: float
    copies_per_instance: int
    series: dict[str, np.ndarray]
    #: (seconds from start, what moved: "copies" or "instances", from, to, why)
    activities: list[tuple[float, str, int, int, str]]
    times: StartTimes


class ComponentSimulation:
    def __init__(self, cfg: DeploymentConfig, a: Assumptions, trace: Trace) -> None:
        self.cfg, self.a, self.trace = cfg, a, trace
        self.ic = section(cfg)
        self.dt = a.tick_seconds
        out_s = a.tt_out_datapoint_seconds or COPY_DATAPOINT_SECONDS
        if out_s % self.dt or 60 % self.dt:
            raise SimulationError(
                f"per-copy datapoints ({out_s} s, 60 s) are not multiples of the tick ({self.dt} s)"
            )
        self.copy = instance_model(cfg, self.ic.instance_type, a)
        self.times = start_times(cfg, a)
        self.s = Series()
        self.metrics = ComponentMetrics(
            self.s, self.copy, self.dt, float(cfg.engine.metrics_interval_seconds)
        )
        base = self.ic.base
        self.tt = TargetTracking(
            target=base.target_requests_per_copy,
            metric=mc.CONCURRENT_REQUESTS_PER_MODEL,
            out_ticks=out_s // self.dt,
            scale_in=True,
            scale_in_cooldown_seconds=base.scale_in_cooldown_seconds,
            a=a,
        )
        self.wake = (
            StepScaling(wake_policy(self.ic), int(WAKE_ALARM_SECONDS) // self.dt, deque(maxlen=1))
            if self.ic.scales_to_zero
            else None
        )

    def _initial(self) -> int:
        copies = self.ic.base.copies
        if not self.a.warm_start:
            return copies.initial
        rpm0 = float(self.trace.rpm[0])
        want = math.ceil(rpm0 / 60 * self.copy.service_seconds / self.tt.target)
        return min(max(want, copies.min), copies.max)

    def _place(
        self,
        t: float,
        desired: int,
        copies: list[float],
        instances: list[float],
        acts: list[tuple[float, str, int, int, str]],
    ) -> None:
        """The copies towards ``desired``, packed (copy j on instance j // per): a new copy on
        a free GPU, or on a new instance while the instance bounds allow one (else it stays
        pending); removed copies release the instances left idle, down to the minimum."""
        ic, per = self.ic, self.ic.copies_per_instance
        if desired > len(copies):
            had = len(instances)
            while len(copies) < desired:
                k = len(copies) // per  # packed: copy j on instance j // per
                if k >= len(instances):
                    if len(instances) >= ic.instances.max:
                        break  # no instance left to place it on: it stays pending
                    instances.append(t + self.times.on_new_instance)
                copies.append(max(t + self.times.on_free_gpu, instances[k]))
            if len(instances) != had:
                acts.append((t, "instances", had, len(instances), "placement"))
        elif desired < len(copies):
            copies.sort()
            del copies[desired:]
            keep = max(ic.instances.min, -(-len(copies) // per))
            if keep < len(instances):
                instances.sort()
                acts.append((t, "instances", len(instances), keep, "idle release"))
                del instances[keep:]

    def run(self) -> ComponentRun:
        """The trace tick by tick: the copies placed (:meth:`_place`), the tick's traffic
        served, the scaling policies' move at the tick's end."""
        ic, dt, tr, inst, a = self.ic, self.dt, self.trace, self.copy, self.a
        per = ic.copies_per_instance
        lo, hi = ic.base.copies.min, ic.base.copies.max
        desired = self._initial()
        copies: list[float] = [0.0] * desired  # each copy's serving time (s from start)
        n_inst = max(ic.instances.min, -(-desired // per))
        instances: list[float] = [0.0] * n_inst
        acts: list[tuple[float, str, int, int, str]] = []
        backlog = 0.0
        s, cold = self.s, self.metrics.cold
        rec: dict[str, list[float]] = {
            k: [] for k in ("copies_desired", "copies_placed", "instances", "instances_serving")
        }
        shapes: dict[int, RequestShape] = {}

        def latency(per_copy: int) -> RequestShape:
            if per_copy not in shapes:
                shapes[per_copy] = inst.latency(per_copy, inst.prompt_tokens, inst.output_tokens)
            return shapes[per_copy]

        for i in range(tr.minutes * 60 // dt):
            t = i * dt
            starting = any(r > t for r in copies)
            if not (a.serialize_updates and starting):
                self._place(t, desired, copies, instances, acts)
            n = sum(1 for r in copies if r <= t)
            record_fleet(s, n=n, launched=len(instances), desired=desired, lo=lo, hi=hi)
            backlog, failed = serve_tick(
                s,
                inst,
                dt,
                n=n,
                backlog=backlog,
                arrivals=float(tr.rpm[t // 60]) * dt / 60,
                shape=inst.typical,
                kv_seq=inst.prompt_tokens + inst.output_tokens / 2,
                latency=latency,
                unserved_fail_apart=True,  # no copy: a no-capacity failure, not a 429
            )
            cold.append(failed)
            rec["copies_desired"].append(desired)
            rec["copies_placed"].append(len(copies))
            rec["instances"].append(len(instances))
            rec["instances_serving"].append(sum(1 for r in instances if r <= t))
            # policies act at the end of the tick
            end = t + dt
            outs, ins = proposals(
                self.metrics,
                i,
                end,
                n=n,
                desired=desired,
                tt=self.tt,
                steps=[self.wake] if self.wake is not None else [],
                to_zero=lo == 0,  # ceil(n x 0 / target): no request in flight, no copy
            )
            moved = decide(outs, ins, desired, lo, hi, end)
            if moved is not None:
                acts.append((end, "copies", desired, moved[0], moved[1]))
                desired = moved[0]
        series = s.arrays()
        series["cold"] = np.asarray(cold, dtype=float)
        series.update({k: np.asarray(v, dtype=float) for k, v in rec.items()})
        return ComponentRun(tr, dt, inst, inst.price_per_hour, per, series, acts, self.times)


def simulate_components(cfg: DeploymentConfig, trace: Trace, a: Assumptions) -> ComponentRun:
    return ComponentSimulation(cfg, a, trace).run()


# --------------------------------------------------------------------------- the idle week


def idle_week(cfg: DeploymentConfig) -> Trace:
    """dev's week as the plan prices it at zero (sizing/component_plan.py: busy
    ``DEV_BUSY_HOURS_PER_DAY`` h from ``DEV_BUSY_START_HOUR`` on ``DEV_BUSY_WEEKDAYS``, Tokyo
    time; nobody otherwise): the normal day's shape at ``fleet.traffic_share`` in the busy hours,
    no request outside them, over the plan's week from ``REFERENCE_START``."""
    start = REFERENCE_START.astimezone(UTC)
    minutes = int(PLAN_WINDOW.total_seconds() // 60)
    day = normal_day().rpm * cfg.fleet.traffic_share
    rpm = np.zeros(minutes)
    for m in range(minutes):
        local = (start + timedelta(minutes=m)).astimezone(JST)
        busy = (
            local.weekday() in DEV_BUSY_WEEKDAYS
            and DEV_BUSY_START_HOUR <= local.hour < DEV_BUSY_START_HOUR + DEV_BUSY_HOURS_PER_DAY
        )
        if busy:
            rpm[m] = day[local.hour * 60 + local.minute]
    return Trace(
        "idle-week",
        start,
        rpm,
        f"the plan's idle schedule: busy {DEV_BUSY_HOURS_PER_DAY} h from "
        f"{DEV_BUSY_START_HOUR:02d}:00 JST on {len(DEV_BUSY_WEEKDAYS)} weekdays at the normal "
        "day's shape x fleet.traffic_share, no request otherwise",
    )


# --------------------------------------------------------------------------- the figures


@dataclass(frozen=True)
class ColdSpell:
    """Requests at zero until the first copy served: when, how many, how long they waited."""

    start_minute: float
    served_minute: float | None
    requests: float
    longest_wait_s: float
    mean_wait_s: float


def cold_spells(run: ComponentRun) -> list[ColdSpell]:
    """Each spell of cold requests, with each request's wait until a copy served (None: none
    served before the trace ended)."""
    cold, n = run.series["cold"], run.series["in_service"]
    dt = run.tick_seconds
    out: list[ColdSpell] = []
    i = 0
    while i < len(cold):
        if cold[i] <= 0:
            i += 1
            continue
        j = i
        while j < len(cold) and n[j] == 0:
            j += 1
        served = j if j < len(cold) else None
        reqs = cold[i:j]
        end = (served if served is not None else len(cold)) * dt
        waits = end - np.arange(i, j) * dt - dt / 2  # mid-tick arrivals
        total = float(reqs.sum())
        out.append(
            ColdSpell(
                start_minute=i * dt / 60,
                served_minute=None if served is None else served * dt / 60,
                requests=total,
                longest_wait_s=float(waits[reqs > 0].max()),
                mean_wait_s=float((waits * reqs).sum() / total) if total else 0.0,
            )
        )
        i = j
    return out


def nights_at_zero(run: ComponentRun, hour: int = 3) -> int:
    """Nights the endpoint had no instance at ``hour``:00 Tokyo time."""
    dt, inst, start = run.tick_seconds, run.series["instances"], run.trace.start
    nights = 0
    for i in range(0, len(inst), 60 // dt * 60):  # every hour
        local = (start + timedelta(seconds=i * dt)).astimezone(JST)
        nights += int(local.hour == hour and inst[i] == 0)
    return nights


def summary(run: ComponentRun) -> dict[str, object]:
    s, dt = run.series, run.tick_seconds
    minutes = run.trace.minutes
    hours = float(s["instances"].sum()) * dt / 3600
    cost = hours * run.price_per_hour
    spells = cold_spells(run)
    acts = run.activities
    first_instance = next((x for x in acts if x[1] == "instances" and x[3] > x[2]), None)
    return {
        "trace": run.trace.name,
        "minutes": minutes,
        "requests": round(float(s["arrivals"].sum())),
        "served": round(float(s["served"].sum())),
        "rejected_429": round(float(s["rejected"].sum())),
        "cold_failures": round(float(s["cold"].sum())),
        "cold_spells": [
            {
                "starts": _when(run.trace.start, x.start_minute),
                "first_copy_serves": None
                if x.served_minute is None
                else _when(run.trace.start, x.served_minute),
                "requests": round(x.requests),
                "longest_wait_s": round(x.longest_wait_s),
                "mean_wait_s": round(x.mean_wait_s),
            }
            for x in spells
        ],
        "longest_cold_wait_s": round(max((x.longest_wait_s for x in spells), default=0.0)),
        "copies_per_instance": run.copies_per_instance,
        "copies": {"min": int(s["in_service"].min()), "max": int(s["in_service"].max())},
        "copies_desired_max": int(s["copies_desired"].max()),
        "instances": {"min": int(s["instances"].min()), "max": int(s["instances"].max())},
        "minutes_at_zero": round(float((s["instances"] == 0).sum()) * dt / 60),
        "nights_at_zero": nights_at_zero(run),
        "copy_scale_outs": sum(1 for x in acts if x[1] == "copies" and x[3] > x[2]),
        "instance_scale_outs": sum(1 for x in acts if x[1] == "instances" and x[3] > x[2]),
        "first_instance_added": None
        if first_instance is None
        else _when(run.trace.start, first_instance[0] / 60),
        "instance_hours": round(hours, 2),
        "cost_usd": round(cost, 2),
        "cost_per_month_usd": round(monthly(cost, minutes)),
        "queue_wait_p95_ms": round(1000 * _pct(s["wait_s"], s["served"], 95), 1),
        "start_times": run.times.source,
    }


def _pct(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    mask = weights > 0
    if not mask.any():
        return 0.0
    order = np.argsort(values[mask])
    cum = np.cumsum(weights[mask][order])
    return float(values[mask][order][np.searchsorted(cum, q / 100 * cum[-1])])


def _when(start: datetime, minute: float) -> str:
    return f"{(start + timedelta(minutes=minute)).astimezone(JST):%a %H:%M} JST"
