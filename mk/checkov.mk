# checkov lives in its own venv: installing it downgrades `packaging` below what pytest 9 needs.
CHECKOV_VENV := .venv-checkov
CHECKOV := $(CHECKOV_VENV)/bin/checkov

$(CHECKOV_VENV)/.stamp: requirements-checkov.txt
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q --upgrade pip
	$(CHECKOV_VENV)/bin/pip install -q -r requirements-checkov.txt
	touch $@

.PHONY: checkov-venv
checkov-venv: $(CHECKOV_VENV)/.stamp ## development | the .venv-checkov virtualenv
