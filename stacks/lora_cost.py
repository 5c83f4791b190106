"""What serving through a LoRA adapter costs in throughput (vLLM 0.26, measured on the device).

PLACEHOLDER until the device measurement lands: the factor below is the external figure issue 36
quotes ("roughly a quarter to a third of the throughput at 8-74 in flight"), pessimistic edge.
"""

from __future__ import annotations

#: Requests/minute with adapters as a share of the same engine without (lowest over 8/32/74).
LORA_THROUGHPUT_FACTOR = 0.25
LORA_SOURCE = "issue 36's external measurement (placeholder)"
