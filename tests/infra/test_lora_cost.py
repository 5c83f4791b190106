"""LoRA's cost in the speed model (sizing/lora_cost.py) and the plan's band
(sizing/serving_speed.py): relations, and the committed constants against the evidence."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sizing import lora_cost, lora_fit, speed_model
from sizing.fit_checks import load_config
from sizing.serving_speed import (
    efficiency,
    planned_band,
    scaled,
    serves_adapters,
    with_lora,
)
from tests.fixtures import config_fixture

REPO = Path(__file__).resolve().parents[2]
CFG = load_config(config_fixture("dev"), env="dev")
ARCH = CFG.architecture


def _cost(gpu: str, eff: speed_model.Efficiency) -> speed_model.StepCost:
    return speed_model.step_cost(ARCH, "awq", gpu, eff)


def _host_only(eff: speed_model.Efficiency) -> speed_model.Efficiency:
    return replace(eff, **dict.fromkeys(speed_model.GPU_FIELDS, 1e30))


def test_the_committed_constants_are_what_the_evidence_gives():
    res = lora_fit.analyse_runs()
    assert res["form"] == lora_cost.LORA_FORM
    assert res["coefficients"]["one"] == pytest.approx(lora_cost.LORA_STEP_S, rel=1e-3)
    assert res["coefficients"]["decode"] == pytest.approx(lora_cost.LORA_SEQ_S, rel=1e-3)
    assert res["gpu_share"] == pytest.approx(lora_cost.LORA_GPU_SHARE, abs=0.005)
    assert res["production_loo_rms"] == pytest.approx(lora_cost.LORA_ERROR, abs=0.0005)


def test_every_run_is_kept_and_only_the_http_run_is_the_production_path():
    pts = lora_fit.evidence()
    assert {p.run for p in pts} == set(lora_fit.RUNS) == {"http", "in-process", "fp8-kv"}
    assert [r.name for r in lora_fit.RUNS.values() if r.production] == ["http"]
    res = lora_fit.analyse_runs(pts)
    assert len(res["points"]) == len(pts)
    # the form is chosen over every run, not over the production run alone
    assert res["form"] == lora_fit.choose(pts)[0]


def test_lora_leaves_kv_reads_weight_reads_and_host_terms_untouched():
    base, lora = speed_model.FITTED, with_lora(speed_model.FITTED)
    for f in (*speed_model.GPU_FIELDS, "overhead_s", "per_seq_s", "request_s", "shared_kv_read"):
        assert getattr(lora, f) == getattr(base, f)
    b, lo = _cost("L40S", base), _cost("L40S", lora)
    # what LoRA adds to a step does not depend on the KV-cache tokens read or prefill work
    for running, kv, tokens, pairs in ((8, 1e4, 8, 0.0), (128, 2e5, 1000, 5e5)):
        added = lo.seconds(running, kv, tokens, pairs) - b.seconds(running, kv, tokens, pairs)
        assert added == pytest.approx(lo.seconds(running, 0, 1, 0) - b.seconds(running, 0, 1, 0))
        assert added > 0


def test_a_faster_gpu_shrinks_the_lora_term_but_not_its_host_part():
    base, lora = speed_model.FITTED, with_lora(speed_model.FITTED)

    def added(gpu: str, e: speed_model.Efficiency, b: speed_model.Efficiency) -> float:
        return _cost(gpu, e).seconds(64, 0, 64, 0) - _cost(gpu, b).seconds(64, 0, 64, 0)

    assert added("H100", lora, base) < added("L40S", lora, base) < added("A10G", lora, base)
    host_lora, host_base = _host_only(lora), _host_only(base)
    assert added("H100", host_lora, host_base) == pytest.approx(
        added("A10G", host_lora, host_base), rel=1e-9
    )


def test_a_gpu_band_scales_gpu_terms_and_leaves_host_terms_alone():
    eff = with_lora(speed_model.FITTED)
    slow = scaled(eff, 0.7)
    for f in speed_model.HOST_FIELDS:
        assert getattr(slow, f) == getattr(eff, f)
    host_part = _cost("L40S", _host_only(eff)).seconds(128, 2e5, 128, 0)
    assert _cost("L40S", _host_only(slow)).seconds(128, 2e5, 128, 0) == pytest.approx(host_part)
    assert _cost("L40S", slow).seconds(128, 2e5, 128, 0) > _cost("L40S", eff).seconds(
        128, 2e5, 128, 0
    )


def test_the_band_combines_the_inputs_and_is_narrower_than_their_worst_cases_multiplied():
    band = planned_band(CFG, "L40S")
    names = [i.name for i in band.inputs]
    assert names[0] == "L40S speed carry" and "LoRA form" in names and "prefix hit rate" in names
    widest = max(i.low for i in band.inputs)
    assert band.worst_case_product < band.low < 1 - widest
    # the pessimistic edge on GPU terms is no harsher than the GPU band's own pessimistic end
    # combined with the others, and the host gets its own band
    assert band.low <= band.factor("pessimistic") < 1
    assert band.host_low <= band.host_factor("pessimistic") < 1
    assert band.factor("central") == band.host_factor("central") == 1
    assert 1 < band.factor("optimistic") <= band.high
    assert 1 < band.host_factor("optimistic") <= band.host_high


def test_the_planning_edge_uses_the_band_on_gpu_terms_and_the_host_band_on_host_terms():
    band = planned_band(CFG, "L40S")
    central, edge = efficiency(CFG, "L40S", "central"), efficiency(CFG, "L40S")
    assert edge.bandwidth == pytest.approx(central.bandwidth * band.factor("pessimistic"))
    assert edge.overhead_s == pytest.approx(central.overhead_s / band.host_factor("pessimistic"))


def test_a_config_with_adapters_plans_on_lora_and_one_without_does_not():
    assert serves_adapters(CFG)
    bare = CFG.model_copy(update={"adapters": [], "default_adapter": None})
    assert efficiency(bare, "A10G", "central").lora_gpu_step_s == 0
    assert efficiency(CFG, "A10G", "central").lora_gpu_step_s > 0
    assert "LoRA form" not in [i.name for i in planned_band(bare, "A10G").inputs]


def test_the_hit_rate_input_is_the_prefix_hit_rate_modules_error(monkeypatch):
    """The band reads the hit rate's error from sizing/prefix_hit_rate.py (hit_rate_error): a
    wider error there widens the band, none leaves that input at zero."""
    from sizing import serving_speed

    def band_with(error: float):
        monkeypatch.setattr(serving_speed, "hit_rate_error", lambda strategy: error)
        serving_speed._hit_rate_throughput_error.cache_clear()
        try:
            return planned_band(CFG, "A10G")
        finally:
            serving_speed._hit_rate_throughput_error.cache_clear()

    wide, none = band_with(0.10), band_with(0.0)
    hit = next(i for i in none.inputs if i.name == "prefix hit rate")
    assert hit.low == hit.high == 0
    assert next(i for i in wide.inputs if i.name == "prefix hit rate").low > 0
    assert none.low > wide.low and none.high < wide.high
