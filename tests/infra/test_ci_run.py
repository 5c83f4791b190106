"""`.ci/run` rehearses the pull-request job on a GitHub-hosted runner (issue 31): as root it only
installs, creates the unprivileged user with passwordless sudo and checks the disk; the README's
test command and the linters run once, as that user, so a step that silently needs root fails
here first.

The real script runs on a copy of itself in a scratch clone, with a PATH of its own: fakes of the
commands that change the machine (useradd, install into /etc/sudoers.d, chown, runuser, make,
podman, the container engine check) record their calls, and links to the real tools it reads
with. The fake runuser does what `runuser -l USER -c COMMAND` does to the environment: it starts
the command with the user's login environment only (HOME, and a login PATH of its own that holds
none of root's PATH's other directories, as Debian's has no /usr/sbin); the fake make records as
whom it ran and the whole environment it got."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.infra.fake_tools import fake, link_real

REPO = Path(__file__).resolve().parents[2]
CI_RUN = REPO / ".ci" / "run"
REAL_TOOLS = ("bash", "env", "awk", "tr", "grep", "paste", "cut", "mktemp", "rm", "dirname",
              "cat", "df", "touch", "cp", "mkdir", "printenv")  # fmt: skip


@pytest.fixture()
def machine(tmp_path: Path):
    clone = tmp_path / "clone"
    (clone / ".ci").mkdir(parents=True)
    (clone / "tools").mkdir()
    shutil.copy(CI_RUN, clone / ".ci" / "run")
    (clone / "tools" / "container_engine.sh").write_text('echo "container_engine.sh" >> "$CALLS"\n')
    bin_dir, state, root_home = tmp_path / "bin", tmp_path / "state", tmp_path / "roothome"
    root_only = tmp_path / "sbin"  # on root's PATH, not on a user's login PATH
    for d in (bin_dir, state, root_home / ".pyenv" / "shims", root_only):
        d.mkdir(parents=True)
    link_real(bin_dir, REAL_TOOLS)
    calls = tmp_path / "calls"
    calls.touch()
    fakes = {
        "id": 'if [[ "$*" == -u ]]; then echo "$FAKE_UID"; '
        'elif [[ -f "$STATE/user-$2" ]]; then echo 1001; else exit 1; fi',
        "useradd": 'touch "$STATE/user-${!#}" && mkdir -p "$STATE/../home-${!#}"',
        "visudo": "exit 0",
        "install": 'cp "${@: -2:1}" "$STATE/sudoers"',
        "getent": f'echo "$2:x:1001:1001::{tmp_path}/home-$2:/bin/bash"',
        "runuser": '[[ "$1" == -l && "$3" == -c && $# == 4 ]] || exit 64; '
        'exec env -i RUNAS="$2" HOME="$STATE/../home-$2" PATH="$LOGIN_PATH" CALLS="$CALLS" '
        'STATE="$STATE" FAKE_CLOSED="${FAKE_CLOSED:-}" bash -c "$4"',
        "chown": "exit 0",
        "stat": "echo 0:0",
        "sudo": "exit 0",
        "apt-get": "exit 0",
        "podman": f"echo {tmp_path}",
        "python3.11": "echo Python 3.11.2",
        "test": '[[ -z "${FAKE_CLOSED:-}" ]]',
        "make": 'echo "make as=${RUNAS:-root} PYENV_ROOT=${PYENV_ROOT-unset} PATH=$PATH"'
        ' >> "$CALLS"; echo "make in $PWD" >> "$CALLS"; env > "$STATE/make-env"',
    }
    for name, body in fakes.items():
        fake(bin_dir, name, body)

    def run(*, uid: int = 0, **extra: str) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": f"{root_home}/.pyenv/shims:{bin_dir}:{root_only}", "CALLS": str(calls),
            "STATE": str(state), "HOME": str(root_home), "FAKE_UID": str(uid),
            "LOGIN_PATH": str(bin_dir), "PYENV_ROOT": f"{root_home}/.pyenv",
            "PIP_FIND_LINKS": "/opt/wheels", **extra,
        }  # fmt: skip
        return subprocess.run(
            [str(bin_dir / "bash"), str(clone / ".ci" / "run")], env=env, capture_output=True,
            text=True, timeout=60,
        )  # fmt: skip

    run.calls = calls  # type: ignore[attr-defined]
    run.state = state  # type: ignore[attr-defined]
    run.bin = bin_dir  # type: ignore[attr-defined]
    run.root_home = root_home  # type: ignore[attr-defined]
    run.root_only = root_only  # type: ignore[attr-defined]
    return run


def make_calls(calls: Path) -> list[str]:
    return [line for line in calls.read_text().splitlines() if line.startswith("make ")]


def test_the_suite_and_the_linters_run_once_as_the_unprivileged_user(machine) -> None:
    done = machine()
    assert done.returncode == 0, done.stderr
    calls = machine.calls.read_text().splitlines()
    # Only `make`'s record line (the fake's own `make ...` line is its argv).
    ran = [c for c in make_calls(machine.calls) if c.startswith("make as=")]
    assert len(ran) == 1, ran
    assert ran[0].startswith("make as=runner PYENV_ROOT=unset ")
    assert str(machine.root_home) not in ran[0]  # root's PATH entries are not the user's
    assert "make -k test lint" in calls
    runs = [c for c in calls if c.startswith("runuser ")]
    assert any(c.startswith("runuser -l runner -c cd ") and c.endswith(" make -k test lint")
               for c in runs), runs  # fmt: skip
    # Root did only root's part: the engine check, the user, its sudo, the clone's ownership.
    assert "container_engine.sh" in calls
    assert "useradd --create-home --shell /bin/bash runner" in calls
    assert (machine.state / "sudoers").read_text() == "runner ALL=(ALL) NOPASSWD:ALL\n"
    assert calls.index("chown -R runner: .") < calls.index("make -k test lint")
    assert calls[-1] == "chown -R 0:0 ."  # handed back to its owner


def test_a_second_run_reuses_the_user(machine) -> None:
    assert machine().returncode == 0
    machine.calls.write_text("")
    done = machine()
    assert done.returncode == 0, done.stderr
    assert not [c for c in machine.calls.read_text().splitlines() if c.startswith("useradd")]


def test_the_suite_s_failure_is_the_run_s_failure(machine) -> None:
    fake(machine.bin, "make", "exit 2")
    done = machine()
    assert done.returncode == 2
    assert machine.calls.read_text().splitlines()[-1] == "chown -R 0:0 ."


def test_it_refuses_to_run_as_another_user_or_to_use_root(machine) -> None:
    done = machine(uid=1000)
    assert done.returncode == 1
    assert "runs as root" in done.stderr
    done = machine(CI_USER="root")
    assert done.returncode == 1
    assert "CI_USER=root" in done.stderr
    assert not make_calls(machine.calls)


def test_a_clone_the_user_cannot_reach_runs_from_a_copy_in_its_home(machine, tmp_path) -> None:
    done = machine(FAKE_CLOSED="1")
    assert done.returncode == 0, done.stderr
    assert "running on a copy in" in done.stdout
    copy = tmp_path / "home-runner" / "ci-clone"
    assert (copy / ".ci" / "run").is_file()
    calls = machine.calls.read_text().splitlines()
    assert f"make in {copy}" in calls
    assert f"chown -R runner: {copy}" in calls
    assert "chown -R runner: ." not in calls  # the original clone is left as it was


def test_root_s_pip_and_npm_settings_reach_the_user(machine, tmp_path) -> None:
    pip_conf = machine.root_home / ".config" / "pip" / "pip.conf"
    pip_conf.parent.mkdir(parents=True)
    pip_conf.write_text("[global]\nextra-index-url = file:///opt/pypi/simple\n")
    done = machine()
    assert done.returncode == 0, done.stderr
    home = tmp_path / "home-runner"
    calls = machine.calls.read_text().splitlines()
    assert f"install -m 0644 -o runner {pip_conf} {home}/.config/pip/pip.conf" in calls
    assert (home / ".config" / "pip").is_dir()  # made as the user, before the copy
    assert not any(".npmrc" in c for c in calls)  # root has none: nothing given


def make_env(state: Path) -> dict[str, str]:
    lines = (state / "make-env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_make_runs_in_the_user_s_login_environment_not_one_made_from_root_s(machine) -> None:
    """Issue 47: CI ran make with root's environment less what pointed into root's home, so root's
    /usr/sbin stayed on the user's PATH and a Debian user's missing debootstrap passed CI. Now the
    user's login environment (runuser -l) is the base: root's PATH and variables do not reach it,
    except how the machine reaches registries (CA bundle, proxy, pip's settings), never a value
    inside root's home."""
    done = machine(
        NODE_EXTRA_CA_CERTS="/etc/ssl/certs/ca-certificates.crt", https_proxy="http://proxy:3128",
        PIP_CONFIG_FILE=f"{machine.root_home}/pip.conf", VIRTUAL_ENV="/opt/rootvenv",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    env = make_env(machine.state)
    assert env["PATH"] == str(machine.bin)  # the login shell's: none of root's sbin
    assert env["HOME"].endswith("/home-runner")
    assert env["PIP_FIND_LINKS"] == "/opt/wheels"
    assert env["NODE_EXTRA_CA_CERTS"] == "/etc/ssl/certs/ca-certificates.crt"
    assert env["https_proxy"] == "http://proxy:3128"
    for name in ("PIP_CONFIG_FILE", "VIRTUAL_ENV", "PYENV_ROOT", "FAKE_UID"):
        assert name not in env, name
    assert "from root's: " in done.stdout and "PIP_FIND_LINKS" in done.stdout
