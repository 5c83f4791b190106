"""tools.container_env: the container's environment and build args come from the stacks' own
functions (what the Model resource and the ImageStack use), not from a copy."""

from __future__ import annotations

from pathlib import Path

import pytest

from sizing.fit_checks import load_config
from stacks.constructs.endpoint import container_environment
from stacks.constructs.image import image_build_args
from tools import container_env
from typed_config import config_path

REPO = Path(__file__).resolve().parents[2]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = container_env.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_env_file_is_the_model_resources_environment_with_overrides_on_top(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cfg = load_config(config_path(REPO, "dev"), env="dev")
    code, out, _ = run(capsys, "--env", "dev", "--variant", "canary",
                       "--set", "SERVING_DEVICE=cpu", "--set", "DEFAULT_ADAPTER=")  # fmt: skip
    assert code == 0
    env = dict(line.split("=", 1) for line in out.splitlines())
    expected = {
        **container_environment(cfg, "canary"),
        "SERVING_DEVICE": "cpu",
        "DEFAULT_ADAPTER": "",
    }
    assert env == expected
    assert container_environment(cfg, "canary")["SERVING_DEVICE"] == "gpu"  # really overridden


def test_build_args_are_the_image_stacks(capsys: pytest.CaptureFixture[str]) -> None:
    cfg = load_config(config_path(REPO, "prod"), env="prod")
    code, out, _ = run(capsys, "--env", "prod", "--build-args")
    assert code == 0
    args = [line.removeprefix("--build-arg ") for line in out.splitlines()]
    assert dict(a.split("=", 1) for a in args) == image_build_args(cfg)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--env", "dev", "--set", "NO_EQUALS_SIGN"], "'NO_EQUALS_SIGN'"),
        (["--env", "dev", "--set", "BAD KEY=1"], "'BAD KEY=1'"),
        (["--env", "dev", "--set", "X=a\nb"], "newline"),
        (["--env", "nosuchenv"], "nosuchenv.yaml"),
        (["--env", "Bad_Env"], "Bad_Env"),
    ],
)
def test_bad_input_exits_1_naming_what_is_wrong(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 1 and out == ""
    assert named in err


def test_get_prints_the_one_variable_the_endpoints_container_gets(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cfg = load_config(config_path(REPO, "dev"), env="dev")
    assert cfg.default_adapter
    (tmp_path / "lora" / cfg.default_adapter).mkdir(parents=True)
    code, out, _ = run(capsys, "--env", "dev", "--get", "DEFAULT_ADAPTER",
                       "--among", str(tmp_path / "lora"))  # fmt: skip
    assert (code, out) == (0, f"{cfg.default_adapter}\n")
    code, out, err = run(capsys, "--env", "dev", "--get", "DEFAULT_ADAPTER",
                         "--among", str(tmp_path / "other"))  # fmt: skip
    assert (code, out) == (0, "\n")
    assert f"DEFAULT_ADAPTER '{cfg.default_adapter}' is not among the served model's" in err


def test_the_local_servers_answer_a_request_naming_no_adapter_with_the_endpoints_default(
    tmp_path: Path,
) -> None:
    """make serve-local, make demo-serve and make run-image give the server the DEFAULT_ADAPTER
    the endpoint's container gets (the one that answers a request naming none on SageMaker), so
    the local and the deployed answer agree; the shaping hook resolves it (ShapingConfig)."""
    import re
    import subprocess

    cfg = load_config(config_path(REPO, "dev"), env="dev")
    assert cfg.default_adapter
    (tmp_path / "lora" / cfg.default_adapter).mkdir(parents=True)
    (tmp_path / "manifest.json").write_text("{}")
    dry = subprocess.run(
        ["make", "-n", "--no-print-directory", "-o", ".venv/.stamp", "-o",
         "build/node-shims/.stamp", "-o", f"{tmp_path}/manifest.json", f"TINY_MODEL={tmp_path}",
         "ENV=dev", "serve-local", "demo-serve", "build/image/run-dev.env"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    lookups = re.findall(r'DEFAULT_ADAPTER="\$\((.*?)\)"', dry)
    assert len(lookups) == 3 and len(set(lookups)) == 1, dry
    value = subprocess.run(lookups[0], shell=True, cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.strip()  # fmt: skip
    assert value == cfg.default_adapter
