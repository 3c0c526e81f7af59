# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One name and one default per concept: the mig_layout role's variables are named after the nvidia_mig_layout options
they feed and default as those options do; allow_reset defaults alike in every module; the renamed variables are
still honoured, with a deprecation warning."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import pytest
import yaml

from ansible.utils import display as display_module

from ansible_collections.gpufleet.mig.plugins.filter import mig_layout as layout_filters
from ansible_collections.gpufleet.mig.plugins.lookup.mig_layout_module_options import MODULE_OPTIONS, module_options
from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_layout, nvidia_mig_mode

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLE = os.path.join(REPO, 'roles', 'mig_layout')
# Options the role feeds from something other than a variable of the same name, and why.
NOT_A_ROLE_VARIABLE = {
    'name': 'mig_layout__layout',            # mig_layout_name, or the layout the node's label requests
    'config': 'mig_layout__catalog.configs',         # only the chosen layout travels to the host
    'boot_environment': 'mig_layout_environment',   # the modules' environment is the boot unit's too
    'pod_resources': 'mig_layout__pod_resources_mode',   # decided from the Kubernetes settings
}


def load(*path):
    with open(os.path.join(*path)) as handle:
        return yaml.safe_load(handle)


def options(module):
    return yaml.safe_load(module.DOCUMENTATION)['options']


def module_defaults():
    """{option: the template that feeds it} of every nvidia_mig_layout call of the role: the role variables through the
    lookup gpufleet.mig.mig_layout_module_options (built once, for the playbooks too), and what the role adds."""
    text = ' '.join(load(ROLE, 'vars', 'main.yml')['mig_layout__module_defaults'].split())
    assert text.startswith("{{ lookup('gpufleet.mig.mig_layout_module_options') | combine({"), text
    fed = dict((option, '{{ %s }}' % variable) for option, variable in MODULE_OPTIONS)
    for option, source in (('name', 'mig_layout__layout'), ('config', 'mig_layout__catalog.configs'),
                           ('pod_resources', 'mig_layout__pod_resources_mode')):
        assert "'%s': " % option in text and source in text, (option, text)
        fed[option] = source
    return fed


def test_each_option_the_role_feeds_comes_from_the_variable_named_after_it():
    for option, template in sorted(module_defaults().items()):
        if option in NOT_A_ROLE_VARIABLE:
            assert NOT_A_ROLE_VARIABLE[option] in template, (option, template)
        else:
            variable = re.match(r'\{\{\s*([a-z_]+)', template.strip()).group(1)
            assert variable == 'mig_layout_' + option, (option, template)
        assert option in options(nvidia_mig_layout) or option in ('lock_timeout', 'pod_resources', 'pod_resources_socket'), option


def test_the_role_defaults_are_the_module_defaults():
    defaults = load(ROLE, 'defaults', 'main.yml')
    specs = load(ROLE, 'meta', 'argument_specs.yml')['argument_specs']['main']['options']
    module = options(nvidia_mig_layout)
    for option in sorted(module_defaults()):
        if option in NOT_A_ROLE_VARIABLE or option not in module:
            continue
        variable = 'mig_layout_' + option
        assert defaults[variable] == module[option].get('default'), variable
        assert specs[variable].get('default') == module[option].get('default'), variable


def test_allow_reset_has_one_default_everywhere():
    assert options(nvidia_mig_layout)['allow_reset']['default'] is True
    assert options(nvidia_mig_mode)['allow_reset']['default'] is True
    assert load(ROLE, 'defaults', 'main.yml')['mig_layout_allow_reset'] is True


def test_the_old_names_are_documented_deprecated_and_have_no_default():
    defaults = load(ROLE, 'defaults', 'main.yml')
    specs = load(ROLE, 'meta', 'argument_specs.yml')['argument_specs']['main']['options']
    for old, new in sorted(layout_filters.RENAMED_VARIABLES.items()):
        assert old not in defaults and new in defaults, old
        assert 'default' not in specs[old] and specs[old]['description'].startswith('Deprecated') and new in specs[old]['description']
        option = [o for o, variable in MODULE_OPTIONS if variable == new][0]
        assert module_options({new: 'new', old: 'old'})[option] == 'old', old


@pytest.fixture
def deprecations(monkeypatch):
    seen = []
    monkeypatch.setattr(display_module.Display, 'deprecated',
                        lambda self, msg, version=None, collection_name=None, **kwargs: seen.append((msg, version, collection_name)))
    return seen


def test_a_renamed_variable_still_set_wins_with_a_deprecation_warning(deprecations):
    renamed = layout_filters.mig_layout_renamed
    assert renamed(True, 'mig_layout_allow_gpu_reset', None) is True and deprecations == []
    assert renamed(True, 'mig_layout_allow_gpu_reset', False) is False
    assert renamed(None, 'mig_layout_manage_systemd', False) is False
    assert deprecations == [
        ('the mig_layout role variable mig_layout_allow_gpu_reset is deprecated: it is now mig_layout_allow_reset, the '
         'name of the module option it feeds; its value is used', '1.0.0', 'gpufleet.mig'),
        ('the mig_layout role variable mig_layout_manage_systemd is deprecated: it is now mig_layout_systemd, the name of '
         'the module option it feeds; its value is used', '1.0.0', 'gpufleet.mig')]
    with pytest.raises(Exception, match='not a renamed variable'):
        renamed(1, 'mig_layout_gpu_clients', 2)
