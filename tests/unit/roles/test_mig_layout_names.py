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

from ansible_collections.gpufleet.mig.plugins.lookup import mig_layout_module_options as lookup_plugin
from ansible_collections.gpufleet.mig.plugins.lookup.mig_layout_module_options import (
    KUBELET_OPTIONS, MODULE_OPTIONS, RENAMED_VARIABLES, RenamedVariableConflict, module_options)
from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_layout, nvidia_mig_mode

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
ROLE = os.path.join(REPO, 'roles', 'mig_layout')
# Options the role feeds from something other than a variable of the same name, and why.
NOT_A_ROLE_VARIABLE = {
    'name': 'mig_layout__layout',            # mig_layout_name, or the layout the node's label requests
    'config': 'mig_layout__catalog.configs',         # only the chosen layout travels to the host
    'pod_resources': 'mig_layout__pod_resources_mode',   # decided from the Kubernetes settings, from mig_layout_k8s_pod_resources
}
LAYOUT_OPTIONS = MODULE_OPTIONS['nvidia_mig_layout']


def named_after(option, variable, module='nvidia_mig_layout'):
    """The naming rule: mig_layout_<option>, the kubelet's with the k8s_ prefix of the Kubernetes settings, the
    repack's thresholds with repack_."""
    if (option, variable) in KUBELET_OPTIONS:
        return variable == 'mig_layout_k8s_' + option
    if module == 'nvidia_mig_repack' and option != 'lock_timeout':
        return variable == 'mig_layout_repack_' + option
    return variable == 'mig_layout_' + option


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
    fed = dict((option, '{{ %s }}' % variable) for option, variable in LAYOUT_OPTIONS)
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
            variable = re.match(r'\{\{\s*([a-z0-9_]+)', template.strip()).group(1)
            assert named_after(option, variable), (option, template)
        assert option in options(nvidia_mig_layout) or option in ('lock_timeout', 'pod_resources', 'pod_resources_socket'), option


def test_every_module_option_the_lookup_builds_is_named_after_its_option():
    for module, pairs in sorted(MODULE_OPTIONS.items()):
        for option, variable in pairs:
            assert named_after(option, variable, module), (module, option, variable)


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
    """Both names are in every entry point of meta/argument_specs.yml that has the new one (the old one described as
    deprecated, with its replacement and its release); the old one has no default, and the table's default of the new
    one is the role's."""
    defaults = load(ROLE, 'defaults', 'main.yml')
    entry_points = load(ROLE, 'meta', 'argument_specs.yml')['argument_specs']
    assert sorted(RENAMED_VARIABLES) == ['mig_layout_allow_gpu_reset', 'mig_layout_environment', 'mig_layout_manage_systemd',
                                         'mig_layout_other_owner_services', 'mig_layout_pod_resources_socket']
    for old, (new, default, removed_in) in sorted(RENAMED_VARIABLES.items()):
        assert old not in defaults and defaults[new] == default, old
        with_new = [name for name, entry in entry_points.items() if new in entry['options']]
        assert with_new, new
        for name in with_new:
            spec = entry_points[name]['options'][old]
            description = ' '.join(spec['description']) if isinstance(spec['description'], list) else spec['description']
            assert 'default' not in spec and description.startswith('Deprecated, removed in %s; use O(%s)' % (removed_in, new)), (name, old)
            assert spec['type'] == entry_points[name]['options'][new]['type'], (name, old)


def test_the_new_renames_go_one_release_after_the_current_one():
    """Renamed in the release after galaxy.yml's version, gone one release later."""
    major, minor = [int(part) for part in load(REPO, 'galaxy.yml')['version'].split('.')[:2]]
    for old in ('mig_layout_environment', 'mig_layout_pod_resources_socket'):
        assert RENAMED_VARIABLES[old][2] == '%d.%d.0' % (major, minor + 2), old
    assert set(removed_in for dummy, dummy_default, removed_in in RENAMED_VARIABLES.values()) == set(lookup_plugin.DEPRECATION_LINES)


@pytest.fixture
def deprecations(monkeypatch):
    seen = []
    monkeypatch.setattr(display_module.Display, 'deprecated',
                        lambda self, msg, version=None, collection_name=None, **kwargs: seen.append((msg, version, collection_name)))
    return seen


def run_lookup(variables, **kwargs):
    lookup = lookup_plugin.LookupModule()
    lookup._templar = type('Templar', (), {'template': staticmethod(lambda value: value)})()
    return lookup.run([], variables, **kwargs)[0]


def test_an_old_name_still_set_is_used_with_one_deprecation_line_naming_the_new_name_and_the_release(deprecations):
    """The new name at the role's default counts as not set: the old one's value is used, with the warning."""
    assert run_lookup({'mig_layout_allow_reset': True, 'mig_layout_allow_gpu_reset': False})['allow_reset'] is False
    assert run_lookup({'mig_layout_boot_environment': {}, 'mig_layout_environment': {'A': '1'}})['boot_environment'] == {'A': '1'}
    assert run_lookup({'mig_layout_pod_resources_socket': '/k.sock'}, module='nvidia_mig_repack')['pod_resources_socket'] == '/k.sock'
    assert deprecations == [
        ('the mig_layout role variable mig_layout_allow_gpu_reset is deprecated: set mig_layout_allow_reset instead (the '
         'name of the module option it feeds); its value is used', '1.0.0', 'gpufleet.mig'),
        ('the mig_layout role variable mig_layout_environment is deprecated: set mig_layout_boot_environment instead (the '
         'name of the module option it feeds); its value is used', '0.4.0', 'gpufleet.mig'),
        ('the mig_layout role variable mig_layout_pod_resources_socket is deprecated: set mig_layout_k8s_pod_resources_socket '
         'instead (the name of the module option it feeds); its value is used', '0.4.0', 'gpufleet.mig')]
    for message, dummy, dummy_collection in deprecations:
        assert '\n' not in message


def test_an_old_and_a_new_name_set_to_different_values_is_a_one_line_error(deprecations):
    from ansible.errors import AnsibleLookupError
    for old, (new, default, dummy) in sorted(RENAMED_VARIABLES.items()):
        given = {'mig_layout_allow_reset': False, 'mig_layout_systemd': True, 'mig_layout_other_owner_units': ['a.service'],
                 'mig_layout_boot_environment': {'B': '2'}, 'mig_layout_k8s_pod_resources_socket': '/new.sock'}[new]
        other = {'mig_layout_allow_reset': True, 'mig_layout_systemd': False, 'mig_layout_other_owner_units': ['b.service'],
                 'mig_layout_boot_environment': {'A': '1'}, 'mig_layout_k8s_pod_resources_socket': '/old.sock'}[new]
        with pytest.raises(RenamedVariableConflict) as raised:
            module_options({new: given, old: other})
        assert str(raised.value).count('\n') == 0 and old in str(raised.value) and 'set only %s' % new in str(raised.value)
        with pytest.raises(AnsibleLookupError, match='set only %s' % new):
            run_lookup({new: given, old: other})
        # The pre-flight reads the same line without an error (problem=true), for any module's settings.
        assert run_lookup({new: given, old: other}, problem=True) == str(raised.value)
        # The same value under both names is no conflict.
        option = [o for o, variable in LAYOUT_OPTIONS if variable == new][0]
        assert module_options({new: given, old: given})[option] == given
        assert run_lookup({new: given, old: given})[option] == given and deprecations[-1][1] == RENAMED_VARIABLES[old][2]
        assert run_lookup({new: given, old: given}, problem=True) == ''


def test_the_lookup_refuses_a_module_it_does_not_build_options_for():
    from ansible.errors import AnsibleError
    with pytest.raises(AnsibleError, match='module must be one of nvidia_mig_layout, nvidia_mig_repack, nvidia_mig_facts, not .nvidia_mig_mode.'):
        run_lookup({}, module='nvidia_mig_mode')
