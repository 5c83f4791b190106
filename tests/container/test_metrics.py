"""Prometheus text -> per-interval figures -> CloudWatch EMF documents."""

from __future__ import annotations

import io

import pytest

from container.serving import metrics_contract as mc
from container.serving.metrics import compute, emf_documents, parse, percentile

ENGINE = '{engine="0",model_name="base"}'


def scrape(
    waiting: float,
    running: float,
    kv: float,
    queries: float,
    hits: float,
    ttft_in_half_second: float,
    rejections: float,
    adapter_a: float,
) -> str:
    """One /metrics page, written with the series names the contract gives."""
    ttft = f"{mc.VLLM_TIME_TO_FIRST_TOKEN}_bucket"
    return "\n".join(
        [
            f"{mc.VLLM_REQUESTS_WAITING}{ENGINE} {waiting}",
            f"{mc.VLLM_REQUESTS_RUNNING}{ENGINE} {running}",
            f"{mc.VLLM_KV_CACHE_USAGE}{ENGINE} {kv}",
            f"{mc.VLLM_PREFIX_CACHE_QUERIES}{ENGINE} {queries}",
            f"{mc.VLLM_PREFIX_CACHE_HITS}{ENGINE} {hits}",
            f'{ttft}{{engine="0",le="0.1",model_name="base"}} 10.0',
            f'{ttft}{{engine="0",le="0.5",model_name="base"}} {ttft_in_half_second}',
            f'{ttft}{{engine="0",le="+Inf",model_name="base"}} {ttft_in_half_second}',
            f"{mc.HOOKS_ADMISSION_REJECTIONS} {rejections}",
            f'{mc.HOOKS_ADAPTER_REQUESTS}{{{mc.ADAPTER_LABEL}="a"}} {adapter_a}',
        ]
    )


SCRAPE_1 = scrape(3.0, 5.0, 0.25, 100.0, 50.0, 10.0, 2.0, 4.0)
SCRAPE_2 = scrape(1.0, 2.0, 0.5, 200.0, 130.0, 20.0, 7.0, 10.0)


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
    # the 10 new observations all fell in (0.1, 0.5]
    assert variant[mc.TTFT_P50.name] == pytest.approx(300.0)
    meta = variant["_aws"]["CloudWatchMetrics"][0]
    assert meta["Namespace"] == mc.NAMESPACE
    assert meta["Dimensions"] == [["EndpointName", "VariantName"]]
    units = {m["Name"]: m["Unit"] for m in meta["Metrics"]}
    assert units[mc.KV_CACHE_USAGE.name] == "Percent" and units[mc.TTFT_P50.name] == "Milliseconds"
    assert set(units) <= set(mc.BY_NAME)
    assert adapter[mc.DIM_ADAPTER] == "a" and adapter[mc.ADAPTER_REQUESTS.name] == 6.0
    assert adapter["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [list(mc.ADAPTER_DIMENSIONS)]


def test_an_adapter_version_is_a_second_dimension_set_beside_the_stable_adapter() -> None:
    """Clients and alarms keep the stable (Endpoint, Variant, Adapter) series across versions;
    the AdapterVersion set shows which version served (ADAPTER_VERSIONS, from the config)."""
    docs = emf_documents(
        parse(SCRAPE_2), parse(SCRAPE_1), "ep", "primary", 1000, versions={"a": "v3"}
    )
    adapter = docs[1]
    assert adapter[mc.DIM_ADAPTER] == "a" and adapter[mc.DIM_ADAPTER_VERSION] == "v3"
    assert adapter["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [
        ["EndpointName", "VariantName", "Adapter"],
        ["EndpointName", "VariantName", "Adapter", "AdapterVersion"],
    ]
    assert adapter[mc.ADAPTER_REQUESTS.name] == 6.0


def test_adapter_versions_setting_parses_name_version_pairs() -> None:
    from container.serving.settings import load

    s = load({"ADAPTER_VERSIONS": "manga_domain=v3, jp_style=v1,,bad"})
    assert s.adapter_version_map() == {"manga_domain": "v3", "jp_style": "v1"}


def test_every_scraped_metric_comes_from_the_series_its_contract_names() -> None:
    """One definition: a page carrying exactly the contract's series yields every metric."""
    before, now = [], []
    for m in mc.ALL_METRICS:
        src = m.source
        labels = f'{mc.ADAPTER_LABEL}="a"' if mc.DIM_ADAPTER in m.dimensions else 'engine="0"'
        if src.kind == "quantile":
            for page, count in ((before, 0), (now, 4)):
                page += [f'{src.series}_bucket{{{labels},le="{le}"}} {count}' for le in (1, "+Inf")]
        else:
            for page, value in ((before, 1.0), (now, 3.0)):
                page += [f"{s}{{{labels}}} {value}" for s in (src.series, src.per) if s]
    pages = [parse("\n".join(dict.fromkeys(page))) for page in (now, before)]  # p50/p95 share one
    variant, adapters = compute(*pages)
    scraped = {m.name for m in mc.ALL_METRICS if m.source.kind != "entrypoint"}
    assert set(variant) | set(adapters["a"]) == scraped
    assert variant[mc.QUEUE_DEPTH.name] == 3.0 and variant[mc.PREEMPTIONS.name] == 2.0
    assert variant[mc.KV_CACHE_USAGE.name] == 300.0  # gauge x 100
    assert variant[mc.PREFIX_CACHE_HIT_RATE.name] == 100.0
    assert adapters["a"][mc.ADAPTER_LATENCY_P95.name] == pytest.approx(950.0)


def test_tpot_is_the_per_request_mean_after_the_first_token_not_each_token_gap() -> None:
    """TimePerOutputTokenP95 reads vLLM's per-request TPOT histogram; the inter-token one (every
    gap, one stalled step included) on the same page does not move it."""

    def page(requests: int, gaps: int) -> str:
        tpot = f"{mc.VLLM_TIME_PER_OUTPUT_TOKEN}_bucket"
        itl = "vllm:inter_token_latency_seconds_bucket"
        return "\n".join(
            [
                f'{tpot}{{engine="0",le="0.075",model_name="base"}} 0',
                f'{tpot}{{engine="0",le="0.1",model_name="base"}} {requests}',
                f'{tpot}{{engine="0",le="+Inf",model_name="base"}} {requests}',
                f'{itl}{{engine="0",le="0.1",model_name="base"}} 0',
                f'{itl}{{engine="0",le="1.0",model_name="base"}} {gaps}',
                f'{itl}{{engine="0",le="+Inf",model_name="base"}} {gaps}',
            ]
        )

    variant, _ = compute(parse(page(20, 500)), parse(page(0, 0)))
    # 20 requests in (75, 100] ms: the p95 is 95 % of the way through that bucket
    assert variant[mc.TPOT_P95.name] == pytest.approx(98.75)
    assert mc.TPOT_P95.source.series == "vllm:request_time_per_output_token_seconds"


def test_a_scrape_failure_is_one_line_and_during_a_drain_says_it_is_expected(caplog) -> None:
    """A drain once logged `metrics tick failed` with a urllib traceback: it looked like a crash."""
    import logging

    from container.serving.metrics import MetricsTask
    from container.serving.settings import load

    def refused(_url: str) -> str:
        raise ConnectionRefusedError(111, "Connection refused")

    draining = False
    task = MetricsTask(load({}), "http://127.0.0.1:1/metrics", out=io.StringIO(), fetch=refused,
                       draining=lambda: draining)  # fmt: skip
    with caplog.at_level(logging.INFO, logger="serving.metrics"):
        task.run_once()
        draining = True
        task.run_once()
    records = [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records]
    assert records[0][0] == "WARNING" and "did not answer" in records[0][1]
    assert records[1] == ("INFO", "metrics: vLLM's /metrics is gone (draining); skipped", None)
    assert all(exc is None for *_, exc in records)
