# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The slice gate (k8s/_slice_gate): which resources are gated, the policy and binding built from the settings, the API
version chosen by discovery, and the patch that hands a decided pod over. The policy's CEL runs for real on the API
server in molecule/cluster (tasks/slice_gate.yml)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _slice_gate as gate
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.pods import pod

V1 = 'admissionregistration.k8s.io/v1'
V1BETA1 = 'admissionregistration.k8s.io/v1beta1'


def test_the_rename_of_a_mig_resource_is_gated_under_nvidia_com_and_other_renames_are_not():
    slicing = [{'name': 'nvidia.com/mig-1g.10gb', 'replicas': 2, 'rename': 'small-gpu'},
               {'name': 'nvidia.com/gpu', 'replicas': 2, 'rename': 'whole-shared'},
               {'name': 'nvidia.com/mig-3g.40gb', 'replicas': 2}]
    assert gate.gated_resources(slicing, ['example.com/mig-like']) == ['example.com/mig-like', 'nvidia.com/small-gpu']
    assert gate.gated_resources() == []


@pytest.mark.parametrize('bad', ['no-prefix', 'nvidia.com/', 'Nvidia.com/x', 'a/b c', 7])
def test_a_name_no_pod_could_request_is_refused_in_one_line(bad):
    with pytest.raises(gate.SliceGateError) as info:
        gate.gated_resources(extra=[bad])
    assert '\n' not in str(info.value) and 'not a resource name' in str(info.value)


def test_v1_is_preferred_v1beta1_taken_and_neither_refused_naming_what_each_version_needs():
    assert gate.served_api_version({V1: True, V1BETA1: True}) == V1
    assert gate.served_api_version({V1: False, V1BETA1: True}) == V1BETA1
    with pytest.raises(gate.SliceGateError) as info:
        gate.served_api_version({V1: False, V1BETA1: False})
    message = str(info.value)
    assert '\n' not in message and 'MutatingAdmissionPolicy=true' in message and V1BETA1 + '=true' in message
    assert 'nothing was changed' in message


def test_namespaces_become_an_in_requirement_on_the_name_label_added_to_the_selector():
    selector = gate.namespace_selector(['b', 'a', 'a'], {'matchLabels': {'tier': 'gpu'}})
    assert selector == {'matchLabels': {'tier': 'gpu'}, 'matchExpressions': [
        {'key': 'kubernetes.io/metadata.name', 'operator': 'In', 'values': ['a', 'b']}]}
    assert gate.namespace_selector() == {}
    with pytest.raises(gate.SliceGateError, match='not a namespace name'):
        gate.namespace_selector(['Team_A'])
    with pytest.raises(gate.SliceGateError, match='matchLabels and matchExpressions, not namespaces'):
        gate.namespace_selector(None, {'namespaces': ['a']})


def test_the_policy_matches_pod_creation_only_and_its_conditions_name_every_gated_resource_and_the_gate():
    policy, binding = gate.slice_gate_objects(V1BETA1, ['nvidia.com/small-gpu'], ['team-a'], labels={'x': 'y'})
    assert [policy['kind'], binding['kind']] == ['MutatingAdmissionPolicy', 'MutatingAdmissionPolicyBinding']
    assert policy['apiVersion'] == binding['apiVersion'] == V1BETA1
    assert policy['spec']['matchConstraints']['resourceRules'] == [
        {'apiGroups': [''], 'apiVersions': ['v1'], 'operations': ['CREATE'], 'resources': ['pods']}]
    asks, not_gated, not_bound = [c['expression'] for c in policy['spec']['matchConditions']]
    assert '"nvidia.com/mig-"' in asks and '["nvidia.com/small-gpu"]' in asks
    assert 'initContainers' in asks and 'requests' in asks and 'limits' in asks
    assert not_gated.startswith('!') and '"gpufleet.mig/slice"' in not_gated
    # A pod that names its node cannot carry a gate (the API server refuses it): left alone.
    assert not_bound == "!has(object.spec.nodeName) || object.spec.nodeName == ''"
    mutation = policy['spec']['mutations'][0]
    assert mutation['patchType'] == 'ApplyConfiguration'
    assert '"gpufleet.mig/slice"' in mutation['applyConfiguration']['expression']
    assert policy['spec']['failurePolicy'] == 'Fail'
    assert binding['spec']['policyName'] == policy['metadata']['name'] == gate.POLICY_NAME
    assert binding['spec']['matchResources']['namespaceSelector']['matchExpressions'][0]['values'] == ['team-a']
    assert policy['metadata']['labels'] == binding['metadata']['labels'] == {'x': 'y'}
    with pytest.raises(gate.SliceGateError, match='api_version must be one of'):
        gate.slice_gate_objects('admissionregistration.k8s.io/v1alpha1')


def test_a_name_with_a_quote_stays_one_cel_string():
    expression = gate.match_expression(['example.com/a"b'])
    assert '"example.com/a\\"b"' in expression


def test_which_pods_ask_for_a_gated_resource():
    assert gate.asks_for_gated_resource(pod('a'), [])
    assert gate.asks_for_gated_resource(pod('a', {'nvidia.com/mig-1g.10gb.shared': '1'}, limits_only=True), [])
    assert not gate.asks_for_gated_resource(pod('a', {'nvidia.com/gpu': '1'}), [])
    assert not gate.asks_for_gated_resource(pod('a', {'nvidia.com/small-gpu': '1'}), [])
    assert gate.asks_for_gated_resource(pod('a', {'nvidia.com/small-gpu': '1'}), ['nvidia.com/small-gpu'])
    sidecar = [{'name': 'init', 'resources': {'requests': {'nvidia.com/mig-2g.20gb': '1'}}}]
    assert gate.asks_for_gated_resource(pod('a', {'cpu': '1'}, init_containers=sidecar), [])


def test_the_release_patch_deletes_only_the_slice_gate_and_pins_a_pod_without_affinity_to_the_node():
    assert gate.release_patch(pod('a')) == {'spec': {'schedulingGates': [{'$patch': 'delete', 'name': 'gpufleet.mig/slice'}]}}
    patch = gate.release_patch(pod('a'), 'gpu-a')
    assert patch['spec']['affinity'] == {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {
        'nodeSelectorTerms': [{'matchFields': [{'key': 'metadata.name', 'operator': 'In', 'values': ['gpu-a']}]}]}}}
    # The source's record of its pin: a pod pinned this way is the gated queue's, not the full path's.
    assert patch['metadata'] == {'annotations': {'gpufleet.mig/slice-node': 'gpu-a'}}
    assert gate.pinned_node(dict(pod('a'), metadata=patch['metadata'])) == 'gpu-a' and gate.pinned_node(pod('a')) is None


requirement = st.fixed_dictionaries({'key': st.sampled_from(['zone', 'pool', 'metadata.name']),
                                     'operator': st.sampled_from(['In', 'NotIn']),
                                     'values': st.lists(st.sampled_from(['a', 'b', 'gpu-a']), min_size=1, max_size=2)})
term = st.fixed_dictionaries({}, optional={'matchExpressions': st.lists(requirement, max_size=2),
                                           'matchFields': st.lists(requirement, max_size=2)})


@settings(max_examples=200, deadline=None)
@given(terms=st.lists(term, max_size=3), node=st.sampled_from(['gpu-a', 'gpu-b']))
def test_the_release_patch_only_adds_to_each_required_term_as_a_gated_pod_allows(terms, node):
    """Kubernetes lets a gated pod's required node affinity only gain requirements: every term of the patch is the
    pod's term with the node added to its fields, and nothing of the pod's terms is lost."""
    subject = pod('a')
    if terms:
        subject['spec']['affinity'] = {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {
            'nodeSelectorTerms': terms}}}
    before = copy.deepcopy(subject)
    patched = gate.release_patch(subject, node)['spec']['affinity']['nodeAffinity'][
        'requiredDuringSchedulingIgnoredDuringExecution']['nodeSelectorTerms']
    assert subject == before
    pinned = {'key': 'metadata.name', 'operator': 'In', 'values': [node]}
    assert len(patched) == max(1, len(terms))
    for index, new in enumerate(patched):
        old = terms[index] if terms else {}
        assert new.get('matchExpressions') == old.get('matchExpressions')
        assert new['matchFields'] == list(old.get('matchFields') or []) + [pinned]
