"""What the capacity gate and the fleet solver hold a config to (``fleet:`` in the YAML).

The gate (``make capacity-gate``, ``python -m simulator gate``) replays every scenario named here
against the config's own fleet, minute by minute, at the pessimistic edge of the speed model, and
fails naming the scenario, the first minute, the SLO and the shortfall. The solver (``make fleet``)
finds, per instance type, the cheapest fleet that passes the same gate. Both read the SLO limits
from ``monitoring.slo_*``; this section says which of them, on which scenarios.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field

from typed_config.base import Strict, section_rule

#: The traffic scenarios the gate can replay (simulator/fleet_scenarios.py runs each; a test holds
#: the two lists equal).
ScenarioName = Literal[
    "normal-day",
    "announced-release",
    "unannounced-3x",
    "unannounced-4x",
    "deploy-at-peak",
    "canary-rollout",
]
SCENARIO_NAMES: tuple[ScenarioName, ...] = get_args(ScenarioName)
#: The brief's days: an ordinary day, a release in the calendar, an unannounced 3x spike, a deploy
#: during the evening peak and a canary ramp. ``unannounced-4x`` is offered, not held by default.
DEFAULT_SCENARIOS: tuple[ScenarioName, ...] = (
    "normal-day",
    "announced-release",
    "unannounced-3x",
    "deploy-at-peak",
    "canary-rollout",
)

#: SLOs the gate can hold, each against its ``monitoring`` limit; ``rejected`` is "no request
#: rejected with 429" (the brief's "0 rejected"), held in every minute; ``tpot_p95`` is time per
#: output token (``monitoring.slo_tpot_p95_ms``), the per-user streaming speed.
GateSlo = Literal["rejected", "queue_wait_p95", "ttft_p50", "latency_p99", "tpot_p95"]
GATE_SLOS: tuple[GateSlo, ...] = get_args(GateSlo)


class BestEffort(Strict):
    """A scenario the config accepts missing: the gate reports it and does not fail; the plan
    prints it with its reason."""

    scenario: ScenarioName
    """The scenario (one of fleet.scenarios) the config accepts missing."""
    reason: Annotated[str, Field(min_length=12)]
    """Why missing it is accepted (printed with the plan)."""


class MeasuredHitRate(Strict):
    """A prefix-cache hit rate measured on the live fleet (vllm:prefix_cache_hits_total /
    vllm:prefix_cache_queries_total), used instead of the routing simulation's."""

    rate: Annotated[float, Field(ge=0, lt=1)]
    """The measured hit rate, 0 to below 1."""
    source: Annotated[str, Field(min_length=12)]
    """Where and when it was measured (printed with the plan)."""


class FleetConfig(Strict):
    scenarios: Annotated[list[ScenarioName], Field(min_length=1)] = list(DEFAULT_SCENARIOS)
    """The traffic scenarios the capacity gate replays against the fleet."""
    slos: Annotated[list[GateSlo], Field(min_length=1)] = list(GATE_SLOS)
    """The SLOs the gate holds in every minute of every scenario (limits from monitoring.slo_*;
    ``rejected``: no 429)."""
    best_effort: list[BestEffort] = []
    """Scenarios the config accepts missing, each with its reason: reported, not failed."""
    prefix_cache_hit_rate: MeasuredHitRate | None = None
    """None: the routing simulation's figure for the configured routing
    (sizing/prefix_hit_rate.py)."""
    traffic_share: Annotated[float, Field(gt=0, le=10)] = 1.0
    """The share of the scenarios' traffic (the brief's prod traffic) this environment serves: every
    scenario's request rates are multiplied by it (dev: the team's own tests)."""
    candidates: list[str] = []
    """Instance types the solver tries; empty: every catalog type whose GPU holds the model."""
    budget_usd_per_month: Annotated[float, Field(gt=0)] | None = None
    """The budget the plan and the solver print the cost beside (USD per month), if any."""

    @section_rule
    def _each_once(self) -> FleetConfig:
        for name, values in (
            ("scenarios", self.scenarios),
            ("slos", self.slos),
            ("best_effort", [b.scenario for b in self.best_effort]),
            ("candidates", self.candidates),
        ):
            if len(set(values)) != len(values):
                raise ValueError(f"{name}: each entry once, got {values}")
        unknown = [b.scenario for b in self.best_effort if b.scenario not in self.scenarios]
        if unknown:
            raise ValueError(
                f"best_effort: {unknown} not in fleet.scenarios {self.scenarios}: a best-effort "
                "scenario is still replayed and reported, so list it there too"
            )
        return self

    def held(self) -> list[ScenarioName]:
        """Scenarios the gate fails on (the rest are best-effort)."""
        soft = {b.scenario for b in self.best_effort}
        return [s for s in self.scenarios if s not in soft]
