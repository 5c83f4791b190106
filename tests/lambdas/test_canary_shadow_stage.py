"""The rollout's shadow stage in the controller (moto, UpdateEndpoint validated by botocore):
shadow -> comparison pass -> canary steps -> COMPLETED; a failing comparison ends the release in
the stage with no canary weight ever set; data that cannot be read holds, never passes; a stage
past max_minutes ends FAILED; a tick that dies between UpdateEndpoint and its record is
recognised by the next one from its intent; the stage's ground, its probes included (a kind never
copied to the shadow, a streamed probe refused, a runtime that does not answer), ends it early
naming what is missing."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from lambdas.canary_controller.probes import probe_count
from lambdas.canary_controller.shadow_stage import GROUND_SECONDS
from tests.lambdas import shadow_world as sw
from tests.lambdas.canary_lifecycle import record_sent
from tests.lambdas.conftest import ENDPOINT, REGION, World, advance, instances, weights


@pytest.fixture
def shadow(world: World) -> World:
    return sw.shadow_world(world)


def weight_calls(world: World) -> list[dict[str, Any]]:
    """Every UpdateEndpointWeightsAndCapacities the controller makes, recorded."""
    calls: list[dict[str, Any]] = []
    real = world.controller.sm.update_endpoint_weights_and_capacities

    def update(**kw: Any) -> Any:
        calls.append(kw)
        return real(**kw)

    world.controller.sm.update_endpoint_weights_and_capacities = update
    return calls


def canary_weights_set(calls: list[dict[str, Any]]) -> list[float]:
    return [
        item["DesiredWeight"]
        for call in calls
        for item in call["DesiredWeightsAndCapacities"]
        if item["VariantName"] == "canary" and "DesiredWeight" in item
    ]


def tick(world: World, result: dict[str, Any]) -> dict[str, Any]:
    world.clock.now += result["wait_seconds"]
    return world.tick("r1", result["seq"])


def into_shadow(world: World) -> dict[str, Any]:
    result = world.start()
    assert result["stage"] == "shadow", result
    result = tick(world, result)
    assert result["last_decision"] == "enter-shadow", result
    assert world.controller.sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"] == (
        sw.SHADOW_CONFIG
    )
    result = tick(world, result)  # InService on the shadow config: the window opens
    assert result["last_decision"] == "bake", result
    sw.ground_capture(world)
    result = tick(world, result)  # its ground: the probes sent
    assert "probes sent now" in result["last_reason"], result
    result = tick(world, result)  # capture Started and written, CloudWatch, probes on both
    assert "shadow stage ground checked" in result["last_reason"], result
    return result


def operator_rollback(world: World) -> dict[str, Any]:
    """``make canary-rollback`` by an operator, without a rollout id."""
    return world.run(
        {"action": "rollback", "endpoint_name": ENDPOINT, "requested_by": "bob",
         "reason": "wrong build"}
    )  # fmt: skip


def until(world: World, result: dict[str, Any], decision: str, limit: int = 200) -> dict[str, Any]:
    for _ in range(limit):
        if result["last_decision"] == decision or result["done"]:
            return result
        result = tick(world, result)
    raise AssertionError(f"no {decision} in {limit} ticks: {result}")


def test_a_release_passes_the_shadow_stage_then_walks_the_canary_to_completed(
    shadow: World,
) -> None:
    calls = weight_calls(shadow)
    result = into_shadow(shadow)
    sw.capture_both(shadow)
    result = until(shadow, result, "leave-shadow")
    assert result["shadow_outcome"] == "pass", result
    assert any("manga_domain: pass" in line for line in result["shadow_evidence"]), result
    assert canary_weights_set(calls) == []  # nothing of the new build served so far
    result = tick(shadow, result)
    assert result["last_decision"] == "canary-stage" and result["stage"] == "canary", result
    assert weights()["canary"] == 0.0
    while not result["done"]:
        result = advance(shadow, result)
    assert result["status"] == "COMPLETED", result
    assert canary_weights_set(calls) == [5.0, 25.0, 50.0, 75.0, 100.0]
    history = [h["decision"] for h in result["history"]]
    assert history.index("enter-shadow") < history.index("leave-shadow") < history.index("shift")


def test_a_failing_comparison_ends_the_release_in_the_shadow_stage_with_no_canary_weight_set(
    shadow: World,
) -> None:
    calls, sent = weight_calls(shadow), record_sent(shadow)
    asked = sw.serve_update_endpoint(shadow.controller.sm)
    result = into_shadow(shadow)
    sw.capture_both(shadow, shadow_fail_every=20)  # 5 % of the shadow's answers fail
    result = until(shadow, result, "shadow-end")
    assert result["status"] == "ROLLED_BACK", result
    assert "manga_domain: error rate 5.33 %" in result["rollback_reason"], result  # 8 of 150
    assert result["shadow_outcome"] == "fail"
    assert asked == [sw.SHADOW_CONFIG, sw.CANARY_CONFIG]  # in, then back to the canary config
    assert canary_weights_set(calls) == []
    assert weights()["canary"] == 0.0
    (note,) = sent
    assert note["subject"].startswith(
        "[mangaassist-vllm-test] release stopped in the shadow stage (ROLLED_BACK): shadow "
        "comparison fail"
    ), note
    assert note["status"] == "ROLLED_BACK" and note["shadow_outcome"] == "fail"
    assert any("error rate 5.33 %" in line for line in note["shadow_evidence"]), note


def test_capture_that_cannot_be_read_holds_and_fails_past_max_minutes(shadow: World) -> None:
    result = into_shadow(shadow)
    sw.capture_both(shadow)
    real = shadow.controller.s3.get_object

    def denied(**kw: Any) -> Any:
        raise ClientError(
            {"Error": {"Code": "AccessDenied", "Message": "kms:Decrypt"},
             "ResponseMetadata": {"HTTPStatusCode": 403}}, "GetObject",
        )  # fmt: skip

    shadow.controller.s3.get_object = denied
    outcomes = set()
    while result["status"] == "RUNNING":
        result = tick(shadow, result)
        assert result["last_decision"] != "leave-shadow" or result["status"] != "RUNNING"
        if result["last_decision"] == "hold":
            outcomes.add(result["shadow_outcome"])
            assert "could not read its data (AccessDenied: kms:Decrypt)" in result["last_reason"]
    assert outcomes == {"unreadable"}
    shadow.controller.s3.get_object = real
    result = until(shadow, result, "shadow-end")
    assert result["status"] == "FAILED", result
    assert "past max_minutes (180 min) without a verdict" in result["rollback_reason"]
    assert "AccessDenied" in result["rollback_reason"]
    assert weights()["canary"] == 0.0


def test_a_malformed_capture_is_a_hold_naming_the_object(shadow: World) -> None:
    result = into_shadow(shadow)
    sw.capture_both(shadow)
    sw.put_capture(shadow, "shadow", [], key="zz-broken.jsonl", body='{"captureData": 1}\n')
    result = until(shadow, result, "hold")
    assert result["shadow_outcome"] == "unreadable"
    assert "zz-broken.jsonl line 1" in result["last_reason"], result


def test_too_few_answers_hold_then_fail_past_max_minutes(shadow: World) -> None:
    result = into_shadow(shadow)
    sw.capture_both(shadow, n=20)  # fewer than min_requests_per_adapter (100)
    result = until(shadow, result, "hold")
    assert result["shadow_outcome"] == "insufficient"
    result = until(shadow, result, "shadow-end")
    assert result["status"] == "FAILED"
    assert "20 primary and 20 shadow answers" in result["rollback_reason"], result


def test_a_tick_that_dies_after_update_endpoint_is_recognised_by_its_intent(
    shadow: World,
) -> None:
    result = shadow.start()
    shadow.clock.now += result["wait_seconds"]
    table, real = shadow.controller.table, shadow.controller.table.put_item
    writes = [0]

    def put_item(**kw: Any) -> Any:
        writes[0] += 1
        if writes[0] >= 2:  # the intent is written; every write after UpdateEndpoint fails
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"},
                 "ResponseMetadata": {"HTTPStatusCode": 400}}, "PutItem",
            )  # fmt: skip
        return real(**kw)

    table.put_item = put_item
    died = shadow.tick("r1", result["seq"])
    assert "enter-shadow made, its record not written" in died["last_reason"], died
    table.put_item = real
    assert shadow.controller.sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"] == (
        sw.SHADOW_CONFIG
    )
    result = shadow.tick("r1", died["seq"])
    made = [h for h in result["history"] if h["decision"] == "enter-shadow"]
    assert len(made) == 1 and "recorded by the next tick" in made[0]["reason"], result
    assert result["status"] == "RUNNING" and result["stage"] == "shadow"


def test_an_operator_rollback_in_the_shadow_stage_goes_back_to_the_canary_config(
    shadow: World,
) -> None:
    into_shadow(shadow)
    result = until(shadow, operator_rollback(shadow), "shadow-end")
    assert result["status"] == "ROLLED_BACK", result
    described = shadow.controller.sm.describe_endpoint(EndpointName=ENDPOINT)
    assert described["EndpointConfigName"] == sw.CANARY_CONFIG
    assert instances()["canary"] >= 1 and weights()["canary"] == 0.0


def test_start_is_refused_while_the_canary_is_registered_for_autoscaling(shadow: World) -> None:
    boto3.client("application-autoscaling", region_name=REGION).register_scalable_target(
        ServiceNamespace="sagemaker", ResourceId=f"endpoint/{ENDPOINT}/variant/canary",
        ScalableDimension="sagemaker:variant:DesiredInstanceCount", MinCapacity=1, MaxCapacity=2,
    )  # fmt: skip
    with pytest.raises(Exception, match="registered for autoscaling"):
        shadow.start()


def test_start_is_refused_while_the_canary_config_would_serve_the_canary_on_return(
    shadow: World,
) -> None:
    from tests.lambdas.conftest import _backend

    for variant in _backend().endpoint_configs[sw.CANARY_CONFIG].production_variants:
        if variant["VariantName"] == "canary":
            variant["InitialVariantWeight"] = 5.0
    with pytest.raises(Exception, match="initial weight 5: back from the shadow config"):
        shadow.start()


def test_a_shadow_slower_than_the_primary_at_a_lower_load_fails_on_cloudwatch_model_latency(
    shadow: World,
) -> None:
    asked = sw.serve_shadow_minutes(shadow, primary_ms=2000, shadow_ms=3000, shadow_load=5)
    result = into_shadow(shadow)
    sw.capture_both(shadow)  # answers alike: only the latency differs
    result = until(shadow, result, "shadow-end")
    assert result["status"] == "ROLLED_BACK", result
    assert (
        "ModelLatency p95 (CloudWatch) 3,000 ms is 1.50 x the primary's 2,000 ms with the "
        "shadow's load at most the primary's" in result["rollback_reason"]
    ), result
    assert (
        "30 minutes of CloudWatch read; like-load minutes: 30 with the shadow's load at "
        "most the primary's (fail evidence), 0 at least and at most 5% above (pass "
        "evidence)" in result["shadow_evidence"]
    )
    (read,) = asked  # one GetMetricData a comparison, four one-minute series
    series = sorted(
        (q["MetricStat"]["Metric"]["MetricName"], q["MetricStat"]["Stat"])
        for q in read["MetricDataQueries"]
    )
    assert series == [
        ("InvocationsPerInstance", "Sum"),
        ("InvocationsPerInstance", "Sum"),
        ("ModelLatency", "p95"),
        ("ModelLatency", "p95"),
    ]


def test_a_slow_looking_shadow_at_a_higher_load_is_held_then_fails_past_max_minutes(
    shadow: World,
) -> None:
    """Slower where it carried more than the primary is no proof of a slower build, and no
    minute where it carried as much or less is no proof of a good one: held, never passed."""
    calls = weight_calls(shadow)
    sw.serve_shadow_minutes(shadow, primary_ms=2000, shadow_ms=3000, shadow_load=15)
    result = into_shadow(shadow)
    sw.capture_both(shadow)
    result = until(shadow, result, "hold")
    assert result["shadow_outcome"] == "insufficient", result
    assert "no evidence with the shadow's load at most the primary's" in result["last_reason"]
    result = until(shadow, result, "shadow-end")
    assert result["status"] == "FAILED", result
    assert "past max_minutes (180 min) without a verdict" in result["rollback_reason"]
    assert canary_weights_set(calls) == [] and weights()["canary"] == 0.0


def test_an_underloaded_shadow_that_looks_fast_is_never_passed(shadow: World) -> None:
    """The peak-sized shadow off-peak: a fraction of the primary's load per instance, so fast
    for its load alone. No pass evidence: the stage holds and fails past max_minutes."""
    sw.serve_shadow_minutes(shadow, primary_ms=2000, shadow_ms=1200, shadow_load=2)
    result = into_shadow(shadow)
    sw.capture_both(shadow)
    result = until(shadow, result, "shadow-end")
    assert result["status"] == "FAILED", result
    assert (
        "no evidence with the shadow's load at least the primary's" in (result["rollback_reason"])
    ), result
    assert "pass" not in {h.get("shadow_outcome") for h in result["history"]}
    assert "canary-stage" not in [h["decision"] for h in result["history"]]


def test_shadow_loads_are_converted_to_primary_instances(shadow: World) -> None:
    """A shadow instance that serves half what a primary one serves (canary_per_primary 2): 5.2
    requests per shadow instance is 10.4 per primary instance, just above the primary's 10, so
    the minutes are pass evidence (with 1.0 they would be fail evidence only: no pass)."""
    from dataclasses import replace

    ctl = shadow.controller
    plan = replace(ctl.s.rules.plan, canary_per_primary=2.0)
    ctl.s = replace(ctl.s, rules=replace(ctl.s.rules, plan=plan))
    sw.serve_shadow_minutes(shadow, shadow_load=5.2)
    result = into_shadow(shadow)
    sw.capture_both(shadow)
    result = until(shadow, result, "leave-shadow")
    assert result["shadow_outcome"] == "pass", result


def test_cloudwatch_without_the_shadows_load_is_a_hold(shadow: World) -> None:
    """No InvocationsPerInstance for the shadow (a metric not published): no minute has both
    loads, no like-load evidence: insufficient, never a pass."""
    sw.serve_shadow_minutes(shadow, shadow_load=None)  # type: ignore[arg-type]
    result = into_shadow(shadow)
    sw.capture_both(shadow)
    result = until(shadow, result, "hold")
    assert result["shadow_outcome"] == "insufficient", result
    assert result["shadow_evidence"][1].startswith("0 minutes of CloudWatch read"), result


def test_cloudwatch_that_cannot_be_read_is_a_hold(shadow: World) -> None:
    result = into_shadow(shadow)
    sw.capture_both(shadow)

    def throttled(**kw: Any) -> Any:
        raise ClientError(
            {"Error": {"Code": "AccessDenied", "Message": "cloudwatch:GetMetricData"},
             "ResponseMetadata": {"HTTPStatusCode": 403}}, "GetMetricData",
        )  # fmt: skip

    shadow.controller.cw.get_metric_data = throttled
    result = until(shadow, result, "hold")
    assert result["shadow_outcome"] == "unreadable"
    assert "ModelLatency: AccessDenied" in result["last_reason"], result


def test_the_stage_rules_round_trip_through_the_lambdas_environment() -> None:
    from dataclasses import replace

    from lambdas.canary_controller.settings import EnvVar, Settings
    from lambdas.canary_controller.shadow_compare import ContentCheck
    from lambdas.canary_controller.shadow_stage import ShadowRules
    from tests.lambdas.test_controller_environment import Built, config

    checks = (ContentCheck("no-leak", "(?i)system prompt", adapters=("manga_domain",)),)
    rules = replace(sw.SHADOW, thresholds=replace(sw.SHADOW.thresholds, content_checks=checks))
    assert ShadowRules.from_json(rules.to_json()) == rules
    env = Built(config("prod"), config("prod").rollout).env
    assert Settings.from_env(env).shadow is None  # prod: no stage, SHADOW_STAGE empty
    assert Settings.from_env({**env, EnvVar.SHADOW_STAGE.value: rules.to_json()}).shadow == rules


def test_an_endpoint_updating_hours_into_the_stage_is_waited_for_not_failed(
    shadow: World,
) -> None:
    from tests.lambdas.conftest import set_endpoint_status

    result = into_shadow(shadow)
    for _ in range(20):  # two hours and more on the shadow config, past the stage-move timeout
        result = tick(shadow, result)
    assert shadow.clock.now - result["started_at"] > sw.STAGE_UPDATE_TIMEOUT
    set_endpoint_status("Updating")  # the primary's autoscaling
    result = tick(shadow, result)
    assert result["status"] == "RUNNING" and result["last_decision"] == "wait", result
    assert "on the shadow config (autoscaling or an update)" in result["last_reason"]
    set_endpoint_status("InService")
    sw.capture_both(shadow)
    result = until(shadow, result, "leave-shadow")
    assert result["status"] == "RUNNING" and result["shadow_outcome"] == "pass"


def test_an_endpoint_that_stays_updating_in_the_stage_ends_it_failed(shadow: World) -> None:
    from tests.lambdas.conftest import set_endpoint_status

    result = into_shadow(shadow)
    set_endpoint_status("Updating")
    while result["status"] == "RUNNING":
        result = tick(shadow, result)
    assert "stayed Updating on the shadow config" in result["rollback_reason"], result
    set_endpoint_status("InService")
    result = until(shadow, result, "shadow-end")
    assert result["status"] == "FAILED"


def test_a_tick_that_dies_after_the_move_back_is_recognised_and_the_canary_stage_follows(
    shadow: World,
) -> None:
    result = into_shadow(shadow)
    sw.capture_both(shadow)
    table, real_put = shadow.controller.table, shadow.controller.table.put_item
    real_update, broken = shadow.controller.sm.update_endpoint, [False]

    def update_endpoint(**kw: Any) -> Any:
        answer = real_update(**kw)
        broken[0] = kw["EndpointConfigName"] == sw.CANARY_CONFIG  # the move back landed
        return answer

    def put_item(**kw: Any) -> Any:
        if broken[0]:
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"},
                 "ResponseMetadata": {"HTTPStatusCode": 400}}, "PutItem",
            )  # fmt: skip
        return real_put(**kw)

    shadow.controller.sm.update_endpoint, table.put_item = update_endpoint, put_item
    while not broken[0]:
        result = tick(shadow, result)
    assert "leave-shadow made, its record not written" in result["last_reason"], result
    table.put_item = real_put
    result = tick(shadow, result)
    made = [h for h in result["history"] if h["decision"] == "leave-shadow"]
    assert len(made) == 1 and "recorded by the next tick" in made[0]["reason"], result
    assert result["last_decision"] == "canary-stage" and result["stage"] == "canary", result
    assert result["status"] == "RUNNING" and weights()["canary"] == 0.0


@pytest.mark.parametrize(
    ("client", "method", "error"),
    [
        ("s3", "get_object", EndpointConnectionError(endpoint_url="https://s3.amazonaws.com")),
        ("s3", "get_object", ReadTimeoutError(endpoint_url="https://s3.amazonaws.com")),
        ("cw", "get_metric_data", ConnectTimeoutError(endpoint_url="https://monitoring")),
    ],
    ids=["s3-connection", "s3-read-timeout", "cloudwatch-connect-timeout"],
)
def test_no_answer_from_aws_is_a_hold_then_fails_past_max_minutes(
    shadow: World, client: str, method: str, error: Exception
) -> None:
    """Not only ClientError: a connection that fails or a timeout (botocore's BotoCoreError
    family) keeps the comparison from its data the same way, a hold and never a pass."""
    result = into_shadow(shadow)
    sw.capture_both(shadow)

    def no_answer(**kw: Any) -> Any:
        raise error

    setattr(getattr(shadow.controller, client), method, no_answer)
    result = until(shadow, result, "hold")
    assert result["shadow_outcome"] == "unreadable"
    assert type(error).__name__ in result["last_reason"], result
    result = until(shadow, result, "shadow-end")
    assert result["status"] == "FAILED", result
    assert "without a verdict" in result["rollback_reason"]
    assert weights()["canary"] == 0.0


def opened(world: World) -> dict[str, Any]:
    """Into the stage, its window open, its ground not checked yet."""
    result = tick(world, world.start())
    assert result["last_decision"] == "enter-shadow", result
    result = tick(world, result)
    assert result["last_decision"] == "bake", result
    return result


def ended_on_ground(world: World, result: dict[str, Any]) -> dict[str, Any]:
    """Ticks until the release ends; it must end within the ground's minutes, not max_minutes."""
    entered = world.clock.now
    result = until(world, result, "shadow-end")
    assert result["status"] == "FAILED", result
    assert world.clock.now - entered <= GROUND_SECONDS + sw.STAGE_UPDATE_TIMEOUT, result
    live = world.controller.sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"]
    assert live == sw.CANARY_CONFIG
    return result


@pytest.mark.parametrize(
    ("fault", "named"),
    [
        ("capture stopped", "data capture is Stopped, not Started"),
        ("no shadow capture", "no capture object of shadow yet"),
        ("no shadow metrics", "no CloudWatch Invocations of shadow yet"),
        ("no shadow instance", "no shadow instance in service"),
        ("capture unreadable", "primary capture unread (AccessDenied: Access Denied)"),
    ],
)
def test_a_stage_without_its_ground_ends_failed_at_once_naming_what_is_missing(
    shadow: World, fault: str, named: str
) -> None:
    ground = shadow.shadow_ground
    if fault == "capture stopped":
        ground.capture_status = "Stopped"
    if fault == "no shadow capture":  # not even the probes' copies are captured
        shadow.runtime.copied = {"whole": False, "streamed": False}
    if fault == "no shadow metrics":
        ground.invocations["shadow"] = None
    if fault == "no shadow instance":
        ground.shadow_instances = 0
    if fault == "capture unreadable":  # the S3 call itself refused

        def paginator(name: str) -> Any:
            raise ClientError(
                {"Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                 "ResponseMetadata": {"HTTPStatusCode": 403}}, name,
            )  # fmt: skip

        shadow.controller.s3.get_paginator = paginator
    result = opened(shadow)
    sw.ground_capture(
        shadow, ("primary",) if fault == "no shadow capture" else ("primary", "shadow")
    )
    result = tick(shadow, result)
    assert result["last_decision"] == "bake" and named in result["last_reason"], result
    result = ended_on_ground(shadow, result)
    assert "the shadow stage's ground is not there" in result["last_reason"], result
    assert named in result["last_reason"], result
    assert "shadow_outcome" not in (shadow.controller.load() or {})  # no comparison ever ran


def test_a_ground_that_comes_within_its_minutes_is_recorded_with_both_error_rates(
    shadow: World,
) -> None:
    ground = shadow.shadow_ground
    ground.invocations["shadow"] = None  # CloudWatch has no shadow datapoint yet
    result = opened(shadow)
    result = tick(shadow, result)
    assert "no CloudWatch Invocations of shadow yet" in result["last_reason"], result
    assert "no capture object of primary yet" in result["last_reason"], result
    ground.invocations["shadow"] = (40.0, 2.0)
    sw.ground_capture(shadow)
    result = tick(shadow, result)
    record: Any = shadow.controller.load()
    assert record["shadow_ground"].startswith(  # the ground's object and the probes' one
        "data capture Started, shadow 1 instances in service, primary 2 capture objects"
    ), record
    assert "shadow" in record["shadow_ground"] and "5XX 5 %" in record["shadow_ground"], record
    for variant in ("primary", "shadow"):  # 145 of each kind at 10 % sample, 100 % capture
        assert (
            f"{variant} capture holds 145 whole and 145 streamed probes"
            in (record["shadow_ground"])
        ), record
    assert record["shadow_probes"].startswith(
        "145 of 145 whole probes answered; 145 of 145 streamed probes answered"
    ), record
    assert result["status"] == "RUNNING", result


def test_a_shadow_whose_errors_only_cloudwatch_sees_fails_the_comparison(shadow: World) -> None:
    """Issue 41, item 4: the error rate per variant comes from CloudWatch too: answers alike in
    the capture, but 5 % of the shadow's requests answered 5XX (none captured) fail it."""
    result = into_shadow(shadow)
    shadow.shadow_ground.invocations["shadow"] = (40.0, 2.0)
    sw.capture_both(shadow)
    result = until(shadow, result, "shadow-end")
    assert result["status"] == "ROLLED_BACK", result
    record: Any = shadow.controller.load()
    assert record["shadow_outcome"] == "fail", record
    assert "CloudWatch 5XX: shadow 5 % of" in record["rollback_reason"], record
    assert any(line.startswith("CloudWatch 5XX") for line in record["shadow_evidence"]), record


# ------------------------------------------------------------- the stage's probes (issue 41, 4)


def probes_sent(world: World) -> dict[str, Any]:
    """Into the stage, its ground all there but for the probes, which the next tick sends."""
    result = opened(world)
    sw.ground_capture(world)
    result = tick(world, result)
    assert result["last_decision"] in ("bake", "leave-shadow", "shadow-end"), result
    return result


def test_probes_of_both_kinds_found_in_both_captures_let_the_stage_run(shadow: World) -> None:
    result = probes_sent(shadow)
    kinds = [kind for kind, _ in shadow.runtime.calls]
    n = probe_count(sw.SHADOW.sample_percent, sw.SHADOW.capture_percent)
    assert n == 145 and kinds.count("whole") == kinds.count("streamed") == n
    assert "probes sent now" in result["last_reason"], result
    result = tick(shadow, result)
    assert "shadow stage ground checked" in result["last_reason"], result
    assert len(shadow.runtime.calls) == 2 * n  # sent once, never again
    sw.capture_both(shadow)
    result = until(shadow, result, "leave-shadow")
    assert result["shadow_outcome"] == "pass", result  # the probes are not compared


def test_a_probe_kind_never_copied_to_the_shadow_ends_the_stage_naming_it(shadow: World) -> None:
    """SageMaker does not copy streamed requests to the shadow (the undocumented answer that
    would leave the comparison blind to them): the stage ends FAILED within its ground minutes,
    the reason naming the missing kind and variant, never a hold to max_minutes."""
    shadow.runtime.copied["streamed"] = False
    result = probes_sent(shadow)
    result = tick(shadow, result)
    assert "no streamed probe in the shadow's capture" in result["last_reason"], result
    result = ended_on_ground(shadow, result)
    reason = result["last_reason"]
    assert "the shadow stage's ground is not there" in reason, result
    assert "no streamed probe in the shadow's capture" in reason, result
    assert "no whole probe" not in reason and "primary's capture" not in reason, result
    assert "shadow capture holds 145 whole and 0 streamed probes" in reason, result
    assert "shadow_outcome" not in (shadow.controller.load() or {})


def test_a_streamed_probe_refused_ends_the_stage_at_once(shadow: World) -> None:
    shadow.runtime.refuse["streamed"] = ClientError(
        {"Error": {"Code": "ValidationException",
                   "Message": "Response streaming is not supported with shadow variants"},
         "ResponseMetadata": {"HTTPStatusCode": 400}}, "InvokeEndpointWithResponseStream",
    )  # fmt: skip
    result = probes_sent(shadow)
    assert result["status"] in ("ROLLING_BACK", "FAILED"), result
    result = until(shadow, result, "shadow-end")
    assert result["status"] == "FAILED", result
    reason = result["last_reason"]
    assert "SageMaker refused 145 of 145 streamed probes on the shadow config" in reason, result
    assert "Response streaming is not supported with shadow variants" in reason, result
    assert "users' streamed requests are refused there too" in reason, result
    record: Any = shadow.controller.load()
    assert record["shadow_probes"].startswith("145 of 145 whole probes answered"), record
    live = shadow.controller.sm.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"]
    assert live == sw.CANARY_CONFIG
    assert weights()["canary"] == 0.0


def test_a_runtime_that_does_not_answer_ends_the_stage_on_its_ground_naming_it(
    shadow: World,
) -> None:
    """No answer at all (the connection fails): nothing is captured, the stage ends FAILED on
    its ground's minutes, the reason naming the missing probes and what the calls raised."""
    shadow.runtime.raises = EndpointConnectionError(endpoint_url="https://runtime.sagemaker")
    result = probes_sent(shadow)
    assert result["status"] == "RUNNING", result  # no answer is not a refusal: it may land
    result = ended_on_ground(shadow, result)
    reason = result["last_reason"]
    for kind in ("whole", "streamed"):
        for variant in ("primary", "shadow"):
            assert f"no {kind} probe in the {variant}'s capture" in reason, result
    assert "0 of 145 whole probes answered (first failure: shadow-stage-probe-" in reason, result
    assert "EndpointConnectionError" in reason, result
