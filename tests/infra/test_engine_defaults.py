"""The deployment config's engine defaults are the serving container's defaults: one definition
(container/serving/settings.py), read by spec through ``engine_default``."""

from __future__ import annotations

import pytest

from container.serving import settings
from typed_config import ContextBudget, EngineConfig


def _config_default(path: str) -> object:
    model, field = (ContextBudget, path.split(".")[1]) if "." in path else (EngineConfig, path)
    return model.model_fields[field].default


@pytest.mark.parametrize("path", list(settings.ENGINE_FIELDS))
def test_engine_config_default_is_the_container_default(path: str) -> None:
    assert _config_default(path) == settings.engine_default(path)


def test_each_engine_field_maps_to_the_variable_the_stack_sets_from_it(prod_cfg) -> None:
    from stacks.constructs.endpoint import container_environment

    env = container_environment(prod_cfg, "primary")
    for path, field in settings.ENGINE_FIELDS.items():
        value = prod_cfg.engine
        for part in path.split("."):
            value = getattr(value, part)
        assert env[field.upper()] == (str(value).lower() if isinstance(value, bool) else str(value))


def test_a_field_the_container_does_not_read_is_refused() -> None:
    with pytest.raises(KeyError):
        settings.engine_default("typical_prompt_tokens")
