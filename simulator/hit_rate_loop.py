"""The prefix-cache hit rate at the fleet's own load: the fixed point of rate -> fleet -> rate.

The hit rate sets the fleet (more cached tokens: shorter prefills, more requests per instance, a
different scaling target) and the fleet sets the hit rate (prefix-aware routing keeps a
conversation on its instance only while that instance is under its spill threshold, so a fleet at
its capacity spills and loses its cache hits). Planning on a rate measured on another fleet is
circular: the 33 % once planned came from an overloaded 8-instance evening, on which the same
simulation finds 56-61 % once the fleet holds the load (issue 42).

One iteration (:func:`rates_at_load`): the fleet for the current rate (the config's own, or the
solver's fleet for that rate: ``fleet_for``) replays the normal day with the capacity gate's code
(simulator.run.simulate, the rate in its speed), which says how many primary instances serve at
each routing window (simulator.routing.windows.WINDOWS); the routing simulation
(simulator.routing.fleet, timed by the gate's own step-cost constants) replays sessions on that
many instances behind the configured routing, its spill threshold the scaling target's
(sizing.scaling_target.spill_threshold). The next rate is the lowest window's (the pessimistic
one: the busiest window sizes the fleet). It stops when two rates are within :data:`TOLERANCE`
and fails after :data:`MAX_ITERATIONS` naming every rate it went through (:class:`NoFixedPoint`):
no silent non-convergence. A measured rate in the config (``fleet.prefix_cache_hit_rate``) is the
answer without any of this.

The spread of the rate over fleets that hold the load (no request rejected) is the rate's error
(:attr:`FixedPoint.spread`): at the fixed point each window is replayed again on
:data:`SPREAD_SIZES` times its instances (fleets around the solved one: a fleet that tracks the
load a little tighter or looser), and the spread is the highest minus the lowest rate of those
that reject nothing; sizing/prefix_hit_rate.py exports it for the plan's band.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from simulator.assumptions import Assumptions
from simulator.fleet.scenarios import scaled
from simulator.routing.fleet import Fleet
from simulator.routing.strategies import configured_routing
from simulator.routing.windows import WINDOWS, windows
from simulator.run import simulate
from simulator.sessions import SessionModel
from simulator.traces import normal_day
from sizing.prefix_hit_rate import FIXED_POINT_TOLERANCE
from typed_config import DeploymentConfig

#: Two successive rates within this (absolute, share of prompt tokens) are the fixed point (one
#: value with the error sizing.prefix_hit_rate states no error below).
TOLERANCE = FIXED_POINT_TOLERANCE
#: Iterations before :class:`NoFixedPoint`; the loop on prod settles in 2-3.
MAX_ITERATIONS = 6
SEED = 0
#: Fleet sizes around the one the gate's replay has in service, as factors, for the spread.
SPREAD_SIZES = (0.75, 1.0, 1.5)


class NoFixedPoint(ValueError):
    """The hit rate did not settle; the message names every rate it went through."""


@dataclass(frozen=True)
class RateAtLoad:
    """The routing simulation on one window of the fleet's own normal day."""

    window: str
    instances: int
    hit_rate: float
    spilled_share: float
    rejected: int
    requests: int

    @property
    def holds(self) -> bool:
        return self.rejected == 0


@dataclass(frozen=True)
class FixedPoint:
    rate: float
    #: Highest minus lowest rate over the windows whose fleet holds the load (0 when one does).
    spread: float
    #: (rate in, rate out) of each iteration.
    iterations: list[tuple[float, float]] = field(default_factory=list)
    at_load: list[RateAtLoad] = field(default_factory=list)
    source: str = "the routing simulation at the fleet's own load"

    def line(self) -> str:
        if not self.iterations:
            return f"prefix-cache hit rate {self.rate:.1%} ({self.source})"
        steps = " -> ".join(f"{i:.1%}" for i, _ in self.iterations) + f" -> {self.rate:.1%}"
        where = ", ".join(
            f"{r.window} on {r.instances} instance(s): {r.hit_rate:.1%}"
            + ("" if r.holds else f" ({r.rejected:,} rejected)")
            for r in self.at_load
        )
        return (
            f"prefix-cache hit rate at the fleet's own load: {self.rate:.1%} (spread "
            f"{self.spread:.1%} over fleets that hold the load; fixed point after "
            f"{len(self.iterations)} iteration(s), tolerance {TOLERANCE:.0%}: {steps}; {where})"
        )


def rates_at_load(
    cfg: DeploymentConfig, a: Assumptions, sizes: tuple[float, ...] = (1.0,)
) -> list[RateAtLoad]:
    """The configured routing's hit rate at each routing window of ``cfg``'s own normal day,
    on the primary instances the gate's replay has in service there (times each of ``sizes``)."""
    day = scaled(cfg, normal_day())
    res = simulate(cfg, day, a)
    spec = configured_routing(cfg, "primary")
    weights = {v: cfg.variants[v].initial_weight for v in ("primary", "canary")}
    share = weights["primary"] / sum(weights.values())
    out = []
    for base in windows(day, res.sampled("in_service", "primary"), starts=WINDOWS):
        for f in sizes:
            w = replace(base, instances=max(1, round(base.instances * f)))
            fleet = Fleet(cfg, "primary", spec, w.instances, SessionModel(), SEED, a.speed_edge)
            r = fleet.run(w, share, SEED)
            out.append(
                RateAtLoad(w.name, w.instances, r.hit_rate, r.spilled_share, r.rejected, r.requests)
            )
    return out


def spread(at: list[RateAtLoad]) -> float:
    held = [r.hit_rate for r in at if r.holds] or [r.hit_rate for r in at]
    return max(held) - min(held)


def fixed_point(
    cfg: DeploymentConfig,
    a: Assumptions,
    fleet_for: Callable[[float], DeploymentConfig] | None = None,
    *,
    start: float | None = None,
    tolerance: float = TOLERANCE,
    max_iterations: int = MAX_ITERATIONS,
) -> FixedPoint:
    """The hit rate at which the fleet it sizes finds that same rate (see the module).
    ``fleet_for(rate)``: the fleet that rate sizes (the solver's); None: ``cfg``'s own bounds,
    whose scaling still follows the rate. Raises :class:`NoFixedPoint` after
    ``max_iterations``."""
    measured = cfg.fleet.prefix_cache_hit_rate
    if measured is not None:
        return FixedPoint(
            measured.rate, 0.0, source=f"fleet.prefix_cache_hit_rate: {measured.source}"
        )
    rate = a.hit_rate(cfg) if start is None else start
    seen: list[tuple[float, float]] = []
    for _ in range(max_iterations):
        fleet = fleet_for(rate) if fleet_for is not None else cfg
        at = rates_at_load(fleet, replace(a, prefix_cache_hit_rate=rate))
        new = min(r.hit_rate for r in at)
        seen.append((rate, new))
        if abs(new - rate) <= tolerance:
            around = rates_at_load(fleet, replace(a, prefix_cache_hit_rate=new), SPREAD_SIZES)
            return FixedPoint(new, spread(around), seen, at)
        rate = new
    steps = " -> ".join(f"{i:.1%}" for i, _ in seen) + f" -> {seen[-1][1]:.1%}"
    raise NoFixedPoint(
        f"{cfg.env}: the prefix-cache hit rate did not settle within {max_iterations} "
        f"iterations (tolerance {tolerance:.1%}): {steps}; each fleet the rate sizes moves the "
        "rate by more than the tolerance. State a measured rate (fleet.prefix_cache_hit_rate, "
        "from vllm:prefix_cache_hits_total / prefix_cache_queries_total on the live fleet) or a "
        "spill threshold the fleet's load stays under (variants.primary.routing."
        "concurrency_threshold)"
    )
