"""SageMaker's routing strategies as the routing comparison (:mod:`simulator.routing.compare`)
models them: :class:`RouterSpec`, one variant's routing configuration, and the config's own.

What SageMaker says the strategies do (API reference, ProductionVariantRoutingConfig and
PrefixAwareRoutingConfig, read November 2026):

- ``RANDOM``: "routes each request to a randomly chosen instance". SageMaker's default when a
  variant has no RoutingConfig ("By default, SageMaker endpoints have a random routing strategy",
  AWS Machine Learning Blog, "Minimize real-time inference latency by using Amazon SageMaker
  routing strategies", 2023).
- ``LEAST_OUTSTANDING_REQUESTS``: "routes requests to the specific instances that have more
  capacity to process them". Modelled as: the instance with the fewest requests in flight
  (running + waiting), ties broken at random.
- ``PREFIX_AWARE``: "routes requests that share the same prompt prefix to the same instance. When
  the number of in-flight requests on the selected instance reaches the configured threshold,
  the endpoint routes the request to an instance with more available capacity."
  ``PrefixLength`` (1024-65536): "For the SageMaker Runtime InvokeEndpoint and
  InvokeEndpointWithResponseStream APIs, this value specifies the number of bytes from the
  beginning of the request body"; "Set this value to cover shared content (such as system
  prompts) plus enough unique content to distribute workloads across instances."
  ``ConcurrencyThreshold`` (1-1024): "The maximum number of in-flight requests on the target
  instance before the endpoint routes to another instance."
  AWS does not publish how a prefix picks its instance. Assumed here: a hash of the body's first
  ``PrefixLength`` bytes (the whole body when shorter) picks one instance of the variant, so
  equal prefixes always meet there; at ``ConcurrencyThreshold`` in flight on it the request goes
  to the least-outstanding instance instead. A router that matched the longest common prefix
  against what each instance served (as SGLang's and Ray Serve's prefix-aware routers do) would
  keep follow-up turns together without any choice of PrefixLength; this model does not credit
  that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from simulator.sessions import Layout
from sizing.scaling_target import least_spill_threshold, spill_threshold
from typed_config import DeploymentConfig, VariantName

Strategy = Literal["LEAST_OUTSTANDING_REQUESTS", "RANDOM", "PREFIX_AWARE"]
STRATEGIES: tuple[Strategy, ...] = ("RANDOM", "LEAST_OUTSTANDING_REQUESTS", "PREFIX_AWARE")
#: PrefixAwareRoutingConfig's valid ranges (API reference).
PREFIX_LENGTH_RANGE = (1024, 65536)
THRESHOLD_RANGE = (1, 1024)


@dataclass(frozen=True)
class RouterSpec:
    """One routing configuration of a variant, and the key order of the clients' bodies."""

    strategy: Strategy
    prefix_length: int | None = None
    concurrency_threshold: int | None = None
    layout: Layout = "system-first"
    #: True: this is the variant's ``routing`` section of the config (highlighted in the table).
    configured: bool = False

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown routing strategy {self.strategy!r}")
        if self.strategy == "PREFIX_AWARE" and (
            self.prefix_length is None or self.concurrency_threshold is None
        ):
            raise ValueError("PREFIX_AWARE needs prefix_length and concurrency_threshold")

    @property
    def label(self) -> str:
        if self.strategy != "PREFIX_AWARE":
            return self.strategy
        return f"PREFIX_AWARE {self.prefix_length} B / {self.concurrency_threshold}, {self.layout}"


def configured_routing(cfg: DeploymentConfig, variant: VariantName) -> RouterSpec:
    """The variant's ``routing`` section (issue 21), or SageMaker's default (RANDOM) without one.

    Read with getattr: the section is added to typed_config by a separate change."""
    routing = getattr(cfg.variants[variant], "routing", None)
    if routing is None:
        return RouterSpec("RANDOM", configured=True)
    strategy = routing.strategy
    if strategy != "PREFIX_AWARE":
        return RouterSpec(strategy, configured=True)
    return RouterSpec(
        "PREFIX_AWARE",
        prefix_length=routing.prefix_length_bytes or PREFIX_LENGTH_RANGE[0],
        concurrency_threshold=spill_threshold(cfg, variant),
        configured=True,
    )


def default_threshold(cfg: DeploymentConfig, variant: VariantName) -> int:
    """ConcurrencyThreshold when none is configured: the scaling target rounded up
    (sizing.scaling_target.least_spill_threshold; past it the instance is as full as autoscaling
    wants it)."""
    return least_spill_threshold(cfg, variant)
