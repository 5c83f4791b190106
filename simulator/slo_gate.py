"""The capacity gate: does the config's fleet hold every SLO it lists (``fleet.slos``, limits in
``monitoring.slo_*``) in every minute of every scenario it names (``fleet.scenarios``), at the
pessimistic edge of the speed model?

A miss names the scenario, the first minute (in Tokyo and UTC time), the SLO with its figure and
limit, the shortfall (instances and requests/minute) and which scaling bound held the fleet there,
so the fix is one field. A scenario marked ``fleet.best_effort`` is reported with its reason and
does not fail the gate; an entry with ``slos`` accepts only those SLOs' misses in its scenario
(:attr:`ScenarioVerdict.accepted`: reported with the reason, not failed, not in
:attr:`GateReport.misses`, so the fleet solver does not repair them), the others fail as before.
An SLO no concurrency meets on the instance type (the brief's end-to-end
p99 < 2 s for a 180-token answer on an A10G) is not held; :func:`unreachable` names it with what
would reach it, and the plan prints the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from simulator.assumptions import Assumptions
from simulator.capacity import full_queue_wait_s, instance_model
from simulator.fleet.scenarios import ScenarioRun, VariantMinutes, run_scenario
from simulator.user_figures import run_cost_usd, week_monthly
from sizing.fleet_cost import MonthByEdge, release_canary_monthly
from sizing.plan import monthly_line
from sizing.scaling_target import SLO_LIMITS, target_basis
from sizing.slo_reach import SLO_FIELDS, unreachable
from typed_config import VARIANT_NAMES, DeploymentConfig, GateSlo, ScenarioName, VariantName

#: SLOs held as "requests in flight per instance within the most at which the speed model's
#: figure holds" (the bound the scaling target reads): their per-minute figure and limit are
#: in-flight counts, not milliseconds.
#: ``ttft_p95`` is the engine's TTFT tail at the minute's load; the admission queue's wait before
#: the engine is ``queue_wait_p95``'s, held per minute beside it.
IN_FLIGHT_SLOS: tuple[GateSlo, ...] = ("ttft_p95", "latency_p99", "tpot_p95")


@dataclass(frozen=True)
class Miss:
    scenario: ScenarioName
    run: str
    variant: VariantName
    minute: int
    when: str
    slo: GateSlo
    figure: float
    limit: float
    #: Instances more than were in service, and the requests/minute they would carry.
    shortfall_instances: int
    shortfall_rpm: float
    #: The scaling bound in force (a schedule's name, a release prescale, or "variant").
    floor_owner: str
    #: Desired capacity stood at max_capacity: the ceiling, not the floor, was short.
    at_max: bool
    #: Minutes of this run that miss this SLO on this variant under this bound.
    minutes: int = 1
    #: How long the bound had been in force at the first minute, and the variant's scale-out
    #: time (decision to serving), in minutes: a miss within the scale-out time of its bound's
    #: start is one no count of that bound repairs (its instances could not serve yet); the
    #: bound must start earlier (simulator/fleet/solver.py).
    bound_age_minutes: int = 10**6
    lag_minutes: int = 0
    #: The bound raised MinCapacity when it started (False: it lowered or kept it, so starting it
    #: earlier cannot bring instances sooner; unknown reads as True).
    floor_rose: bool = True

    def line(self) -> str:
        fig = "unbounded" if math.isinf(self.figure) else f"{self.figure:,.0f}"
        if self.slo == "rejected":
            what = f"{fig} requests rejected"
        elif self.slo in IN_FLIGHT_SLOS:
            held = "unbounded" if math.isinf(self.figure) else f"{self.figure:,.1f}"
            what = (
                f"{self.slo}: {held} in flight per instance > {self.limit:,.0f}, the most at "
                "which it holds"
            )
        else:
            what = f"{self.slo} {fig} ms > {self.limit:,.0f} ms"
        bound = (
            f"max_capacity {self.floor_owner}" if self.at_max else f"floor of {self.floor_owner}"
        )
        return (
            f"{self.scenario} ({self.run}), {self.variant}: first at minute {self.minute}, "
            f"{self.when}: {what}; short {self.shortfall_instances} instance(s) "
            f"({self.shortfall_rpm:,.0f} requests/minute); {self.minutes} minute(s) miss; the "
            f"fleet was held by the {bound}"
        )


@dataclass
class ScenarioVerdict:
    scenario: ScenarioName
    best_effort: str | None
    misses: list[Miss]
    #: Worst minute per held SLO over the scenario's runs and variants; an SLO no run of the
    #: scenario measures (the canary ramp's replay serves each minute up to capacity and has no
    #: per-request times) is absent: :attr:`unmeasured` names it.
    worst: dict[str, float]
    #: Instance-hours and cost per run label (for the solver's cost).
    cost_usd: dict[str, float] = field(default_factory=dict)
    #: The share of the week each run label stands for (simulator/week.py).
    share_of_week: dict[str, float] = field(default_factory=dict)
    peak_instances: dict[VariantName, int] = field(default_factory=dict)
    #: The least spare capacity in any minute: in-service instances x requests/minute per
    #: instance at the binding bound, over demand, minus 1 (percent; negative: short).
    headroom_pct: float = math.inf
    #: A partial ``fleet.best_effort`` entry: the SLOs whose misses are accepted risk here, its
    #: reason, and those misses (reported, never failed on).
    accepted_slos: tuple[GateSlo, ...] = ()
    accepted_reason: str | None = None
    accepted: list[Miss] = field(default_factory=list)
    #: Held SLOs no run of the scenario measures (see :attr:`worst`).
    unmeasured: tuple[str, ...] = ()


@dataclass
class GateReport:
    env: str
    instance_types: dict[VariantName, str]
    edge: str
    held_slos: list[GateSlo]
    unreachable: dict[str, str]
    verdicts: list[ScenarioVerdict]
    limits: dict[str, float] = field(default_factory=dict)
    budget_usd_per_month: float | None = None
    #: The wait in a full queue (simulator.capacity.full_queue_wait_s, the typical request): a
    #: worst minute at it is the admission cap, not how long waits would grow.
    queue_wait_cap_ms: float = 0.0
    #: A canary raised only while a release runs: what its raise adds to a month
    #: (sizing.fleet_cost.release_canary_monthly).
    release_canary_usd_per_month: float = 0.0
    #: For each SLO held in flight (IN_FLIGHT_SLOS): the most requests in flight per instance at
    #: which it holds, the lowest over the variants (what the worst-minute figures compare with).
    in_flight_bounds: dict[str, int] = field(default_factory=dict)
    #: The month at each edge of the speed model's error (simulator.user_figures.
    #: monthly_by_edge), when the caller priced them (make capacity-gate does; the solver's
    #: many evaluations do not).
    monthly_by_edge: MonthByEdge | None = None

    @property
    def misses(self) -> list[Miss]:
        return [m for v in self.verdicts if v.best_effort is None for m in v.misses]

    @property
    def passed(self) -> bool:
        return not self.misses

    @property
    def monthly_usd(self) -> float:
        """The month the normal day bills: each weekday replay's cost weighted by the share of
        the week it stands for (simulator/week.py), x 730 h / 24 h (0: no normal day)."""
        day = next((v for v in self.verdicts if v.scenario == "normal-day"), None)
        if day is None or not day.cost_usd:
            return 0.0
        return week_monthly(day.cost_usd, day.share_of_week, self.release_canary_usd_per_month)

    def render(self) -> str:
        types = ", ".join(f"{v} {t}" for v, t in self.instance_types.items())
        lines = [
            f"capacity gate, {self.env} ({types}),"
            f" speed at the {self.edge} edge; SLOs held: {', '.join(self.held_slos)}"
        ]
        for name, why in self.unreachable.items():
            lines.append(f"  not held on this instance type: {name}: {why}")
        for v in self.verdicts:
            worst = ", ".join(
                _fmt(k, x, self.queue_wait_cap_ms, self.in_flight_bounds.get(k))
                for k, x in v.worst.items()
            )
            if v.misses:
                state = "BEST-EFFORT" if v.best_effort else "FAIL"
            else:
                state = "BEST-EFFORT" if v.accepted else "PASS"
            lines.append(
                f"  {state:<11} {v.scenario}: worst minute {worst}; least headroom "
                f"{v.headroom_pct:+.0f} %"
            )
            if v.unmeasured:
                lines.append(
                    f"              not measured by this replay: {', '.join(v.unmeasured)} "
                    "(it serves each minute up to capacity: held on 429s and demand above it)"
                )
            if len(v.cost_usd) > 1:
                lines.append(f"              replayed on: {'; '.join(v.cost_usd)}")
            if v.best_effort and v.misses:
                lines.append(f"              accepted risk (fleet.best_effort): {v.best_effort}")
            for m in v.misses[:4]:
                lines.append(f"              {m.line()}")
            if len(v.misses) > 4:
                lines.append(f"              ... and {len(v.misses) - 4} more")
            if v.accepted:
                lines.append(
                    f"              accepted risk (fleet.best_effort, "
                    f"{', '.join(v.accepted_slos)} only; the other SLOs held): "
                    f"{v.accepted_reason}"
                )
                lines += [f"              accepted: {m.line()}" for m in v.accepted[:4]]
                if len(v.accepted) > 4:
                    lines.append(f"              ... and {len(v.accepted) - 4} more accepted")
        per_month = self.monthly_usd
        if per_month:
            line, warning = monthly_line(
                self.monthly_by_edge or per_month, self.budget_usd_per_month
            )
            lines.append(
                "  cost: the normal day's billed instance-hours, averaged over the week's days, "
                f"x 730/24 = {line} (schedules, standby and the canary included"
                + (
                    f"; the canary's raise while a release runs: "
                    f"${self.release_canary_usd_per_month:,.0f}/month)"
                    if self.release_canary_usd_per_month
                    else ")"
                )
            )
            if warning:
                lines.append(f"  WARNING: {warning}")
        lines.append("capacity gate: " + ("PASS" if self.passed else "FAIL"))
        return "\n".join(lines)


def _fmt(slo: str, x: float, queue_cap_ms: float = 0.0, in_flight_bound: int | None = None) -> str:
    if math.isinf(x):
        return f"{slo} unbounded"
    if slo in IN_FLIGHT_SLOS:
        holds = f" (holds up to {in_flight_bound})" if in_flight_bound is not None else ""
        return f"{slo} {x:,.1f} in flight per instance{holds}"
    capped = slo == "queue_wait_p95" and queue_cap_ms > 0 and abs(x - queue_cap_ms) <= 1e-3 * x
    return (
        f"{slo} {x:,.0f}"
        + ("" if slo == "rejected" else " ms")
        + (" (the admission cap: a full queue; the overflow got 429)" if capped else "")
    )


def limits(cfg: DeploymentConfig) -> dict[GateSlo, float]:
    """Each gate SLO's limit: its ``monitoring`` field (sizing.slo_reach.SLO_FIELDS); 0 429s."""
    return {
        slo: 0.0 if slo == "rejected" else float(getattr(cfg.monitoring, field))
        for slo, field in SLO_FIELDS.items()
    }


@dataclass(frozen=True)
class _VariantLimits:
    rpm_per_instance: float
    #: Most requests in flight per instance at which end-to-end p99 holds (0: never).
    p99_in_flight: int
    #: Most requests in flight per instance at which TPOT p95 holds (the bound the scaling
    #: target reads: at least one where the SLO is reachable at the central estimate).
    tpot_in_flight: int = 0
    #: A scale-out's decision to serving, whole minutes.
    lag_minutes: int = 0
    #: Most requests in flight per instance at which TTFT p95 holds (0: never).
    ttft_p95_in_flight: int = 0


def variant_limits(cfg: DeploymentConfig, v: VariantName, a: Assumptions) -> _VariantLimits:
    basis = target_basis(cfg, v)
    model = instance_model(cfg, cfg.variants[v].instance_type, a)
    shape = model.latency(basis.concurrency, model.prompt_tokens, model.output_tokens)
    p99 = next(b for b in basis.slo if b.slo == "end-to-end p99")

    def held_up_to(key: str) -> int:
        # reachable at the central estimate: at least one in flight, as the scaling target reads
        c = next(b for b in basis.slo if b.slo == SLO_LIMITS[key][0]).concurrency
        return max(1, c) if basis.reachable(key) else c

    lag = math.ceil(a.scale_out_seconds(cfg, v) / 60)
    return _VariantLimits(
        shape.requests_per_minute, p99.concurrency, held_up_to("tpot_p95"), lag,
        held_up_to("ttft_p95"),
    )  # fmt: skip


def _figures(vm: VariantMinutes, lim: _VariantLimits, slo: GateSlo) -> np.ndarray:
    """Per minute: the SLO's figure (NaN where the run does not measure it)."""
    if slo == "rejected":
        return vm.rejected
    if slo == "queue_wait_p95":
        return vm.queue_wait_p95_ms
    if slo == "ttft_p50":
        return vm.ttft_p50_ms
    # ttft_p95, latency_p99 and tpot_p95 (IN_FLIGHT_SLOS): the requests in flight per instance, held
    # within the concurrency at which the speed model's figure holds (the bound the scaling
    # target reads; the figures grow with the load, so the bound is the SLO)
    return vm.in_flight_per_instance


def in_flight_bound(lim: _VariantLimits, slo: GateSlo) -> int:
    """The most requests in flight per instance at which ``slo`` (one of IN_FLIGHT_SLOS) holds."""
    return {"tpot_p95": lim.tpot_in_flight, "ttft_p95": lim.ttft_p95_in_flight}.get(
        slo, lim.p99_in_flight
    )


def _misses_of(
    run: ScenarioRun,
    vm: VariantMinutes,
    lim: _VariantLimits,
    slo: GateSlo,
    limit: float,
) -> tuple[list[Miss], float]:
    """The run's misses of ``slo`` on one variant, one per scaling bound that held the fleet in
    a missing minute (and whether it stood at its ceiling there): each with its own first minute
    and its own largest shortfall, so a repair raises the bound that held the fleet short, by
    what it was short then (not the first minute's bound by the run's largest shortfall)."""
    fig = _figures(vm, lim, slo)
    if slo in IN_FLIGHT_SLOS:
        limit = in_flight_bound(lim, slo)
    valid = ~np.isnan(fig)
    bad = valid & (fig > (0.5 if slo == "rejected" else limit))
    # NaN: the run does not measure this SLO in any minute (never a 0 that reads as held)
    worst = float(np.max(fig[valid])) if valid.any() else math.nan
    if not bad.any():
        return [], worst
    need = need_rpm = np.ceil(vm.demand_rpm / max(lim.rpm_per_instance, 1e-9))
    if slo in IN_FLIGHT_SLOS:
        # held as in flight per instance: enough instances to bring the minute's requests in
        # flight within the bound (throughput alone can be met while each runs too many)
        bound = max(1, in_flight_bound(lim, slo))
        held = np.nan_to_num(vm.in_flight_per_instance * vm.in_service, posinf=0.0)
        need = np.maximum(need, np.ceil(held / bound))
    short = np.where(bad, need - vm.in_service, 0)
    # the ceiling held the fleet short only where the fleet stood at it and it was below what
    # the demand's throughput needs: desired at the ceiling with instances still launching, or a
    # backlog left by a late floor, is a floor's lag, not a low ceiling
    at_max = (vm.desired >= vm.max_cap) & (vm.in_service >= vm.max_cap) & (vm.max_cap < need_rpm)
    groups: dict[tuple[str, bool], list[int]] = {}
    for m in np.flatnonzero(bad):
        groups.setdefault((vm.floor_owner[m], bool(at_max[m])), []).append(int(m))
    out = []
    for (owner, ceiling), minutes in groups.items():
        first = minutes[0]
        k = max(minutes, key=lambda m: short[m])
        age = 0
        while first - age - 1 >= 0 and vm.floor_owner[first - age - 1] == owner:
            age += 1
        before = first - age - 1
        rose = (
            before < 0
            or np.isnan(vm.min_cap[first])
            or bool(vm.min_cap[first] > vm.min_cap[before])
        )
        out.append(
            Miss(
                scenario=run.scenario,
                run=run.label,
                variant=vm.variant,
                minute=first,
                when=run.when(first),
                slo=slo,
                figure=float(fig[first]),
                limit=limit,
                shortfall_instances=max(1, int(short[k])),
                shortfall_rpm=max(
                    0.0, float(vm.demand_rpm[k] - vm.in_service[k] * lim.rpm_per_instance)
                ),
                floor_owner=owner,
                at_max=ceiling,
                minutes=len(minutes),
                # from the run's start the bound's age is unknown: taken as long in force
                bound_age_minutes=age if first - age > 0 else 10**6,
                lag_minutes=lim.lag_minutes,
                floor_rose=rose,
            )
        )
    return sorted(out, key=lambda x: x.minute), worst


def evaluate(
    cfg: DeploymentConfig,
    a: Assumptions | None = None,
    scenarios: list[ScenarioName] | None = None,
) -> GateReport:
    """Replay ``scenarios`` (default ``fleet.scenarios``) and hold each minute to the SLOs."""
    a = a or Assumptions()
    names = scenarios or list(cfg.fleet.scenarios)
    soft = cfg.fleet.soft()
    partial = cfg.fleet.partial()
    gone = unreachable(cfg)
    held = [s for s in cfg.fleet.slos if s not in gone]
    lims = {v: variant_limits(cfg, v, a) for v in VARIANT_NAMES}
    slo_limits = limits(cfg)
    verdicts = []
    for name in names:
        part = partial.get(name)
        ok_slos: tuple[GateSlo, ...] = tuple(part.slos or ()) if part else ()
        misses: list[Miss] = []
        accepted: list[Miss] = []
        worst: dict[str, float] = {}
        cost: dict[str, float] = {}
        peak: dict[VariantName, int] = {}
        headroom = math.inf
        weights: dict[str, float] = {}
        for run in run_scenario(cfg, name, a):
            weights[run.label] = run.share_of_week
            cost[run.label] = run_cost_usd(run)
            for v, vm in run.variants.items():
                peak[v] = max(peak.get(v, 0), int(np.max(vm.in_service)))
                busy = vm.demand_rpm > 1.0
                if busy.any():
                    spare = vm.in_service[busy] * lims[v].rpm_per_instance / vm.demand_rpm[busy]
                    headroom = min(headroom, 100 * (float(spare.min()) - 1))
                for slo in held:
                    found, w = _misses_of(run, vm, lims[v], slo, slo_limits[slo])
                    if not math.isnan(w):
                        worst[slo] = max(worst.get(slo, 0.0), w)
                    if slo in ok_slos:
                        accepted += found
                    else:
                        misses += found
        verdicts.append(
            ScenarioVerdict(
                name,
                soft.get(name),
                misses,
                worst,
                cost,
                weights,
                peak,
                headroom,
                accepted_slos=ok_slos,
                accepted_reason=part.reason if part else None,
                accepted=accepted,
                unmeasured=tuple(s for s in held if s not in worst),
            )
        )
    return GateReport(
        env=cfg.env,
        instance_types={v: cfg.variants[v].instance_type for v in VARIANT_NAMES},
        edge=a.speed_edge,
        held_slos=held,
        unreachable=gone,
        verdicts=verdicts,
        limits={str(k): x for k, x in slo_limits.items()},
        budget_usd_per_month=cfg.fleet.budget_usd_per_month,
        queue_wait_cap_ms=max(_queue_cap_ms(cfg, v, a) for v in VARIANT_NAMES),
        release_canary_usd_per_month=release_canary_monthly(cfg),
        in_flight_bounds={
            str(slo): min(in_flight_bound(lims[v], slo) for v in VARIANT_NAMES)
            for slo in held
            if slo in IN_FLIGHT_SLOS
        },
    )


def _queue_cap_ms(cfg: DeploymentConfig, variant: VariantName, a: Assumptions) -> float:
    """The wait in ``variant``'s full queue for the typical request (simulator.run's rule)."""
    m = instance_model(cfg, cfg.variants[variant].instance_type, a)
    return 1000 * full_queue_wait_s(
        m.admission_limit, m.typical.concurrency, m.typical.service_seconds
    )
