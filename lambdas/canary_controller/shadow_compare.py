"""The shadow stage's comparison: the new build's answers against the primary's, per adapter.

Pure functions on plain data, like ``rules.py``: the Lambda feeds it the answers it reads from
both variants' data capture, the simulator feeds it the answers of the bad builds it replays,
and both get the same verdict. Nothing here imports boto3 or the config (floor 1: the stacks
and the simulator turn ``rollout.shadow.comparison`` into :class:`Thresholds`).

What is compared, per adapter (the brief's shadow phase: latency, response length, guardrail pass
rate; seeds 000 "Migration phases"):

- error rate: the shadow's share of failed answers (5XX, an engine error) may exceed the
  primary's by at most ``max_error_rate_increase_percent`` points;
- latency: the shadow's end-to-end p95 and TTFT p95 at most ``max_latency_p95_ratio`` /
  ``max_ttft_p95_ratio`` times the primary's (nearest-rank percentiles), over each answer's own
  times (the serving container's ``timing`` field, read by ``capture.py``), judged at like loads
  only (below); a side whose answers carry no times gives no evidence (insufficient);
- response length: a two-sample Kolmogorov-Smirnov test on the answers' lengths; it fails when the
  distance D exceeds ``max_length_ks_statistic`` AND the difference is significant at
  ``length_ks_alpha`` (a large D on a handful of answers is noise; a tiny but significant D on
  thousands is no regression worth stopping for);
- truncation: the share of answers cut off by max_tokens (finish reason ``length``) may grow by
  at most ``max_truncated_share_increase_percent`` points;
- content checks: the share of answers passing every configured check (a pattern that must or
  must not match) may drop by at most ``max_content_pass_rate_drop_percent`` points.

An adapter with fewer than ``min_requests_per_adapter`` answers on either side is *insufficient*:
the verdict is then never a pass (the controller holds and, past the stage's deadline, fails).

Latency at like loads (every latency rule: the per-answer p95s here and the CloudWatch ModelLatency
p95 in ``shadow_stage.ShadowEvidence``). Latency rises steeply with the load per instance near the
scaling target, and the two variants do not run at the same load: the primary autoscales to its
target, the shadow is a fixed fleet sized for its sampled share of the day's peak
(``sizing/shadow_plan.py``), so off-peak it runs far below the target and a build twice as slow
looks as fast as the primary there. So latency is judged only on minutes whose loads decide the
question, two-sided (:class:`LikeLoads`, on each variant's InvocationsPerInstance that minute, the
shadow's in primary instances as the canary's ratio alarms convert it,
``sizing.rollout_alarms.ratio_expression``):

- *fail* evidence only from minutes where the shadow's load is at most the primary's (the shadow
  favoured: slower there is truly slower);
- *pass* evidence only from minutes where the shadow's load is at least the primary's (the shadow
  disfavoured: as fast there is truly as fast) and at most :data:`PASS_LOAD_SLACK` above it. A
  shadow far above the primary's load is no like load: past the scaling target an engine full at
  ``max_num_seqs`` queues, and a healthy build there is slower for its load alone (on prod's speed
  model the TTFT p90 is 0.5 s at 0.9 x the target and 5 s at 1.2 x). Pooled with the minutes near
  equality, those minutes decide the class's p95 and a healthy build never passes (a tracking
  shadow whose primary scales from 7 to 14 instances runs at up to 1.4 x its load). The bound
  can never pass a slower build: every minute it keeps still has the shadow at least as loaded;
- neither (no such minutes, or too few answers in them): the latency rule is *insufficient*, and so
  the adapter's verdict is never a pass (:func:`like_load_latency`).

Errors, lengths, truncation and content checks do not depend on the load and are judged on every
answer.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

Outcome = Literal["pass", "fail", "insufficient"]


@dataclass(frozen=True)
class ContentCheck:
    """One configured content check: ``pattern`` (a regular expression, searched anywhere in the
    answer) must match (``must_match``) or must not; ``adapters`` empty means every adapter."""

    name: str
    pattern: str
    must_match: bool = False
    adapters: tuple[str, ...] = ()

    def applies_to(self, adapter: str) -> bool:
        return not self.adapters or adapter in self.adapters

    def passes(self, text: str) -> bool:
        return bool(re.search(self.pattern, text)) == self.must_match


@dataclass(frozen=True)
class Thresholds:
    """``rollout.shadow`` in plain data (typed_config.shadow.ShadowStage.thresholds). The
    defaults here are the only ones: ``rollout.shadow``'s fields take theirs from this class
    (the Lambda's asset holds its package alone, so the config reads the Lambda, not the reverse;
    tests/infra/test_defined_once.py fails on a second definition)."""

    min_requests_per_adapter: int = 200
    max_error_rate_increase_percent: float = 0.5
    max_latency_p95_ratio: float = 1.25
    max_ttft_p95_ratio: float = 1.25
    max_length_ks_statistic: float = 0.15
    length_ks_alpha: float = 0.01
    max_truncated_share_increase_percent: float = 2.0
    max_content_pass_rate_drop_percent: float = 1.0
    content_checks: tuple[ContentCheck, ...] = ()


@dataclass(frozen=True)
class Answer:
    """One captured request and its answer. ``length`` is the answer's length in tokens when the
    capture has them, else in characters (the same unit on both sides). Latencies are None when
    the capture does not carry them (a failed answer). ``minute``: the epoch minute it was
    captured in (:func:`capture_minute` of ``eventMetadata.inferenceTime``), which places its
    latencies in a like-load class; None: they are in none."""

    adapter: str
    ok: bool
    latency_ms: float | None = None
    ttft_ms: float | None = None
    length: int = 0
    truncated: bool = False
    text: str = ""
    minute: int | None = None


def capture_minute(inference_time: str) -> int | None:
    """The epoch minute of data capture's ``eventMetadata.inferenceTime`` (ISO 8601 UTC, as in
    "2026-11-28T10:15:30Z"; SageMaker developer guide, "Data capture", the captured line's
    example: https://docs.aws.amazon.com/sagemaker/latest/dg/model-monitor-data-capture.html);
    None for an empty or unreadable one (the answer's latencies then count in no class)."""
    if not inference_time:
        return None
    try:
        at = datetime.fromisoformat(inference_time.replace("Z", "+00:00"))
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return int(at.timestamp()) // 60


#: How far above the primary's load per instance (a share of it) a minute still counts as pass
#: evidence (:class:`LikeLoads`). The shadow's invocations per instance in a minute are a Poisson
#: count of the sampled traffic: at the ~250 a minute that a sampled share of prod's traffic gives
#: one shadow instance, its relative spread is 1 / sqrt(250), about 6 %, so a bound tighter than
#: that would throw away minutes at equality for noise. An assumption, not a measurement; it
#: trades pass-evidence minutes against how much extra load a healthy build is judged under, and
#: cannot pass a slower build (the minutes it keeps have the shadow at least as loaded).
PASS_LOAD_SLACK = 0.05


@dataclass(frozen=True)
class LikeLoads:
    """Which minutes (epoch minutes) give latency evidence, and for which verdict (the module
    docstring, "Latency at like loads"). A minute with both loads equal is in both."""

    #: The shadow's load per instance at most the primary's: a slower shadow is truly slower.
    fail_minutes: frozenset[int] = frozenset()
    #: The shadow's load per instance at least the primary's, and at most
    #: :data:`PASS_LOAD_SLACK` above it: an as-fast shadow is truly as fast, at a like load.
    pass_minutes: frozenset[int] = frozenset()

    @classmethod
    def of(cls, loads: Mapping[int, tuple[float, float]], shadow_per_primary: float) -> LikeLoads:
        """From ``{minute: (primary's, shadow's InvocationsPerInstance)}``; the shadow's is in its
        own instances and counts ``x shadow_per_primary`` (shadow instances that serve what one
        primary instance serves: ``rules.CapacityPlan.canary_per_primary``, the shadow variant
        being the canary's model on the canary's instance type). A minute where either variant
        took no request is in neither class: no latency was measured on that side."""
        fail, passed = set(), set()
        for minute, (primary, shadow) in loads.items():
            if primary <= 0 or shadow <= 0:
                continue
            load = shadow * shadow_per_primary
            if load <= primary:
                fail.add(minute)
            if primary <= load <= primary * (1 + PASS_LOAD_SLACK):
                passed.add(minute)
        return cls(frozenset(fail), frozenset(passed))

    def summary(self) -> str:
        return (
            f"like-load minutes: {len(self.fail_minutes)} with the shadow's load at most the "
            f"primary's (fail evidence), {len(self.pass_minutes)} at least and at most "
            f"{PASS_LOAD_SLACK:.0%} above (pass evidence)"
        )


#: Per class, the figures it compared: (primary's, shadow's) p95 in ms, None without evidence.
ClassFigures = tuple[float, float] | None


def like_load_detail(name: str, fail_side: ClassFigures, pass_side: ClassFigures) -> str:
    """The figures of one latency rule in each like-load class, for the record."""
    said = []
    for label, figures in (("at most", fail_side), ("at least", pass_side)):
        if figures is None:
            said.append(f"no evidence with the shadow's load {label} the primary's")
        else:
            p, s = figures
            said.append(
                f"{s:,.0f} ms vs the primary's {p:,.0f} ms ({_ratio(figures):.2f} x) with the "
                f"shadow's load {label} the primary's"
            )
    return f"{name}: {'; '.join(said)}"


def like_load_latency(
    name: str, fail_side: ClassFigures, pass_side: ClassFigures, max_ratio: float
) -> tuple[Outcome, str]:
    """One latency rule judged at like loads: ``fail`` when the shadow is slower than
    ``max_ratio`` x the primary where its load was at most the primary's; ``pass`` when it is
    within it where its load was at least the primary's; otherwise ``insufficient`` (a slow
    shadow at a higher load, a fast one at a lower load, or no evidence: no verdict either way).
    The reason names each class's ratio."""
    if fail_side is not None and _ratio(fail_side) > max_ratio:
        p, s = fail_side
        return "fail", (
            f"{name} {s:,.0f} ms is {_ratio(fail_side):.2f} x the primary's {p:,.0f} ms with the "
            f"shadow's load at most the primary's: above {max_ratio} x"
        )
    detail = like_load_detail(name, fail_side, pass_side)
    if pass_side is not None and _ratio(pass_side) <= max_ratio:
        return "pass", detail
    return "insufficient", f"{detail}: no like-load verdict within {max_ratio} x"


#: The fewest like-load minutes one class needs before the CloudWatch ModelLatency p95 rule
#: judges on it: the canary's relative latency alarm breaches on 3 minutes too (3 of 5,
#: ``sizing.rollout_alarms.RELATIVE_LATENCY``, held equal by tests/simulator/
#: test_shadow_like_load.py); one minute's p95 of a lightly loaded shadow is a handful of requests.
MIN_LIKE_LOAD_MINUTES = 3


@dataclass(frozen=True)
class MinuteLatency:
    """One minute of CloudWatch for both variants: ModelLatency p95 (ms) and
    InvocationsPerInstance (Sum over the minute; the shadow's in its own instances)."""

    primary_p95_ms: float
    shadow_p95_ms: float
    primary_per_instance: float
    shadow_per_instance: float


def minute_loads(minutes: Mapping[int, MinuteLatency]) -> dict[int, tuple[float, float]]:
    """``{minute: (primary's, shadow's InvocationsPerInstance)}`` for :meth:`LikeLoads.of`."""
    return {m: (f.primary_per_instance, f.shadow_per_instance) for m, f in minutes.items()}


#: The CloudWatch latency rule's name in reasons and evidence.
CLOUDWATCH_LATENCY = "ModelLatency p95 (CloudWatch)"


def cloudwatch_classes(
    minutes: Mapping[int, MinuteLatency], loads: LikeLoads
) -> tuple[ClassFigures, ClassFigures]:
    """(fail side, pass side) of the ModelLatency p95 rule: per class, the median over its
    minutes of each variant's per-minute p95 (a p95 of the class's requests cannot be rebuilt
    from per-minute p95s; the median keeps one thin minute from deciding), a class with fewer
    than :data:`MIN_LIKE_LOAD_MINUTES` minutes being no evidence."""
    sides: list[ClassFigures] = []
    for chosen in (loads.fail_minutes, loads.pass_minutes):
        rows = [minutes[m] for m in sorted(chosen) if m in minutes]
        if len(rows) < MIN_LIKE_LOAD_MINUTES:
            sides.append(None)
            continue
        sides.append(
            (
                statistics.median(r.primary_p95_ms for r in rows),
                statistics.median(r.shadow_p95_ms for r in rows),
            )
        )
    return sides[0], sides[1]


def cloudwatch_latency(
    minutes: Mapping[int, MinuteLatency], loads: LikeLoads, max_ratio: float
) -> tuple[Outcome, str]:
    """The ModelLatency p95 rule at like loads (:func:`cloudwatch_classes`,
    :func:`like_load_latency`)."""
    return like_load_latency(CLOUDWATCH_LATENCY, *cloudwatch_classes(minutes, loads), max_ratio)


def _ratio(figures: tuple[float, float]) -> float:
    primary, shadow = figures
    return shadow / primary if primary > 0 else math.inf


@dataclass
class AdapterVerdict:
    adapter: str
    outcome: Outcome
    reasons: list[str] = field(default_factory=list)
    #: The figures behind the verdict, for the rollout's evidence (name -> value).
    figures: dict[str, float] = field(default_factory=dict)


@dataclass
class Verdict:
    outcome: Outcome
    adapters: list[AdapterVerdict]

    @property
    def reasons(self) -> list[str]:
        return [f"{a.adapter}: {reason}" for a in self.adapters for reason in a.reasons]

    def summary(self) -> str:
        """The verdict and its reasons: a fail names only the failing adapters' reasons."""
        if self.outcome == "pass":
            return f"shadow comparison passed on {len(self.adapters)} adapter(s)"
        said = [
            f"{a.adapter}: {reason}"
            for a in self.adapters
            if a.outcome == self.outcome
            for reason in a.reasons
        ]
        return f"shadow comparison {self.outcome}: " + "; ".join(said)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of a non-empty sequence."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _kolmogorov_q(lam: float) -> float:
    """The Kolmogorov distribution's survival function Q_KS(lambda) (Numerical Recipes 14.3)."""
    if lam < 1e-9:
        return 1.0
    total, sign = 0.0, 1.0
    for j in range(1, 101):
        term = sign * 2 * math.exp(-2 * j * j * lam * lam)
        total += term
        if abs(term) < 1e-10:
            break
        sign = -sign
    return min(1.0, max(0.0, total))


def ks_two_sample(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov test: the distance D between the empirical distributions of
    ``a`` and ``b`` and its asymptotic p-value (Numerical Recipes 14.3.3, with Stephens'
    small-sample correction)."""
    if not a or not b:
        raise ValueError("ks_two_sample needs two non-empty samples")
    xs, ys = sorted(a), sorted(b)
    n, m = len(xs), len(ys)
    i = j = 0
    d = 0.0
    while i < n and j < m:
        value = min(xs[i], ys[j])
        while i < n and xs[i] <= value:
            i += 1
        while j < m and ys[j] <= value:
            j += 1
        d = max(d, abs(i / n - j / m))
    en = math.sqrt(n * m / (n + m))
    return d, _kolmogorov_q((en + 0.12 + 0.11 / en) * d)


def _share(flags: Iterable[bool]) -> float:
    items = list(flags)
    return 100.0 * sum(items) / len(items) if items else 0.0


def _content_pass_share(answers: Sequence[Answer], checks: Sequence[ContentCheck]) -> float:
    ok = [a for a in answers if a.ok]
    return _share(all(c.passes(a.text) for c in checks if c.applies_to(a.adapter)) for a in ok)


def compare_adapter(
    adapter: str,
    primary: Sequence[Answer],
    shadow: Sequence[Answer],
    limits: Thresholds,
    loads: LikeLoads,
) -> AdapterVerdict:
    """One adapter's verdict (see the module docstring for each rule; latency at ``loads``)."""
    verdict = AdapterVerdict(adapter, "pass")
    figures = verdict.figures
    figures["primary_requests"], figures["shadow_requests"] = len(primary), len(shadow)
    least = limits.min_requests_per_adapter
    if len(primary) < least or len(shadow) < least:
        verdict.outcome = "insufficient"
        verdict.reasons.append(
            f"{len(primary)} primary and {len(shadow)} shadow answers, "
            f"min_requests_per_adapter is {least} on each side"
        )
        return verdict

    def fail(reason: str) -> None:
        verdict.outcome = "fail"
        verdict.reasons.append(reason)

    errors_p = _share(not a.ok for a in primary)
    errors_s = _share(not a.ok for a in shadow)
    figures["primary_error_percent"], figures["shadow_error_percent"] = errors_p, errors_s
    if errors_s - errors_p > limits.max_error_rate_increase_percent:
        fail(
            f"error rate {errors_s:.2f} % vs the primary's {errors_p:.2f} %: more than "
            f"max_error_rate_increase_percent ({limits.max_error_rate_increase_percent}) points"
        )
    short: list[str] = []  # latency rules without a like-load verdict
    for name, attribute, ratio_limit in (
        ("latency p95", "latency_ms", limits.max_latency_p95_ratio),
        ("TTFT p95", "ttft_ms", limits.max_ttft_p95_ratio),
    ):
        outcome, reason = _latency_at_like_loads(
            name, attribute, ratio_limit, primary, shadow, loads, least, figures
        )
        if outcome == "fail":
            fail(reason)
        elif outcome == "insufficient":
            short.append(reason)
    lengths_p = [a.length for a in primary if a.ok]
    lengths_s = [a.length for a in shadow if a.ok]
    if lengths_p and lengths_s:
        d, p_value = ks_two_sample(lengths_p, lengths_s)
        figures["length_ks_statistic"], figures["length_ks_p_value"] = d, p_value
        if d > limits.max_length_ks_statistic and p_value < limits.length_ks_alpha:
            fail(
                f"answer lengths differ (KS D {d:.3f} > {limits.max_length_ks_statistic}, "
                f"p {p_value:.2g} < {limits.length_ks_alpha}); median "
                f"{percentile(lengths_s, 50):,} vs the primary's {percentile(lengths_p, 50):,}"
            )
    cut_p = _share(a.truncated for a in primary if a.ok)
    cut_s = _share(a.truncated for a in shadow if a.ok)
    figures["primary_truncated_percent"], figures["shadow_truncated_percent"] = cut_p, cut_s
    if cut_s - cut_p > limits.max_truncated_share_increase_percent:
        fail(
            f"{cut_s:.1f} % of answers cut off by max_tokens vs the primary's {cut_p:.1f} %: "
            f"more than max_truncated_share_increase_percent "
            f"({limits.max_truncated_share_increase_percent}) points"
        )
    checks = [c for c in limits.content_checks if c.applies_to(adapter)]
    if checks:
        pass_p = _content_pass_share(primary, checks)
        pass_s = _content_pass_share(shadow, checks)
        figures["primary_content_pass_percent"] = pass_p
        figures["shadow_content_pass_percent"] = pass_s
        if pass_p - pass_s > limits.max_content_pass_rate_drop_percent:
            fail(
                f"content checks ({', '.join(c.name for c in checks)}) pass on {pass_s:.1f} % "
                f"vs the primary's {pass_p:.1f} %: a drop of more than "
                f"max_content_pass_rate_drop_percent ({limits.max_content_pass_rate_drop_percent})"
            )
    if verdict.outcome == "pass" and short:
        verdict.outcome = "insufficient"
        verdict.reasons.extend(short)
    return verdict


def _latency_at_like_loads(
    name: str,
    attribute: str,
    ratio_limit: float,
    primary: Sequence[Answer],
    shadow: Sequence[Answer],
    loads: LikeLoads,
    least: int,
    figures: dict[str, float],
) -> tuple[Outcome | None, str]:
    """One per-answer latency rule (``attribute`` of the answers: each answer's own times, the
    container's ``timing`` field read by ``capture.py``) judged at like loads
    (:func:`like_load_latency`): each class's p95 over the answers captured in its minutes, a
    class with fewer than ``least`` such answers on either side being no evidence.

    Answers without times: a shadow build whose answers carry none while the primary's do (a
    build that lost the field) is insufficient, never a pass. A primary build from before the
    field (none of its answers carry times) leaves the rule unjudged (None): the first release
    that brings the field would otherwise hold until ``max_minutes`` with nothing to compare it
    to. Latency is then judged on CloudWatch's per-minute ModelLatency at like loads
    (``shadow_stage.ShadowEvidence.judged``), and TTFT from the next release on; the figures say
    so (``*_timed_primary_answers`` 0)."""

    def timed(answers: Sequence[Answer]) -> list[tuple[int | None, float]]:
        return [(a.minute, v) for a in answers if a.ok and (v := getattr(a, attribute)) is not None]

    p_timed, s_timed = timed(primary), timed(shadow)
    key = attribute.removesuffix("_ms")
    figures[f"{key}_timed_primary_answers"] = len(p_timed)
    if not p_timed:
        return None, f"{name}: the primary's answers carry no times (a build before the field)"
    if not s_timed:
        return "insufficient", (
            f"{name}: {len(p_timed)} primary and {len(s_timed)} shadow answers carry times "
            "(the answers' timing field): no evidence"
        )
    sides: list[ClassFigures] = []
    classes = ((loads.fail_minutes, "at_or_below"), (loads.pass_minutes, "at_or_above"))
    for minutes, label in classes:
        p_values = [v for m, v in p_timed if m in minutes]
        s_values = [v for m, v in s_timed if m in minutes]
        figures[f"{key}_answers_{label}_primary_load"] = min(len(p_values), len(s_values))
        if len(p_values) < least or len(s_values) < least:
            sides.append(None)
            continue
        p95_p, p95_s = percentile(p_values, 95), percentile(s_values, 95)
        figures[f"{key}_p95_ratio_{label}_primary_load"] = p95_s / p95_p if p95_p > 0 else math.inf
        sides.append((p95_p, p95_s))
    return like_load_latency(name, sides[0], sides[1], ratio_limit)


def compare(
    primary: Sequence[Answer],
    shadow: Sequence[Answer],
    limits: Thresholds,
    adapters: Sequence[str] = (),
    *,
    loads: LikeLoads,
) -> Verdict:
    """The verdict over every adapter in ``adapters`` (default: every adapter either side
    answered): ``fail`` if any adapter fails, else ``insufficient`` if any lacks evidence, else
    ``pass``. No adapter at all is insufficient, never a pass. Timed answers' latencies are
    judged at ``loads`` only (module docstring)."""
    names = list(adapters) or sorted({a.adapter for a in (*primary, *shadow)})
    by_adapter = [
        compare_adapter(
            name,
            [a for a in primary if a.adapter == name],
            [a for a in shadow if a.adapter == name],
            limits,
            loads,
        )
        for name in names
    ]
    outcomes = {v.outcome for v in by_adapter}
    outcome: Outcome = (
        "fail" if "fail" in outcomes else "pass" if outcomes == {"pass"} else "insufficient"
    )
    return Verdict(outcome, by_adapter)
