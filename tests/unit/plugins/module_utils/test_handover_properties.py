# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Property tests of the no-kill invariant (issue 27, section 5) over generated nodes.

A node: one or two A100-80GB GPUs, the first with MIG on and 1g.10gb instances in random slices, the second the same
or with MIG off (a whole GPU); pods that hold a device (a MIG device, or the whole GPU) by UUID or by index id under
a random resource name (NVIDIA's, a ``rename``d one, another
vendor's), or through a DRA claim of NVIDIA's driver, some with a process on it; a target layout; a mode: in place,
drain (pod-resources read), or the drain fallback (pod-resources not read: only the processes' cgroups name pods).
Which pod holds what is known here from how the node was generated (by construction, none of the code under
test); the host's decision (_layout_converge.decide) and the node's eviction plan (_node_evictions.EvictionPlan)
must then never destroy an instance whose holders are not all evicted, and in place never evict a pod whose
instance stays (a pod holding an index id on a GPU whose MIG devices change is the documented exception: its id
would name another instance). Budgets (all-or-none per PodDisruptionBudget) are mig_pod_eviction's, tested there.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from hypothesis import example, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.mig.plugins.module_utils.host._layout_converge import LayoutRequest, decide
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _node_evictions as node_evictions
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_allocations import allocations_of
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import Host
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import check_layout, validate_configs
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import model_gpu

MODEL = 'A100-SXM4-80GB'
RESOURCES = ['nvidia.com/mig-1g.10gb', 'nvidia.com/mig-1g.10gb.shared', 'nvidia.com/small-gpu', 'example.com/any-name']
LAYOUTS = {
    'seven': {'1g.10gb': 7},
    'keep-three': {'1g.10gb': 3, '3g.40gb': 1},
    'halves': {'3g.40gb': 2},
    'whole': {'7g.80gb': 1},
    'twos': {'2g.20gb': 3},
    'off': None,
}
MODES = ['in_place', 'drain', 'fallback']
# No example database (.hypothesis/): the found examples are kept as @example and plain tests, and the checkout stays clean.
PROPERTY = settings(max_examples=120, deadline=None, derandomize=True, database=None)


def _gpu(index, starts, mig=True):
    """GPU ``index`` (minor 10 + index) with a 1g.10gb instance at each start; MIG device UUID 'MIG-<gpu>-<start>'.
    ``mig`` false: MIG off, no instances (held whole, a start of None)."""
    data = model_gpu(MODEL).as_dict()
    if not mig:
        data.update(index=index, uuid='GPU-%d' % index, minor_number=10 + index, gpu_instances=[],
                    mig_mode={'current': 'disabled', 'pending': 'disabled'})
        return data
    profile_id = [p for p in data['profiles'] if p['name'] == '1g.10gb'][0]['id']
    data.update(index=index, uuid='GPU-%d' % index, minor_number=10 + index, gpu_instances=[])
    for position, start in enumerate(sorted(starts)):
        data['gpu_instances'].append({
            'id': start + 1, 'profile': '1g.10gb', 'profile_id': profile_id, 'placement': {'start': start, 'size': 1},
            'compute_instances': [{'id': 0, 'profile': '1g.10gb', 'profile_id': 0, 'placement': {'start': 0, 'size': 1},
                                   'uuid': 'MIG-%d-%d' % (index, start), 'mig_index': position, 'processes': []}]})
    return data


@st.composite
def nodes(draw):
    """(host data, pods): each pod {'name', 'gpu', 'start', 'way' (uuid, index, dra), 'resource', 'pid'}."""
    gpus = [_gpu(0, draw(st.sets(st.integers(0, 6), max_size=7)))]
    second = draw(st.sampled_from(['none', 'mig', 'whole']))
    if second != 'none':
        gpus.append(_gpu(1, draw(st.sets(st.integers(0, 6), max_size=7)), mig=second == 'mig'))
    held = [(g['index'], gi['placement']['start']) for g in gpus for gi in g['gpu_instances']]
    held += [(g['index'], None) for g in gpus if g['mig_mode']['current'] == 'disabled']
    pods = []
    if held:
        for number in range(draw(st.integers(0, 5))):
            gpu, start = draw(st.sampled_from(held))
            pods.append({'name': 'ml/p%d' % number, 'gpu': gpu, 'start': start,
                         'way': draw(st.sampled_from(['uuid', 'index', 'dra'])),
                         'resource': draw(st.sampled_from(RESOURCES)),
                         'pid': 1000 + number if draw(st.booleans()) else None})
    return gpus, pods


def _host(gpus, pods):
    """The host with each pod's process on its instance."""
    for pod in pods:
        if pod['pid'] is None:
            continue
        gpu = [g for g in gpus if g['index'] == pod['gpu']][0]
        if pod['start'] is None:
            gpu.setdefault('processes', []).append({'pid': pod['pid'], 'used_memory_mib': 100})
            continue
        gi = [gi for gi in gpu['gpu_instances'] if gi['placement']['start'] == pod['start']][0]
        gi['compute_instances'][0]['processes'].append({'pid': pod['pid'], 'used_memory_mib': 100})
    return Host.from_dict({'gpus': gpus})


def _device_id(host, pod):
    gpu = host.gpus[pod['gpu']]
    if pod['start'] is None:
        return gpu.uuid if pod['way'] == 'uuid' else str(gpu.index)
    ci = [gi for gi in gpu.gpu_instances if gi.start == pod['start']][0].compute_instances[0]
    return ci.uuid if pod['way'] == 'uuid' else '%d:%d' % (gpu.index, ci.mig_index)


def _allocations(host, pods):
    """What the kubelet's List says (one entry per pod), as _pod_resources.list_pod_devices gives it."""
    found = []
    for pod in pods:
        namespace, name = pod['name'].split('/')
        if pod['way'] == 'dra':
            device = 'gpu-%d' % (10 + pod['gpu']) if pod['start'] is None else 'gpu-%d-mig-%d-%d-1' % (
                10 + pod['gpu'], host.gpus[pod['gpu']].gpu_instances[0].profile_id, pod['start'])
            found.append({'namespace': namespace, 'pod': name, 'container': 'c', 'claim': '%s/gpu' % namespace,
                          'driver': 'gpu.nvidia.com', 'pool': 'node', 'cdi_devices': [], 'device': device})
        else:
            found.append({'namespace': namespace, 'pod': name, 'container': 'c', 'resource': pod['resource'],
                          'device_ids': [_device_id(host, pod)]})
    return found


def _api_pod(pod):
    """The pod as the API server lists it: a Deployment's replica asking for its device by resource or DRA claim."""
    namespace, name = pod['name'].split('/')
    container = {'name': 'c', 'resources': {}}
    spec = {'containers': [container]}
    if pod['way'] == 'dra':
        spec['resourceClaims'] = [{'name': 'gpu', 'resourceClaimTemplateName': 'one-mig'}]
        container['resources']['claims'] = [{'name': 'gpu'}]
    else:
        container['resources']['limits'] = {pod['resource']: 1}
    return {'kind': 'Pod', 'apiVersion': 'v1', 'spec': spec, 'status': {'phase': 'Running'},
            'metadata': {'name': name, 'namespace': namespace, 'uid': 'uid-' + name,
                         'ownerReferences': [{'kind': 'ReplicaSet', 'name': name + '-rs', 'controller': True}]}}


def _request(layout, mode, host, pods):
    mig_devices = LAYOUTS[layout]
    entry = {'devices': 'all', 'mig-enabled': mig_devices is not None}
    if mig_devices is not None:
        entry['mig-devices'] = mig_devices
    read = mode != 'fallback'
    pid_pods = {} if read else dict((p['pid'], {'pod_uid': 'uid-' + p['name'].split('/')[1]}) for p in pods if p['pid'])
    return LayoutRequest(layout, check_layout(validate_configs({layout: [entry]}), layout), evict=True,
                         drain=mode != 'in_place', pod_devices=_allocations(host, pods) if read else [], pid_pods=pid_pods)


def _going(host, decision):
    """{(GPU index, GPU instance start)} the decision destroys, and the GPU indexes whose MIG devices change."""
    going, changed = set(), set()
    for gpu_decision in decision.gpus:
        gpu = host.gpus[gpu_decision.index]
        starts = dict((gi.id, gi.start) for gi in gpu.gpu_instances)
        actions = gpu_decision.actions()
        if actions:
            changed.add(gpu.index)
        for action in actions:
            if action['action'] == 'destroy_gpu_instance':
                going.add((gpu.index, starts[action['gpu_instance_id']]))
            if action['action'] in ('set_mig_mode', 'reset_gpu'):
                going.update((gpu.index, start) for start in starts.values())
                going.add((gpu.index, None))
    return going, changed


def _check(gpus, pods, layout, mode):
    host = _host(gpus, pods)
    try:
        decision = decide(host, _request(layout, mode, host, pods))
    except PlanningError:
        return      # refused: nothing changes, nobody is evicted
    plan = node_evictions.EvictionPlan([_api_pod(p) for p in pods], 'in_place' if mode == 'in_place' else 'drain',
                                       decision.pods_to_evict(), node='gpu-1', pod_resources_read=mode != 'fallback')
    if plan.problem() is not None:
        return      # refused before any eviction: nobody is evicted, no GPU changes
    evicted = set('%s/%s' % (p['namespace'], p['name']) for p in plan.evict)
    going, changed = _going(host, decision)
    for pod in pods:
        # Never destroy a held instance whose pods are not all in the eviction set.
        if (pod['gpu'], pod['start']) in going:
            assert pod['name'] in evicted, (pod, sorted(going), sorted(evicted))
    if mode == 'in_place':
        # Never evict a pod whose instance stays (but an index id on a GPU whose MIG devices change).
        for pod in pods:
            if pod['name'] in evicted:
                assert (pod['gpu'], pod['start']) in going or (pod['way'] == 'index' and pod['gpu'] in changed), (pod, sorted(going))
    else:
        # A drain evicts every pod that holds a device, and nobody else.
        assert evicted == set(p['name'] for p in pods), (sorted(evicted), pods)


@PROPERTY
@given(nodes())
def test_holding_is_by_device_id_under_any_resource_name(node):
    gpus, pods = node
    host = _host(gpus, pods)
    holders = allocations_of(host, _allocations(host, pods))
    for pod in pods:
        held = holders.of(host.gpus[pod['gpu']].uuid)
        if pod['start'] is None:
            assert pod['name'] in held.gpu
            continue
        gi = [gi for gi in host.gpus[pod['gpu']].gpu_instances if gi.start == pod['start']][0]
        assert pod['name'] in held.of_instance(gi.id)
    assert holders.pods() == sorted(set(p['name'] for p in pods))


@PROPERTY
@given(nodes(), st.sampled_from(sorted(LAYOUTS)), st.sampled_from(MODES))
@example(([_gpu(0, [0, 1, 2, 3, 4, 5, 6])], [{'name': 'ml/p0', 'gpu': 0, 'start': 6, 'way': 'uuid', 'resource': 'nvidia.com/small-gpu', 'pid': None}]),
         'halves', 'in_place')
@example(([_gpu(0, [0, 1])], [{'name': 'ml/p0', 'gpu': 0, 'start': 1, 'way': 'dra', 'resource': RESOURCES[0], 'pid': None}]),
         'whole', 'drain')
@example(([_gpu(0, [0]), _gpu(1, [], mig=False)], [{'name': 'ml/w', 'gpu': 1, 'start': None, 'way': 'index', 'resource': 'nvidia.com/small-gpu',
                                                    'pid': None}]), 'seven', 'in_place')
def test_no_held_instance_is_destroyed_unless_all_its_pods_are_evicted(node, layout, mode):
    gpus, pods = node
    _check(gpus, pods, layout, mode)


# ---- examples kept as plain tests (what the properties found or must always find) --------------------------------

def test_a_renamed_resources_idle_pod_on_an_instance_that_goes_is_evicted_in_place():
    pods = [{'name': 'ml/p0', 'gpu': 0, 'start': 6, 'way': 'uuid', 'resource': 'nvidia.com/small-gpu', 'pid': None}]
    host = _host([_gpu(0, range(7))], pods)
    decision = decide(host, _request('halves', 'in_place', host, pods))
    assert decision.pods_to_evict() == ['ml/p0']


def test_an_idle_dra_pod_is_named_by_a_drain_and_refused_by_the_fallback():
    pods = [{'name': 'ml/p0', 'gpu': 0, 'start': 1, 'way': 'dra', 'resource': RESOURCES[0], 'pid': None}]
    host = _host([_gpu(0, [0, 1])], pods)
    assert decide(host, _request('whole', 'drain', host, pods)).pods_to_evict() == ['ml/p0']
    fallback = decide(host, _request('whole', 'fallback', host, pods))
    assert fallback.pods_to_evict() == []
    plan = node_evictions.EvictionPlan([_api_pod(pods[0])], 'drain', fallback.pods_to_evict(), pod_resources_read=False)
    assert plan.evict == [] and [r['pod'] for r in plan.refused] == ['ml/p0']


def test_a_renamed_resource_holding_a_whole_gpu_is_evicted_before_its_mig_mode_changes():
    pods = [{'name': 'ml/w', 'gpu': 1, 'start': None, 'way': 'index', 'resource': 'nvidia.com/small-gpu', 'pid': None}]
    host = _host([_gpu(0, [0]), _gpu(1, [], mig=False)], pods)
    assert decide(host, _request('seven', 'in_place', host, pods)).pods_to_evict() == ['ml/w']
