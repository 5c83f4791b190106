"""Scale-out time from its sources (issue 21 item 4): AWS's published P50s with and without the
image cached, the image the product builds (measured layers + the config's weights), one figure
for the plan and the simulator."""

from __future__ import annotations

import pytest

from simulator.assumptions import Assumptions
from sizing.capacity import weight_bytes
from sizing.engine_start import measured
from sizing.plan import build_plan, render_plan
from sizing.ready_bound import ready_seconds
from sizing.scale_out_time import GPU_BASE_GB, PUBLISHED_P50, measured_layers, time_to_serve
from tests.fixtures import config_fixture
from tests.infra.conftest import REPO_ROOT as REPO
from tests.infra.conftest import parse
from typed_config.instance_start import ASSUMED_STARTUP_SECONDS


def test_prod_serves_after_awss_cached_p50_and_pays_the_pull_for_a_new_tag(prod_cfg) -> None:
    t = time_to_serve(prod_cfg, "primary")
    image_gb, _model_gb, uncached, cached = PUBLISHED_P50["ml.g5.xlarge"]
    assert t.cached_seconds == cached == 216
    per_gb = (uncached - cached) / image_gb  # 130 s over 10.6 GB
    assert t.uncached_seconds == round(cached + t.image_gb * per_gb)
    # the image: the assumed GPU base + measured product layers + the AWQ weights + adapters
    layers = measured_layers()
    code_gb = (layers["product_bytes"] - layers["model_layer_bytes"]) / 1e9
    weights_gb = weight_bytes(prod_cfg.architecture, prod_cfg.model.quantization) / 1e9
    assert t.image_gb == pytest.approx(GPU_BASE_GB + code_gb + weights_gb, abs=0.3)
    assert 5 < weights_gb < 6.5  # int4 8B, not 16 GB of bf16
    # deploy times and the controller's waits use a bound above the new tag's planned start
    # (planned_seconds is rounded for print; the sum is rounded once, so within a second)
    assert t.planned_uncached_seconds == pytest.approx(
        t.planned_seconds + t.image_gb * per_gb, abs=1
    )
    assert cached < t.uncached_seconds <= t.planned_uncached_seconds < ready_seconds(prod_cfg)


def test_the_plan_prints_each_term_with_its_source(prod_cfg) -> None:
    text = render_plan(build_plan(prod_cfg, {}))
    t = time_to_serve(prod_cfg, "primary")
    assert (
        f"scale-out: a new instance serves {t.planned_seconds:g} s after launch with the image "
        "cached (the simulator's, the capacity gate's and the fleet solver's figure)"
    ) in text
    assert (
        f"{t.planned_uncached_seconds:g} s for a tag not yet cached, the same start with the "
        "image pulled"
    ) in text
    assert f"bound a start at {ready_seconds(prod_cfg):g} s: sizing.ready_bound" in text
    for term in t.terms:
        assert f"- {term.name}: {term.source}" in text
    assert "WARNING: a new tag's instance serves" not in text


def test_a_type_aws_published_nothing_for_borrows_g5_xlarge_and_says_so(mutate) -> None:
    cfg = parse(mutate("variants.canary.instance_type", "ml.g6.xlarge"))
    t = time_to_serve(cfg, "canary")
    assert t.cached_seconds == 216
    assert any("AWS published none for ml.g6.xlarge" in term.source for term in t.terms)


def test_a_bf16_image_of_16_gb_of_weights_raises_the_deploy_bound_with_it(mutate, prod_cfg) -> None:
    """A bigger image pulls longer: the per-start bound of deploys and waits follows it (before
    issue 46's bound was derived, the plan only warned that the fixed 465 s fell short)."""
    raw = mutate("variants.primary.instance_type", "ml.g6e.xlarge")
    raw["model"]["quantization"] = "none"
    raw["variants"]["canary"]["instance_type"] = "ml.g6e.xlarge"
    cfg = parse(raw)
    t = time_to_serve(cfg, "primary")
    assert t.image_gb > 25 and t.image_gb > time_to_serve(prod_cfg, "primary").image_gb
    assert t.planned_uncached_seconds < ready_seconds(cfg)
    assert ready_seconds(cfg) - ready_seconds(prod_cfg) == pytest.approx(
        t.planned_uncached_seconds - time_to_serve(prod_cfg, "primary").planned_uncached_seconds,
        abs=1,
    )
    text = render_plan(build_plan(cfg, {}))
    assert "WARNING: a new tag's instance serves" not in text


def test_the_simulator_scales_out_with_the_plans_figure_and_deploys_with_the_bound(
    prod_cfg,
) -> None:
    a = Assumptions()
    assert (
        a.scale_out_seconds(prod_cfg, "primary")
        == time_to_serve(prod_cfg, "primary").planned_seconds
    )
    assert a.new_tag_seconds(prod_cfg) == ready_seconds(prod_cfg)
    # an explicit what-if applies to every new instance, as before
    what_if = Assumptions(provision_seconds=300, startup_seconds=75)
    assert what_if.scale_out_seconds(prod_cfg, "primary") == 375
    assert what_if.new_tag_seconds(prod_cfg) == 375


def test_make_simulate_prints_the_scale_out_figure_it_uses(prod_cfg, tmp_path, capsys) -> None:
    from simulator.cli import main

    rc = main(["run", "--env", "prod", "--config", str(config_fixture("prod")),
               "--trace", "off-peak-night", "--no-charts", "--out", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    t = time_to_serve(prod_cfg, "primary")
    assert rc == 0
    assert (
        f"scale-out (primary): a scale-out serves {t.planned_seconds:g} s after the decision "
        f"(AWS's P50 with the image cached, {t.cached_seconds:g} s, its assumed engine start "
        "replaced by the measured one from the release's compile cache at its pessimistic edge"
    ) in out


def test_a_pool_variant_prints_when_a_fallback_pool_serves() -> None:
    from sizing.fit_checks import load_config
    from sizing.scale_out_time import ICE_SECONDS

    cfg = load_config(REPO / "config" / "examples" / "prod-pools.yaml", env="prod")
    text = render_plan(build_plan(cfg, {}))
    served = time_to_serve(cfg, "primary", "ml.g6.xlarge").planned_seconds + ICE_SECONDS
    assert (
        f"a scale-out that falls back to pool 2 (ml.g6.xlarge) serves {served:g} s after launch, "
        f"cached: {ICE_SECONDS:g} s per pool passed over (assumed: AWS publishes no figure); "
        "ml.g5.xlarge's P50 (none for this type)"
    ) in text


# --- the engine's start, measured (issue 46) ---------------------------------------------------


def test_the_engine_start_is_the_committed_measurements_cold_and_warm_start() -> None:
    import json

    from sizing.engine_start import MEASUREMENT, ROOT_ONLY_MEASUREMENT, measured

    data = json.loads(MEASUREMENT.read_text())
    other = json.loads(ROOT_ONLY_MEASUREMENT.read_text())
    runs = {r["run"]: r for r in data["runs"]}
    m = measured()
    assert m.cold_seconds == round(runs["cold"]["all_adapters_answered_s"], 1)
    assert m.warm_seconds == round(runs["warm"]["all_adapters_answered_s"], 1)
    assert m.warm_seconds < m.cold_seconds
    # "warm" is the median warm start in the product's layout (TRITON_CACHE_DIR in the root)
    warm = sorted(r["all_adapters_answered_s"] for r in data["runs"] if r["run"] != "cold")
    assert len(warm) == 3 and runs["warm"]["all_adapters_answered_s"] == warm[1]
    for r in runs.values():
        assert r["env"]["TRITON_CACHE_DIR"].startswith(r["env"]["VLLM_CACHE_ROOT"] + "/")
    # the cache a release ships holds Triton's JIT kernels too: the root alone starts slower
    root_only = next(r for r in other["runs"] if r["run"] == "warm_vllm_cache_only")[
        "all_adapters_answered_s"
    ]
    assert m.warm_root_only_seconds == round(root_only, 1)
    assert m.warm_seconds < m.warm_root_only_seconds < m.cold_seconds
    # the phases account for the whole start, to the last adapter's first answer
    assert sum(p.warm_seconds for p in m.phases) == pytest.approx(m.warm_seconds, abs=0.4)
    assert sum(p.cold_seconds for p in m.phases) == pytest.approx(m.cold_seconds, abs=0.4)
    # the stated error: half the spread of the pre-load phase over every start measured
    pre = [r["phases"]["spans_s"]["python_start_to_load"] for r in data["runs"] + other["runs"]]
    assert m.error_seconds == round((max(pre) - min(pre)) / 2)


def test_the_measured_scale_out_swaps_the_assumed_start_for_the_measured_one(prod_cfg) -> None:
    from sizing.engine_start import measured
    from typed_config.instance_start import ASSUMED_STARTUP_SECONDS

    t = time_to_serve(prod_cfg, "primary")
    m = measured()
    rest = t.cached_seconds - ASSUMED_STARTUP_SECONDS  # launch and image, AWS's P50 less 75 s
    assert t.measured_cached_seconds == round(rest + m.warm_seconds)
    assert t.measured_edge_seconds == round(rest + m.warm_seconds + m.error_seconds)
    assert t.measured_cold_cached_seconds == round(rest + m.cold_seconds)
    assert t.measured_uncached_seconds - t.measured_cached_seconds == pytest.approx(
        t.uncached_seconds - t.cached_seconds, abs=1
    )
    # the scale-out moves by what the measured start differs from the assumed one, either way
    assert t.measured_cached_seconds - t.cached_seconds == pytest.approx(
        m.warm_seconds - ASSUMED_STARTUP_SECONDS, abs=1
    )


def test_the_solver_plans_on_the_measured_start_and_the_plan_says_so(prod_cfg) -> None:
    t = time_to_serve(prod_cfg, "primary")
    assert Assumptions().scale_out_seconds(prod_cfg, "primary") == t.planned_seconds
    assert t.planned_seconds == t.measured_edge_seconds  # prod's job runs on its serving GPU
    text = render_plan(build_plan(prod_cfg, {}))
    assert (
        f"AWS's P50 {t.cached_seconds:g} s with its assumed 75 s engine start replaced by the "
        "measured start from the release's compile cache, at its pessimistic edge "
        f"({t.measured_edge_seconds:g} s with the cache"
    ) in text
    # deploys and the controller's waits cover the measured new-tag start: no warning
    assert t.planned_uncached_seconds < ready_seconds(prod_cfg)
    assert "WARNING: a new tag's instance serves" not in text


def test_the_plan_prints_the_start_phases_beside_the_briefs_30_s(prod_cfg) -> None:
    from sizing.engine_start import TARGET_SECONDS, measured

    text = render_plan(build_plan(prod_cfg, {}))
    m = measured()
    assert TARGET_SECONDS == 30
    assert (
        f"container start to first answer (every adapter): {m.warm_seconds:g} s +- "
        f"{m.error_seconds:g} s with a matching compile cache, {m.cold_seconds:g} s without; "
        "the brief's target is 30 s: not met"
    ) in text
    assert "carried to the L40S unchanged" in text  # prod deploys ml.g6e.xlarge
    assert (
        f"from vLLM's cache root alone the warm start took {m.warm_root_only_seconds:g} s"
    ) in text
    for p in m.phases:
        assert f"{p.name:<48} {p.cold_seconds:>7g}  {p.warm_seconds:>7g}" in text


def test_a_start_within_the_target_at_its_pessimistic_edge_is_met() -> None:
    import dataclasses

    from sizing.engine_start import measured, render_start, start_section

    fast = dataclasses.replace(measured(), warm_seconds=20.0, error_seconds=5.0)
    assert "target is 30 s: met " in "\n".join(render_start(start_section(["L40S"], 600, fast)))
    edge = dataclasses.replace(fast, error_seconds=11.0)  # 20 + 11 > 30
    assert "target is 30 s: not met" in "\n".join(render_start(start_section(["L40S"], 600, edge)))


def test_a_startup_health_check_shorter_than_a_cold_start_is_a_plan_warning(
    prod_cfg, mutate
) -> None:
    from sizing.engine_start import measured

    m = measured()
    warning = "WARNING: deployment.startup_health_check_timeout_seconds"
    assert (
        prod_cfg.deployment.startup_health_check_timeout_seconds > m.cold_seconds + m.error_seconds
    )
    assert warning not in render_plan(build_plan(prod_cfg, {}))
    short = parse(mutate("deployment.startup_health_check_timeout_seconds", 180))
    text = render_plan(build_plan(short, {}))
    assert (
        f"{warning} 180 s is below a start without the compile cache ({m.cold_seconds:g} s + "
        f"{m.error_seconds:g} s): such an instance fails its startup health check"
    ) in text


def test_the_planned_start_is_the_measured_one_at_its_edge_warm_only_on_the_jobs_gpu(
    prod_cfg, mutate
) -> None:
    """Issue 46 item 3: the simulator's scale-out replaces the start assumed inside AWS's P50 by
    the measured one at its pessimistic edge; from the compile cache only where the preparation
    job (which makes the cache) runs on the same GPU, cold elsewhere."""
    m = measured()
    warm = time_to_serve(prod_cfg, "primary")
    assert prod_cfg.model_prep.instance_type == prod_cfg.variants["primary"].instance_type
    assert warm.planned_with_cache
    engine = warm.cached_seconds - ASSUMED_STARTUP_SECONDS
    assert warm.planned_seconds == round(engine + m.warm_seconds + m.error_seconds)
    cfg = parse(mutate("model_prep.instance_type", "ml.g5.2xlarge"))  # an A10G job, L40S serving
    cold = time_to_serve(cfg, "primary")
    assert not cold.planned_with_cache
    assert cold.planned_seconds - warm.planned_seconds == pytest.approx(
        m.cold_seconds - m.warm_seconds, abs=1
    )
