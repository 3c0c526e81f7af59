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
from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_facts, nvidia_mig_layout, nvidia_mig_repack

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..', '..'))
MODULE = 'gpufleet.mig.nvidia_mig_layout'
BUILT_ONCE = ("lookup('gpufleet.mig.mig_layout_module_options')", 'mig_layout__module_defaults')
REPACK = 'gpufleet.mig.nvidia_mig_repack'
REPACK_BUILT_ONCE = ("lookup('gpufleet.mig.mig_layout_module_options', module='nvidia_mig_repack')", 'mig_layout__repack_module_defaults')
FACTS = 'gpufleet.mig.nvidia_mig_facts'
FACTS_BUILT_ONCE = "lookup('gpufleet.mig.mig_layout_module_options', module='nvidia_mig_facts')"
# The environment of every module call: the boot unit's, through the lookup (old name included).
ENVIRONMENTS = ("{{ mig_layout__environment }}", "{{ lookup('gpufleet.mig.mig_layout_module_options').boot_environment | default({}) }}")
# What a call may set itself: what it plans or applies, not how the role is configured.
PER_CALL = {'name', 'config', 'apply', 'evict', 'drain', 'pod_resources', 'defer_pending', 'create_only', 'destroy_idle', 'persistence_only'}
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


@pytest.mark.parametrize('module', sorted(MODULE_OPTIONS))
def test_every_role_default_is_the_modules_default(module, monkeypatch):
    """A variable left unset outside the role (the report, the demand run) gives the module's default: the same."""
    main = {'nvidia_mig_layout': nvidia_mig_layout.main, 'nvidia_mig_repack': nvidia_mig_repack.main,
            'nvidia_mig_facts': nvidia_mig_facts.main}[module]
    spec = argument_spec_of(main, monkeypatch)
    defaults = role_defaults()
    for option, variable in MODULE_OPTIONS[module]:
        assert option in spec, option
        assert variable in defaults, variable
        expected = spec[option].get('default')
        if spec[option].get('type') == 'path' and expected is None:
            expected = ''
        assert defaults[variable] == expected, (variable, defaults[variable], option, expected)


def test_the_options_come_from_the_variables_set_and_renamed_ones_still_work():
    warnings = []
    options = module_options({'mig_layout_unmatched': 'fail', 'mig_layout_systemd': None, 'mig_layout_boot_environment': {'A': '1'},
                              'mig_layout_k8s_pod_resources_socket': '/k.sock', 'mig_layout_k8s_pod_resources': 'required'},
                             lambda message, removed_in: warnings.append(message))
    assert options == {'unmatched': 'fail', 'boot_environment': {'A': '1'}, 'pod_resources_socket': '/k.sock',
                       'pod_resources': 'required'}
    assert warnings == []
    options = module_options({'mig_layout_manage_systemd': False, 'mig_layout_other_owner_services': ['x.service'],
                              'mig_layout_environment': {'A': '1'}, 'mig_layout_pod_resources_socket': '/k.sock'},
                             lambda message, removed_in: warnings.append((message, removed_in)))
    assert options == {'systemd': False, 'other_owner_units': ['x.service'], 'boot_environment': {'A': '1'},
                       'pod_resources_socket': '/k.sock'}
    assert sorted(removed_in for dummy, removed_in in warnings) == ['0.4.0', '0.4.0', '1.0.0', '1.0.0']


def test_the_repack_and_the_facts_take_their_options_from_the_same_variables():
    values = {'mig_layout_repack_fragmentation_above': 0.5, 'mig_layout_repack_stranded_above': 2, 'mig_layout_lock_timeout': 7,
              'mig_layout_k8s_pod_resources': 'required', 'mig_layout_pod_resources_socket': '/old.sock', 'mig_layout_unmatched': 'fail'}
    assert module_options(values, module='nvidia_mig_repack') == {
        'fragmentation_above': 0.5, 'stranded_above': 2, 'lock_timeout': 7, 'pod_resources': 'required', 'pod_resources_socket': '/old.sock'}
    assert module_options(values, module='nvidia_mig_facts') == {'pod_resources': 'required', 'pod_resources_socket': '/old.sock'}


def _tasks(items, path, inherited, module=MODULE):
    """(task, the module_defaults value for the module where it runs: the task's, a block's or the play's)."""
    for item in items or []:
        if not isinstance(item, dict):
            continue
        defaults = (item.get('module_defaults') or {}).get(module, inherited)
        for key in ('block', 'rescue', 'always'):
            if key in item:
                yield from _tasks(item[key], path, defaults, module)
        if module in item:
            yield item, defaults


def calls(module=MODULE):
    """Every call of ``module`` in the playbooks and the role, with where it runs and its module_defaults."""
    found = []
    for path in sorted(glob.glob(os.path.join(REPO, 'playbooks', '*.yml')) + glob.glob(os.path.join(REPO, 'roles', '*', 'tasks', '*.yml'))):
        with open(path) as handle:
            document = yaml.safe_load(handle) or []
        relative = os.path.relpath(path, REPO)
        if relative.startswith('playbooks/'):
            for play in document:
                found.extend((relative, task, defaults) for task, defaults in
                             _tasks(play.get('tasks'), relative, (play.get('module_defaults') or {}).get(module), module))
        else:
            found.extend((relative, task, defaults) for task, defaults in _tasks(document, relative, None, module))
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


def test_every_repack_call_takes_its_options_from_the_lookup():
    """nvidia_mig_repack: no call sets an option itself; each runs where its module_defaults are the lookup's
    (module='nvidia_mig_repack'), through the role's mig_layout__repack_module_defaults."""
    found = calls(REPACK)
    assert len(found) >= 2, found
    # The role's task files included inside repack.yml's block run with its module_defaults.
    with open(os.path.join(REPO, 'roles', 'mig_layout', 'tasks', 'repack.yml')) as handle:
        block = [task for task in yaml.safe_load(handle) if task.get('name') == 'Repack the host'][0]
    assert any(built in str(block['module_defaults'][REPACK]) for built in REPACK_BUILT_ONCE), block['module_defaults']
    inside = set('roles/mig_layout/tasks/' + task['ansible.builtin.include_tasks'] for task in block['block']
                 if 'ansible.builtin.include_tasks' in task)
    for path, task, defaults in found:
        assert not task[REPACK], (path, task['name'], task[REPACK])
        assert (defaults is not None and any(built in str(defaults) for built in REPACK_BUILT_ONCE)) or path in inside, (
            path, task['name'], defaults)
    with open(os.path.join(REPO, 'roles', 'mig_layout', 'vars', 'main.yml')) as handle:
        text = ' '.join(yaml.safe_load(handle)['mig_layout__repack_module_defaults'].split())
    assert text == ("{{ lookup('gpufleet.mig.mig_layout_module_options', module='nvidia_mig_repack') "
                    "| combine({'pod_resources': mig_layout__pod_resources_mode}) }}"), text


def test_every_facts_call_that_reads_the_kubelet_takes_its_settings_from_the_lookup():
    """nvidia_mig_facts: no call sets the socket itself; one that does not turn pod-resources off takes the kubelet's
    settings from the lookup (module='nvidia_mig_facts')."""
    found = calls(FACTS)
    assert len(found) >= 8, found
    for path, task, defaults in found:
        args = task[FACTS] or {}
        assert 'pod_resources_socket' not in args, (path, task['name'])
        if args.get('pod_resources') != 'off':
            assert 'pod_resources' not in args and FACTS_BUILT_ONCE in str(defaults), (path, task['name'], defaults)


def test_every_module_call_runs_in_the_boot_units_environment():
    """The environment of each call of a gpufleet.mig module is mig_layout_boot_environment (or its old name) as the
    lookup resolves it: never the variables read directly, which would miss the deprecated name."""
    seen = 0
    for module in (MODULE, REPACK, FACTS, 'gpufleet.mig.nvidia_mig_layout_failure'):
        for path, task, dummy in calls(module):
            seen += 1
            expected = ENVIRONMENTS[0] if path.startswith('roles/') else ENVIRONMENTS[1]
            assert task.get('environment') == expected, (path, task['name'], task.get('environment'))
    assert seen >= 20, seen
    with open(os.path.join(REPO, 'roles', 'mig_layout', 'vars', 'main.yml')) as handle:
        assert yaml.safe_load(handle)['mig_layout__environment'] == ENVIRONMENTS[1]


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
