"""Model and adapter sources: ``hf://org/name``, ``s3://bucket/prefix`` or a local directory.

The release inputs (the config's model.source and adapters[].source) use these forms; the HF
token arrives as a file (the job writes it from Secrets Manager: never a build arg or an
environment variable, so it is in no layer, no image history and no DescribeTrainingJob).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: An adapter name becomes a directory (lora/<name>) and a --lora-modules name: no separators,
#: no dots, so "../base" or "/etc" can never name a path (typed_config/ enforces the same).
ADAPTER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
#: An adapter version (typed_config AdapterConfig.version).
VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")

#: Files a serving model needs; everything else in a repository (README, original/, *.pth) is
#: left out of the image.
WEIGHT_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "tokenizer*"]


@dataclass(frozen=True)
class Source:
    kind: str  # "hf" | "s3" | "local"
    location: str  # repo id, "bucket/prefix" or a path

    @property
    def name(self) -> str:
        return self.location.rstrip("/").split("/")[-1]

    def __str__(self) -> str:
        return self.location if self.kind == "local" else f"{self.kind}://{self.location}"


def parse_source(text: str) -> Source:
    text = text.strip()
    if not text:
        raise ValueError("empty model source")
    for kind in ("hf", "s3"):
        prefix = f"{kind}://"
        if text.startswith(prefix):
            rest = text[len(prefix) :].strip("/")
            if kind == "hf" and rest.count("/") != 1:
                raise ValueError(f"{text!r}: expected hf://org/name")
            if kind == "s3" and not rest:
                raise ValueError(f"{text!r}: expected s3://bucket/prefix")
            return Source(kind, rest)
    if "://" in text:
        raise ValueError(f"{text!r}: unsupported scheme (use hf://, s3:// or a local path)")
    return Source("local", text)


def parse_adapters(text: str) -> dict[str, Source]:
    """``name=source,name=source`` -> {name: Source}; names must be unique."""
    out: dict[str, Source] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, src = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"adapter {item!r}: expected name=source")
        name = name.strip()
        if not ADAPTER_NAME.match(name):
            raise ValueError(f"adapter name {name!r} must match {ADAPTER_NAME.pattern}")
        if name in out:
            raise ValueError(f"adapter {name!r} listed twice")
        out[name] = parse_source(src)
    return out


def parse_adapter_versions(text: str, *, known: Mapping[str, object]) -> dict[str, str]:
    """``name=version,...`` -> {name: version}, for adapters listed in ``known`` only. The
    version is recorded in the manifest beside the adapter; clients address the stable name."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, version = (x.strip() for x in item.partition("="))
        if not sep or not version or not VERSION.match(version):
            raise ValueError(f"adapter version {item!r}: expected name=version ({VERSION.pattern})")
        if name not in known:
            raise ValueError(f"adapter version for {name!r}, which is not an adapter")
        out[name] = version
    return out


def inside(dest: Path, rel: str) -> Path:
    """``dest / rel``, refused (ValueError) unless it resolves to a path inside ``dest``."""
    root = dest.resolve()
    target = (root / rel).resolve()
    if Path(rel).is_absolute() or target == root or not target.is_relative_to(root):
        raise ValueError(f"{rel!r} resolves outside {dest}")
    return target


def _check_links(src: Path) -> None:
    """A local source may not smuggle files from outside itself in through symlinks."""
    root = src.resolve()
    for path in src.rglob("*"):
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            raise ValueError(f"{path} links outside the source directory {src}")


def read_token(path: str | None) -> str | None:
    """The HF token from a file (model_prep.job writes it from Secrets Manager), if present."""
    if path and Path(path).is_file():
        return Path(path).read_text().strip() or None
    return None


def fetch(
    source: Source, dest: Path, *, revision: str | None = None, token: str | None = None
) -> str:
    """Copy ``source`` into ``dest``. Returns the resolved revision (commit sha for HF, the
    given revision or "local" otherwise)."""
    dest.mkdir(parents=True, exist_ok=True)
    if source.kind == "local":
        src = Path(source.location)
        if not src.is_dir():
            raise FileNotFoundError(f"local model source {src} is not a directory")
        _check_links(src)
        shutil.copytree(src, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.md"))
        return revision or "local"
    if source.kind == "hf":
        from huggingface_hub import HfApi, snapshot_download

        info = HfApi().model_info(source.location, revision=revision, token=token)
        snapshot_download(
            repo_id=source.location,
            revision=info.sha,
            local_dir=dest,
            token=token,
            allow_patterns=WEIGHT_PATTERNS,
        )
        return str(info.sha)
    import boto3  # the preparation job's image has it; the serving runtime never downloads

    fetch_s3(boto3.client("s3"), source, dest)
    return revision or "s3"


def fetch_s3(s3: Any, source: Source, dest: Path) -> int:
    """Download every object under the source's prefix into ``dest``; a key whose remainder
    would land outside ``dest`` (``..``, an absolute path) fails the build. Returns the count."""
    bucket, _, prefix = source.location.partition("/")
    count = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(prefix) :].lstrip("/")
            if not rel or rel.endswith("/"):
                continue
            try:
                target = inside(dest, rel)
            except ValueError as exc:
                raise ValueError(f"s3://{bucket}/{obj['Key']}: {exc}") from exc
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, obj["Key"], str(target))
            count += 1
    if count == 0:
        raise FileNotFoundError(f"no objects under {source}")
    return count
