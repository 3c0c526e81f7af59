# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""k8s/_gated_demand.GatedDemand: what the event source does for gated pods, decided again from what it watches."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._gated_demand import GatedDemand, gated_pod
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._slice_gate import SLICE_GATE, pinned_node, release_patch
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_fast import gpus_annotation
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_input import DemandPlanError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gated_queue import GatedOptions
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.pods import pod
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.test_demand_planner import gpu
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.test_fast_path import gpu_node

# The pods' creationTimestamp (tests/unit/.../pods.py): 2026-12-03T22:00:00Z.
CREATED = 1796335200.0
IDLE_1G = (('1g.10gb', 0, []),)
FULL_1G = tuple(('1g.10gb', start, ['team-a/holder-%d' % start]) for start in range(7))


def gated(name, profile='1g.10gb', count='1', created=None, **extra):
    result = pod(name, {'nvidia.com/mig-%s' % profile: count}, scheduled=False, **extra)
    result['spec']['schedulingGates'] = [{'name': SLICE_GATE}]
    if created:
        result['metadata']['creationTimestamp'] = created
    return result


def patched(obj, node):
    """``obj`` as the API server has it after the source's patch (gate gone, affinity narrowed to ``node``)."""
    patch = release_patch(obj, node)
    spec = dict(obj['spec'], schedulingGates=[g for g in obj['spec']['schedulingGates'] if g['name'] != SLICE_GATE])
    if 'affinity' in patch['spec']:
        spec['affinity'] = patch['spec']['affinity']
    metadata = dict(obj['metadata'], annotations=dict(obj['metadata'].get('annotations') or {},
                                                      **(patch.get('metadata') or {}).get('annotations', {})))
    return dict(obj, metadata=metadata, spec=spec)


def watching(nodes, pods, options=None):
    demand = GatedDemand(options or GatedOptions(destroy_after=None, reshape=False), create_timeout=60, token='t')
    demand.replace_nodes(nodes, CREATED)
    demand.replace_pods(pods)
    return demand


def actions(demand, now=CREATED + 10):
    return [dict((k, v) for k, v in a.items() if k != 'event') for a in demand.take_actions(now)]


def test_nothing_is_decided_before_both_lists():
    demand = GatedDemand(token='t')
    demand.replace_pods([gated('a')])
    assert demand.take_actions(CREATED) == []
    demand.replace_nodes([gpu_node(instances=IDLE_1G)], CREATED)
    assert actions(demand) == [{'action': 'pin', 'pod': 'team-a/a', 'node': 'node-1'}]


def test_an_idle_instance_serves_the_oldest_pod_of_its_profile_once():
    demand = watching([gpu_node(instances=IDLE_1G + FULL_1G[1:])],
                      [gated('younger', created='2026-12-03T22:00:05Z'), gated('older')])
    assert actions(demand) == [{'action': 'pin', 'pod': 'team-a/older', 'node': 'node-1'}]
    # Pinned and not bound yet, the older pod still reserves the instance: the younger one is not served from it.
    assert actions(demand) == []
    older = patched(gated('older'), 'node-1')
    assert pinned_node(older) == 'node-1'
    demand.update_pod(older)
    assert actions(demand) == [] and 'team-a/older' not in demand.pinned


def test_an_older_pod_of_another_profile_is_decided_before_a_younger_one_that_would_take_its_slices():
    """The queue jump: slices 0-3 of GPU 0 are free; the younger 1g.10gb pod, decided first, would take one of them and
    leave no room for the older 3g.40gb pod. In queue order the older pod gets them and the younger one waits."""
    nodes = [gpu_node(instances=(('3g.40gb', 4, ['team-a/holder']),))]
    demand = watching(nodes, [gated('young-small', created='2026-12-03T22:00:05Z'), gated('old-big', profile='3g.40gb')])
    [create] = demand.take_actions(CREATED + 10)
    change = create['event']['mig_demand_create']
    assert (change['pods'], change['gpus']) == (['team-a/old-big'], {'0': {'3g.40gb': 1}})


def test_free_slices_make_one_create_run_per_node_then_the_pod_is_pinned_once_created():
    demand = watching([gpu_node(instances=FULL_1G[:6])], [gated('a')])
    [create] = demand.take_actions(CREATED + 10)
    change = create['event']['mig_demand_create']
    assert (change['run'], change['host'], change['node'], change['pods']) == ('gated-t-1', 'h1', 'node-1', ['team-a/a'])
    assert change['gpus'] == {'0': {'1g.10gb': 1}}
    assert change['layout']['config'][change['layout']['name']] == [
        {'devices': [0], 'mig-enabled': True, 'mig-devices': {'1g.10gb': 7}}]
    # The node is left alone while its run is under way: nothing decided twice.
    assert actions(demand) == []
    node = gpu_node(instances=FULL_1G[:6] + (('1g.10gb', 6, []),),
                    outcome={'run': 'gated-t-1', 'result': 'created'})
    demand.update_node(node, CREATED + 20)
    assert actions(demand, CREATED + 20) == [{'action': 'pin', 'pod': 'team-a/a', 'node': 'node-1'}]


@pytest.mark.parametrize('result', ['refused', 'failed'])
def test_a_run_that_did_not_create_gives_its_pods_to_the_queue_again(result):
    demand = watching([gpu_node(instances=FULL_1G[:6])], [gated('a')])
    demand.take_actions(CREATED + 10)
    demand.update_node(gpu_node(instances=FULL_1G[:6], outcome={'run': 'gated-t-1', 'result': result}), CREATED + 20)
    [again] = demand.take_actions(CREATED + 20)
    assert again['event']['mig_demand_create']['run'] == 'gated-t-2'


def test_a_run_that_never_answers_frees_its_node_after_the_timeout():
    demand = watching([gpu_node(instances=FULL_1G[:6])], [gated('a')])
    demand.take_actions(CREATED + 10)
    assert demand.seconds_until_due(CREATED + 10) == 60.0
    assert demand.take_actions(CREATED + 69) == []
    [again] = demand.take_actions(CREATED + 70)
    assert again['event']['mig_demand_create']['run'] == 'gated-t-2'


def test_a_pod_bound_to_the_node_holds_an_instance_the_annotation_names_idle():
    holder = pod('bound', {'nvidia.com/mig-1g.10gb': '1'}, node_name='node-1', scheduled=('True', ''), phase='Running')
    demand = watching([gpu_node(instances=IDLE_1G)], [holder, gated('a')])
    [create] = demand.take_actions(CREATED + 10)   # not a pin onto the instance the bound pod holds
    assert create['event']['mig_demand_create']['gpus'] == {'0': {'1g.10gb': 1}}


def test_a_pod_nobody_serves_is_released_after_the_wait_with_its_reason():
    demand = watching([gpu_node(instances=FULL_1G)], [gated('a')], GatedOptions(release_after=600, destroy_after=None, reshape=False))
    assert actions(demand, CREATED + 599) == []
    assert demand.seconds_until_due(CREATED + 599) == 1.0
    [release] = actions(demand, CREATED + 600)
    assert release['action'] == 'release' and release['pod'] == 'team-a/a'
    assert 'no idle instance and no free slices' in release['reason']
    assert actions(demand, CREATED + 601) == []   # told once


def test_a_pinned_pod_is_the_queues_until_it_binds_and_a_pod_its_author_pinned_is_not():
    demand = GatedDemand(token='t')
    pinned = patched(gated('a'), 'node-1')
    assert demand.owns(pinned) and not demand.owns(gated('a'))
    assert not demand.owns(dict(pinned, spec=dict(pinned['spec'], nodeName='node-1')))
    authored = gated('b')
    authored['spec'] = dict(authored['spec'], schedulingGates=[], affinity=pinned['spec']['affinity'])
    assert not demand.owns(authored)


def test_a_pod_the_queue_cannot_decide_is_released_at_once_with_why():
    demand = watching([gpu_node(instances=IDLE_1G)], [gated('two', count='2')])
    assert actions(demand) == [{'action': 'release', 'pod': 'team-a/two',
                                'reason': 'asks for nvidia.com/mig-1g.10gb x2: the gated queue decides pods of one MIG device'}]


def test_pods_without_the_gate_are_left_to_kube_scheduler():
    plain = pod('plain', {'nvidia.com/mig-1g.10gb': '1'})
    demand = watching([gpu_node(instances=IDLE_1G)], [plain])
    assert actions(demand) == []
    assert gated_pod(plain)[0].profile == '1g.10gb'


def test_a_patch_the_watch_has_not_shown_is_not_decided_twice_and_a_deleted_pod_is_forgotten():
    demand = watching([gpu_node(instances=IDLE_1G)], [gated('a')])
    assert len(actions(demand)) == 1
    demand.update_pod(gated('a'))   # an older event still shows the gate
    assert actions(demand) == []
    demand.update_pod(gated('a'), deleted=True)
    assert demand.pods == {} and demand.pinned == {}


def test_bad_options_are_refused_in_one_line():
    with pytest.raises(DemandPlanError, match='^order must be queue or smallest-first'):
        GatedDemand(GatedOptions(order='random'))


def test_an_annotation_this_version_cannot_read_leaves_the_node_alone():
    node = gpu_node(instances=IDLE_1G)
    node['metadata']['annotations']['gpufleet.mig/gpus'] = '{"version": 99}'
    demand = watching([node], [gated('a')])
    assert actions(demand) == [] and demand.hosts == {}


def test_the_annotation_is_the_one_playbooks_write():
    assert gpus_annotation('h1', {'gpus': [gpu(0, IDLE_1G)]}) == gpu_node(instances=IDLE_1G)['metadata']['annotations']['gpufleet.mig/gpus']


@settings(max_examples=150, deadline=None)
@given(idle=st.integers(0, 7), held=st.integers(0, 7),
       pods=st.lists(st.tuples(st.sampled_from([0, 10]), st.integers(0, 59)), max_size=8), late=st.booleans())
def test_the_first_pods_in_queue_order_get_the_idle_instances_then_the_free_slices_the_rest_wait_or_are_released(idle, held, pods, late):
    """One node, one profile: whatever the scene, the pods served (pinned or in a create run) are exactly the first in
    kube-scheduler's order (priority, then creation, then name), as many as idle instances and free slices allow; no
    instance is given twice; the others wait, or are released once older than the wait, each told once."""
    held = min(held, idle)
    instances = tuple(('1g.10gb', start, ['other/held-%d' % start] if start < held else []) for start in range(idle))
    gated_pods = [gated('p%d' % number, created='2026-12-03T22:01:%02dZ' % second, priority=priority)
                  for number, (priority, second) in enumerate(pods)]
    demand = watching([gpu_node(instances=instances)], gated_pods, GatedOptions(release_after=600, destroy_after=None, reshape=False))
    got = demand.take_actions(CREATED + (1000 if late else 10))
    order = sorted(gated_pods, key=lambda p: (-p['spec']['priority'], p['metadata']['creationTimestamp'], p['metadata']['name']))
    room = (idle - held) + (7 - idle)
    served = [a['pod'] for a in got if a['action'] == 'pin']
    served += [p for a in got if a['action'] == 'create' for p in a['event']['mig_demand_create']['pods']]
    assert sorted(served) == sorted('team-a/' + p['metadata']['name'] for p in order[:room])
    assert len([a for a in got if a['action'] == 'pin']) <= idle - held
    assert sum(n for a in got if a['action'] == 'create' for n in a['event']['mig_demand_create']['gpus']['0'].values()) <= 7 - idle
    released = [a['pod'] for a in got if a['action'] == 'release']
    assert sorted(released) == (sorted('team-a/' + p['metadata']['name'] for p in order[room:]) if late else [])
    assert len(set(a['pod'] for a in got if 'pod' in a) | set(served)) == len(served) + len(released)


def test_a_cluster_without_gated_pods_costs_no_decision(monkeypatch):
    bound = pod('bound', {'nvidia.com/mig-1g.10gb': '1'}, node_name='node-1', scheduled=('True', ''), phase='Running')
    demand = watching([gpu_node(instances=IDLE_1G)], [bound, pod('plain')])
    monkeypatch.setattr('ansible_collections.gpufleet.mig.plugins.module_utils.k8s._gated_demand.GatedQueue', None)
    assert demand.take_actions(CREATED + 10) == [] and demand.seconds_until_due(CREATED + 10) is None


def test_an_outcome_annotation_this_version_cannot_read_leaves_the_run_under_way():
    demand = watching([gpu_node(instances=FULL_1G[:6])], [gated('a')])
    demand.take_actions(CREATED + 10)
    node = gpu_node(instances=FULL_1G[:6])
    node['metadata']['annotations']['gpufleet.mig/demand-create'] = '["gated-t-1", "created"]'
    demand.update_node(node, CREATED + 20)
    assert actions(demand, CREATED + 20) == [] and list(demand.runs) == ['gated-t-1']


# ---- destroys: a reshape and the release rule, only while no pod could be given the instance -----------------------

SEVEN_IDLE = tuple(('1g.10gb', start, []) for start in range(7))


def admitted(obj):
    """``obj`` as the kubelet leaves it once admitted: its devices allocated, its containers' statuses written."""
    return dict(obj, status=dict(obj['status'], phase='Running', containerStatuses=[{'name': 'main', 'ready': True}]))


def bound(name, profile='1g.10gb', node='node-1'):
    return pod(name, {'nvidia.com/mig-%s' % profile: '1'}, node_name=node, scheduled=('True', ''), phase='Pending')


def test_a_reshape_destroys_idle_instances_of_another_profile_in_the_same_run_as_the_create():
    demand = watching([gpu_node(instances=SEVEN_IDLE)], [gated('big', profile='3g.40gb')], GatedOptions())
    [create] = demand.take_actions(CREATED + 10)
    change = create['event']['mig_demand_create']
    assert (change['pods'], change['gpus'], change['destroys']) == (['team-a/big'], {'0': {'3g.40gb': 1}}, {'0': {'1g.10gb': 3}})
    assert change['layout']['config'][change['layout']['name']] == [
        {'devices': [0], 'mig-enabled': True, 'mig-devices': {'1g.10gb': 4, '3g.40gb': 1}}]


@pytest.mark.parametrize('other, why', [
    (pod('plain', {'nvidia.com/mig-1g.10gb': '1'}), 'waits for kube-scheduler without the slice gate'),
    (pod('replica', {'nvidia.com/mig-1g.10gb.shared': '1'}), 'waits for kube-scheduler without the slice gate'),
    (patched(gated('pinned'), 'node-1'), 'is pinned to node node-1 and not bound yet'),
    (bound('arriving'), 'is bound to node node-1 and not admitted yet'),
])
def test_no_idle_instance_is_destroyed_while_a_pod_could_be_given_it(other, why):
    """A pod that the kubelet could give an idle 1g.10gb before the run destroys it keeps them all: the big pod waits,
    its reason says which pod; once that pod is gone the reshape is decided."""
    demand = watching([gpu_node(instances=SEVEN_IDLE[:2])], [gated('big', profile='7g.80gb'), other], GatedOptions())
    assert actions(demand) == []
    [(waiting, reason)] = [(p.key, r) for p, r in demand.waiting]
    assert waiting == 'team-a/big' and why in reason, reason
    demand.update_pod(other, deleted=True)
    [create] = demand.take_actions(CREATED + 20)
    assert create['event']['mig_demand_create']['destroys'] == {'0': {'1g.10gb': 2}}


@pytest.mark.parametrize('advertised, kept', [({'nvidia.com/small-gpu': '4'}, True), ({'nvidia.com/small-gpu': '0'}, False), ({}, False)])
def test_a_pod_waiting_for_a_renamed_mig_resource_keeps_the_idle_instances_of_the_nodes_that_advertise_it(advertised, kept):
    """The name says no profile, so every idle instance of a node that advertises it is kept while the pod waits; a
    node that does not advertise it cannot be given the pod, and its instances may go."""
    node = gpu_node(instances=SEVEN_IDLE[:2])
    node['status']['allocatable'].update(advertised)
    demand = GatedDemand(GatedOptions(), create_timeout=60, token='t', renamed=('nvidia.com/small-gpu',))
    demand.replace_nodes([node], CREATED)
    demand.replace_pods([gated('big', profile='7g.80gb'), pod('renamed', {'nvidia.com/small-gpu': '1'})])
    found = demand.take_actions(CREATED + 10)
    if kept:
        assert found == [] and 'team-a/renamed' in demand.waiting[0][1] and 'advertises what it asks for' in demand.waiting[0][1]
    else:
        [create] = found
        assert create['event']['mig_demand_create']['destroys'] == {'0': {'1g.10gb': 2}}


def test_an_admitted_pod_lets_the_other_idle_instances_go():
    """Bound and admitted (its device allocated), a pod holds one instance and no longer keeps the others."""
    nodes = [gpu_node(instances=SEVEN_IDLE[:2] + (('1g.10gb', 4, []),))]
    demand = watching(nodes, [gated('big', profile='3g.40gb'), bound('arriving')], GatedOptions())
    assert actions(demand) == [] and 'not admitted yet' in demand.waiting[0][1]
    demand.update_pod(admitted(bound('arriving')))
    [create] = demand.take_actions(CREATED + 20)
    assert create['event']['mig_demand_create']['destroys'] == {'0': {'1g.10gb': 1}}


def test_an_instance_whose_pod_ended_is_destroyed_after_the_delay_by_a_run_of_its_own():
    """The release rule: the instance a pod the queue pinned held is destroyed destroy_after seconds after the watch
    shows the pod gone; an instance no pinned pod held (declared, never used) is left alone."""
    holder = admitted(dict(bound('holder'), metadata=patched(gated('holder'), 'node-1')['metadata']))
    node = gpu_node(instances=(('1g.10gb', 0, ['team-a/holder']),) + SEVEN_IDLE[1:2])
    demand = watching([node], [holder], GatedOptions(destroy_after=2.0))
    assert actions(demand, CREATED + 5) == []
    demand.update_pod(holder, deleted=True)
    assert actions(demand, CREATED + 10) == [] and demand.seconds_until_due(CREATED + 10) == 2.0
    [destroy] = demand.take_actions(CREATED + 12)
    change = destroy['event']['mig_demand_create']
    assert (change['pods'], change['gpus'], change['destroys']) == ([], {}, {'0': {'1g.10gb': 1}})
    assert change['layout']['config'][change['layout']['name']] == [
        {'devices': [0], 'mig-enabled': True, 'mig-devices': {'1g.10gb': 1}}]


def test_a_pod_kube_scheduler_placed_leaves_its_instance_to_the_next_pod():
    """Without the queue's pin, a pod that ended leaves an idle instance the release rule does not touch: a cluster
    without the slice gate has no destroy."""
    holder = admitted(bound('holder'))
    demand = watching([gpu_node(instances=(('1g.10gb', 0, ['team-a/holder']),))], [holder], GatedOptions(destroy_after=2.0))
    demand.update_pod(holder, deleted=True)
    assert actions(demand, CREATED + 10) == [] and actions(demand, CREATED + 20) == []
    assert demand.seconds_until_due(CREATED + 20) is None
    assert demand.ended == set()   # what it remembers of ended pods stays bounded where nothing is gated


def test_a_pod_of_a_profile_a_run_destroys_is_not_released_before_the_run_ends():
    holder = admitted(dict(bound('holder'), metadata=patched(gated('holder'), 'node-1')['metadata']))
    node = gpu_node(instances=(('1g.10gb', 0, ['team-a/holder']),) + FULL_1G[1:])
    other = gpu_node('node-2', 'h2', instances=FULL_1G)
    demand = watching([node, other], [holder], GatedOptions(destroy_after=2.0, release_after=5.0))
    actions(demand, CREATED + 1)
    demand.update_pod(holder, deleted=True)
    actions(demand, CREATED + 2)
    [destroy] = demand.take_actions(CREATED + 4)
    assert destroy['event']['mig_demand_create']['destroys'] == {'0': {'1g.10gb': 1}}
    late = gated('late', created='2026-12-03T21:59:00Z')   # gated for more than 5 s already, nobody serves it
    demand.update_pod(late)
    assert actions(demand, CREATED + 6) == []   # not released while a run may destroy a 1g.10gb
    assert demand.seconds_until_due(CREATED + 6) == 58.0   # woken by the run's outcome, or its timeout
    demand.update_node(gpu_node(instances=FULL_1G[1:], outcome={'run': 'gated-t-1', 'result': 'created'}), CREATED + 7)
    [create] = demand.take_actions(CREATED + 7)   # the run over: the freed slice serves it
    assert create['event']['mig_demand_create']['pods'] == ['team-a/late']


def test_an_instance_decided_destroyed_takes_its_time_with_it():
    """Two of the queue's pods end one after the other: the first instance is destroyed 2 s after its pod ended; while
    that run is under way the node's instances still count it, and once the run told its outcome the other instance's
    own time decides, not the destroyed one's (the instance at slice 2, idle and never the queue's, has none)."""
    pinned = dict((name, admitted(dict(bound(name), metadata=patched(gated(name), 'node-1')['metadata']))) for name in ('a', 'b'))
    node = gpu_node(instances=(('1g.10gb', 0, ['team-a/a']), ('1g.10gb', 1, ['team-a/b']), ('1g.10gb', 2, [])))
    demand = watching([node], list(pinned.values()), GatedOptions(destroy_after=2.0))
    actions(demand, CREATED)
    demand.update_pod(pinned['a'], deleted=True)
    assert actions(demand, CREATED + 1) == []
    [first] = demand.take_actions(CREATED + 3)
    assert first['event']['mig_demand_create']['destroys'] == {'0': {'1g.10gb': 1}}
    demand.update_pod(pinned['b'], deleted=True)
    assert actions(demand, CREATED + 4) == []   # the node is busy
    demand.update_node(gpu_node(instances=(('1g.10gb', 1, ['team-a/b']), ('1g.10gb', 2, [])),
                                outcome={'run': 'gated-t-1', 'result': 'created'}), CREATED + 5)
    assert actions(demand, CREATED + 5) == [] and demand.seconds_until_due(CREATED + 5) == 1.0
    [second] = demand.take_actions(CREATED + 6)
    assert second['event']['mig_demand_create']['destroys'] == {'0': {'1g.10gb': 1}}
