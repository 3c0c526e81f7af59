# CHANGELOG.rst and changelogs/changelog.yaml from the fragments in changelogs/fragments/ (antsibull-changelog,
# in its own virtualenv .venv-changelog; ansible-doc of .venv describes the new modules and plugins).
#   make changelog   adds every fragment not yet in it to the release of galaxy.yml's version (created
#                    when missing), takes edited fragments' new text, then rewrites CHANGELOG.rst. Run it
#                    after adding or editing a fragment; the fragments stay (keep_fragments), so running it
#                    again the same day changes nothing (a later day moves the release date).
CHANGELOG_VENV := .venv-changelog
ANTSIBULL_CHANGELOG_VERSION := 0.36.0
GALAXY_VERSION = $(shell sed -n 's/^version: *//p' galaxy.yml)

.PHONY: changelog

$(CHANGELOG_VENV)/.installed:
	$(PYTHON) -m venv $(CHANGELOG_VENV)
	$(CHANGELOG_VENV)/bin/pip install --quiet antsibull-changelog==$(ANTSIBULL_CHANGELOG_VERSION)
	touch $@

changelog: bootstrap $(CHANGELOG_VENV)/.installed ## CHANGELOG.rst from changelogs/fragments/ (run after adding a fragment)
	$(CHANGELOG_VENV)/bin/antsibull-changelog release --version $(GALAXY_VERSION) --update-existing --refresh-fragments without-archives \
		--ansible-doc-bin $(BIN)/ansible-doc
