# The collection's docsite and its docs lint, with antsibull-docs (the Ansible community collections' tool) in its own
# virtualenv .venv-docs (requirements/docs.txt; ansible-doc is .venv's):
#   make docs        build/docsite/html/index.html: every module, filter and role from its DOCUMENTATION or
#                    meta/argument_specs.yml, the event source's own documentation, and the guides of
#                    docs/docsite/extra-docs.yml (docs/docsite/rst/), with the links of docs/docsite/links.yml
#   make docs-lint   antsibull-docs lint-collection-docs --plugin-docs (part of make lint): a broken reference, an
#                    undocumented option, an invalid markup or an extra doc that is not listed fails it
# Sphinx's settings are mk/docsite/conf.py (antsibull-docs sphinx-init's, without network lookups).
DOCS_VENV := .venv-docs
DOCS_BUILD := $(CURDIR)/build/docsite
DOCS_ENV := env ANSIBLE_COLLECTIONS_PATH=$(COLLECTIONS) PATH=$(CURDIR)/$(DOCS_VENV)/bin:$(CURDIR)/$(BIN):$$PATH

.PHONY: docs docs-lint

$(DOCS_VENV)/.installed: requirements/docs.txt requirements/constraints.txt
	$(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install --quiet -c requirements/constraints.txt -r requirements/docs.txt
	touch $@

docs: bootstrap $(DOCS_VENV)/.installed ## the HTML docsite (antsibull-docs + Sphinx) in build/docsite/html
	rm -rf $(DOCS_BUILD) && mkdir -p $(DOCS_BUILD)/rst/_include && chmod og-w $(DOCS_BUILD)/rst
	$(DOCS_ENV) antsibull-docs collection --use-current --squash-hierarchy --fail-on-error --cleanup everything \
		--dest-dir $(DOCS_BUILD)/rst gpufleet.mig
	mkdir -p $(DOCS_BUILD)/rst/_include && cp extensions/eda/plugins/event_source/mig_pending_pods.py $(DOCS_BUILD)/rst/_include/
	$(DOCS_ENV) sphinx-build -q -b html -c mk/docsite -W --keep-going $(DOCS_BUILD)/rst $(DOCS_BUILD)/html

docs-lint: bootstrap $(DOCS_VENV)/.installed ## antsibull-docs lint-collection-docs with the plugin docs (make lint runs it)
	$(DOCS_ENV) antsibull-docs lint-collection-docs --plugin-docs --check-extra-docs-refs .
