"""tools/container_run.py as a user who is not root (issue 31: a GitHub-hosted runner's `runner`,
and .ci/run's user): the relay joins the container's network namespace, which needs root, so the
program runs itself again through IMAGE_AS_ROOT (make's AS_ROOT, `sudo -n`) before it listens or
starts a container, carrying the variables it reads past sudo's reset environment."""

from __future__ import annotations

import os
import shlex
import sys

import pytest

from tools import container_run

ENGINE = "podman --cgroup-manager=cgroupfs"


@pytest.fixture()
def runner(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(os, "geteuid", lambda: 1001)
    monkeypatch.setenv("IMAGE_AS_ROOT", "sudo -n ")
    monkeypatch.setenv("IMAGE_ENGINE_CMD", f"sudo -n {ENGINE}")
    monkeypatch.setenv("IMAGE_RUN_FLAGS", "--runtime runc --ulimit nproc=4096:4096")
    return monkeypatch


def test_a_non_root_user_execs_itself_through_sudo_before_anything_else(runner) -> None:
    seen: list[list[str]] = []

    def execvp(file: str, args: list[str]) -> None:
        seen.append(args)
        raise SystemExit(0)  # exec does not return

    def must_not_run(*_a: object, **_k: object) -> None:
        raise AssertionError("listened or started a container before it became root")

    runner.setattr(os, "execvp", execvp)
    runner.setattr(container_run, "listen", must_not_run)
    runner.setattr(container_run.subprocess, "Popen", must_not_run)
    argv = ["--image", "img:1", "--name", "n", "--host-port", "8099", "-e", "A=b c"]
    with pytest.raises(SystemExit):
        container_run.main(argv)
    assert seen == [[
        "sudo", "-n", "env", f"PYTHONPATH={container_run.REPO}", "PYTHONDONTWRITEBYTECODE=1",
        f"IMAGE_ENGINE_CMD={ENGINE}", "IMAGE_RUN_FLAGS=--runtime runc --ulimit nproc=4096:4096",
        sys.executable, "-m", "tools.container_run", *argv,
    ]]  # fmt: skip


def test_the_engine_keeps_a_prefix_that_is_not_the_root_one(runner) -> None:
    runner.setenv("IMAGE_ENGINE_CMD", "docker")
    cmd = container_run.as_root_command([])
    assert cmd is not None
    assert "IMAGE_ENGINE_CMD=docker" in cmd
    assert shlex.join(cmd).startswith("sudo -n env ")


def test_root_or_no_prefix_runs_in_place(runner) -> None:
    runner.setattr(os, "geteuid", lambda: 0)
    assert container_run.as_root_command(["--image", "x"]) is None
    runner.setattr(os, "geteuid", lambda: 1001)
    runner.setenv("IMAGE_AS_ROOT", "")
    assert container_run.as_root_command(["--image", "x"]) is None
