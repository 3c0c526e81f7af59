# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The create-only fast path's decisions (_demand_fast): the node annotation, which changes are fast, the guard."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_input import DemandPlanError
from ansible_collections.gpufleet.mig.plugins.module_utils.host._layout_converge import create_refusal
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_fast import fast_creates, gpus_annotation, read_gpus_annotation
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_planner import plan_demand
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.test_demand_planner import gpu, k8s_node, k8s_pod, pod


def annotated(*instances):
    """The GPUs of one A100 with ``instances`` as the annotation carries them (written, then read back)."""
    return read_gpus_annotation(gpus_annotation('h1', {'gpus': [gpu(0, instances)]}))[1]


def test_the_annotation_is_what_the_planner_reads_and_plans_the_same():
    facts = {'gpus': [gpu(0, [('1g.10gb', 0, ['ml/a']), ('1g.10gb', 1, [], [4242])]), gpu(1)]}
    text = gpus_annotation('h1', facts)
    host, gpus = read_gpus_annotation(text)
    assert host == 'h1' and [g['index'] for g in gpus] == [0, 1]
    # Smaller than the facts: no PCI ids, memory figures or per-process memory.
    assert len(text) < len(json.dumps(facts)) and 'pci_device_id' not in text and 'used_memory_mib' not in text
    pending = [pod('ml/b', {'1g.20gb': 1}), pod('ml/c', {'3g.40gb': 1})]
    assert plan_demand({'h1': {'gpus': gpus}}, pending) == plan_demand({'h1': facts}, pending)
    # The same GPUs, the same text (a patch that changes nothing is not a change).
    assert gpus_annotation('h1', facts) == text


@pytest.mark.parametrize('text, words', [
    ('{', 'is not JSON'),
    ('{"version": 9, "host": "h", "gpus": []}', 'version 9, this collection reads version 1'),
    ('{"version": 1, "gpus": []}', 'needs host and gpus'),
])
def test_an_annotation_this_version_does_not_write_is_one_line(text, words):
    with pytest.raises(DemandPlanError, match=words):
        read_gpus_annotation(text)


def test_the_annotation_needs_the_host_and_the_facts():
    with pytest.raises(DemandPlanError, match='inventory host'):
        gpus_annotation('', {'gpus': []})
    with pytest.raises(DemandPlanError, match='expected the nvidia_mig facts'):
        gpus_annotation('h1', {'gpus': [{'name': 'no index'}]})


def test_a_pod_that_fits_in_free_slices_is_one_create_on_its_host_with_the_generated_layout():
    hosts = {'h1': annotated(('1g.10gb', 0, ['ml/held']))}
    result = fast_creates(hosts, [pod('ml/small', {'1g.20gb': 1})], {'h1': k8s_node('node-1')}, [])
    assert result['rest'] == []
    [change] = result['creates']
    assert change['host'] == 'h1' and change['node'] == 'node-1' and change['pods'] == ['ml/small']
    assert change['gpus'] == {'0': {'1g.20gb': 1}}
    assert change['layout']['name'].startswith('demand-')
    assert change['layout']['config'][change['layout']['name']] == [
        {'devices': [0], 'mig-enabled': True, 'mig-devices': {'1g.10gb': 1, '1g.20gb': 1}}]


def test_anything_but_a_create_is_left_to_the_full_path():
    # 7g.80gb: a pod holds a slice (unmet); 3g.40gb: only by destroying idle instances (destroy-idle).
    busy = annotated(('1g.10gb', 0, ['ml/held']))
    assert fast_creates({'h1': busy}, [pod('ml/whole', {'7g.80gb': 1})], {'h1': k8s_node('n')}, []) == \
        {'creates': [], 'rest': ['ml/whole']}
    idle = annotated(*[('1g.10gb', s, []) for s in range(7)])
    assert fast_creates({'h1': idle}, [pod('ml/big', {'3g.40gb': 1})], {'h1': k8s_node('n')}, []) == \
        {'creates': [], 'rest': ['ml/big']}
    # An idle instance that exists serves without a change: the full path (nothing to create).
    assert fast_creates({'h1': idle}, [pod('ml/one', {'1g.10gb': 1})], {'h1': k8s_node('n')}, []) == \
        {'creates': [], 'rest': ['ml/one']}


def test_one_host_that_needs_a_destroy_sends_all_its_pods_to_the_full_path_and_another_stays_fast():
    hosts = {'h1': annotated(*[('1g.10gb', s, []) for s in range(6)]), 'h2': annotated()}
    pending = [pod('ml/a', {'4g.40gb': 1}, priority=10), pod('ml/b', {'7g.80gb': 1}, priority=5)]
    result = fast_creates(hosts, pending, {'h1': k8s_node('n1'), 'h2': k8s_node('n2')}, [])
    # a goes create-only to h2 (free), b then needs h1's idle instances destroyed: full path.
    assert [(c['host'], c['pods']) for c in result['creates']] == [('h2', ['ml/a'])]
    assert result['rest'] == ['ml/b']


@pytest.mark.parametrize('spec', [
    {'nodeSelector': {'pool': 'other'}},
    {'affinity': {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': [
        {'matchExpressions': [{'key': 'pool', 'operator': 'NotIn', 'values': ['gpu']}]}]}}}},
    {},   # no toleration of the node's taint
], ids=['node-selector', 'required-affinity', 'taint'])
def test_a_pod_the_node_does_not_admit_is_never_fast_on_it(spec):
    hosts = {'h1': annotated()}
    node = k8s_node('n1', {'pool': 'gpu'}, taints=[('gpu', 'only', 'NoSchedule')] if not spec else ())
    constrained = k8s_pod('x', '1g.20gb', spec)
    result = fast_creates(hosts, [pod('ml/x', {'1g.20gb': 1})], {'h1': node}, [constrained])
    assert result == {'creates': [], 'rest': ['ml/x']}
    # The same pod, admitted (tolerating the taint, selecting the node's label), is fast.
    admitted = k8s_pod('x', '1g.20gb', {'nodeSelector': {'pool': 'gpu'}, 'tolerations': [{'key': 'gpu', 'operator': 'Exists'}]})
    assert fast_creates(hosts, [pod('ml/x', {'1g.20gb': 1})], {'h1': node}, [admitted])['creates'][0]['pods'] == ['ml/x']


def test_cpu_and_memory_taken_by_bound_pods_count():
    hosts = {'h1': annotated()}
    bound = k8s_pod('busy', '1g.10gb', {'nodeName': 'n1'}, cpu='63')
    bound['status'] = {'phase': 'Running'}
    result = fast_creates(hosts, [pod('ml/x', {'1g.20gb': 1})], {'h1': k8s_node('n1', cpu='64')},
                          [bound, k8s_pod('x', '1g.20gb', cpu='2')])
    assert result == {'creates': [], 'rest': ['ml/x']}


def test_the_policy_applies_and_a_bad_annotation_leaves_every_pod_to_the_full_path():
    hosts = {'h1': annotated()}
    assert fast_creates(hosts, [pod('ml/x', {'1g.20gb': 1})], {'h1': k8s_node('n1')}, [], {'reshape_nodes': []}) == \
        {'creates': [], 'rest': ['ml/x']}
    broken = [dict(hosts['h1'][0], gpu_instances=[{'id': 1, 'profile': '1g.10gb', 'placement': {'start': 9, 'size': 1}}])]
    assert fast_creates({'h1': broken}, [pod('ml/x', {'1g.20gb': 1})], {'h1': k8s_node('n1')}, []) == \
        {'creates': [], 'rest': ['ml/x']}
    assert fast_creates(hosts, [], {}, []) == {'creates': [], 'rest': []}


def test_the_guard_accepts_exactly_the_expected_creates():
    creates = [{'index': 0, 'actions': [{'action': 'create_gpu_instance', 'profile': '1g.20gb'},
                                        {'action': 'create_compute_instance', 'profile': '1g.20gb'}]},
               {'index': 1, 'actions': []}]
    assert create_refusal(creates, {0: {'1g.20gb': 1}}) is None
    assert 'not the creates expected' in create_refusal(creates, {'0': {'1g.20gb': 2}})
    assert 'not the creates expected' in create_refusal(creates, {'1': {'1g.20gb': 1}})
    destroy = [{'index': 0, 'actions': [{'action': 'destroy_gpu_instance', 'profile': '1g.10gb'}] + creates[0]['actions']}]
    assert create_refusal(destroy, {'0': {'1g.20gb': 1}}) == \
        'GPU 0 would need destroy gpu instance (1g.10gb), not only the creates expected'
    # The gated queue's reshape: that idle destroy expected too.
    assert create_refusal(destroy, {'0': {'1g.20gb': 1}}, {'0': {'1g.10gb': 1}}) is None
    assert 'not the idle instances expected' in create_refusal(destroy, {'0': {'1g.20gb': 1}}, {'0': {'1g.10gb': 2}})
    mode = [{'index': 0, 'actions': [{'action': 'set_mig_mode', 'mode': 'enabled'}]}]
    assert 'set mig mode (enabled)' in create_refusal(mode, {'0': {'1g.20gb': 1}})
    assert create_refusal([{'index': 0, 'deferred': True, 'actions': []}], {}) == 'GPU 0 waits for a MIG mode change'


_ACTIONS = ('create_gpu_instance', 'create_compute_instance', 'destroy_gpu_instance', 'destroy_compute_instance',
            'set_mig_mode', 'reset_gpu')


@st.composite
def decisions_and_expectations(draw):
    """GPUs with random actions (creates, destroys, mode changes, resets; some waiting for their mode) and an
    expectation that is either what the GPUs create or a random other one."""
    gpus = []
    for index in range(draw(st.integers(1, 3))):
        actions = [{'action': kind, 'profile': profile} for kind, profile in draw(
            st.lists(st.tuples(st.sampled_from(_ACTIONS), st.sampled_from(('1g.10gb', '1g.20gb', '3g.40gb'))), max_size=5))]
        gpus.append({'index': index, 'deferred': draw(st.booleans()) and draw(st.booleans()), 'actions': actions})
    created, destroyed = {}, {}
    for gpu in gpus:
        for action in gpu['actions']:
            if action['action'] in ('create_gpu_instance', 'destroy_gpu_instance'):
                counts = (created if action['action'] == 'create_gpu_instance' else destroyed).setdefault(str(gpu['index']), {})
                counts[action['profile']] = counts.get(action['profile'], 0) + 1
    other = draw(st.dictionaries(st.sampled_from(('0', '1', '2')), st.dictionaries(
        st.sampled_from(('1g.10gb', '1g.20gb')), st.integers(1, 2), min_size=1, max_size=2), max_size=2))
    destroys = draw(st.sampled_from((None, {}, destroyed, other)))
    return gpus, created, destroyed, (created if draw(st.booleans()) else other), destroys


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(decisions_and_expectations())
def test_the_guard_passes_a_change_only_when_it_is_exactly_the_expected_creates(case):
    """The demand runs' safety rule as a property: nothing but creates, and the idle destroys when some are expected (no
    mode change or reset, no GPU waiting for its mode), in exactly the expected counts; everything else is refused
    before any GPU changes."""
    gpus, created, destroyed, expected, destroys = case
    allowed = ('create_',) + (('destroy_',) if destroys else ())
    only_these = all(not gpu['deferred'] and all(a['action'].startswith(allowed) for a in gpu['actions']) for gpu in gpus)
    refusal = create_refusal(gpus, expected, destroys)
    assert (refusal is None) == (only_these and created == expected and destroyed == (destroys or {})), (gpus, expected, refusal)


def test_the_node_patch_carries_the_gpus_and_the_outcome_of_a_run():
    from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_fast import node_patch
    facts = {'gpus': [gpu(0)]}
    patch = node_patch('h1', facts, 'fast-a-1', 'refused', 'layout demand-x is not\n a create-only change')
    annotations = patch['metadata']['annotations']
    assert annotations['gpufleet.mig/gpus'] == gpus_annotation('h1', facts)
    assert json.loads(annotations['gpufleet.mig/demand-create']) == {
        'run': 'fast-a-1', 'result': 'refused', 'reason': 'layout demand-x is not a create-only change'}
    assert node_patch('h1') == {'metadata': {'annotations': {}}}
    assert list(node_patch('h1', None, 'fast-a-1', 'failed')['metadata']['annotations']) == ['gpufleet.mig/demand-create']
    with pytest.raises(DemandPlanError, match='must be created, refused or failed'):
        node_patch('h1', None, 'fast-a-1', 'done')


def test_instances_the_bound_pods_need_are_held_though_the_annotation_names_nobody():
    from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_fast import BOUND_HOLDER, with_holders
    gpus = annotated(('1g.10gb', 0, ['ml/held']), ('1g.20gb', 2, []), ('1g.20gb', 4, []))
    marked = with_holders(gpus, {'1g.20gb': 1, '1g.10gb': 1})
    assert [(gi['profile'], gi['placement']['start'], gi['allocated_to']) for gi in marked[0]['gpu_instances']] == [
        ('1g.10gb', 0, ['ml/held']), ('1g.20gb', 2, [BOUND_HOLDER]), ('1g.20gb', 4, [])]
    assert gpus[0]['gpu_instances'][1]['allocated_to'] == []   # the caller's data unchanged
    # The next pod: with one held, the free one at 4 serves it (no change: the full path); with both held, one is created.
    asking = [pod('ml/next', {'1g.20gb': 1})]
    assert fast_creates({'h1': gpus}, asking, {'h1': k8s_node('n')}, [], held={'h1': {'1g.20gb': 1}}) == \
        {'creates': [], 'rest': ['ml/next']}
    plan = fast_creates({'h1': gpus}, asking, {'h1': k8s_node('n')}, [], held={'h1': {'1g.20gb': 2}})
    assert plan['creates'][0]['gpus'] == {'0': {'1g.20gb': 1}} and plan['creates'][0]['pods'] == ['ml/next']
