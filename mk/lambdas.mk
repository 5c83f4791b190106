# Canary rollout operator commands and the Lambda tests (lambdas/, tests/lambdas).
# Each canary command loads config/$(ENV).yaml through spec and calls the controller
# Lambda <endpoint_name>-canary-controller with the caller's AWS credentials.
.PHONY: canary-start canary-status canary-rollback canary-wait canary-promote-info promote \
	test-lambdas

canary-start: venv ## canary | start a canary rollout on ENV (ROLLOUT_ID= to retry one)
	$(PY) -m tools.canary start --env $(ENV) $(if $(ROLLOUT_ID),--rollout-id $(ROLLOUT_ID))

canary-status: venv ## canary | the rollout record: status, step, last decision
	$(PY) -m tools.canary status --env $(ENV)

canary-rollback: venv ## canary | roll the canary back to weight 0 (REASON=...)
	$(PY) -m tools.canary rollback --env $(ENV) $(if $(REASON),--reason "$(REASON)")

# Reads the rollout's record until it ends and changes nothing: exit 0 COMPLETED, 1 rolled back or
# failed (the controller's last decision printed), 3 when TIMEOUT_MIN passes first (the rollout
# goes on). TIMEOUT_MIN defaults to the rollout's total bake plus a margin (tools/canary.py).
canary-wait: venv ## canary | wait until the rollout ends: 0 COMPLETED, 1 rolled back/failed, 3 timed out (TIMEOUT_MIN=, POLL_S=)
	$(PY) -m tools.canary wait --env $(ENV) $(if $(TIMEOUT_MIN),--timeout-min $(TIMEOUT_MIN)) $(if $(POLL_S),--poll-s $(POLL_S))

# Resumable: run again after a failure at any step (tools/promote.py reads where the fleet is).
promote: venv node_modules/.stamp ## canary | promote a COMPLETED rollout: primary on the canary's tag (weights reset), canary idle
	$(PY) -m tools.promote --env $(ENV)

canary-promote-info: venv ## canary | the promotion steps once a rollout COMPLETED
	$(PY) -m tools.canary promote-info --env $(ENV)

test-lambdas: venv node_modules/.stamp ## development | tests/lambdas: controller, smoke gate, constructs (moto)
	$(VENV)/bin/pytest -q tests/lambdas

TEST_TARGETS += test-lambdas
