# The hardware check (docs/hardware.md): the first thing to run on a machine with NVIDIA GPUs. Read-only by
# construction: in its process and every Python process it starts (tests/hw/read_only first on PYTHONPATH) pynvml
# lets only read calls reach the driver; the modules run in check mode. Reads every GPU through NVML, runs the modules
# (facts, then mode, instance and layout in check mode), compares every value NVML answered with the simulator's
# model tables and prints every difference; the raw answers go to build/hw-check/. Without NVIDIA's library it says
# so and fails.
#   make hw-check
.PHONY: hw-check

hw-check: bootstrap ## read-only check of this machine's real GPUs against the simulator's tables
	env -u GPUFLEET_MIG_SIMULATOR $(ANSIBLE_ENV) PYTHONPATH=$(CURDIR)/tests/hw/read_only:$(COLLECTIONS) $(PY) tests/hw/hw_check.py \
		--out $(CURDIR)/build/hw-check
