"""What a prepared model is made from, and the version those inputs name.

A prepared model (AWQ weights, adapters, quality report, manifest) is a release of its own: it is
prepared once, on a GPU job (``make prepare-model``), published to S3 under its version, and
every image build bakes a published version. The version is derived from the inputs alone (base
model and its pinned revision, quantization recipe and its tools, the calibration and held-out
sets, the quality-gate floor, each adapter's source and version), so the same inputs always name
the same version: preparing them again is answered "already published" without any work.

This module is imported by the host tools (stacks/, tools/) and by the job itself, so it needs
nothing beyond the standard library.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .manifest import sha256

HERE = Path(__file__).resolve().parent
CALIBRATION_FILE = HERE / "data" / "calibration.jsonl"
HELDOUT_FILE = HERE / "data" / "heldout.jsonl"
#: The quantization venv's pins (llmcompressor, transformers, compressed-tensors, torch): a new
#: tool version can change the weights, so it is an input of the version.
QUANT_REQUIREMENTS = HERE.parent / "requirements-quant.txt"
#: quantize.py's recipe, written out: a change to it is a change of every version.
AWQ_RECIPE = "llmcompressor AWQModifier W4A16_ASYM group128 targets=Linear ignore=lm_head seq512"

#: ``m-`` and 16 hex digits of the inputs' sha256.
VERSION = re.compile(r"^m-[0-9a-f]{16}$")
#: A Hugging Face revision that cannot move: a full commit sha.
COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")


def version_of(ref: str) -> str:
    """The version a ``model.artifact`` reference names: itself, or an S3 URI's last part."""
    return ref.rstrip("/").rsplit("/", 1)[-1]


def tree_digest(root: Path) -> str:
    """sha256 over every file under ``root`` (relative path and content), for a local source:
    its content is its revision."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(root)).encode() + b"\0" + sha256(path).encode() + b"\n")
    return h.hexdigest()


def quant_pins(path: Path = QUANT_REQUIREMENTS) -> list[str]:
    """The ``name==version`` lines of the quantization requirements, sorted."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return sorted(line for line in lines if "==" in line)


@dataclass(frozen=True)
class AdapterInput:
    name: str
    source: str
    version: str | None
    rank: int
    #: Content digest for a local directory; "" for hf:// and s3:// (the source and version
    #: name it: adapters are published under versioned prefixes, manga_domain_v3).
    digest: str = ""


@dataclass(frozen=True)
class ReleaseInputs:
    """Every input of a prepared model. ``version`` is a pure function of them."""

    base_source: str
    base_revision: str
    quantization: str
    min_agreement: float
    max_lora_rank: int
    adapters: tuple[AdapterInput, ...]
    calibration_sha256: str
    heldout_sha256: str
    recipe: str = AWQ_RECIPE
    tools: tuple[str, ...] = field(default_factory=lambda: tuple(quant_pins()))

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: Mapping[str, object]) -> ReleaseInputs:
        data = dict(raw)
        adapters = data.pop("adapters", [])
        tools = data.pop("tools", ())
        assert isinstance(adapters, list) and isinstance(tools, (list, tuple))
        return cls(
            **data,  # type: ignore[arg-type]
            adapters=tuple(AdapterInput(**a) for a in adapters),
            tools=tuple(tools),
        )

    @property
    def version(self) -> str:
        canonical = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))
        return "m-" + hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def problems(self) -> list[str]:
        """Why these inputs cannot be released (a moving revision), one line each."""
        out = []
        if self.base_source.startswith("hf://") and not COMMIT_SHA.match(self.base_revision):
            out.append(
                f"model.revision: {self.base_revision!r} can move; a release pins the base "
                "model to a commit sha (the 40 hex digits on the model page's 'Files' history)"
            )
        for a in self.adapters:
            if not a.source.startswith("local://") and not a.digest and not a.version:
                out.append(
                    f"adapters.{a.name}.version: a {a.source.split(':')[0]} adapter needs a "
                    "version, so a new upload under the same name is a new release"
                )
        return out


def local_path(source: str) -> Path | None:
    """The directory of a ``local://path`` or plain-path source, else None."""
    if source.startswith("local://"):
        return Path(source[len("local://") :])
    if "://" not in source:
        return Path(source)
    return None


def build_inputs(
    *,
    base_source: str,
    base_revision: str,
    quantization: str,
    min_agreement: float,
    max_lora_rank: int,
    adapters: list[tuple[str, str, str | None, int]],
    calibration: Path = CALIBRATION_FILE,
    heldout: Path = HELDOUT_FILE,
) -> ReleaseInputs:
    """The inputs from config values; a local directory contributes its content digest (a
    local base's revision is its digest), so an edited local model is a new version."""
    base_dir = local_path(base_source)
    revision = (
        tree_digest(base_dir) if base_dir is not None and base_dir.is_dir() else base_revision
    )
    items = []
    for name, source, version, rank in adapters:
        adapter_dir = local_path(source)
        digest = (
            tree_digest(adapter_dir) if adapter_dir is not None and adapter_dir.is_dir() else ""
        )
        items.append(AdapterInput(name, source, version, rank, digest))
    return ReleaseInputs(
        base_source=base_source,
        base_revision=revision,
        quantization=quantization,
        min_agreement=min_agreement,
        max_lora_rank=max_lora_rank,
        adapters=tuple(items),
        calibration_sha256=sha256(calibration),
        heldout_sha256=sha256(heldout),
    )
