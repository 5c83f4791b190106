"""An adapter release replayed like a canary (issue 45 item 5): ``make release-adapter`` on a
typical day, with each bad version of :mod:`simulator.bad_builds` as the new adapter version.

What the release does is tools/adapter_release/rollout.py's (its docstring cites AWS): a candidate
component beside the live one, on the same base copies; ``min_invocations`` probes to each; the
bake; then the evidence judged by the canary controller's own rule (``judge`` and
``EvidenceRules``, lambdas/canary_controller/rules.py, imported by their public names, as the
release tool does); on ``ok`` the live component takes the new version at once (an adapter update
is atomic: no partial step), its alarms watched for ``watch_minutes``; else the candidate is
deleted and the live component never changed. Nothing is restated here: the replay plays the
world around those rules, minute by minute:

- **The traffic of a typical day**: the normal-day trace at ``fleet.traffic_share``
  (simulator/fleet/scenarios.py ``scaled``), the adapter's share of it (``adapter_shares``: an even
  split unless ``--adapter-share`` says otherwise), from 14:00 JST (the canary replay's start,
  simulator/rollout.py). There is no traffic split between components (a client names the one it
  invokes), so the candidate serves the probes alone; the live component serves the probes and
  every user request of the adapter. The evidence reads both components' Invocations and
  Invocation5XXErrors over the bake, one minute either side (the tool's GetMetricData window).
- **A version's behaviour**: the bad builds of the blast-radius replay, on this adapter's requests
  (``Build.error_share`` with the adapter's whole traffic: ``one-adapter`` fails every request
  through it, ``errors-2pct`` 2 %, ``latency-2x`` and ``truncated`` fail none). The live version is
  healthy (no 5XX), as the blast radius's primary.
- **Alarms**: ``inference_components.rollout.alarm_names`` are free-form names; the replay cannot
  tell what they measure, so it fires none of them (the pessimistic edge for detection) and says
  so. A version the evidence passes is then never stopped: it answers the adapter's requests to
  the day's end (what the next ``make deploy`` makes permanent), as a build never stopped does in
  the blast radius.

What a bad version costs: the requests it answered (probes, then users' after the swap) and of
those, the ones that failed, and the users' share of the day's requests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from lambdas.canary_controller.rules import Evidence, EvidenceRules, judge
from simulator.bad_builds import Build, adapter_shares, bad_builds
from simulator.components import section
from simulator.fleet.scenarios import scaled
from simulator.rollout import START_HOUR_JST
from simulator.traces import Trace, normal_day
from typed_config import DeploymentConfig
from typed_config.adapter_rollout import evidence_thresholds

#: The evidence window's margin either side, minutes (tools/adapter_release/rollout.py evidence:
#: GetMetricData from start - 60 s to end + 60 s).
WINDOW_MARGIN_MINUTES = 1


@dataclass(frozen=True)
class AdapterOutcome:
    """One version's release: how it ended, when, on what evidence, and what it answered."""

    adapter: str
    build: Build
    result: str  # "promoted" or "rolled back"
    reason: str
    #: Minutes from the release's start to the decision (the bake's end, or later without
    #: evidence), and to the end of the watch for a promoted version.
    decided_after_minutes: int
    probes: int
    #: The adapter's user requests over the bake (all on the live component): the probes' share.
    adapter_requests_in_bake: float
    evidence: Evidence
    #: Requests the new version answered: its probes, then every request of the adapter after
    #: the swap until the trace's end (a version never stopped).
    answered_probes: float
    answered_users: float
    failed: float
    day_requests: float
    alarms_not_replayed: tuple[str, ...]

    @property
    def users_share_of_day_percent(self) -> float:
        return 100 * self.answered_users / self.day_requests if self.day_requests else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "adapter": self.adapter,
            "version": self.build.key,
            "behaviour": self.build.description,
            "result": self.result,
            "reason": self.reason,
            "decided_after_minutes": self.decided_after_minutes,
            "probes_per_component": self.probes,
            "adapter_requests_in_bake": round(self.adapter_requests_in_bake),
            "probe_share_of_live_invocations_pct": round(
                100 * self.probes / max(1.0, self.evidence.primary_invocations), 2
            ),
            "answered_probes": round(self.answered_probes),
            "answered_users": round(self.answered_users),
            "failed": round(self.failed, 1),
            "users_share_of_day_pct": round(self.users_share_of_day_percent, 3),
            "alarms_not_replayed": list(self.alarms_not_replayed),
        }


def replay_release(
    cfg: DeploymentConfig,
    adapter: str,
    build: Build,
    *,
    shares: Mapping[str, float] | None = None,
    trace: Trace | None = None,
    start_minute: int = START_HOUR_JST * 60,
) -> AdapterOutcome:
    """One release of ``adapter`` whose new version behaves as ``build`` (module docstring)."""
    ro = section(cfg).rollout
    thresholds = evidence_thresholds(ro, cfg.rollout)
    rules = EvidenceRules(thresholds.min_invocations, thresholds.max_error_rate_increase_percent)
    tr = trace or scaled(cfg, normal_day())
    share = (shares or adapter_shares(cfg))[adapter]
    users = np.asarray(tr.rpm, dtype=float) * share  # the adapter's requests per minute
    bad = build.error_share({adapter: 1.0})  # of this adapter's requests, the version fails
    probes = thresholds.min_invocations  # the tool sends this many to each component at once
    bake_end = start_minute + ro.bake_minutes
    give_up = bake_end + ro.evidence_timeout_minutes
    check = max(1, ro.check_interval_seconds // 60)

    def evidence(now: int) -> Evidence:
        lo = max(0, start_minute - WINDOW_MARGIN_MINUTES)
        hi = min(len(users), now + WINDOW_MARGIN_MINUTES)
        return Evidence(
            canary_invocations=float(probes),
            canary_errors=probes * bad,
            primary_invocations=float(probes + users[lo:hi].sum()),
            primary_errors=0.0,
        )

    now = bake_end
    while True:
        ev = evidence(now)
        verdict, why = judge(ev, rules)
        if verdict != "insufficient" or now >= give_up:
            break
        now = min(give_up, now + check)
    in_bake = float(users[start_minute:bake_end].sum())

    def outcome(result: str, reason: str, after: int, users_answered: float) -> AdapterOutcome:
        return AdapterOutcome(
            adapter=adapter,
            build=build,
            result=result,
            reason=reason,
            decided_after_minutes=after,
            probes=probes,
            adapter_requests_in_bake=in_bake,
            evidence=ev,
            answered_probes=float(probes),
            answered_users=users_answered,
            failed=(probes + users_answered) * bad,
            day_requests=float(tr.rpm.sum()),
            alarms_not_replayed=tuple(ro.alarm_names),
        )

    if verdict != "ok":
        reason = f"evidence: {why}" if verdict == "worse" else f"no evidence: {why}"
        return outcome("rolled back", reason, now - start_minute, 0.0)
    # the swap: the adapter's every request from then to the day's end
    return outcome("promoted", why, now - start_minute + ro.watch_minutes, float(users[now:].sum()))


def replay_releases(
    cfg: DeploymentConfig, shares: Mapping[str, float] | None = None
) -> list[AdapterOutcome]:
    """Every version of :func:`simulator.bad_builds.bad_builds` as a release of the adapter with
    the smallest share (the fewest requests to see it by: the pessimistic edge, as the blast
    radius's one-adapter build)."""
    shares = dict(shares or adapter_shares(cfg))
    adapter = min(shares, key=lambda n: (shares[n], n))
    return [replay_release(cfg, adapter, b, shares=shares) for b in bad_builds({adapter: 1.0})]


def table(outcomes: list[AdapterOutcome]) -> str:
    if not outcomes:
        return "adapter releases: no adapter"
    first = outcomes[0]
    lines = [
        f"adapter release of {first.adapter} at 14:00 JST on a normal day "
        f"({first.probes} probes to each component, the adapter's users send "
        f"{first.adapter_requests_in_bake:,.0f} requests to the live one over the bake)",
        f"  {'version':<12} {'result':<12} {'after':>6} {'answered':>9} {'failed':>8} "
        f"{'day %':>7}  why",
    ]
    for o in outcomes:
        lines.append(
            f"  {o.build.key:<12} {o.result:<12} {o.decided_after_minutes:>4} m "
            f"{o.answered_probes + o.answered_users:>9,.0f} {o.failed:>8,.1f} "
            f"{o.users_share_of_day_percent:>6.3f}%  {o.reason}"
        )
    if first.alarms_not_replayed:
        lines.append(f"  alarms not replayed (names only): {', '.join(first.alarms_not_replayed)}")
    else:
        lines.append(
            "  no alarm watched (inference_components.rollout.alarm_names is empty): only the "
            "5XX evidence stops a version; one that is slower or cuts answers short is promoted"
        )
    return "\n".join(lines)
