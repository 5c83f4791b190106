# checkov lives in its own venv: installing it downgrades `packaging` below what pytest 9 needs.
CHECKOV_VENV := .venv-checkov
DISTCLEAN_PATHS += $(CHECKOV_VENV)
CHECKOV := $(CHECKOV_VENV)/bin/checkov

$(CHECKOV_VENV)/.stamp: requirements-checkov.txt
	$(call venv-recipe,$(CHECKOV_VENV),requirements-checkov.txt)
	touch $@

.PHONY: checkov-venv
checkov-venv: $(CHECKOV_VENV)/.stamp ## development | the .venv-checkov virtualenv
