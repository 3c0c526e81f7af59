# The shipped Prometheus rules (roles/mig_layout/files/prometheus/gpufleet-mig.rules.yml) under promtool (check,
# alert unit tests, series the metrics code writes for every shipped layout on every model), and a real scrape:
# node_exporter's textfile collector and Prometheus on loopback while the role switches a simulated host
# (tests/prometheus). Installs Debian's prometheus and prometheus-node-exporter when missing (root).
#   make prometheus-test
.PHONY: prometheus-test

prometheus-test: bootstrap ## tests/prometheus: the shipped rules under promtool and a real scrape
	$(ANSIBLE_ENV) $(PYTEST) tests/prometheus
