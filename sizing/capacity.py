"""GPU memory model: do the weights fit, how many KV tokens remain, how many sequences run at once.

Run at synth on the config alone (no GPU, no AWS). It follows what vLLM itself does at start-up
(vLLM 0.32.0, ``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``: requested memory =
``total_memory x gpu_memory_utilization``; available KV memory = requested - non-KV memory
(weights incl. LoRA slots, activation peak, non-torch) - the CUDA-graph estimate when
``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``, default on): the KV cache gets

    CUDA-reported GPU memory x gpu_memory_utilization
      - weights - LoRA slots - activation peak - non-torch memory - CUDA-graph memory

and every one of those terms is named in the plan. Weights, LoRA slots and the KV bytes per token
are computed from the architecture; the activation peak, non-torch memory and CUDA-graph memory
are estimates and carry the margins below. The model is held against published vLLM start-up
logs in ``tests/infra/vllm_startup_logs.py`` (each predicted within 5 %), with these constants
and no per-log fitting.

For Llama-3-8B a token of KV cache is 2 (K,V) x 32 layers x 8 KV heads x 128 dims x 2 bytes =
128 KiB, so the often-quoted "128 sequences x 4096 tokens in ~14 GB" is really 64 GiB.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from typed_config import DeploymentConfig, InstancePool, ModelArchitecture, VariantName
from typed_config.catalog import INSTANCE_CATALOG

GIB = 1024**3
FP16_BYTES = 2
#: AWQ W4A16, group size 128, asymmetric: 4-bit weights + one fp16 scale and one 4-bit zero point
#: per group of 128 (llmcompressor's compressed-tensors pack-quantized layout).
AWQ_BITS_PER_WEIGHT = 4 + 16 / 128 + 4 / 128
#: Schemes stored as 4-bit weights in groups of 128 with a scale and zero point per group.
FOUR_BIT_GROUP_128 = frozenset({"awq", "gptq"})

# --- estimates and their margins (the value the plan subtracts is estimate + margin) ---------
#: Quantized weights load a little above the packed size (kernel repacking, per-layer buffers):
#: 4-bit 8B checkpoints load at 5.34-5.39 GiB ("Model loading took 5.3473 GiB") vs 5.33 packed.
QUANTIZED_WEIGHTS_MARGIN = 0.01
#: The activation peak of the profile run is computed per batched token (see
#: :func:`activation_bytes`): 112 KiB/token for Llama-3-8B, where vLLM measured 108.5 KiB/token
#: (2.07 GiB at 20,000 and 2.99 GiB at 29,000 batched tokens, vllm-project/vllm#10517), and
#: 0.88 GiB at 8,192 tokens eager on an H100 (vLLM 0.26, FACTS.md): the forward pass alone.
ACTIVATION_MARGIN = 0.0
#: The sampler's share of the profile run's peak. vLLM 0.32's ``profile_run``
#: (vllm/v1/worker/gpu_model_runner.py) runs ``_dummy_run(max_num_tokens)`` and then
#: ``_dummy_sampler_run``: logits for ``max_num_seqs`` rows over the whole vocabulary, sampled
#: with temperature, top-k and top-p (a full sort: fp32 values and int64 indices) and then a
#: second time through ``forward_native``. The forward pass alone leaves the V1 logs short:
#: at 8,192 batched tokens the forward is 0.88 GiB where vLLM reported 1.23 GiB (A10G, 256 seqs)
#: and 1.10 GiB (H100, vLLM 0.26 compiled, 128 seqs). Counted as this many fp32 copies of the
#: ``max_num_seqs x vocab`` logits, fitted to those logs (2.9 and 3.7 copies) and held under the
#: Qwen3-8B log at 2,048 tokens, where it is most of the peak (see tests/infra/
#: test_vllm_startup_logs.py: each term against its own evidence).
SAMPLER_FP32_COPIES = 2.75
#: Memory outside torch's allocator (CUDA context, cuBLAS workspaces, NCCL). vLLM V1 logs report
#: it on its own line: 0.06 GiB (A10G, Anyscale) and 0.22 GiB (H100, vLLM 0.26, FACTS.md);
#: V0 logs 0.35 GiB (RTX 3090, vllm#10517) and 1.79 GiB (one H100, vllm PR #10511), beyond it.
NON_TORCH_GIB, NON_TORCH_MARGIN_GIB = 0.15, 0.07
#: CUDA-graph memory vLLM estimates and subtracts from the KV budget (VLLM_MEMORY_PROFILER_
#: ESTIMATE_CUDAGRAPHS, on by default since vLLM 0.21 and in 0.32's envs.py; the image sets it
#: explicitly): 8B-class logs show 0.52 GiB estimated (Qwen3-8B, LMCache#3430) and 0.55-0.77 GiB
#: captured. Zero under --enforce-eager (cudagraph_mode NONE: no estimate is made).
CUDA_GRAPH_GIB, CUDA_GRAPH_MARGIN_GIB = 0.60, 0.20
#: The image sets VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS to this (container/serving/settings.py).
CUDA_GRAPH_MEMORY_IN_KV_BUDGET = True


class CapacityError(ValueError):
    """The configured model cannot run on the configured instance."""


@dataclass(frozen=True)
class MemoryTerm:
    """One thing vLLM allocates before the KV cache gets the rest."""

    name: str
    #: Bytes the plan subtracts, margin included.
    bytes: int
    #: Part of ``bytes`` that is margin (0 for computed terms).
    margin_bytes: int
    estimate: bool
    basis: str

    @property
    def gib(self) -> float:
        return self.bytes / GIB


@dataclass(frozen=True)
class Capacity:
    instance_type: str
    gpu_memory_gib: float
    cuda_memory_gib: float
    usable_gib: float
    terms: tuple[MemoryTerm, ...]
    kv_budget_gib: float
    kv_bytes_per_token: int
    kv_capacity_tokens: int
    worst_case_kv_gib: float
    concurrency_at_full_context: int
    concurrency_at_typical_length: int
    max_num_seqs: int
    preempts_at_full_context: bool
    #: Every engine setting this estimate assumed: the image passes each one explicitly.
    assumed_engine: dict[str, Any]

    def as_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["terms"] = [
            {
                "name": t.name,
                "gib": round(t.gib, 3),
                "margin_gib": round(t.margin_bytes / GIB, 3),
                "estimate": t.estimate,
                "basis": t.basis,
            }
            for t in self.terms
        ]
        return data


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
    bits = AWQ_BITS_PER_WEIGHT if quantization in FOUR_BIT_GROUP_128 else 16
    return int(linear_params(arch) * bits / 8) + (embed + head) * FP16_BYTES


def lora_bytes(arch: ModelArchitecture, rank: int, slots: int) -> int:
    """vLLM preallocates A and B for every slot on q,k,v,o,gate,up,down of every layer."""
    h, d, i = arch.hidden_size, arch.head_dim, arch.intermediate_size
    q = o = h + arch.num_attention_heads * d
    k = v = h + arch.num_key_value_heads * d
    mlp = 3 * (h + i)
    return arch.num_hidden_layers * (q + k + v + o + mlp) * rank * FP16_BYTES * slots


def kv_heads_per_gpu(arch: ModelArchitecture, tensor_parallel: int = 1) -> int:
    """KV heads one GPU holds: split across ``tensor_parallel`` GPUs, replicated when there are
    fewer heads than GPUs (vLLM's QKVParallelLinear)."""
    return max(1, -(-arch.num_key_value_heads // tensor_parallel))


def kv_bytes_per_token(arch: ModelArchitecture, tensor_parallel: int = 1) -> int:
    """KV-cache bytes of one token on one GPU (all of them at tensor parallel 1)."""
    heads = kv_heads_per_gpu(arch, tensor_parallel)
    return 2 * arch.num_hidden_layers * heads * arch.head_dim * FP16_BYTES


def activation_bytes(arch: ModelArchitecture, batched_tokens: int, tensor_parallel: int = 1) -> int:
    """Peak of vLLM's profile run: one forward pass over ``max_num_batched_tokens`` tokens.

    Live at the peak, per token, in fp16: the MLP's fused gate/up output (2 x intermediate) and its
    SiLU-and-mul output (intermediate), the fused QKV output ((heads + 2 x KV heads) x head_dim)
    and two hidden-size buffers (residual and the layer's output). Logits are computed only for
    the last token of each sequence, so they do not scale with batched tokens. Under tensor
    parallelism each GPU holds its share of the MLP and QKV outputs; the hidden-size buffers are
    whole on every GPU.
    """
    i, d, tp = arch.intermediate_size, arch.head_dim, tensor_parallel
    qkv = (arch.num_attention_heads // tp + 2 * kv_heads_per_gpu(arch, tp)) * d
    per_token = (3 * i // tp + qkv + 2 * arch.hidden_size) * FP16_BYTES
    return batched_tokens * per_token


def sampler_bytes(arch: ModelArchitecture, max_num_seqs: int) -> int:
    """The profile run's sampler on ``max_num_seqs`` rows of logits (:data:`SAMPLER_FP32_COPIES`
    fp32 copies of ``max_num_seqs x vocab``): vLLM 0.32 ``_dummy_sampler_run``."""
    return int(max_num_seqs * arch.vocab_size * 4 * SAMPLER_FP32_COPIES)


def _gib(value: float) -> int:
    return int(value * GIB)


def memory_terms(
    arch: ModelArchitecture,
    *,
    quantization: str,
    lora_rank: int,
    max_loras: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    enforce_eager: bool,
    cuda_graphs_in_kv_budget: bool = CUDA_GRAPH_MEMORY_IN_KV_BUDGET,
    sampler_in_profile: bool = True,
    tensor_parallel: int = 1,
) -> tuple[MemoryTerm, ...]:
    """What vLLM takes from ``CUDA memory x gpu_memory_utilization`` before the KV cache.

    ``lora_rank`` 0 means LoRA is off. ``cuda_graphs_in_kv_budget`` is False for vLLM versions
    (before 0.21) or settings that do not subtract the CUDA-graph estimate.
    ``sampler_in_profile`` is False for the V0 engine, whose profile peak was the forward pass
    alone (vllm#10517: 108.5 KiB/token at 20,000 and 29,000 tokens, nothing on top).
    ``tensor_parallel`` > 1: one GPU's share (weights, embeddings and LoRA slots split evenly,
    as vLLM's parallel layers shard them; the sampler and the fixed terms whole on each GPU).
    The product runs tensor parallel 1; the larger degrees size what a multi-GPU type would
    hold (sizing.fit_advice).
    """
    tp = tensor_parallel
    weights = weight_bytes(arch, quantization) // tp
    w_margin = int(weights * QUANTIZED_WEIGHTS_MARGIN) if quantization != "none" else 0
    forward = activation_bytes(arch, max_num_batched_tokens, tp)
    sampler = sampler_bytes(arch, max_num_seqs) if sampler_in_profile else 0
    act = forward + sampler
    act_margin = int(act * ACTIVATION_MARGIN)
    graphs = not enforce_eager and cuda_graphs_in_kv_budget
    return (
        MemoryTerm(
            "weights",
            weights + w_margin,
            w_margin,
            estimate=w_margin > 0,
            basis=f"{quantization} weights from the architecture"
            + (f", +{QUANTIZED_WEIGHTS_MARGIN:.0%} for quantized kernels" if w_margin else "")
            + (f", 1/{tp} per GPU (tensor parallel)" if tp > 1 else ""),
        ),
        MemoryTerm(
            "LoRA slots",
            lora_bytes(arch, lora_rank, max_loras) // tp if lora_rank else 0,
            0,
            estimate=False,
            basis=f"{max_loras} slots x rank {lora_rank} on 7 projections"
            if lora_rank
            else "LoRA off",
        ),
        MemoryTerm(
            "activation peak",
            act + act_margin,
            act_margin,
            estimate=True,
            basis=f"{max_num_batched_tokens} batched tokens x "
            f"{activation_bytes(arch, 1, tp) // 1024} KiB/token"
            + (
                f" + sampler {max_num_seqs} seqs x {arch.vocab_size} vocab x "
                f"{SAMPLER_FP32_COPIES} fp32 copies ({sampler / GIB:.2f} GiB)"
                if sampler
                else ""
            ),
        ),
        MemoryTerm(
            "non-torch",
            _gib(NON_TORCH_GIB + NON_TORCH_MARGIN_GIB),
            _gib(NON_TORCH_MARGIN_GIB),
            estimate=True,
            basis="CUDA context, cuBLAS, NCCL: vLLM V1 logs 0.06-0.22 GiB",
        ),
        MemoryTerm(
            "CUDA graphs",
            _gib(CUDA_GRAPH_GIB + CUDA_GRAPH_MARGIN_GIB) if graphs else 0,
            _gib(CUDA_GRAPH_MARGIN_GIB) if graphs else 0,
            estimate=graphs,
            basis="vLLM's graph estimate, 8B-class logs 0.52-0.77 GiB"
            if graphs
            else ("--enforce-eager" if enforce_eager else "not subtracted by this vLLM"),
        ),
    )


def kv_cache_tokens(
    cuda_memory_gib: float,
    gpu_memory_utilization: float,
    terms: tuple[MemoryTerm, ...],
    kv_per_token: int,
    block_size: int,
) -> int:
    """Tokens of KV cache vLLM allocates: whole blocks of what the terms leave (0 if none)."""
    budget = cuda_memory_gib * GIB * gpu_memory_utilization - sum(t.bytes for t in terms)
    return max(0, int(budget // kv_per_token) // block_size * block_size)


def sequences_that_fit(kv_tokens: int, tokens_per_sequence: float, max_num_seqs: int) -> int:
    """Sequences of this length running at once: the KV cache's tokens over the length, capped
    at ``max_num_seqs`` (vLLM schedules no more; beyond the cache it preempts)."""
    return min(int(kv_tokens // tokens_per_sequence), max_num_seqs)


def estimate(cfg: DeploymentConfig, instance_type: str, *, tensor_parallel: int = 1) -> Capacity:
    """Capacity of one engine on ``instance_type``: one GPU (tensor parallel 1, what the product
    runs), or ``tensor_parallel`` of its GPUs (per GPU; what sizing.fit_advice offers)."""
    inst = INSTANCE_CATALOG[instance_type]
    arch, eng, tp = cfg.architecture, cfg.engine, tensor_parallel
    if tp > inst.gpu_count or arch.num_attention_heads % tp:
        raise CapacityError(
            f"{instance_type}: tensor parallel {tp} needs {tp} GPUs (it has {inst.gpu_count}) "
            f"dividing the {arch.num_attention_heads} attention heads"
        )
    usable = inst.cuda_memory_gib * GIB * eng.gpu_memory_utilization
    lora_on = bool(cfg.adapters)
    terms = memory_terms(
        arch,
        quantization=cfg.model.quantization,
        lora_rank=eng.max_lora_rank if lora_on else 0,
        max_loras=eng.max_loras,
        max_num_batched_tokens=eng.max_num_batched_tokens,
        max_num_seqs=eng.max_num_seqs,
        enforce_eager=eng.enforce_eager,
        tensor_parallel=tp,
    )
    fixed = sum(t.bytes for t in terms)
    if fixed >= usable:
        listed = " + ".join(f"{t.name} {t.gib:.2f}" for t in terms if t.bytes)
        raise CapacityError(
            f"{listed} GiB do not fit in {instance_type}'s {inst.cuda_memory_gib} GiB (CUDA) x "
            f"engine.gpu_memory_utilization {eng.gpu_memory_utilization} = "
            f"{usable / GIB:.1f} GiB"
        )
    kv_per_tok = kv_bytes_per_token(arch, tp)
    tokens = kv_cache_tokens(
        inst.cuda_memory_gib, eng.gpu_memory_utilization, terms, kv_per_tok, eng.block_size
    )
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
        cuda_memory_gib=inst.cuda_memory_gib,
        usable_gib=round(usable / GIB, 2),
        terms=terms,
        kv_budget_gib=round((usable - fixed) / GIB, 2),
        kv_bytes_per_token=kv_per_tok,
        kv_capacity_tokens=tokens,
        worst_case_kv_gib=round(eng.max_num_seqs * eng.max_model_len * kv_per_tok / GIB, 1),
        concurrency_at_full_context=sequences_that_fit(tokens, eng.max_model_len, eng.max_num_seqs),
        concurrency_at_typical_length=sequences_that_fit(tokens, typical, eng.max_num_seqs),
        max_num_seqs=eng.max_num_seqs,
        preempts_at_full_context=full < eng.max_num_seqs,
        assumed_engine=assumed_engine(cfg),
    )


def assumed_engine(cfg: DeploymentConfig) -> dict[str, Any]:
    """The vLLM settings :func:`estimate` relies on, as the values vLLM must be started with."""
    eng = cfg.engine
    lora_on = bool(cfg.adapters)
    return {
        "gpu_memory_utilization": eng.gpu_memory_utilization,
        "max_model_len": eng.max_model_len,
        "max_num_seqs": eng.max_num_seqs,
        "max_num_batched_tokens": eng.max_num_batched_tokens,
        "block_size": eng.block_size,
        "enforce_eager": eng.enforce_eager,
        "enable_lora": lora_on,
        "max_loras": eng.max_loras if lora_on else None,
        "max_lora_rank": eng.max_lora_rank if lora_on else None,
        "cuda_graph_memory_in_kv_budget": CUDA_GRAPH_MEMORY_IN_KV_BUDGET,
    }


@dataclass(frozen=True)
class PoolCapacity:
    """One instance pool of a variant with the config its engine runs (the variant's engine with
    the pool's ``engine`` settings) and that engine's capacity on the pool's GPU."""

    pool: InstancePool
    cfg: DeploymentConfig
    capacity: Capacity

    @property
    def runs(self) -> int:
        """Sequences one instance runs at once at the typical length: max_num_seqs capped by
        the KV cache."""
        return max(
            1, min(self.cfg.engine.max_num_seqs, self.capacity.concurrency_at_typical_length)
        )


def pool_capacities(cfg: DeploymentConfig, variant: VariantName) -> tuple[PoolCapacity, ...]:
    """Every pool of ``variant`` by priority (one, ``instance_type``, without instance pools);
    raises CapacityError for a pool whose GPU cannot hold the model."""
    out = []
    for pool in cfg.variants[variant].pools:
        pool_cfg = cfg.for_pool(pool)
        out.append(PoolCapacity(pool, pool_cfg, estimate(pool_cfg, pool.instance_type)))
    return tuple(out)
