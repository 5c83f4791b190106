"""The shadow comparison's rules on answers built to break exactly one of them."""

from __future__ import annotations

import random

import pytest

from lambdas.canary_controller.shadow_compare import (
    Answer,
    ContentCheck,
    LikeLoads,
    Thresholds,
    compare,
    ks_two_sample,
    percentile,
)

LIMITS = Thresholds(min_requests_per_adapter=200)
#: Every answer of these tests in minute 0, where both variants ran at the same load.
EQUAL = LikeLoads(frozenset({0}), frozenset({0}))


def answers(
    adapter: str = "recs",
    n: int = 400,
    *,
    seed: int = 1,
    fail_every: int = 0,
    latency: float = 1000.0,
    ttft: float | None = None,
    timed: bool = True,
    length: int = 120,
    truncated_every: int = 0,
    text: str = "Try Vinland Saga.",
    minute: int = 0,
) -> list[Answer]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ok = not (fail_every and i % fail_every == 0)
        out.append(
            Answer(
                adapter=adapter,
                ok=ok,
                latency_ms=latency * rng.uniform(0.8, 1.2) if ok and timed else None,
                ttft_ms=(ttft or latency / 10) * rng.uniform(0.8, 1.2) if ok and timed else None,
                length=max(1, int(rng.gauss(length, length / 10))),
                truncated=bool(truncated_every and i % truncated_every == 0),
                text=text,
                minute=minute,
            )
        )
    return out


def test_same_build_passes_with_its_figures() -> None:
    verdict = compare(answers(seed=1), answers(seed=2), LIMITS, loads=EQUAL)
    assert verdict.outcome == "pass", verdict.summary()
    (recs,) = verdict.adapters
    assert recs.figures["primary_requests"] == recs.figures["shadow_requests"] == 400
    assert recs.figures["length_ks_statistic"] < LIMITS.max_length_ks_statistic


@pytest.mark.parametrize(
    ("shadow", "named"),
    [
        (answers(seed=2, fail_every=50), "error rate 2.00 %"),
        (answers(seed=2, latency=2000), "latency p95"),
        (answers(seed=2, length=60), "answer lengths differ"),
        (answers(seed=2, truncated_every=10), "cut off by max_tokens"),
    ],
)
def test_each_regression_fails_naming_its_rule(shadow: list[Answer], named: str) -> None:
    verdict = compare(answers(seed=1), shadow, LIMITS, loads=EQUAL)
    assert verdict.outcome == "fail"
    assert any(named in reason for reason in verdict.reasons), verdict.reasons


def test_a_content_check_that_drops_fails_only_its_adapter() -> None:
    limits = Thresholds(
        min_requests_per_adapter=200,
        content_checks=(ContentCheck("no-apology", r"(?i)\bsorry\b", must_match=False),),
    )
    primary = answers("recs", seed=1) + answers("support", seed=3)
    shadow = answers("recs", seed=2) + answers("support", seed=4, text="Sorry, I cannot.")
    verdict = compare(primary, shadow, limits, loads=EQUAL)
    assert verdict.outcome == "fail"
    by_name = {a.adapter: a for a in verdict.adapters}
    assert by_name["recs"].outcome == "pass"
    assert by_name["support"].outcome == "fail"
    assert "no-apology" in by_name["support"].reasons[0]


def test_too_few_answers_is_insufficient_never_a_pass() -> None:
    verdict = compare(answers(n=150, seed=1), answers(n=400, seed=2), LIMITS, loads=EQUAL)
    assert verdict.outcome == "insufficient"
    assert "150 primary" in verdict.reasons[0]
    assert compare([], [], LIMITS, loads=EQUAL).outcome == "insufficient"


def test_a_fail_outranks_an_adapter_short_of_evidence() -> None:
    primary = answers("recs", seed=1) + answers("support", n=10, seed=3)
    shadow = answers("recs", seed=2, latency=3000) + answers("support", n=10, seed=4)
    assert compare(primary, shadow, LIMITS, loads=EQUAL).outcome == "fail"


def test_a_named_adapter_nobody_answered_is_insufficient() -> None:
    verdict = compare(
        answers(seed=1), answers(seed=2), LIMITS, adapters=["recs", "qa"], loads=EQUAL
    )
    assert verdict.outcome == "insufficient"


def test_ks_and_percentile_against_known_values() -> None:
    d, p = ks_two_sample([1, 2, 3, 4, 5], [1, 2, 3, 4, 5])
    assert d == 0 and p == 1.0
    d, p = ks_two_sample(list(range(100)), list(range(50, 150)))
    assert d == pytest.approx(0.5)
    assert p < 1e-5
    assert percentile([5, 1, 3, 2, 4], 50) == 3
    assert percentile(list(range(1, 101)), 95) == 95


def test_ttft_p95_judges_each_adapter_on_its_own() -> None:
    """A shadow whose first token comes 2 x later on one adapter, end to end unchanged: that
    adapter fails on TTFT alone, the other passes."""
    primary = answers("recs", seed=1) + answers("support", seed=3)
    shadow = answers("recs", seed=2) + answers("support", seed=4, ttft=200.0)
    verdict = compare(primary, shadow, LIMITS, loads=EQUAL)
    by_name = {a.adapter: a for a in verdict.adapters}
    assert verdict.outcome == "fail" and by_name["recs"].outcome == "pass"
    support = by_name["support"]
    assert support.outcome == "fail" and len(support.reasons) == 1, support.reasons
    assert support.reasons[0].startswith("TTFT p95") and "above 1.25 x" in support.reasons[0]
    assert support.figures["ttft_p95_ratio_at_or_below_primary_load"] > 1.6
    assert support.figures["latency_p95_ratio_at_or_below_primary_load"] < 1.25


def test_a_shadow_without_times_holds_the_latency_rules_never_passes_them() -> None:
    """A new build whose answers lost the timing field, the primary's carrying it:
    insufficient, naming both latency rules and the counts."""
    verdict = compare(answers(seed=1), answers(seed=2, timed=False), LIMITS, loads=EQUAL)
    assert verdict.outcome == "insufficient", verdict.summary()
    assert [r.split(":")[1].strip() for r in verdict.reasons] == ["latency p95", "TTFT p95"]
    assert "400 primary and 0 shadow answers carry times" in verdict.reasons[0]


def test_a_primary_from_before_the_field_leaves_the_per_answer_rules_unjudged() -> None:
    """Either shadow (timed or not) against a primary whose answers carry no times: the
    per-answer latency rules are not judged (CloudWatch's ModelLatency at like loads is, in the
    stage), so the other rules decide."""
    for shadow in (answers(seed=2), answers(seed=2, timed=False)):
        verdict = compare(answers(seed=1, timed=False), shadow, LIMITS, loads=EQUAL)
        assert verdict.outcome == "pass", verdict.summary()
        assert all(a.figures["ttft_timed_primary_answers"] == 0 for a in verdict.adapters)


def test_a_fail_on_another_rule_outranks_missing_times() -> None:
    shadow = answers(seed=2, fail_every=50, timed=False)
    verdict = compare(answers(seed=1), shadow, LIMITS, loads=EQUAL)
    assert verdict.outcome == "fail"
    assert verdict.summary() == (
        "shadow comparison fail: recs: error rate 2.00 % vs the primary's 0.00 %: more than "
        "max_error_rate_increase_percent (0.5) points"
    )
