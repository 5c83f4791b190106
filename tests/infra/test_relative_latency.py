"""The canary's latency relative to the primary's (issue 20 item 2): metric-math alarms the canary
controller watches, so a release that is slower than the primary on the same traffic rolls back
whatever the absolute figures."""

from __future__ import annotations

import json

import pytest

from tests.infra.conftest import assert_names_yaml_path, parse, synth_templates


def _ratio_alarms(template) -> dict[str, dict]:
    return {
        k: v["Properties"]
        for k, v in template.find_resources("AWS::CloudWatch::Alarm").items()
        if "RelativeLatency" in k
    }


def test_prod_watches_canary_over_primary_model_latency_and_ttft(prod_templates) -> None:
    alarms = _ratio_alarms(prod_templates["endpoint"])
    assert len(alarms) == 2
    for props in alarms.values():
        assert props["Threshold"] == 1.5
        assert (props["EvaluationPeriods"], props["DatapointsToAlarm"]) == (5, 3)
        (expr,) = [m for m in props["Metrics"] if "Expression" in m]
        # compared only in minutes of like loads: the canary's invocations per instance (in
        # primary instances: prod runs one type, 1 each) not above the primary's
        assert expr["Expression"] == (
            "IF(inv >= 20, IF(cipi * 1 <= 1 * pipi, canary / primary, 0), 0)"
        )
        stats = {m["Id"]: m["MetricStat"] for m in props["Metrics"] if "MetricStat" in m}
        dims = {
            k: {d["Name"]: d["Value"] for d in s["Metric"]["Dimensions"]} for k, s in stats.items()
        }
        assert dims["canary"]["VariantName"] == "canary"
        assert dims["primary"]["VariantName"] == "primary"
        assert stats["inv"]["Metric"]["MetricName"] == "Invocations"
        for load, variant in (("cipi", "canary"), ("pipi", "primary")):
            assert stats[load]["Metric"]["MetricName"] == "InvocationsPerInstance"
            assert (stats[load]["Stat"], dims[load]["VariantName"]) == ("Sum", variant)
        assert stats["canary"]["Metric"]["MetricName"] == stats["primary"]["Metric"]["MetricName"]
    names = sorted(
        s["MetricStat"]["Metric"]["MetricName"]
        for p in alarms.values()
        for s in p["Metrics"]
        if s.get("Id") == "canary"
    )
    assert names == ["ModelLatency", "TimeToFirstTokenP95"]


def test_the_canary_controller_watches_them(prod_templates) -> None:
    template = prod_templates["endpoint"]
    alarms = _ratio_alarms(template)
    fns = template.find_resources("AWS::Lambda::Function")
    env = json.dumps([f["Properties"].get("Environment", {}) for f in fns.values()])
    for logical in alarms:
        assert logical in env, logical  # ALARM_NAMES carries a Ref to each


def test_no_ratio_means_no_alarm(prod_raw) -> None:
    prod_raw.setdefault("rollout", {})["max_latency_ratio"] = None
    assert _ratio_alarms(synth_templates(parse(prod_raw))["endpoint"]) == {}


@pytest.mark.parametrize("ratio", [1, 0.5, 11])
def test_a_ratio_that_cannot_mean_slower_fails_naming_the_field(prod_raw, ratio) -> None:
    prod_raw.setdefault("rollout", {})["max_latency_ratio"] = ratio
    assert_names_yaml_path(prod_raw, "rollout.max_latency_ratio", "")
