"""Scenario "canary rollout 5 -> 100 on a normal day": the controller's own rules on a timeline.

The canary controller's decisions come from ``lambdas.canary_controller.rules`` (``decide``,
``transition``, the synth-time capacity plan the stacks hand to the Lambda): nothing about steps,
bakes, evidence or capacity is restated here. This module only plays the world around them,
minute by minute, on the normal-day trace:

- Traffic splits by the variants' weights (SageMaker weights are relative).
- Each variant serves ``n x`` the requests per minute one instance serves
  (:mod:`simulator.capacity`, from sizing.capacity); excess waits inside vLLM and is rejected with
  429 beyond ``n x engine.admission_max_inflight`` in flight (as :mod:`simulator.engine`).
- Each variant has target tracking on concurrency per instance (target
  ``sizing.capacity.concurrency_target``): scale out after ``tt_out_datapoints`` minutes above the
  target, scale in after ``tt_in_datapoints`` minutes below ``tt_in_fraction`` of it, within its
  scalable-target bounds. The primary's bounds follow its schedules (:func:`simulator.schedule.
  timeline`); its step policies are left out of this scenario (the scenario is about the canary).
- RegisterScalableTarget moves a variant's desired count into the new range at once
  (Application Auto Scaling API reference, RegisterScalableTarget); new instances serve after
  ``provision_seconds + startup_seconds``. While any instance is starting the endpoint reports
  Updating (autoscaling changes make it Updating: UpdateEndpointWeightsAndCapacities reference) and
  the controller waits.
- The state machine's loop: the next tick comes ``wait_seconds`` after the last one.

A rollback is replayed as its end at once (canary weight 0, its bounds restored); the steps the
controller takes before it (the primary's capacity first, within the rollback capacity timeout:
``rules.decide``'s ROLLING_BACK branch) are not replayed here.

``capacity_first=False`` replays the rollout as the controller ran before issue 10: weights only,
the canary's bounds left at the config's (the "before" figures).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any, Protocol

from lambdas.canary_controller import rules as r
from lambdas.canary_controller import store
from lambdas.canary_controller.capacity import CapacityPlan
from lambdas.canary_controller.state import RolloutState
from simulator.assumptions import Assumptions
from simulator.capacity import InstanceModel, admit, instance_model, warm_start_count
from simulator.schedule import timeline
from simulator.traces import JST, Trace, normal_day
from sizing.ready_bound import rollout_waits
from sizing.rollout_plan import rollout_capacity_plan
from sizing.scaling_target import concurrency_target
from typed_config import DeploymentConfig, VariantName

NAME = "canary-rollout"
#: The rollout starts at 14:00 JST: its last steps meet the JP evening peak (18:00-22:00).
START_HOUR_JST = 14


class CanaryWatch(Protocol):
    """What the canary shows beyond its traffic (simulator/blast_radius.py: a build's errors and
    the watched alarms): ``record`` puts the minute's ``canary_errors`` and ``primary_errors`` on
    its row and feeds the alarms; ``observe`` says which alarms a tick at ``minute`` finds in
    ALARM and in INSUFFICIENT_DATA. Without one, every alarm is OK and no request fails."""

    def record(self, row: dict[str, Any]) -> None: ...

    def observe(self, minute: int) -> tuple[tuple[str, ...], tuple[str, ...]]: ...


def controller_rules(cfg: DeploymentConfig) -> r.Rules:
    """The Rules the deployed Lambda gets from its environment (stacks/constructs)."""
    return planned_rules(cfg, rollout_capacity_plan(cfg))


def planned_rules(cfg: DeploymentConfig, plan: CapacityPlan) -> r.Rules:
    """:func:`controller_rules` on a capacity plan the caller derived once
    (``sizing.rollout_plan.rollout_capacity_plan``)."""
    ro, waits = cfg.rollout, rollout_waits(cfg)
    return r.Rules(
        steps=tuple(ro.steps_percent),
        bake_seconds=ro.bake_minutes * 60,
        check_seconds=ro.check_interval_minutes * 60,
        evidence=r.EvidenceRules(
            ro.min_canary_invocations_per_step, ro.max_error_rate_increase_percent
        ),
        evidence_timeout_seconds=ro.evidence_timeout_minutes * 60,
        plan=plan,
        capacity_timeout_seconds=waits.capacity_timeout_seconds,
        rollback_capacity_timeout_seconds=waits.rollback_capacity_timeout_seconds,
    )


@dataclass
class _Fleet:
    """One variant: instances, bounds, target tracking."""

    model: InstanceModel
    target: float
    low: int
    high: int
    desired: int
    delay: float
    a: Assumptions
    scale_in_cooldown: float
    ready: list[float] = field(default_factory=list)
    above: int = 0
    below: int = 0
    last_in: float = -math.inf
    backlog: float = 0.0

    def in_service(self, t: float) -> int:
        return sum(1 for x in self.ready if x <= t)

    def starting(self, t: float) -> bool:
        return any(x > t for x in self.ready)

    def set_bounds(self, low: int, high: int) -> None:
        self.low, self.high = low, high
        self.desired = min(max(self.desired, low), high)

    def move(self, t: float) -> None:
        if self.desired > len(self.ready):
            self.ready += [t + self.delay] * (self.desired - len(self.ready))
        elif self.desired < len(self.ready):
            self.ready.sort()
            del self.ready[self.desired :]

    def serve(self, t: float, arrivals: float) -> tuple[float, float, float]:
        """(capacity rpm, served, rejected) for one minute."""
        n = self.in_service(t)
        cap = n * self.model.requests_per_minute
        room = n * (self.model.admission_limit - self.model.concurrency)
        served, rejected, self.backlog = admit(self.backlog, arrivals, cap, room)
        return cap, served, rejected

    def autoscale(self, t: float, arrivals: float) -> None:
        n = self.in_service(t)
        if not n:
            return
        per_instance = (arrivals / 60 * self.model.service_seconds + self.backlog) / n
        self.above = self.above + 1 if per_instance > self.target else 0
        self.below = self.below + 1 if per_instance < self.a.tt_in_fraction * self.target else 0
        wanted = math.ceil(n * per_instance / self.target)
        if self.above >= self.a.tt_out_datapoints and wanted > self.desired:
            self.desired = min(wanted, self.high)
        elif (
            self.below >= self.a.tt_in_datapoints
            and t - self.last_in >= self.scale_in_cooldown
            and max(1, wanted) < self.desired
        ):
            self.desired = max(max(1, wanted), self.low)
            self.last_in = t


def _fleet(
    cfg: DeploymentConfig,
    variant: VariantName,
    a: Assumptions,
    low: int,
    high: int,
    first_rpm: float = 0.0,
) -> _Fleet:
    tt = cfg.scaling.variants[variant].target_tracking
    model = instance_model(cfg, cfg.variants[variant].instance_type, a)
    initial = cfg.variants[variant].initial_instance_count
    if a.warm_start:
        initial = max(initial, warm_start_count(cfg, variant, model, first_rpm))
    initial = min(max(initial, low), high)
    f = _Fleet(
        model=model,
        target=concurrency_target(cfg, variant) if tt and tt.metric == "concurrency" else 1e9,
        low=low,
        high=high,
        desired=initial,
        # the canary runs the new tag (not cached yet: the per-start bound); the primary scales
        # out the tag it already runs, image cached (the scale-out line's figure)
        delay=a.new_tag_seconds(cfg) if variant == "canary" else a.scale_out_seconds(cfg, variant),
        a=a,
        scale_in_cooldown=tt.scale_in_cooldown_seconds if tt else 600,
    )
    f.ready = [0.0] * initial
    return f


def simulate_rollout(
    cfg: DeploymentConfig,
    a: Assumptions | None = None,
    *,
    plan: CapacityPlan | None = None,
    trace: Trace | None = None,
    start_minute: int = START_HOUR_JST * 60,
    capacity_first: bool = True,
    watch: CanaryWatch | None = None,
) -> dict[str, Any]:
    """Replay one rollout; returns per-minute series, the steps and a summary. ``plan``: a
    capacity plan the caller derived once (default: :func:`rollout_capacity_plan`'s);
    ``watch``: the canary's errors and alarms (:class:`CanaryWatch`)."""
    plan = plan if plan is not None else rollout_capacity_plan(cfg)
    a = a or Assumptions()
    tr = trace or normal_day()
    rules = planned_rules(cfg, plan)
    (plo, phi, _), changes = timeline(cfg.scaling, "primary", tr.start, tr.end)
    w0 = cfg.variants.primary.initial_weight + cfg.variants.canary.initial_weight
    rpm0 = float(tr.rpm[0])
    prim = _fleet(cfg, "primary", a, plo, phi, rpm0 * cfg.variants.primary.initial_weight / w0)
    cs = cfg.scaling.variants["canary"]
    can = _fleet(
        cfg, "canary", a, cs.min_capacity, cs.max_capacity,
        rpm0 * cfg.variants.canary.initial_weight / w0,
    )  # fmt: skip
    weights = {
        "primary": cfg.variants.primary.initial_weight,
        "canary": cfg.variants.canary.initial_weight,
    }
    state = store.new_state(
        endpoint="simulated",
        rollout_id="simulated",
        status=r.RUNNING,
        by="simulator",
        rules=rules,
        alarms=[],
        now=start_minute * 60,
    )
    next_tick = float(start_minute * 60)
    # The minute the rollout ended (its record's status no longer locked, or a rollback).
    ended_minute: int | None = None
    rows: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    decisions: list[tuple[int, str, str]] = []
    pending = list(changes)
    for minute in range(tr.minutes):
        t = minute * 60.0
        now = tr.start + timedelta(seconds=t)
        while pending and pending[0].at <= now:
            c = pending.pop(0)
            prim.set_bounds(c.min_capacity, c.max_capacity)
        if state["status"] in r.LOCKED and t >= next_tick:
            firing, no_data = watch.observe(minute) if watch else ((), ())
            obs = _observation(prim, can, weights, t, capacity_first, firing, no_data)
            d = r.decide(state, obs, rules, int(t), partial(_evidence, rows))
            decisions.append((minute, d.kind, d.reason))
            weights = _follow(d, can, weights, steps, state, rules, minute, t, capacity_first)
            state.update(r.transition(state, d, int(t)))
            if state["status"] not in r.LOCKED or d.kind == "rollback":
                ended_minute = minute
            if d.kind == "rollback":
                state["status"] = r.ROLLED_BACK
            next_tick = t + max(1, d.wait_seconds or rules.check_seconds)
        row = _play_minute(prim, can, weights, float(tr.rpm[minute]), t, minute)
        if watch is not None:
            watch.record(row)
        rows.append(row)
    return {
        "trace": tr,
        "rows": rows,
        "steps": steps,
        "decisions": decisions,
        "status": state["status"],
        "summary": _summary(cfg, plan, a, tr, rows, steps, state, start_minute, ended_minute),
    }


def _observation(
    prim: _Fleet,
    can: _Fleet,
    weights: dict[str, float],
    t: float,
    capacity_first: bool,
    firing: tuple[str, ...],
    no_data: tuple[str, ...],
) -> r.Observation:
    """What the controller's tick reads of the endpoint at ``t``: Updating while any instance
    starts; without ``capacity_first`` the canary's instances never hold a step back."""
    return r.Observation(
        endpoint_status="Updating" if prim.starting(t) or can.starting(t) else "InService",
        canary_instances=can.in_service(t) if capacity_first else 10**6,
        canary_weight=weights["canary"],
        primary_instances=max(prim.in_service(t), prim.desired),
        primary_weight=weights["primary"],
        primary_in_service=prim.in_service(t),
        firing=firing,
        no_data=no_data,
    )


def _evidence(rows: list[dict[str, Any]], start: int, end: int) -> r.Evidence:
    """The bake's evidence: the replayed minutes' invocations and errors from ``start`` to
    ``end`` (seconds), what the Lambda's CloudWatch query returns."""
    span = [row for row in rows if start <= row["t"] < end]
    return r.Evidence(
        canary_invocations=sum(row["canary_arrivals"] for row in span),
        canary_errors=sum(row.get("canary_errors", 0.0) for row in span),
        primary_invocations=sum(row["primary_arrivals"] for row in span),
        primary_errors=sum(row.get("primary_errors", 0.0) for row in span),
    )


def _follow(
    d: r.Decision,
    can: _Fleet,
    weights: dict[str, float],
    steps: list[dict[str, Any]],
    state: RolloutState,
    rules: r.Rules,
    minute: int,
    t: float,
    capacity_first: bool,
) -> dict[str, float]:
    """The decision's effect on the simulated endpoint (the canary's bounds and desired count,
    a shift's step in ``steps``); returns the variants' weights after it."""
    if d.kind == "scale" and capacity_first:
        assert d.bounds is not None and d.instances is not None
        can.set_bounds(*d.bounds)
        can.desired = min(max(can.desired, d.instances), can.high)
    elif d.kind == "shift":
        assert d.percent is not None
        steps.append(
            {
                "percent": d.percent,
                "minute": minute,
                "canary_in_service": can.in_service(t),
                "planned": state.get("target_instances"),
            }
        )
        return {"canary": float(d.percent), "primary": float(100 - d.percent)}
    elif d.kind in ("rollback", "restore"):
        can.set_bounds(rules.plan.canary_min, rules.plan.canary_max)
        return {"canary": 0.0, "primary": 100.0}
    return weights


def _play_minute(
    prim: _Fleet, can: _Fleet, weights: dict[str, float], rpm: float, t: float, minute: int
) -> dict[str, Any]:
    """One minute of traffic split by the weights: each fleet moves towards its desired count,
    serves its share and scales on it; the minute's row."""
    for f in (prim, can):
        f.move(t)
    total_w = weights["primary"] + weights["canary"]
    arr = {v: rpm * weights[v] / total_w for v in weights}
    row: dict[str, Any] = {"t": t, "minute": minute, "canary_weight": weights["canary"]}
    for v, f in (("primary", prim), ("canary", can)):
        cap, _served, rejected = f.serve(t, arr[v])
        row.update(
            {
                f"{v}_arrivals": arr[v],
                f"{v}_capacity": cap,
                f"{v}_rejected": rejected,
                f"{v}_in_service": f.in_service(t),
                f"{v}_launched": len(f.ready),
                f"{v}_min": f.low,
                f"{v}_max": f.high,
            }
        )
        f.autoscale(t, arr[v])
    return row


def ceiling_fields(plan: CapacityPlan, percents: list[float]) -> list[str]:
    """The config field that sets the canary's ceiling at each of ``percents`` (the plan's rule,
    sizing/rollout_plan.py build_plan: the higher of the canary's own
    max_capacity and the canary instances that serve that share of the primary's max fleet)."""
    out = []
    for p in percents:
        from_primary = plan.from_primary_max(p)
        if from_primary > plan.canary_max:
            out.append(
                f"at {p:g} %: scaling.variants.primary.max_capacity ({plan.primary_max}): the step "
                f"allows the canary {from_primary} instances, {p:g} % of what the primary's max "
                f"serves; the canary's own max_capacity ({plan.canary_max}) is lower"
            )
        else:
            out.append(f"at {p:g} %: scaling.variants.canary.max_capacity ({plan.canary_max})")
    return out


def _summary(
    cfg: DeploymentConfig,
    plan: CapacityPlan,
    a: Assumptions,
    tr: Trace,
    rows: list[dict[str, Any]],
    steps: list[dict[str, Any]],
    state: RolloutState,
    start_minute: int,
    ended_minute: int | None,
) -> dict[str, Any]:
    def when(minute: int) -> str:
        return (tr.start + timedelta(minutes=minute)).astimezone(JST).strftime("%H:%M JST")

    end = len(rows) if ended_minute is None else ended_minute + 1
    rows = rows[start_minute:end]  # the rollout's own window: start to completion
    live = [x for x in rows if x["canary_weight"] > 0]
    over = [x for x in live if x["canary_arrivals"] > x["canary_capacity"] + 1e-9]
    per_step = []
    for i, s in enumerate(steps):
        end = steps[i + 1]["minute"] if i + 1 < len(steps) else rows[-1]["minute"] + 1
        span = [x for x in rows if s["minute"] <= x["minute"] < end] or rows[-1:]
        head = min(x["canary_capacity"] - x["canary_arrivals"] for x in span)
        per_step.append(
            {
                "percent": s["percent"],
                "at": when(s["minute"]),
                "canary_instances_at_shift": s["canary_in_service"],
                "canary_instances_max": max(x["canary_in_service"] for x in span),
                "canary_traffic_peak_rpm": round(max(x["canary_arrivals"] for x in span)),
                "canary_capacity_min_rpm": round(min(x["canary_capacity"] for x in span)),
                "min_headroom_rpm": round(head),
                "canary_rejected": round(sum(x["canary_rejected"] for x in span)),
            }
        )
    price = instance_model(cfg, cfg.variants.canary.instance_type, Assumptions()).price_per_hour
    return {
        "scenario": NAME,
        "start": when(start_minute),
        "end": when(rows[-1]["minute"]),
        "status": state["status"],
        "steps": per_step,
        "canary_minutes_over_capacity": len(over),
        # of which the canary ran at its max_capacity: the fleet's ceiling, not the rollout's
        # order, was short (a sizing finding for the config, not a controller fault)
        "canary_minutes_over_capacity_at_ceiling": sum(
            1 for x in over if x["canary_launched"] >= x["canary_max"]
        ),
        "ceiling_fields": ceiling_fields(
            plan,
            sorted({x["canary_weight"] for x in over if x["canary_launched"] >= x["canary_max"]}),
        ),
        "canary_peak_rpm": round(max((x["canary_arrivals"] for x in live), default=0.0)),
        "canary_rpm_per_instance": round(
            instance_model(cfg, cfg.variants.canary.instance_type, a).requests_per_minute
        ),
        "canary_rejected": round(sum(x["canary_rejected"] for x in rows)),
        "primary_rejected": round(sum(x["primary_rejected"] for x in rows)),
        "canary_instance_hours": round(sum(x["canary_launched"] for x in rows) / 60, 1),
        "canary_cost_usd": round(sum(x["canary_launched"] for x in rows) / 60 * price, 2),
        "requests": round(sum(x["primary_arrivals"] + x["canary_arrivals"] for x in rows)),
    }
