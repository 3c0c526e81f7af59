# The tests' shared helpers (tests/support): the playbook runner every scenario uses
# (tests/support/playbook.py), the one table of expected layouts (tests/support/expected_layouts.yml,
# checked against the simulator's model tables) and what nvidia_mig_layout's AnsiballZ payload ships
# (the boot code, no simulator), through the real ansible CLI.
#   make support-test
.PHONY: support-test

support-test: bootstrap ## tests/support: the tests' shared helpers, the expected layouts, make help
	$(ANSIBLE_ENV) $(PYTEST) tests/support
