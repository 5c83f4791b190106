#!/usr/bin/env bash
# The container engine the image targets need, checked (and installed where it can be) before any
# other work: `make test` runs this first, `.ci/run` through `make test`, `make build-image` and
# `make run-image` through `image-engine`.
#
# - A Docker engine that answers `docker info`: nothing to do.
# - Otherwise podman (daemonless), runc (podman's runtime here: FACTS.md, crun fails where
#   CAP_SYS_RESOURCE is dropped) and debootstrap (the CPU base's Debian root filesystem) are needed.
#   Missing ones are installed from Debian's packages when this runs as root (or with passwordless
#   sudo) on a machine with apt-get. Otherwise it stops, exit 1, with the exact command to run:
#   minutes of venv and model work would otherwise end in "podman: command not found".
#
# CONTAINER_ENGINE_PACKAGES overrides the package list (tests); everything else is read from PATH.
set -euo pipefail

PACKAGES=(${CONTAINER_ENGINE_PACKAGES:-podman runc debootstrap})
say() { printf '[container engine] %s\n' "$*"; }

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    say "a Docker engine answers: the image targets use docker"
    exit 0
fi

missing=()
for tool in "${PACKAGES[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]} == 0)); then
    say "no Docker engine answers; podman is installed: $(podman --version 2>/dev/null || echo '?')"
    exit 0
fi

install_cmd="apt-get install -y ${missing[*]}"
if [[ "$(id -u)" == 0 ]]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
    as_root=(sudo -n)
else
    as_root=(none)
fi
if ! command -v apt-get >/dev/null 2>&1 || [[ "${as_root[*]-}" == none ]]; then
    {
        say "no Docker engine answers and these are missing: ${missing[*]}"
        say "the image tests (make test-image) build and run the serving image with podman."
        if command -v apt-get >/dev/null 2>&1; then
            say "install them first (needs root), then run make again:"
            say "    sudo apt-get update && sudo $install_cmd"
        else
            say "install them with your system's package manager (or start a Docker engine), then"
            say "run make again. On Debian/Ubuntu: sudo apt-get update && sudo $install_cmd"
        fi
    } >&2
    exit 1
fi

say "no Docker engine answers: installing ${missing[*]} from Debian's packages (once)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
export DEBIAN_FRONTEND=noninteractive
if ! { "${as_root[@]}" apt-get update -qq && "${as_root[@]}" apt-get install -y -qq "${missing[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    say "installing ${missing[*]} failed (apt-get's output above); install them and run make again:" >&2
    say "    sudo apt-get update && sudo $install_cmd" >&2
    exit 1
fi
still=()
for tool in "${missing[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || still+=("$tool")
done
if ((${#still[@]})); then
    say "apt-get finished but these are still not on PATH: ${still[*]}" >&2
    exit 1
fi
say "installed: $(podman --version 2>/dev/null || echo "${missing[*]}")"
