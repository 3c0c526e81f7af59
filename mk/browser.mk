# The fleet MIG map (filter gpufleet.mig.mig_fleet_map) in a real headless Chromium (tests/browser):
# rendered DOM and a screenshot kept under build/artifacts/. Installs Debian's chromium when missing (root).
#   make browser-test
.PHONY: browser-test

browser-test: bootstrap ## tests/browser: the fleet MIG map in a real headless Chromium
	$(PYTEST) tests/browser
