# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 39: the nvidia_mig_layout options the mig_layout role's variables set are built once
(lookup gpufleet.mig.mig_layout_module_options), and every call of the module in a playbook or the role takes them;
the role's defaults are the module's, so that a caller outside the role (the report, the demand run) decides as the role."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os

import pytest
import yaml

from ansible.module_utils import basic

from ansible_collections.gpufleet.mig.plugins.lookup.mig_layout_module_options import MODULE_OPTIONS, module_options
from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_layout

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
MODULE = 'gpufleet.mig.nvidia_mig_layout'
BUILT_ONCE = ("lookup('gpufleet.mig.mig_layout_module_options')", 'mig_layout__module_defaults')
# What a call may set itself: what it plans or applies, not how the role is configured.
PER_CALL = {'name', 'config', 'apply', 'evict', 'drain', 'pod_resources', 'defer_pending', 'create_only', 'persistence_only'}
# The calls that override a setting, and why: after the reboot the MIG mode must be in effect; a GPU reset there
# would hide a mode that a reboot did not apply (tasks/apply.yml, "Require the layout after the reboot").
# The rollout's first decision does not wait for the host lock: run on every host at once, a host another run holds
# would hold the whole pre-flight (tasks/rollout_decide.yml); the role waits for it in the host's batch.
OVERRIDES = {('roles/mig_layout/tasks/apply.yml', 'Apply the layout after the reboot'): {'allow_reset': False},
             ('roles/mig_layout/tasks/rollout_decide.yml',
              'Decide whether the host differs from the layout (a host that is not a Kubernetes node)'): {'lock_timeout': 0}}


class Stop(Exception):
    pass


def argument_spec_of(main, monkeypatch):
    """The argument spec a module's ``main`` builds its AnsibleModule with (the module stops there)."""
    spec = {}

    def capture(self, argument_spec, **kwargs):
        spec.update(argument_spec)
        raise Stop()
    monkeypatch.setattr(basic.AnsibleModule, '__init__', capture)
    with pytest.raises(Stop):
        main()
    return spec


@pytest.fixture
def module_spec(monkeypatch):
    return argument_spec_of(nvidia_mig_layout.main, monkeypatch)


def role_defaults():
    with open(os.path.join(REPO, 'roles', 'mig_layout', 'defaults', 'main.yml')) as handle:
        return yaml.safe_load(handle)


def test_every_role_default_is_the_modules_default(module_spec):
    """A variable left unset outside the role (the report, the demand run) gives the module's default: the same."""
    defaults = role_defaults()
    for option, variable in MODULE_OPTIONS:
        assert option in module_spec, option
        assert variable in defaults, variable
        expected = module_spec[option].get('default')
        if module_spec[option].get('type') == 'path' and expected is None:
            expected = ''
        assert defaults[variable] == expected, (variable, defaults[variable], option, expected)


def test_the_options_come_from_the_variables_set_and_renamed_ones_still_work():
    warnings = []
    options = module_options({'mig_layout_unmatched': 'fail', 'mig_layout_systemd': None, 'mig_layout_environment': {'A': '1'},
                              'mig_layout_pod_resources_socket': '/k.sock'}, warnings.append)
    assert options == {'unmatched': 'fail', 'boot_environment': {'A': '1'}, 'pod_resources_socket': '/k.sock'}
    assert warnings == []
    options = module_options({'mig_layout_systemd': True, 'mig_layout_manage_systemd': False,
                              'mig_layout_other_owner_services': ['x.service']}, warnings.append)
    assert options == {'systemd': False, 'other_owner_units': ['x.service']}
    assert len(warnings) == 2 and all('deprecated' in w for w in warnings)


def _tasks(items, path, inherited):
    """(task, the module_defaults value for the module where it runs: the task's, a block's or the play's)."""
    for item in items or []:
        if not isinstance(item, dict):
            continue
        defaults = (item.get('module_defaults') or {}).get(MODULE, inherited)
        for key in ('block', 'rescue', 'always'):
            if key in item:
                yield from _tasks(item[key], path, defaults)
        if MODULE in item:
            yield item, defaults


def calls():
    """Every call of nvidia_mig_layout in the playbooks and the role, with where it runs and its module_defaults."""
    found = []
    for path in sorted(glob.glob(os.path.join(REPO, 'playbooks', '*.yml')) + glob.glob(os.path.join(REPO, 'roles', '*', 'tasks', '*.yml'))):
        with open(path) as handle:
            document = yaml.safe_load(handle) or []
        relative = os.path.relpath(path, REPO)
        if relative.startswith('playbooks/'):
            for play in document:
                found.extend((relative, task, defaults) for task, defaults in
                             _tasks(play.get('tasks'), relative, (play.get('module_defaults') or {}).get(MODULE)))
        else:
            found.extend((relative, task, defaults) for task, defaults in _tasks(document, relative, None))
    return found


def test_no_playbook_or_role_task_builds_the_module_options_itself():
    """A call sets only what it plans or applies; the rest comes from the options built once. A playbook's call takes them
    in its module_defaults; the role's task files run inside the role's block that sets them (tasks/main.yml), but for
    the rollout's first decision, which sets them itself."""
    found = calls()
    assert len(found) >= 9, found
    for path, task, defaults in found:
        args = task[MODULE] or {}
        extra = set(args) - PER_CALL
        allowed = OVERRIDES.get((path, task.get('name')), {})
        assert extra == set(allowed) and all(args[key] == value for key, value in allowed.items()), (path, task['name'], extra)
        if path.startswith('playbooks/') or path.endswith('rollout_decide.yml'):
            assert defaults is not None and any(built in str(defaults) for built in BUILT_ONCE), (path, task['name'], defaults)


def test_the_role_takes_its_module_options_from_the_lookup():
    with open(os.path.join(REPO, 'roles', 'mig_layout', 'vars', 'main.yml')) as handle:
        text = yaml.safe_load(handle)['mig_layout__module_defaults']
    assert BUILT_ONCE[0] in text
    with open(os.path.join(REPO, 'roles', 'mig_layout', 'tasks', 'main.yml')) as handle:
        main = yaml.safe_load(handle)
    block = [task for task in main if task.get('name') == 'Bring the host to the layout'][0]
    assert block['module_defaults'][MODULE] == '{{ mig_layout__module_defaults }}'


def test_the_repack_thresholds_agree_between_the_role_the_module_and_the_fleet_map(monkeypatch):
    import inspect
    from ansible_collections.gpufleet.mig.plugins.filter.mig_fleet_map import mig_fleet_map
    from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_repack
    spec = argument_spec_of(nvidia_mig_repack.main, monkeypatch)
    defaults = role_defaults()
    mapped = inspect.signature(mig_fleet_map).parameters
    for option in ('fragmentation_above', 'stranded_above'):
        assert spec[option]['default'] == defaults['mig_layout_repack_' + option] == mapped[option].default, option
