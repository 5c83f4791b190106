"""What every config section shares: the strict base model, the error type, the variant names."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

#: Each field pattern's meaning in words (:func:`worded`): a value that does not match is
#: reported with these words and the value, never with the regular expression.
PATTERN_WORDS: dict[str, str] = {}


def worded(pattern: str, words: str) -> str:
    """``pattern``, registered with what a matching value looks like (``words`` completes "is
    not ..."): the loader's message for a mismatch (loader.error_lines)."""
    PATTERN_WORDS[pattern] = words
    return pattern


#: A resource-style name (schedules, releases, step policies): becomes part of AWS names.
NAME_PATTERN = worded(
    r"^[a-zA-Z][a-zA-Z0-9-]{0,62}$",
    "a name of up to 63 letters, digits and dashes starting with a letter, e.g. night-floor",
)

#: An environment's name (``config/<env>.yaml``, part of every stack and resource name).
ENV_PATTERN = worded(
    r"^[a-z][a-z0-9]{1,15}$",
    "an environment name: 2-16 lowercase letters and digits starting with a letter, e.g. staging",
)

#: The endpoint's two production variants; every per-variant mapping is keyed by these.
VariantName = Literal["primary", "canary"]
VARIANT_NAMES: tuple[VariantName, ...] = get_args(VariantName)


class ConfigError(ValueError):
    """A config file failed validation; the message names each offending YAML path."""


class Strict(BaseModel):
    """Unknown keys are errors (a typo fails synth instead of passing silently); frozen.

    Each field's docstring (the string right below it) is its description: pydantic's
    ``use_attribute_docstrings`` puts it in config/schema.json, where editors show it on hover,
    so the code's documentation and the editor's are one text (tests/infra/test_config_schema.py
    fails on a field without one)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, str_strip_whitespace=True, use_attribute_docstrings=True
    )

    @model_validator(mode="before")
    @classmethod
    def _empty_section_means_defaults(cls, data: Any) -> Any:
        """A section written with nothing under it (``model_prep:``, YAML null) where the field
        has a default and takes no null: the default, as if the key were left out."""
        if not isinstance(data, dict):
            return data
        empty = [k for k, v in data.items() if v is None and k in empty_means_default(cls)]
        return {k: v for k, v in data.items() if k not in empty} if empty else data


def empty_means_default(model: type[BaseModel]) -> list[str]:
    """``model``'s sections (a nested model, a list or a mapping) that have a default and take
    no null: written empty, each means its default (config/schema.json accepts null there)."""
    return [
        name
        for name, field in model.model_fields.items()
        if not field.is_required()
        and not _takes_none(field.annotation)
        and _is_section(field.annotation)
    ]


def _is_section(annotation: Any) -> bool:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (list, dict):
        return True
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _takes_none(annotation: Any) -> bool:
    """Whether a field's annotation accepts None (``X | None``, ``Optional[X]``)."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if annotation is None or annotation is type(None):
        return True
    if get_origin(annotation) in (Union, types.UnionType):
        return any(_takes_none(a) for a in get_args(annotation))
    return False


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
