# Cluster roles (device_plugin, gpu_tenancy) and their real Kubernetes control
# plane, built from Go modules into a per-version cache (tests/cluster/).
#   make cluster-build   build or find the binaries (cold: ~20 min on 2 cores, then cached)
#   make cluster-units   render the roles' manifests offline and validate them, and the
#                        helpers of the real-node checks (no cluster)
#   make cluster-test    Molecule scenario "cluster" on a freshly started control plane with fake
#                        nodes and one real node (tests/cluster/node.sh: containerd, a kubelet and
#                        the test device plugin on a simulated A100) for the in-place MIG switch
#                        and the real ansible-rulebook of .venv-eda (mk/eda.mk) creating MIG
#                        instances for pending pods; needs root (~13 min on 2 cores once the
#                        binaries are cached)
#   make cluster-up / cluster-down   a cluster to poke at: source .state/cluster/env
# GPUFLEET_CLUSTER_BIN_DIR=<dir> uses prebuilt binaries, GPUFLEET_CLUSTER_CACHE moves the cache.
CLUSTER_ENV := $(ANSIBLE_ENV) GPUFLEET_CLUSTER_PYTHON=$(CURDIR)/$(PY)

.PHONY: cluster-build cluster-units cluster-test cluster-up cluster-down

cluster-build: bootstrap ## the cluster tests' Kubernetes binaries, built from Go once and cached
	nice -n 10 tests/cluster/build.sh

cluster-units: bootstrap ## the cluster roles' manifests rendered offline and the cluster helpers' tests
	$(ANSIBLE_ENV) $(PYTEST) tests/unit/roles/test_cluster_manifests.py tests/cluster/test_helper.py tests/cluster/test_eda_timeline.py

# The EDA check (molecule/cluster/tasks/eda_demand.yml) runs the real ansible-rulebook of .venv-eda (mk/eda.mk's eda-venv).
cluster-test: bootstrap cluster-build eda-venv ## Molecule scenario cluster: a real control plane and node (root)
	$(PYTEST) tests/cluster/test_helper.py tests/cluster/test_eda_timeline.py tests/cluster/test_node_sh.py
	$(CLUSTER_ENV) $(BIN)/molecule test -s cluster

cluster-up: bootstrap cluster-build ## a cluster to poke at (then: source .state/cluster/env)
	$(CLUSTER_ENV) tests/cluster/cluster.sh start

cluster-down: ## stop what make cluster-up started
	tests/cluster/cluster.sh stop
