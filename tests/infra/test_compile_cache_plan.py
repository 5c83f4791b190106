"""The plan says whose start the release's compile cache shortens (issue 46 item 2): the cache
is made on the preparation job's GPU (model_prep.instance_type) and used only on that GPU; a
variant or instance pool on another starts cold, by the measured difference. Nothing is
refused."""

from __future__ import annotations

import copy
from typing import Any

from sizing.compile_cache_plan import cache_section, render_cache
from sizing.engine_start import measured
from sizing.plan import build_plan, render_plan
from typed_config.catalog import INSTANCE_CATALOG

from .conftest import parse, raw_config

L40S, A10G = "ml.g6e.xlarge", "ml.g5.xlarge"


def config(job: str, primary: str, canary: str, pools: list[dict[str, Any]] | None = None) -> Any:
    raw = copy.deepcopy(raw_config("prod"))
    raw.setdefault("model_prep", {})["instance_type"] = job
    raw["variants"]["primary"]["instance_type"] = primary
    raw["variants"]["canary"]["instance_type"] = canary
    if pools is not None:
        raw["variants"]["primary"]["instance_pools"] = pools
    return parse(raw)


def test_variants_on_the_jobs_gpu_use_the_cache_and_none_is_said_cold() -> None:
    c = cache_section(config(L40S, L40S, L40S))
    assert [s["uses_cache"] for s in c["servers"]] == [True, True]
    (line,) = render_cache(c)
    assert line.strip() == (
        f"compile cache: produced on L40S (model_prep.instance_type {L40S}), "
        "used by primary, canary"
    )


def test_a_variant_on_another_gpu_starts_cold_by_the_measured_difference() -> None:
    m = measured()
    c = cache_section(config(L40S, L40S, A10G))
    assert (
        c["cold_extra_seconds"]
        == m.saved_by_cache_seconds
        == round(m.cold_seconds - m.warm_seconds, 1)
    )
    line, advice = render_cache(c)
    assert "used by primary;" in line
    cold = f"canary on A10G starts cold (+{m.saved_by_cache_seconds:g} s, sizing/engine_start"
    assert cold in line
    assert "preparation job on an instance type with the A10G" in advice


def test_a_job_on_the_variants_gpu_moves_the_cache_to_them() -> None:
    """The same fleet with the job on its GPU: every start uses the cache."""
    cold = cache_section(config(L40S, A10G, A10G))
    warm = cache_section(config(A10G, A10G, A10G))
    assert not any(s["uses_cache"] for s in cold["servers"])
    assert "primary and canary on A10G start cold" in render_cache(cold)[0]
    assert all(s["uses_cache"] for s in warm["servers"]) and len(render_cache(warm)) == 1
    assert INSTANCE_CATALOG[A10G].gpu == warm["job_gpu"]


def test_each_instance_pool_is_judged_by_its_own_gpu() -> None:
    pools = [{"instance_type": L40S, "priority": 1}, {"instance_type": A10G, "priority": 2}]
    c = cache_section(config(L40S, L40S, L40S, pools))
    who = {s["who"]: s["uses_cache"] for s in c["servers"]}
    assert who == {"primary pool 1": True, "primary pool 2": False, "canary": True}
    assert "primary pool 2 on A10G starts cold" in render_cache(c)[0]


def test_the_plan_prints_the_line_beside_the_start_phases() -> None:
    text = render_plan(build_plan(config(L40S, L40S, A10G), {}))
    start = text.index("  start   container start to first answer")
    cache = text.index("  compile cache: produced on L40S")
    assert start < cache and "canary on A10G starts cold" in text[cache:]
