"""The operator's notifications: one SNS message per rollout end or alert, best effort."""

from __future__ import annotations

import json

from . import aws, store
from .clients import Clients
from .settings import Settings
from .state import RolloutState


class Notifier:
    def __init__(self, settings: Settings, clients: Clients) -> None:
        self.s = settings
        self.clients = clients

    def notify(self, subject: str, state: RolloutState) -> None:
        """Best effort: the decision is already applied and recorded; a failed publish (an error
        answer or none at all) is logged instead of failing the tick (which would make the state
        machine roll back again)."""
        message = {k: state.get(k) for k in store.SUMMARY_KEYS}
        try:
            self.clients.sns.publish(
                TopicArn=self.s.topic_arn,
                Subject=f"[{self.s.endpoint_name}] {subject}"[:100],
                Message=json.dumps(message, indent=2, default=str),
            )
        except aws.AWS_ERRORS as exc:
            print(f"notification to {self.s.topic_arn} failed: {aws.describe_error(exc)}")
