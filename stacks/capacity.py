"""GPU memory model: do the weights fit, how many KV tokens remain, how many sequences run at once.

Run at synth on the config alone (no GPU, no AWS). The figures are estimates of what vLLM will
allocate, with the assumptions named here, so a platform engineer sees the real arithmetic
instead of the seeds' "128 sequences x 4096 tokens in ~14 GB" (for Llama-3-8B a token of KV cache
is 2 (K,V) x 32 layers x 8 KV heads x 128 dims x 2 bytes = 128 KiB, so 128 x 4096 tokens is 64 GiB).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from stacks.catalog import INSTANCE_CATALOG
from stacks.config import DeploymentConfig, ModelArchitecture

GIB = 1024**3
FP16_BYTES = 2
#: AWQ W4A16, group size 128, asymmetric: 4-bit weights + one fp16 scale and one 4-bit zero point
#: per group of 128 (llmcompressor's compressed-tensors pack-quantized layout).
AWQ_BITS_PER_WEIGHT = 4 + 16 / 128 + 4 / 128
#: CUDA context, cuBLAS workspace and CUDA graphs outside vLLM's KV pool (vLLM profiles this at
#: start; 1.5 GiB is what an 8B model on one A10G leaves in practice, seeds 002 section 3).
RUNTIME_OVERHEAD_GIB = 1.5


class CapacityError(ValueError):
    """The configured model cannot run on the configured instance."""


@dataclass(frozen=True)
class Capacity:
    instance_type: str
    gpu_memory_gib: float
    usable_gib: float
    weights_gib: float
    lora_gib: float
    activation_gib: float
    kv_budget_gib: float
    kv_bytes_per_token: int
    kv_capacity_tokens: int
    worst_case_kv_gib: float
    concurrency_at_full_context: int
    concurrency_at_typical_length: int
    max_num_seqs: int
    preempts_at_full_context: bool

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def linear_params(arch: ModelArchitecture) -> int:
    """Parameters in the decoder's Linear layers (what AWQ quantizes)."""
    h, d = arch.hidden_size, arch.head_dim
    attn = h * arch.num_attention_heads * d * 2 + h * arch.num_key_value_heads * d * 2
    mlp = 3 * h * arch.intermediate_size
    return arch.num_hidden_layers * (attn + mlp)


def weight_bytes(arch: ModelArchitecture, quantization: str) -> int:
    """Bytes of weights. Embeddings and lm_head stay fp16 (llmcompressor skips lm_head)."""
    embed = arch.vocab_size * arch.hidden_size
    head = 0 if arch.tie_word_embeddings else embed
    bits = AWQ_BITS_PER_WEIGHT if quantization == "awq" else 16
    return int(linear_params(arch) * bits / 8) + (embed + head) * FP16_BYTES


def lora_bytes(arch: ModelArchitecture, rank: int, slots: int) -> int:
    """vLLM preallocates A and B for every slot on q,k,v,o,gate,up,down of every layer."""
    h, d, i = arch.hidden_size, arch.head_dim, arch.intermediate_size
    q = o = h + arch.num_attention_heads * d
    k = v = h + arch.num_key_value_heads * d
    mlp = 3 * (h + i)
    return arch.num_hidden_layers * (q + k + v + o + mlp) * rank * FP16_BYTES * slots


def kv_bytes_per_token(arch: ModelArchitecture) -> int:
    return 2 * arch.num_hidden_layers * arch.num_key_value_heads * arch.head_dim * FP16_BYTES


def activation_bytes(arch: ModelArchitecture, batched_tokens: int) -> int:
    """Peak prefill activations: hidden + MLP intermediates + logits for one batch, fp16."""
    per_token = (4 * arch.hidden_size + 2 * arch.intermediate_size) * FP16_BYTES
    return batched_tokens * per_token + batched_tokens * arch.vocab_size * 4 // 8


def estimate(cfg: DeploymentConfig, instance_type: str) -> Capacity:
    """Capacity of one engine (tensor parallel 1: one GPU) on ``instance_type``."""
    inst = INSTANCE_CATALOG[instance_type]
    arch, eng = cfg.architecture, cfg.engine
    usable = inst.gpu_memory_gib * GIB * eng.gpu_memory_utilization
    weights = weight_bytes(arch, cfg.model.quantization)
    rank = max((a.rank for a in cfg.adapters), default=0)
    lora = lora_bytes(arch, eng.max_lora_rank, eng.max_loras) if rank else 0
    act = activation_bytes(arch, eng.max_num_batched_tokens)
    fixed = weights + lora + act + RUNTIME_OVERHEAD_GIB * GIB
    kv_per_tok = kv_bytes_per_token(arch)
    if fixed >= usable:
        raise CapacityError(
            f"model weights ({weights / GIB:.1f} GiB) + LoRA ({lora / GIB:.2f} GiB) + activations "
            f"({act / GIB:.2f} GiB) + runtime ({RUNTIME_OVERHEAD_GIB} GiB) do not fit in "
            f"{instance_type}'s {inst.gpu_memory_gib} GiB x gpu_memory_utilization "
            f"{eng.gpu_memory_utilization} = {usable / GIB:.1f} GiB"
        )
    kv_budget = usable - fixed
    tokens = int(kv_budget // kv_per_tok) // eng.block_size * eng.block_size
    if tokens < eng.max_model_len:
        raise CapacityError(
            f"{instance_type}: KV cache holds {tokens} tokens, fewer than one sequence at "
            f"engine.max_model_len ({eng.max_model_len}); vLLM refuses to start"
        )
    typical = eng.typical_prompt_tokens + eng.typical_output_tokens
    full = tokens // eng.max_model_len
    return Capacity(
        instance_type=instance_type,
        gpu_memory_gib=inst.gpu_memory_gib,
        usable_gib=round(usable / GIB, 2),
        weights_gib=round(weights / GIB, 2),
        lora_gib=round(lora / GIB, 3),
        activation_gib=round(act / GIB, 2),
        kv_budget_gib=round(kv_budget / GIB, 2),
        kv_bytes_per_token=kv_per_tok,
        kv_capacity_tokens=tokens,
        worst_case_kv_gib=round(eng.max_num_seqs * eng.max_model_len * kv_per_tok / GIB, 1),
        concurrency_at_full_context=min(full, eng.max_num_seqs),
        concurrency_at_typical_length=min(tokens // typical, eng.max_num_seqs),
        max_num_seqs=eng.max_num_seqs,
        preempts_at_full_context=full < eng.max_num_seqs,
    )


def concurrency_target(cfg: DeploymentConfig, variant: str) -> float:
    """Target of concurrency target tracking: a fraction of what one instance really runs at once.

    That is max_num_seqs, capped by the KV cache at the typical request length: on Llama-3-8B
    on an A10G, 81 sequences, not 128. A target above the real capacity is never reached by
    running requests, so the policy would scale in an overloaded fleet (simulator finding).
    """
    tt = cfg.scaling.variants[variant].target_tracking  # type: ignore[index]
    assert tt is not None
    cap = estimate(cfg, getattr(cfg.variants, variant).instance_type)
    effective = min(cfg.engine.max_num_seqs, cap.concurrency_at_typical_length)
    return round(tt.target_fraction_of_concurrency * effective, 2)
