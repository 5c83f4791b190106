"""The second deployment shape (issue 45): the base model and each adapter as SageMaker inference
components on one endpoint (``inference_components:``). Absent, the endpoint keeps the variant
shape (two production variants, each a Model with every adapter baked in).

What SageMaker gives this shape, each from AWS's documentation:

- **Inference components** (SageMaker developer guide, "Deploy models for real-time inference",
  https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints-deploy-models.html): the
  endpoint config's variant has no model; each model is an ``InferenceComponent`` with its own
  compute requirements and copy count, placed by SageMaker on the variant's instances.
- **Adapter components** (developer guide, "Fine-tune models with adapter inference components",
  https://docs.aws.amazon.com/sagemaker/latest/dg/realtime-endpoints-adapt.html): an adapter
  component names the base component (``BaseInferenceComponentName``) and "uses the compute
  resources that you assigned to the base inference component"; its adapter comes from S3
  (``Container.ArtifactUrl``). One adapter is then added, replaced or removed without touching
  the base.
- **Managed instance scaling** (API reference, ProductionVariantManagedInstanceScaling,
  https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ProductionVariantManagedInstanceScaling.html):
  SageMaker provisions the instances the copies need, between ``MinInstanceCount`` (botocore:
  min 0) and ``MaxInstanceCount`` (min 1).
- **Scale to zero** (developer guide, "Scale an endpoint to zero instances",
  https://docs.aws.amazon.com/sagemaker/latest/dg/endpoint-auto-scaling-zero-instances.html):
  "An endpoint can scale to and from zero instances only if it hosts inference components", with
  ``MinInstanceCount`` 0 in the variant's ManagedInstanceScaling and each component registered as
  a scalable target with minimum capacity 0; leaving zero takes a step scaling policy on an alarm
  on ``NoCapacityInvocationFailures``, and "the provisioning process takes several minutes.
  During that time, any attempts to invoke the endpoint will produce an error".

The rules (each an error naming the field and the fix): the ones within this section below; the
ones against the rest of the config in ``typed_config.loader.component_errors`` (called by
``DeploymentConfig.cross_section_errors``, beside the other rules that read the whole config).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from typed_config.adapter_rollout import AdapterRollout
from typed_config.base import Strict, section_rule
from typed_config.catalog import INSTANCE_CATALOG, unknown_type_message

#: GPUs one copy of the base component takes: the engine runs on one GPU (the capacity model and
#: the container have no tensor parallelism), so an instance holds one copy per GPU.
GPUS_PER_COPY = 1
#: Copies and instances a config may ask for: the largest fleet the variant shape allows
#: (VariantConfig.initial_instance_count, scaling's Capacity), so the two shapes plan alike.
MAX_FLEET = 100


class InstanceBounds(Strict):
    """The variant's ManagedInstanceScaling: how many instances SageMaker may provision for the
    copies (``MinInstanceCount`` / ``MaxInstanceCount``)."""

    min: Annotated[int, Field(ge=0, le=MAX_FLEET)]
    """Fewest instances SageMaker keeps (MinInstanceCount, 0-100); 0 only with scale to zero
    (base.copies.min 0): no instance is billed while no copy runs."""
    max: Annotated[int, Field(ge=1, le=MAX_FLEET)]
    """Most instances SageMaker provisions for the copies (MaxInstanceCount, 1-100)."""

    @section_rule
    def _ordered(self) -> InstanceBounds:
        if self.min > self.max:
            raise ValueError(f"min: {self.min} must be <= max ({self.max})")
        return self


class CopyBounds(Strict):
    """The base component's copies: its Application Auto Scaling target's MinCapacity and
    MaxCapacity on ``sagemaker:inference-component:DesiredCopyCount``."""

    min: Annotated[int, Field(ge=0, le=MAX_FLEET)]
    """Fewest copies (MinCapacity, 0-100); 0 is scale to zero and needs instances.min 0."""
    max: Annotated[int, Field(ge=1, le=MAX_FLEET)]
    """Most copies (MaxCapacity, 1-100); every copy needs a GPU of its own."""

    @section_rule
    def _ordered(self) -> CopyBounds:
        if self.min > self.max:
            raise ValueError(f"min: {self.min} must be <= max ({self.max})")
        return self

    @property
    def initial(self) -> int:
        """The copy count the template creates the component with (RuntimeConfig.CopyCount): at
        least one, so a deploy ends with a copy that answered the health check; at zero minimum
        scale-in brings it down (AWS's scale-to-zero procedure starts from a serving component)."""
        return max(self.min, 1)


class BaseComponent(Strict):
    """The base model's inference component: its copies and what scales them."""

    copies: CopyBounds
    """Bounds on the base component's copies (one copy: one engine on one GPU)."""
    target_requests_per_copy: Annotated[float, Field(gt=0, le=1024)]
    """Target of the copy scaling policy: concurrent requests per copy
    (SageMakerInferenceComponentConcurrentRequestsPerCopyHighResolution), at most the engine's
    admission_max_inflight."""
    scale_in_cooldown_seconds: Annotated[int, Field(ge=0, le=3600)] = 300
    """Seconds after a scale-in before the next (AWS's scale-to-zero example: 300)."""
    scale_out_cooldown_seconds: Annotated[int, Field(ge=0, le=3600)] = 60
    """Seconds after a scale-out before the next (and the wake-from-zero step policy's cooldown,
    60 in AWS's example)."""


class InferenceComponentsConfig(Strict):
    """The component shape (module docstring). With this section the synthesized endpoint has one
    variant (``primary``) with managed instance scaling and no model, a base component from the
    baked image, and one adapter component per entry of ``adapters`` (from its published version
    in the models bucket). ``variants`` and ``scaling`` then describe the variant shape the plan
    compares it with; the rules tying them to this section are ``loader.component_errors``."""

    instance_type: str
    """The instances' SageMaker type (ml.<family>.<size>), one of the instance catalog's; the same
    as variants.primary.instance_type, which the capacity check sizes."""
    instances: InstanceBounds
    """Managed instance scaling: the fewest and most instances SageMaker provisions for the
    copies."""
    base: BaseComponent
    """The base model's component: copies and their scaling."""
    rollout: AdapterRollout = AdapterRollout()
    """How an adapter version rolls out on its component: ``make release-adapter``'s bake,
    evidence and watch (typed_config/adapter_rollout.py; each evidence figure left unset is the
    canary's, ``rollout:``)."""

    @field_validator("instance_type")
    @classmethod
    def _known_instance(cls, value: str) -> str:
        if value not in INSTANCE_CATALOG:
            raise ValueError(unknown_type_message(value))
        return value

    @property
    def copies_per_instance(self) -> int:
        """Base copies one instance holds: its GPUs, one per copy (:data:`GPUS_PER_COPY`)."""
        return INSTANCE_CATALOG[self.instance_type].gpu_count // GPUS_PER_COPY

    @property
    def scales_to_zero(self) -> bool:
        """No instance and no copy at the floor: the wake-from-zero policy is built."""
        return self.instances.min == 0 and self.base.copies.min == 0

    @section_rule
    def _coherent(self) -> InferenceComponentsConfig:
        errors = []
        inst, copies, per = self.instances, self.base.copies, self.copies_per_instance
        if inst.min == 0 and copies.min > 0:
            errors.append(
                f"instances.min: 0 with base.copies.min {copies.min}: the {copies.min} copies "
                "need an instance, so the endpoint never reaches zero; set base.copies.min 0 "
                "for scale to zero, or instances.min 1"
            )
        if copies.min == 0 and inst.min > 0:
            errors.append(
                f"base.copies.min: 0 with instances.min {inst.min}: at zero copies the "
                f"{inst.min} instance(s) are billed and serve nothing; set instances.min 0 for "
                "scale to zero (SageMaker's 'Scale an endpoint to zero instances'), or "
                "base.copies.min 1"
            )
        if copies.max > inst.max * per:
            errors.append(
                f"base.copies.max: {copies.max} copies need {-(-copies.max // per)} "
                f"{self.instance_type} instances ({per} GPU(s), one copy each) but instances.max "
                f"is {inst.max}; raise instances.max or lower base.copies.max"
            )
        if errors:
            raise ValueError("\n".join(errors))
        return self
