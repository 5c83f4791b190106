"""Size the model-prep job on a GPU: AWQ + quality gate of an 8B-architecture model.

    python -m tools.model_prep_sizing --work /tmp/sizing --out results.json --run 4 --run 32

Runs in the quantization environment (llmcompressor, compressed-tensors, transformers) on a
machine with a CUDA GPU. For each ``--run LAYERS[:long]`` it builds a Llama-3-8B-architecture
model (the config of Meta-Llama-3-8B with ``num_hidden_layers`` = LAYERS; random normal(0, 0.02)
weights, RMSNorm weights 1, bf16 safetensors; a 128,256-entry WordLevel tokenizer whose
vocabulary holds every word of the calibration and held-out sets, so those texts tokenize to
varied ids at about the real tokenizer's count), then runs ``container/model_prep/quantize.py``
and ``container/model_prep/quality_gate.py`` as the job does (subprocesses, the job's flags), and
records per step: wall seconds, peak GPU memory (the script's own torch figures and nvidia-smi's
``memory.used``, which adds the CUDA context), peak host RSS (``wait4`` rusage of the step's
process and a 1 s sample of its process tree from /proc), and the bytes it wrote. ``:long``
replaces the domain calibration set with as many synthetic texts of ``max_seq_len`` tokens (the
worst case the job's truncation allows). A run of fewer layers than 32 is a prefix of the model
for per-layer extrapolation (``extrapolation`` in the output: fixed + per-layer cost fitted from
two layer counts). The results file is rewritten after every step, so a cut-off run keeps
what it measured.

``--tiny`` shrinks the hidden sizes (not the vocabulary) to smoke-test the tool on a CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MODEL_PREP = REPO / "container" / "model_prep"
GIB = 1024**3

#: Meta-Llama-3-8B's config.json (as /work/shared/gpu/mkmodel.py writes it).
LLAMA3_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "head_dim": 128,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "dtype": "bfloat16",
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "initializer_range": 0.02,
    "rope_scaling": None,
    "use_cache": True,
    "pretraining_tp": 1,
}
TINY = {"hidden_size": 128, "intermediate_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 32}  # fmt: skip
SPECIALS = {
    128000: "<|begin_of_text|>",
    128001: "<|end_of_text|>",
    128006: "<|start_header_id|>",
    128007: "<|end_header_id|>",
    128009: "<|eot_id|>",
}
PACKAGES = ("torch", "transformers", "llmcompressor", "compressed-tensors", "accelerate",
            "datasets", "safetensors", "tokenizers")  # fmt: skip
WORD = re.compile(r"\w+|[^\w\s]+")  # the tokenizers library's Whitespace pre-tokenizer


# --- the model ------------------------------------------------------------------------------


def data_words(*files: Path) -> list[str]:
    words: set[str] = set()
    for f in files:
        for line in f.read_text().splitlines():
            if line.strip():
                words.update(WORD.findall(json.loads(line)["text"]))
    return sorted(words)


def write_tokenizer(dest: Path, words: list[str], vocab_size: int) -> None:
    """WordLevel, ``vocab_size`` entries, Llama-3's special ids; the data's words spread over the
    ordinary ids; BOS prepended like Llama-3's tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    ordinary = [i for i in range(1, 128000) if i not in SPECIALS]
    rng = random.Random(0)
    ids = rng.sample(ordinary, len(words))
    names = {i: f"t{i}" for i in range(vocab_size)}
    names.update({i: f"<|reserved_special_token_{i - 128000}|>" for i in range(128000, vocab_size)})
    names.update(SPECIALS)
    names.update(dict(zip(ids, words, strict=True)))
    names[0] = "[UNK]"
    tok = Tokenizer(models.WordLevel(vocab={n: i for i, n in names.items()}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(list(SPECIALS.values()))
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 128000)]
    )
    tok.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>", "pad_token": "<|end_of_text|>", "unk_token": "[UNK]",
        "model_max_length": 8192, "clean_up_tokenization_spaces": False,
    }, indent=1))  # fmt: skip


def param_shapes(cfg: dict[str, Any]) -> list[tuple[str, tuple[int, ...]]]:
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    shapes: list[tuple[str, tuple[int, ...]]] = [("model.embed_tokens.weight", (v, h))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes += [
            (p + "input_layernorm.weight", (h,)),
            (p + "self_attn.q_proj.weight", (q, h)),
            (p + "self_attn.k_proj.weight", (kv, h)),
            (p + "self_attn.v_proj.weight", (kv, h)),
            (p + "self_attn.o_proj.weight", (h, q)),
            (p + "post_attention_layernorm.weight", (h,)),
            (p + "mlp.gate_proj.weight", (inter, h)),
            (p + "mlp.up_proj.weight", (inter, h)),
            (p + "mlp.down_proj.weight", (h, inter)),
        ]
    return [*shapes, ("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]


def build_model(dest: Path, layers: int, words: list[str], *, tiny: bool) -> dict[str, Any]:
    """config.json, tokenizer, random bf16 weights in ~4 GiB safetensors shards."""
    import torch
    from safetensors.torch import save_file

    started = time.monotonic()
    cfg = {**LLAMA3_8B, "num_hidden_layers": layers, **(TINY if tiny else {})}
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "config.json").write_text(json.dumps(cfg, indent=1))
    (dest / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 128000, "eos_token_id": 128001, "do_sample": True})
    )
    write_tokenizer(dest, words, cfg["vocab_size"])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=device).manual_seed(0)
    shapes = param_shapes(cfg)
    shards: list[list[tuple[str, tuple[int, ...]]]] = [[]]
    size = 0
    for name, shape in shapes:
        n = 2 * int(torch.Size(shape).numel())
        if shards[-1] and size + n > 4 * GIB:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += n
    weight_map: dict[str, str] = {}
    total = 0
    for k, shard in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {}
        for name, shape in shard:
            if len(shape) == 1:  # RMSNorm weights: 1, as the model's own initialisation
                t = torch.ones(shape, dtype=torch.bfloat16)
            else:
                t = torch.empty(shape, dtype=torch.bfloat16, device=device)
                t.normal_(0.0, 0.02, generator=gen)
            tensors[name] = t.cpu()
            weight_map[name] = fname
            total += t.numel() * 2
        save_file(tensors, str(dest / fname), metadata={"format": "pt"})
        del tensors
    (dest / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1)
    )
    return {
        "wall_s": round(time.monotonic() - started, 1),
        "params": sum(int(torch.Size(s).numel()) for _, s in shapes),
        "safetensors_bytes": total,
    }


def long_calibration(dest: Path, words: list[str], samples: int, tokens: int) -> Path:
    """``samples`` texts of more than ``tokens`` words (the job truncates them to max_seq_len)."""
    rng = random.Random(1)
    plain = [w for w in words if w.isalnum()]
    path = dest / f"calibration-long-{samples}x{tokens}.jsonl"
    with path.open("w") as f:
        for _ in range(samples):
            f.write(json.dumps({"text": " ".join(rng.choices(plain, k=tokens + 16))}) + "\n")
    return path


# --- measuring a step -----------------------------------------------------------------------


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def tree_rss_bytes(pid: int) -> int:
    """VmRSS of a process and all its descendants, from /proc."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, AttributeError):
            continue
    return total


def gpu_used_bytes() -> int | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout  # fmt: skip
        return int(out.split()[0]) * 2**20
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def drop_page_cache() -> bool:
    """So a step reads its model from disk, not from the page cache the previous step filled
    (root only; the result is recorded)."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def run_step(cmd: list[str], log: Path, *, drop_cache: bool) -> dict[str, Any]:
    """Run one step as its own process; wall time, exit code, the script's own
    ``model-prep-resources`` line, peak RSS (wait4 and sampled) and peak nvidia-smi memory."""
    cold = drop_page_cache() if drop_cache else False
    peaks = {"rss": 0, "gpu": 0}
    gpu_before = gpu_used_bytes()
    print("$", " ".join(cmd), flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peaks["rss"] = max(peaks["rss"], tree_rss_bytes(proc.pid))
            peaks["gpu"] = max(peaks["gpu"], gpu_used_bytes() or 0)
            done.wait(1.0)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    own: dict[str, Any] | None = None
    assert proc.stdout is not None
    with log.open("a") as f:
        for line in proc.stdout:
            f.write(line)
            sys.stdout.write(line)
            if line.startswith("model-prep-resources:"):
                own = json.loads(line.split(":", 1)[1])
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    done.set()
    sampler.join()
    return {
        "command": [str(Path(c).relative_to(REPO)) if c.startswith(str(REPO)) else c for c in cmd],
        "rc": proc.returncode,
        "wall_s": round(wall, 1),
        "page_cache_dropped_before": cold,
        "script_resources": own,
        "host_peak_rss_gib": round(usage.ru_maxrss / 2**20, 2),  # KiB on Linux
        "host_peak_tree_rss_gib_sampled_1s": round(peaks["rss"] / GIB, 2),
        "gpu_used_gib_nvidia_smi_peak_1s": round(peaks["gpu"] / GIB, 2) if peaks["gpu"] else None,
        "gpu_used_gib_nvidia_smi_before": round(gpu_before / GIB, 2) if gpu_before else None,
    }


# --- the sizing run -------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    import torch

    def version(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "host_mem_total_gib": round(
            int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))  # type: ignore[union-attr]
            / 2**20,
            1,
        ),
        "torch_cuda": torch.version.cuda,
        **{name: version(name) for name in PACKAGES},
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env["gpu_name"] = props.name
        env["gpu_total_memory_gib"] = round(props.total_memory / GIB, 2)
        env["gpu_count"] = torch.cuda.device_count()
        try:
            env["gpu_driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=10,
            ).stdout.strip()  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            env["gpu_driver"] = None
    else:
        env["gpu_name"] = None
    return env


def calibration_stats(model: Path, calibration: Path, max_seq_len: int) -> dict[str, Any]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    texts = [json.loads(x)["text"] for x in calibration.read_text().splitlines() if x.strip()]
    lengths = [len(tok(t, truncation=True, max_length=max_seq_len)["input_ids"]) for t in texts]
    return {
        "file": str(calibration.relative_to(REPO)) if calibration.is_relative_to(REPO) else None,
        "samples": len(texts),
        "max_seq_len": max_seq_len,
        "tokens": sum(lengths),
        "longest": max(lengths),
    }


def extrapolate(runs: list[dict[str, Any]], full_layers: int) -> dict[str, Any]:
    """Fixed + per-layer cost from the two smallest layer counts measured with the domain set;
    a straight line through them, evaluated at ``full_layers``."""
    by_layers = {
        r["num_hidden_layers"]: r
        for r in runs
        if not r["long_calibration"] and all(s.get("rc") == 0 for s in r["steps"].values())
    }
    if len(by_layers) < 2:
        return {}
    a, b = sorted(by_layers)[:2]
    out: dict[str, Any] = {"from_layers": [a, b], "to_layers": full_layers}
    for step in ("quantize", "quality_gate"):
        for key in ("wall_s", "host_peak_rss_gib"):
            ya = by_layers[a]["steps"][step][key]
            yb = by_layers[b]["steps"][step][key]
            per_layer = (yb - ya) / (b - a)
            out[f"{step}.{key}.per_layer"] = round(per_layer, 3)
            out[f"{step}.{key}.at_{full_layers}"] = round(ya + per_layer * (full_layers - a), 1)
    return out


def _size_run(
    args: argparse.Namespace,
    spec: str,
    words: list[str],
    log: Path,
    results: dict[str, Any],
    save: Callable[[], None],
) -> None:
    """One ``--run LAYERS[:long]``: the model built (or reused), calibrated, quantized and,
    without ``:long``, judged by the quality gate; each step's figures into ``results`` (saved
    after each) and the extrapolation to the full model refreshed."""
    layers_s, _, kind = spec.partition(":")
    layers, long = int(layers_s), kind == "long"
    base = args.work / f"base-{layers}L"
    quant = args.work / f"w4a16-{layers}L{'-long' if long else ''}"
    run: dict[str, Any] = {"name": f"{layers}L{'-long' if long else ''}",
                           "num_hidden_layers": layers, "long_calibration": long,
                           "steps": {}}  # fmt: skip
    results["runs"].append(run)
    if not (base / "model.safetensors.index.json").exists():
        run["build"] = build_model(base, layers, words, tiny=args.tiny)
    else:
        run["build"] = {"reused": str(base.name)}
    run["checkpoint_bytes"] = {"bf16": dir_bytes(base)}
    calibration = args.calibration
    if long:
        calibration = long_calibration(args.work, words, 256, args.max_seq_len)
    run["calibration"] = calibration_stats(base, calibration, args.max_seq_len)
    save()
    step = run_step([args.python, str(MODEL_PREP / "quantize.py"), "--model", str(base),
                     "--out", str(quant), "--calibration", str(calibration)], log,
                    drop_cache=args.drop_cache)  # fmt: skip
    run["steps"]["quantize"] = step
    if step["rc"] == 0:
        run["checkpoint_bytes"]["w4a16"] = dir_bytes(quant)
    save()
    if step["rc"] == 0 and not long:
        report = args.work / f"quality_gate-{run['name']}.json"
        step = run_step([args.python, str(MODEL_PREP / "quality_gate.py"),
                         "--reference", str(base), "--candidate", str(quant),
                         "--heldout", str(args.heldout),
                         "--min-agreement", str(args.min_agreement),
                         "--report", str(report)], log,
                        drop_cache=args.drop_cache)  # fmt: skip
        # exit 1 = agreement below the threshold: expected with random weights
        step["report"] = json.loads(report.read_text()) if report.exists() else None
        if step["rc"] == 1 and step["report"] is not None:
            step["rc"] = 0
            step["note"] = "exit 1: agreement below --min-agreement (random weights)"
        run["steps"]["quality_gate"] = step
    run["disk_peak_bytes"] = sum(run["checkpoint_bytes"].values())
    results["extrapolation"] = extrapolate(results["runs"], LLAMA3_8B["num_hidden_layers"])
    save()
    if not args.keep:
        subprocess.run(["rm", "-rf", str(quant)], check=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="size the model-prep job (AWQ + quality gate) on a GPU")
    p.add_argument("--work", type=Path, default=Path("/tmp/model-prep-sizing"))
    p.add_argument("--out", type=Path, required=True, help="results JSON")
    p.add_argument("--run", action="append", default=[], help="LAYERS or LAYERS:long (repeat)")
    p.add_argument("--python", default=sys.executable, help="the quantization venv's python")
    p.add_argument("--calibration", type=Path, default=MODEL_PREP / "data" / "calibration.jsonl")
    p.add_argument("--heldout", type=Path, default=MODEL_PREP / "data" / "heldout.jsonl")
    p.add_argument("--min-agreement", type=float, default=0.9, help="the job's default")
    p.add_argument("--max-seq-len", type=int, default=512, help="quantize.py's max_seq_len")
    p.add_argument("--tiny", action="store_true", help="small hidden sizes: a CPU smoke test")
    p.add_argument("--keep", action="store_true", help="keep the checkpoints after each run")
    p.add_argument(
        "--drop-cache",
        action="store_true",
        help="drop the page cache before each step (root; a throw-away machine)",
    )
    args = p.parse_args(argv)
    runs_spec = args.run or ["32"]
    args.work.mkdir(parents=True, exist_ok=True)
    log = args.work / "steps.log"
    words = data_words(args.calibration, args.heldout)
    results: dict[str, Any] = {
        "what": "model-prep job (container/model_prep/quantize.py + quality_gate.py) on a "
        "Llama-3-8B-architecture model with random weights",
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "environment": environment(),
        "model": {
            "config": {**LLAMA3_8B, **(TINY if args.tiny else {})},
            "weights": "random normal(0, 0.02) bf16, RMSNorm weights 1; safetensors shards "
            "<= 4 GiB",
            "tokenizer": "WordLevel, 128,256 entries, every calibration/held-out word in the "
            "vocabulary (Whitespace pre-tokenizer: words and punctuation runs), BOS prepended",
        },
        "runs": [],
    }
    print(json.dumps(results["environment"]), flush=True)

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")

    save()
    for spec in runs_spec:
        _size_run(args, spec, words, log, results, save)
    results["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    save()
    print(json.dumps(results, indent=2), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
