"""The capacity model held against what vLLM itself reported at start-up on real GPUs.

Each row of vllm_startup_logs.yaml is a published vLLM start-up log: where it is, the GPU, model
and settings, and the exact line with the KV cache vLLM reported.
:func:`sizing.capacity.memory_terms` predicts every row with the same constants (no per-row
fitting); the only per-row inputs are the row's own settings, the GPU memory CUDA reported (from
the log where it prints it, else the catalog) and whether that vLLM version subtracts its
CUDA-graph estimate from the KV budget (vLLM >= 0.21 with graphs on: "CUDA graph memory profiling
is enabled (default since v0.21.0)").

Rows closest to the product (Llama-3-8B, 4-bit, one 24 GB card) come first. No published log with
LoRA enabled on such a card was found; the LoRA term is computed, not estimated.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sizing.capacity import GIB, MemoryTerm, kv_bytes_per_token, kv_cache_tokens, memory_terms
from typed_config import ModelArchitecture
from typed_config.catalog import INSTANCE_CATALOG

TOLERANCE = 0.05
#: The rows: one published log each (source, GPU, settings, the quoted line).
DATA = Path(__file__).with_name("vllm_startup_logs.yaml")

LLAMA_3_8B = ModelArchitecture(  # Meta-Llama-3-8B and Llama-3.1-8B config.json
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    hidden_size=4096,
    intermediate_size=14336,
    vocab_size=128256,
    max_position_embeddings=8192,
)
QWEN3_8B = ModelArchitecture(  # Qwen/Qwen3-8B config.json
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    hidden_size=4096,
    intermediate_size=12288,
    vocab_size=151936,
    max_position_embeddings=40960,
)


@dataclass(frozen=True)
class StartupLog:
    id: str
    source: str
    gpu: str
    cuda_memory_gib: float
    cuda_memory_whence: str
    model: str
    arch: ModelArchitecture
    quantization: str
    vllm: str
    gpu_memory_utilization: float
    max_num_batched_tokens: int
    enforce_eager: bool
    graphs_in_kv_budget: bool
    #: The exact line(s) of the log with what vLLM reported.
    quote: str
    reported_kv_gib: float | None = None
    #: vLLM's defaults where the log does not say (256 sequences; V1's profile runs the sampler).
    max_num_seqs: int = 256
    sampler_in_profile: bool = True
    #: Terms the log reports on lines of their own (each term's own evidence), in GiB.
    reported_activation_gib: float | None = None
    reported_non_torch_gib: float | None = None
    reported_kv_tokens: int | None = None

    def reported_gib(self) -> float:
        if self.reported_kv_gib is not None:
            return self.reported_kv_gib
        assert self.reported_kv_tokens is not None
        return self.reported_kv_tokens * kv_bytes_per_token(self.arch) / GIB

    def terms(self) -> tuple[MemoryTerm, ...]:
        """What the capacity model takes from GPU memory before the KV cache, no LoRA."""
        return memory_terms(
            self.arch,
            quantization=self.quantization,
            lora_rank=0,
            max_loras=1,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            enforce_eager=self.enforce_eager,
            cuda_graphs_in_kv_budget=self.graphs_in_kv_budget,
            sampler_in_profile=self.sampler_in_profile,
        )

    def predicted_gib(self) -> float:
        used = sum(t.bytes for t in self.terms())
        return (self.cuda_memory_gib * GIB * self.gpu_memory_utilization - used) / GIB


ARCHITECTURES = {"llama-3-8b": LLAMA_3_8B, "qwen3-8b": QWEN3_8B}


def _row(raw: dict[str, Any]) -> StartupLog:
    memory = raw["cuda_memory_gib"]
    if isinstance(memory, str):  # an instance type: its catalog figure
        memory = INSTANCE_CATALOG[memory].cuda_memory_gib
    return StartupLog(**{**raw, "cuda_memory_gib": memory, "arch": ARCHITECTURES[raw["arch"]]})


LOGS = tuple(_row(raw) for raw in yaml.safe_load(DATA.read_text()))


@pytest.mark.parametrize("log", LOGS, ids=[log.id for log in LOGS])
def test_model_predicts_the_kv_cache_vllm_reported_within_5_percent(log: StartupLog) -> None:
    predicted, reported = log.predicted_gib(), log.reported_gib()
    error = predicted / reported - 1
    assert abs(error) <= TOLERANCE, (
        f"{log.id}: predicted {predicted:.2f} GiB, vLLM reported {reported:.2f} GiB "
        f"({error:+.1%}); source: {log.source}"
    )


def test_reported_tokens_are_the_reported_memory_at_128_kib_per_token() -> None:
    # The table's token rows and GiB rows are the same quantity: 99,200 x 128 KiB = 12.11 GiB.
    l4 = LOGS[0]
    assert l4.reported_gib() == pytest.approx(12.11, abs=0.005)
    assert not (l4.enforce_eager or l4.graphs_in_kv_budget)
    tokens = kv_cache_tokens(
        l4.cuda_memory_gib, l4.gpu_memory_utilization, l4.terms(), kv_bytes_per_token(l4.arch), 16
    )
    assert abs(tokens / 99_200 - 1) <= TOLERANCE


def test_catalog_memory_is_what_cuda_reports_not_the_marketing_size() -> None:
    # 24 GB cards report 21.96-22.18 GiB (logs cited in the catalog); the old model used 24.
    for name in ("ml.g5.xlarge", "ml.g6.xlarge"):
        inst = INSTANCE_CATALOG[name]
        assert 21.9 <= inst.cuda_memory_gib <= 22.2 < inst.gpu_memory_gib
        assert "21.98" in inst.cuda_memory_source
    for inst in INSTANCE_CATALOG.values():
        assert 0.85 * inst.gpu_memory_gib < inst.cuda_memory_gib < inst.gpu_memory_gib
        assert inst.cuda_memory_source


def test_the_old_model_missed_the_a10g_log_by_more_than_5_percent() -> None:
    # Marketing 24 GiB, a flat 1.5 GiB runtime and logits per batched token: the model this
    # replaces put 3.96 GiB of KV cache where vLLM reported 3.53 (A10G row above): +12 %.
    old_act = 8192 * ((4 * 4096 + 2 * 14336) * 2 + 128256 * 4 // 8) / GIB
    old = 24 * 0.9 - 14.96 - old_act - 1.5
    assert old / 3.53 - 1 > TOLERANCE
    assert abs(LOGS[1].predicted_gib() / 3.53 - 1) <= TOLERANCE


#: Rows whose per-term figures are not held (their KV cache still is, above): why, each.
TERM_OUTLIERS = {
    "h100-llama3-8b-bf16": "V0 on one H100 reporting 1.79 GiB non-torch and a 1.26 GiB peak, both "
    "beyond every other log of either engine; the two together still leave its KV within 5 %",
}


def _term(log: StartupLog, name: str) -> float:
    return next(t.bytes for t in log.terms() if t.name == name) / GIB


@pytest.mark.parametrize(
    "log",
    [log for log in LOGS if log.reported_activation_gib and log.id not in TERM_OUTLIERS],
    ids=lambda log: log.id,
)
def test_activation_term_within_10_percent_of_each_peak_vllm_reported(log: StartupLog) -> None:
    """Each term against its own evidence: the activation peak where the log prints it. The
    forward pass alone (112 KiB/token) fell 29 % short of the V1 logs at 8,192 tokens; V1's
    profile run samples max_num_seqs rows of logits after the forward (the sampler term)."""
    assert log.reported_activation_gib is not None
    modelled = _term(log, "activation peak")
    error = modelled / log.reported_activation_gib - 1
    assert abs(error) <= 0.10, (
        f"{log.id}: activation {modelled:.2f} GiB vs {log.reported_activation_gib} ({error:+.1%})"
    )


def test_non_torch_term_covers_every_v1_log_and_not_much_more() -> None:
    v1 = [log for log in LOGS if log.sampler_in_profile and log.reported_non_torch_gib]
    assert len(v1) >= 2
    modelled = _term(v1[0], "non-torch")
    highest = max(log.reported_non_torch_gib or 0.0 for log in v1)
    assert highest - 0.005 <= modelled <= highest + 0.05, (
        modelled,
        [(row.id, row.reported_non_torch_gib) for row in v1],
    )


def test_the_sampler_term_scales_with_sequences_and_vocabulary() -> None:
    from sizing.capacity import sampler_bytes

    assert sampler_bytes(QWEN3_8B, 256) / sampler_bytes(LLAMA_3_8B, 256) == pytest.approx(
        151936 / 128256, rel=1e-6
    )
    assert sampler_bytes(LLAMA_3_8B, 128) * 2 == pytest.approx(
        sampler_bytes(LLAMA_3_8B, 256), abs=2
    )
