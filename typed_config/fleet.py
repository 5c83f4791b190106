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

#: The traffic scenarios the gate can replay (simulator/fleet/scenarios.py runs each; a test holds
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
#: output token (``monitoring.slo_tpot_p95_ms``), the per-user streaming speed; ``ttft_p95`` the
#: tail of time to first token (``monitoring.slo_ttft_p95_ms``).
GateSlo = Literal["rejected", "queue_wait_p95", "ttft_p50", "ttft_p95", "latency_p99", "tpot_p95"]
GATE_SLOS: tuple[GateSlo, ...] = get_args(GateSlo)


class BestEffort(Strict):
    """A scenario the config accepts missing: the gate reports it and does not fail; the plan
    prints it with its reason. With ``slos``, only those SLOs' misses are accepted (the others,
    and every request refused, still fail the gate and still size the fleet)."""

    scenario: ScenarioName
    """The scenario (one of fleet.scenarios) the config accepts missing."""
    reason: Annotated[str, Field(min_length=12)]
    """Why missing it is accepted (printed with the plan)."""
    slos: Annotated[list[GateSlo], Field(min_length=1)] | None = None
    """The SLOs of fleet.slos this scenario may miss (never ``rejected``: a refused request is
    not an accepted risk of a partial entry); unset: every SLO (the whole scenario)."""


class MeasuredHitRate(Strict):
    """A prefix-cache hit rate measured on the live fleet (vllm:prefix_cache_hits_total /
    vllm:prefix_cache_queries_total), used instead of the routing simulation's."""

    rate: Annotated[float, Field(ge=0, lt=1)]
    """The measured hit rate, 0 to below 1."""
    source: Annotated[str, Field(min_length=12)]
    """Where and when it was measured (printed with the plan)."""


#: The reason the gate prints for an unannounced spike under ``unannounced_spikes: best-effort``.
UNANNOUNCED_BEST_EFFORT = (
    "fleet.unannounced_spikes: best-effort: an unannounced spike is reported, not held; releases "
    "that large are announced in scaling.release_calendar"
)
UNANNOUNCED: tuple[ScenarioName, ...] = ("unannounced-3x", "unannounced-4x")


class PolicySearch(Strict):
    """The policies the fleet solver tries beside the config's own; it keeps the cheapest fleet
    that holds the SLOs and prints each one's monthly cost."""

    canary: Literal["search", "standing", "release-only"] = "search"
    """``release-only``: the canary stands at the least a deploy accepts between releases and is
    raised to rollout.canary_instances while one runs; ``standing``: its floor all the time;
    ``search``: both, the cheaper that holds."""
    scale_in: Literal["search", "as-configured", "follow-traffic"] = "search"
    """``follow-traffic``: target tracking scales in (DisableScaleIn false, the scale-in cooldown
    AWS defaults to for SageMaker variants, 300 s) and no step policy scales in; ``as-configured``:
    the config's policies; ``search``: both."""


class FleetConfig(Strict):
    scenarios: Annotated[list[ScenarioName], Field(min_length=1)] = list(DEFAULT_SCENARIOS)
    """The traffic scenarios the capacity gate replays against the fleet."""
    slos: Annotated[list[GateSlo], Field(min_length=1)] = list(GATE_SLOS)
    """The SLOs the gate holds in every minute of every scenario (limits from monitoring.slo_*;
    ``rejected``: no 429)."""
    best_effort: list[BestEffort] = []
    """Scenarios the config accepts missing, each with its reason: reported, not failed (with
    ``slos``: only those SLOs' misses in that scenario)."""
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
    releases_per_month: Annotated[float, Field(ge=0, le=100)] = 4.0
    """The release cadence: canary rollouts a month. A canary raised only while a release runs
    (rollout.canary_instances) bills its raise for this many rollouts' hours."""
    unannounced_spikes: Literal["held", "best-effort"] = "held"
    """``best-effort``: the unannounced spikes (unannounced-3x, unannounced-4x) are replayed and
    reported, every day at its weakest hour, but do not fail the gate and do not size the fleet
    (releases that large are announced in scaling.release_calendar); ``held``: they do."""
    policies: PolicySearch = PolicySearch()
    """Which scaling policies the fleet solver may choose between (each priced in its table)."""

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
        for i, b in enumerate(self.best_effort):
            if b.slos is None:
                continue
            where = f"best_effort[{i}].slos ({b.scenario})"
            if len(set(b.slos)) != len(b.slos):
                raise ValueError(f"{where}: each entry once, got {b.slos}")
            if "rejected" in b.slos:
                raise ValueError(
                    f"{where}: 'rejected' may not be listed: a refused request is never an "
                    "accepted risk of a partial entry (the fleet is still sized to refuse "
                    "nothing); to accept the whole scenario, requests refused included, drop "
                    "`slos` from the entry"
                )
            missing = [x for x in b.slos if x not in self.slos]
            if missing:
                raise ValueError(
                    f"{where}: {missing} not in fleet.slos {self.slos}: an SLO the gate does "
                    "not hold cannot be accepted missing; list it in fleet.slos or drop it here"
                )
        return self

    def soft(self) -> dict[ScenarioName, str]:
        """Scenarios reported but not failed on, each with its reason (entries that accept
        only some SLOs are :meth:`partial`, held for the rest)."""
        out: dict[ScenarioName, str] = {
            b.scenario: b.reason for b in self.best_effort if b.slos is None
        }
        if self.unannounced_spikes == "best-effort":
            for s in UNANNOUNCED:
                out.setdefault(s, UNANNOUNCED_BEST_EFFORT)
        return out

    def partial(self) -> dict[ScenarioName, BestEffort]:
        """Scenarios held, but whose misses of the entry's ``slos`` are accepted risk (reported
        with the reason, not failed on, not repaired by the fleet solver)."""
        soft = self.soft()
        return {
            b.scenario: b for b in self.best_effort if b.slos is not None and b.scenario not in soft
        }

    def held(self) -> list[ScenarioName]:
        """Scenarios the gate fails on (the rest are best-effort)."""
        soft = self.soft()
        return [s for s in self.scenarios if s not in soft]
