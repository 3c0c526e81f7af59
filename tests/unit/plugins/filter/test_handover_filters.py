# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hand-over filters hand the role plain data from _node_handover and turn bad input into AnsibleFilterError."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.filter.mig_handover import FilterModule
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.test_node_handover import node, pod

FILTERS = FilterModule().filters()


def test_filters_are_registered_and_documented():
    import os
    names = sorted(FILTERS)
    assert names == ['mig_handover_advertised', 'mig_handover_allocatable_short', 'mig_handover_decision_retry', 'mig_handover_event',
                     'mig_handover_eviction_problem', 'mig_handover_evictions', 'mig_handover_failure', 'mig_handover_failure_outcome',
                     'mig_handover_layout',
                     'mig_handover_node', 'mig_handover_other_owners', 'mig_handover_paused_left', 'mig_handover_paused_wait', 'mig_handover_pod_resources',
                     'mig_handover_pods_left', 'mig_handover_recovery', 'mig_handover_scope', 'mig_handover_switch']
    from ansible_collections.gpufleet.mig.plugins.filter import mig_handover
    for name in names:
        assert os.path.exists(os.path.join(os.path.dirname(mig_handover.__file__), name + '.yml')), name


@pytest.mark.parametrize('name, args', [
    ('mig_handover_switch', ({'read': True}, 'sideways')),
    ('mig_handover_node', ({}, 'daytime')),
    ('mig_handover_evictions', ([], 'sideways')),
    ('mig_handover_pod_resources', (True, 'sideways')),
    ('mig_handover_node', (node(), 'daytime', ('dcgm',), True, -5)),
    ('mig_handover_advertised', ({}, {}, 'serial')),
    ('mig_handover_recovery', (node(), 'daytime', ['a=b'])),
])
def test_bad_input_is_a_filter_error(name, args):
    with pytest.raises(AnsibleFilterError):
        FILTERS[name](*args)


def test_values_are_plain_data():
    assert FILTERS['mig_handover_switch']({'read': True}, 'in_place')['mode'] == 'in_place'
    # The role's rule: the decision's scope decides whether the switch cordons.
    created = {'gpus': [{'index': 0, 'actions': [{'action': 'create_gpu_instance'}]}], 'pods_to_evict': []}
    destroyed = {'gpus': [{'index': 0, 'actions': [{'action': 'destroy_gpu_instance'}, {'action': 'create_gpu_instance'}]}]}
    assert FILTERS['mig_handover_scope'](created)['create_only'] and not FILTERS['mig_handover_scope'](destroyed)['create_only']
    switch = FILTERS['mig_handover_switch']({'read': True}, 'in_place', False, False, FILTERS['mig_handover_scope'](created)['create_only'])
    assert switch['mode'] == 'create_only' and not switch['cordon']
    assert FILTERS['mig_handover_switch']({'read': True}, 'in_place', False, False,
                                          FILTERS['mig_handover_scope'](destroyed)['create_only'])['cordon']
    assert not FILTERS['mig_handover_node'](node(), 'night', ['device-plugin'], False)['uncordon']
    handover = FILTERS['mig_handover_node'](node({'nvidia.com/gpu.deploy.device-plugin': 'true'}), 'night', ['device-plugin'])
    assert handover['components']['pause'] == {'nvidia.com/gpu.deploy.device-plugin': 'paused-for-mig-change'}
    assert FILTERS['mig_handover_failure'](handover, 'why', False)['uncordon']
    assert FILTERS['mig_handover_decision_retry']('which instances pods hold is unknown', True, False, True)['pod_resources_off']
    assert FILTERS['mig_handover_failure_outcome']({'uncordon': False}, 'n', 'HTTP 403') == (
        'writing nvidia.com/mig.config.state=failed to node n also failed (HTTP 403): it may still say pending, with its GPU '
        'components paused and cordoned.')
    plan = FILTERS['mig_handover_evictions']([pod('a'), pod('b', owner='DaemonSet')], 'in_place', ['ml/a', 'ml/b'], node='n')
    assert [p['name'] for p in plan['evict']] == ['a'] and plan['problem']
    assert FILTERS['mig_handover_eviction_problem']([{'pod': 'ml/a', 'allowed': True}]) is None
    assert FILTERS['mig_handover_pods_left']([pod('a'), pod('d', owner='DaemonSet')]) == ['ml/a']
    assert FILTERS['mig_handover_pods_left']([pod('a')], [{'uid': 'uid-b'}]) == []
    assert FILTERS['mig_handover_paused_left']([pod('a', node_selector={'x': 'true'})], ['x']) == ['ml/a']
    assert FILTERS['mig_handover_advertised']({}, {})['matches']
    assert FILTERS['mig_handover_layout']({}, 'day', True, ['day'])['name'] == 'day'
    assert FILTERS['mig_handover_recovery'](node({'nvidia.com/mig.config.state': 'success', 'nvidia.com/mig.config': 'd'}), 'd') is None
    assert FILTERS['mig_handover_event'](pod('a'), 'R', 'n', '2026-01-01T00:00:00.000000Z')['reason'] == 'R'
