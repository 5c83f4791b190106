"""The model section and what is built from it: base model, adapters, vLLM engine, image."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from container.model_prep.validate import VLLM_LORA_RANKS
from container.serving.settings import engine_default
from typed_config.aws_limits import ECR_REPOSITORY
from typed_config.base import Strict, report_all, require_at_least, section_rule, worded


def _lora_rank(rank: int) -> int:
    if rank not in VLLM_LORA_RANKS:
        raise ValueError(f"rank {rank} is not one vLLM accepts {VLLM_LORA_RANKS}")
    return rank


#: A LoRA rank vLLM accepts for --max-lora-rank (the list lives with the image's adapter checks).
LoraRank = Annotated[int, AfterValidator(_lora_rank)]

#: Within ^[A-Za-z0-9_-]+$ (model_prep.sources.ADAPTER_NAME): an adapter name becomes a directory
#: in the image, so no dot or slash can ever make it a path ("../base", "/etc").
_ADAPTER_NAME = worded(
    r"^[a-zA-Z][a-zA-Z0-9_-]{0,62}$",
    "an adapter name: up to 63 letters, digits, _ and - starting with a letter, e.g. support_ja",
)
_ARTIFACT = worded(
    r"^(m-[0-9a-f]{16}|s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/([^/]+/)*m-[0-9a-f]{16})/?$",
    "a model release version (m- and 16 hex digits, e.g. m-0123456789abcdef) or its S3 URI "
    "(s3://<bucket>/<prefix>/m-0123456789abcdef)",
)
_SOURCE = worded(
    r"^(hf://[\w.-]+/[\w.-]+|s3://[a-z0-9.-]{3,63}/.*|local://[\w./-]+)$",
    "a model source: hf://<org>/<name> (e.g. hf://meta-llama/Meta-Llama-3-8B-Instruct), an S3 URI "
    "s3://<bucket>/<prefix> (bucket: 3-63 lowercase letters, digits, dots and dashes; e.g. "
    "s3://my-models/lora/support) or local://<path>",
)
_VERSION = worded(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$",
    "a version of up to 32 letters, digits, dots, _ and -, e.g. v3 or 2026.11.1",
)
#: A Docker image tag (Docker's own rule: 128 characters, no leading dot or dash).
IMAGE_TAG = worded(
    r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$",
    "an image tag: up to 128 letters, digits, _, . and -, not starting with . or -, e.g. a "
    "commit sha",
)


class ModelArchitecture(Strict):
    """What the capacity model needs from the base model's config.json."""

    num_hidden_layers: Annotated[int, Field(gt=0)]
    """Transformer layers (config.json ``num_hidden_layers``)."""
    num_attention_heads: Annotated[int, Field(gt=0)]
    """Attention (query) heads per layer (``num_attention_heads``)."""
    num_key_value_heads: Annotated[int, Field(gt=0)]
    """Key/value heads per layer (``num_key_value_heads``; grouped-query attention); must divide
    num_attention_heads. The KV cache is sized by it."""
    head_dim: Annotated[int, Field(gt=0)]
    """Size of one attention head (``head_dim``, else hidden_size / num_attention_heads)."""
    hidden_size: Annotated[int, Field(gt=0)]
    """Width of the residual stream (``hidden_size``)."""
    intermediate_size: Annotated[int, Field(gt=0)]
    """Width of the MLP's inner layer (``intermediate_size``)."""
    vocab_size: Annotated[int, Field(gt=0)]
    """Tokens in the vocabulary (``vocab_size``): the embedding and output layers' rows."""
    max_position_embeddings: Annotated[int, Field(gt=0)]
    """The longest context the model was trained for, in tokens (``max_position_embeddings``):
    engine.max_model_len may not exceed it."""
    tie_word_embeddings: bool = False
    """True when the output layer shares the embedding's weights (``tie_word_embeddings``): counted
    once in the weights' memory."""

    @section_rule
    def _heads_divide(self) -> ModelArchitecture:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads: ({self.num_key_value_heads}) must divide "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        return self

    @classmethod
    def from_hf_config(cls, path: Path) -> ModelArchitecture:
        raw = json.loads(path.read_text())
        heads = raw["num_attention_heads"]
        return cls(
            num_hidden_layers=raw["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=raw.get("num_key_value_heads", heads),
            head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
            hidden_size=raw["hidden_size"],
            intermediate_size=raw["intermediate_size"],
            vocab_size=raw["vocab_size"],
            max_position_embeddings=raw["max_position_embeddings"],
            tie_word_embeddings=raw.get("tie_word_embeddings", False),
        )


class BaseModelConfig(Strict):
    """The base LLM: where it comes from, how it is quantized, its architecture."""

    source: Annotated[str, Field(pattern=_SOURCE)]
    """Where the base model comes from: ``hf://<org>/<name>`` (Hugging Face),
    ``s3://<bucket>/<prefix>`` or ``local://<path>``."""
    revision: str = "main"
    """The Hugging Face revision to fetch: pin a commit hash (a model release is derived from it);
    ``main`` follows the branch."""
    quantization: Literal["awq", "none"] = "awq"
    """``awq``: 4-bit AWQ weights prepared once by the preparation job (a quarter of the bf16
    memory); ``none``: the weights as published."""
    architecture: ModelArchitecture | None = None
    """Written by the loader into a dumped config (deploy options, simulator variants): the
    architecture it established. A YAML file may not set it: a copy beside ``source`` goes stale
    when the source changes (typed_config/model_catalog.py)."""
    architecture_file: str | None = None
    """The model's own config.json (from its release or its Hugging Face repository), a path
    relative to this YAML file: for a source typed_config/model_catalog.py does not list."""
    quality_gate_min_agreement: Annotated[float, Field(gt=0, le=1)] = 0.9
    """The preparation job's quality gate: the least share (0-1) of held-out prompts on which the
    quantized model's answer agrees with the original's; below it the release is refused."""
    artifact: Annotated[str, Field(pattern=_ARTIFACT)] | None = None
    """The prepared model the image bakes: a version (``m-`` + 16 hex) in the artifact bucket, or
    its S3 URI. Omitted: the version the inputs above derive (make prepare-model's)."""

    @section_rule
    def _one_architecture(self) -> BaseModelConfig:
        if self.architecture is not None and self.architecture_file is not None:
            raise ValueError("architecture: give at most one of architecture or architecture_file")
        return self


#: A version suffix (``_v3``, ``-v12``): it belongs in ``version``, not in the name clients send.
_VERSION_SUFFIX = re.compile(r"[_-]v\d+$")


class AdapterConfig(Strict):
    """One LoRA adapter. ``name`` is what clients send (the adapter header or the body's model)
    and stays the same across versions; ``version`` says which release of it the image bakes
    (the plan, the image's manifest and the AdapterVersion metric dimension carry it), so a new
    version ships without a client changing its requests."""

    name: Annotated[str, Field(pattern=_ADAPTER_NAME)]
    """What clients send to pick this adapter (the X-Amzn-SageMaker-Adapter-Identifier header or the
    body's ``model``); stable across versions, no version suffix."""
    version: Annotated[str, Field(pattern=_VERSION)] | None = None
    """Which release of the adapter the image bakes (``v3``); the plan, the image's manifest and the
    AdapterVersion metric dimension carry it."""
    source: Annotated[str, Field(pattern=_SOURCE)]
    """Where the adapter comes from: ``hf://<org>/<name>``, ``s3://<bucket>/<prefix>`` or
    ``local://<path>``."""
    rank: LoraRank
    """The adapter's LoRA rank (one vLLM accepts: 8, 16, 32, 64, ...); every adapter shares one, at
    most engine.max_lora_rank."""

    @field_validator("name")
    @classmethod
    def _stable(cls, name: str) -> str:
        suffix = _VERSION_SUFFIX.search(name)
        if suffix:
            stable = name[: suffix.start()]
            raise ValueError(
                f"{name!r} carries a version; clients address an adapter by a stable name: "
                f"name: {stable}, version: {suffix.group()[1:]}"
            )
        return name


class ContextBudget(Strict):
    """Token budget of one prompt: system 400, retrieval 1,400, answer reserve 600 by default;
    the conversation turns get the rest of max_model_len."""

    system_tokens: Annotated[int, Field(gt=0)] = engine_default("context_budget.system_tokens")
    """Tokens reserved for the system prompt; a longer one is refused with a 400."""
    retrieval_tokens: Annotated[int, Field(ge=0)] = engine_default(
        "context_budget.retrieval_tokens"
    )
    """Tokens reserved for retrieved documents (the body's ``retrieval``); the documents past it
    are dropped, whole, in order."""
    generation_reserve_tokens: Annotated[int, Field(gt=0)] = engine_default(
        "context_budget.generation_reserve_tokens"
    )
    """Tokens kept free for the answer: ``max_tokens`` is capped so that prompt + answer fit
    max_model_len."""


class EngineConfig(Strict):
    """vLLM engine settings. An omitted field takes the serving container's own default
    (container.serving.settings), so the config and the image agree on what it means."""

    gpu_memory_utilization: Annotated[float, Field(gt=0.1, le=0.98)] = engine_default(
        "gpu_memory_utilization"
    )
    """Share of GPU memory vLLM may use for weights, activations and KV cache
    (--gpu-memory-utilization, 0.1-0.98). A stability boundary (0.95 gave OOMs under bursts), not a
    speed knob."""
    max_model_len: Annotated[int, Field(ge=256)] = engine_default("max_model_len")
    """The context window in tokens, prompt and answer together (--max-model-len); at most the
    model's max_position_embeddings."""
    max_num_seqs: Annotated[int, Field(ge=1, le=1024)] = engine_default("max_num_seqs")
    """The most requests one engine runs at once (--max-num-seqs): the ceiling of an instance's
    concurrency."""
    max_num_batched_tokens: Annotated[int, Field(ge=256)] = engine_default("max_num_batched_tokens")
    """Tokens one engine step may process (--max-num-batched-tokens); at least max_model_len, or
    long prompts are never scheduled."""
    block_size: Literal[8, 16, 32, 64, 128] = engine_default("block_size")
    """Tokens per KV-cache block (--block-size)."""
    enable_prefix_caching: bool = engine_default("enable_prefix_caching")
    """Reuse the KV cache of a prompt prefix seen before (--enable-prefix-caching): a shared system
    prompt is computed once."""
    max_loras: Annotated[int, Field(ge=1, le=64)] = engine_default("max_loras")
    """LoRA adapters resident on the GPU at once (--max-loras, 1-64); every configured adapter must
    fit."""
    max_lora_rank: LoraRank = engine_default("max_lora_rank")
    """The largest LoRA rank a slot holds (--max-lora-rank); every slot's memory is sized by it."""
    enforce_eager: bool = engine_default("enforce_eager")
    """--enforce-eager: no CUDA graphs (slower decode), so no graph memory taken from the KV
    cache."""
    log_level: Literal["debug", "info", "warning", "error"] = engine_default("log_level")
    """The serving container's log level."""
    warmup_num_requests: Annotated[int, Field(ge=0, le=100)] = engine_default("warmup_num_requests")
    """Requests the entrypoint sends to every adapter before /ping turns healthy (0-100): the first
    user request is not the one that compiles."""
    admission_max_inflight: Annotated[int, Field(ge=1)] = engine_default("admission_max_inflight")
    """Requests in flight per instance beyond which the admission hook answers 429 (at least
    max_num_seqs, or the batch never fills)."""
    max_request_bytes: Annotated[int, Field(ge=1024, le=64 * 1024 * 1024)] = engine_default(
        "max_request_bytes"
    )
    """Request limits answered 413 naming the limit (MAX_REQUEST_BYTES, MAX_MESSAGES)."""
    max_messages: Annotated[int, Field(ge=1, le=100_000)] = engine_default("max_messages")
    """The most messages one chat request may carry; more is answered 413 naming the limit."""
    shutdown_timeout_seconds: Annotated[int, Field(ge=0, le=3600)] = engine_default(
        "shutdown_timeout_seconds"
    )
    """Seconds vLLM drains in-flight requests after SIGTERM before it exits (--shutdown-timeout)."""
    metrics_interval_seconds: Annotated[int, Field(ge=1, le=300)] = engine_default(
        "metrics_interval_seconds"
    )
    """Seconds between the container's metric lines (CloudWatch embedded metric format)."""
    typical_prompt_tokens: Annotated[int, Field(gt=0)] = 1200
    """Typical request shape, for capacity estimates and the simulator."""
    typical_output_tokens: Annotated[int, Field(gt=0)] = 180
    """Output tokens of a typical answer, for capacity estimates and the simulator."""
    context_budget: ContextBudget = ContextBudget()
    """How the context window is shared: system prompt, retrieval and the answer's reserve; the
    conversation turns get the rest (the oldest dropped first, and the client told)."""

    @section_rule
    def _coherent(self) -> EngineConfig:
        report_all(
            lambda: require_at_least(
                ("max_num_batched_tokens", self.max_num_batched_tokens),
                ("max_model_len", self.max_model_len),
                "long prompts are never scheduled",
            ),
            self._budget_leaves_room,
            lambda: require_at_least(
                ("admission_max_inflight", self.admission_max_inflight),
                ("max_num_seqs", self.max_num_seqs),
                "the engine can never fill its batch",
            ),
        )
        return self

    def _budget_leaves_room(self) -> None:
        b = self.context_budget
        fixed = b.system_tokens + b.retrieval_tokens + b.generation_reserve_tokens
        if fixed >= self.max_model_len:
            raise ValueError(
                f"context_budget: system+retrieval+generation_reserve ({fixed}) leaves no room "
                f"for conversation turns within max_model_len ({self.max_model_len})"
            )


#: ECR_REPOSITORY's pattern, anchored for pydantic.
ECR_REPOSITORY_PATTERN = worded(
    f"^{ECR_REPOSITORY.pattern}$",
    "an ECR repository name: 2-256 lowercase letters and digits in parts joined by one ., _, __ "
    "or dashes, optionally /-separated, e.g. shop-vllm",
)


class ImageConfig(Strict):
    """Build the image from container/ with CDK, or deploy an existing tag (CI builds once)."""

    mode: Literal["build", "tag"] = "build"
    """``build``: CDK builds the image from container/; ``tag``: deploy ``tag`` from
    ``repository_name`` (CI built it)."""
    repository_name: (
        Annotated[str, Field(min_length=2, max_length=256, pattern=ECR_REPOSITORY_PATTERN)] | None
    ) = None
    """The ECR repository of the serving images (the image stack creates it; scan on push, immutable
    tags, KMS). ECR's rule (CreateRepository ``repositoryName``; typed_config/aws_limits.py
    ECR_REPOSITORY), so a name ECR refuses (``team-``, ``a..b``, ``a/-b``) fails at synth."""
    tag: Annotated[str, Field(pattern=IMAGE_TAG)] | None = None
    """The image tag to deploy with ``mode: tag`` (CI's push, usually the commit sha)."""
    keep_last_images: Annotated[int, Field(ge=1, le=1000)] = 20
    """Images the repository's lifecycle rule keeps (the newest; the ones live variants run are kept
    too)."""
    deploy_builds: bool = True
    """False: ``make deploy`` refuses to ship an image CDK builds (image.mode build): CDK publishes
    it to the bootstrap's asset repository, which has no scan on push and no customer key, outside
    this repository's lifecycle rules. Deploys then name their tags (``IMAGE_TAG=<sha>`` from CI's
    make push-image, or ``IMAGE_TAG=live``). Synth, the plan and make demo still build the template
    in build mode."""

    @section_rule
    def _tag_when_needed(self) -> ImageConfig:
        if self.mode == "tag" and not self.tag:
            raise ValueError("tag: mode 'tag' needs tag (the image tag CI pushed)")
        if self.mode == "build" and self.tag:
            raise ValueError("tag: only used with mode 'tag'")
        return self
