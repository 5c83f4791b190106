# Canary rollout operator commands and the Lambda tests (lambdas/, tests/lambdas).
# Each canary command loads config/$(ENV).yaml through stacks.config and calls the controller
# Lambda <endpoint_name>-canary-controller with the caller's AWS credentials.
.PHONY: canary-start canary-status canary-rollback canary-promote-info test-lambdas

canary-start: venv
	$(PY) -m tools.canary start --env $(ENV) $(if $(ROLLOUT_ID),--rollout-id $(ROLLOUT_ID))

canary-status: venv
	$(PY) -m tools.canary status --env $(ENV)

canary-rollback: venv
	$(PY) -m tools.canary rollback --env $(ENV) $(if $(REASON),--reason "$(REASON)")

canary-promote-info: venv
	$(PY) -m tools.canary promote-info --env $(ENV)

test-lambdas: venv
	$(VENV)/bin/pytest -q tests/lambdas

TEST_TARGETS += test-lambdas
