"""The ModelLatency rollback threshold against the product's own speed model (issue 20 item 2):
a threshold the healthy fleet crosses would roll back every blue/green deploy during its bake,
fail the smoke gate and refuse canary-start, so synth refuses it, naming both figures."""

from __future__ import annotations

import copy
import json
from typing import Any

import aws_cdk as cdk
import pytest

from sizing.speed_plan import ROLLBACK_LATENCY_HEADROOM, healthy_latency_p99_ms
from stacks.app_builder import build_stacks, cdk_json_context
from typed_config import ConfigError

from .conftest import REPO_ROOT, load_env, parse


def test_a_threshold_the_healthy_fleet_crosses_is_refused_naming_both_figures(
    prod_raw: Any,
) -> None:
    raw = copy.deepcopy(prod_raw)
    raw["deployment"]["rollback_model_latency_p99_ms"] = 2000  # the brief's SLO, not a regression
    cfg = parse(raw)
    healthy = healthy_latency_p99_ms(cfg, "primary")
    assert healthy > 2000 * ROLLBACK_LATENCY_HEADROOM
    app = cdk.App(context=cdk_json_context(REPO_ROOT))
    with pytest.raises(ConfigError) as err:
        build_stacks(app, cfg)
    message = str(err.value)
    assert message.startswith("deployment.rollback_model_latency_p99_ms: 2000 ms is below")
    assert f"ModelLatency p99 {healthy:,.0f} ms" in message
    # prod's target: 0.85 x max_num_seqs 128 = 108.8, rounded up, on its ml.g6e.xlarge
    assert "at its scaling target of 109 in flight on ml.g6e.xlarge" in message
    assert "Set at least" in message and "speed_model.py" in message


def test_the_committed_configs_keep_the_headroom_and_the_plan_prints_both(prod_raw: Any) -> None:
    for env in ("dev", "prod"):
        cfg = load_env(env)
        for variant in ("primary", "canary"):
            limit = cfg.deployment.rollback_model_latency_p99_ms
            assert limit >= healthy_latency_p99_ms(cfg, variant) * ROLLBACK_LATENCY_HEADROOM


def test_the_alarm_reads_the_configured_threshold_in_microseconds() -> None:
    from .conftest import synth_templates

    templates = synth_templates(load_env("prod"))
    alarms = templates["endpoint"].find_resources("AWS::CloudWatch::Alarm")
    latency = [
        a["Properties"] for a in alarms.values()
        if a["Properties"].get("MetricName") == "ModelLatency"
        and "rolls back" in a["Properties"].get("AlarmDescription", "")
    ]  # fmt: skip
    assert latency and {a["Threshold"] for a in latency} == {55000 * 1000}
    assert all("55000 ms" in json.dumps(a["AlarmDescription"]) for a in latency)
