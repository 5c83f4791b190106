"""The simulation of one variant: a pooled request queue, the fleet, and its scaling policies.

Every ``tick_seconds`` (10 s by default):

1. Scheduled/calendar bounds that are due are applied; desired capacity is clamped into them.
2. The fleet moves towards desired capacity. New instances serve after
   ``Assumptions.scale_out_seconds`` (by default the plan's scale-out figure, image cached). With
   ``serialize_updates`` a further change waits until instances still starting are in service
   (the endpoint is Updating meanwhile). Scale-in removes instances at once.
3. Traffic (the trace's minute, times this variant's weight share) arrives. The in-service fleet
   serves up to ``n x C / S`` requests per second (``C`` concurrent sequences per instance, ``S``
   seconds each, see :mod:`simulator.capacity`); the rest waits, FIFO, inside vLLM. Requests beyond
   ``n x engine.admission_max_inflight`` in flight are rejected with 429 (with no instance in
   service, every request fails). Queue wait = backlog / service rate (fluid FIFO).
4. At each alarm period boundary the fleet's metrics (:mod:`simulator.metrics`) are
   aggregated and the scaling policies act (:mod:`simulator.scaling_policies`, Application Auto
   Scaling semantics).
5. Operator events: a ``Deploy`` raises counts first (``make deploy``), then runs a blue/green
   update during which a second fleet is billed and scaling actions are discarded
   (:mod:`simulator.deploys`, which reads the rules from ``sizing.update_semantics``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial

import numpy as np

from simulator.assumptions import Assumptions
from simulator.capacity import InstanceModel, RequestShape, admit, warm_start_count
from simulator.deploys import ActiveUpdate, begin_update, deploy_config, prescale_target
from simulator.events import Deploy, OperatorEvent
from simulator.metrics import FleetMetrics, Series
from simulator.scaling_policies import (
    Policy,
    SimulationError,
    StepScaling,
    TargetTracking,
    arbitrate,
    step_policies,
    target_tracking,
)
from simulator.schedule import timeline
from simulator.traces import Trace
from typed_config import DeploymentConfig, VariantName


@dataclass(frozen=True)
class Activity:
    seconds: float  # from trace start
    source: str
    desired_from: int
    desired_to: int

    def as_dict(self) -> dict[str, object]:
        """The activity as the JSON reports write it."""
        return {
            "minute": round(self.seconds / 60, 2),
            "source": self.source,
            "from": self.desired_from,
            "to": self.desired_to,
        }


def serve_tick(
    s: Series,
    inst: InstanceModel,
    dt: int,
    *,
    n: int,
    backlog: float,
    arrivals: float,
    shape: RequestShape,
    kv_seq: float,
    latency: Callable[[int], RequestShape],
    unserved_fail_apart: bool = False,
) -> tuple[float, float]:
    """One tick of traffic on ``n`` serving engines (instances, or copies in the component
    shape), recorded in ``s``: the pooled FIFO queue and the 429 beyond ``n x
    admission_max_inflight`` (:func:`simulator.capacity.admit`), the queue wait (fluid FIFO) and a
    request's times at the concurrency each engine runs (``latency``: that concurrency's shape).

    With no engine serving every request, and whatever waited, fails; ``unserved_fail_apart``
    counts those apart from the 429s (the component shape's no-capacity failures). Returns (new
    backlog, requests failed apart). The fleet columns (in service, launched, desired, bounds)
    are the caller's to record.
    """
    conc, svc = shape.concurrency, shape.service_seconds
    rate = n * conc / svc  # requests/s the serving fleet completes when full
    before = backlog
    # in flight (running + waiting) stays within n x admission_max_inflight
    served, rejected, backlog = admit(
        backlog, arrivals, rate * dt, n * (inst.admission_limit - conc)
    )
    failed = 0.0
    if unserved_fail_apart and n == 0:
        failed, rejected = rejected, 0.0
    running = min(n * conc, served / dt * svc)
    wait = (before + backlog) / 2 / rate if rate else 0.0
    s.arrivals.append(arrivals)
    s.served.append(served)
    s.rejected.append(rejected)
    s.running.append(running)
    s.waiting.append(backlog)
    s.wait_s.append(wait)
    # a request's times at this tick: queue wait + the speed model's at the concurrency each
    # engine runs (fewer than the batch holds below capacity: faster)
    at = latency(math.ceil(running / n - 1e-9) if n else conc)
    s.ttft_s.append(wait + at.prefill_seconds)
    s.e2e_s.append(wait + at.service_seconds)
    s.capacity_rpm.append(rate * 60)
    s.conc.append(conc)
    s.service_s.append(svc)
    s.prefill_s.append(shape.prefill_seconds)
    s.kv_per_seq.append(kv_seq)
    return backlog, failed


def record_fleet(s: Series, *, n: int, launched: int, desired: int, lo: int, hi: int) -> None:
    """The tick's fleet columns: serving, launched (billed), desired and its bounds."""
    s.in_service.append(n)
    s.launched.append(launched)
    s.desired.append(desired)
    s.min_cap.append(lo)
    s.max_cap.append(hi)


def proposals(
    metrics: FleetMetrics,
    i: int,
    end: float,
    *,
    n: int,
    desired: int,
    tt: TargetTracking | None,
    steps: Sequence[StepScaling],
    to_zero: bool = False,
) -> tuple[list[tuple[int, Policy]], list[tuple[int, Policy]]]:
    """(scale-outs, scale-ins) the policies propose at the end of tick ``i``: target tracking
    while anything serves (no datapoint otherwise), each step policy on its own alarm. With
    ``to_zero`` (a floor of 0), target tracking at no request in flight proposes 0: its formula
    ``ceil(n x 0 / target)``."""
    outs: list[tuple[int, Policy]] = []
    ins: list[tuple[int, Policy]] = []
    if tt is not None and n:
        out, scale_in = tt.propose(metrics, i, end, n)
        if to_zero and scale_in == 1 and all(v == 0 for v in tt.in_points):
            scale_in = 0
        if out is not None:
            outs.append((out, tt))
        if scale_in is not None:
            ins.append((scale_in, tt))
    for st in steps:
        proposal = st.propose(metrics, i, end, desired)
        if proposal is not None:
            (outs if st.policy.direction == "out" else ins).append((proposal, st))
    return outs, ins


def decide(
    outs: list[tuple[int, Policy]],
    ins: list[tuple[int, Policy]],
    desired: int,
    lo: int,
    hi: int,
    end: float,
) -> tuple[int, str] | None:
    """The policies' proposals arbitrated (:func:`simulator.scaling_policies.arbitrate`) and
    clamped into [lo, hi]: (new desired, the winners' sources), each winner told it acted; None
    when desired does not move."""
    decision = arbitrate(outs, ins, desired)
    if decision is None:
        return None
    new, winners = decision
    new = min(max(new, lo), hi)
    if new == desired:
        return None
    for w in winners:
        w.acted(end, desired, new)
    return new, ",".join(w.source for w in winners)


@dataclass
class VariantRun:
    variant: VariantName
    instance: InstanceModel
    share: float
    tick_seconds: int
    series: dict[str, np.ndarray]
    activities: list[Activity]
    bounds_changes: list[tuple[float, str, int, int]]
    #: (seconds from start, what): operator events and update milestones (simulator/deploys.py).
    operator_log: list[tuple[float, str]] = field(default_factory=list)


class VariantSimulation:
    def __init__(
        self,
        cfg: DeploymentConfig,
        variant: VariantName,
        inst: InstanceModel,
        a: Assumptions,
        trace: Trace,
        share: float,
        events: Sequence[OperatorEvent] = (),
    ) -> None:
        self.cfg, self.variant, self.inst, self.a, self.trace = cfg, variant, inst, a, trace
        #: decision to serving for a scale-out of the tag the variant runs
        self.scale_out_delay = a.scale_out_seconds(cfg, variant)
        self.share = share
        unsupported = [e.label for e in events if not isinstance(e, Deploy)]
        if unsupported:
            raise SimulationError(f"no replay for operator event(s) {unsupported} yet")
        self.deploys = sorted((e for e in events if isinstance(e, Deploy)), key=lambda e: e.at)
        self.dt = a.tick_seconds
        self.steps = step_policies(cfg, variant, a)
        self.tt = target_tracking(cfg, variant, a)
        self.s = Series()
        self.metrics = FleetMetrics(
            self.s, inst, self.dt, float(cfg.engine.metrics_interval_seconds)
        )

    def _shape(self, minute: int) -> tuple[RequestShape, float, tuple[float, float]]:
        """This minute's request shape, KV tokens per running sequence (half-way through its
        output) and (prompt, output) tokens: the trace's own means, else the config's typical
        request."""
        tr, inst = self.trace, self.inst
        if tr.prompt_tokens is None or tr.output_tokens is None:
            p, o = float(inst.prompt_tokens), float(inst.output_tokens)
            return inst.typical, p + o / 2, (p, o)
        p, o = float(tr.prompt_tokens[minute]), float(tr.output_tokens[minute])
        return inst.at(p, o), p + o / 2, (p, o)

    def _initial_count(self) -> int:
        """The variant's initial instance count, raised to the first minute's load when the
        assumptions start the fleet warm (before the scaling bounds clamp it)."""
        initial = self.cfg.variants[self.variant].initial_instance_count
        if self.a.warm_start:
            rpm0 = float(self.trace.rpm[0]) * self.share
            initial = max(initial, warm_start_count(self.cfg, self.variant, self.inst, rpm0))
        return initial

    def _serve(
        self,
        t: float,
        n: int,
        backlog: float,
        shapes: dict[int, tuple[RequestShape, float, tuple[float, float]]],
    ) -> float:
        """The tick's share of the trace on ``n`` serving instances, with this minute's request
        shape (cached per minute in ``shapes``); returns the backlog after it."""
        minute = int(t // 60)
        if minute not in shapes:
            shapes[minute] = self._shape(minute)
        shape, kv_seq, (p_tok, o_tok) = shapes[minute]
        backlog, _ = serve_tick(
            self.s,
            self.inst,
            self.dt,
            n=n,
            backlog=backlog,
            arrivals=float(self.trace.rpm[minute]) * self.share * self.dt / 60,
            shape=shape,
            kv_seq=kv_seq,
            latency=partial(self.inst.latency, prompt_tokens=p_tok, output_tokens=o_tok),
        )
        return backlog

    def _prescale(self, raising: Deploy, desired: int, hi: int, now: datetime) -> int:
        """The count a deploy raises the variant to before its update blocks autoscaling
        (``desired`` when the deploy does not prescale)."""
        if not raising.prescale:
            return desired
        return prescale_target(
            deploy_config(self.cfg, raising),
            self.variant,
            desired=desired,
            max_capacity=hi,
            now=now,
            a=self.a,
        )

    def _move_fleet(self, ready: list[float], desired: int, t: float) -> None:
        """The instances (their in-service times in ``ready``) towards ``desired``: new ones
        serve after the scale-out delay; a scale-in removes the newest first (sorted, cut)."""
        if desired > len(ready):
            ready += [t + self.scale_out_delay] * (desired - len(ready))
        elif desired < len(ready):
            ready.sort()
            del ready[desired:]

    def _begin_update(
        self,
        raising: Deploy,
        desired: int,
        ready: list[float],
        t: float,
        oplog: list[tuple[float, str]],
    ) -> ActiveUpdate:
        """The deploy's UpdateEndpoint once its raised counts serve: the green fleet starts
        beside the blue one (``ready``)."""
        dcfg = deploy_config(self.cfg, raising)
        update = begin_update(
            dcfg, self.variant, raising, desired=desired, blue=ready, t=t, a=self.a
        )
        oplog.append((t, f"{raising.label}: UpdateEndpoint, green fleet {len(update.green)}"))
        return update

    # ------------------------------------------------------------ run
    def run(self) -> VariantRun:
        """The trace tick by tick: scheduled bound changes, a deploy's prescale and update, the
        fleet towards desired, the tick's traffic served, the scaling policies at its end."""
        a, dt, tr, inst = self.a, self.dt, self.trace, self.inst
        (lo, hi, _), changes = timeline(self.cfg.scaling, self.variant, tr.start, tr.end)
        pending_changes = deque(changes)
        desired = min(max(self._initial_count(), lo), hi)
        ready: list[float] = [0.0] * desired  # instances' in-service times (s from start)
        activities: list[Activity] = []
        bounds_log: list[tuple[float, str, int, int]] = []
        backlog = 0.0
        shapes: dict[int, tuple[RequestShape, float, tuple[float, float]]] = {}
        total_ticks = tr.minutes * 60 // dt
        s = self.s
        deploys: deque[Deploy] = deque(self.deploys)
        raising: Deploy | None = None  # counts raised; UpdateEndpoint once they are in service
        update: ActiveUpdate | None = None  # autoscaling is blocked while it runs
        oplog: list[tuple[float, str]] = []
        for i in range(total_ticks):
            t = i * dt
            now = tr.start + timedelta(seconds=t)
            while pending_changes and pending_changes[0].at <= now:
                c = pending_changes.popleft()
                lo, hi = c.min_capacity, c.max_capacity
                bounds_log.append((t, c.name, lo, hi))
                if update is None:  # a scheduled capacity change does nothing during an update
                    clamped = min(max(desired, lo), hi)  # desired into the new bounds
                    if clamped != desired:
                        activities.append(Activity(t, f"schedule:{c.name}", desired, clamped))
                    desired = clamped
            if update is not None and update.done(t):
                ready = update.green
                oplog.append((t, f"{update.label}: blue fleet terminated, update complete"))
                update = None
            if deploys and raising is None and update is None and deploys[0].at <= now:
                raising = deploys.popleft()
                oplog.append((t, f"{raising.label}: started"))
                want = self._prescale(raising, desired, hi, now)
                if want > desired:
                    activities.append(Activity(t, f"{raising.label}:prescale", desired, want))
                    desired = want
            # fleet towards desired (frozen during an update)
            starting = sum(1 for r in ready if r > t)
            if update is None and not (a.serialize_updates and starting):
                self._move_fleet(ready, desired, t)
            if raising is not None and len(ready) == desired and all(r <= t for r in ready):
                update = self._begin_update(raising, desired, ready, t, oplog)
                if update.green_size != desired:
                    activities.append(
                        Activity(t, f"{raising.label}:reset", desired, update.green_size)
                    )
                    desired = update.green_size
                raising = None
            n = update.serving(t) if update is not None else sum(1 for r in ready if r <= t)
            record_fleet(
                s,
                n=n,
                launched=update.launched() if update is not None else len(ready),
                desired=desired,
                lo=lo,
                hi=hi,
            )
            backlog = self._serve(t, n, backlog, shapes)
            # policies act at the end of the tick
            end = t + dt
            outs, ins = proposals(
                self.metrics, i, end, n=n, desired=desired, tt=self.tt, steps=self.steps
            )
            if update is not None:
                continue  # alarms evaluated above; their scaling actions are blocked
            moved = decide(outs, ins, desired, lo, hi, end)
            if moved is not None:
                activities.append(Activity(end, moved[1], desired, moved[0]))
                desired = moved[0]
        return VariantRun(
            self.variant, inst, self.share, dt, s.arrays(), activities, bounds_log, oplog
        )
