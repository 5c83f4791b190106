# Scaling policy simulator (issue 6): replay traffic traces against config/$(ENV).yaml's policy.
#   make simulate ENV=prod [TRACE=file.csv] [BASELINE=config/other.yaml]
SIM_OUT = sim-out/$(ENV)

.PHONY: simulate test-simulator
simulate: venv ## simulator | replay traces, a deploy at peak, a canary rollout and the routing comparison against ENV
	$(PY) -m simulator run --env $(ENV) --out $(SIM_OUT) \
		$(if $(TRACE),--trace $(TRACE)) $(if $(BASELINE),--baseline $(BASELINE))
	$(PY) -m simulator validate --env $(ENV) --out $(SIM_OUT)
	$(PY) -m simulator scenarios --env $(ENV) --out $(SIM_OUT)
	$(PY) -m simulator rollout --env $(ENV) --out $(SIM_OUT)
	$(PY) -m simulator routing --env $(ENV) --out $(SIM_OUT)

test-simulator: venv ## development | tests/simulator
	$(VENV)/bin/pytest -q tests/simulator

TEST_TARGETS += test-simulator
