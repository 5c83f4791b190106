"""What would fit, when the model does not: the smallest changes, each checked by the capacity
model (:func:`sizing.capacity.estimate`) before it is offered.

A variant whose GPU cannot hold the model fails synth naming the variant's field, the file and
its line, the memory terms against the GPU's budget, and then, in this order:

- ``instance_type``: the cheapest catalog types that hold it as configured (one engine on one GPU,
  what the product runs; a multi-GPU type is named with the GPUs the engine leaves idle);
- ``engine.max_model_len``: the longest context the configured type holds one sequence of, when
  only the KV cache is short;
- ``model.quantization``: awq (4-bit weights) when the model is unquantized and that fits;
- tensor parallelism: the cheapest multi-GPU types whose GPUs hold it split 2, 4 or 8 ways. The
  product does not set vLLM's ``--tensor-parallel-size`` today (one engine per GPU), so this one
  is offered as what the hardware would hold, saying so.
"""

from __future__ import annotations

from pydantic import ValidationError

from sizing.capacity import CapacityError, estimate
from typed_config import DeploymentConfig, EngineConfig
from typed_config.catalog import INSTANCE_CATALOG

#: Suggestions of each kind shown (cheapest first).
SHOWN = 3
TENSOR_PARALLEL_DEGREES = (2, 4, 8)


def _fits(cfg: DeploymentConfig, instance_type: str, tensor_parallel: int = 1) -> int | None:
    """KV-cache tokens ``cfg`` leaves on ``instance_type``, None if it does not fit."""
    try:
        return estimate(cfg, instance_type, tensor_parallel=tensor_parallel).kv_capacity_tokens
    except CapacityError:
        return None


def _type_label(name: str) -> str:
    inst = INSTANCE_CATALOG[name]
    gpus = f"{inst.gpu_count} x {inst.gpu} {inst.gpu_memory_gib:g} GB"
    return f"{name} ({gpus}, ${inst.price_per_hour:g}/h)"


def other_types(cfg: DeploymentConfig, instance_type: str) -> str | None:
    """The cheapest catalog types holding ``cfg`` at tensor parallel 1."""
    held = []
    for name, inst in sorted(INSTANCE_CATALOG.items(), key=lambda kv: kv[1].price_per_hour):
        tokens = _fits(cfg, name) if name != instance_type else None
        if tokens is not None:
            idle = f"; {inst.gpu_count - 1} of its GPUs idle" if inst.gpu_count > 1 else ""
            held.append(f"{_type_label(name)}: KV cache {tokens:,} tokens{idle}")
        if len(held) == SHOWN:
            break
    return "instance_type: " + ", ".join(held) if held else None


def shorter_context(cfg: DeploymentConfig, instance_type: str) -> str | None:
    """The longest engine.max_model_len (a multiple of the block size) ``instance_type`` holds
    one sequence of, when the rest fits and only the KV cache is short."""
    eng = cfg.engine
    lo, hi, best = 1, eng.max_model_len // eng.block_size - 1, None
    while lo <= hi:  # the KV cache does not depend on max_model_len: a sequence fits or not
        mid = (lo + hi) // 2
        length = mid * eng.block_size
        try:
            shorter = EngineConfig.model_validate({**eng.model_dump(), "max_model_len": length})
        except ValidationError:
            lo = mid + 1  # too short for the engine's own rules (the context budget)
            continue
        if _fits(cfg.model_copy(update={"engine": shorter}), instance_type) is not None:
            best, lo = length, mid + 1
        else:
            hi = mid - 1
    if best is None:
        return None
    return (
        f"engine.max_model_len: {best} (from {eng.max_model_len}) holds one sequence on "
        f"{instance_type}"
    )


def quantized(cfg: DeploymentConfig, instance_type: str) -> str | None:
    """awq weights, when the model is unquantized and they fit ``instance_type``."""
    if cfg.model.quantization != "none":
        return None
    awq = cfg.model_copy(update={"model": cfg.model.model_copy(update={"quantization": "awq"})})
    tokens = _fits(awq, instance_type)
    if tokens is None:
        return None
    return (
        f"model.quantization: awq (4-bit weights, make prepare-model quantizes them) fits "
        f"{instance_type} with a KV cache of {tokens:,} tokens"
    )


def tensor_parallel(cfg: DeploymentConfig) -> str | None:
    """The cheapest multi-GPU types whose GPUs hold ``cfg`` split 2, 4 or 8 ways."""
    held = []
    multi = [(n, i) for n, i in INSTANCE_CATALOG.items() if i.gpu_count > 1]
    for name, inst in sorted(multi, key=lambda kv: kv[1].price_per_hour):
        for tp in (d for d in TENSOR_PARALLEL_DEGREES if d <= inst.gpu_count):
            tokens = _fits(cfg, name, tp)
            if tokens is not None:
                held.append(
                    f"{_type_label(name)} at tensor parallel {tp} (KV cache {tokens:,} tokens)"
                )
                break
        if len(held) == SHOWN:
            break
    if not held:
        return None
    return (
        "tensor parallelism: " + ", ".join(held) + "; the product runs one engine per GPU "
        "today (it does not set vLLM's --tensor-parallel-size), so this needs that first"
    )


def what_would_fit(cfg: DeploymentConfig, instance_type: str) -> list[str]:
    """Each change that fits, as ``field: what`` (empty when none does)."""
    found = [
        other_types(cfg, instance_type),
        shorter_context(cfg, instance_type),
        quantized(cfg, instance_type),
        tensor_parallel(cfg),
    ]
    return [f for f in found if f]


def does_not_fit(
    cfg: DeploymentConfig, field: str, instance_type: str, why: str, *, label: str = ""
) -> str:
    """One error line: ``field``'s type (``label`` after its name: an instance pool's priority)
    cannot hold the model, why (the memory terms), and what would fit."""
    fixes = what_would_fit(cfg, instance_type)
    model = f"{cfg.model.source} ({cfg.model.quantization})"
    advice = (
        "What would fit, each checked by the same capacity model: " + " | ".join(fixes)
        if fixes
        else "No catalog type, shorter context, quantization or tensor-parallel degree holds it"
    )
    return f"{field}: {instance_type}{label} cannot hold {model}: {why}. {advice}"
