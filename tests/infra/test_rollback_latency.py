"""The ModelLatency rollback threshold against the product's own speed model (issue 20 item 2):
a threshold the healthy fleet crosses would roll back every blue/green deploy during its bake,
fail the smoke gate and refuse canary-start, so synth refuses it, naming both figures."""

from __future__ import annotations

import copy
import json
from typing import Any

import aws_cdk as cdk
import pytest

from sizing.fit_checks import load_config
from sizing.speed_plan import ROLLBACK_LATENCY_HEADROOM, healthy_latency_p99_ms
from stacks.app_builder import build_stacks, cdk_json_context
from tests.fixtures import config_fixture
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
    lines = str(err.value).splitlines()
    assert lines[0] == "config/prod.yaml: 2 invalid value(s)"  # each variant's
    primary = lines[1]
    rule = healthy * ROLLBACK_LATENCY_HEADROOM
    # the field, both figures as the plan rounds them, and the rule between them
    assert primary.startswith(
        f"  deployment.rollback_model_latency_p99_ms: 2,000 ms is below the rule's {rule:,.0f} ms:"
        " the threshold must be at least 1.25 x the ModelLatency p99 a healthy primary shows at "
        f"its scaling target, and that p99 is {healthy:,.0f} ms"
    )
    # prod's target as the plan prints it: 0.85 x max_num_seqs 128 = 108.8 (taken at 109)
    assert "at the target of 108.8 in flight (the plan's figure; taken at 109 requests)" in primary
    assert "on ml.g6e.xlarge." in primary
    assert f"Set deployment.rollback_model_latency_p99_ms: {-(-rule // 1000) * 1000:.0f}" in primary
    assert "speed_model.py" in primary


def test_adding_a_slower_pool_names_the_unwritten_field_the_pool_and_its_line(tmp_path) -> None:
    """Issue 32: a config adding an instance pool failed on a field the user never wrote, with
    a message that read backwards and a target (63) the plan did not show (62.05)."""
    text = (config_fixture("prod")).read_text()
    written = "  rollback_model_latency_p99_ms: 55000\n"
    assert written in text
    text = text.replace(written, "").replace(
        "    instance_type: ml.g6e.xlarge\n    initial_instance_count: 4\n",
        "    instance_type: ml.g6e.xlarge\n    instance_pools:\n"
        "      - {instance_type: ml.g6e.xlarge, priority: 1}\n"
        "      - {instance_type: ml.g5.xlarge, priority: 2}\n"
        "    initial_instance_count: 4\n",
    )
    path = tmp_path / "prod.yaml"
    path.write_text(text)
    cfg = load_config(path, env="prod")
    with pytest.raises(ConfigError) as err:
        build_stacks(cdk.App(context=cdk_json_context(REPO_ROOT)), cfg)
    lines = str(err.value).splitlines()
    # the default 22,000 ms is below both variants' figures: one line each
    assert lines[0] == f"{path}: 2 invalid value(s)"
    deployment = next(i for i, t in enumerate(text.splitlines(), 1) if t == "deployment:")
    only, canary = lines[1:]
    for line in (only, canary):
        assert line.startswith(
            f"  deployment.rollback_model_latency_p99_ms (line {deployment}): 22,000 ms (not in "
            "the file: the default) is below the rule's "
        )
    assert "a healthy canary" in canary and "instance pool" not in canary
    assert "at the target of 62.05 in flight (the plan's figure; taken at 63 requests)" in only
    assert "on ml.g5.xlarge, instance pool priority 2 of variants.primary.instance_pools" in only
    assert "or drop that pool" in only


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
