# Rolling MIG layout switches over real SSH (Molecule scenario "fleet", tests/fleet/fleet.sh):
# four simulated GPU hosts, each a network namespace with its own sshd on 10.231.77.0/24.
# Needs root (namespaces, veths, a bridge); installs openssh-server when it is missing.
#   make fleet-test    the scenario: switches, faults mid-rollout, timing (about 6-8 min on 2 cores)
#   make fleet-down    take down what an interrupted run left (molecule destroy: sshds, namespaces, bridge)
FLEET_ENV := $(ANSIBLE_ENV)

.PHONY: fleet-test fleet-down

fleet-test: bootstrap ## Molecule scenario fleet: rolling switches over real SSH (root)
	$(FLEET_ENV) $(BIN)/molecule test -s fleet

fleet-down: bootstrap ## take down what an interrupted fleet-test left
	$(FLEET_ENV) $(BIN)/molecule destroy -s fleet
