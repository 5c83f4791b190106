"""config/schema.json: current with the code, valid JSON Schema, named by every config file, and
as strict as the loader (unknown keys rejected; loader-set keys not offered)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from sizing.fit_checks import load_config, parse_config
from tests.fixtures import config_fixture
from tools import schema as schema_tool
from typed_config import ConfigError, DeploymentConfig
from typed_config.base import PATTERN_WORDS
from typed_config.model import ContextBudget, EngineConfig
from typed_config.model_catalog import KNOWN_MODELS

from .conftest import REPO_ROOT, parse, raw_config

MODELINE = "# yaml-language-server: $schema="
CONFIGS = sorted((REPO_ROOT / "config").rglob("*.yaml"))


@pytest.fixture(scope="module")
def committed() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(schema_tool.SCHEMA_PATH.read_text())
    return loaded


@pytest.fixture(scope="module")
def validator(committed: dict[str, Any]) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(committed)


def test_committed_schema_is_what_the_code_generates() -> None:
    assert schema_tool.SCHEMA_PATH.read_text() == schema_tool.render(), (
        "config/schema.json is out of date with typed_config/: "
        f"regenerate it with `.venv/bin/{schema_tool.REGENERATE}` and commit it"
    )


def test_check_mode_fails_on_a_stale_file_and_write_mode_fixes_it(tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    out.write_text("{}\n")
    assert schema_tool.main(["--check", "--out", str(out)]) == 1
    assert out.read_text() == "{}\n"
    assert schema_tool.main(["--out", str(out)]) == 0
    assert schema_tool.main(["--check", "--out", str(out)]) == 0
    assert out.read_text().endswith("}\n")


def test_schema_is_valid_draft_2020_12(committed: dict[str, Any]) -> None:
    assert committed["$schema"] == schema_tool.DIALECT
    jsonschema.Draft202012Validator.check_schema(committed)


def _objects(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [o for item in node for o in _objects(item)]
    if not isinstance(node, dict):
        return []
    found = [node] if "properties" in node else []
    return found + [o for value in node.values() for o in _objects(value)]


def test_every_object_forbids_unknown_keys_like_the_loader(committed: dict[str, Any]) -> None:
    objects = _objects(committed)
    assert len(objects) > 10
    loose = [o.get("title") for o in objects if o.get("additionalProperties") is not False]
    assert not loose, f"these sections accept unknown keys in the schema: {loose}"


def test_loader_set_keys_are_not_offered(committed: dict[str, Any]) -> None:
    assert "resolved_architecture" not in committed["properties"]
    assert "env" not in committed["required"]  # the loader fills it from the selected env


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_config_names_the_schema_and_is_valid_by_it_and_the_loader(
    path: Path, validator: jsonschema.Draft202012Validator
) -> None:
    first = path.read_text().splitlines()[0]
    assert first.startswith(MODELINE), f"{path}: first line must be {MODELINE}<relative path>"
    target = (path.parent / first.removeprefix(MODELINE)).resolve()
    assert target == schema_tool.SCHEMA_PATH
    raw = yaml.safe_load(path.read_text())
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(raw)]
    assert not errors
    assert load_config(path, env=raw["env"]).env == raw["env"]


@pytest.mark.parametrize(
    ("dotted", "value"),
    [("engien", {}), ("engine.max_num_seq", 64), ("scaling.varaints", {})],
)
def test_a_misspelt_key_fails_in_the_editor_and_in_the_loader(
    mutate: Any, validator: jsonschema.Draft202012Validator, dotted: str, value: Any
) -> None:
    raw = mutate(dotted, value)
    messages = [e.message for e in validator.iter_errors(raw)]
    assert any("Additional properties are not allowed" in m for m in messages), messages
    with pytest.raises(ConfigError, match=rf"{dotted}: unknown key"):
        parse(raw)


def _with_architecture_file(raw: dict[str, Any], tmp_path: Path, **change: int) -> dict[str, Any]:
    """``raw`` with its source's config.json (the catalog's figures, ``change`` applied) at
    ``tmp_path/config.json`` named by model.architecture_file; with ``change``, the source is
    one the catalog does not list (else the catalog refuses the file that contradicts it)."""
    arch = {**KNOWN_MODELS[raw["model"]["source"]].config, **change}
    (tmp_path / "config.json").write_text(json.dumps(arch))
    raw["model"]["architecture_file"] = "config.json"
    if change:
        raw["model"]["source"] = "hf://acme/llama-3-8b-finetune"
    return raw


def _parse_at(raw: dict[str, Any], tmp_path: Path) -> DeploymentConfig:
    return parse_config(raw, env="prod", source=tmp_path / "prod.yaml", base_dir=tmp_path)


def test_resolved_architecture_is_rejected_even_beside_an_architecture_file(
    prod_raw: dict[str, Any], tmp_path: Path
) -> None:
    """The loader hands the architecture from model.architecture_file over in the validation
    context; a file writing ``resolved_architecture`` is an unknown key like any other, not a
    value the loader silently takes or replaces."""
    raw = _with_architecture_file(prod_raw, tmp_path)
    assert _parse_at(raw, tmp_path).architecture == parse(raw_config("prod")).architecture
    raw["resolved_architecture"] = json.loads((tmp_path / "config.json").read_text())
    with pytest.raises(ConfigError, match=r"(?m)^  resolved_architecture: unknown key"):
        _parse_at(raw, tmp_path)


def test_architecture_file_reaches_the_cross_field_checks(
    prod_raw: dict[str, Any], tmp_path: Path
) -> None:
    raw = _with_architecture_file(prod_raw, tmp_path, max_position_embeddings=2048)
    with pytest.raises(ConfigError, match=r"engine.max_model_len: 4096 exceeds .* \(2048\)"):
        _parse_at(raw, tmp_path)


def test_a_dumped_config_revalidates_with_its_file_architecture(
    prod_raw: dict[str, Any], tmp_path: Path
) -> None:
    """deploy options and the simulator re-validate ``model_dump()`` without the loader."""
    cfg = _parse_at(_with_architecture_file(prod_raw, tmp_path), tmp_path)
    again = DeploymentConfig.model_validate(cfg.model_dump(exclude_unset=True))
    assert again.architecture == cfg.architecture
    assert again.model.architecture_file is None


def _properties(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every property of every object in the schema, with a readable path."""
    if isinstance(node, list):
        return [p for item in node for p in _properties(item, path)]
    if not isinstance(node, dict):
        return []
    found = [(f"{path}.{k}", v) for k, v in (node.get("properties") or {}).items()]
    return found + [p for k, v in node.items() for p in _properties(v, f"{path}/{k}")]


def test_every_field_has_a_description_for_the_editor(committed: dict[str, Any]) -> None:
    properties = _properties(committed)
    assert len(properties) > 200
    bare = [path for path, schema in properties if not schema.get("description", "").strip()]
    assert not bare, (
        "give each of these fields a docstring (the string right below the field in "
        f"typed_config/; pydantic's use_attribute_docstrings makes it the description): {bare}"
    )


def test_a_description_is_the_fields_docstring_with_its_default(committed: dict[str, Any]) -> None:
    """One source: the schema says what the code's docstring says, and shows the default."""
    region = committed["properties"]["region"]
    assert region["description"] == DeploymentConfig.model_fields["region"].description
    assert "us-east-1" in region["description"]
    engine = committed["$defs"]["EngineConfig"]["properties"]
    assert engine["max_model_len"]["default"] == EngineConfig().max_model_len
    assert "tokens" in engine["max_model_len"]["description"]
    timeout = committed["$defs"]["DeploymentPolicy"]["properties"]
    assert "Seconds" in timeout["termination_wait_seconds"]["description"]


def _patterns(node: Any) -> set[str]:
    if isinstance(node, list):
        return {p for item in node for p in _patterns(item)}
    if not isinstance(node, dict):
        return set()
    own = {node["pattern"]} if isinstance(node.get("pattern"), str) else set()
    return own | {p for v in node.values() for p in _patterns(v)}


def test_every_pattern_a_value_can_miss_is_explained_in_words(committed: dict[str, Any]) -> None:
    """A value that misses a field's pattern is told what a valid value looks like; the one
    pattern left out (deploy_access.repository) is checked by a validator with its own words."""
    from typed_config.deploy_access import _SCHEMA_REPOSITORY

    unworded = _patterns(committed) - PATTERN_WORDS.keys() - {_SCHEMA_REPOSITORY}
    assert not unworded, f"register these with typed_config.base.worded(): {unworded}"


@pytest.mark.parametrize(
    ("dotted", "value", "words"),
    [
        ("region", "us-east", "is not an AWS region code: two letters, a place and a digit, e.g. "
         "us-east-1"),
        ("model.source", "s3:/my-bucket/llama", "an S3 URI s3://<bucket>/<prefix>"),
        ("adapters.0.source", "s3://My_Bucket/lora", "e.g. s3://my-models/lora/support"),
        ("model_prep.artifact_bucket", "s3://models", "(a name, not an s3:// URI)"),
        ("model.artifact", "m-123", "a model release version (m- and 16 hex digits"),
    ],
)  # fmt: skip
def test_a_value_that_misses_its_pattern_is_told_what_a_valid_one_looks_like(
    mutate: Any, dotted: str, value: str, words: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse(mutate(dotted, value))
    message = str(err.value)
    assert f"{value!r} is not " in message and words in message
    assert "should match pattern" not in message and "^" not in message


@pytest.mark.parametrize("section", ["model_prep", "engine", "monitoring", "rollout"])
def test_an_empty_section_means_its_defaults(tmp_path: Path, section: str) -> None:
    """``model_prep:`` with nothing under it (YAML null) is the section left out, not "Input
    should be a valid dictionary"."""
    text = (config_fixture("dev")).read_text()
    raw = yaml.safe_load(text)
    source = raw["model"]["source"]
    raw["model"]["source"] = "local://models/base"  # not gated: model_prep's defaults hold
    (tmp_path / "models/base").mkdir(parents=True)  # its architecture, from its own config.json
    (tmp_path / "models/base/config.json").write_text(json.dumps(KNOWN_MODELS[source].config))
    raw.pop(section, None)
    expected = parse_config(raw, env="dev", source=tmp_path / "dev.yaml", base_dir=tmp_path)
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump({**raw, section: None}))
    assert f"\n{section}: null\n" in path.read_text()
    cfg = load_config(path, env="dev")
    assert getattr(cfg, section) == getattr(expected, section)


def test_a_nested_empty_section_means_its_defaults_and_a_null_that_means_none_stays(
    mutate: Any,
) -> None:
    assert parse(mutate("engine.context_budget", None)).engine.context_budget == ContextBudget()
    cfg = parse(mutate("scaling.variants.canary.target_tracking", None))
    assert cfg.scaling.variants["canary"].target_tracking is None  # null: no policy, as before


def test_the_editor_accepts_an_empty_section_as_the_loader_does(
    mutate: Any, validator: jsonschema.Draft202012Validator
) -> None:
    raw = mutate("model_prep", None)
    raw["engine"]["context_budget"] = None
    raw["adapters"][0]["rank"] = None  # a field, not a section: null stays an error in both
    messages = [".".join(map(str, e.path)) for e in validator.iter_errors(raw)]
    assert messages == ["adapters.0.rank"]
    with pytest.raises(ConfigError, match=r"(?m)^  adapters\[manga_domain\]\.rank: ") as err:
        parse(raw)
    assert "model_prep" not in str(err.value) and "context_budget" not in str(err.value)
