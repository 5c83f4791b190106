"""Config validation: every invalid value fails with a message naming its YAML path."""

from __future__ import annotations

import re

import pytest

from stacks.config import ConfigError, load_config

from .conftest import REPO_ROOT, load_env, parse

# (dotted path to change, new value, expected YAML path in the message, expected reason)
INVALID = [
    ("engien", {}, "engien", "unknown key"),
    ("engine.max_num_seq", 64, "engine.max_num_seq", "unknown key"),
    ("engine.gpu_memory_utilization", 1.2, "engine.gpu_memory_utilization", "less than or equal"),
    ("engine.max_num_seqs", 0, "engine.max_num_seqs", "greater than or equal"),
    ("engine.block_size", 24, "engine.block_size", "8, 16, 32, 64 or 128"),
    ("engine.max_lora_rank", 12, "engine.max_lora_rank", "not one vLLM accepts"),
    (
        "model.architecture.max_position_embeddings",
        2048,
        "engine.max_model_len",
        "max_position_embeddings (2048)",
    ),
    (
        "engine.max_num_batched_tokens",
        2048,
        "engine.max_num_batched_tokens",
        "2048 must be >= max_model_len",
    ),
    (
        "engine.admission_max_inflight",
        64,
        "engine.admission_max_inflight",
        "64 must be >= max_num_seqs",
    ),
    ("engine.context_budget.retrieval_tokens", 4000, "engine.context_budget", "leaves no room"),
    ("adapters.0.rank", 12, "adapters.0.rank", "not one vLLM accepts"),
    ("adapters.1.rank", 32, "adapters", "share one rank"),
    ("adapters.0.source", "ftp://x/y", "adapters.0.source", "should match pattern"),
    ("default_adapter", "nope", "default_adapter", "'nope' is not one of the adapters"),
    (
        "variants.primary.instance_type",
        "ml.g5.mega",
        "variants.primary.instance_type",
        "unknown instance type",
    ),
    ("variants.canary.initial_weight", 96, "variants.canary.initial_weight", "96.0 must be below"),
    (
        "variants.primary.initial_instance_count",
        9,
        "variants.primary.initial_instance_count",
        "within scaling.variants.primary",
    ),
    (
        "variants.canary.initial_instance_count",
        0,
        "variants.canary.initial_instance_count",
        "greater than or equal",
    ),
    (
        "scaling.variants.primary.min_capacity",
        9,
        "scaling.variants.primary.min_capacity",
        "9 must be <= max_capacity (8)",
    ),
    (
        "scaling.schedules.0.timezone",
        "Asia/Tokio",
        "scaling.schedules.0.timezone",
        "not an IANA time zone",
    ),
    ("scaling.schedules.0.cron", "45 17 * *", "scaling.schedules.0.cron", "5-field cron"),
    (
        "scaling.schedules.0.max_capacity",
        12,
        "scaling.schedules.0.max_capacity",
        "exceeds scaling.variants.primary.max_capacity",
    ),
    (
        "scaling.schedules.0.standby_instances",
        5,
        "scaling.schedules.0.standby_instances",
        "min_capacity + standby_instances (10)",
    ),
    (
        "scaling.release_calendar.0.at",
        "2026-12-04T20:00:00+09:00",
        "scaling.release_calendar.0.at",
        "without an offset",
    ),
    (
        "deployment.traffic_shift.type",
        "blue",
        "deployment.traffic_shift.type",
        "'canary', 'linear' or 'all_at_once'",
    ),
    (
        "deployment.startup_health_check_timeout_seconds",
        30,
        "deployment.startup_health_check_timeout_seconds",
        "greater than or equal to 60",
    ),
    (
        "deployment.max_execution_timeout_seconds",
        600,
        "deployment.max_execution_timeout_seconds",
        "shorter than the traffic shift",
    ),
    ("rollout.steps_percent", [5, 50, 25], "rollout.steps_percent", "strictly increasing"),
    ("image.mode", "tag", "image.tag", "needs tag"),
    ("endpoint_name", "bad_name!", "endpoint_name", "should match pattern"),
    ("region", "tokyo", "region", "should match pattern"),
    ("notifications.emails", ["not-an-email"], "notifications.emails.0", "should match pattern"),
    (
        "scaling.variants.primary.step_policies.0.steps.1.lower",
        20,
        "scaling.variants.primary.step_policies.0.steps.1.lower",
        "overlap",
    ),
    (
        "scaling.variants.primary.step_policies.2.steps.0.change",
        1,
        "scaling.variants.primary.step_policies.2.comparison",
        "scale-in policy needs",
    ),
]


@pytest.mark.parametrize(("path", "value", "where", "why"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_value_names_its_yaml_path(mutate, path, value, where, why) -> None:
    with pytest.raises(ConfigError) as err:
        parse(mutate(path, value))
    message = str(err.value)
    assert re.search(rf"^  {re.escape(where)}: .*{re.escape(why)}", message, re.M), message


def test_at_least_twenty_distinct_invalid_configs_are_covered() -> None:
    assert len({c[0] for c in INVALID}) >= 20


def test_missing_required_section_is_named(mutate) -> None:
    with pytest.raises(ConfigError, match=r"(?m)^  scaling: Field required") as err:
        parse(mutate("scaling", delete=True))
    assert "config/prod.yaml" in str(err.value)


def test_all_errors_are_reported_at_once(mutate) -> None:
    raw = mutate("engine.max_num_seqs", 0)
    raw["variants"]["primary"]["instance_type"] = "ml.nope"
    with pytest.raises(ConfigError) as err:
        parse(raw)
    assert "engine.max_num_seqs" in str(err.value)
    assert "variants.primary.instance_type" in str(err.value)


def test_env_mismatch_is_refused(prod_raw) -> None:
    with pytest.raises(ConfigError, match="file says 'prod' but 'dev' was selected"):
        parse(prod_raw, env="dev")


def test_bad_yaml_is_a_config_error(tmp_path) -> None:
    bad = tmp_path / "prod.yaml"
    bad.write_text("project: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad, env="prod")


def test_architecture_can_come_from_a_config_json(mutate, tmp_path) -> None:
    (tmp_path / "config.json").write_text(
        '{"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,'
        ' "hidden_size": 128, "intermediate_size": 256, "vocab_size": 400,'
        ' "max_position_embeddings": 8192}'
    )
    raw = mutate("model.architecture", delete=True)
    raw["model"]["architecture_file"] = str(tmp_path / "config.json")
    cfg = parse(raw)
    assert cfg.architecture.head_dim == 32  # hidden_size / num_attention_heads


def test_shipped_configs_are_valid() -> None:
    for env in ("dev", "prod"):
        cfg = load_env(env)
        assert cfg.env == env
    assert (REPO_ROOT / "config" / "prod.yaml").exists()


def test_prod_carries_the_seed_numbers() -> None:
    cfg = load_env("prod")
    assert cfg.variants.primary.instance_type == "ml.g5.xlarge"
    assert (cfg.variants.primary.initial_instance_count, cfg.variants.primary.initial_weight) == (
        4,
        95,
    )
    # 2 canary instances, not the seeds' 1: the blue/green canary step (one whole instance)
    # must be <= 50% of every variant's fleet (TrafficRoutingConfig; issue 10 item 4).
    assert (cfg.variants.canary.initial_instance_count, cfg.variants.canary.initial_weight) == (
        2,
        5,
    )
    eng = cfg.engine
    assert (eng.gpu_memory_utilization, eng.max_model_len, eng.max_num_seqs) == (0.92, 4096, 128)
    assert (eng.max_num_batched_tokens, eng.block_size, eng.max_lora_rank) == (8192, 16, 16)


def test_example_configs_are_valid() -> None:
    examples = sorted((REPO_ROOT / "config" / "examples").glob("*.yaml"))
    assert examples
    for path in examples:
        cfg = load_config(path, env="prod")
        assert (
            cfg.scaling.variants["primary"].max_capacity
            >= cfg.variants.primary.initial_instance_count
        )
