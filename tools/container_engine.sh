#!/usr/bin/env bash
# The container engine the image targets need, checked (and installed where it can be) before any
# other work: `make test` runs this first, `.ci/run` through `make test`, `make build-image` and
# `make run-image` through `image-engine`.
#
# - A Docker engine that answers `docker info` (a GitHub-hosted runner's): docker builds and runs
#   the images, and only debootstrap is needed (the CPU base's Debian root filesystem), unless
#   $DEBIAN_IMAGE is already there.
# - Otherwise podman (daemonless), runc (podman's runtime here: FACTS.md, crun fails where
#   CAP_SYS_RESOURCE is dropped) and debootstrap (the CPU base's Debian root filesystem) are needed.
#   Missing ones are installed from Debian's packages when this runs as root (or with passwordless
#   sudo) on a machine with apt-get. Otherwise it stops, exit 1, with the exact command to run:
#   minutes of venv and model work would otherwise end in "podman: command not found".
# - debootstrap itself needs root (it chroots and makes device nodes; debootstrap(8)): the
#   Makefile runs it as `sudo -n` when not root (AS_ROOT), so a non-root user without
#   passwordless sudo is stopped here, naming what to do, unless $DEBIAN_IMAGE is already there.
#
# CONTAINER_ENGINE_PACKAGES overrides the package list (tests); everything else is read from PATH.
set -euo pipefail

PACKAGES=(${CONTAINER_ENGINE_PACKAGES:-podman runc debootstrap})
say() { printf '[container engine] %s\n' "$*"; }
DEBIAN_IMAGE=${DEBIAN_IMAGE:-localhost/debian:bookworm}  # mk/serving_image.mk passes its own

if [[ "$(id -u)" == 0 ]]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then
    as_root=(sudo -n)
else
    as_root=(none)
fi

# The Debian image the CPU base starts from, already in the engine: debootstrap is not needed.
debian_present() {
    "$1" image inspect "$DEBIAN_IMAGE" >/dev/null 2>&1
}

# debootstrap runs as root (the Makefile's AS_ROOT): refuse a user who cannot become root.
need_root_for_debootstrap() {
    if [[ "${as_root[*]-}" == none ]] && ! debian_present "$1"; then
        say "debootstrap (the CPU base's Debian root filesystem, make debian-image) needs root," >&2
        say "and this user is not root and has no passwordless sudo. Run make as root, allow" >&2
        say "\`sudo -n debootstrap\`, or import a Debian bookworm image as $DEBIAN_IMAGE." >&2
        exit 1
    fi
}

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    if debian_present docker; then
        say "a Docker engine answers and ${DEBIAN_IMAGE} is there: the image targets use docker"
        exit 0
    fi
    if command -v debootstrap >/dev/null 2>&1; then
        need_root_for_debootstrap docker
        say "a Docker engine answers: the image targets use docker (debootstrap$( ((${#as_root[@]})) && echo ' under sudo'))"
        exit 0
    fi
    say "a Docker engine answers: the image targets use docker; debootstrap is needed too"
    PACKAGES=(debootstrap)
    engine=docker
fi

missing=()
for tool in "${PACKAGES[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if ((${#missing[@]} == 0)); then
    need_root_for_debootstrap podman
    say "no Docker engine answers; podman is installed: $(podman --version 2>/dev/null || echo '?')"
    exit 0
fi

install_cmd="apt-get install -y ${missing[*]}"
if ! command -v apt-get >/dev/null 2>&1 || [[ "${as_root[*]-}" == none ]]; then
    {
        if [[ "${engine:-}" == docker ]]; then
            say "a Docker engine answers, and these are missing: ${missing[*]}"
            say "the image tests (make test-image) start from a Debian root filesystem (debootstrap)."
        else
            say "no Docker engine answers and these are missing: ${missing[*]}"
            say "the image tests (make test-image) build and run the serving image with podman."
        fi
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
if [[ "${engine:-}" == docker ]]; then
    say "installed: ${missing[*]}; the image targets use docker"
else
    say "installed: $(podman --version 2>/dev/null || echo "${missing[*]}")"
fi
