"""The endpoint's AWS side as the controller's decisions use it: what a tick observes
(DescribeEndpoint, DescribeAlarms, GetMetricData) and the calls that apply a decision (the
canary's weight, a variant's scaling bounds and desired count, the endpoint config), each on the
controller's endpoint and variants. No decision is taken here; the calls themselves, and what
each failure means, are ``aws.py``'s.
"""

from __future__ import annotations

from . import aws
from . import rules as r
from .clients import Clients
from .settings import Settings


class EndpointIO:
    def __init__(self, settings: Settings, clients: Clients) -> None:
        self.s = settings
        self.clients = clients

    def observe(self, *, alarms: bool = True) -> r.Observation:
        """DescribeEndpoint, and DescribeAlarms unless ``alarms`` is False (a rollback does not
        read them, so an alarm that cannot be read does not hold a rollback up)."""
        return aws.observe(
            self.clients.sm, self.clients.cw, self.s.endpoint_name,
            self.s.alarm_names if alarms else (),
            primary=self.s.primary_variant, canary=self.s.canary_variant,
        )  # fmt: skip

    def evidence(self, start: int, end: int) -> r.Evidence:
        """GetMetricData; a failure of any kind is no evidence (the step is held, and rolls back
        after ``evidence_timeout_seconds`` with the failure as its reason), never health."""
        try:
            return aws.evidence(
                self.clients.cw, self.s.endpoint_name, start, end,
                primary=self.s.primary_variant, canary=self.s.canary_variant,
            )  # fmt: skip
        except aws.AWS_ERRORS as exc:
            print(f"GetMetricData failed: {aws.describe_error(exc)}")
            return r.Evidence(0.0, 0.0, 0.0, 0.0, error=aws.describe_error(exc))

    def set_canary_weight(self, percent: int) -> None:
        aws.set_weights(
            self.clients.sm,
            self.s.endpoint_name,
            {self.s.canary_variant: percent, self.s.primary_variant: 100 - percent},
        )

    def bounds(self, variant: str) -> tuple[int, int] | None:
        """``variant``'s scalable-target bounds (``aws.scalable_bounds``); None: no target."""
        return aws.scalable_bounds(self.clients.aas, self.s.endpoint_name, variant)

    def set_bounds(self, variant: str, low: int, high: int) -> None:
        aws.set_bounds(self.clients.aas, self.s.endpoint_name, variant, low, high)

    def set_instances(self, variant: str, count: int) -> None:
        aws.set_instances(self.clients.sm, self.s.endpoint_name, variant, count)

    def update_endpoint(self, config_name: str) -> None:
        aws.update_endpoint(self.clients.sm, self.s.endpoint_name, config_name)
