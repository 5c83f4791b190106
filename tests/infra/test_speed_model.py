"""The speed model (sizing/speed_model.py) against the committed GPU measurements.

docs/measurements/speed_h100_vllm0.26.json is what bench/speed_bench.py measured on an H100 with
vLLM 0.26.0; the model's committed constants must reproduce every figure of it within the bounds
in sizing.speed_calibration.BOUNDS (the fit itself: ``python -m sizing.speed_calibration --fit``).
"""

from __future__ import annotations

import json

import pytest

from sizing import speed_model as sm
from sizing.speed_calibration import BOUNDS, LLAMA3_8B, MEASUREMENTS, errors, summary


@pytest.fixture(scope="module")
def errs() -> list:
    return errors()


def test_the_measurements_say_what_ran_where() -> None:
    data = json.loads(MEASUREMENTS.read_text())
    engines = {r["meta"]["engine"]: r["meta"] for r in data["runs"]}
    assert set(engines) == {"bf16", "w4a16", "w4a16-poisson"}
    for meta in engines.values():
        assert meta["vllm"] == "0.26.0"
        assert meta["gpu"] == "NVIDIA H100 80GB HBM3"
        assert meta["settings"]["max_num_seqs"] == 128
        assert meta["settings"]["max_num_batched_tokens"] == 8192
    phases = [p for r in data["runs"] for p in r["phases"]]
    assert {p["concurrency"] for p in phases} >= {1, 8, 24, 48, 74, 128}
    assert {p["prompt"] for p in phases} == {400, 1200, 3000}
    assert any(p["prefix"] for p in phases) and any(p.get("rate_per_min") for p in phases)


@pytest.mark.parametrize("figure", list(BOUNDS))
def test_the_fit_holds_every_figure_within_its_bound(errs: list, figure: str) -> None:
    """Every measured figure, each phase against its own bound (looser where the requests share
    a prefix: sizing.speed_calibration.PREFIX_BOUNDS says why)."""
    assert summary(errs)[figure][2] >= 5
    bad = [
        f"{e.engine}/{e.name}: measured {e.measured:.4g}, model {e.predicted:.4g}"
        for e in errs
        if e.figure == figure and e.fitted and abs(e.relative) > e.bound
    ]
    assert not bad, f"{figure} off by more than its bound: {bad}"


def test_the_typical_error_is_under_a_tenth_for_throughput_and_decode(errs: list) -> None:
    medians = {figure: median for figure, (_, median, _) in summary(errs).items()}
    assert medians["requests_per_minute"] <= 0.10
    assert medians["decode_tps"] <= 0.10
    assert medians["e2e_p50_s"] <= 0.12


def _speed(gpu: str, quant: str = "w4a16", **kw: int) -> sm.Speed:
    args = {"concurrency": 74, "prompt": 1200, "output": 180, **kw}
    return sm.closed_loop(LLAMA3_8B, quant, gpu, **args)


def test_decode_slows_as_concurrency_and_context_grow() -> None:
    rates = [_speed("H100", concurrency=c).decode_tps for c in (1, 8, 24, 74, 128)]
    assert rates == sorted(rates, reverse=True)
    assert _speed("H100", prompt=3000).decode_tps < _speed("H100").decode_tps


def test_prefix_hits_cut_time_to_first_token_and_raise_throughput() -> None:
    cold, hit = _speed("H100", concurrency=24), _speed("H100", concurrency=24, cached=864)
    assert hit.ttft_p50_s < cold.ttft_p50_s
    assert hit.requests_per_minute > cold.requests_per_minute


def test_a_closed_loop_obeys_littles_law() -> None:
    s = _speed("H100")
    assert s.requests_per_minute == pytest.approx(60 * 74 / s.e2e_p50_s, rel=0.05)


def test_other_gpus_scale_by_their_bandwidth_at_batch_one() -> None:
    """One sequence is bound by reading the weights: tokens/s go with memory bandwidth."""
    h100 = _speed("H100", "none", concurrency=1).decode_tps
    for gpu in ("A10G", "L4", "A100 40GB"):
        ratio = sm.GPUS[gpu].bandwidth_gbps / sm.GPUS["H100"].bandwidth_gbps
        assert _speed(gpu, "none", concurrency=1).decode_tps == pytest.approx(
            h100 * ratio, rel=0.25
        )


def test_a_published_a100_figure_is_within_a_fifth() -> None:
    """vLLM 0.23, Llama-3.1-8B bf16 on one A100 40GB, 1,024 prompt + 128 output tokens, one
    request at a time: ~75 tokens/s (https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on).
    The model carries the H100 fit by bandwidth and compute only."""
    s = sm.closed_loop(LLAMA3_8B, "none", "A100 40GB", concurrency=1, prompt=1024, output=128)
    assert s.decode_tps == pytest.approx(75, rel=0.2)


def test_an_unknown_gpu_is_named() -> None:
    with pytest.raises(KeyError, match="V100"):
        sm.step_cost(LLAMA3_8B, "none", "V100")


def test_a_workload_needs_one_way_of_arriving() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        sm.Workload(1200, 180)
    with pytest.raises(ValueError, match="shared <= cached"):
        sm.Workload(1200, 180, cached=100, shared=200, concurrency=4)


def test_the_plan_names_an_slo_no_concurrency_meets() -> None:
    """prod on an A10G: 180 tokens within 2 s p99 is out of reach (the issue's own example);
    the plan says so with the best the instance can do, and which bound binds."""
    from sizing.speed_plan import render_speed, speed_section

    from .conftest import parse, raw_config

    # prod ships ml.g6e.xlarge (max_num_seqs binds there, no SLO may bind): this is prod on
    # ml.g5.xlarge, where the KV cache binds, with TTFT p50 allowed to bind at a limit the A10G
    # holds up to the KV bound at the planning speed (1,000 ms; the brief's 200 ms it holds at none)
    raw = raw_config("prod")
    for variant in ("primary", "canary"):
        raw["variants"][variant]["instance_type"] = "ml.g5.xlarge"
        raw["scaling"]["variants"][variant]["target_tracking"]["slos"] = ["ttft_p50"]
    raw.setdefault("monitoring", {})["slo_ttft_p50_ms"] = 1000
    s = speed_section(parse(raw), "primary")
    ttft, ttft95, e2e, tpot = s["slo"]
    assert ttft["slo"] == "TTFT p50" and ttft["max_in_flight"] == s["kv_bound"]
    assert ttft95["slo"] == "TTFT p95" and not ttft95["binds_target"]  # not in target_tracking.slos
    assert e2e["slo"] == "end-to-end p99" and e2e["max_in_flight"] == 0
    assert tpot["slo"] == "TPOT p95" and not tpot["binds_target"]  # not in target_tracking.slos
    # an SLO no concurrency meets cannot bind the target: the KV cache does
    assert e2e["best_ms"] > e2e["limit_ms"] and s["binding"] == "KV cache"
    assert not e2e["binds_target"] and ttft["binds_target"]
    text = "\n".join(render_speed(s))
    assert "NOT MET at any concurrency" in text and "A10G" in text


# -- other GPUs against published measurements (docs/measurements/published_gpu_points.json) --


@pytest.fixture(scope="module")
def published() -> list:
    from sizing import speed_evidence

    return speed_evidence.errors()


def test_every_published_point_names_its_source_and_settings() -> None:
    data = json.loads((MEASUREMENTS.parent / "published_gpu_points.json").read_text())
    for p in data["points"]:
        assert p["source"] and p["engine"] and p["precision"] and p["workload"], p["id"]
        assert p["gpu"] in sm.GPUS and p["use"] in {"fit", "context", "harness"}, p["id"]
        assert p["url"] or p.get("uncertain"), f"{p['id']}: no URL and not marked uncertain"


def test_the_model_is_within_its_bound_of_every_fitted_published_point(published: list) -> None:
    """After each GPU's efficiency, every fitted point within +-15 % (the issue's bound)."""
    from sizing.speed_evidence import FIT_BOUND

    fitted = [e for e in published if e.point.use == "fit"]
    assert {e.point.gpu for e in fitted} >= {"A10G", "L4", "A100 40GB"}
    bad = [
        f"{e.point.id}: published {e.point.published:.4g}, model {e.predicted:.4g}"
        for e in fitted
        if abs(e.relative) > FIT_BOUND
    ]
    assert not bad, bad


def test_each_gpus_band_covers_the_error_of_each_of_its_points(published: list) -> None:
    """The band the solver plans on contains every fitted point's published/model ratio, and is
    the one sizing.speed_evidence.band computes from them (the committed figures are current)."""
    from sizing.speed_evidence import band

    for gpu in {e.point.gpu for e in published if e.point.use == "fit"}:
        low, high = sm.speed_band(gpu)
        assert (low, high) == band(gpu, published), gpu
        for e in published:
            if e.point.gpu == gpu and e.point.use == "fit":
                assert low <= e.ratio <= high, e.point.id


def test_the_h100_band_covers_its_own_fit(errs: list) -> None:
    low, high = sm.speed_band("H100")
    for e in errs:
        if e.fitted and not e.shared_prefix and e.figure in ("requests_per_minute", "decode_tps"):
            assert low <= e.measured / e.predicted <= high, (e.engine, e.name, e.figure)


def test_a_gpu_without_published_points_gets_the_widest_band() -> None:
    lows, highs = zip(*sm.SPEED_BANDS.values(), strict=True)
    for gpu in set(sm.GPUS) - set(sm.SPEED_BANDS):
        low, high = sm.speed_band(gpu)
        assert low <= min(lows) and high >= max(highs) and low < 1 < high
        assert "no published point" in sm.speed_band_source(gpu)
    for gpu in sm.GPUS:
        low, high = sm.speed_band(gpu)
        assert 0 < low < 1 < high and gpu in sm.speed_band_source(gpu)
    with pytest.raises(KeyError, match="V100"):
        sm.speed_band("V100")


def test_the_committed_efficiencies_are_the_fit() -> None:
    """``python -m sizing.speed_evidence --fit`` gives the committed Gpu.efficiency (+-0.01)."""
    from sizing.speed_evidence import fit_gpu, load

    points = load()
    for gpu in ("A10G", "L4"):
        assert fit_gpu(gpu, points) == pytest.approx(sm.GPUS[gpu].efficiency, abs=0.01)
