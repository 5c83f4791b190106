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
# - What needs root runs through mk/serving_image.mk's AS_ROOT (`sudo -n` when make is not root;
#   that file says why each one): debootstrap (it chroots and makes device nodes; debootstrap(8)),
#   every podman call (rootful: the relay into the container's network namespace needs root, and
#   one store serves build and run), and tools/container_run.py's relay. So a non-root user
#   without passwordless sudo is stopped here, naming what to do: always on the podman path;
#   with docker, only when debootstrap must run ($DEBIAN_IMAGE is not there yet), and told that
#   run-image and test-image will stop at the relay.
#
# - The tools are looked up on PATH and then where distributions install system tools
#   ($SYSTEM_TOOL_DIRS): Debian's apt-get puts debootstrap (and runc) in /usr/sbin, which a
#   non-root user's login PATH on Debian does not hold (/etc/login.defs' ENV_PATH; Ubuntu's does),
#   so an install as such a user once ended in "still not on PATH: debootstrap" (issue 47).
#   mk/serving_image.mk calls debootstrap by the path found the same way.
#
# CONTAINER_ENGINE_PACKAGES overrides the package list and SYSTEM_TOOL_DIRS the system tool
# directories (tests); everything else is read from PATH.
set -euo pipefail

SYSTEM_TOOL_DIRS=${SYSTEM_TOOL_DIRS-/usr/local/sbin:/usr/sbin:/sbin}
PATH="$PATH${SYSTEM_TOOL_DIRS:+:$SYSTEM_TOOL_DIRS}"

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

no_root() { [[ "${as_root[*]-}" == none ]]; }

# The Debian image the CPU base starts from, already in docker: debootstrap is not needed. (On the
# podman path root is needed anyway, and the Makefile's debian-image looks in root's store.)
debian_present() {
    docker image inspect "$DEBIAN_IMAGE" >/dev/null 2>&1
}

stop_without_root() {
    say "$1 needs root, and this user is not root and has no passwordless sudo." >&2
    say "Run make as root, or as a user who may run \`sudo -n\` (a GitHub-hosted runner's may)$2." >&2
    exit 1
}

# debootstrap runs as root (the Makefile's AS_ROOT): refuse a user who cannot become root.
need_root_for_debootstrap() {
    if no_root && ! debian_present; then
        stop_without_root "debootstrap (the CPU base's Debian root filesystem, make debian-image)" \
            ", or import a Debian bookworm image as $DEBIAN_IMAGE"
    fi
}

# With docker, building needs no root once the Debian image is there; the relay still does.
note_relay_needs_root() {
    if no_root; then
        say "note: make run-image and make test-image relay into the container's network" \
            "namespace, which needs root: without passwordless sudo they stop there" >&2
    fi
}

# podman runs as root (the Makefile's AS_ROOT; mk/serving_image.mk says why): refuse a user who
# cannot become root.
need_root_for_podman() {
    if no_root; then
        stop_without_root "podman (the image targets run it as root, with the relay into the container)" \
            ", or start a Docker engine"
    fi
}

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    if debian_present; then
        say "a Docker engine answers and ${DEBIAN_IMAGE} is there: the image targets use docker"
        note_relay_needs_root
        exit 0
    fi
    if command -v debootstrap >/dev/null 2>&1; then
        need_root_for_debootstrap
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
    need_root_for_podman
    say "no Docker engine answers; podman is installed, run as root$( ((${#as_root[@]})) && echo ' through sudo -n'):" \
        "$(podman --version 2>/dev/null || echo '?')"
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
    say "apt-get finished but these are still not found (PATH, then ${SYSTEM_TOOL_DIRS:-no other directory}): ${still[*]}" >&2
    exit 1
fi
if [[ "${engine:-}" == docker ]]; then
    say "installed: ${missing[*]}; the image targets use docker"
else
    say "installed: $(podman --version 2>/dev/null || echo "${missing[*]}")"
fi
