"""The settings class, its table in docs/serving.md, and its translation into vLLM 0.32 flags."""

from __future__ import annotations

import json

import pytest
from pydantic_settings import BaseSettings

from container.serving import settings
from tools import settings_table

STACK_ENV = {
    "MODEL_PATH", "LORA_PATH", "VLLM_PORT", "VLLM_GPU_MEMORY_UTILIZATION", "VLLM_MAX_MODEL_LEN",
    "VLLM_MAX_NUM_SEQS", "VLLM_MAX_NUM_BATCHED_TOKENS", "VLLM_BLOCK_SIZE",
    "VLLM_ENABLE_PREFIX_CACHING", "VLLM_MAX_LORAS", "VLLM_MAX_LORA_RANK", "VLLM_LOG_LEVEL",
    "WARMUP_NUM_REQUESTS", "DEFAULT_ADAPTER", "ADMISSION_MAX_INFLIGHT",
    "SHUTDOWN_TIMEOUT_SECONDS", "BUDGET_SYSTEM_TOKENS", "BUDGET_RETRIEVAL_TOKENS",
    "BUDGET_GENERATION_RESERVE_TOKENS", "METRICS_INTERVAL_SECONDS", "ENDPOINT_NAME",
    "VARIANT_NAME", "SERVING_DEVICE", "SAGEMAKER_BIND_TO_PORT", "SERVING_ADAPTERS_AT_RUNTIME",
}  # fmt: skip
REMOVED_FLAGS = {
    "--disable-log-requests", "--scheduler-delay-factor", "--swap-space",
    "--use-v2-block-manager", "--disable-frontend-multiprocessing", "--engine-use-ray",
    "--quantization",
}  # fmt: skip


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_every_variable_the_endpoint_stack_sets_is_registered() -> None:
    assert settings.REGISTRY.keys() >= STACK_ENV
    assert all(s.doc for s in settings.REGISTRY.values())


def test_one_pydantic_settings_class_documents_every_variable() -> None:
    fields = settings.Settings.model_fields
    assert issubclass(settings.Settings, BaseSettings)
    assert list(settings.REGISTRY) == [name.upper() for name in fields]
    assert all(len(info.description or "") > 10 for info in fields.values())
    assert settings.REGISTRY["VLLM_MAX_NUM_SEQS"] == settings.Setting(
        "VLLM_MAX_NUM_SEQS", "128", "--max-num-seqs: concurrent sequences in the running batch."
    )
    assert settings.REGISTRY["VLLM_ENABLE_PREFIX_CACHING"].default == "true"


def test_docs_table_is_the_generated_one() -> None:
    page = settings_table.DOC.read_text()
    assert settings_table.table_in(page) == settings_table.markdown_table(), (
        f"docs/serving.md's settings table is out of date; regenerate: {settings_table.REGENERATE}"
    )


def test_docs_table_check_fails_on_a_drifted_table(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    drifted = settings_table.DOC.read_text().replace(
        "| `VLLM_MAX_NUM_SEQS` | `128` |", "| `VLLM_MAX_NUM_SEQS` | `64` |"
    )
    assert drifted != settings_table.DOC.read_text()
    monkeypatch.setattr(settings_table, "DOC", tmp_path / "serving.md")
    settings_table.DOC.write_text(drifted)
    assert settings_table.main(["--check"]) == 1
    assert settings_table.main(["--write"]) == 0 and settings_table.main(["--check"]) == 0


def test_reads_the_process_environment_by_default(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("VLLM_MAX_NUM_SEQS", "12")
    monkeypatch.setenv("vllm_max_loras", "9")  # names are exact: lower case is another variable
    assert settings.load().vllm_max_num_seqs == 12 and settings.load().vllm_max_loras == 4
    assert settings.load({}).vllm_max_num_seqs == 128  # a given mapping replaces the environment


@pytest.mark.parametrize(
    ("raw", "value"),
    [("1", True), ("TRUE", True), (" yes ", True), ("on", True), ("0", False), ("False", False),
     ("no", False), ("off", False), ("", False)],
)  # fmt: skip
def test_booleans_accept_exactly_the_documented_words(raw: str, value: bool) -> None:
    assert settings.load({"VLLM_ENFORCE_EAGER": raw}).vllm_enforce_eager is value


def test_every_bad_variable_is_named_at_once() -> None:
    bad = {"VLLM_MAX_NUM_SEQS": "0", "VLLM_ENFORCE_EAGER": "y", "WARMUP_NUM_REQUESTS": "-1",
           "VLLM_LOG_LEVEL": "loud", "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "2",
           "SAGEMAKER_BIND_TO_PORT": "http", "VLLM_GPU_MEMORY_UTILIZATION": "0"}  # fmt: skip
    with pytest.raises(settings.SettingsError) as err:
        settings.load(bad)
    for name, raw in bad.items():
        assert f"{name}={raw!r}: " in str(err.value)


def test_defaults_are_the_seed_values() -> None:
    s = settings.load({})
    assert (s.model_path, s.lora_path, s.port) == ("/opt/ml/model/base", "/opt/ml/model/lora", 8080)
    assert (s.vllm_gpu_memory_utilization, s.vllm_max_model_len, s.vllm_max_num_seqs) == (
        0.92, 4096, 128,
    )  # fmt: skip
    assert (s.budget_system_tokens, s.budget_retrieval_tokens) == (400, 1400)
    assert s.budget_generation_reserve_tokens == 600
    assert s.serving_device == "gpu" and s.vllm_enable_prefix_caching


def test_translation_to_current_vllm_flags(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text("{}")
    s = settings.load(
        {"LORA_PATH": str(tmp_path), "VLLM_MAX_NUM_SEQS": "64",
         "VLLM_ENABLE_PREFIX_CACHING": "false", "SHUTDOWN_TIMEOUT_SECONDS": "45",
         "VLLM_MAX_LORA_RANK": "32"}
    )  # fmt: skip
    args = settings.vllm_args(s)
    assert flag(args, "--max-num-seqs") == "64"
    assert flag(args, "--shutdown-timeout") == "45"
    assert flag(args, "--max-lora-rank") == "32"
    assert "--no-enable-prefix-caching" in args and "--enforce-eager" not in args
    modules = [json.loads(a) for a in args[args.index("--lora-modules") + 1 :]]
    assert [m["name"] for m in modules] == ["a", "b"]
    assert {m["base_model_name"] for m in modules} == {"base"}
    assert not REMOVED_FLAGS & set(args)


def test_no_adapters_means_no_lora_flags(tmp_path) -> None:  # type: ignore[no-untyped-def]
    args = settings.vllm_args(settings.load({"LORA_PATH": str(tmp_path / "none")}))
    assert "--enable-lora" not in args


def test_adapters_at_runtime_enable_lora_and_load_no_baked_adapter(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The component shape: LoRA on (its limits from the settings), no --lora-modules though
    adapters are baked, vLLM's adapter routes switched on, the base alone warmed at start."""
    from container.serving.entrypoint import vllm_env

    monkeypatch.delenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", raising=False)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "adapter_config.json").write_text("{}")
    env = {"LORA_PATH": str(tmp_path), "SERVING_ADAPTERS_AT_RUNTIME": "1",
           "VLLM_MAX_LORAS": "6", "VLLM_MAX_LORA_RANK": "32"}  # fmt: skip
    s = settings.load(env)
    args = settings.vllm_args(s)
    assert "--enable-lora" in args and "--lora-modules" not in args
    assert flag(args, "--max-loras") == "6" and flag(args, "--max-lora-rank") == "32"
    assert s.startup_adapters() == {} and list(s.adapters()) == ["a"]
    assert vllm_env(s)["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "true"
    variant = settings.load({"LORA_PATH": str(tmp_path)})
    assert "--lora-modules" in settings.vllm_args(variant)
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in vllm_env(variant)


def test_a_default_adapter_with_adapters_at_runtime_is_refused_naming_both() -> None:
    with pytest.raises(
        settings.SettingsError, match=r"DEFAULT_ADAPTER='a'.*SERVING_ADAPTERS_AT_RUNTIME=1"
    ):
        settings.load({"SERVING_ADAPTERS_AT_RUNTIME": "1", "DEFAULT_ADAPTER": "a"})


def test_sagemaker_bind_to_port_overrides_vllm_port() -> None:
    s = settings.load({"VLLM_PORT": "9000", "SAGEMAKER_BIND_TO_PORT": "8443"})
    assert flag(settings.vllm_args(s, {}), "--port") == "8443"


def test_cpu_mode_rounds_block_size_for_the_cpu_attention_backend() -> None:
    assert (
        flag(settings.vllm_args(settings.load({"SERVING_DEVICE": "cpu"}), {}), "--block-size")
        == "32"
    )
    assert flag(settings.vllm_args(settings.load({}), {}), "--block-size") == "16"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"VLLM_MAX_NUM_SEQS": "lots"}, "VLLM_MAX_NUM_SEQS"),
        ({"VLLM_GPU_MEMORY_UTILIZATION": "1.5"}, "VLLM_GPU_MEMORY_UTILIZATION"),
        ({"SERVING_DEVICE": "tpu"}, "SERVING_DEVICE"),
        ({"VLLM_ENABLE_PREFIX_CACHING": "maybe"}, "VLLM_ENABLE_PREFIX_CACHING"),
        ({"VLLM_MAX_MODEL_LEN": "2000"}, "leaves no room"),
    ],
)
def test_bad_values_fail_with_the_variable_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(settings.SettingsError, match=message):
        settings.load(env)


def test_as_env_round_trips() -> None:
    s = settings.load({"VLLM_ENFORCE_EAGER": "1", "ADMISSION_MAX_INFLIGHT": "7"})
    assert settings.load(settings.as_env(s)) == s


def test_outside_the_image_vllm_listens_on_this_machine_only_and_the_image_on_all_interfaces() -> (
    None
):
    """make serve-local, make demo and the tests run the entrypoint on the host: 127.0.0.1, not
    every interface of a laptop or a shared machine. The image sets 0.0.0.0 with port 8080, which
    SageMaker reaches from outside the container."""
    from tools import REPO_ROOT

    assert flag(settings.vllm_args(settings.load({})), "--host") == "127.0.0.1"
    dockerfile = (REPO_ROOT / "container" / "Dockerfile").read_text()
    runtime = dockerfile[dockerfile.rindex("\nFROM ") :]  # the last stage: what SageMaker runs
    assert "    VLLM_HOST=0.0.0.0 \\\n" in runtime and "    VLLM_PORT=8080 \\\n" in runtime
    assert "\nEXPOSE 8080\n" in runtime
