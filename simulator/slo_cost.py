"""What each bound of the scaling target costs a month (issue 42 item 5): for each SLO that
``target_tracking.slos`` lets bind, the month if it is dropped (the target then set by the next
binding bound) and if its limit is tightened by 20 %; for each SLO the config leaves out that is
reachable at the central estimate, the month if it is added. The plan prints them under its cost
line and ``make fleet`` under its table (:func:`sizing.plan.render_bound_costs`).

Each figure is :func:`simulator.user_figures.monthly_bill`, the plan's one monthly figure: the
normal day replayed with the fleet's scaling at the pessimistic edge, same floors, same
schedules; only the concurrency target moves (sizing.scaling_target, recomputed from the changed
config). A change that leaves every variant's target where it is costs nothing and is not
replayed, and targets already priced are not replayed twice, so the table costs one replay per
distinct target.

A tightened SLO that is no longer reachable at the central estimate stops binding
(sizing.scaling_target: an SLO is dropped as unreachable only there); its row says so instead of
pricing a fleet the rule would not build.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from simulator.assumptions import Assumptions
from simulator.user_figures import monthly_bill
from sizing.scaling_target import SLO_LIMITS, concurrency_target, pool_bases, target_basis
from sizing.serving_speed import PLANNING_EDGE
from typed_config import VARIANT_NAMES, DeploymentConfig, VariantName

#: How much a tightened SLO's limit is tightened: x 0.8, 20 % (the issue's what-if).
TIGHTEN_FACTOR = 0.8

Change = Literal["drop", "tighten", "add"]

#: A row's note when the change leaves the SLO unreachable at the central estimate.
STOPS_BINDING = "not reachable at the central estimate: it would stop binding, not cost more"
NO_BIND = "not reachable at the central estimate: it cannot bind"


@dataclass(frozen=True)
class BoundCost:
    """One what-if: ``change`` applied to ``slo`` on every variant whose target tracks
    concurrency, and what the month and the primary's target become."""

    slo: str
    change: Change
    #: The SLO's limit (ms) after the change (as configured for a drop or an add).
    limit_ms: float
    #: The primary's target and the bound that sets it, after the change.
    target: float
    binding: str
    #: The month after the change; None: not priced (``note`` says why).
    monthly_usd: float | None
    #: The month before it (the plan's figure), for the difference.
    base_usd: float
    note: str = ""

    @property
    def delta_usd(self) -> float | None:
        return None if self.monthly_usd is None else self.monthly_usd - self.base_usd

    def as_dict(self) -> dict[str, Any]:
        return {
            "slo": self.slo,
            "change": self.change,
            "limit_ms": self.limit_ms,
            "target": self.target,
            "binding": self.binding,
            "monthly_usd": None if self.monthly_usd is None else round(self.monthly_usd, 2),
            "delta_usd": None if self.delta_usd is None else round(self.delta_usd, 2),
            "note": self.note,
        }


@dataclass(frozen=True)
class BoundCosts:
    """The scaling target as configured and each what-if's cost."""

    #: The primary's target, the bound that sets it, and the month.
    target: float
    binding: str
    monthly_usd: float
    rows: tuple[BoundCost, ...]
    #: Where the figures come from (printed with them).
    edge: str = PLANNING_EDGE

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "binding": self.binding,
            "monthly_usd": round(self.monthly_usd, 2),
            "edge": self.edge,
            "tighten_factor": TIGHTEN_FACTOR,
            "rows": [r.as_dict() for r in self.rows],
        }


def tracked(cfg: DeploymentConfig) -> list[VariantName]:
    """The variants whose target tracking holds a concurrency target (the ones SLOs bind)."""
    out = []
    for v in VARIANT_NAMES:
        tt = cfg.scaling.variants[v].target_tracking
        if tt is not None and tt.metric == "concurrency":
            out.append(v)
    return out


def with_slos(cfg: DeploymentConfig, slos: dict[VariantName, list[str]]) -> DeploymentConfig:
    """``cfg`` with each named variant's ``target_tracking.slos`` replaced."""
    variants = {}
    for v, keys in slos.items():
        sv = cfg.scaling.variants[v]
        assert sv.target_tracking is not None
        tt = sv.target_tracking.model_copy(update={"slos": keys})
        variants[v] = sv.model_copy(update={"target_tracking": tt})
    scaling = cfg.scaling.model_copy(update={"variants": {**cfg.scaling.variants, **variants}})
    return cfg.model_copy(update={"scaling": scaling})


def with_limit(cfg: DeploymentConfig, slo: str, limit_ms: float) -> DeploymentConfig:
    """``cfg`` with SLO ``slo``'s monitoring limit (sizing.scaling_target.SLO_LIMITS) set."""
    monitoring = cfg.monitoring.model_copy(update={SLO_LIMITS[slo][1]: limit_ms})
    return cfg.model_copy(update={"monitoring": monitoring})


def limit_ms(cfg: DeploymentConfig, slo: str) -> float:
    return float(getattr(cfg.monitoring, SLO_LIMITS[slo][1]))


def _targets(cfg: DeploymentConfig) -> tuple[float, ...]:
    return tuple(concurrency_target(cfg, v) for v in tracked(cfg))


def _reachable(cfg: DeploymentConfig, slo: str, variants: list[VariantName]) -> bool:
    """Whether ``slo`` holds at the central estimate on every pool of ``variants`` (the rule by
    which an SLO binds: sizing.scaling_target.TargetBasis.reachable)."""
    return all(b.reachable(slo) for v in variants for b in pool_bases(cfg, v))


def bound_costs(
    cfg: DeploymentConfig, a: Assumptions | None = None, month: float | None = None
) -> BoundCosts:
    """Each SLO's cost to ``cfg``'s month (see the module); ``month``: the plan's figure when
    the caller has it (the same replay, not run again)."""
    a = replace(a or Assumptions(), speed_edge=PLANNING_EDGE)
    base = monthly_bill(cfg, a) if month is None else month
    variants = tracked(cfg)
    if not variants:
        return BoundCosts(0.0, "no concurrency target tracking", base, ())
    primary = variants[0]
    basis = target_basis(cfg, primary)
    priced: dict[tuple[float, ...], float] = {_targets(cfg): base}

    def row(slo: str, change: Change, changed: DeploymentConfig, note: str = "") -> BoundCost:
        b = target_basis(changed, primary)
        target = concurrency_target(changed, primary)
        lim = limit_ms(changed, slo)
        if note:
            return BoundCost(slo, change, lim, target, b.binding, None, base, note)
        key = _targets(changed)
        if key not in priced:
            priced[key] = monthly_bill(changed, a)
        return BoundCost(slo, change, lim, target, b.binding, priced[key], base)

    listed: dict[VariantName, list[str]] = {}
    for v in variants:
        tt = cfg.scaling.variants[v].target_tracking
        assert tt is not None
        listed[v] = list(tt.slos)
    rows = []
    for slo in SLO_LIMITS:
        if any(slo in keys for keys in listed.values()):
            binds_on = [v for v, keys in listed.items() if slo in keys]
            rest = {v: [k for k in keys if k != slo] for v, keys in listed.items()}
            rows.append(row(slo, "drop", with_slos(cfg, rest)))
            tight = with_limit(cfg, slo, limit_ms(cfg, slo) * TIGHTEN_FACTOR)
            stops = not _reachable(tight, slo, binds_on)
            rows.append(row(slo, "tighten", tight, STOPS_BINDING if stops else ""))
        else:
            added = with_slos(cfg, {v: [*keys, slo] for v, keys in listed.items()})
            rows.append(row(slo, "add", added, "" if _reachable(added, slo, variants) else NO_BIND))
    target = concurrency_target(cfg, primary)
    return BoundCosts(target, basis.binding, base, tuple(rows))
