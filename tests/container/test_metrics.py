"""Prometheus text -> per-interval figures -> CloudWatch EMF documents."""

from __future__ import annotations

import pytest

from container.serving import metrics_contract as mc
from container.serving.metrics import emf_documents, parse, percentile

SCRAPE_1 = """\
vllm:num_requests_waiting{engine="0",model_name="base"} 3.0
vllm:num_requests_running{engine="0",model_name="base"} 5.0
vllm:kv_cache_usage_perc{engine="0",model_name="base"} 0.25
vllm:prefix_cache_queries_total{engine="0",model_name="base"} 100.0
vllm:prefix_cache_hits_total{engine="0",model_name="base"} 50.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="base"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="base"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="base"} 10.0
serving_admission_rejections_total 2.0
serving_adapter_requests_total{adapter="a"} 4.0
"""
SCRAPE_2 = """\
vllm:num_requests_waiting{engine="0",model_name="base"} 1.0
vllm:num_requests_running{engine="0",model_name="base"} 2.0
vllm:kv_cache_usage_perc{engine="0",model_name="base"} 0.5
vllm:prefix_cache_queries_total{engine="0",model_name="base"} 200.0
vllm:prefix_cache_hits_total{engine="0",model_name="base"} 130.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="base"} 10.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="base"} 20.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="base"} 20.0
serving_admission_rejections_total 7.0
serving_adapter_requests_total{adapter="a"} 10.0
"""


def test_percentile_interpolates_inside_the_bucket() -> None:
    assert percentile([(0.1, 0.0), (0.5, 10.0), (float("inf"), 10.0)], 0.5) == pytest.approx(0.3)
    assert percentile([(0.1, 0.0), (float("inf"), 0.0)], 0.5) is None


def test_interval_deltas_and_emf_shape() -> None:
    docs = emf_documents(parse(SCRAPE_2), parse(SCRAPE_1), "ep", "primary", 1000)
    variant, adapter = docs
    assert variant[mc.QUEUE_DEPTH.name] == 1.0
    assert variant[mc.KV_CACHE_USAGE.name] == 50.0
    assert variant[mc.PREFIX_CACHE_HIT_RATE.name] == 80.0  # (130-50)/(200-100)
    assert variant[mc.ADMISSION_REJECTIONS.name] == 5.0
    assert variant[mc.TTFT_P50.name] == pytest.approx(
        300.0
    )  # the 10 new observations all fell in (0.1, 0.5]
    meta = variant["_aws"]["CloudWatchMetrics"][0]
    assert meta["Namespace"] == mc.NAMESPACE and meta["Dimensions"] == [
        ["EndpointName", "VariantName"]
    ]
    units = {m["Name"]: m["Unit"] for m in meta["Metrics"]}
    assert units[mc.KV_CACHE_USAGE.name] == "Percent" and units[mc.TTFT_P50.name] == "Milliseconds"
    assert set(units) <= set(mc.BY_NAME)
    assert adapter[mc.DIM_ADAPTER] == "a" and adapter[mc.ADAPTER_REQUESTS.name] == 6.0
    assert adapter["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [list(mc.ADAPTER_DIMENSIONS)]
