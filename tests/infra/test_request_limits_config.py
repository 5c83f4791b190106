"""Issue 11 in the deployment config: adapter names that could be paths fail synth, and the
request limits (413) reach the container through the Model's environment."""

from __future__ import annotations

import re

import pytest

from container.serving import settings
from stacks.constructs.endpoint import container_environment
from typed_config import ConfigError

from .conftest import parse


@pytest.mark.parametrize("name", ["../base", "/etc", "a/b", "..", "x.y", "-lead"])
def test_adapter_name_that_could_be_a_path_fails_naming_its_yaml_path(mutate, name) -> None:
    with pytest.raises(ConfigError) as err:
        parse(mutate("adapters.0.name", name))
    where = re.escape(f"adapters[{name}].name")
    assert re.search(
        rf"^  {where}( \(line \d+\))?: .* is not an adapter name: up to 63 letters",
        str(err.value),
        re.M,
    )


def test_config_adapter_names_are_within_the_image_rule() -> None:
    from container.model_prep.sources import ADAPTER_NAME
    from typed_config import _ADAPTER_NAME

    for name in ("manga_domain", "jp-style", "A1"):
        assert re.match(_ADAPTER_NAME, name) and ADAPTER_NAME.match(name)


@pytest.mark.parametrize(
    ("path", "value", "why"),
    [
        ("engine.max_request_bytes", 100, "greater than or equal to 1024"),
        ("engine.max_messages", 0, "greater than or equal to 1"),
    ],
)
def test_request_limits_are_validated(mutate, path, value, why) -> None:
    with pytest.raises(ConfigError) as err:
        parse(mutate(path, value))
    assert re.search(rf"^  {re.escape(path)}: .*{why}", str(err.value), re.M), str(err.value)


def test_request_limits_reach_the_container_settings(mutate) -> None:
    cfg = parse(mutate("engine.max_request_bytes", 4096))
    env = container_environment(cfg, "primary")
    assert env["MAX_REQUEST_BYTES"] == "4096" and env["MAX_MESSAGES"] == "1024"
    loaded = settings.load(env)
    assert loaded.max_request_bytes == 4096 and loaded.max_messages == 1024
