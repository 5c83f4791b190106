"""The watched alarms' evaluation figures the simulator replays (sizing/rollout_alarms.py) are the
ones the stacks create: the rollback alarms and the relative latency alarms are built here in a bare
stack and read back from the template; the monitoring rules' windows and periods from the
functions monitoring.py builds them with. A change on either side fails here."""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from sizing.fit_checks import load_config
from sizing.rollout_alarms import (
    COMPARABLE_LOAD,
    ENGINE_RESTARTS_WINDOW_SECONDS,
    HIGH_TTFT_WINDOW_SECONDS,
    RELATIVE_LATENCY,
    ROLLBACK_5XX,
    ROLLBACK_LATENCY_P99,
    Timing,
    ratio_expression,
    rule_period,
    watched_alarms,
)
from sizing.rollout_plan import rollout_capacity_plan
from stacks.constructs.alarm_rules import variant_rules
from stacks.constructs.endpoint_ref import EndpointRef
from stacks.constructs.monitoring import _rule_period
from stacks.constructs.relative_latency import RelativeLatencyAlarms
from stacks.constructs.rollback_alarms import RollbackAlarms
from tests.fixtures import config_fixture

PROD = config_fixture("prod")


@pytest.fixture(scope="module")
def prod():  # type: ignore[no-untyped-def]
    return load_config(PROD, env="prod")


@pytest.fixture(scope="module")
def alarms(prod) -> dict[str, dict[str, Any]]:  # type: ignore[no-untyped-def]
    """The synthesized alarms by their description's start."""
    stack = cdk.Stack(cdk.App(), "Contract")
    endpoint = EndpointRef.of(stack, "contract-endpoint")
    RollbackAlarms(stack, "Rollback", endpoint=endpoint, policy=prod.deployment)
    RelativeLatencyAlarms(
        stack,
        "Relative",
        endpoint=endpoint,
        rollout=prod.rollout,
        canary_per_primary=rollout_capacity_plan(prod).canary_per_primary,
    )
    found = Template.from_stack(stack).find_resources("AWS::CloudWatch::Alarm")
    return {r["Properties"]["AlarmDescription"]: r["Properties"] for r in found.values()}


def _timing(props: dict[str, Any]) -> Timing:
    period = props.get("Period")
    if period is None:  # a metric math alarm: its metrics' period (each the same)
        (period,) = {m["MetricStat"]["Period"] for m in props["Metrics"] if "MetricStat" in m}
    return Timing(
        period,
        props["EvaluationPeriods"],
        props.get("DatapointsToAlarm", props["EvaluationPeriods"]),
        props["TreatMissingData"],
    )


def test_the_rollback_alarms_evaluate_as_the_simulator_replays_them(alarms, prod) -> None:  # type: ignore[no-untyped-def]
    canary = {d: p for d, p in alarms.items() if d.startswith("canary: more than")}
    (errors,) = canary.values()
    assert _timing(errors) == ROLLBACK_5XX
    # errors a minute: the simulator feeds the minute's 5XX count
    assert (errors["Statistic"], errors["Period"]) == ("Sum", 60)
    assert errors["Threshold"] == prod.deployment.rollback_5xx_errors_per_minute
    ceiling = f"canary: ModelLatency p99 above {prod.deployment.rollback_model_latency_p99_ms} ms"
    (latency,) = [p for d, p in alarms.items() if d.startswith(ceiling)]
    assert _timing(latency) == ROLLBACK_LATENCY_P99
    assert latency["ExtendedStatistic"] == "p99"
    assert latency["Threshold"] == 1000 * prod.deployment.rollback_model_latency_p99_ms  # µs


def test_the_relative_latency_alarms_evaluate_as_the_simulator_replays_them(alarms, prod) -> None:  # type: ignore[no-untyped-def]
    ratios = [p for d, p in alarms.items() if "x the primary's" in d]
    assert len(ratios) == 2
    for props in ratios:
        assert _timing(props) == RELATIVE_LATENCY
        assert props["Threshold"] == prod.rollout.max_latency_ratio
        floor = prod.rollout.latency_ratio_min_invocations_per_minute
        (expression,) = [m["Expression"] for m in props["Metrics"] if "Expression" in m]
        per_primary = rollout_capacity_plan(prod).canary_per_primary
        # the simulator's like-load condition (comparable_loads) is the expression's inner IF
        assert expression == ratio_expression(floor, per_primary)
        assert expression == (
            f"IF(inv >= {floor}, IF(cipi * {per_primary:g} <= {COMPARABLE_LOAD:g} * pipi, "
            "canary / primary, 0), 0)"
        )
    keys = {a.key for a in watched_alarms(prod)}
    assert {"model-latency-ratio", "ttft-ratio"} <= keys


def test_the_monitoring_rules_windows_and_periods_match(prod) -> None:  # type: ignore[no-untyped-def]
    rules = {r.key: r for r in variant_rules(prod.monitoring, ["a"], queue_step_scaling=False)}
    interval = prod.engine.metrics_interval_seconds
    assert rules["high-ttft"].window_s == HIGH_TTFT_WINDOW_SECONDS
    assert rules["engine-restarts"].window_s == ENGINE_RESTARTS_WINDOW_SECONDS
    for key, count in (("high-ttft", False), ("engine-restarts", True)):
        for seconds in (10, 60, 90, 300):
            assert _rule_period(rules[key], seconds) == rule_period(
                rules[key].window_s, seconds, count=count
            ), (key, seconds)
    watched = {a.key: a for a in watched_alarms(prod)}
    assert watched["canary/high-ttft"].timing.period_seconds == _rule_period(
        rules["high-ttft"], interval
    )
    assert watched["canary/high-ttft"].threshold == rules["high-ttft"].threshold
