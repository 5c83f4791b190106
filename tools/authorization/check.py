"""Evaluate each principal's requests against its policies and name every denial."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .aws_iam import Request, simulate


@dataclass(frozen=True)
class Denial:
    request: Request
    decision: str

    def __str__(self) -> str:
        r = self.request
        context = f" with {dict(r.context)}" if r.context else ""
        return f"{r.principal}: {r.action} on {r.resource}{context} is {self.decision} ({r.why})"


def denials(
    requests: Sequence[Request],
    policies: Mapping[str, Sequence[Mapping[str, Any]]],
    account: str,
) -> list[Denial]:
    """The requests the principal's own policies do not allow, with IAM's decision."""
    unique = list(dict.fromkeys(requests))
    decisions = simulate(unique, policies, account)
    return [Denial(r, d) for r, d in zip(unique, decisions, strict=True) if d != "Allowed"]
