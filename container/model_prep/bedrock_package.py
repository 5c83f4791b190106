"""The Bedrock Custom Model Import package of a model release: built from the release's own inputs,
checked against every documented import rule, published beside the release.

    python -m container.model_prep.bedrock_package --inputs inputs.json --publish s3://bucket/prefix

``--publish`` is the releases' location (``s3://<artifact bucket>/<artifact prefix>``); the
package goes to ``<prefix>/bedrock-v1/<release version>/`` (bedrock_rules.PACKAGE_FORMAT),
published the way a release is (container/model_prep/artifact.py: every file under a fresh
upload id, then ``manifest.json`` last with ``If-None-Match: *``). Its manifest's sha256 is the
package digest ``make bedrock-import`` imports by.

What it holds, per model, one directory each (the S3 prefix one import job reads):

- ``base/``: the base model at the release's pinned revision, **unquantized** (the release bakes
  AWQ W4A16 weights for vLLM; Custom Model Import takes Hugging Face weights), in bf16;
- ``merged/<adapter>/``: for each adapter, the base with the adapter merged in
  (W + B·A·alpha/r, formed in float32, stored in bf16). Custom Model Import takes whole models
  and serves no runtime-loaded LoRA adapters (docs/bedrock.md), so each adapter is a model.

Each with ``config.json`` and ``tokenizer_config.json`` written in the form transformers 4.51.3
reads (bedrock_rules: ``torch_dtype``, ``rope_theta``, a tokenizer class it has, the chat
template inline), ``tokenizer.json`` (and ``tokenizer.model`` when the source has one) and
``generation_config.json`` (the source's, else one from config's token ids).

Memory: one source shard at a time (load, convert, merge the adapter's modules in it, write), so
the peak is about twice the largest shard, not the model; disk and time are the cost
(sizing/bedrock_package.py decides where it runs).

Exit 0 when the package is published (now or before); 1 with ``bedrock-package FAILED: <why>``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from . import bedrock_rules, release, sources, validate
from .artifact import AlreadyPublished, ArtifactLocation, publish
from .job import job_main, local_source, release_arguments, s3_if_unpublished
from .manifest import write_manifest

#: Tokenizer side files copied as they are when present.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "special_tokens_map.json")
#: transformers 5's tokenizer class for a tokenizer.json tokenizer; 4.51.3 calls it this.
FAST_FROM_TOKENIZER_JSON = "PreTrainedTokenizerFast"


def log(step: str, started: float, detail: str = "") -> None:
    print(
        f"bedrock-package: {step} {time.monotonic() - started:.1f}s {detail}".rstrip(), flush=True
    )


def config_for_import(config: dict[str, Any]) -> dict[str, Any]:
    """``config.json`` in the form transformers 4.51.3 reads, for bf16 weights: ``torch_dtype``
    (transformers 5 writes ``dtype``), ``rope_theta``/``rope_scaling`` (5 writes
    ``rope_parameters``). A quantized source is refused: its unquantized weights are gone."""
    if config.get("quantization_config"):
        raise bedrock_rules.BedrockPackageError(
            "config.json: quantization_config: the base model source is already quantized; a "
            "Bedrock package needs its unquantized weights (name the unquantized source)"
        )
    out = {k: v for k, v in config.items() if k not in {"dtype", "rope_parameters"}}
    out["torch_dtype"] = "bfloat16"
    rope = config.get("rope_parameters")
    if isinstance(rope, dict):
        out["rope_theta"] = rope.get("rope_theta", out.get("rope_theta", 10000.0))
        if rope.get("rope_type", "default") != "default":
            out["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    out["transformers_version"] = bedrock_rules.TRANSFORMERS_VERSION
    return out


def tokenizer_config_for_import(tok: dict[str, Any], chat_template: str | None) -> dict[str, Any]:
    """``tokenizer_config.json`` for transformers 4.51.3: transformers 5's ``TokenizersBackend``
    becomes ``PreTrainedTokenizerFast`` (both load tokenizer.json), its ``extra_special_tokens``
    list becomes ``additional_special_tokens``, and the chat template (5 writes it to
    chat_template.jinja) goes inline, where every 4.x reads it."""
    out = {k: v for k, v in tok.items() if k != "backend"}
    if out.get("tokenizer_class") in {None, "TokenizersBackend"}:
        out["tokenizer_class"] = FAST_FROM_TOKENIZER_JSON
    extra = out.get("extra_special_tokens")
    if isinstance(extra, list):
        out.pop("extra_special_tokens")
        out["additional_special_tokens"] = extra
    if chat_template and not out.get("chat_template"):
        out["chat_template"] = chat_template
    return out


def generation_config(source: Path, config: dict[str, Any]) -> dict[str, Any]:
    path = source / "generation_config.json"
    body = json.loads(path.read_text()) if path.is_file() else {}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        if key not in body and config.get(key) is not None:
            body[key] = config[key]
    body["transformers_version"] = bedrock_rules.TRANSFORMERS_VERSION
    return body


def write_side_files(source: Path, dest: Path) -> None:
    """Config, tokenizer and generation files of one model directory."""
    dest.mkdir(parents=True, exist_ok=True)
    config = json.loads((source / "config.json").read_text())
    dump = lambda name, body: (dest / name).write_text(json.dumps(body, indent=2) + "\n")  # noqa: E731
    dump("config.json", config_for_import(config))
    template_file = source / "chat_template.jinja"
    template = template_file.read_text() if template_file.is_file() else None
    tok = json.loads((source / "tokenizer_config.json").read_text())
    dump("tokenizer_config.json", tokenizer_config_for_import(tok, template))
    dump("generation_config.json", generation_config(source, config))
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, dest / name)


def write_weights(source: Path, dests: dict[str, Path], adapters: dict[str, Path]) -> None:
    """Every shard of ``source`` into each destination in bf16: ``dests["base"]`` as it is, each
    adapter's destination with that adapter merged. One source shard in memory at a time."""
    import torch
    from safetensors.torch import load_file, save_file

    from .lora_delta import deltas

    pending = {name: deltas(path) for name, path in adapters.items()}
    merged: dict[str, set[str]] = {name: set() for name in adapters}
    shards = sorted(source.glob("*.safetensors"))
    if not shards:
        raise bedrock_rules.BedrockPackageError(f"{source}: no .safetensors weights in the source")
    for shard in shards:
        source_tensors = load_file(str(shard))
        tensors = {
            k: (v.to(torch.bfloat16) if v.is_floating_point() else v)
            for k, v in source_tensors.items()
        }
        save_file(tensors, str(dests[bedrock_rules.BASE_MODEL_DIR] / shard.name), {"format": "pt"})
        for name, lora in pending.items():
            out = dict(tensors)
            for module, (a, b, scale) in lora.items():
                key = f"{module}.weight"
                if key in source_tensors:
                    # From the source's own precision, rounded to bf16 once.
                    w = source_tensors[key].to(torch.float32)
                    delta = (b.to(torch.float32) @ a.to(torch.float32)) * scale
                    out[key] = (w + delta).to(torch.bfloat16)
                    merged[name].add(module)
            save_file(out, str(dests[name] / shard.name), {"format": "pt"})
    for name, lora in pending.items():
        missing = sorted(set(lora) - merged[name])
        if missing:
            raise bedrock_rules.BedrockPackageError(
                f"adapter {name}: modules {missing[:5]} have no weight in the base model"
            )
    index = source / "model.safetensors.index.json"
    if index.is_file():
        body = json.loads(index.read_text())
        for dest in dests.values():
            size = sum(p.stat().st_size for p in dest.glob("*.safetensors"))
            out_index = {**body, "metadata": {**body.get("metadata", {}), "total_size": size}}
            (dest / index.name).write_text(json.dumps(out_index, indent=2) + "\n")


def build(base: Path, adapters: dict[str, Path], out: Path) -> dict[str, Any]:
    """The package's models under ``out`` (``base/``, ``merged/<adapter>/``), each checked.
    Returns the facts of each model, for the manifest."""
    dirs = bedrock_rules.model_dirs(tuple(adapters))
    dests = {name: out / rel for name, rel in dirs.items()}
    for dest in dests.values():
        write_side_files(base, dest)
    t = time.monotonic()
    write_weights(base, dests, adapters)
    log("weights", t, f"bf16 base + {len(adapters)} merged model(s)")
    facts = bedrock_rules.check_package(out, tuple(adapters))
    return {name: {"path": dirs[name], **f.to_json()} for name, f in facts.items()}


def check_digest(what: str, path: Path, recorded: str) -> None:
    """A local source's content is its revision: the files packaged are the files the release
    version was derived from."""
    if recorded and release.tree_digest(path) != recorded:
        raise ValueError(f"{what} {path} differs from the one the release version was derived from")


def run(args: argparse.Namespace) -> int:
    inputs = release.ReleaseInputs.from_json(json.loads(args.inputs.read_text()))
    version = inputs.version
    releases = ArtifactLocation.parse(args.publish)
    where = ArtifactLocation(releases.bucket, bedrock_rules.package_prefix(releases.prefix))
    problems = [] if args.local else inputs.problems()
    if problems:
        raise ValueError("; ".join(problems))
    s3 = s3_if_unpublished(args, where, version, phase="bedrock-package")
    if s3 is None:
        return 0
    token = sources.read_token(args.hf_token_file)
    shutil.rmtree(args.workdir, ignore_errors=True)
    work, out = args.workdir / "src", args.workdir / "out"
    t = time.monotonic()
    base_src = sources.parse_source(local_source(inputs.base_source))
    base = work / "base"
    hf = base_src.kind == "hf"
    revision = sources.fetch(base_src, base, revision=inputs.base_revision if hf else None,
                             token=token)  # fmt: skip
    if base_src.kind == "local":
        check_digest("the base model", Path(base_src.location), inputs.base_revision)
    adapters: dict[str, Path] = {}
    for a in inputs.adapters:
        src = sources.parse_source(local_source(a.source))
        adapters[a.name] = sources.inside(work / "lora", a.name)
        sources.fetch(src, adapters[a.name], token=token)
        if src.kind == "local":
            check_digest(f"adapter {a.name}", Path(src.location), a.digest)
    log("fetch", t, f"base revision={revision} adapters={len(adapters)}")
    validate.validate_adapters(base, adapters, max_lora_rank=inputs.max_lora_rank,
                               base_names={base_src.name, base.name, "base"})  # fmt: skip
    models = build(base, adapters, out)
    write_manifest(
        out,
        version=version,
        format=bedrock_rules.PACKAGE_FORMAT,
        release=releases.uri(version),
        inputs=inputs.to_json(),
        base={"source": inputs.base_source, "revision": revision},
        models=models,
    )
    try:
        uri = publish(s3, out, where)
    except AlreadyPublished as exc:
        print(f"bedrock-package: {exc}: nothing to do", flush=True)
        return 0
    print(f"bedrock-package: published {uri}/ ({len(models)} model(s))", flush=True)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="build and publish a release's Bedrock package")
    release_arguments(p)
    workdir = os.environ.get("BEDROCK_PACKAGE_WORKDIR", "/tmp/bedrock-package")
    p.add_argument("--workdir", type=Path, default=Path(workdir))
    return p


def main(argv: list[str] | None = None) -> int:
    return job_main("bedrock-package", parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
