"""Fixtures shared by the infrastructure tests: configs and templates synthesized once.

The configs are the frozen ones under tests/fixtures/configs (tests/fixtures/__init__.py), not
config/*.yaml: a change to the shipped configs needs no test edit. ``prod_cfg`` and friends keep
their names (the frozen prod is today's prod's shape); a test of the shipped file itself uses
``shipped_cfg`` and asserts no figure."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk.assertions import Template

from sizing.deploy_options import DeployOptions
from sizing.fit_checks import load_config, parse_config
from stacks.app_builder import build_stacks, cdk_json_context
from tests.fixtures import CONFIG_DIR, config_fixture, shipped_path
from tests.infra.aws_calls import AWS_CALLS
from typed_config import ConfigError, DeploymentConfig
from typed_config.error_report import item_path

REPO_ROOT = Path(__file__).resolve().parents[2]


def pytest_configure(config: pytest.Config) -> None:
    """Every AWS call the release tools make in this suite, recorded for
    test_zz_authorization.py (tests/infra/aws_calls.py)."""
    AWS_CALLS.install()


def pytest_unconfigure(config: pytest.Config) -> None:
    AWS_CALLS.uninstall()


def load_env(env: str) -> DeploymentConfig:
    """The frozen ``<env>`` config (tests/fixtures/configs)."""
    return load_config(config_fixture(env), env=env)


def load_shipped(env: str) -> DeploymentConfig:
    """``config/<env>.yaml`` as shipped: for tests that check the shipped file passes, never for
    its figures."""
    return load_config(shipped_path(env), env=env)


def raw_config(env: str) -> dict[str, Any]:
    """The frozen ``<env>`` config as parsed YAML."""
    return yaml.safe_load(config_fixture(env).read_text())


def parse(raw: dict[str, Any], env: str = "prod") -> DeploymentConfig:
    return parse_config(raw, env=env, source=Path(f"config/{env}.yaml"), base_dir=CONFIG_DIR)


def invalid(path: str, value: Any, why: str, *, where: str | None = None) -> Any:
    """A case for :func:`assert_names_yaml_path`: prod.yaml with ``value`` at the dotted ``path``
    fails with a line naming ``where`` (default: ``path`` itself) and saying ``why``."""
    return pytest.param(path, value, where or path, why, id=path)


def assert_names_yaml_path(raw: dict[str, Any], where: str, why: str) -> None:
    """``raw`` is refused with an error line ``  <where>: ...<why>``, ``where`` a dotted path
    whose list items the message names as the file does (``schedules.0`` as
    ``schedules[jp-evening-peak]``: typed_config.error_report, whose own tests spell them out)."""
    with pytest.raises(ConfigError) as err:
        parse(raw)
    message = str(err.value)
    parts = [int(p) if p.isdigit() else p for p in where.split(".")]
    shown = item_path(parts, raw)
    assert re.search(rf"^  {re.escape(shown)}: .*{re.escape(why)}", message, re.M), message


def make_rule(target: str) -> str:
    """``target``'s rule in the Makefile, its rule line and recipe."""
    text = (REPO_ROOT / "Makefile").read_text()
    rule = re.search(rf"^{re.escape(target)}:.*?(?=^\S|\Z)", text, re.M | re.S)
    assert rule, f"no {target} target in the Makefile"
    return rule.group(0)


def synth_templates(
    cfg: DeploymentConfig, options: DeployOptions | None = None
) -> dict[str, Template]:
    app = cdk.App(context=cdk_json_context(REPO_ROOT))
    image, endpoint = build_stacks(app, cfg, options)
    return {"image": Template.from_stack(image), "endpoint": Template.from_stack(endpoint)}


@pytest.fixture(scope="session")
def prod_cfg() -> DeploymentConfig:
    return load_env("prod")


@pytest.fixture(scope="session")
def prod_templates(prod_cfg: DeploymentConfig) -> dict[str, Template]:
    return synth_templates(prod_cfg)


@pytest.fixture
def prod_raw() -> dict[str, Any]:
    return copy.deepcopy(raw_config("prod"))


@pytest.fixture
def mutate(prod_raw: dict[str, Any]) -> Callable[..., dict[str, Any]]:
    """Return a copy of prod.yaml with the value at a dotted path replaced (or deleted)."""

    def _mutate(path: str, value: Any = None, *, delete: bool = False) -> dict[str, Any]:
        raw = copy.deepcopy(prod_raw)
        node: Any = raw
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = value
        elif delete:
            del node[last]
        else:
            node[last] = value
        return raw

    return _mutate
