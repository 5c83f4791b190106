"""The simulation of one variant: a pooled request queue, the fleet, and its scaling policies.

Every ``tick_seconds`` (10 s by default):

1. Scheduled/calendar bounds that are due are applied; desired capacity is clamped into them.
2. The fleet moves towards desired capacity. New instances serve after ``provision_seconds +
   startup_seconds``. With ``serialize_updates`` a further change waits until instances still
   starting are in service (the endpoint is Updating meanwhile). Scale-in removes instances at once.
3. Traffic (the trace's minute, times this variant's weight share) arrives. The in-service fleet
   serves up to ``n x C / S`` requests per second (``C`` concurrent sequences per instance, ``S``
   seconds each, see :mod:`simulator.capacity`); the rest waits, FIFO, inside vLLM. Requests beyond
   ``n x engine.admission_max_inflight`` in flight are rejected with 429 (with no instance in
   service, every request fails). Queue wait = backlog / service rate (fluid FIFO).
4. At each alarm period boundary the metrics below are aggregated with the alarm's statistic and
   the policies act (Application Auto Scaling semantics):

   - Target tracking: scale out when ``tt_out_datapoints`` consecutive datapoints exceed the target
     (10 s datapoints of ConcurrentRequestsPerModel, or 1-minute InvocationsPerInstance) to
     ``ceil(in-service x metric / target)``; scale in when ``tt_in_datapoints`` 1-minute datapoints
     are all below ``tt_in_fraction x target``, to the same formula, at most once per scale-in
     cooldown. Its scale-out cooldown has no effect here: AAS counts capacity added during the
     cooldown towards the next scale-out, which the ``max(desired, needed)`` rule already does.
   - Step scaling: the alarm is in ALARM when ``datapoints_to_alarm`` of the last
     ``evaluation_periods`` period datapoints breach (and ``also_require`` holds in the same
     period); while in ALARM the policy is invoked at every period. The step whose interval holds
     ``value - threshold`` applies (lower inclusive above the threshold, upper inclusive below).
     Scale-out during its cooldown adds only what exceeds the capacity it added at the start of
     the cooldown; scale-in during its cooldown is blocked.
   - When several policies act in one period the largest scale-out wins; a scale-in applies only
     if nothing scales out, and the mildest scale-in wins. Target tracking with ``scale_in:
     false`` (DisableScaleIn in the template) never proposes a scale-in.
5. Operator events: a ``Deploy`` raises counts first (``make deploy``), then runs a blue/green
   update during which a second fleet is billed and scaling actions are discarded
   (:mod:`simulator.deploys`, which reads the rules from ``stacks.update_semantics``).

Metrics an instance publishes are averages per in-service instance:
``ConcurrentRequestsPerModel`` (running + waiting), ``RunningRequests``, ``QueueDepth`` (waiting),
``KVCacheUsage`` (running sequences half-way through their output / KV capacity),
``GPUUtilization`` (running / C), ``GPUMemoryUtilization`` (vLLM preallocates
``gpu_memory_utilization`` of the GPU at start, so this is that fraction whatever the load),
``InvocationsPerInstance`` and ``Invocations`` (arrivals), ``Invocation4XXErrors`` and
``AdmissionRejections`` (429s), ``QueueTimeP50/P95`` and ``TimeToFirstTokenP50/P95`` (queue wait,
plus prefill for TTFT). Metric publication delay is not modelled.
"""

from __future__ import annotations

import math
import operator
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np

from simulator.assumptions import Assumptions
from simulator.capacity import InstanceModel, RequestShape
from simulator.deploys import ActiveUpdate, begin_update, deploy_config, prescale_target
from simulator.events import Deploy, OperatorEvent
from simulator.schedule import timeline
from simulator.traces import Trace
from stacks.capacity import concurrency_target
from stacks.config import DeploymentConfig, StepPolicy, VariantName

COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}
#: Metrics counted per minute (their per-tick value is a per-minute rate).
COUNT_METRICS = {
    "InvocationsPerInstance",
    "Invocations",
    "Invocation4XXErrors",
    "AdmissionRejections",
}
SUPPORTED_METRICS = COUNT_METRICS | {
    "ConcurrentRequestsPerModel",
    "RunningRequests",
    "QueueDepth",
    "KVCacheUsage",
    "GPUUtilization",
    "GPUMemoryUtilization",
    "QueueTimeP50",
    "QueueTimeP95",
    "TimeToFirstTokenP50",
    "TimeToFirstTokenP95",
}


class SimulationError(ValueError):
    """The config asks for something the simulator cannot model; the message says what."""


@dataclass
class Series:
    """Per-tick records of one variant's run."""

    in_service: list[int] = field(default_factory=list)
    launched: list[int] = field(default_factory=list)  # in service + starting (billed)
    desired: list[int] = field(default_factory=list)
    min_cap: list[int] = field(default_factory=list)
    max_cap: list[int] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)
    served: list[float] = field(default_factory=list)
    rejected: list[float] = field(default_factory=list)
    running: list[float] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)
    wait_s: list[float] = field(default_factory=list)
    capacity_rpm: list[float] = field(default_factory=list)
    conc: list[int] = field(default_factory=list)
    service_s: list[float] = field(default_factory=list)
    prefill_s: list[float] = field(default_factory=list)
    kv_per_seq: list[float] = field(default_factory=list)

    def arrays(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v, dtype=float) for k, v in vars(self).items()}


@dataclass(frozen=True)
class Activity:
    seconds: float  # from trace start
    source: str
    desired_from: int
    desired_to: int


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


@dataclass
class _StepState:
    policy: StepPolicy
    ticks: int
    breaches: deque[bool]
    cooldown_until: float = -math.inf
    added_in_cooldown: int = 0


def _stat(values: list[float], statistic: str, sum_scale: float) -> float:
    if statistic == "Average":
        return sum(values) / len(values)
    if statistic == "Maximum":
        return max(values)
    if statistic == "Minimum":
        return min(values)
    if statistic == "Sum":
        return sum(values) / len(values) * sum_scale
    return float(np.percentile(values, float(statistic[1:])))  # p50, p90, p95, p99


def _step_change(policy: StepPolicy, value: float) -> int | None:
    diff = value - policy.threshold
    above = policy.direction == "out"
    for s in policy.steps:
        lo = -math.inf if s.lower is None else s.lower
        hi = math.inf if s.upper is None else s.upper
        if (lo <= diff < hi) if above else (lo < diff <= hi):
            return s.change
    return None


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
        self.share = share
        unsupported = [e.label for e in events if not isinstance(e, Deploy)]
        if unsupported:
            raise SimulationError(f"no replay for operator event(s) {unsupported} yet")
        self.deploys = sorted((e for e in events if isinstance(e, Deploy)), key=lambda e: e.at)
        self.dt = a.tick_seconds
        scaling = cfg.scaling.variants[variant]
        self.tt = scaling.target_tracking
        known = {p.name for v in cfg.scaling.variants.values() for p in v.step_policies}
        unknown = sorted(set(a.disabled_policies) - known)
        if unknown:
            raise SimulationError(
                f"--disable-policy: no step policy named {unknown} (known: {sorted(known)})"
            )
        self.steps: list[_StepState] = []
        for i, p in enumerate(scaling.step_policies):
            if p.name in a.disabled_policies:
                continue
            where = f"scaling.variants.{variant}.step_policies[{i}] ({p.name})"
            for metric in [p.metric] + ([p.also_require.metric] if p.also_require else []):
                if metric not in SUPPORTED_METRICS:
                    raise SimulationError(
                        f"{where}: the simulator cannot model metric {metric!r}; "
                        f"it models {', '.join(sorted(SUPPORTED_METRICS))}"
                    )
            if p.period_seconds % self.dt:
                raise SimulationError(
                    f"{where}: period_seconds {p.period_seconds} is not a "
                    f"multiple of the simulation tick ({self.dt} s)"
                )
            self.steps.append(
                _StepState(p, p.period_seconds // self.dt, deque(maxlen=p.evaluation_periods))
            )
        if self.tt is not None:
            self.tt_target = (
                concurrency_target(cfg, variant)
                if self.tt.metric == "concurrency"
                else float(self.tt.invocations_per_instance)
            )
            self.tt_metric = (
                "ConcurrentRequestsPerModel"
                if self.tt.metric == "concurrency"
                else "InvocationsPerInstance"
            )
            out_s = a.tt_out_datapoint_seconds or (10 if self.tt.metric == "concurrency" else 60)
            if out_s % self.dt or 60 % self.dt:
                raise SimulationError(
                    f"target tracking datapoints ({out_s} s, 60 s) are not "
                    f"multiples of the simulation tick ({self.dt} s)"
                )
            self.tt_out_ticks = out_s // self.dt
        self.s = Series()

    # ------------------------------------------------------------ metrics
    def _metric(self, name: str, i: int) -> float | None:
        s, n = self.s, self.s.in_service[i]
        if n == 0:
            return None
        per_min = 60 / self.dt
        if name == "ConcurrentRequestsPerModel":
            return (s.running[i] + s.waiting[i]) / n
        if name == "RunningRequests":
            return s.running[i] / n
        if name == "QueueDepth":
            return s.waiting[i] / n
        if name == "KVCacheUsage":
            return 100 * s.running[i] / n * s.kv_per_seq[i] / self.inst.kv_capacity_tokens
        if name == "GPUUtilization":
            return 100 * min(1.0, s.running[i] / (n * s.conc[i]))
        if name == "GPUMemoryUtilization":
            return self.inst.gpu_memory_percent
        if name == "InvocationsPerInstance":
            return s.arrivals[i] * per_min / n
        if name == "Invocations":
            return s.arrivals[i] * per_min
        if name in ("Invocation4XXErrors", "AdmissionRejections"):
            return s.rejected[i] * per_min
        if name.startswith("QueueTime"):
            return 1000 * s.wait_s[i]
        if name.startswith("TimeToFirstToken"):
            return 1000 * (s.wait_s[i] + s.prefill_s[i])
        raise SimulationError(f"unsupported metric {name!r}")  # guarded in __init__

    def _aggregate(self, name: str, statistic: str, last: int, ticks: int) -> float | None:
        values = [self._metric(name, j) for j in range(last - ticks + 1, last + 1)]
        if any(v is None for v in values):
            return None  # missing data: the alarm keeps its state
        if name in COUNT_METRICS:
            sample = 60.0
        elif name == "ConcurrentRequestsPerModel":
            sample = 10.0
        elif name.startswith(("GPU", "CPU")):
            sample = 60.0
        else:
            sample = float(self.cfg.engine.metrics_interval_seconds)
        return _stat(
            [v for v in values if v is not None], statistic, max(1.0, ticks * self.dt / sample)
        )

    def _step_proposal(self, st: _StepState, i: int, end: float, desired: int) -> int | None:
        """Desired capacity this step policy asks for at the end of tick ``i`` (None: nothing)."""
        p = st.policy
        if end % p.period_seconds:
            return None
        value = self._aggregate(p.metric, p.statistic, i, st.ticks)
        if value is None:
            return None
        breach = COMPARE[p.comparison](value, p.threshold)
        if breach and p.also_require is not None:
            r = p.also_require
            other = self._aggregate(r.metric, r.statistic, i, st.ticks)
            breach = other is not None and COMPARE[r.comparison](other, r.threshold)
        st.breaches.append(breach)
        if sum(st.breaches) < (p.datapoints_to_alarm or p.evaluation_periods):
            return None
        change = _step_change(p, value)
        if change is None:
            return None
        if p.direction == "out":
            extra = change - st.added_in_cooldown if end < st.cooldown_until else change
            return desired + extra if extra > 0 else None
        return desired + change if end >= st.cooldown_until else None

    def _shape(self, minute: int) -> tuple[RequestShape, float]:
        """This minute's request shape and KV tokens per running sequence (half-way through its
        output): the trace's own mean tokens, else the config's typical request."""
        tr, inst = self.trace, self.inst
        if tr.prompt_tokens is None or tr.output_tokens is None:
            return inst.typical, inst.prompt_tokens + inst.output_tokens / 2
        p, o = float(tr.prompt_tokens[minute]), float(tr.output_tokens[minute])
        return inst.at(p, o), p + o / 2

    # ------------------------------------------------------------ run
    def run(self) -> VariantRun:
        a, dt, tr, inst = self.a, self.dt, self.trace, self.inst
        (lo, hi, _), changes = timeline(self.cfg.scaling, self.variant, tr.start, tr.end)
        pending_changes = deque(changes)
        initial = self.cfg.variants[self.variant].initial_instance_count
        desired = min(max(initial, lo), hi)
        ready: list[float] = [0.0] * desired  # instances' in-service times (s from start)
        activities: list[Activity] = []
        bounds_log: list[tuple[float, str, int, int]] = []
        tt_out: deque[float | None] = deque(maxlen=a.tt_out_datapoints)
        tt_in: deque[float | None] = deque(maxlen=a.tt_in_datapoints)
        tt_in_cooldown_until = -math.inf
        backlog = 0.0
        shapes: dict[int, tuple[RequestShape, float]] = {}
        total_ticks = tr.minutes * 60 // dt
        s = self.s
        deploys: deque[Deploy] = deque(self.deploys)
        raising: Deploy | None = None  # counts raised; UpdateEndpoint once they are in service
        update: ActiveUpdate | None = None  # autoscaling is blocked while it runs
        oplog: list[tuple[float, str]] = []

        def set_desired(t: float, value: int, source: str) -> int:
            new = min(max(value, lo), hi)
            if new != desired:
                activities.append(Activity(t, source, desired, new))
            return new

        for i in range(total_ticks):
            t = i * dt
            now = tr.start + timedelta(seconds=t)
            while pending_changes and pending_changes[0].at <= now:
                c = pending_changes.popleft()
                lo, hi = c.min_capacity, c.max_capacity
                bounds_log.append((t, c.name, lo, hi))
                if update is None:  # a scheduled capacity change does nothing during an update
                    desired = set_desired(t, desired, f"schedule:{c.name}")
            if update is not None and update.done(t):
                ready = update.green
                oplog.append((t, f"{update.label}: blue fleet terminated, update complete"))
                update = None
            if deploys and raising is None and update is None and deploys[0].at <= now:
                raising = deploys.popleft()
                oplog.append((t, f"{raising.label}: started"))
                if raising.prescale:
                    want = prescale_target(
                        deploy_config(self.cfg, raising),
                        self.variant,
                        desired=desired,
                        max_capacity=hi,
                        now=now,
                        a=a,
                    )
                    if want > desired:
                        activities.append(Activity(t, f"{raising.label}:prescale", desired, want))
                        desired = want
            # fleet towards desired (frozen during an update)
            starting = sum(1 for r in ready if r > t)
            if update is None and not (a.serialize_updates and starting):
                if desired > len(ready):
                    ready += [t + a.ready_delay_seconds] * (desired - len(ready))
                elif desired < len(ready):
                    ready.sort()
                    del ready[desired:]
            if raising is not None and len(ready) == desired and all(r <= t for r in ready):
                dcfg = deploy_config(self.cfg, raising)
                update = begin_update(
                    dcfg, self.variant, raising, desired=desired, blue=ready, t=t, a=a
                )
                oplog.append(
                    (t, f"{raising.label}: UpdateEndpoint, green fleet {len(update.green)}")
                )
                if update.green_size != desired:
                    activities.append(
                        Activity(t, f"{raising.label}:reset", desired, update.green_size)
                    )
                    desired = update.green_size
                raising = None
            n = update.serving(t) if update is not None else sum(1 for r in ready if r <= t)
            # traffic and queue
            minute = t // 60
            if minute not in shapes:
                shapes[minute] = self._shape(minute)
            shape, kv_seq = shapes[minute]
            conc, svc, prefill = shape.concurrency, shape.service_seconds, shape.prefill_seconds
            arrivals = float(tr.rpm[minute]) * self.share * dt / 60
            rate = n * conc / svc  # requests/s the in-service fleet completes when full
            before = backlog
            total = backlog + arrivals
            served = min(total, rate * dt)
            left = total - served
            # in flight (running + waiting) stays within n x admission_max_inflight
            rejected = max(0.0, left - n * (inst.admission_limit - conc))
            backlog = left - rejected
            running = min(n * conc, served / dt * svc)
            wait = (before + backlog) / 2 / rate if rate else 0.0
            s.in_service.append(n)
            s.launched.append(update.launched() if update is not None else len(ready))
            s.desired.append(desired)
            s.min_cap.append(lo)
            s.max_cap.append(hi)
            s.arrivals.append(arrivals)
            s.served.append(served)
            s.rejected.append(rejected)
            s.running.append(running)
            s.waiting.append(backlog)
            s.wait_s.append(wait)
            s.capacity_rpm.append(rate * 60)
            s.conc.append(conc)
            s.service_s.append(svc)
            s.prefill_s.append(prefill)
            s.kv_per_seq.append(kv_seq)
            # policies act at the end of the tick
            end = t + dt
            outs: list[tuple[int, _StepState | None]] = []  # None: target tracking
            ins: list[tuple[int, _StepState | None]] = []
            if self.tt is not None and n:
                if end % (self.tt_out_ticks * dt) == 0:
                    tt_out.append(self._aggregate(self.tt_metric, "Average", i, self.tt_out_ticks))
                    last = tt_out[-1]
                    if (
                        len(tt_out) == tt_out.maxlen
                        and last is not None
                        and all(v is not None and v > self.tt_target for v in tt_out)
                    ):
                        outs.append((math.ceil(n * last / self.tt_target), None))
                if end % 60 == 0 and self.tt.scale_in:  # DisableScaleIn otherwise
                    tt_in.append(self._aggregate(self.tt_metric, "Average", i, 60 // dt))
                    last = tt_in[-1]
                    limit = a.tt_in_fraction * self.tt_target
                    if (
                        len(tt_in) == tt_in.maxlen
                        and last is not None
                        and end >= tt_in_cooldown_until
                        and all(v is not None and v < limit for v in tt_in)
                    ):
                        ins.append((max(1, math.ceil(n * last / self.tt_target)), None))
            for st in self.steps:
                proposal = self._step_proposal(st, i, end, desired)
                if proposal is not None:
                    (outs if st.policy.direction == "out" else ins).append((proposal, st))
            if update is not None:
                continue  # alarms evaluated above; their scaling actions are blocked
            if outs and max(v for v, _ in outs) > desired:
                chosen = outs
            elif ins and max(v for v, _ in ins) < desired:
                chosen = ins
            else:
                continue
            new = max(v for v, _ in chosen)
            winners = [st for v, st in chosen if v == new]
            old = desired
            desired = set_desired(
                end,
                new,
                ",".join(
                    "target-tracking" if w is None else f"step:{w.policy.name}" for w in winners
                ),
            )
            if desired == old:
                continue
            for w in winners:
                if w is None:
                    if desired < old:
                        assert self.tt is not None
                        tt_in_cooldown_until = end + self.tt.scale_in_cooldown_seconds
                else:
                    in_cooldown = end < w.cooldown_until
                    w.added_in_cooldown = (
                        (w.added_in_cooldown if in_cooldown else 0) + desired - old
                    )
                    w.cooldown_until = end + w.policy.cooldown_seconds
        return VariantRun(
            self.variant, inst, self.share, dt, s.arrays(), activities, bounds_log, oplog
        )
