"""The prefix-cache hit rate the sizing plans on when the config states no measured one, and its
error.

The hit rate of prefix-aware routing is the one the fleet sees at its own load: the fixed point
of hit rate -> fleet -> hit rate (simulator/hit_rate_loop.py; ``python -m simulator hit-rate
--env prod`` prints it, and ``make fleet`` iterates it on the solved fleet). The routing
simulation (simulator/routing/fleet.py: multi-turn sessions, a per-instance LRU prefix cache
inside the KV cache, SageMaker's strategies) is timed by the capacity gate's own speed (the
planning edge, LoRA included) with every running request slowed by the ones that arrive after it,
on the primary instances the gate's replay of prod's normal day has in service at 15:00 and 20:00
JST, the spill threshold the scaling target's (sizing.scaling_target.spill_threshold). Run
2026-12-07 on prod's committed fleet: 33.0 % -> 60.9 % -> 61.0 % (2 iterations, tolerance 1 %;
12 and 27 instances at the two windows, 61.0 % at each), spread 0.2 points over fleets of 0.75,
1 and 1.5 times those that hold the load.

Why the rate once planned (33 %) was wrong: it came from an 8-instance fleet at the evening peak
that rejects requests and spills every one of them past a threshold of 64, below the fleet's own
scaling target of 108.8: an overloaded fleet, whose hit rate falls to RANDOM's. A fleet sized on
that rate holds its load, and then its hit rate is 61 %; the planning figure is that fixed point.
RANDOM and LEAST_OUTSTANDING_REQUESTS keep no conversation on its instance: their figure is the
lowest the same simulation finds (the evening peak on 8 instances, 36.7 %), where a fleet's size
moves it little. The brief's 72 % is reached by no configuration here.

:func:`hit_rate_error` is the rate's error, which the plan combines into its band (the speed
model's combined band, sizing/serving_speed.py): half the spread over fleets that hold the load,
never below the fixed point's own tolerance. A measured rate (``fleet.prefix_cache_hit_rate``,
with its source: vLLM's ``prefix_cache_hits_total / prefix_cache_queries_total`` on the live
fleet) replaces the simulated one; its error is then the measurement's, not this.
"""

from __future__ import annotations

#: The planned hit rate per routing strategy (see the module); None (no routing config) is
#: RANDOM, SageMaker's default.
ROUTING_SIM_HIT_RATE: dict[str, float] = {
    "RANDOM": 0.36,
    "LEAST_OUTSTANDING_REQUESTS": 0.36,
    "PREFIX_AWARE": 0.61,
}
#: The spread of each rate over the fleets that hold the load (highest minus lowest), from the
#: runs the module docstring names.
ROUTING_SIM_SPREAD: dict[str, float] = {
    "RANDOM": 0.01,
    "LEAST_OUTSTANDING_REQUESTS": 0.01,
    "PREFIX_AWARE": 0.002,
}
#: The fixed point's tolerance (simulator/hit_rate_loop.py TOLERANCE): no error is stated below it.
FIXED_POINT_TOLERANCE = 0.01


def routing_hit_rate(strategy: str | None) -> float:
    return ROUTING_SIM_HIT_RATE[strategy or "RANDOM"]


def hit_rate_error(strategy: str | None) -> float:
    """The simulated hit rate's error (absolute, a share of prompt tokens; +- this): half its
    spread over fleets that hold the load, at least :data:`FIXED_POINT_TOLERANCE`."""
    return max(ROUTING_SIM_SPREAD[strategy or "RANDOM"] / 2, FIXED_POINT_TOLERANCE)
