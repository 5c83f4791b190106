"""What serving through a LoRA adapter costs: added time per engine step, from every run kept as
evidence (issue 42 item 2). ``python -m sizing.lora_fit`` recomputes every figure below and prints
each measured point against the model; tests/infra/test_lora_cost.py holds these constants to it.

**The evidence** (sizing.lora_fit.RUNS), vLLM 0.26.0 on one H100, the Llama-3-8B architecture in
W4A16, three rank-16 adapters on the seven projections, round robin, against the same engine
without LoRA:

- ``http``: ``vllm serve`` over HTTP, both engines resident on one GPU and measured back to back,
  prompts of 600 / 1,500 / 2,500 tokens at 32 / 64 / 96 in flight, 8 points
  (docs/measurements/lora_http_start_h100_vllm0.26.md). **The production path** (SageMaker
  calls vLLM's own server; prod runs the default KV cache), so the coefficients come from it.
- ``in-process``: vLLM's ``AsyncLLM`` without the API server, 1,200 prompt tokens, 8 / 32 / 74 in
  flight, two LoRA runs (docs/measurements/lora_fp8kv_h100_vllm0.26.md). Kept and shown; not the
  production path: no API-server process shares the host with the engine.
- ``fp8-kv``: the same with ``kv_cache_dtype fp8`` on both engines, 74 / 128 in flight. Kept and
  shown; not the production path (prod does not run an fp8 cache), and its 22-32 % speed-up
  over LoRA with the default cache is not explained.

**The form.** Of the candidate forms (a cost per step, per batched token, per running sequence,
their sums), the one with the lowest leave-one-out error over all 17 points is a cost per step
plus one per running sequence (:data:`LORA_FORM`); fitted on the production path it is
:data:`LORA_STEP_S` + :data:`LORA_SEQ_S` x running sequences. Its error (:data:`LORA_ERROR`) is
the RMS of each production point's error predicted by a fit without it; the in-process runs
come out 1-36 % slower than it predicts (least at 74 in flight) and the fp8 runs 21-24 % slower:
the production path costs more than either. Every point is planned on the one form; no run is
preferred because it is the lowest.

**What it touches.** The added time is its own term of a step (sizing.speed_model
``StepCost.seconds``); it does not slow the KV-cache reads, the weight reads or the host's
per-step, per-sequence and per-request costs, which LoRA does not touch.

**Carried to other GPUs** (the assumption, stated): :data:`LORA_GPU_SHARE` of the added time is
kernel time, the share during which the GPU ran a kernel (nvidia-smi utilisation x step, LoRA
minus base, over the added step time, pooled over the HTTP points; 0.09-0.80 by point: the LoRA
engine leaves the GPU idle most at short prompts). That kernel time (the Punica shrink/expand
kernels: rank 16 against a hidden size of 4,096 is ~16 FLOPs per byte read, far below any
catalog GPU's ridge point, so memory-bound) scales with the GPU's effective memory bandwidth, as
the model's other bandwidth terms do, and takes the GPU's error band with them. The rest is host
work or synchronisation: it stays as measured and takes the host's band. vLLM logged "Using
default LoRA kernel configs" in every run: tuned configs were not measured.
"""

from __future__ import annotations

#: The form sizing.lora_fit chooses over every run (its ``FORMS`` key).
LORA_FORM = "step+sequence"
#: Added seconds per engine step, whatever the batch (H100, the production path).
LORA_STEP_S = 0.008474
#: Added seconds per running sequence per step (H100, the production path).
LORA_SEQ_S = 0.00009415
#: Share of the added time that is GPU kernel time (carried by bandwidth); the rest is host time.
LORA_GPU_SHARE = 0.43
#: Relative error of the LoRA engine's throughput under this form (leave-one-out RMS over the
#: production path's points): an input of the plan's band (sizing.serving_speed.planned_band).
LORA_ERROR = 0.150
LORA_SOURCE = (
    f"LoRA: +{LORA_STEP_S * 1e3:.1f} ms per step + {LORA_SEQ_S * 1e6:.0f} us per running sequence "
    f"({LORA_GPU_SHARE:.0%} kernel time carried by bandwidth, the rest host), fitted to vLLM 0.26 "
    f"over HTTP on an H100 with 3 rank-16 adapters, error +-{LORA_ERROR:.0%} (sizing/lora_cost.py)"
)
