# Scaling policy simulator (issue 6): replay traffic traces against config/$(ENV).yaml's policy.
#   make simulate ENV=prod [TRACE=file.csv] [BASELINE=config/other.yaml] [CONFIG=path]
SIM_OUT = sim-out/$(if $(CONFIG),$(basename $(notdir $(CONFIG))),$(ENV))
# CONFIG=path replays that file instead of config/$(ENV).yaml (a components config: its own shape)
SIM_CONFIG = $(if $(CONFIG),--config $(CONFIG),--env $(ENV))

.PHONY: simulate test-simulator fleet capacity-gate test-capacity-gate
simulate: venv ## simulator | replay traces, a deploy at peak, a canary rollout, bad builds' blast radius and the routing comparison against ENV
	$(PY) -m simulator run $(SIM_CONFIG) --out $(SIM_OUT) \
		$(if $(TRACE),--trace $(TRACE)) $(if $(BASELINE),--baseline $(BASELINE))
	$(PY) -m simulator validate $(SIM_CONFIG) --out $(SIM_OUT)
	$(PY) -m simulator scenarios $(SIM_CONFIG) --out $(SIM_OUT)
	$(PY) -m simulator rollout $(SIM_CONFIG) --out $(SIM_OUT)
	$(PY) -m simulator blast-radius $(SIM_CONFIG) --out $(SIM_OUT)
	$(PY) -m simulator routing $(SIM_CONFIG) --out $(SIM_OUT)
	$(PY) -m simulator gate $(SIM_CONFIG) --out $(SIM_OUT)

test-simulator: venv ## development | tests/simulator
	$(VENV)/bin/pytest -q tests/simulator

TEST_TARGETS += test-simulator

# The fleet from the SLOs (issue 36): per instance type, the cheapest bounds that hold every SLO of
# fleet.slos in every scenario of fleet.scenarios at the pessimistic edge of the speed model.
#   make fleet ENV=prod [CANDIDATES="ml.g5.xlarge ml.g6e.xlarge"]
fleet: venv ## simulator | the cheapest fleet per instance type holding ENV's SLOs in every scenario, and the config change
	$(PY) -m simulator fleet --env $(ENV) --out $(SIM_OUT) $(foreach c,$(CANDIDATES),--candidate $(c))

capacity-gate: venv ## simulator | fail when ENV's fleet misses an SLO in a scenario of its fleet: section (runs in make test)
	$(PY) -m simulator gate $(SIM_CONFIG) --out $(SIM_OUT)

test-capacity-gate: venv ## development | the capacity gate on the committed dev and prod configs
	$(MAKE) --no-print-directory capacity-gate ENV=dev
	$(MAKE) --no-print-directory capacity-gate ENV=prod

TEST_TARGETS += test-capacity-gate
