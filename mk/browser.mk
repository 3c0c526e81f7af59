# In a real headless Chromium (tests/browser): the fleet MIG map (filter gpufleet.mig.mig_fleet_map), its rendered DOM
# and a screenshot kept under build/artifacts/, and the collection docsite that make docs builds (its index and a
# module page). Installs Debian's chromium when missing (root).
#   make browser-test
.PHONY: browser-test

browser-test: bootstrap docs ## tests/browser: the fleet MIG map and the docsite in a real headless Chromium
	$(PYTEST) tests/browser
