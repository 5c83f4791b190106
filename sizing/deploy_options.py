"""Per-deploy inputs beside the config: what `make deploy` (tools/deploy.py) asks one synth for.

app.py reads them from CDK context (``-c suspend_scaling=primary``,
``-c pin_instance_type=primary=ml.g5.xlarge``, ``-c reset=DesiredWeight``) and passes this typed
object down; nothing below app.py reads context. Each option exists for one documented step:

- ``suspend_scaling``: the variants whose scalable target (policies, scheduled actions) the
  template leaves out, so CloudFormation deregisters them. An update that changes a variant's
  instance type fails while the variant is registered (SageMaker developer guide, "Update
  endpoints that use auto scaling", sizing.update_semantics).
- ``pin_instance_types``: keep a variant on its deployed instance type in that suspending
  deploy. CloudFormation deletes removed resources only in its cleanup phase, after every
  update, so the type must not change in the same deploy that deregisters the target.
- ``reset``: ``deployment.reset_on_update`` for this deploy only, e.g. ``DesiredWeight`` for
  the deploy that promotes a canary (weights back to the configured initial weights).

Release inputs, so a release needs no edit of the YAML (``make synth/diff/deploy IMAGE_TAG=...
ARTIFACT=...``), validated by the same config model as the file:

- ``image_tag``: ``TAG`` (every variant runs ``<repository>:TAG``: ``image: {mode: tag}``) or
  ``primary=TAG,canary=TAG`` (``variants.<name>.image_tag``; a new build reaches the canary).
- ``model_artifact``: ``model.artifact``, the model release a build bakes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast, get_args

from pydantic import ValidationError

from sizing.fit_checks import validate_config
from sizing.speed_plan import ROLLBACK_LATENCY_HEADROOM, slowest_pool_p99
from typed_config import VARIANT_NAMES, ConfigError, DeploymentConfig, VariantName, VariantProperty
from typed_config.catalog import INSTANCE_CATALOG, unknown_type_message
from typed_config.loader import error_lines

CONTEXT_KEYS = ("suspend_scaling", "pin_instance_type", "reset", "image_tag", "model_artifact")
#: ``IMAGE_TAG=live``: the tag each variant runs now, which only ``make deploy`` can read
#: (tools/live_images.py resolves it before anything is synthesized).
LIVE_TAG = "live"


@dataclass(frozen=True)
class DeployOptions:
    suspend_scaling: frozenset[str] = frozenset()
    pin_instance_types: Mapping[VariantName, str] = field(default_factory=dict)
    reset: tuple[VariantProperty, ...] | None = None
    #: ``{"": tag}`` for every variant (image.mode tag), or ``{variant: tag}``.
    image_tags: Mapping[str, str] = field(default_factory=dict)
    model_artifact: str | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.suspend_scaling) | set(self.pin_instance_types))
        unknown = [v for v in unknown if v not in VARIANT_NAMES]
        if unknown:
            raise ConfigError(f"suspend_scaling/pin_instance_type: unknown variant(s) {unknown}")
        for variant, itype in self.pin_instance_types.items():
            # a placement: one type, or instance pools' types by priority joined with "+"
            unknown = [t for t in itype.split("+") if t not in INSTANCE_CATALOG]
            if unknown:
                raise ConfigError(
                    f"pin_instance_type: {variant}={itype}: {unknown_type_message(unknown[0])}"
                )
        bad_variants = [v for v in self.image_tags if v and v not in VARIANT_NAMES]
        if bad_variants:
            raise ConfigError(f"image_tag: unknown variant(s) {bad_variants}")
        bad = [p for p in self.reset or () if p not in get_args(VariantProperty)]
        if bad:
            raise ConfigError(f"reset: {bad} are not {list(get_args(VariantProperty))}")

    @classmethod
    def from_context(cls, get: Callable[[str], Any]) -> DeployOptions:
        """Parse CDK context values (comma-separated strings); absent keys mean "none"."""

        def items(key: str) -> list[str]:
            raw = get(key)
            return [x.strip() for x in str(raw).split(",") if x.strip()] if raw else []

        pins: dict[VariantName, str] = {}
        for item in items("pin_instance_type"):
            variant, sep, itype = item.partition("=")
            if not sep:
                raise ConfigError(f"pin_instance_type: {item!r} is not VARIANT=INSTANCE_TYPE")
            if variant not in VARIANT_NAMES:
                raise ConfigError(f"pin_instance_type: unknown variant {variant!r} in {item!r}")
            pins[cast(VariantName, variant)] = itype
        reset_raw = get("reset")
        reset = (
            tuple(cast(VariantProperty, p) for p in items("reset"))
            if reset_raw is not None
            else None
        )
        tags: dict[str, str] = {}
        for item in items("image_tag"):
            variant, sep, tag = item.rpartition("=")
            if variant in tags:
                raise ConfigError(f"image_tag: {variant or 'every variant'} given twice")
            tags[variant if sep else ""] = tag
        if "" in tags and len(tags) > 1:
            raise ConfigError("image_tag: give TAG for every variant or VARIANT=TAG, not both")
        artifact = str(get("model_artifact")).strip() if get("model_artifact") else None
        return cls(frozenset(items("suspend_scaling")), pins, reset, tags, artifact)

    def as_context(self) -> dict[str, str]:
        """The ``-c`` values that reproduce these options (tools/deploy.py passes them)."""
        ctx: dict[str, str] = {}
        if self.suspend_scaling:
            ctx["suspend_scaling"] = ",".join(sorted(self.suspend_scaling))
        if self.pin_instance_types:
            ctx["pin_instance_type"] = ",".join(
                f"{v}={t}" for v, t in sorted(self.pin_instance_types.items())
            )
        if self.reset is not None:
            ctx["reset"] = ",".join(self.reset)
        if self.image_tags:
            ctx["image_tag"] = ",".join(
                f"{v}={t}" if v else t for v, t in sorted(self.image_tags.items())
            )
        if self.model_artifact:
            ctx["model_artifact"] = self.model_artifact
        return ctx

    def release(self) -> DeployOptions:
        """Only the release inputs (image tags, model artifact): what every step of one deploy
        carries, whatever else a step asks for."""
        return DeployOptions(image_tags=self.image_tags, model_artifact=self.model_artifact)

    def merged(self, other: DeployOptions) -> DeployOptions:
        """These options with ``other``'s release inputs."""
        return DeployOptions(self.suspend_scaling, self.pin_instance_types, self.reset,
                             other.image_tags, other.model_artifact)  # fmt: skip

    def apply(self, cfg: DeploymentConfig) -> DeploymentConfig:
        """The config this deploy synthesizes: pinned instance types and the reset override,
        validated again like the YAML (guardrail steps, capacity) so no rule is skipped."""
        if (
            not self.pin_instance_types
            and self.reset is None
            and not self.image_tags
            and not self.model_artifact
        ):
            return cfg
        data = cfg.model_dump(exclude_unset=True)
        for variant, itype in self.pin_instance_types.items():
            data["variants"][variant] = pinned_variant(data["variants"][variant], itype)
        if self.reset is not None:
            data.setdefault("deployment", {})["reset_on_update"] = list(self.reset)
        for name, tag in self.image_tags.items():
            if name:
                data["variants"][name]["image_tag"] = tag
            else:
                data["image"] = {**data.get("image", {}), "mode": "tag", "tag": tag}
        if self.model_artifact:
            data["model"]["artifact"] = self.model_artifact
        if LIVE_TAG in self.image_tags.values():
            raise ConfigError(
                f"image_tag: {LIVE_TAG!r} means the tag each variant runs now, which make deploy "
                "reads from the endpoint; make synth and make diff need the tag itself"
            )
        try:
            out = validate_config(data)
        except ValidationError as err:
            # the config's own file and lines, the options named: they made the values wrong
            found = [f"{line} (with the deploy options)" for line in error_lines(err.errors())]
            raise ConfigError(
                f"deploy options {self.as_context()} break the config:\n{cfg.error(found)}"
            ) from None
        if self.pin_instance_types:
            out = _rollback_threshold_for_pins(out, data)
        return out.with_source_of(cfg)


def pinned_variant(variant: dict[str, Any], placement: str) -> dict[str, Any]:
    """A variant's config data moved to ``placement`` (``VariantConfig.placement``: one type, or
    pool types by priority joined with ``+``). A pool type the config also lists keeps its
    ``engine`` settings (its own Model); the rest run the variant's engine."""
    types = placement.split("+")
    out = {k: v for k, v in variant.items() if k not in ("instance_pools", "instance_type")}
    out["instance_type"] = types[0]
    if len(types) > 1:
        engines = {
            p["instance_type"]: p["engine"]
            for p in variant.get("instance_pools") or []
            if p.get("engine")
        }
        out["instance_pools"] = [
            {"instance_type": t, "priority": i, **({"engine": engines[t]} if t in engines else {})}
            for i, t in enumerate(types, start=1)
        ]
    return out


def _rollback_threshold_for_pins(cfg: DeploymentConfig, data: dict[str, Any]) -> DeploymentConfig:
    """A deploy that keeps a variant on its live type (an instance-type change's first deploy)
    carries a rollback ModelLatency threshold that type's healthy fleet stays under: the config's
    threshold is set for the type it moves to, and a slower live type would roll the interim
    deploy back (synth refuses it: sizing.speed_plan.rollback_latency_problems). Raised, never
    lowered; the plan prints the threshold the deploy carries."""
    healthy = max(slowest_pool_p99(cfg, v)[0] for v in VARIANT_NAMES)
    need = math.ceil(healthy * ROLLBACK_LATENCY_HEADROOM / 1000) * 1000
    if cfg.deployment.rollback_model_latency_p99_ms >= need:
        return cfg
    data.setdefault("deployment", {})["rollback_model_latency_p99_ms"] = need
    return validate_config(data)
