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
  ``max_ttft_p95_ratio`` times the primary's (nearest-rank percentiles);
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
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
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
    """``rollout.shadow`` in plain data (typed_config.shadow.ShadowStage.thresholds)."""

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
    the capture does not carry them (a failed answer)."""

    adapter: str
    ok: bool
    latency_ms: float | None = None
    ttft_ms: float | None = None
    length: int = 0
    truncated: bool = False
    text: str = ""


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
        if self.outcome == "pass":
            return f"shadow comparison passed on {len(self.adapters)} adapter(s)"
        return f"shadow comparison {self.outcome}: " + "; ".join(self.reasons)


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
    adapter: str, primary: Sequence[Answer], shadow: Sequence[Answer], limits: Thresholds
) -> AdapterVerdict:
    """One adapter's verdict (see the module docstring for each rule)."""
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
    for name, attribute, ratio_limit in (
        ("latency p95", "latency_ms", limits.max_latency_p95_ratio),
        ("TTFT p95", "ttft_ms", limits.max_ttft_p95_ratio),
    ):
        p_values = [v for a in primary if a.ok and (v := getattr(a, attribute)) is not None]
        s_values = [v for a in shadow if a.ok and (v := getattr(a, attribute)) is not None]
        if not p_values or not s_values:
            continue  # the capture carries no such figure on one side: nothing to compare
        p95_p, p95_s = percentile(p_values, 95), percentile(s_values, 95)
        key = attribute.removesuffix("_ms")
        figures[f"primary_{key}_p95_ms"], figures[f"shadow_{key}_p95_ms"] = p95_p, p95_s
        if p95_p > 0 and p95_s / p95_p > ratio_limit:
            fail(
                f"{name} {p95_s:,.0f} ms is {p95_s / p95_p:.2f} x the primary's {p95_p:,.0f} ms: "
                f"above {ratio_limit} x"
            )
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
    return verdict


def compare(
    primary: Sequence[Answer],
    shadow: Sequence[Answer],
    limits: Thresholds,
    adapters: Sequence[str] = (),
) -> Verdict:
    """The verdict over every adapter in ``adapters`` (default: every adapter either side
    answered): ``fail`` if any adapter fails, else ``insufficient`` if any lacks evidence, else
    ``pass``. No adapter at all is insufficient, never a pass."""
    names = list(adapters) or sorted({a.adapter for a in (*primary, *shadow)})
    by_adapter = [
        compare_adapter(
            name,
            [a for a in primary if a.adapter == name],
            [a for a in shadow if a.adapter == name],
            limits,
        )
        for name in names
    ]
    outcomes = {v.outcome for v in by_adapter}
    outcome: Outcome = (
        "fail" if "fail" in outcomes else "pass" if outcomes == {"pass"} else "insufficient"
    )
    return Verdict(outcome, by_adapter)
