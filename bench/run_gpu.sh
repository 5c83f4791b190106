#!/usr/bin/env bash
# The speed benchmark on a GPU machine with no network (docs/speed-model.md), in stages that fit
# calls of at most 10 minutes. The files come from /work/shared/gpu/build-carry.sh (built into .gpu/:
# a 60 MiB part, then the rest), carried with the repository:
#   bash bench/run_gpu.sh stage1            copy .gpu/vllm.tar.xz.part0 to /tmp/gpu (first transfer)
#   bash bench/run_gpu.sh setup             join the parts, check, install vLLM 0.26.0 and its 50 wheels
#                                           into a site-packages under /tmp, write the dummy models
#   bash bench/run_gpu.sh bench ENGINE...   bf16 | w4a16 | w4a16-lora | ... (the case below):
#                                           bench/speed_bench.py, results in $OUT/speed_ENGINE.json
#                                           and the whole log in $OUT/ENGINE.log
# Issue 36's engines: w4a16-base-cost and w4a16-lora-cost (plan lora-cost: 8 / 32 / 74 in flight,
# without and with 3 rank-16 adapters), w4a16-kvdef and w4a16-fp8kv (plan fp8kv: 74 and 128 in
# flight, default and fp8 KV cache), w4a16-lora-fp8kv (LoRA and fp8 KV). Append -eager to any of
# them for enforce_eager (the fallback if graph capture does not end).
# BENCH_T0 (epoch seconds, default now) and BENCH_BUDGET_S (default 570) bound the whole call: phases
# that cannot finish before BENCH_T0 + BENCH_BUDGET_S are skipped and listed as such, and an engine
# still running (a start that hangs) is stopped there.
# The engine core starts with the spawn method, as `vllm serve` does (VLLM_WORKER_MULTIPROC_METHOD).
set -euo pipefail
SP=/tmp/vllm/lib/python3.12/site-packages
OUT=${OUT:-/tmp/out}
T0=${BENCH_T0:-$(date +%s)}
BUDGET=${BENCH_BUDGET_S:-570}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT" /tmp/gpu

stage1() {
  cp "$here/.gpu/vllm.tar.xz.part0" /tmp/gpu/
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))'
  ls -la /tmp/gpu
}

setup() {
  local t=$SECONDS
  cp "$here"/.gpu/vllm.tar.xz.part1 "$here"/.gpu/vllm.tar.xz.sha256 "$here"/.gpu/mkmodel.py /tmp/gpu/
  cat /tmp/gpu/vllm.tar.xz.part* > /tmp/vllm.tar.xz
  (cd /tmp && sha256sum -c /tmp/gpu/vllm.tar.xz.sha256)
  rm -rf /tmp/vllm && mkdir -p "$SP"
  xz -dc -T0 /tmp/vllm.tar.xz | tar -C "$SP" -xf -
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SP" \
    "$here"/.gpu/deps/*.whl 2>&1 | grep -v "^WARNING: Target directory" || true
  PYTHONPATH=$SP python3 /tmp/gpu/mkmodel.py /tmp/model
  PYTHONPATH=$SP python3 /tmp/gpu/mkmodel.py /tmp/model_w4a16 w4a16
  PYTHONPATH=$SP python3 -c "import vllm; print('vllm', vllm.__version__)"
  echo "setup took $((SECONDS - t)) s"
}

bench() {
  export PYTHONPATH=$SP VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1 VLLM_WORKER_MULTIPROC_METHOD=spawn
  local deadline=$((T0 + BUDGET))
  for engine in "$@"; do
    local args=(--engine "$engine" --deadline "$deadline" --out "$OUT/speed_$engine.json")
    local eager=0 kv=""
    case $engine in *-eager) eager=1 ;; esac
    case ${engine%-eager} in
      w4a16-base-cost) args+=(--model /tmp/model_w4a16 --plan lora-cost) ;;
      w4a16-lora-cost) args+=(--model /tmp/model_w4a16 --plan lora-cost --lora) ;;
      w4a16-kvdef) args+=(--model /tmp/model_w4a16 --plan fp8kv) ;;
      w4a16-fp8kv) args+=(--model /tmp/model_w4a16 --plan fp8kv); kv=fp8 ;;
      w4a16-lora-fp8kv) args+=(--model /tmp/model_w4a16 --plan fp8kv --lora); kv=fp8 ;;
    esac
    local ea="{" sep=""
    [ -n "$kv" ] && { ea+="\"kv_cache_dtype\": \"$kv\""; sep=", "; }
    [ $eager = 1 ] && ea+="$sep\"enforce_eager\": true"
    args+=(--engine-args "$ea}")
    case $engine in
      w4a16-base-cost* | w4a16-lora-cost* | w4a16-kvdef* | w4a16-fp8kv* | w4a16-lora-fp8kv*) ;;
      bf16) args+=(--model /tmp/model --plan full --probes) ;;
      w4a16) args+=(--model /tmp/model_w4a16 --plan full --probes) ;;
      w4a16-lora) args+=(--model /tmp/model_w4a16 --plan lora --lora) ;;
      w4a16-poisson) args+=(--model /tmp/model_w4a16 --plan poisson) ;;
      bf16-poisson) args+=(--model /tmp/model --plan poisson) ;;
      *) echo "unknown engine $engine" >&2; return 2 ;;
    esac
    local left=$((deadline - $(date +%s)))
    echo "== $engine: $left s left, ${args[*]}"
    if [ $left -lt 60 ]; then echo "skip engine $engine: $left s left"; continue; fi
    timeout -k 10 $left python3 "$here/bench/speed_bench.py" "${args[@]}" 2>&1 | tee "$OUT/$engine.log" |
      grep -E --line-buffered "engine ready|^probe|req/min|^skip|Error|KV cache|Model loading|Traceback|capturing finished|compile took|init engine" || true
    # an engine core left behind by a stopped run would hold the GPU for the next engine
    for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); do kill -9 "$pid" || true; done
  done
}

"$@"
