"""`tools/container_engine.sh`, the first thing `make test` runs: without a Docker engine it needs
podman, runc and debootstrap, installs them when it runs as root on a machine with apt-get, and
otherwise stops at once with the exact command (a fresh machine once failed minutes into
`make test` with "podman: command not found", while CI, which installed podman, was green).

Each case runs the real script with a PATH of its own: fake `id`, `apt-get`, `sudo` and `docker`
that record their calls, and links to the few real tools the script uses. The system tool
directories it also looks in (/usr/sbin, ...) are one scratch `sbin` directory, off that PATH, as
/usr/sbin is off a non-root user's login PATH on Debian."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.infra.fake_tools import fake, link_real

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "container_engine.sh"
REAL_TOOLS = ("mktemp", "rm", "cat", "chmod", "touch")


@pytest.fixture()
def host(tmp_path: Path):
    bin_dir, sbin_dir = tmp_path / "bin", tmp_path / "sbin"
    bin_dir.mkdir()
    sbin_dir.mkdir()
    link_real(bin_dir, REAL_TOOLS)
    calls = tmp_path / "calls"
    calls.touch()

    def run(*, uid: int) -> subprocess.CompletedProcess[str]:
        fake(bin_dir, "id", f"echo {uid}")
        env = {
            "PATH": str(bin_dir), "SYSTEM_TOOL_DIRS": str(sbin_dir), "CALLS": str(calls),
            "HOME": str(tmp_path),
        }  # fmt: skip
        return subprocess.run(
            [shutil.which("bash") or "/bin/bash", str(SCRIPT)], env=env, capture_output=True,
            text=True, timeout=30,
        )  # fmt: skip

    run.bin = bin_dir  # type: ignore[attr-defined]
    run.sbin = sbin_dir  # type: ignore[attr-defined]
    run.calls = calls  # type: ignore[attr-defined]
    return run


def passwordless_sudo(host) -> None:
    """`sudo -n true` answers, and `sudo -n CMD` runs CMD (recorded by its own fake)."""
    fake(host.bin, "sudo", 'if [[ "$2" == true ]]; then exit 0; fi; shift; "$@"')


def test_without_root_it_stops_with_the_exact_install_command_and_installs_nothing(host) -> None:
    fake(host.bin, "apt-get", "exit 0")
    done = host(uid=1000)
    assert done.returncode == 1
    assert "missing: podman runc debootstrap" in done.stderr
    assert "sudo apt-get update && sudo apt-get install -y podman runc debootstrap" in done.stderr
    assert "apt-get" not in host.calls.read_text()


def test_only_the_missing_tools_are_named(host) -> None:
    fake(host.bin, "apt-get", "exit 0")
    fake(host.bin, "runc", "exit 0")
    done = host(uid=1000)
    assert done.returncode == 1
    assert "sudo apt-get install -y podman debootstrap" in done.stderr


def test_as_root_it_installs_the_missing_tools_with_apt_get(host) -> None:
    # The fake apt-get "installs" by creating the tools it was asked for.
    fake(
        host.bin, "apt-get",
        'if [[ "$1" == install ]]; then for t in "${@:4}"; do\n'
        f'  printf "#!/bin/bash\\necho %s 4.3.1\\n" "$t" > {host.bin}/"$t"\n'
        f'  chmod +x {host.bin}/"$t"\n'
        "done; fi",
    )  # fmt: skip
    done = host(uid=0)
    assert done.returncode == 0, done.stderr
    assert host.calls.read_text().splitlines() == [
        "id -u", "apt-get update -qq", "apt-get install -y -qq podman runc debootstrap",
    ]  # fmt: skip
    assert (host.bin / "podman").exists()
    assert "installed: podman 4.3.1" in done.stdout


def test_passwordless_sudo_is_used_when_not_root(host) -> None:
    fake(host.bin, "apt-get", "exit 0")
    passwordless_sudo(host)
    done = host(uid=1000)
    # apt-get "succeeded" but installed nothing: named, not reported as installed.
    assert done.returncode == 1
    assert f"still not found (PATH, then {host.sbin}): podman runc debootstrap" in done.stderr
    assert "sudo -n apt-get install -y -qq podman runc debootstrap" in host.calls.read_text()


def test_tools_apt_get_puts_off_a_non_root_login_path_are_found_in_sbin(host) -> None:
    """Issue 47: on Debian, apt-get installs debootstrap (and runc) in /usr/sbin, which a non-root
    user's login PATH does not hold: `make test` as such a user stopped at "apt-get finished but
    these are still not on PATH: debootstrap". The fake apt-get installs as Debian's does: podman
    beside the PATH's tools, runc and debootstrap only in the sbin directory."""
    fake(
        host.bin, "apt-get",
        'if [[ "$1" == install ]]; then\n'
        f'  printf "#!/bin/bash\\necho podman 4.3.1\\n" > {host.bin}/podman\n'
        f'  for t in runc debootstrap; do printf "#!/bin/bash\\n" > {host.sbin}/"$t"; done\n'
        f"  chmod +x {host.bin}/podman {host.sbin}/*\n"
        "fi",
    )  # fmt: skip
    passwordless_sudo(host)
    done = host(uid=1000)
    assert done.returncode == 0, done.stderr
    assert "sudo -n apt-get install -y -qq podman runc debootstrap" in host.calls.read_text()
    assert "installed: podman 4.3.1" in done.stdout
    # A second run finds all three where they are: nothing installed again.
    host.calls.write_text("")
    done = host(uid=1000)
    assert done.returncode == 0, done.stderr
    assert "podman is installed, run as root through sudo -n" in done.stdout
    assert "apt-get" not in host.calls.read_text()


def test_a_hosted_runner_s_debootstrap_in_sbin_is_not_installed_again(host) -> None:
    """The docker path: a debootstrap that is only in the sbin directory counts as there."""
    no_debian_image(host)
    fake(host.sbin, "debootstrap", "exit 0")
    passwordless_sudo(host)
    done = host(uid=1001)
    assert done.returncode == 0, done.stderr
    assert "the image targets use docker (debootstrap under sudo)" in done.stdout
    assert "apt-get" not in host.calls.read_text()


def test_a_failing_apt_get_shows_its_output_and_the_command(host) -> None:
    fake(host.bin, "apt-get", 'echo "E: Unable to locate package podman" >&2; exit 100')
    done = host(uid=0)
    assert done.returncode == 1
    assert "E: Unable to locate package podman" in done.stderr
    assert "sudo apt-get update && sudo apt-get install -y podman runc debootstrap" in done.stderr


def test_a_docker_engine_with_the_debian_image_needs_nothing_else(host) -> None:
    fake(host.bin, "docker", "exit 0")  # `docker info` and `docker image inspect` answer
    done = host(uid=1000)
    assert done.returncode == 0, done.stderr
    assert host.calls.read_text().splitlines() == [
        "id -u", "docker info", "docker image inspect localhost/debian:bookworm",
    ]  # fmt: skip


def no_debian_image(host) -> None:
    fake(host.bin, "docker", 'if [[ "$1" == image ]]; then exit 1; fi; exit 0')


def test_a_hosted_runner_gets_debootstrap_through_its_passwordless_sudo(host) -> None:
    """Issue 31: a GitHub-hosted runner answers `docker info` and runs as a non-root user with
    passwordless sudo, and has no debootstrap: installed with sudo -n, not skipped."""
    no_debian_image(host)
    fake(
        host.bin, "apt-get",
        f'if [[ "$1" == install ]]; then printf "#!/bin/bash\\n" > {host.bin}/debootstrap; '
        f"chmod +x {host.bin}/debootstrap; fi",
    )  # fmt: skip
    passwordless_sudo(host)
    done = host(uid=1001)
    assert done.returncode == 0, done.stderr
    assert "sudo -n apt-get install -y -qq debootstrap" in host.calls.read_text()
    assert "installed: debootstrap; the image targets use docker" in done.stdout


def test_a_non_root_user_without_sudo_is_stopped_before_debootstrap_would_refuse(host) -> None:
    no_debian_image(host)
    fake(host.bin, "debootstrap", "exit 0")
    done = host(uid=1001)
    assert done.returncode == 1
    assert "debootstrap (the CPU base's Debian root filesystem, make debian-image) needs root" in (
        done.stderr
    )
    assert "debootstrap" not in host.calls.read_text()  # never run unelevated


def test_make_test_runs_the_check_before_any_test_target() -> None:
    """Serial make builds prerequisites left to right: the check is the first of `test`'s."""
    out = subprocess.run(
        ["make", "-pn", "--no-print-directory", "help"], cwd=REPO, capture_output=True,
        text=True, env={**os.environ, "MAKEFLAGS": ""},
    ).stdout  # fmt: skip
    test_rule = next(line for line in out.splitlines() if line.startswith("test: "))
    prereqs = test_rule.split(":", 1)[1].split()
    assert prereqs[0] == "container-engine"
    assert {"test-infra", "test-serving", "test-image"} <= set(prereqs[1:])


def test_podman_as_a_non_root_user_runs_through_passwordless_sudo(host) -> None:
    """Issue 31: the image targets run podman as root (mk/serving_image.mk's AS_ROOT: the relay
    into the container needs root, and build and run share root's store); a user with
    passwordless sudo, like .ci/run's and a hosted runner's, passes and is told so."""
    for tool in ("podman", "runc", "debootstrap"):
        fake(host.bin, tool, "exit 0")
    passwordless_sudo(host)
    done = host(uid=1001)
    assert done.returncode == 0, done.stderr
    assert "podman is installed, run as root through sudo -n" in done.stdout


def test_podman_without_root_or_sudo_stops_before_any_image_work(host) -> None:
    for tool in ("podman", "runc", "debootstrap"):
        fake(host.bin, tool, "exit 0")
    done = host(uid=1001)
    assert done.returncode == 1
    assert "podman (the image targets run it as root" in done.stderr
    assert "no passwordless sudo" in done.stderr
    assert host.calls.read_text().splitlines() == ["id -u"]  # podman itself never ran


def test_docker_without_sudo_is_told_the_relay_will_need_root(host) -> None:
    fake(host.bin, "docker", "exit 0")
    done = host(uid=1001)
    assert done.returncode == 0, done.stderr
    assert "relay into the container's network namespace, which needs root" in done.stderr


def test_make_calls_debootstrap_by_its_path_in_sbin_whatever_the_caller_s_path(
    tmp_path: Path,
) -> None:
    """Issue 47: mk/serving_image.mk's debian-image runs debootstrap by the full path it finds on
    PATH and then in the system tool directories, so a non-root user's login PATH (Debian's, no
    sbin) and a sudo without secure_path both reach it."""
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    fake(sbin, "debootstrap", "exit 0")
    out = subprocess.run(
        ["make", "-n", "--no-print-directory", "debian-image", "EUID=1000",
         f"SYSTEM_TOOL_DIRS={sbin}", "-o", "image-engine", "-o", "container-engine"],
        cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "MAKEFLAGS": "", "PATH": "/usr/local/bin:/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"sudo -n {sbin}/debootstrap --variant=minbase bookworm" in out.stdout
