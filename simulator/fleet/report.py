"""What ``make fleet`` prints: the ranked table, the unreachable SLOs with what would reach them,
and the config change that adopts the cheapest fleet."""

from __future__ import annotations

import math

from simulator.assumptions import Assumptions
from simulator.fleet.solver import Solution
from simulator.slo_cost import bound_costs
from simulator.slo_gate import IN_FLIGHT_SLOS, GateReport
from simulator.user_figures import monthly_by_edge
from sizing.fleet_cost import MonthByEdge
from sizing.plan import render_bound_costs
from sizing.scaling_target import concurrency_target, spill_threshold
from sizing.serving_speed import PLANNING_EDGE
from sizing.slo_reach import what_would_reach
from typed_config import VARIANT_NAMES, DeploymentConfig


def _margin(report: GateReport | None) -> str:
    """The held scenarios' worst minute per SLO and least headroom: what the fleet holds. A
    whole best-effort scenario is left out, and so is what a partial entry accepts: its SLOs'
    figures, and its headroom (spare capacity at the binding bound, which it accepts missing)."""
    if report is None:
        return "-"
    worst: dict[str, float] = {}
    for v in report.verdicts:
        if v.best_effort:
            continue
        for k, x in v.worst.items():
            if k not in v.accepted_slos:
                worst[k] = max(worst.get(k, 0.0), x)
    lim = {"queue_wait_p95": report.limits["queue_wait_p95"], "ttft_p50": report.limits["ttft_p50"]}
    parts = []
    for k, x in worst.items():
        if k == "rejected":
            parts.append(f"rejected {x:,.0f}")
        elif k in IN_FLIGHT_SLOS:
            bound = report.in_flight_bounds.get(k, math.inf)
            parts.append(
                f"{_short(k)} {'over' if x > bound else 'held'} ({x:,.0f}/{bound:,.0f} in flight)"
            )
        elif math.isinf(x):
            parts.append(f"{k} unbounded")
        else:
            parts.append(f"{k} {x:,.0f} ms" + (f"/{lim[k]:,.0f}" if k in lim else ""))
    room = [v.headroom_pct for v in report.verdicts if not v.best_effort and not v.accepted_slos]
    if room:
        parts.append(f"headroom {min(room):+.0f} %")
    return ", ".join(parts)


def _short(slo: str) -> str:
    return {"rejected": "0-rejected", "queue_wait_p95": "wait", "ttft_p50": "TTFT",
            "ttft_p95": "TTFT p95", "latency_p99": "p99",
            "tpot_p95": "TPOT"}.get(slo, slo)  # fmt: skip


def months_by_edge(sols: list[Solution], a: Assumptions) -> dict[str, MonthByEdge]:
    """Each solved candidate's month at each edge of the speed model's error (simulator.
    user_figures.monthly_by_edge): the solver's own replays at ``a``'s edge and the optimistic
    one, the central estimate replayed here."""
    out = {}
    for s in sols:
        if not s.solved or s.cfg is None:
            continue
        known = {a.speed_edge: s.monthly_usd}
        if s.optimistic is not None:
            known["optimistic"] = s.optimistic.monthly_usd
        out[s.instance_type] = monthly_by_edge(s.cfg, a, known=known)
    return out


def bound_cost_lines(cfg: DeploymentConfig, a: Assumptions, month: float) -> list[str]:
    """What each bound of ``cfg``'s scaling target costs (simulator.slo_cost), as the plan
    prints it; ``month``: ``cfg``'s month at ``a``'s edge (reused when that is the planning
    edge)."""
    known = month if a.speed_edge == PLANNING_EDGE else None
    return render_bound_costs(bound_costs(cfg, a, known).as_dict())


def table(
    cfg: DeploymentConfig, sols: list[Solution], by_edge: dict[str, MonthByEdge] | None = None
) -> str:
    """The ranked table; ``by_edge``: each candidate's month at each edge (:func:`months_by_edge`),
    printed beside the pessimistic one the ranking uses."""
    budget = cfg.fleet.budget_usd_per_month
    by_edge = by_edge or {}
    lines = [
        f"fleet solver, {cfg.env}: cheapest fleet per instance type holding each of "
        f"{', '.join(cfg.fleet.slos)} that the type can hold (column 'holds') in every minute of "
        f"{', '.join(cfg.fleet.held())} (speed at the pessimistic edge; the optimistic edge "
        "replays the same fleet)",
        f"{'#':>2} {'instance type':<16} {'peak':>5} {'night':>5} {'$/month':>10} "
        f"{'central':>10} {'optimist.':>10} {'target':>7}  holds; worst minute, pessimistic | "
        "optimistic",
    ]
    for i, s in enumerate(sols, 1):
        if not s.solved:
            lines.append(f"{i:>2} {s.instance_type:<16} {'-':>5} {'-':>5} {'-':>10} {'-':>10} "
                         f"{'-':>10} {'-':>7}  no fleet: {s.why_not}")  # fmt: skip
            continue
        assert s.cfg is not None and s.report is not None
        tgt = concurrency_target(s.cfg, "primary")
        holds = "+".join(_short(x) for x in s.report.held_slos)
        e = by_edge.get(s.instance_type)
        central, optimistic = (f"{e.central:,.0f}", f"{e.optimistic:,.0f}") if e else ("-", "-")
        lines.append(
            f"{i:>2} {s.instance_type:<16} {s.peak_instances:>5} {s.night_instances:>5} "
            f"{s.monthly_usd:>10,.0f} {central:>10} {optimistic:>10} {tgt:>7g}  {holds}; "
            f"{_margin(s.report)} | {_margin(s.optimistic)}"
        )
    lines.append(
        "peak: most instances in service in any scenario (both variants); night: the floors; "
        "$/month: the normal day's billed instance-hours (schedules, standby, canary) on each day "
        "of the week whose bounds differ, averaged, x 730/24, plus a canary's raise while a "
        "release runs (simulator/user_figures.py, the plan's figure), at the pessimistic edge of "
        "the speed model (central, optimist.: the same fleet at the central estimate and the "
        "optimistic edge); "
        "target: the concurrency target tracking holds; headroom: the least spare capacity in "
        "any minute"
    )
    for s in sols:
        if len(s.policy_costs) > 1:
            chosen = s.policy.label if s.policy else ""
            costs = "; ".join(
                f"{k} {'no fleet' if c is None else f'${c:,.0f}'}"
                + (" (chosen)" if k == chosen else "")
                for k, c in s.policy_costs.items()
            )
            lines.append(f"policies, {s.instance_type}: {costs}")
    own = cfg.variants.primary.instance_type
    for s in sols:
        if s.solved and s.instance_type == own:
            start = {"least": "the least the config allows, repaired",
                     "config": "the config's own fleet"}[s.start]  # fmt: skip
            lines.append(f"start, {own}: {start}; floors lowered")
    if budget:
        lines.append(f"budget (fleet.budget_usd_per_month): ${budget:,.0f}/month")
    lines.append(
        "greedy search: counts change, and a schedule starts earlier only where a miss at its "
        "start asks for it; a fleet with other times may be cheaper"
    )
    return "\n".join(lines)


def unreachable_advice(cfg: DeploymentConfig, sols: list[Solution]) -> list[str]:
    """For each SLO of ``fleet.slos`` the cheapest fleet does not hold: why (the gate's reason),
    which candidates would hold it, and what would reach it (sizing.slo_reach.what_would_reach:
    a catalog type, a shorter answer, speculative decoding)."""
    best = next((s for s in sols if s.solved and s.report is not None), None)
    if best is None or best.report is None:
        return []
    holders = [s.instance_type for s in sols if s.report is not None and s.solved and s is not best]
    out = []
    for slo, why in best.report.unreachable.items():
        others = [t for t in holders if slo in _held(sols, t)]
        line = f"{slo} not held by the {best.instance_type} fleet: {why}"
        line += f"; held by {', '.join(others)}" if others else "; held by no solved candidate"
        out.append(f"{line}; {what_would_reach(best.cfg or cfg, 'primary', slo)}")
    return out


def _held(sols: list[Solution], itype: str) -> list[str]:
    s = next(x for x in sols if x.instance_type == itype)
    return list(s.report.held_slos) if s.report is not None else []


def config_change(cfg: DeploymentConfig, s: Solution) -> str:
    """The YAML edits that adopt ``s`` (the fields it changes, as the file spells them)."""
    assert s.bounds is not None and s.cfg is not None
    b = s.bounds
    new = s.cfg
    lines = [f"# adopt the {s.instance_type} fleet (make fleet ENV={cfg.env})"]
    if s.instance_type != cfg.variants.primary.instance_type:
        lines.append(f"variants.primary.instance_type: {s.instance_type}")
        lines.append(f"variants.canary.instance_type: {s.instance_type}")
    for v in VARIANT_NAMES:
        iv = new.variants[v].initial_instance_count
        if iv != cfg.variants[v].initial_instance_count:
            lines.append(f"variants.{v}.initial_instance_count: {iv}")
    sv, so = new.scaling.variants, cfg.scaling.variants
    pairs = [
        ("scaling.variants.primary.min_capacity", so["primary"].min_capacity, b.primary_min),
        ("scaling.variants.primary.max_capacity", so["primary"].max_capacity, b.primary_max),
        ("scaling.variants.canary.min_capacity", so["canary"].min_capacity,
         sv["canary"].min_capacity),
        ("scaling.variants.canary.max_capacity", so["canary"].max_capacity, b.canary_max),
        ("rollout.canary_instances", cfg.rollout.canary_instances, new.rollout.canary_instances),
    ]  # fmt: skip
    lines += [f"{k}: {n}  # was {o}" for k, o, n in pairs if o != n]
    if new.rollout.canary_instances is not None and cfg.rollout.canary_instances is None:
        lines.append(
            "#   the canary only while a release runs: the release path raises the canary's "
            f"floor to {new.rollout.canary_instances} when a rollout starts and restores "
            f"{sv['canary'].min_capacity} after it"
        )
    for v in VARIANT_NAMES:
        tn, to = sv[v].target_tracking, so[v].target_tracking
        if (
            tn
            and to
            and (tn.scale_in, tn.scale_in_cooldown_seconds)
            != (
                to.scale_in,
                to.scale_in_cooldown_seconds,
            )
        ):
            lines.append(
                f"scaling.variants.{v}.target_tracking: scale_in {str(tn.scale_in).lower()}, "
                f"scale_in_cooldown_seconds {tn.scale_in_cooldown_seconds}  # was "
                f"{str(to.scale_in).lower()}, {to.scale_in_cooldown_seconds} (scale-in follows "
                "traffic)"
            )
        gone = [
            x.name
            for x in so[v].step_policies
            if x.name not in {y.name for y in sv[v].step_policies}
        ]
        if gone:
            lines.append(
                f"scaling.variants.{v}.step_policies: remove {', '.join(gone)} (target tracking "
                "owns scale-in: one scale-in authority per scalable target)"
            )
    for sc_new, sc_old in zip(new.scaling.schedules, cfg.scaling.schedules, strict=True):
        if sc_new.cron != sc_old.cron:
            lines.append(
                f'scaling.schedules[{sc_new.name}]: cron "{sc_new.cron}"  # was "{sc_old.cron}" '
                "(starts its scale-out lag earlier: its instances serve by the minute that needs "
                "them)"
            )
        if (sc_new.min_capacity, sc_new.max_capacity) != (sc_old.min_capacity, sc_old.max_capacity):
            lines.append(
                f"scaling.schedules[{sc_new.name}]: min_capacity {sc_new.min_capacity}, "
                f"max_capacity {sc_new.max_capacity}  # was {sc_old.min_capacity}, "
                f"{sc_old.max_capacity}"
            )
    for r_new, r_old in zip(
        new.scaling.release_calendar, cfg.scaling.release_calendar, strict=True
    ):
        if (r_new.min_capacity, r_new.max_capacity) != (r_old.min_capacity, r_old.max_capacity):
            lines.append(
                f"scaling.release_calendar[{r_new.name}]: min_capacity {r_new.min_capacity}, "
                f"max_capacity {r_new.max_capacity}  # was {r_old.min_capacity}, "
                f"{r_old.max_capacity}"
            )
    for v in VARIANT_NAMES:
        tt_new = new.scaling.variants[v].target_tracking
        tt_old = cfg.scaling.variants[v].target_tracking
        if tt_new and tt_old and tt_new.slos != tt_old.slos:
            lines.append(
                f"scaling.variants.{v}.target_tracking.slos: {tt_new.slos}  # was {tt_old.slos}"
                " (an SLO this type cannot hold does not bind the target)"
            )
    rb_new = new.deployment.rollback_model_latency_p99_ms
    rb_old = cfg.deployment.rollback_model_latency_p99_ms
    if rb_new != rb_old:
        lines.append(f"deployment.rollback_model_latency_p99_ms: {rb_new}  # was {rb_old}")
    for v in VARIANT_NAMES:
        route_new, route_old = new.variants[v].routing, cfg.variants[v].routing
        if (
            route_new
            and route_old
            and route_new.concurrency_threshold != route_old.concurrency_threshold
        ):
            lines.append(
                f"variants.{v}.routing.concurrency_threshold: leave it out (derived: "
                f"{spill_threshold(new, v)}, the scaling target rounded up)  # was "
                f"{route_old.concurrency_threshold}"
            )
    if len(lines) == 1:
        lines.append("# nothing: the config is this fleet")
    return "\n".join(lines)
