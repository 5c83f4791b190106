"""SageMaker's refusals of the shadow stage's moves, as both fakes answer them (the controller's
moto world, tests/lambdas/shadow_world.py, and the release rehearsal's account,
tests/infra/fake_account.py): one rule each, so a controller that leans on either is refused in
both.

- A blue/green or rolling update between configs whose variant names differ: "When doing a
  blue/green or rolling deployment, your new endpoint configuration must have the same variant
  name as the old endpoint configuration" (SageMaker developer guide, deployment guardrails,
  "Exclusions",
  https://docs.aws.amazon.com/sagemaker/latest/dg/deployment-guardrails-exclusions.html). An
  UpdateEndpoint is such an update when it carries a ``DeploymentConfig`` or sets
  ``RetainDeploymentConfig`` (the endpoint's last one, the stack's blue/green policy, re-applied:
  API reference, UpdateEndpoint). The message is the fakes' wording: AWS does not publish its.
- A count change for a shadow variant: UpdateEndpointWeightsAndCapacities'
  ``DesiredWeightAndCapacity`` is documented for production variants only
  (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_DesiredWeightAndCapacity.html);
  the fakes take the undocumented side that hurts, a refusal, in the words SageMaker uses for a
  variant its ProductionVariants does not list.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def move_refusal(params: dict[str, Any], live: Iterable[str], new: Iterable[str]) -> str | None:
    """Why SageMaker refuses UpdateEndpoint ``params`` from a config with variants ``live`` to one
    with ``new`` (production and shadow names), or None when it takes it."""
    guarded = bool(params.get("RetainDeploymentConfig")) or "DeploymentConfig" in params
    if not guarded or set(live) == set(new):
        return None
    return (
        f"Endpoint configuration {params['EndpointConfigName']} has variant names "
        f"{sorted(new)} and the endpoint's current configuration {sorted(live)}: a blue/green or "
        "rolling deployment requires the same variant names."
    )


def count_refusal(variant: str, config: str) -> str:
    """Why SageMaker refuses a DesiredInstanceCount for the shadow ``variant`` on ``config``."""
    return (
        f'The variant name(s) "{variant}" is/are not present within endpoint configuration '
        f'"{config}".'
    )
