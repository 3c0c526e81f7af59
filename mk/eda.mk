# Event-Driven Ansible (docs/eda.md): the event source gpufleet.mig.mig_pending_pods and the rulebook
# extensions/eda/rulebooks/mig_demand.yml under the real ansible-rulebook (tests/eda), against a fake API
# server that serves bursts of unschedulable MIG pods; the rulebook's action runs a recording playbook, then
# the real playbooks/mig_demand.yml on the simulated fleet (a 7g.80gb created for the pod). Its own
# virtualenv .venv-eda (requirements/eda.txt, pinned in full); installs Debian's openjdk-17-jre-headless
# (Java 17 for the rule engine) when missing (root). The event source's pure rules are unit-tested by
# `make units` (tests/unit/extensions).
#   make eda-test
EDA_VENV := .venv-eda
EDA_PY := $(EDA_VENV)/bin/python

.PHONY: eda-test eda-venv

$(EDA_VENV)/.installed: requirements/eda.txt
	$(PYTHON) -m venv $(EDA_VENV)
	$(EDA_PY) -m pip install --quiet -r requirements/eda.txt
	touch $@

# By name, for the targets of other mk files (mk/cluster.mk's cluster-test), whatever the include order.
eda-venv: $(EDA_VENV)/.installed

# The rulebook's real playbook runs with .venv's ansible-playbook (kubernetes.core, which the rollout names).
eda-test: $(EDA_VENV)/.installed bootstrap ## tests/eda: the rulebook under the real ansible-rulebook
	GPUFLEET_EDA_ANSIBLE_BIN=$(CURDIR)/$(BIN) $(call PYTEST,$(EDA_PY)) -s tests/eda
