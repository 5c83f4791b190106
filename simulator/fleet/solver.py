"""The fleet from the SLOs: per instance type, the cheapest bounds that pass the capacity gate.

For each candidate type (``fleet.candidates``, else every catalog type whose GPU holds the model),
the search starts from the least the config allows (every floor at the primary's min, the
ceiling at the catalog's 100) and repairs what the gate (simulator/slo_gate.py) reports, one miss
per scaling bound that held the fleet short: a miss within the scale-out time of a recurring
schedule's start is one no count of that schedule repairs (its instances could not serve yet), so
the schedule starts that much earlier (its cron moved, in 5-minute steps, on the same days); any
other miss while desired capacity stood below the ceiling is a floor too low, so the bound in
force then (a schedule, a release's prescale, the variant's own min) is raised by the shortfall
under it; a miss at the ceiling raises the ceiling. It replays every held scenario after each
repair until none misses (or the type cannot: 100 instances are not enough; "no fleet" names the
misses still open). For the config's own instance type the config's own bounds are a second
start: where the gate passes them as they stand, they are kept (no repair), so the solver never
returns, for that type, a fleet costlier than the one the user already has and the gate passes.

From either start every floor the search owns is then lowered, one at a time and by bisection, to
the least that still passes (each variant's all-day floor down to the config's own, each
schedule's and each release's prescale down to the primary's min; a trial is kept only where the
gate passes): a raise one round asked for may be unneeded after later repairs, and a config's own
floor may stand above what its scenarios need. Without this an easier problem (a faster engine,
lower demand, a looser SLO) could end on a costlier fleet (tests/simulator/
test_fleet_solver_property.py holds the property on a small fixture). A floor already at its
least costs no replay, any other at most log2 of its range. The cheaper of the two starts is kept
(``Solution.start`` says which; the table prints it). The ceiling is then set to the most
instances any scenario used, and the gate is run once more on exactly that fleet. Monthly cost:
the normal day's billed instance-hours (schedules, standby and the canary included) x 730 / 24.

The search runs at the pessimistic edge of the speed model (the edge the gate holds); each
solution is also replayed at the optimistic edge, so both are printed. Greedy, not exhaustive:
a cheaper fleet may exist with schedule times moved further (the search moves a schedule only
earlier, only by what a miss at its start asks for), and the table says so.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from simulator.assumptions import Assumptions
from simulator.fleet.scenarios import scaled
from simulator.slo_gate import GateReport, Miss, evaluate, variant_limits
from simulator.traces import BUILTIN
from sizing.capacity import CapacityError, estimate
from sizing.fit_checks import validate_config
from sizing.fleet_cost import monthly
from sizing.slo_reach import unreachable
from sizing.speed_plan import ROLLBACK_LATENCY_HEADROOM, slowest_pool_p99
from typed_config import DeploymentConfig, VariantName
from typed_config.catalog import INSTANCE_CATALOG

#: Capacity's schema limit (typed_config/timing.py): the search's ceiling.
MAX_INSTANCES = 100
MAX_ROUNDS = 30
VARIANT = "variant"
#: Where a search starts (:func:`solve_policy`).
Start = Literal["least", "config"]


#: Target tracking's scale-in cooldown when scale-in follows traffic: what Application Auto
#: Scaling defaults to for SageMaker endpoint variants ("Default: 300 seconds for ... Amazon
#: SageMaker endpoint variants": ScaleInCooldown, TargetTrackingScalingPolicyConfiguration, as the
#: CDK's BaseTargetTrackingProps documents it); "You should scale in conservatively to protect your
#: application's availability", and target tracking already scales in only after its low alarm's
#: 15 one-minute datapoints below 90 % of the target (simulator/assumptions.py), so a cooldown
#: longer than that only delays the next step down.
FOLLOW_TRAFFIC_SCALE_IN_COOLDOWN_S = 300


@dataclass(frozen=True)
class Policy:
    """The policies the solver searches beside the bounds (``fleet.policies``).

    ``canary_release_only``: between releases the canary variant stands at the least a deploy
    accepts and the release path raises it to the solved count (``rollout.canary_instances``)
    while a rollout runs. Zero is not among the choices: an instance-based endpoint's variant
    keeps at least one instance (SageMaker scales an endpoint to zero only when it hosts
    inference components: "Scale an endpoint to zero instances", SageMaker developer guide),
    and a blue/green deploy's canary step must be at most 50 % of every variant's fleet
    (TrafficRoutingConfig, typed_config.loader.guardrail_step_errors): with prod's one-instance
    step the canary stands at 2.

    ``scale_in_follows``: target tracking's own scale-in (DisableScaleIn false, cooldown
    :data:`FOLLOW_TRAFFIC_SCALE_IN_COOLDOWN_S`) replaces every step scale-in policy (one scale-in
    authority per scalable target: typed_config.scaling.VariantScaling)."""

    canary_release_only: bool = False
    scale_in_follows: bool = False

    @property
    def label(self) -> str:
        return (
            ("canary only while a release runs" if self.canary_release_only else "canary standing")
            + ", "
            + ("scale-in follows traffic" if self.scale_in_follows else "scale-in as configured")
        )


def policies(cfg: DeploymentConfig) -> list[Policy]:
    """The policies ``fleet.policies`` lets the solver try."""
    p = cfg.fleet.policies
    canary = {"search": (False, True), "standing": (False,), "release-only": (True,)}[p.canary]
    scale_in = {"search": (False, True), "as-configured": (False,), "follow-traffic": (True,)}[
        p.scale_in
    ]
    return [Policy(c, s) for c in canary for s in scale_in]


@dataclass(frozen=True)
class Bounds:
    """The counts the solver sets: per variant its own min/max, and each schedule's and release's
    min (their max is the variant's)."""

    instance_type: str
    primary_min: int
    primary_max: int
    canary_min: int
    canary_max: int
    schedule_min: dict[str, int] = field(default_factory=dict)
    release_min: dict[str, int] = field(default_factory=dict)
    #: Minutes each recurring schedule fires before its configured time: a floor whose instances
    #: cannot serve by the minute that needs them starts its launch lag earlier (its cron moved).
    schedule_lead: dict[str, int] = field(default_factory=dict)
    #: The policy (:class:`Policy`): how the canary stands between releases, how scale-in works.
    policy: Policy = field(default_factory=lambda: Policy())

    def floor(self, variant: VariantName, owner: str) -> int:
        if owner == VARIANT:
            return self.primary_min if variant == "primary" else self.canary_min
        if owner.endswith(":prescale"):
            return self.release_min[owner.split(":")[0]]
        return self.schedule_min[owner]

    def raised(self, variant: VariantName, owner: str, by: int) -> Bounds:
        return self.with_floor(variant, owner, min(MAX_INSTANCES, self.floor(variant, owner) + by))

    def with_floor(self, variant: VariantName, owner: str, n: int) -> Bounds:
        """These bounds with the floor :meth:`floor` names set to ``n``."""
        if owner == VARIANT:
            if variant == "primary":
                return replace(self, primary_min=n)
            return replace(self, canary_min=n)
        if owner.endswith(":prescale"):
            name = owner.split(":")[0]
            return replace(self, release_min={**self.release_min, name: n})
        return replace(self, schedule_min={**self.schedule_min, owner: n})


def current(cfg: DeploymentConfig) -> Bounds:
    sc = cfg.scaling
    return Bounds(
        instance_type=cfg.variants.primary.instance_type,
        primary_min=sc.variants["primary"].min_capacity,
        primary_max=sc.variants["primary"].max_capacity,
        # a canary raised only while a release runs: the count the solver sized is that raise
        canary_min=cfg.rollout.canary_instances or sc.variants["canary"].min_capacity,
        canary_max=sc.variants["canary"].max_capacity,
        schedule_min={s.name: s.min_capacity for s in sc.schedules},
        release_min={r.name: r.min_capacity for r in sc.release_calendar},
    )


def apply(cfg: DeploymentConfig, b: Bounds) -> DeploymentConfig:
    """``cfg`` with ``b``'s instance type and counts (validated like the YAML); the routing
    threshold and the rollback latency follow the type (both are synth rules)."""
    data: dict[str, Any] = cfg.model_dump(mode="python", exclude_unset=False)
    schedule_variant = {s.name: s.variant for s in cfg.scaling.schedules}
    for v in ("primary", "canary"):
        var = data["variants"][v]
        var["instance_type"] = b.instance_type
        var["instance_pools"] = None  # a candidate is one type (pools: the plan's pool section)
        lo, hi = (b.primary_min, b.primary_max) if v == "primary" else (b.canary_min, b.canary_max)
        sc = data["scaling"]["variants"][v]
        sc["min_capacity"], sc["max_capacity"] = lo, hi
        var["initial_instance_count"] = min(max(var["initial_instance_count"], lo), hi)
    if (
        data["variants"]["canary"]["initial_instance_count"]
        > data["variants"]["primary"]["initial_instance_count"]
    ):
        data["variants"]["primary"]["initial_instance_count"] = min(
            b.primary_max, data["variants"]["canary"]["initial_instance_count"]
        )
    for s in data["scaling"]["schedules"]:
        lead = b.schedule_lead.get(s["name"], 0)
        if lead:
            moved = lead_cron(s["cron"], lead)
            assert moved is not None, f"{s['name']}: {s['cron']} cannot start {lead} min earlier"
            s["cron"] = moved
        s["min_capacity"] = b.schedule_min[s["name"]]
        hi = b.primary_max if schedule_variant[s["name"]] == "primary" else b.canary_max
        s["max_capacity"] = max(hi, s["min_capacity"] + s.get("standby_instances", 0))
        # a variant's ceiling holds every schedule's (synth refuses a schedule above it)
        sc = data["scaling"]["variants"][schedule_variant[s["name"]]]
        sc["max_capacity"] = max(sc["max_capacity"], s["max_capacity"])
    for r in data["scaling"]["release_calendar"]:
        r["min_capacity"] = b.release_min[r["name"]]
        r["max_capacity"] = max(b.primary_max, r["min_capacity"])
        sc = data["scaling"]["variants"][r.get("variant", "primary")]
        sc["max_capacity"] = max(sc["max_capacity"], r["max_capacity"])
    # the routing threshold follows the new type's scaling target (sizing.scaling_target.
    # spill_threshold): derived, as a config that leaves it out has it
    for v in ("primary", "canary"):
        routing = data["variants"][v].get("routing")
        if routing and routing.get("concurrency_threshold"):
            routing["concurrency_threshold"] = None
    _apply_scale_in(data, b.policy)
    out = _validate(cfg, data)
    if b.policy.canary_release_only:
        out = _canary_release_only(cfg, data, b.canary_min)
    else:
        data["rollout"]["canary_instances"] = None
        out = _validate(cfg, data)
    # the scaling target binds only on SLOs this type holds (the gate's own rule)
    gone = set(unreachable(out))
    for v in ("primary", "canary"):
        tt = data["scaling"]["variants"][v].get("target_tracking")
        if tt and tt.get("slos") is not None:
            tt["slos"] = [x for x in tt["slos"] if x not in gone]
    out = _validate(cfg, data)
    healthy = max(slowest_pool_p99(out, v)[0] for v in ("primary", "canary"))
    need = math.ceil(healthy * ROLLBACK_LATENCY_HEADROOM / 1000) * 1000
    if out.deployment.rollback_model_latency_p99_ms < need:
        data["deployment"]["rollback_model_latency_p99_ms"] = need
        out = _validate(cfg, data)
    return out


def _apply_scale_in(data: dict[str, Any], policy: Policy) -> None:
    """Scale-in that follows traffic (:class:`Policy`): target tracking scales in, with the
    cooldown AWS defaults to, and no step policy scales in."""
    if not policy.scale_in_follows:
        return
    for v in ("primary", "canary"):
        sc = data["scaling"]["variants"][v]
        tt = sc.get("target_tracking")
        if tt is None:
            continue
        tt["scale_in"] = True
        tt["scale_in_cooldown_seconds"] = max(
            FOLLOW_TRAFFIC_SCALE_IN_COOLDOWN_S, tt["scale_out_cooldown_seconds"]
        )
        sc["step_policies"] = [p for p in sc["step_policies"] if p["direction"] != "in"]


def _canary_release_only(
    cfg: DeploymentConfig, data: dict[str, Any], raised: int
) -> DeploymentConfig:
    """``data`` with the canary standing at the least count a deploy accepts (tried from 1) and
    raised to ``raised`` while a release runs (rollout.canary_instances)."""
    sc = data["scaling"]["variants"]["canary"]
    last: ValueError | None = None
    for n in range(1, max(1, raised) + 1):
        sc["min_capacity"] = n
        data["variants"]["canary"]["initial_instance_count"] = n
        for s in data["scaling"]["schedules"] + data["scaling"]["release_calendar"]:
            if s.get("variant", "primary") == "canary":
                s["min_capacity"] = max(s["min_capacity"], n)
        data["rollout"]["canary_instances"] = max(n, raised)
        try:
            return _validate(cfg, data)
        except ValueError as exc:
            last = exc
    assert last is not None
    raise last


def lead_cron(cron: str, minutes: int) -> str | None:
    """``cron`` firing ``minutes`` earlier on the same days, or None where that cannot be said by
    moving its minute and hour alone (a minute or hour that is not one number, or a firing that
    would move to the day before)."""
    minute, hour, *rest = cron.split()
    if not (minute.isdigit() and hour.isdigit()):
        return None
    at = int(hour) * 60 + int(minute) - minutes
    if at < 0:
        return None
    return " ".join([str(at % 60), str(at // 60), *rest])


def _validate(cfg: DeploymentConfig, data: dict[str, Any]) -> DeploymentConfig:
    """``data`` validated as ``cfg`` was (an architecture read from a file carried over)."""
    return validate_config(data, architecture=cfg.architecture)


@dataclass
class Solution:
    instance_type: str
    bounds: Bounds | None
    cfg: DeploymentConfig | None
    report: GateReport | None
    #: The same fleet replayed at the optimistic edge.
    optimistic: GateReport | None
    monthly_usd: float
    peak_instances: int
    night_instances: int
    rounds: int
    seconds: float
    why_not: str = ""
    #: Each policy the solver tried (:class:`Policy` label) and its monthly cost (None: no fleet).
    policy_costs: dict[str, float | None] = field(default_factory=dict)
    #: Where the search that won started: the least the config allows, or the config's own bounds.
    start: Start = "least"

    @property
    def policy(self) -> Policy | None:
        return self.bounds.policy if self.bounds is not None else None

    @property
    def solved(self) -> bool:
        return self.report is not None and self.report.passed


def candidates(cfg: DeploymentConfig) -> list[str]:
    """``fleet.candidates``, else every catalog type whose GPU holds the model."""
    names = cfg.fleet.candidates or list(INSTANCE_CATALOG)
    out = []
    for name in names:
        try:
            estimate(cfg, name)
        except CapacityError:
            continue
        out.append(name)
    return out


#: A schedule moves earlier in steps of this many minutes (cron minutes that read well).
LEAD_STEP_MINUTES = 5


def _repair(b: Bounds, misses: list[Miss], crons: dict[str, str]) -> Bounds | None:
    """One round of repairs, each bound at most once. A miss within the scale-out time of a
    recurring schedule's start is repaired by starting that schedule earlier (its instances
    could not serve yet: more of them would not either), where its cron allows; any other by
    raising the bound that held the fleet short, by the largest shortfall asking for it."""
    asks: dict[tuple[VariantName, str, bool], int] = {}
    leads: dict[str, int] = {}
    for m in misses:
        early = m.lag_minutes - m.bound_age_minutes
        # only a bound that raised the floor gains from starting earlier (one that lowered it,
        # an evening's end, is repaired by raising its count)
        if not m.at_max and m.floor_owner in crons and early > 0 and m.floor_rose:
            step = LEAD_STEP_MINUTES * math.ceil(early / LEAD_STEP_MINUTES)
            lead = b.schedule_lead.get(m.floor_owner, 0) + step
            if lead_cron(crons[m.floor_owner], lead) is not None:
                leads[m.floor_owner] = max(leads.get(m.floor_owner, 0), lead)
                continue
        key = (m.variant, m.floor_owner, m.at_max)
        asks[key] = max(asks.get(key, 0), m.shortfall_instances)
    out = replace(b, schedule_lead={**b.schedule_lead, **leads}) if leads else b
    for (variant, owner, at_max), by in asks.items():
        if at_max:
            if variant == "primary":
                if out.primary_max >= MAX_INSTANCES:
                    return None
                out = replace(out, primary_max=min(MAX_INSTANCES, out.primary_max + by))
            else:
                if out.canary_max >= MAX_INSTANCES:
                    return None
                out = replace(out, canary_max=min(MAX_INSTANCES, out.canary_max + by))
        else:
            if out.floor(variant, owner) >= MAX_INSTANCES:
                return None
            out = out.raised(variant, owner, by)
    return out


def _why(exc: Exception) -> str:
    """An exception in one line: a validation error's first line says only "1 validation error",
    so its message lines are joined (the field and the rule)."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip() and "errors.pydantic" not in x]
    return "; ".join(lines[:3])


def _no_fleet_why(report: GateReport | None) -> str:
    """Why no fleet was found in :data:`MAX_ROUNDS` rounds: the misses still open."""
    open_misses = report.misses if report is not None else []
    first = open_misses[0].line() if open_misses else "none reported"
    return (
        f"no fleet after {MAX_ROUNDS} rounds: {len(open_misses)} miss(es) still open, the first: "
        f"{first}"
    )


def _owned_floors(b: Bounds) -> list[tuple[VariantName, str]]:
    """Every floor the search sets, as (variant, owner) for :meth:`Bounds.floor`: the two all-day
    floors first (billed 24/7), then each schedule's and each release's prescale, in config order.
    A schedule's or release's variant does not matter to :meth:`Bounds.floor`."""
    return [
        ("primary", VARIANT),
        ("canary", VARIANT),
        *(("primary", name) for name in b.schedule_min),
        *(("primary", f"{name}:prescale") for name in b.release_min),
    ]


def _gate(cfg: DeploymentConfig, b: Bounds, a: Assumptions, held: list[Any]) -> GateReport | None:
    """The gate's report on ``b``, None where ``b`` does not validate (a trial that fails)."""
    try:
        return evaluate(apply(cfg, b), a, held)
    except (ValueError, CapacityError):
        return None


def _lower_floors(
    cfg: DeploymentConfig,
    b: Bounds,
    report: GateReport,
    floors: Bounds,
    a: Assumptions,
    held: list[Any],
) -> tuple[Bounds, GateReport]:
    """``b`` (which passes: ``report``) with every floor the search owns lowered, one at a time,
    to the least that still passes the gate, by bisection down to ``floors``': each variant's
    all-day floor, each schedule's min and each release's prescale. A repair raised a bound by a
    shortfall at one minute, later repairs may have made that raise unnecessary, and a config's
    own floors may stand above what its scenarios need. Each trial is kept only when the gate
    passes, so the result passes (``report`` is its gate); a floor already at its least costs no
    evaluation, any other at most log2 of its range. Without this the greedy search can return a
    costlier fleet for an easier problem (a faster engine, lower demand, a looser SLO)."""
    for variant, owner in _owned_floors(b):
        lo, hi = floors.floor(variant, owner), b.floor(variant, owner)
        while lo < hi:
            mid = (lo + hi) // 2
            trial = b.with_floor(variant, owner, mid)
            got = _gate(cfg, trial, a, held)
            if got is not None and got.passed:
                b, report, hi = trial, got, mid
            else:
                lo = mid + 1
    return b, report


def _monthly(report: GateReport) -> float:
    return report.monthly_usd


def solve_type(cfg: DeploymentConfig, itype: str, a: Assumptions) -> Solution:
    """The cheapest fleet of ``itype`` over the policies ``fleet.policies`` lets the solver try
    (:func:`policies`), each solved by :func:`solve_policy`; the solution carries every policy's
    monthly cost (None: no fleet under it) for the table's cost line."""
    tried = policies(cfg)
    sols = [solve_policy(cfg, itype, a, p) for p in tried]
    costs = {
        p.label: (s.monthly_usd if s.solved else None) for p, s in zip(tried, sols, strict=True)
    }
    solved = [s for s in sols if s.solved]
    best = min(solved, key=lambda s: s.monthly_usd) if solved else sols[0]
    best.policy_costs = costs
    best.seconds = sum(s.seconds for s in sols)
    return best


def least_bounds(cfg: DeploymentConfig, itype: str, policy: Policy) -> Bounds:
    """The least the config allows on ``itype`` under ``policy``: the variants' own floors, every
    schedule's and release's floor at the primary's min, the ceilings at the catalog's 100."""
    base = current(cfg)
    floor = base.primary_min
    return replace(
        base,
        policy=policy,
        instance_type=itype,
        primary_max=MAX_INSTANCES,
        canary_max=MAX_INSTANCES,
        schedule_min={k: floor for k in base.schedule_min},
        release_min={k: floor for k in base.release_min},
    )


def solve_policy(cfg: DeploymentConfig, itype: str, a: Assumptions, policy: Policy) -> Solution:
    """The cheapest fleet of ``itype`` under ``policy`` (see the module docstring): the greedy
    repair from :func:`least_bounds` and, for the config's own type, the config's own bounds
    where they pass; each with its floors lowered (:func:`_lower_floors`), the cheaper kept."""
    started = time.perf_counter()
    floors = least_bounds(cfg, itype, policy)
    sol = _solve_from(cfg, floors, floors, a, "least")
    if itype == cfg.variants.primary.instance_type:
        own = _solve_from(cfg, replace(current(cfg), policy=policy), floors, a, "config")
        if own.solved and (not sol.solved or own.monthly_usd < sol.monthly_usd):
            sol = own
    sol.seconds = time.perf_counter() - started
    return sol


def _solve_from(
    cfg: DeploymentConfig, b: Bounds, floors: Bounds, a: Assumptions, start: Start
) -> Solution:
    """The fleet from ``b``: from the least (``start`` "least") the gate's misses are repaired
    greedily until it passes; the config's own bounds ("config") are taken only where the gate
    passes them as they are. Then every floor is lowered towards ``floors``', the ceiling set to
    the most instances a scenario used, and the gate run on exactly that fleet."""
    started = time.perf_counter()
    itype = b.instance_type
    held = cfg.fleet.held()
    crons = {sc.name: sc.cron for sc in cfg.scaling.schedules}
    report: GateReport | None = None
    rounds = 0
    try:
        for rounds in range(1, MAX_ROUNDS + 1):
            report = evaluate(apply(cfg, b), a, held)
            if report.passed:
                break
            if start == "config":
                return _failed(itype, report, 0, started, "the config's own fleet misses", start)
            nb = _repair(b, report.misses, crons)
            if nb is None or nb == b:
                why = "100 instances do not carry it"
                return _failed(itype, report, rounds, started, why, start)
            b = nb
        else:
            return _failed(itype, report, rounds, started, _no_fleet_why(report), start)
        if start == "config":
            rounds = 0  # no repair
        b, report = _lower_floors(cfg, b, report, floors, a, held)
        # the ceiling: the most instances a scenario used, then the gate on exactly that fleet
        peaks = {
            v: max(x.peak_instances.get(v, 0) for x in report.verdicts)
            for v in ("primary", "canary")
        }
        primary_max = max(peaks["primary"], b.primary_min, *b.schedule_min.values(), 1)
        # the canary's ceiling: what it used outside a ramp, or the primary's (a ramp's last
        # steps ask for up to the primary's ceiling: sizing.rollout_plan.build_plan)
        b = replace(
            b,
            primary_max=primary_max,
            canary_max=max(b.canary_min, min(peaks["canary"], primary_max)),
        )
        final_cfg = apply(cfg, b)
        report = evaluate(final_cfg, a, list(cfg.fleet.scenarios))
        optimistic = evaluate(final_cfg, replace(a, speed_edge="optimistic"), held)
    except (ValueError, CapacityError) as exc:
        return _failed(itype, report, rounds, started, _why(exc), start)
    peak = max((sum(v.peak_instances.values()) for v in report.verdicts), default=0)
    return Solution(
        instance_type=itype,
        bounds=b,
        cfg=final_cfg,
        report=report,
        optimistic=optimistic,
        monthly_usd=_monthly(report),
        peak_instances=peak,
        night_instances=final_cfg.scaling.variants["primary"].min_capacity
        + final_cfg.scaling.variants["canary"].min_capacity,
        rounds=rounds,
        seconds=time.perf_counter() - started,
        why_not="" if report.passed else "the final fleet misses (see the gate)",
        start=start,
    )


def _failed(
    itype: str,
    report: GateReport | None,
    rounds: int,
    started: float,
    why: str,
    start: Start = "least",
) -> Solution:
    return Solution(itype, None, None, report, None, 0.0, 0, 0, rounds,
                    time.perf_counter() - started, why, start=start)  # fmt: skip


def lower_bound_usd(cfg: DeploymentConfig, itype: str, a: Assumptions) -> float:
    """What a month of the normal day would cost on ``itype`` if the fleet followed demand
    exactly at the scaling target (no floors, no lag, no canary): no fleet of it costs less."""
    trial = apply(cfg, replace(current(cfg), instance_type=itype))
    rpm = variant_limits(trial, "primary", a).rpm_per_instance
    day = scaled(cfg, BUILTIN["normal-day"])
    instance_hours = float(day.rpm.sum()) / max(rpm, 1e-9) / 60
    return monthly(instance_hours * INSTANCE_CATALOG[itype].price_per_hour, 24 * 60)


def solve(
    cfg: DeploymentConfig, a: Assumptions | None = None, types: list[str] | None = None
) -> list[Solution]:
    """Every candidate, cheapest solved first, then the unsolved. Types are tried in order of
    :func:`lower_bound_usd`; one whose lower bound exceeds the cheapest fleet found is not
    searched (branch and bound: it cannot win)."""
    a = a or Assumptions()
    bounds: dict[str, float] = {}
    sols = []
    for t in types or candidates(cfg):
        try:
            bounds[t] = lower_bound_usd(cfg, t, a)
        except (ValueError, CapacityError) as exc:
            sols.append(_failed(t, None, 0, time.perf_counter(), str(exc).splitlines()[0]))
    best = math.inf
    for t in sorted(bounds, key=bounds.__getitem__):
        if bounds[t] > best:
            s = _failed(t, None, 0, time.perf_counter(), "")
            s.why_not = (
                f"not searched: even following demand exactly it costs ${bounds[t]:,.0f}/month, "
                f"above the cheapest fleet found (${best:,.0f})"
            )
            sols.append(s)
            continue
        s = solve_type(cfg, t, a)
        if s.solved:
            best = min(best, s.monthly_usd)
        sols.append(s)
    return sorted(sols, key=lambda s: (not s.solved, s.monthly_usd))
