"""The per-variant alarm rules of the monitoring construct, as data (the original team's
alerting rules, plus the engine's own failure signals).

Each rule names a metric of the metrics contract (or SageMaker's ModelLatency), its statistic,
threshold and how long the condition must hold; thresholds come from the config's ``monitoring``
section, one adapter-latency rule per adapter name.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from aws_cdk import aws_cloudwatch as cloudwatch

from container.serving import metrics_contract as mc
from sizing.rollout_alarms import ENGINE_RESTARTS_WINDOW_SECONDS, HIGH_TTFT_WINDOW_SECONDS
from stacks.constructs.metrics import MICROSECONDS_PER_MS
from typed_config import GATE_SLOS, GateSlo, MonitoringConfig


@dataclass(frozen=True)
class Rule:
    """One per-variant alarm: ``window_s`` is how long the condition must hold."""

    key: str
    metric: str
    statistic: str
    above: bool
    threshold: float
    window_s: int
    critical: bool
    why: str
    adapter: str | None = None
    missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING


#: What the queue-buildup alarm tells the on-call, by whether the variant has a step scale-out
#: policy on the queue depth (a variant without one scales on target tracking alone).
QUEUE_BUILDUP_WHY = {
    True: "scale-out is not keeping up (queue-depth step scaling already fired)",
    False: "scale-out is not keeping up (this variant has no queue-depth step policy: target "
    "tracking alone has not absorbed the queue; check max_capacity and the scaling activities)",
}


def slo_rules(m: MonitoringConfig) -> dict[GateSlo, Rule]:
    """The SLO alarm of each latency SLO (``monitoring.slo_*``, one-hour windows), by the SLO's
    name in ``fleet.slos``."""
    return {
        "ttft_p50": Rule("slo-ttft-p50", mc.TTFT_P50.name, "p50", True, m.slo_ttft_p50_ms, 3600,
                         False, "SLO: P50 TTFT, 1-hour window"),
        "ttft_p95": Rule("slo-ttft-p95", mc.TTFT_P95.name, "p95", True, m.slo_ttft_p95_ms, 3600,
                         False, "SLO: P95 TTFT, 1-hour window"),
        "latency_p99": Rule("slo-latency-p99", "ModelLatency", "p99", True,
                            m.slo_latency_p99_ms * MICROSECONDS_PER_MS, 3600, False,
                            "SLO: P99 latency, 1-hour window (ModelLatency is in microseconds)"),
        "queue_wait_p95": Rule("slo-queue-wait-p95", mc.QUEUE_TIME_P95.name, "p95", True,
                               m.slo_queue_wait_p95_ms, 3600, False,
                               "SLO: P95 queue wait, 1-hour window"),
        "tpot_p95": Rule("slo-tpot-p95", mc.TPOT_P95.name, "p95", True, m.slo_tpot_p95_ms, 3600,
                         False, "SLO: P95 time per output token, 1-hour window"),
    }  # fmt: skip


def variant_rules(
    m: MonitoringConfig,
    adapter_names: Sequence[str],
    *,
    queue_step_scaling: bool,
    slos: Collection[str] = GATE_SLOS,
) -> list[Rule]:
    """The rules of one variant; ``queue_step_scaling``: whether it has a step scale-out policy
    on the queue depth (the queue-buildup alarm's text says what has already been tried).
    ``slos``: the SLOs whose alarm is built, the ones the fleet is sized to hold
    (``sizing.slo_reach.held``: ``fleet.slos`` less what the instance type cannot reach). An
    alarm on an SLO the fleet is not sized for stands in ALARM on a healthy fleet (prod's e2e
    p99 < 2 s, reachable on no catalog type; dev's TPOT p95 on an A10G at its night floor), and
    an alarm that always fires pages nobody: the plan names each one left out and why."""
    rules = [
        Rule("high-ttft", mc.TTFT_P95.name, "Average", True, m.ttft_p95_ms,
             HIGH_TTFT_WINDOW_SECONDS, False, "check the prefix cache hit rate"),
        Rule("queue-buildup", mc.QUEUE_DEPTH.name, "Average", True, m.queue_depth_critical, 120,
             True, QUEUE_BUILDUP_WHY[queue_step_scaling]),
        Rule("kv-cache-pressure", mc.KV_CACHE_USAGE.name, "Average", True,
             m.kv_cache_usage_percent, 300, False, "check for context budget drift"),
        Rule("engine-restarts", mc.ENGINE_RESTARTS.name, "Sum", True, 0,
             ENGINE_RESTARTS_WINDOW_SECONDS, True,
             "the engine died (a CUDA OOM kills EngineCore) and was restarted in-container: "
             "check the log for the cause, max_num_batched_tokens and the context budget"),
        Rule("prefix-cache-degraded", mc.PREFIX_CACHE_HIT_RATE.name, "Average", False,
             m.prefix_cache_hit_rate_min_percent, 900, False, "check for prompt template changes"),
        # Each healthy engine publishes RunningRequests once per metrics interval.
        Rule("no-healthy-capacity", mc.RUNNING_REQUESTS.name, "SampleCount", False, 1, 180, True,
             "no engine is publishing: every instance is down or unhealthy",
             missing=cloudwatch.TreatMissingData.BREACHING),
    ]  # fmt: skip
    rules += [rule for slo, rule in slo_rules(m).items() if slo in slos]
    rules += [
        Rule(f"adapter-latency-{a}", mc.ADAPTER_LATENCY_P95.name, "Average", True,
             m.adapter_threshold_ms(a), 600, False,
             f"{m.adapter_latency_regression_factor:g}x baseline: check the adapter version, "
             "roll back if needed", adapter=a)
        for a in adapter_names
    ]  # fmt: skip
    return rules
