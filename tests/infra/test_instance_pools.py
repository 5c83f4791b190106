"""Instance pools (issue 21 item 2): ``variants.<name>.instance_pools`` and
``provision_timeout_seconds``, their rules (AWS's counts and ranges, one type and one priority
each, every pool's GPU holds the model, the capacity search within the blue/green limit), the
template (InstancePools instead of InstanceType, a Model per pool whose engine differs), the
scaling target across pools, the plan, the quota and cost figures, make deploy's reading of a
live endpoint with pools, and the simulator's scale-out onto the fallback pool."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Capture, Match, Template

from simulator.assumptions import Assumptions
from simulator.scenarios import pools as pool_fallback
from sizing.deploy_options import DeployOptions
from sizing.fit_checks import load_config
from sizing.plan import build_plan, render_plan
from sizing.plan_deploy import deploy_section
from sizing.scaling_target import (
    SLO_LIMITS,
    TargetBasis,
    concurrency_target,
    pool_bases,
    target_basis,
)
from sizing.speed_plan import healthy_latency_p99_ms
from tools.deploy import LiveEndpoint, LiveVariant, live_placement, plan_deploy
from typed_config.catalog import INSTANCE_CATALOG

from .conftest import REPO_ROOT, assert_names_yaml_path, parse, synth_templates

EXAMPLE = REPO_ROOT / "config" / "examples" / "prod-pools.yaml"
G5, G6 = "ml.g5.xlarge", "ml.g6.xlarge"


def pools(*entries: tuple[str, int] | tuple[str, int, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for e in entries:
        pool: dict[str, Any] = {"instance_type": e[0], "priority": e[1]}
        if len(e) > 2:
            pool["engine"] = e[2]  # type: ignore[misc]
        out.append(pool)
    return out


def with_pools(raw: dict[str, Any], entries: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    raw = copy.deepcopy(raw)
    primary = raw["variants"]["primary"]
    primary.pop("instance_type", None)
    primary["instance_pools"] = entries
    primary.update(extra)
    return raw


@pytest.fixture(scope="module")
def example_cfg():  # type: ignore[no-untyped-def]
    return load_config(EXAMPLE, env="prod")


@pytest.fixture(scope="module")
def override_cfg(example_cfg):  # type: ignore[no-untyped-def]
    """The example with the g6 pool at max_num_seqs 48: its own engine, so its own Model."""
    data = example_cfg.model_dump(exclude_unset=True)
    data["variants"]["primary"]["instance_pools"][1]["engine"] = {"max_num_seqs": 48}
    # prefix-aware routing's threshold must stay under what the g6 instances run and at or
    # above the scaling target (routing rules): derived from the target
    data["variants"]["primary"]["routing"]["concurrency_threshold"] = None
    # a healthy canary (ml.g5.xlarge at 0.85 x 73) answers in 67,247 ms p99 at the planning speed
    # (pessimistic edge, LoRA, 33 % prefix hits): synth asks for at least 1.25 x that
    data["deployment"]["rollback_model_latency_p99_ms"] = 85000
    # the g6 pool at 0.85 x 48 runs near its limit: TTFT p99 ~14.2 s at the planning speed, and
    # synth asks the high-TTFT alarm for at least 1.25 x that (sizing/alarm_headroom.py)
    data.setdefault("monitoring", {})["ttft_p95_ms"] = 18000
    return type(example_cfg).model_validate(data)


@pytest.fixture(scope="module")
def override_template(override_cfg) -> Template:  # type: ignore[no-untyped-def]
    return synth_templates(override_cfg)["endpoint"]


# --- rules --------------------------------------------------------------------------------


def test_more_than_five_pools_is_an_error_naming_the_field(prod_raw) -> None:
    types = ["ml.g5.xlarge", "ml.g5.2xlarge", "ml.g6.xlarge", "ml.g6e.xlarge", "ml.g4dn.xlarge"]
    six = pools(*[(t, i) for i, t in enumerate(types, 1)]) + pools(("ml.g5.12xlarge", 5))
    assert_names_yaml_path(
        with_pools(prod_raw, six),
        "variants.primary.instance_pools",
        "6 pools; ProductionVariant.InstancePools takes at most 5",
    )


@pytest.mark.parametrize(
    ("entries", "where", "why"),
    [
        (pools((G5, 1), (G5, 2)), "instance_pools.1.instance_type", "is already pool item 1's"),
        (pools((G5, 1), (G6, 1)), "instance_pools.1.priority", "1 is already pool item 1's"),
        (pools((G5, 1), (G6, 6)), "instance_pools.1.priority", "less than or equal to 5"),
        (pools((G5, 1), ("ml.x9.huge", 2)), "instance_pools.1.instance_type", "unknown instance"),
    ],
    ids=["type-twice", "priority-twice", "priority-6", "unknown-type"],
)
def test_each_pool_rule_is_an_error_naming_the_pool_field(prod_raw, entries, where, why) -> None:
    assert_names_yaml_path(with_pools(prod_raw, entries), f"variants.primary.{where}", why)


def test_instance_type_beside_pools_must_be_the_first_pools(prod_raw) -> None:
    raw = with_pools(prod_raw, pools((G6, 2), (G5, 1)), instance_type=G6)
    assert_names_yaml_path(
        raw, "variants.primary.instance_type", f"{G6} is not the first pool's type ({G5}"
    )
    cfg = parse(with_pools(prod_raw, pools((G6, 2), (G5, 1))))
    assert cfg.variants.primary.instance_type == G5  # omitted: read from priority 1
    assert cfg.variants.primary.pool_types == (G5, G6)


def test_a_pool_whose_gpu_cannot_hold_the_model_is_an_error_listing_its_terms(prod_raw) -> None:
    raw = with_pools(prod_raw, pools((G5, 1), (G6, 2, {"gpu_memory_utilization": 0.3})))
    assert_names_yaml_path(
        raw,
        "variants.primary.instance_pools.1.instance_type",
        f"{G6} (priority 2) cannot hold hf://meta-llama/Meta-Llama-3-8B-Instruct (awq): "
        "weights 5.39 + LoRA slots 0.31",
    )


def test_a_pool_engine_that_breaks_an_engine_rule_names_the_pool_engine_field(prod_raw) -> None:
    raw = with_pools(prod_raw, pools((G5, 1), (G6, 2, {"admission_max_inflight": 16})))
    assert_names_yaml_path(
        raw,
        "variants.primary.instance_pools.1.engine.admission_max_inflight",
        "16 must be >= max_num_seqs (128)",
    )


@pytest.mark.parametrize("timeout", [299, 3601])
def test_provision_timeout_outside_aws_range_is_an_error(prod_raw, timeout) -> None:
    raw = with_pools(prod_raw, pools((G5, 1), (G6, 2)), provision_timeout_seconds=timeout)
    assert_names_yaml_path(raw, "variants.primary.provision_timeout_seconds", "")


def test_provision_timeout_must_fit_the_blue_green_execution_limit(prod_raw) -> None:
    raw = with_pools(prod_raw, pools((G5, 1), (G6, 2)), provision_timeout_seconds=3000)
    assert_names_yaml_path(
        raw,
        "variants.primary.provision_timeout_seconds",
        "3000 s of capacity search + deployment.startup_health_check_timeout_seconds 600",
    )


def test_the_example_config_with_pools_is_valid(example_cfg) -> None:
    assert example_cfg.variants.primary.pool_types == (G5, G6)
    assert example_cfg.variants.primary.provision_timeout_seconds == 600


# --- template -----------------------------------------------------------------------------


def test_template_carries_instance_pools_instead_of_instance_type(override_template) -> None:
    variants = Capture()
    override_template.has_resource_properties(
        "AWS::SageMaker::EndpointConfig", {"ProductionVariants": variants}
    )
    primary = next(v for v in variants.as_array() if v["VariantName"] == "primary")
    canary = next(v for v in variants.as_array() if v["VariantName"] == "canary")
    assert "InstanceType" not in primary
    assert [(p["InstanceType"], p["Priority"]) for p in primary["InstancePools"]] == [
        (G5, 1),
        (G6, 2),
    ]
    assert primary["VariantInstanceProvisionTimeoutInSeconds"] == 600
    assert canary["InstanceType"] == G5 and "InstancePools" not in canary
    # the g5 pool runs the variant's Model; the g6 pool its own, by ModelNameOverride
    assert "ModelNameOverride" not in primary["InstancePools"][0]
    override = primary["InstancePools"][1]["ModelNameOverride"]
    own = override["Fn::GetAtt"][0]
    model = override_template.to_json()["Resources"][own]
    env = model["Properties"]["PrimaryContainer"]["Environment"]
    assert env["VLLM_MAX_NUM_SEQS"] == "48" and env["VARIANT_NAME"] == "primary"
    assert primary["ModelName"]["Fn::GetAtt"][0] != own


def test_pools_without_engine_settings_share_the_variants_model(example_cfg) -> None:
    t = synth_templates(example_cfg)["endpoint"]
    t.resource_count_is("AWS::SageMaker::Model", 2)
    t.has_resource_properties(
        "AWS::SageMaker::EndpointConfig",
        {
            "ProductionVariants": Match.array_with(
                [
                    Match.object_like(
                        {
                            "VariantName": "primary",
                            "InstancePools": [
                                {"InstanceType": G5, "Priority": 1},
                                {"InstanceType": G6, "Priority": 2},
                            ],
                        }
                    )
                ]
            )
        },
    )


# --- scaling, plan, quota, cost -----------------------------------------------------------


def _own_bound(basis: TargetBasis) -> int:
    """One pool's bound by the rule: the lowest of max_num_seqs, its KV cache and each SLO in
    ``target_tracking.slos`` reachable at the central estimate (at the planning edge's bound)."""
    slos = [
        max(1, next(b for b in basis.slo if b.slo == SLO_LIMITS[key][0]).concurrency)
        for key in basis.binding_slos
        if basis.reachable(key)
    ]
    return min(basis.max_num_seqs, basis.kv_bound, *slos)


def test_variant_target_is_the_lowest_pool_bound(override_cfg, example_cfg) -> None:
    """The g6 pool at max_num_seqs 48 runs at most 48 (its own SLO bound may be lower); each
    pool has its own bound (the example lists ttft_p50 in target_tracking.slos, so TTFT p50
    binds where it is reachable), and the variant's target follows the lowest of them."""
    for cfg in (override_cfg, example_cfg):
        bases = {b.instance_type: b for b in pool_bases(cfg, "primary")}
        assert set(bases) == {G5, G6}
        for b in bases.values():
            assert b.concurrency == _own_bound(b) <= b.engine_bound
        lowest = min(b.concurrency for b in bases.values())
        basis = target_basis(cfg, "primary")
        assert basis.concurrency == lowest == bases[basis.instance_type].concurrency
        assert concurrency_target(cfg, "primary") == round(0.85 * lowest, 2)
    # the override's own engine caps the g6 pool at 48
    g6 = {b.instance_type: b for b in pool_bases(override_cfg, "primary")}[G6]
    assert g6.max_num_seqs == 48 and g6.concurrency <= 48
    assert {b.instance_type: b for b in pool_bases(example_cfg, "primary")}[G6].max_num_seqs == 128


def test_rollback_latency_is_checked_on_the_slowest_pool(example_cfg) -> None:
    """The L4 decodes slower than the A10G: at the same target its p99 is higher, and the
    rollback threshold must clear it (prod's 22 s would not)."""
    single = type(example_cfg).model_validate(
        {**example_cfg.model_dump(exclude_unset=True), "variants": {
            **example_cfg.model_dump(exclude_unset=True)["variants"],
            "primary": {**example_cfg.model_dump(exclude_unset=True)["variants"]["primary"],
                        "instance_pools": None},
        }}
    )  # fmt: skip
    pooled = healthy_latency_p99_ms(example_cfg, "primary")
    assert pooled > healthy_latency_p99_ms(single, "primary")
    assert pooled > 22000 / 1.25


def test_plan_prints_each_pools_terms_kv_tokens_concurrency_and_price(override_cfg) -> None:
    plan = build_plan(override_cfg, {})
    primary = next(v for v in plan["variants"] if v["name"] == "primary")
    assert [p["instance_type"] for p in primary["pools"]] == [G5, G6]
    g6 = primary["pools"][1]
    assert g6["engine_overrides"] == {"max_num_seqs": 48} and g6["own_model"]
    assert g6["capacity"]["max_num_seqs"] == 48
    text = render_plan(plan)
    assert (
        f"pool 2: {G6} (1 x L4 24 GB) ${INSTANCE_CATALOG[G6].price_per_hour:g}/h; own Model: "
        "max_num_seqs=48" in text
    )
    # the variant and its pool 1 (the same ml.g5.xlarge); the canary's is the primary's, said once
    assert text.count("= KV cache 12.46 GiB = 102,048 tokens") == 2
    assert "same as primary: model release, memory per GPU and concurrency" in text
    assert "= KV cache 12.56 GiB = 102,912 tokens" in text  # pool 2: the L4 at max_num_seqs 48
    bases = pool_bases(override_cfg, "primary")
    for b in bases:  # each pool's own bound
        assert f"bound {b.concurrency} in flight ({b.binding})" in text
    lowest = target_basis(override_cfg, "primary")
    pool = next(i for i, b in enumerate(bases, 1) if b.instance_type == lowest.instance_type)
    assert f"scaling target from the lowest bound, pool {pool} ({lowest.instance_type})" in text
    assert "on its dearest pool" in text


def test_cost_on_the_dearest_pool_is_not_the_first_pools(prod_raw) -> None:
    """A fallback dearer than the first pool: the plan says what a shortage can cost."""
    prod_raw["variants"]["canary"]["instance_type"] = G5  # prod's canary is an ml.g6e.xlarge
    cfg = parse(with_pools(prod_raw, pools((G5, 1), ("ml.g6e.xlarge", 2))))
    cost = build_plan(cfg, {})["cost"]
    dear = INSTANCE_CATALOG["ml.g6e.xlarge"].monthly_price
    g5 = INSTANCE_CATALOG[G5].monthly_price
    primary, canary = (cfg.scaling.variants[v].max_capacity for v in ("primary", "canary"))
    assert (primary, canary) == (54, 54)  # prod's ceilings
    assert cost["monthly_at_max_capacity"] == round(primary * g5 + canary * g5, 2)
    assert cost["dearest_pool"]["monthly_at_max_capacity"] == round(primary * dear + canary * g5, 2)


def test_quota_counts_the_whole_fleet_on_each_pool_type(example_cfg) -> None:
    quota = deploy_section(example_cfg)["instance_quota_needed"]
    # the same fleet on ml.g5.xlarge alone (prod itself ships ml.g6e.xlarge now)
    data = example_cfg.model_dump(exclude_unset=True)
    data["variants"]["primary"]["instance_pools"] = None
    data["variants"]["primary"]["instance_type"] = G5
    single = deploy_section(type(example_cfg).model_validate(data))["instance_quota_needed"]
    assert set(single) == {G5}
    assert quota[G5] == single[G5]
    # the primary's blue + green fleet at max capacity (8 + 8) may all land on the g6 pool
    assert quota[G6] == 16


# --- make deploy --------------------------------------------------------------------------


def test_live_placement_reads_instance_pools_by_priority() -> None:
    assert live_placement({"InstanceType": G5}) == G5
    pv = {
        "InstancePools": [{"InstanceType": G6, "Priority": 2}, {"InstanceType": G5, "Priority": 1}]
    }
    assert live_placement(pv) == f"{G5}+{G6}"


def test_adding_pools_deregisters_first_then_pins_the_live_type(example_cfg) -> None:
    from datetime import UTC, datetime

    live = LiveEndpoint(
        "InService",
        "cfg-1",
        {
            "primary": LiveVariant(G5, 4, 95.0, 8, 2),
            "canary": LiveVariant(G5, 2, 5.0, 2, 2),
        },
    )
    steps = plan_deploy(example_cfg, live, now=datetime(2026, 12, 1, 3, tzinfo=UTC))
    deploys = [s for s in steps if s.action == "deploy"]
    assert len(deploys) == 2
    assert deploys[0].options.suspend_scaling == frozenset({"primary"})
    assert dict(deploys[0].options.pin_instance_types) == {"primary": G5}
    pinned = deploys[0].options.apply(example_cfg)
    assert pinned.variants.primary.instance_pools is None
    assert pinned.variants.primary.instance_type == G5
    # the same placement live: a plain deploy
    same = LiveEndpoint("InService", "cfg-2", {
        "primary": LiveVariant(f"{G5}+{G6}", 4, 95.0, 8, 2),
        "canary": LiveVariant(G5, 2, 5.0, 2, 2),
    })  # fmt: skip
    assert [
        s.action for s in plan_deploy(example_cfg, same, now=datetime(2026, 12, 1, 3, tzinfo=UTC))
    ] == ["deploy"]


def test_pinning_pools_keeps_a_pools_engine_settings(override_cfg) -> None:
    pinned = DeployOptions(pin_instance_types={"primary": f"{G6}+{G5}"}).apply(override_cfg)
    assert pinned.variants.primary.pool_types == (G6, G5)
    assert pinned.variants.primary.pools[0].engine.overrides() == {"max_num_seqs": 48}


# --- simulator ----------------------------------------------------------------------------


def test_scale_out_falls_back_to_the_next_pool_and_serves_at_its_speed(example_cfg) -> None:
    _, runs = pool_fallback.run_cases(example_cfg, Assumptions())
    one, pooled = runs["one type"], runs["instance pools"]
    end = pooled.per_minute[-1]
    assert end["in_service"][G6] > 0  # the scale-out landed on the fallback pool
    assert one.per_minute[-1]["in_service"] == {
        G5: example_cfg.variants.primary.initial_instance_count
    }
    assert pooled.rejected < one.rejected
    # the fallback instances run at the L4's speed: slower at the same concurrency
    e2e = end["e2e_s_at_target"]
    assert e2e[G6] > e2e[G5]
    summary = pool_fallback.summary(example_cfg, runs)
    assert summary["pools"] == [G5, G6] and not summary["what_if"]


def test_docs_describe_instance_pools() -> None:
    capacity = (REPO_ROOT / "docs" / "capacity.md").read_text()
    assert "## Instance pools" in capacity
    assert "instance_pools" in (REPO_ROOT / "docs" / "plan.md").read_text()
    assert Path(EXAMPLE).is_file()
