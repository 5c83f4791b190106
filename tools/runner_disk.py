"""``make runner-disk ENV=...``: the release's image jobs check the runner's free disk first and
refuse, with the figure they need, before minutes of work end in "no space left on device".

What an image job writes (``dev``: the job image, the model release, the serving
image), from the figures the plan uses (sizing/scale_out_time.py ``image_terms``):

- the vLLM GPU base (``GPU_BASE_GB``, an assumption: its size cannot be measured without pulling
  it) twice: a pull keeps the compressed layers and unpacks them, and the unpacked base is not
  smaller than the compressed one;
- the model release (weights and adapters, computed from the architecture) three times: the
  verified download (build/model-artifacts), the build context BuildKit receives, the image
  layer it becomes;
- the product layers (measured) and the job image's quantization venv (:data:`JOB_IMAGE_GB`,
  an allowance), plus :data:`MARGIN_GB` for logs, caches and the CDK's output.

GitHub-hosted ``ubuntu-24.04`` runners have "14 GB of SSD" (GitHub docs, "GitHub-hosted runners
reference", standard runners for public repositories; free space is less): far below it, hence
``IMAGE_RUNNER`` (docs/release-from-ci.md). Free space is read (``shutil.disk_usage``) where the
build writes: the working directory and Docker's data root (``docker info``'s DockerRootDir, or
/var/lib/docker). Exit 2 with a ``::error`` annotation naming the figure; 0 otherwise.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from sizing.fit_checks import load_config
from sizing.scale_out_time import GPU_BASE_GB, image_terms
from tools import REPO_ROOT
from typed_config import ConfigError, DeploymentConfig, config_path

GB = 1e9
#: The model-prep job image's own layers over the shared base (the llmcompressor venv): allowance.
JOB_IMAGE_GB = 3.0
MARGIN_GB = 5.0


def needed_gb(cfg: DeploymentConfig) -> tuple[float, list[str]]:
    """GB an image job writes, and its terms (module docstring)."""
    _, terms = image_terms(cfg)
    by_name = {t.name: t.value for t in terms}
    model = by_name["weights"] + by_name["adapters"]
    parts = [
        ("the vLLM base, compressed and unpacked", 2 * GPU_BASE_GB),
        ("the model release: download, build context, layer", 3 * model),
        ("the product layers", by_name["product layers"]),
        ("the model-prep job image's own layers (allowance)", JOB_IMAGE_GB),
        ("margin", MARGIN_GB),
    ]
    return round(sum(v for _, v in parts), 1), [f"{what} {v:.1f} GB" for what, v in parts]


def docker_root(run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> Path:
    try:
        done = run(["docker", "info", "--format", "{{.DockerRootDir}}"], capture_output=True,
                   text=True, check=False, timeout=30)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return Path("/var/lib/docker")
    root = done.stdout.strip() if done.returncode == 0 else ""
    return Path(root or "/var/lib/docker")


def existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check(
    cfg: DeploymentConfig,
    places: list[Path],
    free: Callable[[Path], float] = lambda p: shutil.disk_usage(p).free / GB,
) -> list[str]:
    """One line per filesystem (places on one are checked once) with less free than the job
    needs. Each is held to the whole figure: where the work dir and Docker's root are apart,
    the larger share (the base and the image) lands on Docker's."""
    need, terms = needed_gb(cfg)
    filesystems: dict[int, Path] = {}
    for place in places:
        found = existing(place)
        filesystems.setdefault(found.stat().st_dev, found)
    problems = []
    for where in filesystems.values():
        have = free(where)
        if have < need:
            problems.append(
                f"{where} has {have:.1f} GB free; the image job needs about {need:.0f} GB "
                f"({'; '.join(terms)}): run it on a larger runner (repository variable "
                "IMAGE_RUNNER, docs/release-from-ci.md) or free space first"
            )
    return problems


def main(argv: list[str] | None = None, *, places: list[Path] | None = None,
         free: Callable[[Path], float] | None = None) -> int:  # fmt: skip
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True)
    args = parser.parse_args(argv)
    try:
        cfg = load_config(config_path(REPO_ROOT, args.env), env=args.env)
    except ConfigError as exc:
        print(f"::error title=runner disk ({args.env})::{exc}", file=sys.stderr)
        return 2
    places = places if places is not None else [REPO_ROOT, docker_root()]
    problems = check(cfg, places, free) if free else check(cfg, places)
    need, _ = needed_gb(cfg)
    if problems:
        for problem in problems:
            print(f"::error title=runner disk ({args.env})::{problem}", file=sys.stderr)
        return 2
    print(f"runner disk: about {need:.0f} GB needed, free on {', '.join(map(str, places))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
