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
from typed_config.base import Strict, report_all, require_at_least, section_rule


def _lora_rank(rank: int) -> int:
    if rank not in VLLM_LORA_RANKS:
        raise ValueError(f"rank {rank} is not one vLLM accepts {VLLM_LORA_RANKS}")
    return rank


#: A LoRA rank vLLM accepts for --max-lora-rank (the list lives with the image's adapter checks).
LoraRank = Annotated[int, AfterValidator(_lora_rank)]

#: Within ^[A-Za-z0-9_-]+$ (model_prep.sources.ADAPTER_NAME): an adapter name becomes a directory
#: in the image, so no dot or slash can ever make it a path ("../base", "/etc").
_ADAPTER_NAME = r"^[a-zA-Z][a-zA-Z0-9_-]{0,62}$"
_ARTIFACT = r"^(m-[0-9a-f]{16}|s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/([^/]+/)*m-[0-9a-f]{16})/?$"
_SOURCE = r"^(hf://[\w.-]+/[\w.-]+|s3://[a-z0-9.-]{3,63}/.*|local://[\w./-]+)$"


class ModelArchitecture(Strict):
    """What the capacity model needs from the base model's config.json."""

    num_hidden_layers: Annotated[int, Field(gt=0)]
    num_attention_heads: Annotated[int, Field(gt=0)]
    num_key_value_heads: Annotated[int, Field(gt=0)]
    head_dim: Annotated[int, Field(gt=0)]
    hidden_size: Annotated[int, Field(gt=0)]
    intermediate_size: Annotated[int, Field(gt=0)]
    vocab_size: Annotated[int, Field(gt=0)]
    max_position_embeddings: Annotated[int, Field(gt=0)]
    tie_word_embeddings: bool = False

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
    revision: str = "main"
    quantization: Literal["awq", "none"] = "awq"
    #: Architecture inline, or ``architecture_file``: a config.json path relative to the YAML.
    architecture: ModelArchitecture | None = None
    architecture_file: str | None = None
    quality_gate_min_agreement: Annotated[float, Field(gt=0, le=1)] = 0.9
    #: The prepared model the image bakes: a version (``m-`` + 16 hex) in the artifact bucket,
    #: or its S3 URI. Omitted: the version the inputs above derive (make prepare-model's).
    artifact: Annotated[str, Field(pattern=_ARTIFACT)] | None = None

    @section_rule
    def _one_architecture(self) -> BaseModelConfig:
        if (self.architecture is None) == (self.architecture_file is None):
            raise ValueError("architecture: give exactly one of architecture or architecture_file")
        return self


#: A version suffix (``_v3``, ``-v12``): it belongs in ``version``, not in the name clients send.
_VERSION_SUFFIX = re.compile(r"[_-]v\d+$")


class AdapterConfig(Strict):
    """One LoRA adapter. ``name`` is what clients send (the adapter header or the body's model)
    and stays the same across versions; ``version`` says which release of it the image bakes
    (the plan, the image's manifest and the AdapterVersion metric dimension carry it), so a new
    version ships without a client changing its requests."""

    name: Annotated[str, Field(pattern=_ADAPTER_NAME)]
    version: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")] | None = None
    source: Annotated[str, Field(pattern=_SOURCE)]
    rank: LoraRank

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
    retrieval_tokens: Annotated[int, Field(ge=0)] = engine_default(
        "context_budget.retrieval_tokens"
    )
    generation_reserve_tokens: Annotated[int, Field(gt=0)] = engine_default(
        "context_budget.generation_reserve_tokens"
    )


class EngineConfig(Strict):
    """vLLM engine settings. An omitted field takes the serving container's own default
    (container.serving.settings), so the config and the image agree on what it means."""

    gpu_memory_utilization: Annotated[float, Field(gt=0.1, le=0.98)] = engine_default(
        "gpu_memory_utilization"
    )
    max_model_len: Annotated[int, Field(ge=256)] = engine_default("max_model_len")
    max_num_seqs: Annotated[int, Field(ge=1, le=1024)] = engine_default("max_num_seqs")
    max_num_batched_tokens: Annotated[int, Field(ge=256)] = engine_default("max_num_batched_tokens")
    block_size: Literal[8, 16, 32, 64, 128] = engine_default("block_size")
    enable_prefix_caching: bool = engine_default("enable_prefix_caching")
    max_loras: Annotated[int, Field(ge=1, le=64)] = engine_default("max_loras")
    max_lora_rank: LoraRank = engine_default("max_lora_rank")
    #: --enforce-eager: no CUDA graphs (slower decode), so no graph memory taken from the KV cache.
    enforce_eager: bool = engine_default("enforce_eager")
    log_level: Literal["debug", "info", "warning", "error"] = engine_default("log_level")
    warmup_num_requests: Annotated[int, Field(ge=0, le=100)] = engine_default("warmup_num_requests")
    admission_max_inflight: Annotated[int, Field(ge=1)] = engine_default("admission_max_inflight")
    #: Request limits answered 413 naming the limit (MAX_REQUEST_BYTES, MAX_MESSAGES).
    max_request_bytes: Annotated[int, Field(ge=1024, le=64 * 1024 * 1024)] = engine_default(
        "max_request_bytes"
    )
    max_messages: Annotated[int, Field(ge=1, le=100_000)] = engine_default("max_messages")
    shutdown_timeout_seconds: Annotated[int, Field(ge=0, le=3600)] = engine_default(
        "shutdown_timeout_seconds"
    )
    metrics_interval_seconds: Annotated[int, Field(ge=1, le=300)] = engine_default(
        "metrics_interval_seconds"
    )
    #: Typical request shape, for capacity estimates and the simulator.
    typical_prompt_tokens: Annotated[int, Field(gt=0)] = 1200
    typical_output_tokens: Annotated[int, Field(gt=0)] = 180
    context_budget: ContextBudget = ContextBudget()

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
ECR_REPOSITORY_PATTERN = f"^{ECR_REPOSITORY.pattern}$"


class ImageConfig(Strict):
    """Build the image from container/ with CDK, or deploy an existing tag (CI builds once)."""

    mode: Literal["build", "tag"] = "build"
    #: ECR's rule (CreateRepository ``repositoryName``: 2-256 characters of
    #: ``[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(\/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*``;
    #: typed_config/aws_limits.py ECR_REPOSITORY), so a name ECR refuses (``team-``, ``a..b``,
    #: ``a/-b``) fails at synth, not at deploy.
    repository_name: (
        Annotated[str, Field(min_length=2, max_length=256, pattern=ECR_REPOSITORY_PATTERN)] | None
    ) = None
    tag: Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")] | None = None
    keep_last_images: Annotated[int, Field(ge=1, le=1000)] = 20
    #: False: ``make deploy`` refuses to ship an image CDK builds (image.mode build): CDK
    #: publishes it to the bootstrap's asset repository, which has no scan on push and no
    #: customer key, outside this repository's lifecycle rules. Deploys then name their tags
    #: (``IMAGE_TAG=<sha>`` from CI's make push-image, or ``IMAGE_TAG=live``). Synth, the plan
    #: and make demo still build the template in build mode.
    deploy_builds: bool = True

    @section_rule
    def _tag_when_needed(self) -> ImageConfig:
        if self.mode == "tag" and not self.tag:
            raise ValueError("tag: mode 'tag' needs tag (the image tag CI pushed)")
        if self.mode == "build" and self.tag:
            raise ValueError("tag: only used with mode 'tag'")
        return self
