"""`make new-env ENV=staging FROM=dev`: a new environment in one step, valid and distinct from its
source, never over an existing file; and a missing environment's error names that command."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sizing.fit_checks import load_config
from tools import new_env, synth
from typed_config import ConfigError, config_path

from .conftest import REPO_ROOT


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    """A checkout's config/ (dev and prod, the schema) to make environments in."""
    shutil.copytree(REPO_ROOT / "config", tmp_path / "config")
    return tmp_path


def test_new_env_writes_a_valid_config_with_its_own_names_and_the_comments_kept(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert new_env.main(["--env", "staging", "--from", "dev", "--root", str(root)]) == 0
    path = root / "config" / "staging.yaml"
    cfg = load_config(path, env="staging")
    dev = load_config(root / "config" / "dev.yaml", env="dev")
    assert (cfg.env, cfg.endpoint_name) == ("staging", "mangaassist-vllm-staging")
    assert cfg.image.repository_name == "mangaassist-vllm-staging"
    assert cfg.model == dev.model and cfg.variants == dev.variants and cfg.fleet == dev.fleet
    text = path.read_text()
    assert text.startswith("# yaml-language-server: $schema=./schema.json\n")
    assert "make new-env ENV=staging FROM=dev" in text.splitlines()[1]
    assert "# Meta-Llama-3 is gated on Hugging Face" in text  # the source's comments stay
    out = capsys.readouterr().out
    assert "wrote config/staging.yaml" in out and "make synth ENV=staging" in out


def test_new_env_refuses_to_overwrite_and_leaves_the_file_as_it_was(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = root / "config" / "staging.yaml"
    path.write_text("# mine\n")
    assert new_env.main(["--env", "staging", "--root", str(root)]) == 1
    assert path.read_text() == "# mine\n"
    assert "already exists; new-env never overwrites" in capsys.readouterr().err
    dev = (root / "config" / "dev.yaml").read_text()
    assert new_env.main(["--env", "dev", "--from", "prod", "--root", str(root)]) == 1
    assert (root / "config" / "dev.yaml").read_text() == dev


def test_new_env_from_an_unknown_environment_lists_the_ones_there_are(
    root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert new_env.main(["--env", "staging", "--from", "stage", "--root", str(root)]) == 1
    err = capsys.readouterr().err
    assert "no environment 'stage' to copy: FROM= one of dev, prod" in err
    assert not (root / "config" / "staging.yaml").exists()


def test_a_source_without_its_env_name_in_a_resource_name_gets_the_env_appended(
    root: Path,
) -> None:
    dev = root / "config" / "dev.yaml"
    text = dev.read_text().replace("mangaassist-vllm-dev", "chat")
    dev.write_text(
        text.replace("\nmodel_prep:\n", "\nmodel_prep:\n  artifact_bucket: chat-models\n")
    )
    new_env.new_env(root, env="qa", source_env="dev")
    cfg = load_config(root / "config" / "qa.yaml", env="qa")
    assert (cfg.endpoint_name, cfg.image.repository_name) == ("chat-qa", "chat-qa")
    assert cfg.model_prep.artifact_bucket == "chat-models-qa"  # a bucket name is global


def test_a_result_that_does_not_validate_is_not_written(root: Path) -> None:
    """prod promotes dev's releases; an environment named dev made from it would promote its
    own: refused with the loader's error, and no file."""
    (root / "config" / "dev.yaml").unlink()
    with pytest.raises(ConfigError, match=r"promotion.from_env.*cannot promote its own release"):
        new_env.new_env(root, env="dev", source_env="prod")
    assert not (root / "config" / "dev.yaml").exists()


def test_a_missing_environment_names_the_command_that_makes_it(root: Path) -> None:
    with pytest.raises(ConfigError) as err:
        config_path(root, "staging")
    message = str(err.value)
    assert "no environment 'staging' (config/ has dev, prod)" in message
    assert "make new-env ENV=staging FROM=dev" in message
    assert "docs/make-it-yours.md" in message and "No such file" not in message


def test_make_new_env_without_env_asks_for_one_instead_of_writing_dev() -> None:
    done = subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/.stamp", "-o", "build/node-shims/.stamp",
         "new-env"], cwd=REPO_ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2
    assert "name the new environment: make new-env ENV=staging FROM=dev" in done.stderr


def test_the_new_environment_synthesizes_and_plans(root: Path, tmp_path: Path) -> None:
    new_env.new_env(root, env="staging", source_env="dev")
    out = tmp_path / "out"
    path = root / "config" / "staging.yaml"
    assert synth.main(["--env", "staging", "--config", str(path), "--out", str(out)]) == 0
    plan = (out / "plan.json").read_text()
    assert "mangaassist-vllm-staging" in plan
    assert "mangaassist-staging-endpoint" in {p.name.split(".")[0] for p in out.glob("*.json")}
