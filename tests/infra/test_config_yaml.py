"""A config file's YAML is read strictly (typed_config/yaml_source.py): a key written twice is an
error naming both lines (PyYAML keeps the last one silently: a second `smoke_gate:` block turned
the smoke gate off), and a syntax error names the file and the line, not "<unicode string>"."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sizing.fit_checks import load_config
from tests.fixtures import config_fixture
from typed_config import ConfigError
from typed_config.yaml_source import parse_yaml

from .conftest import REPO_ROOT


def _dev_with(tmp_path: Path, extra: str) -> tuple[Path, int]:
    text = (config_fixture("dev")).read_text()
    path = tmp_path / "dev.yaml"
    path.write_text(text.rstrip("\n") + "\n" + extra)
    return path, len(text.rstrip("\n").splitlines()) + 1


def _first_line_of(path: Path, key: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if line == f"{key}:")


def test_a_second_smoke_gate_block_is_refused_naming_both_lines(tmp_path) -> None:
    path, added = _dev_with(tmp_path, "smoke_gate:\n  enabled: false\n")
    first = _first_line_of(path, "smoke_gate")
    with pytest.raises(ConfigError) as err:
        load_config(path, env="dev")
    message = str(err.value)
    assert message.startswith(f"{path}, line {added}")
    assert f"duplicate key 'smoke_gate': first on line {first}, again on line {added}" in message


def test_a_duplicate_key_inside_a_section_is_refused(tmp_path) -> None:
    path = tmp_path / "dev.yaml"
    path.write_text(
        (config_fixture("dev")).read_text().replace(
            "smoke_gate:\n  enabled: true\n", "smoke_gate:\n  enabled: true\n  enabled: false\n"
        )
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"duplicate key 'enabled': first on line (\d+), again"):
        load_config(path, env="dev")


def test_a_merge_key_override_is_not_a_duplicate() -> None:
    """A key written beside a merge (`<<: *x`) overrides the merged one: what merges are for."""
    text = "base: &b {enabled: true, timeout: 5}\nsmoke_gate:\n  <<: *b\n  enabled: false\n"
    assert parse_yaml(text, source=Path("c.yaml"))["smoke_gate"] == {"enabled": False, "timeout": 5}


def test_a_syntax_error_names_the_file_and_line(tmp_path) -> None:
    path, added = _dev_with(tmp_path, "scaling:\n  variants: [primary\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env="dev")
    message = str(err.value)
    assert "<unicode string>" not in message
    assert message.startswith(f"{path}, line {added + 2}")
    assert "not valid YAML" in message


def test_the_simulator_refuses_the_duplicate_too(tmp_path) -> None:
    path, added = _dev_with(tmp_path, "smoke_gate:\n  enabled: false\n")
    done = subprocess.run(
        [sys.executable, "-m", "simulator", "capacity", "--config", str(path)], cwd=REPO_ROOT,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "duplicate key 'smoke_gate': first on line" in done.stderr
    assert f"again on line {added}" in done.stderr


# -- field errors a person fixes in one pass: the line, one error per typo, the key meant -----


def _prod_edited(tmp_path: Path, old: str, new: str) -> Path:
    text = (config_fixture("prod")).read_text()
    assert old in text
    path = tmp_path / "prod.yaml"
    path.write_text(text.replace(old, new, 1))
    return path


def _line_starting(path: Path, prefix: str) -> int:
    return next(
        i for i, line in enumerate(path.read_text().splitlines(), 1) if line.startswith(prefix)
    )


def _error(path: Path, env: str = "prod") -> list[str]:
    with pytest.raises(ConfigError) as err:
        load_config(path, env=env)
    return str(err.value).splitlines()


def test_a_misspelt_required_section_is_one_error_naming_the_key_meant_and_its_line(
    tmp_path,
) -> None:  # type: ignore[no-untyped-def]
    path = _prod_edited(tmp_path, "\nscaling:\n", "\nscalign:\n")
    lines = _error(path)
    line = _line_starting(path, "scalign:")
    assert lines[1:] == [
        f"  scalign (line {line}): unknown key; did you mean 'scaling'? (scaling is required)"
    ]
    assert lines[0].endswith("1 invalid value(s)")


def test_a_misspelt_optional_key_names_the_key_meant_and_its_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = _prod_edited(tmp_path, "  max_num_seqs:", "  max_num_seq:")
    line = _line_starting(path, "  max_num_seq:")
    assert _error(path)[1:] == [
        f"  engine.max_num_seq (line {line}): unknown key; did you mean 'max_num_seqs'?"
    ]


def test_a_key_like_no_other_stays_an_unknown_key(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = _prod_edited(tmp_path, "\nscaling:\n", "\nzzz_not_a_key: 1\nscaling:\n")
    (only,) = _error(path)[1:]
    assert only.startswith("  zzz_not_a_key (line ")
    assert "unknown key (check the spelling" in only
    assert "did you mean" not in only


def test_a_wrong_value_names_its_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = _prod_edited(tmp_path, "  max_num_seqs: 128", "  max_num_seqs: many")
    line = _line_starting(path, "  max_num_seqs:")
    (only,) = _error(path)[1:]
    assert only.startswith(f"  engine.max_num_seqs (line {line}): Input should be a valid integer")
