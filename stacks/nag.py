"""cdk-nag suppressions: each names the rule and the real reason it does not apply."""

from __future__ import annotations

from aws_cdk import Stack
from cdk_nag import NagPackSuppression, NagSuppressions

STACK_SUPPRESSIONS: list[NagPackSuppression] = []


def apply_suppressions(stack: Stack) -> None:
    if STACK_SUPPRESSIONS:
        NagSuppressions.add_stack_suppressions(
            stack, STACK_SUPPRESSIONS, apply_to_nested_stacks=True
        )
