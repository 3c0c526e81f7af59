# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The mig_layout role's tasks call the Python hand-over and report; these tests pin the lines that do.

Each rule lives in Python (plugins/module_utils/k8s/_node_handover.py, tested in test_node_handover.py); what
the role's YAML can still break is whether it passes that decision on. Each test below goes red when one such
line is changed: an apply without pod-resources, no wait for the new advertisement or a comparison by counts
where ids are known, an eviction without its dry run first, the drain deciding without the host's names.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import yaml

ROLE = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'mig_layout')


def _load(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def _tasks(tasks):
    """Every task of a task list, blocks' own tasks included, in order."""
    for task in tasks or []:
        yield task
        for section in ('block', 'rescue', 'always'):
            for inner in _tasks(task.get(section)):
                yield inner


def _all_tasks():
    folder = os.path.join(ROLE, 'tasks')
    for name in sorted(os.listdir(folder)):
        for task in _tasks(_load('tasks', name)):
            yield name, task


def _task(file_name, name):
    found = [t for t in _tasks(_load('tasks', file_name)) if t.get('name') == name]
    assert len(found) == 1, 'task %r of %s: %d found' % (name, file_name, len(found))
    return found[0]


def _squash(text):
    return ' '.join(str(text).split())


def test_every_apply_and_second_decision_reads_pod_resources_as_python_decides():
    calls = [(f, t) for f, t in _all_tasks() if 'gpufleet.mig.nvidia_mig_layout' in t]
    applies = [(f, t) for f, t in calls if t['gpufleet.mig.nvidia_mig_layout'].get('apply') is True]
    assert len(applies) >= 2      # the apply, and the apply after a reboot
    for file_name, task in applies:
        assert task['gpufleet.mig.nvidia_mig_layout'].get('pod_resources') == '{{ mig_layout__apply_pod_resources }}', (file_name, task['name'])
    variables = _load('vars', 'main.yml')
    assert variables['mig_layout__apply_pod_resources'] == '{{ mig_layout__pod_resources.apply }}'
    assert variables['mig_layout__pod_resources_mode'] == '{{ mig_layout__pod_resources.decide }}'
    assert variables['mig_layout__module_defaults']['pod_resources'] == '{{ mig_layout__pod_resources_mode }}'
    assert _squash(variables['mig_layout__pod_resources']).startswith(
        '{{ mig_layout__k8s | gpufleet.mig.mig_handover_pod_resources(mig_layout_k8s_switch, mig_layout_k8s_drain_fallback, '
        'mig_layout__decision | default(none), mig_layout__final | default(none)) }}')


def test_the_decision_after_the_cordon_is_the_switch_modes_and_names_every_holder_in_a_drain():
    task = _task('k8s_pre.yml', 'Plan the layout on the host again, now that the node is cordoned')
    args = task['gpufleet.mig.nvidia_mig_layout']
    assert args['apply'] is False and args['evict'] is True
    assert args['drain'] == '{{ mig_layout__switch.drain }}'
    assert args['pod_resources'] == '{{ mig_layout__apply_pod_resources }}'
    assert task['when'] == 'mig_layout__switch.decide_again'


def test_the_new_advertisement_is_awaited_and_compared_by_device_ids():
    wait = _task('k8s_post.yml', 'Wait until the kubelet advertises exactly the MIG devices the GPUs hold')
    assert _squash(wait['until']) == ('(mig_layout__final.expected_device_ids | gpufleet.mig.mig_handover_advertised('
                                      'mig_layout__kubelet_ids, mig_layout_k8s_device_id_strategy)).matches')
    assert 'mig_layout__compare_ids' in wait['when'] and 'not mig_layout__compare_ids' not in wait['when']
    assert wait['gpufleet.mig.nvidia_mig_facts']['kubelet_allocatable'] is True
    check = _task('k8s_post.yml', 'Require the kubelet to advertise exactly what the GPUs hold')
    assert check['ansible.builtin.assert']['that'] == 'mig_layout__advertised.matches'
    assert 'gpufleet.mig.mig_handover_advertised(' in check['vars']['mig_layout__advertised']
    counts = _task('k8s_post.yml', 'Wait until the node advertises as many instances as the GPUs hold')
    assert 'not mig_layout__compare_ids' in counts['when']
    variables = _load('vars', 'main.yml')
    assert variables['mig_layout__compare_ids'] == '{{ mig_layout__pod_resources.compare_ids }}'
    assert variables['mig_layout__final'] == (
        '{{ mig_layout__reapplied if mig_layout__reapplied.resources is defined else mig_layout__applied }}')


def test_every_eviction_is_tried_as_a_dry_run_first_with_the_same_pods():
    for file_name in sorted(os.listdir(os.path.join(ROLE, 'tasks'))):
        tried = []
        for task in _tasks(_load('tasks', file_name)):
            args = task.get('gpufleet.mig.mig_pod_eviction')
            if args is None:
                continue
            if args.get('dry_run') is True:
                tried.append(args['pods'])
            else:
                assert 'dry_run' not in args, (file_name, task['name'])
                assert args['pods'] in tried, '%s: %r evicts without a dry run first' % (file_name, task['name'])
