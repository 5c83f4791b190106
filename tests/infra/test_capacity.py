"""Capacity model: the real KV arithmetic, refusal of configs that cannot fit, the plan."""

from __future__ import annotations

import pytest

from stacks.capacity import CapacityError, estimate, kv_bytes_per_token, weight_bytes
from stacks.catalog import HOURS_PER_MONTH, INSTANCE_CATALOG
from stacks.config import BaseModelConfig, ModelArchitecture
from stacks.plan import build_plan, render_plan

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
    g5 = INSTANCE_CATALOG["ml.g5.xlarge"].price_per_hour
    assert plan["cost"]["monthly_at_initial_counts"] == pytest.approx(6 * g5 * HOURS_PER_MONTH)
    assert [v["name"] for v in plan["variants"]] == ["primary", "canary"]
    assert plan["variants"][0]["capacity"]["kv_bytes_per_token"] == 131072
    assert plan["rollout"]["canary_controller_steps_percent"] == [5, 25, 50, 75, 100]
    assert len(plan["alarms"]) >= 4
    text = render_plan(plan)
    assert "vLLM preempts beyond" in text and "$6,167/month" in text
