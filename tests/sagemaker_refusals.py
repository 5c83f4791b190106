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

import re
from collections.abc import Iterable
from typing import Any

from botocore.session import get_session


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


# --------------------------------------------------------------------------- inference components
#
# What SageMaker refuses of a request's values, from botocore's sagemaker service model (the
# shapes' ``max``, ``pattern``, ``enum``, numeric ranges): botocore checks only required members,
# types and minimums before sending (botocore/validate.py), the service checks the rest and
# answers ValidationException in the AWS JSON protocol's wording ("1 validation error detected:
# Value 'x' at 'inferenceComponentName' failed to satisfy constraint: Member must satisfy regular
# expression pattern: ..."). Then the component rules AWS documents:
#
# - an adapter component needs its base: "Before you can create an adapter inference component,
#   you must have an existing inference component that contains the foundation model that you
#   want to adapt", and it has no compute of its own: "Omit this parameter
#   [ComputeResourceRequirements] if your request is meant to create an adapter inference
#   component" (API reference, InferenceComponentSpecification,
#   https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_InferenceComponentSpecification.html);
# - a component's name is unique ("A unique name to assign to the inference component",
#   CreateInferenceComponent) and its endpoint exists ("The name of an existing endpoint where you
#   host the inference component");
# - a component is changed only when settled: a delete while it is Creating is refused (users
#   report it: aws/amazon-sagemaker-examples#3432, "I need to delete the InferenceComponent - but I
#   can't while it is in the 'Creating' state"); AWS publishes no rule for an update while one is
#   in progress, so the fakes take the side that hurts, as SageMaker does for an endpoint
#   (UpdateEndpointWeightsAndCapacities is refused while the endpoint is Updating: FACTS.md):
#   UpdateInferenceComponent and DeleteInferenceComponent are refused unless InService (or, for
#   a delete, Failed).
# The messages beyond the constraint wording are the fakes' own: AWS does not publish them.

#: Statuses a component may be updated from / deleted from (the rules above).
UPDATABLE = frozenset({"InService"})
DELETABLE = frozenset({"InService", "Failed"})


def _camel(name: str) -> str:
    return name[:1].lower() + name[1:]


def _constraints(shape: Any, value: Any, path: str) -> list[str]:
    """The constraint violations of ``value`` against botocore ``shape`` (recursively)."""
    out: list[str] = []
    kind, meta = shape.type_name, shape.metadata
    if kind == "structure" and isinstance(value, dict):
        for member, sub in shape.members.items():
            if member in value:
                out += _constraints(sub, value[member], f"{path}.{_camel(member)}".lstrip("."))
    elif kind == "list" and isinstance(value, list):
        if "max" in meta and len(value) > meta["max"]:
            out.append(
                f"Value at '{path}' failed to satisfy constraint: Member must have length "
                f"less than or equal to {meta['max']}"
            )
        for i, item in enumerate(value, start=1):
            out += _constraints(shape.member, item, f"{path}.{i}.member")
    elif kind == "map" and isinstance(value, dict):
        if "max" in meta and len(value) > meta["max"]:
            out.append(
                f"Value at '{path}' failed to satisfy constraint: Member must have length "
                f"less than or equal to {meta['max']}"
            )
    elif kind == "string" and isinstance(value, str):
        said = f"Value '{value}' at '{path}' failed to satisfy constraint: Member must"
        if "max" in meta and len(value) > meta["max"]:
            out.append(f"{said} have length less than or equal to {meta['max']}")
        if "pattern" in meta and not re.fullmatch(meta["pattern"], value):
            out.append(f"{said} satisfy regular expression pattern: {meta['pattern']}")
        if shape.enum and value not in shape.enum:
            out.append(f"{said} satisfy enum value set: [{', '.join(shape.enum)}]")
    elif kind in ("integer", "long", "float", "double") and isinstance(value, (int, float)):
        said = f"Value '{value}' at '{path}' failed to satisfy constraint: Member must"
        if "max" in meta and value > meta["max"]:
            out.append(f"{said} have value less than or equal to {meta['max']}")
        if "min" in meta and value < meta["min"]:
            out.append(f"{said} have value greater than or equal to {meta['min']}")
    return out


def constraint_refusal(operation: str, params: dict[str, Any]) -> str | None:
    """SageMaker's ValidationException message for ``params`` of ``operation`` whose values break
    its service model's constraints, or None."""
    model = get_session().get_service_model("sagemaker").operation_model(operation)
    found = _constraints(model.input_shape, params, "")
    if not found:
        return None
    n = len(found)
    return f"{n} validation error{'s' if n > 1 else ''} detected: " + "; ".join(found)


def component_refusal(
    operation: str,
    params: dict[str, Any],
    components: dict[str, dict[str, Any]],
    endpoints: Iterable[str],
) -> str | None:
    """Why SageMaker refuses ``operation`` (Create/Update/DeleteInferenceComponent) with
    ``params`` given the account's ``components`` (``{name: {"status", "endpoint", "base",
    ...}}``) and ``endpoints``, or None when it takes it: the constraints first, then the rules
    above."""
    refused = constraint_refusal(operation, params)
    if refused:
        return refused
    name = params["InferenceComponentName"]
    spec = params.get("Specification") or {}
    if operation == "CreateInferenceComponent":
        if name in components:
            return f'Cannot create already existing inference component "{name}".'
        if params["EndpointName"] not in set(endpoints):
            return f'Could not find endpoint "{params["EndpointName"]}".'
        base = spec.get("BaseInferenceComponentName")
        if base is not None:
            if base not in components:
                return f'Could not find base inference component "{base}".'
            if components[base]["endpoint"] != params["EndpointName"]:
                return (
                    f'Base inference component "{base}" is not hosted on endpoint '
                    f'"{params["EndpointName"]}".'
                )
            if "ComputeResourceRequirements" in spec:
                return (
                    "An adapter inference component uses the compute resources of its base "
                    "inference component: omit ComputeResourceRequirements."
                )
        return None
    if name not in components:
        return f'Could not find inference component "{name}".'
    status = components[name]["status"]
    allowed = UPDATABLE if operation == "UpdateInferenceComponent" else DELETABLE
    if status not in allowed:
        return (
            f'Inference component "{name}" is {status}: it cannot be '
            f"{'updated' if operation == 'UpdateInferenceComponent' else 'deleted'} until "
            f"it is {' or '.join(sorted(allowed))}."
        )
    if operation == "UpdateInferenceComponent":
        base = spec.get("BaseInferenceComponentName")
        if base is not None and base != components[name].get("base"):
            return (
                f'Inference component "{name}" is an adapter of '
                f'"{components[name].get("base")}": its base cannot change to "{base}".'
            )
    return None
