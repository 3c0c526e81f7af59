# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""planning/_destroy_guard: when the gated queue may destroy an idle instance, and the release rule's clock."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._destroy_guard import (
    ANY_NODE, ANY_PROFILE, FreedInstances, MigPod, destroy_refusal, guarded_profiles, unsafe_destroys)


@pytest.mark.parametrize('pod, unsafe', [
    # gated: the queue's own, it pins none while a run is under way
    (MigPod('ns/a', ('1g.10gb',), gated=True), {}),
    # bound and admitted: it holds its device, the run's guard sees it by device id
    (MigPod('ns/a', ('1g.10gb',), node='n1', admitted=True), {}),
    (MigPod('ns/a', ('1g.10gb',), node='n1', finished=True), {}),
    # bound, not admitted: the kubelet may still give it any idle 1g.10gb of n1
    (MigPod('ns/a', ('1g.10gb',), node='n1'), {('n1', '1g.10gb'): 'not admitted yet'}),
    # pinned by the queue, not bound: any idle one of n1
    (MigPod('ns/a', ('1g.10gb', '2g.20gb'), pinned='n1'), {('n1', '1g.10gb'): 'pinned to node n1', ('n1', '2g.20gb'): 'pinned'}),
    # no gate, no pin: any node
    (MigPod('ns/a', ('3g.40gb',)), {(ANY_NODE, '3g.40gb'): 'without the slice gate'}),
])
def test_each_pod_that_could_be_given_an_idle_instance_keeps_it(pod, unsafe):
    found = unsafe_destroys([pod])
    assert sorted(found) == sorted(unsafe, key=lambda k: (k[0] or '', k[1]))
    for key, words in unsafe.items():
        assert words in found[key] and pod.key in found[key]


def test_a_refusal_for_any_node_covers_every_node():
    unsafe = unsafe_destroys([MigPod('ns/a', ('1g.10gb',)), MigPod('ns/b', ('2g.20gb',), pinned='n1')])
    assert 'ns/a' in destroy_refusal(unsafe, 'n7', '1g.10gb')
    assert 'ns/b' in destroy_refusal(unsafe, 'n1', '2g.20gb')
    assert destroy_refusal(unsafe, 'n2', '2g.20gb') is None and destroy_refusal(unsafe, 'n1', '3g.40gb') is None
    # A MIG resource whose profile cannot be read keeps every profile where the pod may land.
    unsafe = unsafe_destroys([MigPod('ns/c', (ANY_PROFILE,), pinned='n1')])
    assert 'ns/c' in destroy_refusal(unsafe, 'n1', '7g.80gb') and destroy_refusal(unsafe, 'n2', '7g.80gb') is None


def test_the_clock_starts_when_a_held_instance_is_left_and_only_then():
    freed = FreedInstances()
    key = ('n1', '1g.10gb')
    assert freed.observe({key: 2}, {key: 1}, 0.0) == {}   # idle since before: no clock
    assert freed.observe({key: 1}, {key: 2}, 5.0) == {key: [5.0]}
    assert freed.observe({key: 0}, {key: 3}, 7.0) == {key: [5.0, 7.0]}
    assert freed.observe({key: 1}, {key: 2}, 8.0) == {key: [7.0]}   # bound again: the oldest is reused
    assert freed.observe({key: 1}, {key: 0}, 9.0) == {}   # destroyed: no idle instance left to time


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), min_size=1, max_size=20))
def test_the_clock_never_times_more_instances_than_are_idle_nor_more_than_pods_left(counts):
    """Whatever the counts, the times never outnumber the idle instances, nor the held instances that were left since
    the first observation; their times are observation times, oldest first."""
    freed = FreedInstances()
    key = ('n1', '1g.10gb')
    left = 0
    for now, (held, idle) in enumerate(counts):
        before = freed.held
        times = freed.observe({key: held}, {key: idle}, float(now)).get(key, [])
        if before is not None:
            left += max(0, before[key] - held)
        assert len(times) <= idle and len(times) <= left
        assert times == sorted(times) and all(0 <= t <= now for t in times)


@pytest.mark.parametrize('resources, profiles, unread', [
    (['cpu', 'nvidia.com/mig-1g.10gb'], ('1g.10gb',), ()),
    # a time-sliced replica of an instance is that instance
    (['nvidia.com/mig-2g.20gb.shared', 'nvidia.com/mig-1g.10gb'], ('1g.10gb', '2g.20gb'), ()),
    # a MIG name whose profile cannot be read, a renamed MIG resource: every profile
    (['nvidia.com/mig-1g.weird'], (ANY_PROFILE,), ('nvidia.com/mig-1g.weird',)),
    (['nvidia.com/small-gpu', 'nvidia.com/mig-1g.10gb'], (ANY_PROFILE, '1g.10gb'), ('nvidia.com/small-gpu',)),
    # whole GPUs, and a name the source was not told is a MIG device
    (['nvidia.com/gpu', 'nvidia.com/gpu.shared', 'example.com/nic'], (), ()),
])
def test_the_guard_reads_every_name_a_mig_device_is_asked_for_by(resources, profiles, unread):
    assert guarded_profiles(resources, renamed=('nvidia.com/small-gpu',)) == (tuple(sorted(profiles)), unread)


def test_a_pod_that_may_land_only_where_its_resource_is_advertised_keeps_the_instances_of_those_nodes_only():
    unsafe = unsafe_destroys([MigPod('ns/r', (ANY_PROFILE,), nodes=('n1', 'n3'))])
    assert sorted(unsafe) == [('n1', ANY_PROFILE), ('n3', ANY_PROFILE)]
    assert 'ns/r' in destroy_refusal(unsafe, 'n3', '3g.40gb') and 'advertises what it asks for' in unsafe[('n1', ANY_PROFILE)]
    assert destroy_refusal(unsafe, 'n2', '3g.40gb') is None
    # advertised nowhere: it can be bound nowhere before the run ends
    assert unsafe_destroys([MigPod('ns/r', (ANY_PROFILE,), nodes=())]) == {}
    # bound or pinned, the node it names counts, not where its resource is advertised
    assert sorted(unsafe_destroys([MigPod('ns/r', (ANY_PROFILE,), pinned='n2', nodes=('n1',))])) == [('n2', ANY_PROFILE)]


NAMES = ['nvidia.com/mig-1g.10gb', 'nvidia.com/mig-1g.10gb.shared', 'nvidia.com/mig-3g.40gb', 'nvidia.com/mig-x',
         'nvidia.com/small-gpu', 'nvidia.com/gpu', 'cpu']
NODES = ['n1', 'n2', 'n3']
PODS = st.lists(st.tuples(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3), st.sampled_from([None] + NODES),
                          st.booleans(), st.booleans(), st.sampled_from([None] + NODES), st.booleans(),
                          st.sampled_from([None, (), ('n1',), ('n2', 'n3')])), max_size=6)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(PODS)
def test_an_idle_instance_any_waiting_pod_could_be_given_is_never_destroyable(generated):
    """The invariant over generated pods, read from their resource names as the source reads them: an idle instance of
    profile P on node N is refused whenever some pod could be given it before a run ends (bound to N and not admitted,
    pinned to N, or waiting without the gate for any node or for one of the nodes that advertise what it asks for),
    and the refusal names such a pod."""
    pods = []
    for number, (names, node, admitted, gated, pinned, finished, nodes) in enumerate(generated):
        profiles, dummy = guarded_profiles(names, renamed=('nvidia.com/small-gpu',))
        if profiles:
            pods.append(MigPod('ns/p%d' % number, profiles, node, admitted, gated, pinned, finished, nodes))
    unsafe = unsafe_destroys(pods)
    for node in NODES:
        for profile in ('1g.10gb', '3g.40gb', '7g.80gb'):
            could = [p.key for p in pods if not p.finished and (profile in p.profiles or ANY_PROFILE in p.profiles) and (
                (p.node == node and not p.admitted) or (p.node is None and not p.gated and (
                    p.pinned == node or (p.pinned is None and (p.nodes is None or node in p.nodes)))))]
            why = destroy_refusal(unsafe, node, profile)
            if could:
                assert why is not None and any(key in why for key in could), (node, profile, could, why)
            else:
                assert why is None, (node, profile, why)
