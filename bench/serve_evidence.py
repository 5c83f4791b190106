"""`vllm serve` on the GPU machine: LoRA's cost over HTTP (issue 42 item 2) and the start's phases
(issue 46 item 1), each in one device call. Runs there with vLLM 0.26.0 installed under /tmp/site
(bench/gpu_evidence.sh).

    python3 bench/serve_evidence.py lora-ab --out $OUT --budget-s 560
        two servers resident at once on the one GPU, the same W4A16 engine with and without LoRA
        (each its own explicit KV cache size, so the two never size each other), measured one at a
        time, point by point (no-LoRA and LoRA back to back for each load and prompt length),
        nvidia-smi sampled all along.
    python3 bench/serve_evidence.py start-phases --out $OUT --budget-s 560
        the production engine (LoRA, 3 adapters, gpu_memory_utilization 0.92) started one after
        another: cold compile cache, warm (same VLLM_CACHE_ROOT), and the same two with CUDA graphs
        captured only for batch sizes up to max_num_seqs; each from process start to the first
        answer of every adapter, every log line time-stamped, the phases read from vLLM's log.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import http_load

MODEL = "/tmp/model_w4a16"
LORA_DIR = "/tmp/loras"
ADAPTERS = ["a1", "a2", "a3"]
#: FACTS.md's H100/H200 engine flags (prod.yaml's engine section), dummy Llama-3-8B W4A16.
ENGINE = [
    "--load-format",
    "dummy",
    "--max-model-len",
    "4096",
    "--max-num-seqs",
    "128",
    "--max-num-batched-tokens",
    "8192",
    "--block-size",
    "16",
    "--enable-prefix-caching",
]
LORA = ["--enable-lora", "--max-loras", "4", "--max-lora-rank", "16", "--lora-modules"] + [
    f"{a}={LORA_DIR}/{a}" for a in ADAPTERS
]
#: CUDA-graph batch sizes up to max_num_seqs (128) instead of vLLM's default up to 2 x 128 = 256.
REDUCED_SIZES = ["1", "2", "4", "8", "16", "24", "32", "48", "64", "80", "96", "112", "128"]
ENV = {
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "PYTHONUNBUFFERED": "1",
}

#: (name, regex over a log line): the phases vLLM 0.26 names with a time.
PHASES = [
    ("load_start", r"Starting to load model|Loading model from scratch"),
    ("weights_loaded", r"Loading weights took ([\d.]+) seconds"),
    ("model_loaded", r"Model loading took ([\d.]+) GiB(?: memory)? and ([\d.]+) seconds"),
    ("dynamo_done", r"Dynamo bytecode transform time: ([\d.]+) s"),
    ("compile_range", r"Compiling a graph for compile range .* takes ([\d.]+) s"),
    ("compile_cache_hit", r"Directly load the compiled graph.* took ([\d.]+) s"),
    ("torch_compile_done", r"torch.compile took ([\d.]+) s in total"),
    ("profile_warmup_done", r"Initial profiling/warmup run took ([\d.]+) s"),
    ("memory_profiling_done", r"Memory profiling takes ([\d.]+) seconds"),
    (
        "kv_reserved",
        r"Available KV cache memory: ([\d.]+) GiB|reserved ([\d.]+) GiB memory for KV Cache",
    ),
    ("kv_tokens", r"GPU KV cache size: ([\d,]+) tokens"),
    ("graph_capture_done", r"Graph capturing finished in ([\d.]+) secs, took ([\d.]+) GiB"),
    ("engine_init_done", r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s"),
    ("lora_loaded", r"Loaded new LoRA adapter: name '([^']+)'"),
    ("app_startup_complete", r"Application startup complete"),
]


class GpuSampler:
    """nvidia-smi every 500 ms, stamped with this process's perf_counter."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float, float, float]] = []
        try:
            self.p = subprocess.Popen(
                [
                    "nvidia-smi",
                    "--query-gpu=clocks.sm,power.draw,utilization.gpu,memory.used",
                    "--format=csv,noheader,nounits",
                    "-lms",
                    "500",
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
        except OSError:
            self.p = None
            return
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.p.stdout:
            try:
                c, pw, u, m = (float(x) for x in line.strip().split(","))
            except ValueError:
                continue
            self.samples.append((time.perf_counter(), c, pw, u, m))

    def window(self, t0: float, t1: float) -> dict[str, Any]:
        s = [x for x in self.samples if t0 <= x[0] <= t1]
        if not s:
            return {"n": 0}
        col = lambda i: [x[i] for x in s]  # noqa: E731
        return {
            "n": len(s),
            "sm_mhz_p50": http_load.pct(col(1), 0.5),
            "sm_mhz_min": min(col(1)),
            "sm_mhz_max": max(col(1)),
            "power_w_p50": http_load.pct(col(2), 0.5),
            "power_w_max": max(col(2)),
            "util_pct_p50": http_load.pct(col(3), 0.5),
            "mem_used_mib_max": max(col(4)),
        }

    def stop(self) -> None:
        if self.p:
            self.p.terminate()


class Server:
    """One `vllm serve` process group; every output line time-stamped from the Popen."""

    def __init__(
        self,
        name: str,
        port: int,
        extra: list[str],
        cache_root: str,
        log_path: Path,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name, self.port = name, port
        self.cmd = [
            sys.executable,
            "-m",
            "vllm.entrypoints.cli.main",
            "serve",
            MODEL,
            "--port",
            str(port),
            "--served-model-name",
            "base",
            *ENGINE,
            *extra,
        ]
        e = dict(os.environ, **ENV, VLLM_CACHE_ROOT=cache_root, **(env or {}))
        self.env_shown = {k: e[k] for k in sorted(set(ENV) | {"VLLM_CACHE_ROOT"} | set(env or {}))}
        self.lines: list[tuple[float, str]] = []
        # not a `with` block: the log stays open past __init__, written by the _read thread for
        # as long as the server prints and flushed by stop()
        self.log = open(log_path, "w")  # noqa: SIM115
        self.t0 = time.perf_counter()
        self.t0_epoch = time.time()
        self.p = subprocess.Popen(
            self.cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=e,
            start_new_session=True,
            bufsize=1,
        )
        self.log.write(
            f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {' '.join(self.cmd)}\n"
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.p.stdout:
            t = time.perf_counter() - self.t0
            self.lines.append((t, line.rstrip()))
            self.log.write(f"[{t:8.2f}] {line}")
            self.log.flush()

    def wait_ready(self, deadline: float) -> float | None:
        """Seconds from Popen to the first 200 of /health, or None (died or deadline)."""
        while time.perf_counter() < deadline:
            if self.p.poll() is not None:
                return None
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return time.perf_counter() - self.t0
            except Exception:
                pass
            time.sleep(0.25)
        return None

    def answer(self, model: str, prompt_tokens: int = 32, max_tokens: int = 8) -> dict[str, Any]:
        """One short non-streaming completion: seconds from Popen to its end, and its own
        latency."""
        t = time.perf_counter()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/completions",
            data=json.dumps(
                {
                    "model": model,
                    "prompt": list(range(2000, 2000 + prompt_tokens)),
                    "max_tokens": max_tokens,
                    "ignore_eos": True,
                }
            ).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                ok = r.status == 200 and bool(json.loads(r.read())["choices"])
        except Exception as e:
            return {"model": model, "ok": False, "error": str(e)[:200]}
        now = time.perf_counter()
        return {
            "model": model,
            "ok": ok,
            "latency_s": round(now - t, 3),
            "since_start_s": round(now - self.t0, 2),
        }

    def metric(self, name: str) -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith(name + "{") or line.startswith(name + " "):
                        return float(line.rsplit(" ", 1)[1])
        except Exception:
            return None
        return None

    def drain(self, limit_s: float = 10.0) -> float:
        t = time.perf_counter()
        while time.perf_counter() - t < limit_s:
            if (self.metric("vllm:num_requests_running") or 0) == 0 and (
                self.metric("vllm:num_requests_waiting") or 0
            ) == 0:
                break
            time.sleep(0.2)
        return round(time.perf_counter() - t, 2)

    def stop(self) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGINT)
                self.p.wait(timeout=15)
            except Exception:
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                    self.p.wait(timeout=10)
                except Exception:
                    pass
        self.log.flush()

    def phases(self) -> dict[str, Any]:
        return parse_phases(self.lines)


def parse_phases(lines: list[tuple[float, str]]) -> dict[str, Any]:
    """For each phase regex: the seconds from process start of its first (and last) matching line
    and the figures the line carries; then the wall-clock spans between them."""
    found: dict[str, Any] = {}
    for t, line in lines:
        for name, rx in PHASES:
            m = re.search(rx, line)
            if not m:
                continue
            vals = [g for g in m.groups() if g is not None]
            ent = found.setdefault(name, {"t_first": round(t, 2), "values": vals, "count": 0})
            ent["t_last"] = round(t, 2)
            ent["count"] += 1
            if name in ("compile_range", "compile_cache_hit"):
                ent["sum_s"] = round(ent.get("sum_s", 0.0) + float(vals[0]), 3)
    first_line = lines[0][0] if lines else None
    t = {k: v["t_first"] for k, v in found.items()}
    tl = {k: v["t_last"] for k, v in found.items()}
    spans: dict[str, float] = {}

    def span(name: str, a: float | None, b: float | None) -> None:
        if a is not None and b is not None:
            spans[name] = round(b - a, 2)

    span("python_start_to_load", 0.0, t.get("load_start"))
    span("weights_load", t.get("load_start"), t.get("model_loaded"))
    span(
        "compile_and_profile_run",
        t.get("model_loaded"),
        tl.get("profile_warmup_done") or t.get("kv_reserved"),
    )
    span(
        "kv_cache_and_graph_capture",
        tl.get("profile_warmup_done") or t.get("kv_reserved"),
        t.get("graph_capture_done"),
    )
    span("capture_to_engine_ready", t.get("graph_capture_done"), t.get("engine_init_done"))
    span("engine_ready_to_app_ready", t.get("engine_init_done"), t.get("app_startup_complete"))
    span(
        "adapters_load",
        t.get("lora_loaded") and (t.get("engine_init_done") or 0),
        tl.get("lora_loaded"),
    )
    return {"first_log_line_s": first_line, "lines": found, "spans_s": spans}


def stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def device_info() -> dict[str, Any]:
    q = "name,memory.total,driver_version,clocks.max.sm,power.limit"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    except Exception as e:
        out = f"nvidia-smi failed: {e}"
    info: dict[str, Any] = {
        # strict=False: the lengths differ when nvidia-smi failed (out is its error) or the machine
        # has several GPUs (one line each); the pairs that exist are kept, as before
        "nvidia_smi": dict(zip(q.split(","), [x.strip() for x in out.split(",")], strict=False))
    }
    try:  # no CUDA context in this process: it would hold GPU memory beside the servers
        from importlib.metadata import version

        import torch

        info.update(torch=torch.__version__, cuda=torch.version.cuda, vllm=version("vllm"))
    except Exception as e:
        info["versions_error"] = str(e)[:200]
    info["python"] = sys.version.split()[0]
    return info


def gpu_total_gib() -> float:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
        ).stdout
        return float(out.split()[0]) / 1024
    except (OSError, ValueError, IndexError):
        return float(os.environ.get("GPU_TOTAL_GIB", "79.6"))


def wait_gpu_free(limit_s: float = 20) -> None:
    t = time.time()
    while time.time() - t < limit_s:
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                capture_output=True,
                text=True,
            ).stdout.strip()
        except OSError:
            return
        if not out:
            return
        time.sleep(0.5)


# ------------------------------------------------------------------------------------------ lora-ab

#: (prompt tokens, in flight) in the order they are measured: the middle first, then outwards, so a
#: call that runs out of time still has both axes.
GRID = [
    (1500, 64),
    (600, 64),
    (2500, 64),
    (1500, 32),
    (1500, 96),
    (600, 96),
    (2500, 32),
    (600, 32),
    (2500, 96),
]


def lora_ab(a: argparse.Namespace) -> None:
    out = Path(a.out)
    t_call = time.perf_counter()
    deadline = t_call + a.budget_s
    total = gpu_total_gib()
    kv_gib = min(40.0, (total - 21.0) / 2)
    kv_bytes = int(kv_gib * 2**30)
    # a KV cache of kv_gib holds kv_gib * 2**30 / 128 KiB tokens (Llama-3-8B: 32 layers x 2 x 8 x
    # 128 x 2 B)
    kv_tokens = int(kv_bytes / 131072)
    res: dict[str, Any] = {
        "what": "LoRA's cost over HTTP (vllm serve), issue 42 item 2",
        "started": stamp(),
        "device": device_info(),
        "kv_cache_bytes_each": kv_bytes,
        "kv_tokens_each_est": kv_tokens,
        "windows": [],
        "skipped": [],
    }
    sampler = GpuSampler()
    common = ["--gpu-memory-utilization", "0.45", "--kv-cache-memory-bytes", str(kv_bytes)]
    base = Server("base", 8001, common, "/tmp/vc_base", out / "serve_base.log")
    lora = Server("lora", 8002, common + LORA, "/tmp/vc_lora", out / "serve_lora.log")
    res["commands"] = {
        "base": " ".join(base.cmd),
        "lora": " ".join(lora.cmd),
        "env": base.env_shown,
    }
    records: dict[str, Any] = {}

    def save() -> None:
        res["elapsed_s"] = round(time.perf_counter() - t_call, 1)
        (out / "lora_ab.json").write_text(json.dumps(res, indent=1))
        with gzip.open(out / "lora_ab_requests.json.gz", "wt") as f:
            json.dump(records, f)

    try:
        rb = base.wait_ready(deadline - 60)
        rl = lora.wait_ready(deadline - 60)
        res["ready_s"] = {
            "base": rb,
            "lora": rl,
            "note": "both started at once (compile on shared CPUs)",
        }
        print(f"ready: base {rb} s, lora {rl} s", flush=True)
        if rb is None or rl is None:
            res["error"] = "a server did not start"
            return
        res["first_answers"] = {
            "base": base.answer("base"),
            "lora": [lora.answer(m) for m in ADAPTERS],
        }
        # warm both: 2.5 s at 16 in flight (Triton JIT of the LoRA kernels, allocator)
        for s, models in ((base, ["base"]), (lora, ADAPTERS)):
            asyncio.run(
                http_load.run_window(
                    "127.0.0.1", s.port, models, 16, 1500, 32, 0.0, 2.5, 0.5, seed=1
                )
            )
            s.drain()
        big = total > 100
        grid = [g for g in GRID if big or g != (2500, 96)]
        if a.points:
            grid = [tuple(int(x) for x in pt.split("x")) for pt in a.points.split(",")]
        if not big:
            res["skipped"].append(
                {
                    "point": [2500, 96],
                    "why": f"KV cache of {kv_gib:.1f} GiB each ({kv_tokens:,} tokens) "
                    "is under 96 x 2,680 tokens on this GPU",
                }
            )
        for n, (p, c) in enumerate(grid):
            warm = a.warmup_s if a.warmup_s is not None else min(10.0, 3.0 + c * p / 30000)
            meas = a.measure_s
            need = 2 * (warm + meas + 4)
            left = deadline - time.perf_counter()
            if left < need:
                res["skipped"].append(
                    {"point": [p, c], "why": f"{left:.0f} s left, {need:.0f} s needed"}
                )
                continue
            order = [(base, ["base"]), (lora, ADAPTERS)]
            if n % 2:
                order.reverse()
            for s, models in order:
                w = asyncio.run(
                    http_load.run_window(
                        "127.0.0.1",
                        s.port,
                        models,
                        c,
                        p,
                        180,
                        warm,
                        meas,
                        stagger_s=1.0,
                        seed=100 + n,
                    )
                )
                t1 = time.perf_counter()
                w["gpu"] = sampler.window(t1 - meas, t1)
                records[f"{s.name}_{p}_{c}"] = w.pop("_records")
                w["engine"] = s.name
                w["drain_s"] = s.drain()
                w["at_s"] = round(t1 - t_call, 1)
                res["windows"].append(w)
                print(
                    f"{s.name:4s} P={p} C={c}: {w['req_per_min']} req/min "
                    f"(completed {w['completed_per_min']}), "
                    f"TTFT p50 {w['ttft_s']['p50']} p95 {w['ttft_s']['p95']}, "
                    f"e2e p50 {w['e2e_s']['p50']}, "
                    f"dec {w['decode_tps']['p50']} tok/s, "
                    f"ITL p50 {w['itl_s']['p50']} p95 {w['itl_s']['p95']}, "
                    f"err {w['errors']}, SM {w['gpu'].get('sm_mhz_p50')} MHz "
                    f"{w['gpu'].get('power_w_p50')} W",
                    flush=True,
                )
                save()
    finally:
        res["finished"] = stamp()
        base.stop()
        lora.stop()
        sampler.stop()
        res["start_logs"] = {"base": base.phases(), "lora": lora.phases()}
        save()


# ------------------------------------------------------------------------------------- start-phases


def start_phases(a: argparse.Namespace) -> None:
    out = Path(a.out)
    t_call = time.perf_counter()
    deadline = t_call + a.budget_s
    root = "/tmp/vc_start"
    runs = [
        ("cold", root, []),
        ("warm", root, []),
        ("cold_sizes128", root, ["--cudagraph-capture-sizes", *REDUCED_SIZES]),
        ("warm_sizes128", root, ["--cudagraph-capture-sizes", *REDUCED_SIZES]),
    ]
    if a.only:
        runs = [r for r in runs if r[0] in a.only.split(",")]
    res: dict[str, Any] = {
        "what": "vllm serve start phases, production engine with LoRA (issue 46 item 1)",
        "started": stamp(),
        "device": device_info(),
        "runs": [],
        "skipped": [],
    }
    sampler = GpuSampler()
    # only a run named plain "cold" starts from an empty cache
    if any(name == "cold" for name, _, _ in runs):
        subprocess.run(["rm", "-rf", root])
    try:
        for i, (name, cache, extra) in enumerate(runs):
            left = deadline - time.perf_counter()
            need = 150 if name.startswith("warm") else 200
            if left < need:
                res["skipped"].append({"run": name, "why": f"{left:.0f} s left, ~{need} s needed"})
                continue
            wait_gpu_free()
            s = Server(
                name,
                8000,
                ["--gpu-memory-utilization", "0.92", *LORA, *extra],
                cache,
                out / f"start_{i + 1}_{name}.log",
            )
            r: dict[str, Any] = {
                "run": name,
                "command": " ".join(s.cmd),
                "env": s.env_shown,
                "cache_root_existed": os.path.isdir(cache) and bool(os.listdir(cache)),
            }
            try:
                ready = s.wait_ready(min(deadline, time.perf_counter() + a.start_limit_s))
                r["health_200_s"] = None if ready is None else round(ready, 2)
                if ready is not None:
                    r["first_answers"] = [s.answer("base")] + [s.answer(m) for m in ADAPTERS]
                    r["first_answer_s"] = r["first_answers"][0].get("since_start_s")
                    r["all_adapters_answered_s"] = r["first_answers"][-1].get("since_start_s")
                else:
                    r["error"] = "not ready (died or limit)"
            finally:
                s.stop()
                r["phases"] = s.phases()
                r["gpu_during"] = sampler.window(s.t0, time.perf_counter())
            res["runs"].append(r)
            sp = r["phases"]["spans_s"]
            print(
                f"{name}: health {r.get('health_200_s')} s, "
                f"first answer {r.get('first_answer_s')} s, "
                f"all adapters {r.get('all_adapters_answered_s')} s; spans {sp}; "
                f"compile {r['phases']['lines'].get('torch_compile_done', {}).get('values')}, "
                f"capture {r['phases']['lines'].get('graph_capture_done', {}).get('values')}",
                flush=True,
            )
            (out / "start_phases.json").write_text(json.dumps(res, indent=1))
    finally:
        sampler.stop()
        res["finished"] = stamp()
        res["elapsed_s"] = round(time.perf_counter() - t_call, 1)
        (out / "start_phases.json").write_text(json.dumps(res, indent=1))


# -------------------------------------------------------------------------------------- start-cuts

#: Issue 46 item 2: each start configuration (cache root, extra flags, extra environment). A cold
#: run starts from an emptied cache root (what the release job does once, producing the cache it
#: ships); the warm run of the same configuration reads that root (what a new instance does with
#: the shipped cache). Each configuration has its own root, so no run reads another's cache.
FDO = json.dumps({"cudagraph_mode": "FULL_DECODE_ONLY"})
CUTS: dict[str, tuple[str, list[str], dict[str, str]]] = {
    "cold_default": ("/tmp/vc_default", [], {}),
    "warm_default": ("/tmp/vc_default", [], {}),
    "cold_reduced": ("/tmp/vc_reduced", ["--cudagraph-capture-sizes", *REDUCED_SIZES], {}),
    "warm_reduced": ("/tmp/vc_reduced", ["--cudagraph-capture-sizes", *REDUCED_SIZES], {}),
    "warm_reduced_debug": (
        "/tmp/vc_reduced",
        ["--cudagraph-capture-sizes", *REDUCED_SIZES],
        {"VLLM_LOGGING_LEVEL": "DEBUG"},
    ),
    "cold_fdo": (
        "/tmp/vc_fdo",
        ["--cudagraph-capture-sizes", *REDUCED_SIZES, "--compilation-config", FDO],
        {},
    ),
    "warm_fdo": (
        "/tmp/vc_fdo",
        ["--cudagraph-capture-sizes", *REDUCED_SIZES, "--compilation-config", FDO],
        {},
    ),
    "warm_eager": ("/tmp/vc_eager", ["--enforce-eager"], {}),
    # The product's layout (container/serving/compile_cache.py cache_env): Triton's JIT cache
    # inside the cache root, so that a shipped root carries it (start_shipped_h100_vllm0.26.md).
    "cold_shipped": ("/tmp/vc_shipped", [], {"TRITON_CACHE_DIR": "/tmp/vc_shipped/triton"}),
    "warm_shipped": ("/tmp/vc_shipped", [], {"TRITON_CACHE_DIR": "/tmp/vc_shipped/triton"}),
}
#: The throughput window after a warm start: does the cut cost speed? (prompt, in flight)
CUT_LOAD = (1500, 64)


def import_probe(out: Path) -> dict[str, Any]:
    """Where the seconds before vLLM's first log line go: Python imports, timed twice (the first
    with whatever bytecode the install left, the second with what the first wrote), CUDA's
    initialisation, and ``-X importtime``'s heaviest modules."""
    res: dict[str, Any] = {}
    env = dict(os.environ, **ENV)
    probes = {
        "import_torch": "import torch",
        "cuda_init": "import torch; torch.zeros(1).cuda(); torch.cuda.synchronize()",
        "import_vllm_cli": "import vllm.entrypoints.cli.main",
        "import_vllm_api_server": "import vllm.entrypoints.openai.api_server",
    }
    for rnd in ("first", "second"):
        for name, code in probes.items():
            t = time.perf_counter()
            r = subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True
            )
            res[f"{name}_{rnd}_s"] = round(time.perf_counter() - t, 2)
            if r.returncode:
                res[f"{name}_{rnd}_error"] = r.stderr[-400:]
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", probes["import_vllm_api_server"]],
        env=env,
        capture_output=True,
        text=True,
    )
    rows = []
    for line in r.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if m:
            rows.append((int(m.group(2)), len(m.group(3)), m.group(4)))
    rows.sort(reverse=True)
    res["importtime_top_cumulative_ms"] = [
        {"module": n, "cumulative_ms": round(c / 1000), "depth": d} for c, d, n in rows[:40]
    ]
    (out / "importtime.txt").write_text(r.stderr[-2_000_000:])
    print(f"imports: { {k: v for k, v in res.items() if k.endswith('_s')} }", flush=True)
    return res


def start_cuts(a: argparse.Namespace) -> None:
    out = Path(a.out)
    t_call = time.perf_counter()
    deadline = t_call + a.budget_s
    path = out / "start_cuts.json"
    res: dict[str, Any] = {
        "what": "issue 46 item 2: the start, before and after each cut, one machine",
        "started": stamp(),
        "device": device_info(),
        "engine": ENGINE + LORA,
        "runs": [],
        "skipped": [],
    }
    if a.imports:
        res["imports"] = import_probe(out)
    sampler = GpuSampler()
    try:
        for i, name in enumerate(x for x in a.runs.split(",") if x):
            root, extra, env = CUTS[name]
            left = deadline - time.perf_counter()
            need = (215 if name.startswith("cold") else 140) + (30 if a.load else 0)
            if left < need:
                res["skipped"].append({"run": name, "why": f"{left:.0f} s left, ~{need} s needed"})
                continue
            if name.startswith("cold"):
                subprocess.run(["rm", "-rf", root])
            wait_gpu_free()
            s = Server(
                name,
                8000,
                ["--gpu-memory-utilization", "0.92", *LORA, *extra],
                root,
                out / f"cut_{i + 1}_{name}.log",
                env=env,
            )
            r: dict[str, Any] = {
                "run": name,
                "command": " ".join(s.cmd),
                "env": s.env_shown,
                "cache_root_existed": os.path.isdir(root) and bool(os.listdir(root)),
            }
            try:
                ready = s.wait_ready(min(deadline - 5, time.perf_counter() + a.start_limit_s))
                r["health_200_s"] = None if ready is None else round(ready, 2)
                if ready is not None:
                    r["first_answers"] = [s.answer("base")] + [s.answer(m) for m in ADAPTERS]
                    r["first_answer_s"] = r["first_answers"][0].get("since_start_s")
                    r["all_adapters_answered_s"] = r["first_answers"][-1].get("since_start_s")
                    if a.load and name.startswith("warm") and deadline - time.perf_counter() > 30:
                        p, c = CUT_LOAD
                        w = asyncio.run(
                            http_load.run_window(
                                "127.0.0.1", 8000, ADAPTERS, c, p, 180, 6.0, 12.0, 1.0, seed=7
                            )
                        )
                        t1 = time.perf_counter()
                        w.pop("_records", None)
                        w["gpu"] = sampler.window(t1 - 12.0, t1)
                        r["load_window"] = w
                        print(
                            f"  {name} P={p} C={c}: {w['req_per_min']} req/min, "
                            f"TTFT p50 {w['ttft_s']['p50']}, ITL p50 {w['itl_s']['p50']}, "
                            f"err {w['errors']}, SM {w['gpu'].get('sm_mhz_p50')} MHz",
                            flush=True,
                        )
                else:
                    r["error"] = "not ready (died or limit)"
            finally:
                s.stop()
                r["phases"] = s.phases()
                r["gpu_during"] = sampler.window(s.t0, time.perf_counter())
            res["runs"].append(r)
            print(
                f"{name}: health {r.get('health_200_s')} s, first answer "
                f"{r.get('first_answer_s')} s; first log line "
                f"{r['phases']['first_log_line_s']}; spans {r['phases']['spans_s']}",
                flush=True,
            )
            path.write_text(json.dumps(res, indent=1))
    finally:
        sampler.stop()
        res["finished"] = stamp()
        res["elapsed_s"] = round(time.perf_counter() - t_call, 1)
        path.write_text(json.dumps(res, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p1 = sub.add_parser("lora-ab")
    p1.add_argument("--out", required=True)
    p1.add_argument("--budget-s", type=float, default=540)
    p1.add_argument("--measure-s", type=float, default=12.0)
    p1.add_argument(
        "--warmup-s",
        type=float,
        default=None,
        help="default 3 + in flight x prompt / 30,000, at most 10",
    )
    p1.add_argument("--points", default="", help="PROMPTxINFLIGHT,... instead of the grid")
    p2 = sub.add_parser("start-phases")
    p2.add_argument("--out", required=True)
    p2.add_argument("--budget-s", type=float, default=540)
    p2.add_argument("--start-limit-s", type=float, default=330)
    p2.add_argument("--only", default="")
    p3 = sub.add_parser("start-cuts")
    p3.add_argument("--out", required=True)
    p3.add_argument("--budget-s", type=float, default=540)
    p3.add_argument("--start-limit-s", type=float, default=330)
    p3.add_argument("--runs", required=True, help=f"comma-separated, of {', '.join(CUTS)}")
    p3.add_argument("--imports", action="store_true", help="time the imports first")
    p3.add_argument("--load", action="store_true", help="a throughput window after warm starts")
    a = ap.parse_args()
    {"lora-ab": lora_ab, "start-phases": start_phases, "start-cuts": start_cuts}[a.cmd](a)


if __name__ == "__main__":
    main()
