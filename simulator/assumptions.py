"""What the simulator assumes beyond the config: each value is a CLI option (see ``--help``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from sizing.ready_bound import ready_seconds
from sizing.scale_out_time import time_to_serve
from sizing.serving_speed import PLANNING_EDGE, Edge, planned_hit_rate
from typed_config import DeploymentConfig, VariantName
from typed_config.instance_start import ASSUMED_STARTUP_SECONDS


@dataclass(frozen=True)
class Assumptions:
    #: Simulation step. 10 s is the resolution of SageMaker's high-resolution concurrency metric.
    tick_seconds: int = 10
    #: From the scaling decision to the instance running the container. None (the default): a
    #: scale-out serves after the plan's figure for the variant's instance type and this
    #: product's image, cached (sizing.scale_out_time: AWS's published P50s), and deploys and
    #: canary instances of a new tag after the plan's per-start bound (sizing.ready_bound: the
    #: measured new-tag start plus a margin).
    #: A number: every new instance, scale-out or deploy, serves after it + startup_seconds.
    provision_seconds: float | None = None
    #: Container start to /ping 200 (model load, adapters, warmup); part of the figure above.
    startup_seconds: float = ASSUMED_STARTUP_SECONDS
    #: Per-instance speed. None (the default): the speed model (sizing/speed_model.py, fitted to
    #: vLLM on a GPU, docs/measurements/speed_h100_vllm0.26.json, carried to the instance's GPU by
    #: bandwidth and compute) gives the time to first token and the end-to-end time of the
    #: request shape at the instance's concurrency. A number: the old what-if arithmetic instead,
    #: prompt x (1 - hit rate) / prefill_tokens_per_second + output / this (until issue 24 the
    #: default was 45 tok/s, tuned to the brief's "~1,200 requests/minute" per ml.g5.xlarge).
    decode_tokens_per_second: float | None = None
    #: Prefill tokens/s of the uncached prompt, with decode_tokens_per_second only (default 10,000).
    prefill_tokens_per_second: float | None = None
    #: Share of prompt tokens served from vLLM's prefix cache. None (the default): the rate the
    #: sizing plans on (sizing.serving_speed.planned_hit_rate: the config's measured rate, else
    #: the routing simulation's for the configured routing; the brief's ~72 % is a what-if). The
    #: speed model takes the config's system prompt (engine.context_budget.system_tokens) as
    #: shared by every request and the rest of the hit as each conversation's own history.
    prefix_cache_hit_rate: float | None = None
    #: Which edge of the speed model's error band (sizing.serving_speed): the pessimistic one,
    #: as the gate and the scaling target decide, unless a what-if asks for another.
    speed_edge: Edge = PLANNING_EDGE
    #: SageMaker applies one capacity change at a time: while instances are being added the
    #: endpoint is Updating and a further change waits for it to finish.
    serialize_updates: bool = True
    #: Target tracking scale-out alarm: this many consecutive datapoints above target...
    tt_out_datapoints: int = 3
    #: ...each this long; None = 10 s for the high-resolution concurrency metric, 60 s for
    #: InvocationsPerInstance.
    tt_out_datapoint_seconds: int | None = None
    #: Target tracking scale-in alarm: this many 1-minute datapoints below tt_in_fraction x target.
    tt_in_datapoints: int = 15
    tt_in_fraction: float = 0.9
    #: A minute is over SLO when its worst queue wait exceeds this (ms)... None (the default):
    #: the config's queue-wait SLO, monitoring.slo_queue_wait_p95_ms, as the alarms and the gate
    #: hold it; a number is a what-if.
    slo_queue_wait_ms: float | None = None
    #: ...or when more than this share of its requests are rejected. None (the default): the
    #: config's error-rate SLO, monitoring.slo_error_rate_percent / 100; a number is a what-if.
    slo_error_rate: float | None = None
    #: Start each variant at the count target tracking would hold for the trace's first minute
    #: (within its bounds, never below the config's initial count): a live fleet is already
    #: scaled when a replay starts mid-traffic. False: the config's initial count, as a new
    #: endpoint starts.
    warm_start: bool = True
    #: Step policies (by name) to leave out: "what if I delete this policy" without a second config.
    disabled_policies: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        checks = {
            "tick_seconds": self.tick_seconds in (5, 10, 30, 60),
            "provision_seconds": self.provision_seconds is None or self.provision_seconds >= 0,
            "startup_seconds": self.startup_seconds >= 0,
            "decode_tokens_per_second": self.decode_tokens_per_second is None
            or self.decode_tokens_per_second > 0,
            "prefill_tokens_per_second": self.prefill_tokens_per_second is None
            or (self.prefill_tokens_per_second > 0 and self.decode_tokens_per_second is not None),
            "prefix_cache_hit_rate": self.prefix_cache_hit_rate is None
            or 0 <= self.prefix_cache_hit_rate < 1,
            "tt_out_datapoints": self.tt_out_datapoints >= 1,
            "tt_in_datapoints": self.tt_in_datapoints >= 1,
            "tt_in_fraction": 0 < self.tt_in_fraction <= 1,
            "slo_queue_wait_ms": self.slo_queue_wait_ms is None or self.slo_queue_wait_ms >= 0,
            "slo_error_rate": self.slo_error_rate is None or 0 <= self.slo_error_rate < 1,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"invalid simulator assumption(s): {', '.join(bad)}")
        if self.tt_out_datapoint_seconds is not None and (
            self.tt_out_datapoint_seconds % self.tick_seconds
        ):
            raise ValueError("tt_out_datapoint_seconds must be a multiple of tick_seconds")

    def hit_rate(self, cfg: DeploymentConfig) -> float:
        """The prefix-cache hit rate this run uses for ``cfg``."""
        if self.prefix_cache_hit_rate is not None:
            return self.prefix_cache_hit_rate
        return planned_hit_rate(cfg)

    def queue_wait_slo_ms(self, cfg: DeploymentConfig) -> float:
        """The queue wait (ms) above which a minute of this run is over SLO for ``cfg``."""
        if self.slo_queue_wait_ms is not None:
            return self.slo_queue_wait_ms
        return cfg.monitoring.slo_queue_wait_p95_ms

    def error_rate_slo(self, cfg: DeploymentConfig) -> float:
        """The share of rejected requests above which a minute of this run is over SLO."""
        if self.slo_error_rate is not None:
            return self.slo_error_rate
        return cfg.monitoring.slo_error_rate_percent / 100

    def scale_out_seconds(self, cfg: DeploymentConfig, variant: VariantName) -> float:
        """A scale-out of the tag the variant runs: decision to serving. AWS's published P50 with
        the image cached, its engine start replaced by this product's measured one at its
        pessimistic edge (sizing/scale_out_time.py ``planned_seconds``, issue 46)."""
        if self.provision_seconds is None:
            return time_to_serve(cfg, variant).planned_seconds
        return self.provision_seconds + self.startup_seconds

    def new_tag_seconds(self, cfg: DeploymentConfig) -> float:
        """An instance of a tag not yet running (a deploy's green fleet, canary instances): the
        per-start bound deploys and the canary controller's waits use (sizing.ready_bound)."""
        if self.provision_seconds is None:
            return ready_seconds(cfg)
        return self.provision_seconds + self.startup_seconds
