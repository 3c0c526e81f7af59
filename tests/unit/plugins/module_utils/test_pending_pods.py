# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which pods wait for MIG slices (module_utils/k8s/_pending_pods): the rule of the event source and of the filter."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _pending_pods as pending
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.pods import pod


def test_unschedulable_mig_pod_is_a_request_with_profile_counts_and_priority():
    request = pending.pending_mig_request(pod('train-0', {'nvidia.com/mig-1g.10gb': '2', 'cpu': '4'},
                                              priority=1000, priority_class='training'))
    assert request == {'pod': 'team-a/train-0', 'priority': 1000, 'priority_class': 'training',
                       'requests': {'1g.10gb': 2}, 'created': '2026-12-03T22:00:00Z'}


def test_profile_names_use_the_collections_grammar_through_the_one_resource_parser():
    request = pending.pending_mig_request(pod('p', {'nvidia.com/mig-1g.10gb.me': '1'}))
    assert request['requests'] == {'1g.10gb+me': 1}


def test_unset_priority_is_zero_and_class_empty():
    request = pending.pending_mig_request(pod('p'))
    assert (request['priority'], request['priority_class']) == (0, '')


@pytest.mark.parametrize('kwargs', [
    {'phase': 'Running'},
    {'node_name': 'gpu-1'},
    {'scheduled': ('True', '')},
    {'scheduled': ('False', 'SchedulingGated')},
    {'scheduled': ()},
    {'resources': {'nvidia.com/gpu': '1'}},
    {'resources': {'nvidia.com/mig-1g.10gb.shared': '1'}},
    {'resources': {'nvidia.com/mig-1g.10gb': '0'}},
    {'resources': {'nvidia.com/mig-1g.10gb': '500m'}},
    {'resources': {'example.com/fpga': '1'}},
    # Unschedulable for another reason: new MIG instances would not place it.
    {'message': '0/3 nodes are available: 3 node(s) had untolerated taint {team: b}.'},
])
def test_pods_that_do_not_wait_for_a_mig_slice_do_not_count(kwargs):
    assert pending.pending_mig_request(pod('p', **kwargs)) is None


def test_the_message_must_name_one_of_the_pods_own_mig_resources():
    other = pod('p', {'nvidia.com/mig-3g.40gb': '1'}, message='0/3 nodes are available: 3 Insufficient nvidia.com/mig-1g.10gb.')
    assert pending.pending_mig_request(other) is None


def test_mixed_reasons_still_count_when_one_is_a_missing_mig_resource():
    mixed = pod('p', message='0/3 nodes are available: 1 node(s) had untolerated taint {a: b}, 2 Insufficient nvidia.com/mig-1g.10gb.')
    assert pending.pending_mig_request(mixed)['requests'] == {'1g.10gb': 1}


def test_a_limit_alone_is_the_request():
    assert pending.pending_mig_request(pod('p', {'nvidia.com/mig-2g.20gb': '3'}, limits_only=True))['requests'] == {'2g.20gb': 3}


def test_containers_add_up_and_the_largest_plain_init_container_counts_when_larger():
    spec = pod('p', {'nvidia.com/mig-1g.10gb': '1'})['spec']
    spec['containers'].append({'name': 'b', 'resources': {'limits': {'nvidia.com/mig-1g.10gb': '1'}}})
    spec['initContainers'] = [
        {'name': 'warm', 'resources': {'limits': {'nvidia.com/mig-1g.10gb': '3', 'nvidia.com/mig-3g.40gb': '1'}}},
        {'name': 'small', 'resources': {'limits': {'nvidia.com/mig-1g.10gb': '1'}}},
    ]
    assert pending.pod_mig_resources(spec) == {'nvidia.com/mig-1g.10gb': 3, 'nvidia.com/mig-3g.40gb': 1}


def test_sidecar_init_containers_add_to_the_containers():
    spec = pod('p', {'nvidia.com/mig-1g.10gb': '1'})['spec']
    spec['initContainers'] = [{'name': 'side', 'restartPolicy': 'Always',
                               'resources': {'limits': {'nvidia.com/mig-1g.10gb': '1'}}}]
    assert pending.pod_mig_resources(spec) == {'nvidia.com/mig-1g.10gb': 2}


def test_only_the_waiting_pods_are_kept_sorted_by_namespace_and_name():
    pods = [pod('z', namespace='b'), pod('run', phase='Running', node_name='n'), pod('a', namespace='b'), pod('y')]
    assert [r['pod'] for r in pending.pending_mig_requests(pods)] == ['b/a', 'b/z', 'team-a/y']
    assert pending.pending_mig_requests(None) == []


def test_of_the_told_requests_only_the_pods_still_waiting_count_as_listed_now():
    told = [{'pod': 'team-a/placed', 'requests': {'1g.20gb': 1}}, {'pod': 'team-a/gone', 'requests': {'1g.10gb': 1}},
            {'pod': 'team-a/waits', 'requests': {'7g.80gb': 1}}, {'pod': 'team-a/waits', 'requests': {'7g.80gb': 1}}]
    pods = [pod('placed', {'nvidia.com/mig-1g.20gb': '1'}, phase='Running', node_name='gpu-node', scheduled=('True', '')),
            pod('waits', {'nvidia.com/mig-7g.80gb': '2'}), pod('untold', {'nvidia.com/mig-1g.10gb': '1'})]
    # placed: bound meanwhile; gone: not listed; untold: not in the event; waits: once, with its request as listed now.
    assert pending.still_waiting(told, pods) == [{'pod': 'team-a/waits', 'priority': 0, 'priority_class': '',
                                                  'requests': {'7g.80gb': 2}, 'created': '2026-12-03T22:00:00Z'}]
    assert pending.still_waiting([], pods) == [] and pending.still_waiting(told, []) == []


def test_a_bound_unfinished_pod_with_mig_resources_holds_devices():
    assert pending.holds_mig_devices(pod('run', phase='Running', node_name='gpu-1', scheduled=('True', '')))
    # Bound but its containers not started yet: the kubelet allocated the devices at admission.
    assert pending.holds_mig_devices(pod('starting', phase='Pending', node_name='gpu-1', scheduled=('True', '')))


@pytest.mark.parametrize('kwargs', [
    dict(phase='Succeeded', node_name='gpu-1'),
    dict(phase='Failed', node_name='gpu-1'),
    dict(phase='Pending'),
    dict(phase='Running', node_name='gpu-1', resources={'nvidia.com/mig-1g.10gb.shared': '1'}),
    dict(phase='Running', node_name='gpu-1', resources={'nvidia.com/gpu': '1', 'cpu': '2'}),
])
def test_finished_unbound_shared_or_non_mig_pods_hold_no_mig_device(kwargs):
    assert not pending.holds_mig_devices(pod('p', scheduled=('True', ''), **kwargs))
