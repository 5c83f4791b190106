"""The hooks' own Prometheus series, served on vLLM's /metrics next to the engine's.

vLLM's /metrics exposes prometheus_client's default registry (one API server process), so the
metrics task reads the engine's and the hooks' figures from one scrape.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

ADMISSION_REJECTIONS = Counter(
    "serving_admission_rejections", "Requests answered 429 by admission control"
)
BUDGET_TRIMS = Counter(
    "serving_budget_trims", "Requests whose conversation or retrieval was trimmed to the budget"
)
ENGINE_UNAVAILABLE = Counter(
    "serving_engine_unavailable",
    "Requests answered 503 because the engine was dead (restarting) or the server was draining",
)
ADAPTER_REQUESTS = Counter(
    "serving_adapter_requests", "Requests served per adapter (base = the base model)", ["adapter"]
)
ADAPTER_LATENCY = Histogram(
    "serving_adapter_latency_seconds",
    "End-to-end latency per adapter, measured in the shaping hook",
    ["adapter"],
    buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120),
)
