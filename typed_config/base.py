"""What every config section shares: the strict base model, the error type, the variant names."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

#: A resource-style name (schedules, releases, step policies): becomes part of AWS names.
NAME_PATTERN = r"^[a-zA-Z][a-zA-Z0-9-]{0,62}$"

#: The endpoint's two production variants; every per-variant mapping is keyed by these.
VariantName = Literal["primary", "canary"]
VARIANT_NAMES: tuple[VariantName, ...] = get_args(VariantName)


class ConfigError(ValueError):
    """A config file failed validation; the message names each offending YAML path."""


class Strict(BaseModel):
    """Unknown keys are errors (a typo fails synth instead of passing silently); frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


#: Validation-context key of the loader's second pass: rules within one section are skipped, so
#: the rules across sections (DeploymentConfig) run and report even when a section broke its own.
SECTION_RULES_OFF = "section_rules_off"


def section_rule(rule: Callable[[Any], Any]) -> Any:
    """``@model_validator(mode="after")`` for a rule within one config section, skipped in the
    loader's second pass (:data:`SECTION_RULES_OFF`): a section that breaks its own rule then
    still lets the rules across sections report theirs in the same run."""

    def checked(self: Any, info: ValidationInfo) -> Any:
        if info.context and info.context.get(SECTION_RULES_OFF):
            return self
        return rule(self)

    checked.__name__, checked.__qualname__ = rule.__name__, rule.__qualname__
    checked.__doc__ = rule.__doc__
    return model_validator(mode="after")(checked)


def report_all(*checks: Callable[[], None]) -> None:
    """Run every check; raise one ValueError with each failure on its own line (the loader
    reports each line with its own field), so one broken rule does not hide the next."""
    failures = []
    for check in checks:
        try:
            check()
        except ValueError as exc:
            failures.append(str(exc))
    if failures:
        raise ValueError("\n".join(failures))


def check_capacity_bounds(min_capacity: int, max_capacity: int) -> None:
    """A (min_capacity, max_capacity) pair must not be inverted."""
    if min_capacity > max_capacity:
        raise ValueError(f"min_capacity: {min_capacity} must be <= max_capacity ({max_capacity})")


def require_at_least(field: tuple[str, int], floor: tuple[str, int], otherwise: str) -> None:
    """``field`` (name, value) must be >= ``floor`` (name, value), or ``otherwise`` happens."""
    (name, value), (floor_name, floor_value) = field, floor
    if value < floor_value:
        raise ValueError(f"{name}: {value} must be >= {floor_name} ({floor_value}) or {otherwise}")
