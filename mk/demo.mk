# make demo: the built-in simulated fleet (inventories/simulated, state under .state/), in its own small
# virtualenv .venv-demo with only what the demo runs (requirements/demo.txt: ansible-core and the NVML
# bindings; kubernetes.core, which the cluster roles name although the demo only renders manifests).
# make molecule: the Molecule default scenario (localhost + simulator).
DEMO_INVENTORY ?= inventories/simulated
DEMO_VENV := .venv-demo
DEMO_BIN := $(DEMO_VENV)/bin
DEMO_COLLECTIONS := $(CURDIR)/build/demo-collections
# ANSIBLE_ENV's settings with .venv-demo first on PATH, and kubernetes.core from build/demo-collections.
DEMO_ENV := $(DEMO_BIN)/python $(CURDIR)/tests/support/ansible_env.py ANSIBLE_COLLECTIONS_PATH=$(COLLECTIONS):$(DEMO_COLLECTIONS) \
	ANSIBLE_DISPLAY_SKIPPED_HOSTS=false
DEMO_PLAYBOOK := $(DEMO_ENV) $(DEMO_BIN)/ansible-playbook -i $(DEMO_INVENTORY)
# Demo rollout: half of the fleet per batch (production default: one host at a time).
DEMO_SERIAL ?= 50%

.PHONY: demo demo-bootstrap demo-clean molecule

# The timer starts before the set-up, so the time printed at the end is the whole demo.
demo: ## the playbooks on the built-in simulated fleet, no GPU needed (start here)
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory demo-bootstrap; \
	ready=$$(date +%s); \
	echo "== the simulated fleet's GPUs (simulator/seed.yml, first run only)"; \
	$(DEMO_PLAYBOOK) simulator/seed.yml; \
	echo "== site.yml on the simulated fleet (daytime)"; \
	$(DEMO_PLAYBOOK) playbooks/site.yml; \
	echo "== the fleet in daytime"; \
	$(DEMO_PLAYBOOK) playbooks/demo_summary.yml; \
	echo "== what the switch to nighttime will do (--check: the fleet plan, nothing changes)"; \
	$(DEMO_PLAYBOOK) playbooks/mig_layout.yml --check -e mig_layout_name=nighttime -e mig_layout_serial=$(DEMO_SERIAL); \
	echo "== rolling switch to nighttime (what changed per GPU: the fleet plan at its end)"; \
	$(DEMO_PLAYBOOK) playbooks/mig_layout.yml -e mig_layout_name=nighttime -e mig_layout_serial=$(DEMO_SERIAL); \
	echo "== the fleet in nighttime"; \
	$(DEMO_PLAYBOOK) playbooks/demo_summary.yml; \
	echo "== rolling switch back to daytime"; \
	$(DEMO_PLAYBOOK) playbooks/mig_layout.yml -e mig_layout_name=daytime -e mig_layout_serial=$(DEMO_SERIAL); \
	echo "== report and fleet MIG map"; \
	$(DEMO_PLAYBOOK) playbooks/mig_report.yml -e mig_report_map_path=$(CURDIR)/build/mig-fleet-map.html; \
	echo "make demo: fleet MIG map in $(CURDIR)/build/mig-fleet-map.html (open it in a browser)"; \
	end=$$(date +%s); \
	echo "make demo: done in $$(( end - start ))s ($$(( ready - start ))s set-up, $$(( end - ready ))s playbooks)"

demo-bootstrap: $(DEMO_VENV)/.bootstrapped $(DEMO_COLLECTIONS)/ansible_collections/kubernetes/core/MANIFEST.json $(COLLECTION_LINK)

$(DEMO_VENV)/.bootstrapped: requirements/demo.txt requirements/constraints.txt
	@echo "== set-up (first run only): virtualenv $(DEMO_VENV) with ansible-core and nvidia-ml-py (requirements/demo.txt, pinned by requirements/constraints.txt)"
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_BIN)/python -m pip install --quiet -c requirements/constraints.txt -r requirements/demo.txt
	touch $@

# Only the kubernetes.core collection, taken from the pinned community package's wheel (PyPI) rather than
# installing its ~500 MB of collections: a collection is its folder with MANIFEST.json, as ansible-galaxy
# installs it, so Galaxy need not be reachable.
$(DEMO_COLLECTIONS)/ansible_collections/kubernetes/core/MANIFEST.json: requirements/constraints.txt $(DEMO_VENV)/.bootstrapped
	@echo "== set-up (first run only): the kubernetes.core collection into build/demo-collections (from the ansible wheel pinned in requirements/constraints.txt)"
	rm -rf $(DEMO_COLLECTIONS) build/demo-wheels
	$(DEMO_BIN)/python -m pip download --quiet --no-deps -c requirements/constraints.txt -d build/demo-wheels ansible
	$(DEMO_BIN)/python -c 'import glob, sys, zipfile; \
		wheel = zipfile.ZipFile(glob.glob("build/demo-wheels/ansible-*.whl")[0]); \
		wheel.extractall(sys.argv[1], [n for n in wheel.namelist() if n.startswith("ansible_collections/kubernetes/core/")])' \
		$(DEMO_COLLECTIONS)
	rm -rf build/demo-wheels
	test -s $@

demo-clean: ## forget the simulated fleet's state (.state/)
	rm -rf .state

molecule: bootstrap ## Molecule scenario default (localhost and the simulator)
	$(ANSIBLE_ENV) $(BIN)/molecule test -s default
