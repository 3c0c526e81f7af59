# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_node_fit: where kube-scheduler lets a pod run (NodeAffinity, TaintToleration, NodeResourcesFit), rule by rule."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import decimal

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._node_fit import (
    AFFINITY_REFUSAL,
    NOT_A_NODE_REFUSAL,
    NodeFitError,
    NodeRoom,
    PodPlacementRules,
    pod_cpu_memory,
    quantity,
    refusal,
)


def node(name='n1', labels=None, taints=(), cpu=None, memory=None):
    status = {'allocatable': dict((k, v) for k, v in (('cpu', cpu), ('memory', memory)) if v is not None)}
    return {'metadata': {'name': name, 'labels': labels or {}},
            'spec': {'taints': [dict(zip(('key', 'value', 'effect'), t)) for t in taints]}, 'status': status}


def pod(spec=None, name='p'):
    spec = dict(spec or {})
    spec.setdefault('containers', [{'name': 'c'}])
    return {'metadata': {'namespace': 'ml', 'name': name}, 'spec': spec}


def affinity(*terms):
    return {'affinity': {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': list(terms)}}}}


def expr(key, operator, *values):
    entry = {'key': key, 'operator': operator}
    if values:
        entry['values'] = list(values)
    return entry


def why(spec, node_object, pods=()):
    return refusal(PodPlacementRules.of_pod(pod(spec)), NodeRoom.of_node(node_object, pods))


LABELS = {'gpu': 'h100', 'zone': 'a', 'cores': '64'}


@pytest.mark.parametrize('spec, allowed', [
    ({}, True),
    ({'nodeSelector': {'gpu': 'h100'}}, True),
    ({'nodeSelector': {'gpu': 'a100'}}, False),
    ({'nodeSelector': {'gpu': 'h100', 'zone': 'b'}}, False),            # every pair must hold
    ({'nodeSelector': {'missing': 'x'}}, False),
    (affinity({'matchExpressions': [expr('gpu', 'In', 'a100', 'h100')]}), True),
    (affinity({'matchExpressions': [expr('gpu', 'In', 'a100')]}), False),
    (affinity({'matchExpressions': [expr('gpu', 'NotIn', 'a100')]}), True),
    (affinity({'matchExpressions': [expr('gpu', 'NotIn', 'h100')]}), False),
    (affinity({'matchExpressions': [expr('missing', 'NotIn', 'h100')]}), True),   # NotIn holds where the label is absent
    (affinity({'matchExpressions': [expr('zone', 'Exists')]}), True),
    (affinity({'matchExpressions': [expr('missing', 'Exists')]}), False),
    (affinity({'matchExpressions': [expr('missing', 'DoesNotExist')]}), True),
    (affinity({'matchExpressions': [expr('zone', 'DoesNotExist')]}), False),
    (affinity({'matchExpressions': [expr('cores', 'Gt', '63')]}), True),
    (affinity({'matchExpressions': [expr('cores', 'Gt', '64')]}), False),
    (affinity({'matchExpressions': [expr('cores', 'Lt', '65')]}), True),
    (affinity({'matchExpressions': [expr('cores', 'Lt', '64')]}), False),
    (affinity({'matchExpressions': [expr('gpu', 'Gt', '1')]}), False),    # not an integer label: no match
    (affinity({'matchExpressions': [expr('missing', 'Lt', '1')]}), False),
    (affinity({'matchExpressions': [expr('gpu', 'In', 'h100'), expr('zone', 'In', 'b')]}), False),   # ANDed in a term
    (affinity({'matchExpressions': [expr('zone', 'In', 'b')]}, {'matchExpressions': [expr('gpu', 'In', 'h100')]}), True),  # terms ORed
    (affinity({}), False),                                                   # an empty term matches nothing
    (affinity(), False),                                                     # no term: nothing
    (affinity({'matchFields': [expr('metadata.name', 'In', 'n1')]}), True),
    (affinity({'matchFields': [expr('metadata.name', 'In', 'n2')]}), False),
    (affinity({'matchFields': [expr('metadata.name', 'NotIn', 'n1')]}), False),
    (affinity({'matchFields': [expr('metadata.name', 'NotIn', 'n2')]}), True),
    (affinity({'matchExpressions': [expr('gpu', 'In', 'h100')], 'matchFields': [expr('metadata.name', 'In', 'n2')]}), False),
    ({'nodeSelector': {'gpu': 'a100'}, 'affinity': {'nodeAffinity': {'preferredDuringSchedulingIgnoredDuringExecution': []}}}, False),
    ({'affinity': {'nodeAffinity': {'preferredDuringSchedulingIgnoredDuringExecution': [
        {'weight': 1, 'preference': {'matchExpressions': [expr('gpu', 'In', 'a100')]}}]}}}, True),   # preferred only scores
])
def test_node_selector_and_required_affinity(spec, allowed):
    assert why(spec, node('n1', LABELS)) == (None if allowed else AFFINITY_REFUSAL)


@pytest.mark.parametrize('taints, tolerations, expected', [
    ([('nvidia.com/gpu', '', 'NoSchedule')], [], 'node(s) had untolerated taint {nvidia.com/gpu}'),
    ([('team', 'ml', 'NoExecute')], [], 'node(s) had untolerated taint {team: ml}'),
    ([('team', 'ml', 'PreferNoSchedule')], [], None),                               # only scores
    ([('nvidia.com/gpu', '', 'NoSchedule')], [{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoSchedule'}], None),
    ([('nvidia.com/gpu', '', 'NoSchedule')], [{'key': 'nvidia.com/gpu', 'operator': 'Exists', 'effect': 'NoExecute'}],
     'node(s) had untolerated taint {nvidia.com/gpu}'),                             # effect must match when given
    ([('team', 'ml', 'NoSchedule')], [{'key': 'team', 'operator': 'Equal', 'value': 'ml'}], None),   # any effect
    ([('team', 'ml', 'NoSchedule')], [{'key': 'team', 'value': 'ml'}], None),       # Equal is the default operator
    ([('team', 'ml', 'NoSchedule')], [{'key': 'team', 'operator': 'Equal', 'value': 'cv'}], 'node(s) had untolerated taint {team: ml}'),
    ([('team', 'ml', 'NoSchedule')], [{'key': 'other', 'operator': 'Exists'}], 'node(s) had untolerated taint {team: ml}'),
    ([('team', 'ml', 'NoSchedule'), ('x', '', 'NoExecute')], [{'operator': 'Exists'}], None),   # empty key + Exists: all
    ([('team', 'ml', 'NoSchedule'), ('x', '', 'NoExecute')], [{'key': 'team', 'operator': 'Exists'}],
     'node(s) had untolerated taint {x}'),                                           # every taint must be tolerated
])
def test_taints_and_tolerations(taints, tolerations, expected):
    assert why({'tolerations': tolerations}, node('n1', taints=taints)) == expected


def container(name, cpu=None, memory=None, limits_only=False, restart=None):
    values = dict((k, v) for k, v in (('cpu', cpu), ('memory', memory)) if v is not None)
    entry = {'name': name, 'resources': {'limits' if limits_only else 'requests': values}}
    if restart:
        entry['restartPolicy'] = restart
    return entry


def test_pod_requests_as_the_scheduler_adds_them_up():
    assert pod_cpu_memory({'containers': [container('a', '500m', '1Gi'), container('b', '1', '512Mi')]}) == (1500, 1536 * 2 ** 20)
    # a limit alone is the request (API defaulting); requests win over limits
    assert pod_cpu_memory({'containers': [container('a', '2', limits_only=True)]}) == (2000, 0)
    both = {'name': 'a', 'resources': {'limits': {'cpu': '4'}, 'requests': {'cpu': '1'}}}
    assert pod_cpu_memory({'containers': [both]}) == (1000, 0)
    # the largest init container when it asks more than the containers together
    assert pod_cpu_memory({'containers': [container('a', '1')], 'initContainers': [container('i', '3'), container('j', '2')]}) == (3000, 0)
    assert pod_cpu_memory({'containers': [container('a', '4')], 'initContainers': [container('i', '3')]}) == (4000, 0)
    # a sidecar (restartable init container) runs along: added to the containers and to the init containers after it
    assert pod_cpu_memory({'containers': [container('a', '1')],
                           'initContainers': [container('s', '1', restart='Always'), container('i', '3')]}) == (4000, 0)
    assert pod_cpu_memory({'containers': [container('a', '1')], 'initContainers': [container('s', '1', restart='Always')]}) == (2000, 0)
    # the pod overhead (RuntimeClass) is added
    assert pod_cpu_memory({'containers': [container('a', '1')], 'overhead': {'cpu': '250m', 'memory': '64Mi'}}) == (1250, 64 * 2 ** 20)


@pytest.mark.parametrize('text, value', [
    ('500m', decimal.Decimal('0.5')), ('2', 2), ('1.5', decimal.Decimal('1.5')), ('1Ki', 1024), ('3Gi', 3 * 2 ** 30),
    ('1G', 10 ** 9), ('1e3', 1000), ('100M', 10 ** 8), (4, 4), ('250u', decimal.Decimal('0.00025')),
])
def test_quantities(text, value):
    assert quantity(text, 'x') == value


@pytest.mark.parametrize('text', ['lots', '1Qi', '', True, '1.2.3'])
def test_bad_quantity_is_one_line(text):
    with pytest.raises(NodeFitError, match='^x: .* is not a quantity$'):
        quantity(text, 'x')


def test_allocatable_less_what_bound_pods_request():
    bound = pod({'nodeName': 'n1', 'containers': [container('a', '6', '20Gi')]}, 'bound')
    elsewhere = pod({'nodeName': 'n2', 'containers': [container('a', '6', '20Gi')]}, 'elsewhere')
    done = pod({'nodeName': 'n1', 'containers': [container('a', '6', '20Gi')]}, 'done')
    done['status'] = {'phase': 'Succeeded'}
    failed = dict(done, status={'phase': 'Failed'})
    pending = pod({'containers': [container('a', '6', '20Gi')]}, 'pending')   # not bound: takes nothing yet
    room = NodeRoom.of_node(node('n1', cpu='8', memory='32Gi'), [bound, elsewhere, done, failed, pending])
    assert (room.cpu_millis_free, room.memory_bytes_free) == (2000, 12 * 2 ** 30)
    assert refusal(PodPlacementRules.of_pod(pod({'containers': [container('a', '2', '12Gi')]})), room) is None
    assert refusal(PodPlacementRules.of_pod(pod({'containers': [container('a', '2100m')]})), room) == 'Insufficient cpu'
    assert refusal(PodPlacementRules.of_pod(pod({'containers': [container('a', '1', '13Gi')]})), room) == 'Insufficient memory'
    assert refusal(PodPlacementRules.of_pod(pod({'containers': [container('a', '3', '13Gi')]})), room) == 'Insufficient cpu, Insufficient memory'
    # a pod that asks nothing fits a node already over-committed; an unknown allocatable is not checked
    full = NodeRoom.of_node(node('n1', cpu='1'), [bound])
    assert full.cpu_millis_free < 0 and refusal(PodPlacementRules.of_pod(pod()), full) is None
    assert refusal(PodPlacementRules.of_pod(pod({'containers': [container('a', '1', '1Ti')]})), full) == 'Insufficient cpu'
    # taken: what a pod served in the plan leaves
    after = room.taken(PodPlacementRules.of_pod(pod({'containers': [container('a', '1500m', '2Gi')]})))
    assert (after.cpu_millis_free, after.memory_bytes_free) == (500, 10 * 2 ** 30)


def test_a_host_without_node_object_takes_no_pod():
    assert refusal(PodPlacementRules(), None) == NOT_A_NODE_REFUSAL


@pytest.mark.parametrize('spec, message', [
    (affinity({'matchExpressions': [{'key': 'a', 'operator': 'Like'}]}), "unknown operator 'Like'"),
    (affinity({'matchExpressions': [{'operator': 'In'}]}), 'every requirement needs key and operator'),
    ({'nodeSelector': ['a']}, 'spec.nodeSelector must map label to value'),
    ({'tolerations': ['x']}, 'every toleration must be a mapping'),
])
def test_bad_pod_is_one_line(spec, message):
    with pytest.raises(NodeFitError, match=message):
        PodPlacementRules.of_pod(pod(spec))
