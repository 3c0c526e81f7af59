# make demo: the built-in simulated fleet (inventories/simulated, state under .state/).
# make molecule: the Molecule default scenario (localhost + simulator).
DEMO_INVENTORY ?= inventories/simulated
DEMO_PLAYBOOK := $(ANSIBLE_ENV) $(BIN)/ansible-playbook -i $(DEMO_INVENTORY)
# Demo rollout: half of the fleet per batch (production default: one host at a time).
DEMO_SERIAL ?= 50%

.PHONY: demo demo-clean molecule

demo: bootstrap
	@start=$$(date +%s); \
	echo "== the simulated fleet's GPUs (simulator/seed.yml, first run only)"; \
	$(DEMO_PLAYBOOK) simulator/seed.yml; \
	echo "== site.yml on the simulated fleet (daytime)"; \
	$(DEMO_PLAYBOOK) playbooks/site.yml; \
	echo "== rolling switch to nighttime"; \
	$(DEMO_PLAYBOOK) playbooks/mig_layout.yml -e mig_layout_name=nighttime -e mig_layout_serial=$(DEMO_SERIAL); \
	echo "== rolling switch back to daytime"; \
	$(DEMO_PLAYBOOK) playbooks/mig_layout.yml -e mig_layout_name=daytime -e mig_layout_serial=$(DEMO_SERIAL); \
	echo "== summary"; \
	$(DEMO_PLAYBOOK) playbooks/demo_summary.yml; \
	echo "== report and fleet MIG map"; \
	$(DEMO_PLAYBOOK) playbooks/mig_report.yml -e mig_report_map_path=$(CURDIR)/build/mig-fleet-map.html; \
	echo "make demo: fleet MIG map in $(CURDIR)/build/mig-fleet-map.html (open it in a browser)"; \
	echo "make demo: done in $$(( $$(date +%s) - start ))s"

demo-clean:
	rm -rf .state

molecule: bootstrap
	$(ANSIBLE_ENV) $(BIN)/molecule test -s default
