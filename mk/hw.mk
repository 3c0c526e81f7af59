# The hardware check (docs/hardware.md): the first thing to run on a machine with NVIDIA GPUs. Read-only
# (no MIG mode change, no instance, no reset): reads every GPU through NVML, runs the modules (facts, then
# mode, instance and layout in check mode), compares NVML's answers with the simulator's model tables and
# prints every difference; the raw answers go to build/hw-check/. Without NVIDIA's library it says so and fails.
#   make hw-check
.PHONY: hw-check

hw-check: bootstrap ## read-only check of this machine's real GPUs against the simulator's tables
	env -u GPUFLEET_MIG_SIMULATOR $(ANSIBLE_ENV) $(PYTEST_ENV) $(PY) tests/hw/hw_check.py --out $(CURDIR)/build/hw-check
