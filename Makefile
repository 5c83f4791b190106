# One Makefile, the same commands CI runs. Every target sets up what it needs (venvs, npm) itself.
# Feature areas add their targets in mk/*.mk and append to TEST_TARGETS / LINT_TARGETS / DEMO_TARGETS.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
ENV ?= dev
VENV := .venv
PY := $(VENV)/bin/python
OUT := cdk.out/$(ENV)

TEST_TARGETS := test-infra
LINT_TARGETS := lint-infra
DEMO_TARGETS :=

include $(sort $(wildcard mk/*.mk))

.PHONY: help venv synth lint lint-infra test test-infra demo diff deploy clean validate

help:
	@echo "make demo            synth + validate prod offline, print the plan, then serve the tiny model"
	@echo "make test            every test suite (infra, lambdas, simulator, serving on real vLLM)"
	@echo "make synth ENV=prod  synthesize config/ENV.yaml into cdk.out/ENV and print the plan"
	@echo "make lint            ruff, mypy, cfn-lint, cdk-nag, checkov, hadolint"
	@echo "make diff|deploy ENV=prod   cdk diff / cdk deploy (deploy: tools/deploy.py preflight first; needs AWS credentials)"
	@echo "make simulate ENV=prod      replay traffic, a deploy at peak and a canary rollout against the policy"
	@echo "make build-image|run-image|test-image   build container/Dockerfile (docker or podman), run it as SageMaker does, test it"
	@echo "make canary-start|canary-status|canary-rollback|canary-promote-info ENV=prod   operate a canary rollout"

$(VENV)/.stamp: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements.txt
	touch $@

venv: $(VENV)/.stamp

node_modules/.stamp: package.json
	npm install --no-audit --no-fund --silent
	touch $@

synth: venv
	$(PY) -m tools.synth --env $(ENV) --out $(OUT)

# Validators on the synthesized templates (cfn-lint, checkov) + the project's own code.
validate: synth checkov-venv
	$(PY) -m tools.validate --out $(OUT) --checkov $(CHECKOV)

lint-infra: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(MAKE) --no-print-directory validate ENV=dev
	$(MAKE) --no-print-directory validate ENV=prod

lint: $(LINT_TARGETS)

test-infra: venv checkov-venv
	$(VENV)/bin/pytest -q tests/infra

test: $(TEST_TARGETS)

demo: venv
	$(MAKE) --no-print-directory validate ENV=prod
	@for t in $(DEMO_TARGETS); do $(MAKE) --no-print-directory $$t; done

diff: venv node_modules/.stamp
	npx cdk diff --app "$(PY) app.py" -c env=$(ENV) --output $(OUT)

# Reads the live endpoint first (tools/deploy.py): raises counts before autoscaling is blocked,
# deregisters a variant's scaling before its instance type changes. RESET=DesiredWeight for the
# deploy that promotes a canary; DRY_RUN=1 prints the steps only.
deploy: venv node_modules/.stamp
	$(PY) -m tools.deploy --env $(ENV) $(if $(RESET),--reset $(RESET)) $(if $(DRY_RUN),--dry-run)

clean:
	rm -rf cdk.out .pytest_cache .mypy_cache .ruff_cache
