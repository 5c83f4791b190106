"""The capacity gate for the component shape: a config with ``inference_components:`` ships that
shape, so the gate holds that shape (the ``variants:`` and ``scaling:`` sections then describe the
variant shape the plan prices beside it, which does not ship).

Each scenario of ``fleet.scenarios`` is replayed by :mod:`simulator.components` at the pessimistic
edge of the speed model, and every minute is held to each SLO of ``fleet.slos`` the instance type
can reach (``sizing.slo_reach.unreachable`` leaves the others out, as the variant gate does), with
the limits the variant gate reads (``simulator.slo_gate.limits``, ``variant_limits``: the same
instance type, one copy per GPU):

- ``rejected``: a minute with a 429;
- ``queue_wait_p95`` and ``ttft_p50``: the minute's worst tick above the limit;
- ``ttft_p95``, ``latency_p99`` and ``tpot_p95``: more requests in flight per copy than the speed
  model holds the SLO at (the bound the scaling target reads).

Requests at zero (cold) are no miss: AWS documents that they fail while the first instance
provisions, and the client route absorbs them (clients/bedrock_fallback.py); the report counts them
and says how long they waited. The scenarios replayed: the traffic traces; ``canary-rollout`` as
the adapter release (simulator/adapter_rollout.py: its candidate takes no copy of its own, so the
normal day plus its probes at 14:00); ``deploy-at-peak`` is not replayed (a base update's copies
during a rolling update are not modelled yet): it is reported as such, never as a pass. With
scale to zero the plan's idle week is replayed too.

A miss names the scenario, the minute, the SLO, the figure and what held the copies: their
ceiling (``inference_components.base.copies.max``, or ``instances.max``) or the time a new copy
takes to serve.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta

import numpy as np

from simulator.assumptions import Assumptions
from simulator.capacity import instance_model
from simulator.components import ComponentRun, idle_week, section, simulate_components, summary
from simulator.fleet.scenarios import scaled
from simulator.rollout import START_HOUR_JST
from simulator.slo_gate import IN_FLIGHT_SLOS, in_flight_bound, limits, variant_limits
from simulator.traces import BUILTIN, JST, Trace, normal_day
from sizing.slo_reach import unreachable
from typed_config import DeploymentConfig, GateSlo
from typed_config.adapter_rollout import evidence_thresholds

#: Output tokens of one probe (tools/adapter_release/rollout.py ``probe``: max_tokens 16).
PROBE_TOKENS = 16
NOT_REPLAYED = {
    "deploy-at-peak": "a base update (UpdateInferenceComponent's rolling update) is not replayed "
    "in the component shape yet",
}


@dataclass(frozen=True)
class ComponentMiss:
    scenario: str
    minute: int
    when: str
    slo: str
    figure: float
    limit: float
    minutes: int
    held_by: str

    def line(self) -> str:
        fig = (
            f"{self.figure:,.0f} requests rejected (429)"
            if self.slo == "rejected"
            else f"{self.slo} {self.figure:,.0f} > {self.limit:,.0f}"
        )
        return (
            f"{self.scenario}: first at minute {self.minute}, {self.when}: {fig}; "
            f"{self.minutes} minute(s) miss; held by {self.held_by}"
        )


@dataclass
class ComponentVerdict:
    scenario: str
    best_effort: str | None
    misses: list[ComponentMiss] = field(default_factory=list)
    figures: dict[str, object] = field(default_factory=dict)
    not_replayed: str | None = None
    #: A partial ``fleet.best_effort`` entry (its ``slos``): those SLOs' misses, reported with the
    #: entry's reason and never failed on; every other SLO's misses stay in ``misses``.
    accepted_slos: tuple[GateSlo, ...] = ()
    accepted_reason: str | None = None
    accepted: list[ComponentMiss] = field(default_factory=list)


@dataclass
class ComponentGateReport:
    env: str
    instance_type: str
    edge: str
    held_slos: list[GateSlo]
    verdicts: list[ComponentVerdict]

    @property
    def passed(self) -> bool:
        return not any(m for v in self.verdicts if v.best_effort is None for m in v.misses)

    def render(self) -> str:
        lines = [
            f"capacity gate, {self.env} (the component shape: copies on {self.instance_type}), "
            f"speed at the {self.edge} edge; SLOs held: {', '.join(self.held_slos)}"
        ]
        for v in self.verdicts:
            if v.not_replayed:
                lines.append(f"  NOT REPLAYED {v.scenario}: {v.not_replayed}")
                continue
            f = v.figures
            if v.misses:
                state = "BEST-EFFORT" if v.best_effort else "FAIL"
            else:
                state = "BEST-EFFORT" if v.accepted else "PASS"
            copies, inst = f["copies"], f["instances"]
            assert isinstance(copies, dict) and isinstance(inst, dict)
            lines.append(
                f"  {state:<11} {v.scenario}: copies {copies['min']}-{copies['max']}, instances "
                f"{inst['min']}-{inst['max']}, 429s {f['rejected_429']:,}, cold requests "
                f"{f['cold_failures']:,} (longest wait {f['longest_cold_wait_s']} s), "
                f"${f['cost_per_month_usd']:,}/month"
            )
            lines += [f"              {m.line()}" for m in v.misses[:4]]
            if len(v.misses) > 4:
                lines.append(f"              ... and {len(v.misses) - 4} more")
            if v.accepted:
                lines.append(
                    f"              accepted risk (fleet.best_effort, "
                    f"{', '.join(v.accepted_slos)} only; the other SLOs held): {v.accepted_reason}"
                )
                lines += [f"              accepted: {m.line()}" for m in v.accepted[:4]]
        lines.append("capacity gate: " + ("PASS" if self.passed else "FAIL"))
        return "\n".join(lines)


def _with_probes(cfg: DeploymentConfig, a: Assumptions, trace: Trace) -> Trace:
    """The normal day with an adapter release's probes from 14:00 JST: the release sends them one
    at a time, each waiting for its answer (tools/adapter_release/rollout.py ``probe``: 16
    tokens), to the candidate and the live component, so they add one request in flight until
    all ``2 x min_invocations`` are answered."""
    ic = section(cfg)
    left = 2.0 * evidence_thresholds(ic.rollout, cfg.rollout).min_invocations
    copy = instance_model(cfg, ic.instance_type, a)
    per_minute = 60 / copy.latency(1, copy.prompt_tokens, PROBE_TOKENS).service_seconds
    rpm = np.array(trace.rpm, dtype=float)
    minute = START_HOUR_JST * 60
    while left > 0 and minute < len(rpm):
        rpm[minute] += min(left, per_minute)
        left -= per_minute
        minute += 1
    return replace(trace, name="canary-rollout", rpm=rpm)


def scenario_traces(cfg: DeploymentConfig, a: Assumptions) -> list[tuple[str, Trace | None]]:
    """(scenario, its trace at this environment's share; None: not replayed)."""
    out: list[tuple[str, Trace | None]] = []
    for name in cfg.fleet.scenarios:
        if name in NOT_REPLAYED:
            out.append((name, None))
        elif name == "canary-rollout":
            out.append((name, _with_probes(cfg, a, scaled(cfg, normal_day()))))
        else:
            out.append((name, scaled(cfg, BUILTIN[name])))
    if section(cfg).scales_to_zero:
        out.append(("idle-week", idle_week(cfg)))
    return out


def _misses(
    cfg: DeploymentConfig, a: Assumptions, name: str, run: ComponentRun, held: list[GateSlo]
) -> list[ComponentMiss]:
    ic = section(cfg)
    s, per = run.series, 60 // run.tick_seconds
    minutes = run.trace.minutes

    def by_minute(key: str, how: str) -> np.ndarray:
        rows = s[key].reshape(minutes, per)
        return np.asarray(rows.sum(axis=1) if how == "sum" else rows.max(axis=1))

    n = s["in_service"].reshape(minutes, per)
    in_flight = (s["running"] + s["waiting"]).reshape(minutes, per)
    per_copy = np.divide(in_flight, n, out=np.zeros_like(in_flight), where=n > 0).max(axis=1)
    lim = variant_limits(cfg, "primary", a)
    slo_limits = limits(cfg)
    figures: dict[str, np.ndarray] = {
        "rejected": by_minute("rejected", "sum"),
        "queue_wait_p95": 1000 * by_minute("wait_s", "max"),
        "ttft_p50": 1000 * np.where(by_minute("served", "sum") > 0, by_minute("ttft_s", "max"), 0),
        "ttft_p95": per_copy,
        "latency_p99": per_copy,
        "tpot_p95": per_copy,
    }
    bounds = {
        "rejected": 0.5,
        "queue_wait_p95": slo_limits["queue_wait_p95"],
        "ttft_p50": slo_limits["ttft_p50"],
        **{k: float(in_flight_bound(lim, k)) for k in IN_FLIGHT_SLOS},
    }
    desired = by_minute("copies_desired", "max")
    serving = s["in_service"].reshape(minutes, per).min(axis=1)
    instances = by_minute("instances", "max")
    out = []
    for slo in held:
        bad = np.flatnonzero(figures[slo] > bounds[slo])
        if not bad.size:
            continue
        m = int(bad[0])
        if serving[m] >= ic.base.copies.max:
            held_by = f"inference_components.base.copies.max ({ic.base.copies.max})"
        elif instances[m] >= ic.instances.max and desired[m] > serving[m]:
            held_by = f"inference_components.instances.max ({ic.instances.max})"
        else:
            held_by = (
                f"the time new copies take to serve ({serving[m]:.0f} serving, "
                f"{desired[m]:.0f} desired; a copy on a new instance serves "
                f"{run.times.on_new_instance:g} s after the decision): raise "
                "inference_components.base.copies.min or lower target_requests_per_copy"
            )
        at = run.trace.start.astimezone(JST)
        when = f"{(at + timedelta(minutes=m)):%a %H:%M} JST"
        unit = " in flight per copy" if slo in IN_FLIGHT_SLOS else ""
        out.append(
            ComponentMiss(
                scenario=name,
                minute=m,
                when=when + unit,
                slo=slo,
                figure=float(figures[slo][m]),
                limit=bounds[slo],
                minutes=int(bad.size),
                held_by=held_by,
            )
        )
    return out


def evaluate_components(cfg: DeploymentConfig, a: Assumptions | None = None) -> ComponentGateReport:
    a = a or Assumptions()
    ic = section(cfg)
    gone = unreachable(cfg)
    held = [x for x in cfg.fleet.slos if x not in gone]
    # whole entries (and unannounced spikes marked best-effort) as the variant gate reads them;
    # a partial entry accepts only its own SLOs' misses (simulator.slo_gate.evaluate)
    soft: dict[str, str] = {str(k): r for k, r in cfg.fleet.soft().items()}
    partial = {str(k): b for k, b in cfg.fleet.partial().items()}
    verdicts = []
    for name, trace in scenario_traces(cfg, a):
        if trace is None:
            verdicts.append(ComponentVerdict(name, soft.get(name), not_replayed=NOT_REPLAYED[name]))
            continue
        run = simulate_components(cfg, trace, a)
        misses = _misses(cfg, a, name, run, held)
        part = partial.get(name)
        ok: tuple[GateSlo, ...] = tuple(part.slos or ()) if part else ()
        verdicts.append(
            ComponentVerdict(
                name,
                soft.get(name),
                [m for m in misses if m.slo not in ok],
                summary(run),
                accepted_slos=ok,
                accepted_reason=part.reason if part else None,
                accepted=[m for m in misses if m.slo in ok],
            )
        )
    return ComponentGateReport(cfg.env, ic.instance_type, a.speed_edge, held, verdicts)
