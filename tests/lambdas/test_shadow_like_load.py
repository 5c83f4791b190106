"""Latency judged at like loads, two-sided (shadow_compare, "Latency at like loads"): fail
evidence only where the shadow's load per instance was at most the primary's, pass evidence only
where it was at least and at most PASS_LOAD_SLACK above (far above is no like load); neither is
insufficient. On the per-answer rules (answers grouped by their
capture minute) and on CloudWatch's per-minute ModelLatency p95 (ShadowEvidence.judged)."""

from __future__ import annotations

import random

import pytest

from lambdas.canary_controller.shadow_compare import (
    MIN_LIKE_LOAD_MINUTES,
    PASS_LOAD_SLACK,
    Answer,
    LikeLoads,
    MinuteLatency,
    Thresholds,
    capture_minute,
    cloudwatch_latency,
    compare,
    like_load_latency,
)
from lambdas.canary_controller.shadow_stage import ShadowEvidence

LIMITS = Thresholds(min_requests_per_adapter=100)
#: minute 1: the shadow at half the primary's load; minute 2: 4 % above it, within the slack;
#: minute 3: at 1.5 x, no like load (all in primary units).
LOADS = {1: (10.0, 5.0), 2: (10.0, 10.4), 3: (10.0, 15.0)}
assert 1.04 <= 1 + PASS_LOAD_SLACK < 1.5


def timed(n: int, latency: float, minute: int, seed: int) -> list[Answer]:
    rng = random.Random(seed)
    return [
        Answer("recs", True, latency * rng.uniform(0.9, 1.1), latency / 10, 120, minute=minute)
        for _ in range(n)
    ]


def test_the_classes_follow_each_minutes_loads_in_primary_instances() -> None:
    loads = LikeLoads.of(
        {1: (10.0, 5.0), 2: (10.0, 10.4), 3: (10.0, 10.0), 4: (10.0, 0.0), 5: (10.0, 15.0)}, 1.0
    )
    assert loads.fail_minutes == {1, 3} and loads.pass_minutes == {2, 3}  # 4: no shadow request
    # 5: the shadow at 1.5 x the primary's load is in neither class (no like load)
    # a shadow instance serving half what a primary one does: 5.2 of its requests are 10.4 of
    # theirs (pass evidence), 6 are 12 (20 % above: none)
    halved = LikeLoads.of({1: (10.0, 5.2), 2: (10.0, 6.0)}, 2.0)
    assert halved.fail_minutes == frozenset() and halved.pass_minutes == {1}


def test_a_slow_shadow_at_a_lower_load_fails() -> None:
    verdict = compare(
        timed(200, 1000, 1, 1), timed(200, 2000, 1, 2), LIMITS, loads=LikeLoads.of(LOADS, 1.0)
    )
    assert verdict.outcome == "fail", verdict.summary()
    assert "with the shadow's load at most the primary's: above 1.25 x" in verdict.summary()


def test_a_slow_looking_shadow_at_a_higher_load_is_not_failed() -> None:
    verdict = compare(
        timed(200, 1000, 2, 1), timed(200, 2000, 2, 2), LIMITS, loads=LikeLoads.of(LOADS, 1.0)
    )
    assert verdict.outcome == "insufficient", verdict.summary()
    (recs,) = verdict.adapters
    assert recs.figures["latency_p95_ratio_at_or_above_primary_load"] > 1.8


def test_a_fast_shadow_at_a_lower_load_is_not_passed() -> None:
    verdict = compare(
        timed(200, 1000, 1, 1), timed(200, 500, 1, 2), LIMITS, loads=LikeLoads.of(LOADS, 1.0)
    )
    assert verdict.outcome == "insufficient", verdict.summary()
    assert "no evidence with the shadow's load at least the primary's" in verdict.summary()


def test_as_fast_at_a_higher_load_passes() -> None:
    verdict = compare(
        timed(200, 1000, 2, 1), timed(200, 1100, 2, 2), LIMITS, loads=LikeLoads.of(LOADS, 1.0)
    )
    assert verdict.outcome == "pass", verdict.summary()


def test_as_fast_far_above_the_primarys_load_is_no_evidence() -> None:
    """At 1.5 x the primary's load (minute 3) a healthy build may be slower for its load alone
    (an engine full at max_num_seqs queues): no like load, so neither a pass nor a fail."""
    verdict = compare(
        timed(200, 1000, 3, 1), timed(200, 1000, 3, 2), LIMITS, loads=LikeLoads.of(LOADS, 1.0)
    )
    assert verdict.outcome == "insufficient", verdict.summary()
    slow = compare(
        timed(200, 1000, 3, 1), timed(200, 3000, 3, 2), LIMITS, loads=LikeLoads.of(LOADS, 1.0)
    )
    assert slow.outcome == "insufficient", slow.summary()


def test_no_like_load_minutes_is_insufficient_even_with_other_rules_passing() -> None:
    primary, shadow = timed(200, 1000, 7, 1), timed(200, 1000, 7, 2)  # minute 7: no load read
    verdict = compare(primary, shadow, LIMITS, loads=LikeLoads.of(LOADS, 1.0))
    assert verdict.outcome == "insufficient"
    untimed = [Answer("recs", True, 1000.0, 100.0, 120) for _ in range(200)]  # no minute
    assert compare(untimed, untimed, LIMITS, loads=LikeLoads.of(LOADS, 1.0)).outcome == (
        "insufficient"
    )
    # errors are judged on every answer, whatever the loads: a failing shadow still fails
    failing = [Answer("recs", False, minute=7) for _ in range(20)] + shadow[20:]
    assert compare(primary, failing, LIMITS, loads=LikeLoads()).outcome == "fail"


def test_a_primary_without_times_leaves_the_per_answer_rules_to_the_next_release() -> None:
    """The first release that brings the timing field meets a primary from before it: the
    per-answer rules are not judged (latency is CloudWatch's, at like loads), so the stage can
    pass on its other rules rather than hold until max_minutes; the figures say 0 timed."""
    plain = [Answer("recs", True, length=120, minute=2) for _ in range(200)]
    timed = [
        Answer("recs", True, length=120, minute=2, latency_ms=900.0, ttft_ms=90.0)
        for _ in range(200)
    ]
    verdict = compare(plain, timed, LIMITS, loads=LikeLoads.of(LOADS, 1.0))
    assert verdict.outcome == "pass", verdict.reasons
    (adapter,) = verdict.adapters
    assert adapter.figures["latency_timed_primary_answers"] == 0
    assert adapter.figures["ttft_timed_primary_answers"] == 0


def test_a_shadow_that_lost_the_times_is_no_latency_evidence() -> None:
    """The primary's answers carry times and the new build's do not: insufficient, never a pass,
    whatever the loads."""
    plain = [Answer("recs", True, length=120, minute=2) for _ in range(200)]
    timed = [
        Answer("recs", True, length=120, minute=2, latency_ms=900.0, ttft_ms=90.0)
        for _ in range(200)
    ]
    verdict = compare(timed, plain, LIMITS, loads=LikeLoads.of(LOADS, 1.0))
    assert verdict.outcome == "insufficient"
    assert "200 primary and 0 shadow answers carry times" in verdict.reasons[0]


@pytest.mark.parametrize(
    ("fail_side", "pass_side", "outcome"),
    [
        ((1000.0, 2000.0), None, "fail"),
        (None, (1000.0, 2000.0), "insufficient"),
        ((1000.0, 500.0), None, "insufficient"),
        (None, (1000.0, 1100.0), "pass"),
        ((1000.0, 2000.0), (1000.0, 1000.0), "fail"),
        (None, None, "insufficient"),
    ],
)
def test_the_two_sided_rule(fail_side, pass_side, outcome) -> None:  # type: ignore[no-untyped-def]
    assert like_load_latency("latency p95", fail_side, pass_side, 1.25)[0] == outcome


def minutes(ms: dict[int, tuple[float, float]], shadow_load: float) -> dict[int, MinuteLatency]:
    return {m: MinuteLatency(p, s, 10.0, shadow_load) for m, (p, s) in ms.items()}


def evidence(per_minute: dict[int, MinuteLatency]) -> ShadowEvidence:
    plain = timed(200, 1000.0, 0, seed=1)  # alike on both sides, in minute 0
    loads = LikeLoads.of({m: (f.primary_per_instance, f.shadow_per_instance)
                          for m, f in per_minute.items()}, 1.0)  # fmt: skip
    return ShadowEvidence(compare(plain, plain, LIMITS, loads=loads), minutes=per_minute,
                          loads=loads)  # fmt: skip


def test_cloudwatch_latency_is_judged_per_class_on_per_minute_p95s() -> None:
    slow = {m: (1000.0, 2000.0) for m in range(MIN_LIKE_LOAD_MINUTES)}
    outcome, why = evidence(minutes(slow, 5.0)).judged(1.25)  # lower load, 2 x slower
    assert outcome == "fail" and "2.00 x" in why
    assert evidence(minutes(slow, 10.4)).judged(1.25)[0] == "insufficient"  # higher load
    fast = {m: (1000.0, 600.0) for m in range(MIN_LIKE_LOAD_MINUTES)}
    outcome, why = evidence(minutes(fast, 5.0)).judged(1.25)  # fast at a lower load: no pass
    assert outcome == "insufficient" and "no evidence with the shadow's load at least" in why
    assert evidence(minutes(fast, 10.4)).judged(1.25)[0] == "pass"
    assert evidence(minutes(fast, 15.0)).judged(1.25)[0] == "insufficient"  # no like load
    assert evidence({}).judged(1.25)[0] == "insufficient"  # no CloudWatch minute at all


def test_a_class_needs_its_minutes_and_one_thin_minute_does_not_decide() -> None:
    few = {m: (1000.0, 3000.0) for m in range(MIN_LIKE_LOAD_MINUTES - 1)}
    assert evidence(minutes(few, 5.0)).judged(1.25)[0] == "insufficient"
    mostly_alike = {0: (1000.0, 9000.0), 1: (1000.0, 1000.0), 2: (1000.0, 1050.0)}
    per_minute = minutes(mostly_alike, 10.4)
    loads = LikeLoads.of({m: (10.0, 10.4) for m in per_minute}, 1.0)
    assert cloudwatch_latency(per_minute, loads, 1.25)[0] == "pass"  # median 1,050 vs 1,000


def test_the_evidence_lines_say_the_minutes_and_each_classs_ratio() -> None:
    per_minute = minutes({m: (1000.0, 1100.0) for m in range(4)}, 10.4)
    lines = evidence(per_minute).lines()
    assert (
        "4 minutes of CloudWatch read; like-load minutes: 0 with the shadow's load at most "
        "the primary's (fail evidence), 4 at least and at most 5% above (pass evidence)" in lines
    )
    assert any("1,100 ms vs the primary's 1,000 ms (1.10 x) with the shadow's load at least"
               in line for line in lines), lines  # fmt: skip


def test_capture_minute_reads_data_captures_inference_time() -> None:
    assert capture_minute("2026-11-28T10:15:30Z") == 1_795_860_930 // 60
    assert capture_minute("2026-11-28T10:15:30+00:00") == capture_minute("2026-11-28T10:15:59Z")
    assert capture_minute("") is None
    assert capture_minute("yesterday") is None


def test_the_per_minute_read_is_one_get_metric_data_of_four_one_minute_series() -> None:
    """Request and answers checked against CloudWatch's model by botocore's Stubber: both
    variants' ModelLatency p95 and InvocationsPerInstance Sum at a 60 s period, the pages
    followed, microseconds to ms, and a minute missing one of the four left out."""
    from datetime import UTC, datetime

    import boto3
    from botocore.stub import Stubber

    from lambdas.canary_controller import aws

    cw = boto3.client("cloudwatch", region_name="us-east-1")
    start, end = 1_795_860_000, 1_795_860_000 + 300
    at = [datetime.fromtimestamp(start + 60 * i, UTC) for i in range(3)]

    def query(qid: str, variant: str, metric: str, stat: str) -> dict[str, object]:
        return aws.variant_query(qid, "ep", variant, metric, 60, stat)

    queries = [
        query("s0_0", "primary", "ModelLatency", "p95"),
        query("s0_1", "primary", "InvocationsPerInstance", "Sum"),
        query("s1_0", "shadow", "ModelLatency", "p95"),
        query("s1_1", "shadow", "InvocationsPerInstance", "Sum"),
    ]
    window = {
        "MetricDataQueries": queries,
        "StartTime": datetime.fromtimestamp(start, UTC),
        "EndTime": datetime.fromtimestamp(end, UTC),
    }

    def result(qid: str, stamps: list[datetime], values: list[float]) -> dict[str, object]:
        return {"Id": qid, "Timestamps": stamps, "Values": values, "StatusCode": "Complete"}

    with Stubber(cw) as stub:
        stub.add_response(
            "get_metric_data",
            {
                "MetricDataResults": [
                    result("s0_0", at, [2_000_000.0, 2_100_000.0, 2_200_000.0]),
                    result("s0_1", at, [10.0, 11.0, 12.0]),
                    result("s1_0", at[:2], [4_000_000.0, 4_200_000.0]),
                ],
                "NextToken": "page-2",
            },
            window,
        )
        stub.add_response(
            "get_metric_data",
            {"MetricDataResults": [result("s1_1", at, [5.0, 5.5, 6.0])]},
            {**window, "NextToken": "page-2"},
        )
        found = aws.shadow_minutes(cw, "ep", "primary", "shadow", start, end)
        stub.assert_no_pending_responses()
    first = start // 60
    assert found == {
        first: MinuteLatency(2000.0, 4000.0, 10.0, 5.0),
        first + 1: MinuteLatency(2100.0, 4200.0, 11.0, 5.5),
    }  # the third minute has no shadow ModelLatency: left out
