"""The hooks' own Prometheus series, served on vLLM's /metrics next to the engine's.

vLLM's /metrics exposes prometheus_client's default registry (one API server process), so the
metrics task reads the engine's and the hooks' figures from one scrape.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from . import metrics_contract as mc


def _counter_name(series: str) -> str:
    """A counter's registered name: prometheus_client appends ``_total`` to it on /metrics."""
    return series.removesuffix("_total")


ADMISSION_REJECTIONS = Counter(
    _counter_name(mc.HOOKS_ADMISSION_REJECTIONS), "Requests answered 429 by admission control"
)
BUDGET_TRIMS = Counter(
    _counter_name(mc.HOOKS_BUDGET_TRIMS),
    "Requests whose conversation or retrieval was trimmed to the budget",
)
ENGINE_UNAVAILABLE = Counter(
    "serving_engine_unavailable",
    "Requests answered 503 because the engine was dead (restarting) or the server was draining",
)
ADAPTER_REQUESTS = Counter(
    _counter_name(mc.HOOKS_ADAPTER_REQUESTS),
    "Requests served per adapter (base = the base model)",
    [mc.ADAPTER_LABEL],
)
ADAPTER_LATENCY = Histogram(
    mc.HOOKS_ADAPTER_LATENCY,
    "End-to-end latency per adapter, measured in the shaping hook",
    [mc.ADAPTER_LABEL],
    buckets=(0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120),
)
