# Event-Driven Ansible (docs/eda.md): the event source gpufleet.mig.mig_pending_pods and the rulebook
# extensions/eda/rulebooks/mig_demand.yml under the real ansible-rulebook (tests/eda), against a fake API
# server that serves bursts of unschedulable MIG pods; the rulebook's action runs a playbook. Its own
# virtualenv .venv-eda (requirements/eda.txt, pinned in full); installs Debian's openjdk-17-jre-headless
# (Java 17 for the rule engine) when missing (root). The event source's pure rules are unit-tested by
# `make units` (tests/unit/extensions).
#   make eda-test
EDA_VENV := .venv-eda
EDA_PY := $(EDA_VENV)/bin/python

.PHONY: eda-test

$(EDA_VENV)/.installed: requirements/eda.txt
	$(PYTHON) -m venv $(EDA_VENV)
	$(EDA_PY) -m pip install --quiet -r requirements/eda.txt
	touch $@

eda-test: $(EDA_VENV)/.installed $(COLLECTION_LINK)
	$(PYTEST_ENV) $(EDA_PY) -m pytest -q -p no:cacheprovider -s tests/eda
