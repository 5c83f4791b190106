"""The bad builds the blast-radius replay sends through a rollout, and what each one shows.

Each build is a regression of one kind (issue 33 item 4), with the healthy build beside them:

- ``errors-2pct``: 2 % of its answers fail (5XX), on every adapter;
- ``latency-2x``: every answer takes twice as long (time to first token and end to end);
- ``truncated``: answers silently cut to ``TRUNCATED_LENGTH_FACTOR`` of their length, finish reason
  ``stop`` (no error, no max_tokens flag: a broken stop sequence or chat template);
- ``one-adapter``: every answer through one adapter fails, the others are fine. The adapter is the
  one with the smallest traffic share (the pessimistic edge: the fewest failures to see).

Per-adapter traffic shares: neither the config nor the traces carry them (the brief names three
adapters and no mix), so the replay splits traffic evenly unless ``--adapter-share`` says
otherwise (:func:`adapter_shares`).

What a build shows, per minute, to the canary's alarms (:func:`minute_signals`): 5XX errors,
ModelLatency p99, the container's TTFT p95, and both as a ratio to the primary's. Latency comes
from the speed model (sizing.speed_model.open_loop_at: Poisson arrivals at the in-flight count per
instance, the variant's own load that minute) times the build's factor; the in-flight count is
the healthy build's (a slower build would hold more requests in flight and be slower still:
leaving that out is the pessimistic edge for detection). The speed model has no p95: the TTFT
figure is its p90, the lower neighbour (again the pessimistic edge).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from dataclasses import astuple, dataclass
from functools import cached_property

from simulator.assumptions import Assumptions
from sizing import speed_model
from sizing.rollout_alarms import Signal
from sizing.scaling_target import typical_request
from sizing.serving_speed import efficiency
from typed_config import DeploymentConfig
from typed_config.catalog import INSTANCE_CATALOG

#: The share of its length a truncated answer keeps.
TRUNCATED_LENGTH_FACTOR = 0.6
#: In-flight requests per instance at which the speed model is evaluated (denser near the batch
#: limit, where queueing bends the tails); a load between two points is interpolated linearly.
IN_FLIGHT_GRID = (1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 104, 112, 120, 128, 160, 192, 256)


@dataclass(frozen=True)
class Build:
    """One build's behaviour on live traffic."""

    key: str
    description: str
    #: Share of answers that fail (5XX) on every adapter, percent.
    error_percent: float = 0.0
    #: Time to first token and end-to-end time, times this.
    latency_factor: float = 1.0
    #: Answers keep this share of their length (silently: no error, no max_tokens flag).
    length_factor: float = 1.0
    #: Every answer through this adapter fails.
    failing_adapter: str | None = None

    def error_share(self, shares: Mapping[str, float]) -> float:
        """The share (0..1) of all requests this build fails."""
        one = shares[self.failing_adapter] if self.failing_adapter else 0.0
        return min(1.0, one + (1 - one) * self.error_percent / 100)

    @property
    def healthy(self) -> bool:
        return self == Build(self.key, self.description)


def adapter_shares(
    cfg: DeploymentConfig, override: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Each adapter's share (0..1) of the requests: ``override`` (percent per adapter name, the
    rest split evenly), else an even split. An unknown name or a total above 100 % is an error
    naming it."""
    names = [a.name for a in cfg.adapters] or [""]
    given = dict(override or {})
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(f"--adapter-share: unknown adapter(s) {unknown}; known: {names}")
    total = sum(given.values())
    if any(v < 0 for v in given.values()) or total > 100 + 1e-9:
        raise ValueError(f"--adapter-share: shares {given} must be >= 0 and add up to <= 100 %")
    rest = [n for n in names if n not in given]
    if not rest and abs(total - 100) > 1e-6:
        raise ValueError(f"--adapter-share: every adapter named, but the shares add up to {total}")
    left = (100 - total) / len(rest) if rest else 0.0
    return {n: given.get(n, left) / 100 for n in names}


def bad_builds(shares: Mapping[str, float]) -> tuple[Build, ...]:
    """The healthy build, then the four bad ones (the module docstring)."""
    smallest = min(shares, key=lambda n: (shares[n], n))
    return (
        Build("healthy", "the same answers as the primary"),
        Build("errors-2pct", "fails 2 % of requests (5XX) on every adapter", error_percent=2.0),
        Build("latency-2x", "doubles TTFT and end-to-end latency", latency_factor=2.0),
        Build(
            "truncated",
            f"answers silently cut to {TRUNCATED_LENGTH_FACTOR:.0%} of their length "
            "(no error, finish reason stop)",
            length_factor=TRUNCATED_LENGTH_FACTOR,
        ),
        Build(
            "one-adapter",
            f"fails every request through {smallest or 'the base model'} "
            f"({shares[smallest]:.0%} of traffic), the other adapters fine",
            failing_adapter=smallest,
        ),
    )


@dataclass(frozen=True)
class Percentiles:
    """A healthy instance's times at one load, seconds."""

    ttft_p50: float
    ttft_p90: float
    e2e_p50: float
    e2e_p99: float


class LatencyCurve:
    """The speed model's latency percentiles on ``instance_type`` by in-flight requests per
    instance (:data:`IN_FLIGHT_GRID`), each point computed once."""

    def __init__(self, cfg: DeploymentConfig, instance_type: str, a: Assumptions) -> None:
        self.cfg, self.gpu, self.a = cfg, INSTANCE_CATALOG[instance_type].gpu, a
        self._points: dict[int, Percentiles] = {}

    @cached_property
    def _request(self) -> dict[str, int]:
        return typical_request(self.cfg)

    def at(self, in_flight: float) -> Percentiles:
        """The percentiles at ``in_flight`` requests per instance (interpolated on the grid)."""
        x = min(max(1.0, in_flight), float(IN_FLIGHT_GRID[-1]))
        i = min(len(IN_FLIGHT_GRID) - 2, bisect.bisect_right(IN_FLIGHT_GRID, x) - 1)
        lo, hi = IN_FLIGHT_GRID[i], IN_FLIGHT_GRID[i + 1]
        w = (x - lo) / (hi - lo)
        a, b = self._point(lo), self._point(hi)
        return Percentiles(*(u + w * (v - u) for u, v in zip(astuple(a), astuple(b), strict=True)))

    def settled_in_flight(self, arrivals_per_minute: float, instances: int) -> float:
        """Requests in flight per instance at this arrival rate (Little's law with the speed
        model's own median time at that load, iterated to a fixed point)."""
        if arrivals_per_minute <= 0 or instances <= 0:
            return 0.0
        rate = arrivals_per_minute / 60 / instances
        f = rate * self._point(1).e2e_p50
        for _ in range(8):
            f = rate * self.at(f).e2e_p50
        return f

    def _point(self, grid: int) -> Percentiles:
        if grid not in self._points:
            s = speed_model.open_loop_at(
                self.cfg.architecture,
                self.cfg.model.quantization,
                self.gpu,
                in_flight=grid,
                eff=efficiency(self.cfg, self.gpu, self.a.speed_edge),
                **self._request,
            )
            self._points[grid] = Percentiles(s.ttft_p50_s, s.ttft_p90_s, s.e2e_p50_s, s.e2e_p99_s)
        return self._points[grid]


def minute_signals(
    build: Build,
    shares: Mapping[str, float],
    *,
    invocations: float,
    canary: Percentiles,
    primary: Percentiles | None,
    min_ratio_invocations: int | None,
    comparable: bool = True,
) -> dict[Signal, float | None]:
    """What the canary's alarms see in one minute (None: no datapoint, the canary served
    nothing). The ratios follow the relative latency alarm's metric math
    (sizing.rollout_alarms.ratio_expression): 0 in a minute with fewer than
    ``min_ratio_invocations`` canary invocations or unlike loads per instance (``comparable``
    False); no datapoint when the primary served nothing (``primary`` None: its metric is
    missing, and so is the expression's value)."""
    if invocations <= 0:
        return {"errors_per_minute": None, "latency_p99_ms": None, "ttft_p95_ms": None,
                "latency_ratio": 0.0, "ttft_ratio": 0.0, "restarts": None}  # fmt: skip
    decode = (canary.e2e_p99 - canary.ttft_p90) * build.length_factor
    latency = (canary.ttft_p90 + decode) * build.latency_factor
    ttft = canary.ttft_p90 * build.latency_factor
    enough = comparable and (min_ratio_invocations is None or invocations >= min_ratio_invocations)
    latency_ratio: float | None = None
    ttft_ratio: float | None = None
    if primary is not None:
        latency_ratio = latency / primary.e2e_p99 if enough else 0.0
        ttft_ratio = ttft / primary.ttft_p90 if enough else 0.0
    return {
        "errors_per_minute": invocations * build.error_share(shares),
        "latency_p99_ms": 1000 * latency,
        "ttft_p95_ms": 1000 * ttft,
        "latency_ratio": latency_ratio,
        "ttft_ratio": ttft_ratio,
        "restarts": 0.0,
    }


def lognormal_sigma(p50: float, tail: float, z: float) -> float:
    """The log-normal's sigma whose median is ``p50`` and whose quantile at ``z`` standard
    deviations is ``tail`` (at least a small spread)."""
    if p50 <= 0 or tail <= p50:
        return 0.05
    return max(0.05, math.log(tail / p50) / z)
