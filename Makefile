# gpufleet.mig developer entry points. Every target bootstraps what it needs.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
COLLECTIONS := $(CURDIR)/build/collections
COLLECTION_LINK := $(COLLECTIONS)/ansible_collections/gpufleet/mig
# A command prefix, as env(1) is: the Ansible settings of this checkout (the collection through $(COLLECTIONS),
# roles/, ansible.cfg, the virtualenv first on PATH), defined once in tests/support/playbook.py for the tests too.
ANSIBLE_ENV := $(PY) $(CURDIR)/tests/support/ansible_env.py
PYTEST_ENV := PYTHONPATH=$(COLLECTIONS)
# Every suite's pytest: $(PYTEST) ARGS... with .venv's Python, $(call PYTEST,PYTHON) ARGS... with another one
# (the collection importable as ansible_collections.gpufleet.mig, no cache folder in the checkout).
PYTEST = $(PYTEST_ENV) $(or $(1),$(PY)) -m pytest -q -p no:cacheprovider

.PHONY: help bootstrap test check lint sanity units integration benchmark
.DEFAULT_GOAL := help

# Every target a developer runs has a "## what it does" on its rule line; make help lists them (tests/support/test_make.py
# fails when a .PHONY target or a suite of SUITES has none). Start with make demo; make check is the everyday loop.
help: ## this list (each file's header in mk/ says more)
	@awk -F ':[^#]*## ' '/^[a-zA-Z0-9_-]+:[^=]*## / {printf "make %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

bootstrap: $(VENV)/.bootstrapped $(COLLECTION_LINK) ## the virtualenv .venv (requirements/test.txt) and the collection link

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

lint: bootstrap ## ansible-lint, production profile, and the plugin and extra docs (make docs-lint)
	$(ANSIBLE_ENV) $(BIN)/ansible-lint --profile production
	$(MAKE) --no-print-directory docs-lint

sanity: test-copy ## ansible-test sanity
	$(ANSIBLE_TEST) sanity --python 3.11 --requirements --color no

units: test-copy ## ansible-test units (tests/unit)
	$(ANSIBLE_TEST) units --python 3.11 --requirements --color no --num-workers 2

integration: test-copy ## ansible-test integration (tests/integration, simulated GPUs)
	$(ANSIBLE_TEST) integration --python 3.11 --requirements --color no --local

# In this order; tests/run_suites.sh builds the cluster's Go binaries meanwhile and prints the times.
SUITES := lint sanity units floor-test integration support-test molecule awx-test browser-test prometheus-test fleet-test eda-test cluster-test

test: bootstrap ## every suite of SUITES in order, the cluster's Go build in the background, each suite's time
	tests/run_suites.sh $(SUITES)

check: bootstrap ## the everyday loop: lint, sanity, units
	tests/run_suites.sh lint sanity units

# make benchmark BENCHMARKS="planner demand" runs some of them. Each benchmark's output follows a line
# "== figures: NAME: COMMAND", after one naming the machine: benchmarks/figures.py reads them (make figures).
BENCHMARKS ?= planner fragmentation demand advisor rollout report
BENCHMARK_ENV_planner := $(PYTEST_ENV)
BENCHMARK_ENV_fragmentation := $(PYTEST_ENV)
BENCHMARK_ENV_demand := $(PYTEST_ENV)
BENCHMARK_ENV_advisor := $(PYTEST_ENV):$(CURDIR)/simulator

.PHONY: figures

benchmark: bootstrap ## print the planner, fragmentation, demand, advisor, rollout and report figures
	@$(PY) benchmarks/figures.py machine
	$(foreach name,$(BENCHMARKS),echo "== figures: $(name): make benchmark BENCHMARKS=$(name)" && \
		$(ANSIBLE_ENV) $(BENCHMARK_ENV_$(name)) $(PY) benchmarks/$(name).py && ) true

# FIGURES_LOGS: more logs to read, such as a saved make test output for the suite times.
figures: bootstrap ## make benchmark, then docs/figures.md from its output (sections not run again are kept)
	mkdir -p build && $(MAKE) --no-print-directory benchmark | tee build/benchmark.log
	$(PY) benchmarks/figures.py write build/benchmark.log $(FIGURES_LOGS)
