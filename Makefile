# gpufleet.mig developer entry points. Every target bootstraps what it needs.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
COLLECTIONS := $(CURDIR)/build/collections
COLLECTION_LINK := $(COLLECTIONS)/ansible_collections/gpufleet/mig
ANSIBLE_ENV := ANSIBLE_COLLECTIONS_PATH=$(COLLECTIONS) ANSIBLE_ROLES_PATH=$(CURDIR)/roles \
	ANSIBLE_CONFIG=$(CURDIR)/ansible.cfg PATH=$(CURDIR)/$(VENV)/bin:$$PATH
PYTEST_ENV := PYTHONPATH=$(COLLECTIONS)

.PHONY: help bootstrap test check lint sanity units integration benchmark
.DEFAULT_GOAL := help

help:
	@echo "make demo   - run playbooks/site.yml on the built-in simulated fleet (no GPU needed)"
	@echo "make test   - every suite (see SUITES), the cluster's Go build in the background, each suite's time printed"
	@echo "make check  - the everyday loop: lint, ansible-test sanity, unit tests"
	@echo "make benchmark - print planner, rollout, fragmentation and demand figures"

bootstrap: $(VENV)/.bootstrapped $(COLLECTION_LINK)

$(VENV)/.bootstrapped: requirements/test.txt requirements/constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c requirements/constraints.txt -r requirements/test.txt
	touch $@

# Ansible finds this checkout as the collection gpufleet.mig through this link.
$(COLLECTION_LINK):
	mkdir -p $(dir $@)
	ln -sfn $(CURDIR) $@

include $(wildcard mk/*.mk)

# ---- tests -------------------------------------------------------------------------
# (ansible-test units also runs tests/unit/roles, the cluster manifest tests.)
# ansible-test must run from inside ansible_collections/<ns>/<name>: test a clean copy of
# the tracked and new files there.
TEST_COLLECTION := $(CURDIR)/build/test/ansible_collections/gpufleet/mig
ANSIBLE_TEST := cd $(TEST_COLLECTION) && PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(CURDIR)/$(BIN)/ansible-test
# ansible-test fetches a pip bootstrap script from a host that may be unreachable; ours uses ensurepip.
GET_PIP_CACHE := $(HOME)/.ansible/test/cache/get_pip_24_2.py

.PHONY: test-copy
test-copy: bootstrap
	rm -rf $(TEST_COLLECTION) && mkdir -p $(TEST_COLLECTION)
	git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' \
		| tar --null -cf - -T - | tar -xf - -C $(TEST_COLLECTION)
	cd $(TEST_COLLECTION) && git init -q && git add -A
	mkdir -p $(dir $(GET_PIP_CACHE)) && test -s $(GET_PIP_CACHE) || cp tests/sanity/get_pip_offline.py $(GET_PIP_CACHE)

lint: bootstrap
	$(ANSIBLE_ENV) $(BIN)/ansible-lint --profile production

sanity: test-copy
	$(ANSIBLE_TEST) sanity --python 3.11 --requirements --color no

units: test-copy
	$(ANSIBLE_TEST) units --python 3.11 --requirements --color no --num-workers 2

integration: test-copy
	$(ANSIBLE_TEST) integration --python 3.11 --requirements --color no --local

# In this order; tests/run_suites.sh builds the cluster's Go binaries meanwhile and prints the times.
SUITES := lint sanity units floor-test integration support-test molecule awx-test browser-test prometheus-test fleet-test eda-test cluster-test

test: bootstrap
	tests/run_suites.sh $(SUITES)

check: bootstrap
	tests/run_suites.sh lint sanity units

benchmark: bootstrap
	$(PYTEST_ENV) $(ANSIBLE_ENV) $(PY) benchmarks/planner.py
	$(PYTEST_ENV) $(ANSIBLE_ENV) $(PY) benchmarks/fragmentation.py
	$(PYTEST_ENV) $(ANSIBLE_ENV) $(PY) benchmarks/demand.py
	$(ANSIBLE_ENV) $(PY) benchmarks/rollout.py
