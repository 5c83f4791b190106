"""What every config section shares: the strict base model, the error type, the variant names."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict

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


def check_capacity_bounds(min_capacity: int, max_capacity: int) -> None:
    """A (min_capacity, max_capacity) pair must not be inverted."""
    if min_capacity > max_capacity:
        raise ValueError(f"min_capacity: {min_capacity} must be <= max_capacity ({max_capacity})")


def require_at_least(field: tuple[str, int], floor: tuple[str, int], otherwise: str) -> None:
    """``field`` (name, value) must be >= ``floor`` (name, value), or ``otherwise`` happens."""
    (name, value), (floor_name, floor_value) = field, floor
    if value < floor_value:
        raise ValueError(f"{name}: {value} must be >= {floor_name} ({floor_value}) or {otherwise}")
