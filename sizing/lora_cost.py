"""What serving through a LoRA adapter costs (vLLM 0.26.0, measured on the device).

docs/measurements/lora_fp8kv_h100_vllm0.26.md: one H100 80GB, the Llama-3-8B architecture in
W4A16 (compressed-tensors, random weights), CUDA graphs, closed loop, 1,200 prompt + 180 output
tokens; the same engine with ``enable_lora``, ``max_loras 4``, ``max_lora_rank 16`` and three
rank-16 adapters on the seven projections, round robin, against the same engine without LoRA in
the same device call (2026-11-27):

| in flight | req/min, no LoRA | req/min, LoRA | ratio | TTFT p50 (s) | decode tok/s per seq |
|---|---|---|---|---|---|
| 8  | 438   | 267 | 0.61 | 0.041 -> 0.088 | 170 -> 104 |
| 32 | 930   | 560 | 0.60 | 0.047 -> 0.178 | 90 -> 56 |
| 74 | 1,134 | 646 | 0.57 | 0.082 -> 0.183 | 47 -> 28 |

(A second call at 74 with an FP8 KV cache served 846 req/min with LoRA: the spread between calls
is wide, so the lowest ratio is planned on.) The brief's "< 5 ms" per adapter does not hold; the
issue's external "a quarter to a third" does not either: on this engine LoRA keeps 57-61 % of the
throughput, and the time to first token grows 2.1-3.8 x.

How the speed model takes it (sizing.serving_speed.with_lora): two factors on the step-cost
constants, fitted on a 0.03 grid to the three points above. Decode (bandwidth shares, the
per-step and per-sequence overheads) at :data:`LORA_DECODE_FACTOR`; prefill (the compute shares
and the per-request lag) at :data:`LORA_PREFILL_FACTOR`. The model then gives throughput ratios
0.62 / 0.58 / 0.57 (measured 0.61 / 0.60 / 0.57) and TTFT p50 0.088 / 0.097 / 0.159 s (measured
0.088 / 0.178 / 0.183): it matches the lowest throughput ratio, where the fleet is sized, and is
optimistic on TTFT at 32-74 in flight (tests/infra/test_lora_cost.py holds these). Carried to other
GPUs as the same shares, like the rest of the model: the punica kernels' cost relative to the base
GEMMs on an A10G is not measured (no A10G here), which docs/speed-model.md says.
"""

from __future__ import annotations

#: (in flight, req/min without LoRA, with LoRA, TTFT p50 s without, with): the device's figures.
MEASURED: tuple[tuple[int, float, float, float, float], ...] = (
    (8, 438.0, 267.0, 0.0414, 0.0879),
    (32, 930.0, 560.0, 0.0468, 0.1784),
    (74, 1134.0, 646.0, 0.0822, 0.1834),
)
#: Share of the decode terms' speed with LoRA (fitted; see the module docstring).
LORA_DECODE_FACTOR = 0.66
#: Share of the prefill terms' speed with LoRA (fitted).
LORA_PREFILL_FACTOR = 0.5
LORA_SOURCE = (
    f"LoRA: decode x{LORA_DECODE_FACTOR:g}, prefill x{LORA_PREFILL_FACTOR:g}, fitted to an H100 "
    "run of vLLM 0.26 with 3 rank-16 adapters (57-61 % of the throughput; sizing/lora_cost.py)"
)
