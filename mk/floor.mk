# The lowest ansible-core that meta/runtime.yml's requires_ansible declares (2.17): its own virtualenv
# .venv-floor from requirements/floor.txt, the module unit tests (tests/unit/plugins) and a module run
# through that version's `ansible` on a simulated GPU (tests/floor). Raising the floor means raising
# requires_ansible and requirements/floor.txt together; tests/floor checks that they agree.
#   make floor-test
FLOOR_VENV := .venv-floor
FLOOR_PY := $(FLOOR_VENV)/bin/python
FLOOR_TEST_ARGS ?= -n 2

.PHONY: floor-test

$(FLOOR_VENV)/.installed: requirements/floor.txt
	$(PYTHON) -m venv $(FLOOR_VENV)
	$(FLOOR_PY) -m pip install --quiet -r requirements/floor.txt
	touch $@

floor-test: $(FLOOR_VENV)/.installed $(COLLECTION_LINK) ## the module tests under the lowest ansible-core requires_ansible declares
	$(call PYTEST,$(FLOOR_PY)) $(FLOOR_TEST_ARGS) tests/unit/plugins tests/floor
