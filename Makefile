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

.PHONY: help bootstrap demo test lint sanity units integration molecule benchmark clean
.DEFAULT_GOAL := help

help:
	@echo "make demo   - run playbooks/site.yml on the built-in simulated fleet (no GPU needed)"
	@echo "make test   - lint, ansible-test sanity, unit, module and Molecule tests"
	@echo "make benchmark - print planner and module figures"

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
