# AWX / Automation Controller as code (playbooks/awx_configure.yml) and the execution
# environment (execution-environment.yml); see docs/awx.md.
#   make awx-test        tests/awx: schedule rules across DST, playbook syntax, mig_layout.yml run
#                        through ansible-runner as AWX runs it, ansible-builder create (offline),
#                        awx_configure.yml against a fake AWX API (2 pytest-xdist workers;
#                        AWX_TEST_ARGS= runs them one after the other)
#   make awx-configure   playbooks/awx_configure.yml on $CONTROLLER_HOST with $CONTROLLER_OAUTH_TOKEN
#                        (AWX_CONFIGURE_ARGS="-e @my-awx.yml")
#   make ee-context      collection tarball and EE build context under build/ee/ (offline)
#   make ee-build        the EE image $(EE_IMAGE) with $(EE_RUNTIME) (needs the network)
EE_DIR := build/ee
EE_IMAGE ?= gpufleet-mig-ee:latest
EE_RUNTIME ?= podman
AWX_TEST_ARGS ?= -n 2
AWX_CONFIGURE_ARGS ?=

.PHONY: awx-test awx-configure ee-context ee-build

awx-test: bootstrap ## tests/awx: schedules, ansible-runner as AWX runs it, the EE context, a fake AWX API
	$(ANSIBLE_ENV) $(PYTEST) $(AWX_TEST_ARGS) tests/awx

awx-configure: bootstrap ## playbooks/awx_configure.yml on $CONTROLLER_HOST
	$(ANSIBLE_ENV) $(BIN)/ansible-playbook playbooks/awx_configure.yml $(AWX_CONFIGURE_ARGS)

ee-context: bootstrap ## the execution environment's build context under build/ee/ (offline)
	rm -rf $(EE_DIR) && mkdir -p $(EE_DIR)
	$(BIN)/ansible-galaxy collection build --output-path $(EE_DIR) .
	$(BIN)/ansible-builder create -f execution-environment.yml -c $(EE_DIR)/context --output-filename Containerfile

ee-build: ee-context ## the execution environment image (needs the network)
	$(BIN)/ansible-builder build -f execution-environment.yml -c $(EE_DIR)/context --output-filename Containerfile \
		--container-runtime $(EE_RUNTIME) -t $(EE_IMAGE)
