"""Capacity model: the real KV arithmetic, refusal of configs that cannot fit, the plan."""

from __future__ import annotations

import pytest

from sizing.capacity import (
    CapacityError,
    estimate,
    kv_bytes_per_token,
    sampler_bytes,
    weight_bytes,
)
from sizing.plan import build_plan, render_plan
from sizing.scaling_target import concurrency_target
from typed_config import BaseModelConfig, ModelArchitecture
from typed_config.catalog import HOURS_PER_MONTH, INSTANCE_CATALOG

from .conftest import parse

REQUIRED = {
    "ml.g4dn.xlarge",
    "ml.g5.xlarge",
    "ml.g5.2xlarge",
    "ml.g5.12xlarge",
    "ml.g6.xlarge",
    "ml.g6e.xlarge",
    "ml.p4d.24xlarge",
    "ml.p5.48xlarge",
}


def test_catalog_covers_the_required_instances_with_price_sources() -> None:
    assert set(INSTANCE_CATALOG) >= REQUIRED
    for inst in INSTANCE_CATALOG.values():
        assert inst.price_per_hour > 0 and inst.price_source and inst.gpu_memory_gib > 0


def test_llama3_8b_kv_cache_is_128_kib_per_token(prod_cfg) -> None:
    assert kv_bytes_per_token(prod_cfg.architecture) == 128 * 1024


def test_seeds_worst_case_is_64_gib_not_14(prod_cfg) -> None:
    cap = estimate(prod_cfg, "ml.g5.xlarge")
    assert cap.worst_case_kv_gib == 64.0
    assert cap.preempts_at_full_context
    assert cap.concurrency_at_full_context < cap.concurrency_at_typical_length < 128


def test_awq_weights_are_about_a_third_of_fp16(prod_cfg) -> None:
    awq = weight_bytes(prod_cfg.architecture, "awq")
    fp16 = weight_bytes(prod_cfg.architecture, "none")
    assert 14.5e9 < fp16 < 16.5e9  # ~8.0 B parameters x 2 bytes
    assert 0.3 < awq / fp16 < 0.4


def test_more_gpu_memory_means_more_kv_tokens(prod_cfg) -> None:
    small = estimate(prod_cfg, "ml.g5.xlarge").kv_capacity_tokens
    big = estimate(prod_cfg, "ml.g6e.xlarge").kv_capacity_tokens
    assert big > 2 * small


def test_unquantized_70b_on_one_a10g_is_refused(prod_cfg) -> None:
    arch_70b = ModelArchitecture(
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=128,
        hidden_size=8192,
        intermediate_size=28672,
        vocab_size=128256,
        max_position_embeddings=8192,
    )
    model = BaseModelConfig(
        source="hf://meta-llama/Llama-3-70B", quantization="none", architecture=arch_70b
    )
    cfg = prod_cfg.model_copy(update={"model": model})
    with pytest.raises(CapacityError, match=r"do not fit in ml.g5.xlarge"):
        estimate(cfg, "ml.g5.xlarge")


def test_plan_reports_cost_capacity_and_rollout(prod_cfg, prod_templates) -> None:
    templates = {k: t.to_json() for k, t in prod_templates.items()}
    plan = build_plan(prod_cfg, templates)
    # prod's ceilings: 54 primary + 54 canary ml.g6e.xlarge all month
    g6e = INSTANCE_CATALOG["ml.g6e.xlarge"].price_per_hour
    assert plan["cost"]["monthly_at_max_capacity"] == pytest.approx(108 * g6e * HOURS_PER_MONTH)
    # the floors: never below every variant at its own min_capacity all month
    least = sum(prod_cfg.scaling.variants[v].min_capacity for v in ("primary", "canary"))
    assert plan["cost"]["monthly_at_floors"] > least * g6e * HOURS_PER_MONTH
    assert [v["name"] for v in plan["variants"]] == ["primary", "canary"]
    assert plan["variants"][0]["capacity"]["kv_bytes_per_token"] == 131072
    assert plan["rollout"]["canary_controller_steps_percent"] == [5, 25, 50, 75, 100]
    assert len(plan["alarms"]) >= 4
    text = render_plan(plan)
    assert "vLLM preempts beyond" in text
    assert f"${plan['cost']['monthly_at_floors']:,.0f}/month at the floors" in text


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize(
    "engine_update",
    [{}, {"enforce_eager": True, "max_num_batched_tokens": 4096, "gpu_memory_utilization": 0.9}],
    ids=["prod", "eager-4096-batched"],
)
def test_container_starts_vllm_with_every_setting_the_plan_assumed(prod_cfg, engine_update) -> None:
    """The plan's figures hold only if vLLM runs with the same settings, not with its defaults
    (vllm serve defaults to 2048 batched tokens on GPUs under 70 GiB; CUDA-graph memory profiling
    is a default that vLLM has flipped before). The stack's env -> the container's settings ->
    the `vllm serve` flags and vLLM's environment must carry each value the estimate assumed."""
    from container.serving import settings as serving
    from container.serving.entrypoint import vllm_env
    from stacks.constructs.endpoint import container_environment

    cfg = prod_cfg.model_copy(update={"engine": prod_cfg.engine.model_copy(update=engine_update)})
    s = serving.load(container_environment(cfg, "primary"))
    args = serving.vllm_args(s, {a.name: f"/opt/ml/model/lora/{a.name}" for a in cfg.adapters})
    assumed = estimate(cfg, cfg.variants.primary.instance_type).assumed_engine
    started = {
        "gpu_memory_utilization": float(_flag(args, "--gpu-memory-utilization")),
        "max_model_len": int(_flag(args, "--max-model-len")),
        "max_num_seqs": int(_flag(args, "--max-num-seqs")),
        "max_num_batched_tokens": int(_flag(args, "--max-num-batched-tokens")),
        "block_size": int(_flag(args, "--block-size")),
        "enforce_eager": "--enforce-eager" in args,
        "enable_lora": "--enable-lora" in args,
        "max_loras": int(_flag(args, "--max-loras")),
        "max_lora_rank": int(_flag(args, "--max-lora-rank")),
        "cuda_graph_memory_in_kv_budget": vllm_env(s)["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"]
        == "1",
    }
    assert started == assumed
    assert not s.vllm_extra_args  # nothing appended after the pinned flags


def test_plan_prints_each_memory_term_with_its_margin(prod_cfg) -> None:
    text = render_plan(build_plan(prod_cfg, {}))
    for term in ("weights", "LoRA slots", "activation peak", "non-torch", "CUDA graphs"):
        assert f"- {term}" in text
    assert "44.39 GiB as CUDA reports it" in text  # prod's ml.g6e.xlarge: one L40S 48 GB
    assert "(estimate, margin 0.07 GiB" in text and "(computed;" in text


def test_enforce_eager_gives_the_cuda_graph_memory_back_to_the_kv_cache(prod_cfg) -> None:
    eager = prod_cfg.model_copy(
        update={"engine": prod_cfg.engine.model_copy(update={"enforce_eager": True})}
    )
    graphs = estimate(prod_cfg, "ml.g5.xlarge")
    no_graphs = estimate(eager, "ml.g5.xlarge")
    graph_term = {t.name: t for t in graphs.terms}["CUDA graphs"]
    assert graph_term.estimate and graph_term.gib == pytest.approx(0.8)
    assert {t.name: t.bytes for t in no_graphs.terms}["CUDA graphs"] == 0
    assert no_graphs.kv_budget_gib == pytest.approx(graphs.kv_budget_gib + 0.8, abs=0.01)


def test_activation_peak_scales_with_max_num_batched_tokens(prod_cfg) -> None:
    small = prod_cfg.model_copy(
        update={"engine": prod_cfg.engine.model_copy(update={"max_num_batched_tokens": 4096})}
    )
    act = {t.name: t.bytes for t in estimate(prod_cfg, "ml.g5.xlarge").terms}["activation peak"]
    act_small = {t.name: t.bytes for t in estimate(small, "ml.g5.xlarge").terms}["activation peak"]
    # the forward pass scales with batched tokens; the sampler's share (max_num_seqs x vocab
    # logits, vLLM 0.32's _dummy_sampler_run) does not
    sampler = sampler_bytes(prod_cfg.architecture, prod_cfg.engine.max_num_seqs)
    assert sampler > 0
    assert act - sampler == 2 * (act_small - sampler)
    assert (act - sampler) / 8192 == 114_688  # 112 KiB per batched token for Llama-3-8B


def test_prod_a10g_figures_from_the_corrected_model(prod_cfg, prod_raw) -> None:
    # docs/capacity.md's issue-13 table: 21.98 GiB x 0.92 less the five terms (was 13.76 GiB /
    # 112,688 tokens / 27 / 81 / target 68.85 with the marketing 24 GiB and a flat 1.5 GiB).
    cap = estimate(prod_cfg, "ml.g5.xlarge")
    # (12.5 GiB / 102,368 / 24 / 74 / 62.9 before the sampler term and the refitted non-torch)
    assert cap.kv_budget_gib == 12.46 and cap.kv_capacity_tokens == 102_048
    assert (cap.concurrency_at_full_context, cap.concurrency_at_typical_length) == (24, 73)
    # prod on ml.g5.xlarge (it ships ml.g6e.xlarge now): the KV cache binds the target
    for variant in ("primary", "canary"):
        prod_raw["variants"][variant]["instance_type"] = "ml.g5.xlarge"
    assert concurrency_target(parse(prod_raw), "primary") == 62.05  # 0.85 x 73


def test_plan_template_and_simulator_take_the_same_capacity(prod_cfg, prod_templates) -> None:
    """One function feeds all three: the plan's figures, the synthesized TargetValue and the
    simulator's per-instance model (make simulate) cannot drift apart."""
    from simulator.assumptions import Assumptions
    from simulator.capacity import instance_model

    plan = build_plan(prod_cfg, {k: t.to_json() for k, t in prod_templates.items()})
    plan_cap = plan["variants"][0]["capacity"]
    target = concurrency_target(prod_cfg, "primary")
    assert (
        plan["variants"][0]["scaling"]["target_tracking"] == f"ConcurrentRequestsPerModel {target}"
    )
    values = [
        res["Properties"]["TargetTrackingScalingPolicyConfiguration"]["TargetValue"]
        for tpl in prod_templates.values()
        for res in tpl.to_json()["Resources"].values()
        if res["Type"] == "AWS::ApplicationAutoScaling::ScalingPolicy"
        and "TargetTrackingScalingPolicyConfiguration" in res["Properties"]
    ]
    assert values and set(values) == {target}
    sim = instance_model(prod_cfg, prod_cfg.variants.primary.instance_type, Assumptions())
    assert sim.kv_capacity_tokens == plan_cap["kv_capacity_tokens"]
    assert sim.concurrency == plan_cap["concurrency_at_typical_length"]
    assert target == round(0.85 * sim.concurrency, 2)
