#!/usr/bin/env bash
# Issue 42 item 2 (LoRA's cost over HTTP) and issue 46 item 1 (start phases) on the GPU machine, in device calls
# of at most 10 minutes. The vLLM 0.26.0 set comes from /work/shared/gpu/build-carry.sh, re-split so that each
# half travels with the repository under 64 MiB; this script and bench/{http_load,serve_evidence}.py travel with
# it (the device sends the session's checkout, so they are copied into the carried folder):
#   .gpu/a: vllm.tar.xz.part0, mkmodel.py, mklora.py, gpu_evidence.sh
#   .gpu/b: vllm.tar.xz.part1, vllm.tar.xz.sha256, deps/*.whl, http_load.py, serve_evidence.py, gpu_evidence.sh
# Calls, back to back (what /tmp holds lasts only while the machine is held):
#   1. bash .gpu/a/gpu_evidence.sh stage1          part0 to /tmp/gpu, the dummy W4A16 model, 3 adapters
#   2. bash .gpu/b/gpu_evidence.sh setup lora-ab   install, then bench/serve_evidence.py lora-ab
#   3. bash .gpu/b/gpu_evidence.sh start-phases    bench/serve_evidence.py start-phases
#   4. RUNS=cold_default,warm_default IMPORTS=1 LOAD=1 bash .gpu/b/gpu_evidence.sh setup start-cuts
#                                                  bench/serve_evidence.py start-cuts (issue 46 item 2)
#   5. RUNS=cold_default,warm_default LOAD=1 ... then RUNS=warm_default with ~/.triton present and moved
#      away: docs/measurements/start_triton_h100_vllm0.26.md lists the five calls as run;
#      RUNS=cold_shipped,warm_shipped IMPORTS=1 LOAD=1, then RUNS=warm_shipped,warm_shipped: the product's
#      layout (TRITON_CACHE_DIR inside the root): docs/measurements/start_shipped_h100_vllm0.26.md
# BUDGET_S bounds the measurement of a call (default 540 s from this script's start).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/out}
T0=$(date +%s)
BUDGET_S=${BUDGET_S:-540}
mkdir -p "$OUT" /tmp/gpu
export PYTHONPATH=/tmp/site VLLM_USE_FLASHINFER_SAMPLER=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1

models() {
  [ -f /tmp/model_w4a16/config.json ] || python3 "$here/../a/mkmodel.py" /tmp/model_w4a16 w4a16 ||
    python3 /tmp/gpu/mkmodel.py /tmp/model_w4a16 w4a16
  [ -f /tmp/loras/a3/adapter_model.safetensors ] || python3 "$here/../a/mklora.py" /tmp/loras /tmp/model_w4a16 3 ||
    python3 /tmp/gpu/mklora.py /tmp/loras /tmp/model_w4a16 3
}

stage1() {
  cp "$here"/vllm.tar.xz.part0 "$here"/mkmodel.py "$here"/mklora.py /tmp/gpu/
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv
  python3 -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.cuda.get_device_name(0))'
  PYTHONPATH= python3 /tmp/gpu/mkmodel.py /tmp/model_w4a16 w4a16
  PYTHONPATH= python3 /tmp/gpu/mklora.py /tmp/loras /tmp/model_w4a16 3
  ls -la /tmp/gpu; date -u
}

setup() {
  local t=$SECONDS
  if [ ! -f /tmp/gpu/vllm.tar.xz.part0 ]; then echo "NO PART0: a fresh machine; run stage1 again first"; exit 3; fi
  if [ -f /tmp/site/vllm/__init__.py ] && [ -f /tmp/site/.installed ]; then echo "already installed"; return; fi
  cat /tmp/gpu/vllm.tar.xz.part0 "$here"/vllm.tar.xz.part1 > /tmp/vllm.tar.xz
  (cd /tmp && sha256sum -c "$here"/vllm.tar.xz.sha256) || exit 4
  rm -rf /tmp/site && mkdir -p /tmp/site
  xz -dc -T0 /tmp/vllm.tar.xz | tar -C /tmp/site -xf - || exit 5
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$here"/deps/*.whl 2>&1 | grep -v "^WARNING: Target directory" || true
  touch /tmp/site/.installed
  PYTHONPATH= models
  echo "setup took $((SECONDS - t)) s"
}

lora-ab() {
  local left=$((T0 + BUDGET_S - $(date +%s)))
  python3 "$here/serve_evidence.py" lora-ab --out "$OUT" --budget-s "$left" 2>&1 | tee "$OUT/call.log"
}

start-phases() {
  local left=$((T0 + BUDGET_S - $(date +%s)))
  python3 "$here/serve_evidence.py" start-phases --out "$OUT" --budget-s "$left" ${ONLY:+--only $ONLY} 2>&1 |
    tee "$OUT/call.log"
}

start-cuts() {
  local left=$((T0 + BUDGET_S - $(date +%s)))
  python3 "$here/serve_evidence.py" start-cuts --out "$OUT" --budget-s "$left" --runs "$RUNS" \
    ${IMPORTS:+--imports} ${LOAD:+--load} 2>&1 | tee "$OUT/call.log"
}

for step in "$@"; do "$step"; done
nvidia-smi --query-gpu=clocks.sm,power.draw,memory.used --format=csv
date -u
