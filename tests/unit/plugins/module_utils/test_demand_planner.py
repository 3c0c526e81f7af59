# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet demand planner: each decision of _demand_planner's header pinned by a test."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import random

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_input import DemandPlanError, pod_requests
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_planner import plan_demand
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import Gpu
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import check_layout, validate_configs
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_keys import concrete_instances
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import match_gpus
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog, Occupancy
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import model_gpu

A100 = 'A100-SXM4-80GB'


def gpu(index=0, instances=(), model=A100):
    """The nvidia_mig facts of an A100-80GB (or ``model``) with ``instances``: (profile, start, holders[, pids])."""
    data = model_gpu(model).as_dict()
    data['index'] = index
    data['uuid'] = 'GPU-%d' % index
    data['allocated_to'] = []
    profiles = dict((p['name'], p) for p in data['profiles'])
    data['gpu_instances'] = []
    for number, spec in enumerate(instances):
        profile, start, holders = spec[0], spec[1], spec[2]
        pids = spec[3] if len(spec) > 3 else []
        size = profiles[profile]['placements'][0]['size']
        data['gpu_instances'].append({
            'id': number + 1, 'profile': profile, 'placement': {'start': start, 'size': size},
            'busy': bool(pids), 'allocated_to': list(holders),
            'compute_instances': [{'id': 0, 'profile': profile, 'placement': {'start': 0, 'size': 1},
                                   'processes': [{'pid': pid, 'used_memory_mib': 1} for pid in pids]}],
        })
    return data


def pod(name, requests, priority=0, created=''):
    return {'pod': name, 'priority': priority, 'created': created,
            'requests': dict(('nvidia.com/mig-%s' % p, c) for p, c in requests.items())}


def actions_of(plan, node, index):
    return [(a['action'], a['profile'], a['placement']['start']) for a in plan['nodes'][node]['gpus'][index]['actions']]


def destroyed_ids(plan):
    return sorted((node, g['index'], a['gpu_instance_id']) for node, view in plan['nodes'].items() for g in view['gpus']
                  for a in g['actions'] if a['action'] == 'destroy_gpu_instance')


# ---- decision 2: least disruption first -----------------------------------------------------

def test_free_slices_before_destroying_idle_instances():
    """GPU 0 could fit a 3g only by destroying its idle 1g; GPU 1 has free slices: the create-only one is chosen."""
    nodes = {'n1': [gpu(0, [('1g.10gb', 0, []), ('3g.40gb', 4, ['a/held'])]),
                    gpu(1, [('4g.40gb', 0, ['a/other'])])]}
    plan = plan_demand(nodes, [pod('a/p', {'3g.40gb': 1})])
    assert actions_of(plan, 'n1', 1) == [('create_gpu_instance', '3g.40gb', 4)]
    assert actions_of(plan, 'n1', 0) == []
    assert plan['nodes']['n1']['disruption'] == 'create-only'
    assert plan['nodes']['n1']['cordon'] is False
    assert plan['served'] == [{'pod': 'a/p', 'node': 'n1', 'devices': [{'gpu': 1, 'profile': '3g.40gb', 'start': 4, 'instance': 'new'}]}]


def test_existing_free_instance_serves_without_change():
    nodes = {'n1': [gpu(0, [('2g.20gb', 0, [])])]}
    plan = plan_demand(nodes, [pod('a/p', {'2g.20gb': 1})])
    assert plan['nodes']['n1']['changed'] is False
    assert plan['nodes']['n1']['disruption'] == 'none'
    assert 'layout' not in plan['nodes']['n1']
    assert plan['served'][0]['devices'] == [{'gpu': 0, 'profile': '2g.20gb', 'start': 0, 'instance': 1}]
    assert plan['gpus_changed'] == 0


def test_idle_instances_destroyed_only_when_no_free_slices_fit():
    """3g.40gb at 0 is held; the 4 slices at 4 hold four idle 1g: the fewest that make room go (all of 4..7)."""
    held = ('3g.40gb', 0, ['a/held'])
    nodes = {'n1': [gpu(0, [held, ('1g.10gb', 4, []), ('1g.10gb', 5, []), ('1g.10gb', 6, []), ('2g.20gb', 2, ['a/h2'])])]}
    with pytest.raises(DemandPlanError):
        plan_demand(nodes, [])   # 3g at 0 overlaps 2g at 2: facts no GPU can report
    nodes = {'n1': [gpu(0, [held, ('1g.10gb', 4, []), ('1g.10gb', 5, []), ('1g.10gb', 6, [])])]}
    plan = plan_demand(nodes, [pod('a/p', {'3g.40gb': 1})])
    assert actions_of(plan, 'n1', 0) == [('destroy_gpu_instance', '1g.10gb', 4), ('destroy_gpu_instance', '1g.10gb', 5),
                                         ('destroy_gpu_instance', '1g.10gb', 6), ('create_gpu_instance', '3g.40gb', 4)]
    assert plan['nodes']['n1']['disruption'] == 'destroy-idle'
    assert plan['nodes']['n1']['cordon'] is True
    assert plan['evictions'] == []


def test_fewest_idle_instances_destroyed():
    """A 2g fits after destroying one idle 2g or two idle 1g: one instance goes."""
    nodes = {'n1': [gpu(0, [('3g.40gb', 4, ['a/h']), ('1g.10gb', 0, []), ('1g.10gb', 1, []), ('2g.20gb', 2, [])])]}
    plan = plan_demand(nodes, [pod('a/p', {'2g.20gb': 2})])
    # one 2g exists and is free: it serves; the second needs the two 1g at 0 and 1 to go
    assert actions_of(plan, 'n1', 0) == [('destroy_gpu_instance', '1g.10gb', 0), ('destroy_gpu_instance', '1g.10gb', 1),
                                         ('create_gpu_instance', '2g.20gb', 0)]
    nodes = {'n1': [gpu(0, [('3g.40gb', 4, ['a/h']), ('1g.10gb', 0, []), ('1g.10gb', 1, []), ('2g.20gb', 2, ['a/x'])]),
                    gpu(1, [('4g.40gb', 0, ['a/y']), ('2g.20gb', 4, []), ('1g.10gb', 6, ['a/z'])])]}
    plan = plan_demand(nodes, [pod('a/p', {'3g.40gb': 1})])
    assert plan['unmet_pods'] == ['a/p']
    plan = plan_demand(nodes, [pod('a/p', {'2g.20gb': 1})])
    assert plan['served'][0]['devices'] == [{'gpu': 1, 'profile': '2g.20gb', 'start': 4, 'instance': 2}]   # exists, free


def test_held_and_busy_instances_never_touched():
    """A 7g needs the whole GPU: one held 1g (GPU 0) and one with processes outside any pod (GPU 1) block it."""
    nodes = {'n1': [gpu(0, [('1g.10gb', 3, ['a/held'])]), gpu(1, [('1g.10gb', 6, [], [4242])])]}
    plan = plan_demand(nodes, [pod('a/p', {'7g.80gb': 1})])
    assert destroyed_ids(plan) == []
    assert plan['unmet_pods'] == ['a/p']
    assert plan['unmet'] == ['7g.80gb: 1 device(s) for a/p unmet: no GPU is free of pods; nearest is node n1 GPU 0, 1 pod(s) (a/held)']
    # even with eviction on, a process that no pod owns is never touched, nor a pod of unknown priority
    policy = {'evict_below_priority': 100}
    assert plan_demand(nodes, [pod('a/p', {'7g.80gb': 1}, priority=500)], policy)['unmet_pods'] == ['a/p']


def test_each_unmet_pod_gets_the_lines_of_the_profiles_it_asks_for():
    """The reason told on each pod (its Event): only its own profiles' lines, in profile order."""
    nodes = {'n1': [gpu(0, [('1g.10gb', 3, ['a/held'])])]}
    plan = plan_demand(nodes, [pod('a/p', {'7g.80gb': 1}), pod('a/q', {'7g.80gb': 1, '1g.5gb': 1}), pod('a/r', {'1g.10gb': 1})])
    assert plan['unmet_pods'] == ['a/p', 'a/q']
    # a/r is served by a new 1g.10gb on GPU 0: in the way too.
    seven = '7g.80gb: 2 device(s) for a/p, a/q unmet: no GPU is free of pods; nearest is node n1 GPU 0, 2 pod(s) (a/held, a/r)'
    five = '1g.5gb: 1 device(s) for a/q unmet: no GPU of the fleet offers this profile'
    assert plan['unmet'] == [five, seven]
    assert plan['unmet_reasons'] == {'a/p': [seven], 'a/q': [five, seven]}
    assert plan_demand(nodes, [pod('a/r', {'1g.10gb': 1})])['unmet_reasons'] == {}


def test_gpu_held_whole_is_left_out():
    whole = gpu(0)
    whole['allocated_to'] = ['a/whole']
    plan = plan_demand({'n1': [whole]}, [pod('a/p', {'1g.10gb': 1})])
    assert plan['nodes'] == {}
    assert plan['unmet'] == ['1g.10gb: 1 device(s) for a/p unmet: no GPU of the fleet offers this profile']


# ---- eviction: only when enabled, only lower priority, named --------------------------------

def test_eviction_off_by_default_and_only_lower_priority():
    nodes = {'n1': [gpu(0, [('3g.40gb', 0, ['b/low']), ('3g.40gb', 4, ['b/high'])])]}
    want = [pod('a/p', {'7g.80gb': 1}, priority=100)]
    running = {'b/low': 10, 'b/high': 10}
    assert plan_demand(nodes, want, {'running_priorities': running})['unmet_pods'] == ['a/p']
    plan = plan_demand(nodes, want, {'running_priorities': running, 'evict_below_priority': 50})
    assert plan['evictions'] == ['b/high', 'b/low']
    assert plan['nodes']['n1']['disruption'] == 'evict'
    assert plan['nodes']['n1']['evictions'] == ['b/high', 'b/low']
    assert [a.get('evict') for a in plan['nodes']['n1']['gpus'][0]['actions']] == [['b/low'], ['b/high'], None]
    # a holder at or above the threshold, or not below the waiting pod, stays
    assert plan_demand(nodes, want, {'running_priorities': {'b/low': 10, 'b/high': 50}, 'evict_below_priority': 50})['evictions'] == []
    assert plan_demand(nodes, [pod('a/p', {'7g.80gb': 1}, priority=10)],
                       {'running_priorities': running, 'evict_below_priority': 50})['evictions'] == []


def test_eviction_is_the_last_resort():
    """With eviction on, a free slice elsewhere still wins over evicting."""
    nodes = {'n1': [gpu(0, [('3g.40gb', 0, ['b/low']), ('3g.40gb', 4, ['b/low2'])]), gpu(1, [('4g.40gb', 0, ['b/x'])])]}
    plan = plan_demand(nodes, [pod('a/p', {'3g.40gb': 1}, priority=100)],
                       {'running_priorities': {'b/low': 1, 'b/low2': 1, 'b/x': 1}, 'evict_below_priority': 50})
    assert plan['evictions'] == []
    assert actions_of(plan, 'n1', 1) == [('create_gpu_instance', '3g.40gb', 4)]


# ---- policy: floor, reshape_nodes, budget -----------------------------------------------------

def test_floor_is_kept():
    idle = [('1g.10gb', s, []) for s in range(7)]
    nodes = {'n1': [gpu(0, idle)]}
    plan = plan_demand(nodes, [pod('a/p', {'3g.40gb': 1})], {'floor': {'n1': {'1g.10gb': 4}}})
    target = [i['profile'] for i in plan['nodes']['n1']['gpus'][0]['target']]
    assert target.count('1g.10gb') == 4 and target.count('3g.40gb') == 1
    assert plan_demand(nodes, [pod('a/p', {'3g.40gb': 1})], {'floor': {'n1': {'1g.10gb': 5}}})['unmet_pods'] == ['a/p']
    # per GPU index
    assert plan_demand(nodes, [pod('a/p', {'3g.40gb': 1})], {'floor': {'n1': {0: {'1g.10gb': 5}}}})['unmet_pods'] == ['a/p']
    assert plan_demand(nodes, [pod('a/p', {'3g.40gb': 1})], {'floor': {'n1': {'1': {'1g.10gb': 5}}}})['unmet_pods'] == []


def test_only_reshapeable_nodes_change():
    nodes = {'fixed': [gpu(0, [('1g.10gb', 0, [])])], 'open': [gpu(0)]}
    plan = plan_demand(nodes, [pod('a/p', {'1g.10gb': 2})], {'reshape_nodes': ['open']})
    assert plan['served'][0]['node'] == 'open'
    assert plan['nodes']['fixed']['changed'] is False
    plan = plan_demand(nodes, [pod('a/p', {'2g.20gb': 1})], {'reshape_nodes': []})
    assert plan['unmet'] == ['2g.20gb: 1 device(s) for a/p unmet: only nodes the policy does not let reshape offer it (fixed, open)']
    # an existing free instance serves on a closed node
    assert plan_demand(nodes, [pod('a/p', {'1g.10gb': 1})], {'reshape_nodes': []})['served'][0]['node'] == 'fixed'


def test_max_gpus_per_run():
    nodes = {'n1': [gpu(0, [('7g.80gb', 0, ['a/h'])])] + [gpu(i) for i in (1, 2, 3)]}
    want = [pod('a/p%d' % i, {'4g.40gb': 1}) for i in range(3)]
    plan = plan_demand(nodes, want, {'max_gpus_per_run': 2})
    assert plan['gpus_changed'] == 2
    assert plan['unmet_pods'] == ['a/p2']
    assert plan['unmet'][0].startswith('4g.40gb: 1 device(s) for a/p2 unmet: max_gpus_per_run (2) reached')
    # a GPU already changing takes more without using the budget
    plan = plan_demand(nodes, [pod('a/p%d' % i, {'1g.10gb': 1}) for i in range(5)], {'max_gpus_per_run': 1})
    assert plan['gpus_changed'] == 1 and plan['unmet_pods'] == []
    assert plan_demand(nodes, want, {'max_gpus_per_run': 0})['gpus_changed'] == 0


# ---- decision 1: pods whole, by priority ------------------------------------------------------

def test_pod_served_whole_on_one_node_or_not_at_all():
    nodes = {'n1': [gpu(0, [('4g.40gb', 0, ['a/h'])])], 'n2': [gpu(0, [('4g.40gb', 0, ['a/h2'])])]}
    # each node fits one 3g: a pod asking two is not split across nodes
    plan = plan_demand(nodes, [pod('a/p', {'3g.40gb': 2})])
    assert plan['unmet_pods'] == ['a/p'] and plan['gpus_changed'] == 0
    nodes['n1'].append(gpu(1, [('4g.40gb', 0, ['a/h3'])]))
    plan = plan_demand(nodes, [pod('a/p', {'3g.40gb': 2})])
    assert plan['served'][0]['node'] == 'n1'
    assert [d['gpu'] for d in plan['served'][0]['devices']] == [0, 1]


def test_higher_priority_first_then_older():
    nodes = {'n1': [gpu(0, [('4g.40gb', 0, ['a/h'])])]}
    want = [pod('a/low', {'3g.40gb': 1}, 1), pod('a/high', {'3g.40gb': 1}, 9)]
    assert plan_demand(nodes, want)['served'][0]['pod'] == 'a/high'
    want = [pod('a/young', {'3g.40gb': 1}, 0, '2026-01-02T00:00:00Z'), pod('a/old', {'3g.40gb': 1}, 0, '2026-01-01T00:00:00Z')]
    assert plan_demand(nodes, want)['served'][0]['pod'] == 'a/old'


# ---- decision 5: placement --------------------------------------------------------------------

def test_placement_spares_bigger_profiles():
    """A 3g on an empty A100 goes to slice 4 (a 4g still fits at 0); a 1g goes beside an existing 3g, not on an empty GPU."""
    plan = plan_demand({'n1': [gpu(0)]}, [pod('a/p', {'3g.40gb': 1})])
    assert actions_of(plan, 'n1', 0) == [('create_gpu_instance', '3g.40gb', 4)]
    plan = plan_demand({'n1': [gpu(0), gpu(1, [('3g.40gb', 4, ['a/h'])])]}, [pod('a/p', {'1g.10gb': 1})])
    assert plan['served'][0]['devices'][0]['gpu'] == 1


# ---- decision 7: determinism; generated layout ------------------------------------------------

def random_fleet(rng):
    """1 to 3 nodes of 1 to 3 GPUs of mixed models, each with up to 5 random instances, half of them held."""
    nodes = {}
    for number in range(rng.randint(1, 3)):
        gpus = []
        for index in range(rng.randint(1, 3)):
            model = rng.choice([A100, 'H100-SXM5-80GB', 'H200', 'B200'])
            catalog = Catalog.from_data(model_gpu(model).profiles)
            occupancy = Occupancy()
            made = []
            for dummy in range(rng.randint(0, 5)):
                profile = catalog.get(rng.choice(sorted(p for p in catalog.profiles if '+' not in p and '-' not in p)))
                starts = [s for s in profile.starts if occupancy.can_place(profile, s)]
                if starts:
                    start = rng.choice(starts)
                    occupancy = occupancy.with_instance(profile, start)
                    made.append((profile.name, start, ['h/%d-%d-%d' % (number, index, len(made))] if rng.random() < 0.5 else []))
            gpus.append(gpu(index, made, model=model))
        nodes['node-%d' % number] = {'gpus': gpus}
    return nodes


def random_pending(rng, nodes):
    profiles = sorted(set(p['name'] for view in nodes.values() for g in view['gpus'] for p in g['profiles']
                          if '+' not in p['name'] and '-' not in p['name']))
    return [pod('w/p%d' % number, {rng.choice(profiles): rng.randint(1, 2)}, rng.choice([0, 10, 100]))
            for number in range(rng.randint(1, 8))]


@pytest.mark.parametrize('seed', range(12))
def test_random_fleets_keep_every_guarantee(seed):
    rng = random.Random(seed)
    nodes = random_fleet(rng)
    pending = random_pending(rng, nodes)
    plan = plan_demand(nodes, pending)
    # deterministic, whatever the order of the input
    shuffled = dict(reversed(list(nodes.items())))
    assert json.dumps(plan_demand(shuffled, list(reversed(pending))), sort_keys=True) == json.dumps(plan, sort_keys=True)
    held = set()
    for node, view in nodes.items():
        for data in view['gpus']:
            for gi in data['gpu_instances']:
                if gi['allocated_to']:
                    held.add((node, data['index'], gi['id']))
    assert not held & set(destroyed_ids(plan))
    assert plan['evictions'] == []
    for node, view in plan['nodes'].items():
        for g in view['gpus']:
            data = [d for d in nodes[node]['gpus'] if d['index'] == g['index']][0]
            catalog = Catalog.from_data(data['profiles'])
            # the target is a valid placement (no overlap, counts, media rules)
            Occupancy.of(catalog, [(i['profile'], i['placement']['start']) for i in g['target']])
        if view['changed']:
            layout = view['layout']
            validated = validate_configs(layout['config'])
            check_layout(validated, layout['name'])
            facts_gpus = [Gpu.from_dict(d) for d in nodes[node]['gpus']]
            for g, chosen in zip(view['gpus'], match_gpus(validated[layout['name']], facts_gpus)['gpus']):
                want = concrete_instances(chosen['mig_devices'], [d for d in facts_gpus if d.index == g['index']][0])
                got = {}
                for inst in g['target']:
                    got[inst['profile']] = got.get(inst['profile'], 0) + 1
                assert want == got
    served_devices = sum(len(s['devices']) for s in plan['served'])
    assert served_devices == sum(sum(p['requests'].values()) for p in pending if p['pod'] not in plan['unmet_pods'])


def test_generated_layout_name_is_stable_and_valid():
    nodes = {'n1': [gpu(0, [('1g.10gb', 0, ['a/h'])]), gpu(1)]}
    first = plan_demand(nodes, [pod('a/p', {'3g.40gb': 1})])['nodes']['n1']['layout']
    again = plan_demand(copy.deepcopy(nodes), [pod('a/q', {'3g.40gb': 1})])['nodes']['n1']['layout']
    assert first == again
    assert first['name'].startswith('demand-') and len(first['name']) == len('demand-') + 12
    assert first['config'][first['name']] == [
        {'devices': [0], 'mig-enabled': True, 'mig-devices': {'1g.10gb': 1, '3g.40gb': 1}},
        {'devices': [1], 'mig-enabled': True, 'mig-devices': {}},
    ]
    check_layout(validate_configs(first['config']), first['name'])


# ---- input ------------------------------------------------------------------------------------

def test_kubernetes_pod_objects():
    k8s_pod = {'metadata': {'namespace': 'ml', 'name': 'train', 'creationTimestamp': '2026-01-01T00:00:00Z'},
               'spec': {'priority': 7, 'priorityClassName': 'batch',
                        'containers': [{'resources': {'limits': {'nvidia.com/mig-1g.10gb': '2', 'cpu': '1'}}},
                                       {'resources': {'limits': {'nvidia.com/mig-1g.10gb': 1, 'nvidia.com/mig-1g.10gb.me': 1}}}],
                        'initContainers': [{'resources': {'limits': {'nvidia.com/mig-3g.40gb': 1, 'nvidia.com/mig-1g.10gb': 5}}}]}}
    assert pod_requests(k8s_pod) == {'1g.10gb': 5, '1g.10gb+me': 1, '3g.40gb': 1}
    plan = plan_demand({'n1': [gpu(0)]}, [k8s_pod])
    assert plan['unmet_pods'] == ['ml/train']   # 5x1g + 1x1g+me + 3g do not fit one A100


@pytest.mark.parametrize('nodes, pending, policy, message', [
    ([], [], {}, 'nodes must map each node name'),
    ({'n1': 'x'}, [], {}, 'nodes[n1]: expected the nvidia_mig facts'),
    ({}, {}, {}, 'pending must be a list of pods'),
    ({}, ['x'], {}, 'pending[0] must be a mapping'),
    ({}, [{'pod': 'nonamespace', 'requests': {}}], {}, "pending[0]: 'pod' must be 'namespace/name'"),
    ({}, [{'pod': 'a/b', 'requests': {'nvidia.com/gpu': 1}}], {}, "pending[0] (a/b): 'nvidia.com/gpu' is not a MIG device"),
    ({}, [{'pod': 'a/b', 'requests': {'1g.10gb': -1}}], {}, 'pending[0] (a/b): count of 1g.10gb must not be negative'),
    ({}, [{'pod': 'a/b', 'requests': {'1g.10gb': True}}], {}, 'count of 1g.10gb must be an integer'),
    ({}, [{'pod': 'a/b', 'requests': {}}, {'pod': 'a/b', 'requests': {}}], {}, 'pod a/b is listed more than once'),
    ({}, [], {'evict': 1}, 'policy: unknown key(s) evict'),
    ({}, [], {'max_gpus_per_run': -1}, 'policy.max_gpus_per_run must not be negative'),
    ({}, [], {'evict_below_priority': 'low'}, 'policy.evict_below_priority must be an integer'),
    ({}, [], {'reshape_nodes': 'n1'}, 'policy.reshape_nodes must be a list'),
])
def test_bad_input_is_one_line(nodes, pending, policy, message):
    with pytest.raises(DemandPlanError) as caught:
        plan_demand(nodes, pending, policy)
    assert message in str(caught.value)
    assert '\n' not in str(caught.value)


# ---- decision 9: release_idle -----------------------------------------------------------------

def test_release_idle_destroys_idle_instances_only_when_asked():
    nodes = {'n1': [gpu(0, [('1g.10gb', 0, []), ('1g.10gb', 1, ['a/h']), ('2g.20gb', 4, [])])]}
    assert plan_demand(nodes, [])['nodes']['n1']['changed'] is False
    plan = plan_demand(nodes, [], {'release_idle': True})
    assert actions_of(plan, 'n1', 0) == [('destroy_gpu_instance', '1g.10gb', 0), ('destroy_gpu_instance', '2g.20gb', 4)]
    assert plan['nodes']['n1']['disruption'] == 'destroy-idle'
    assert [i['profile'] for i in plan['nodes']['n1']['gpus'][0]['target']] == ['1g.10gb']
    assert plan['nodes']['n1']['layout']['config'][plan['nodes']['n1']['layout']['name']][0]['mig-devices'] == {'1g.10gb': 1}


def test_release_idle_places_on_released_slices_and_keeps_an_instance_where_the_new_one_goes():
    """Released slices are free for placement: a 4g goes at 0 where idle 1g sat; a 3g wanted at 4 keeps the idle 3g there."""
    nodes = {'n1': [gpu(0, [('1g.10gb', 0, []), ('3g.40gb', 4, [])])]}
    plan = plan_demand(nodes, [pod('a/p', {'4g.40gb': 1})], {'release_idle': True})
    assert actions_of(plan, 'n1', 0) == [('destroy_gpu_instance', '1g.10gb', 0), ('destroy_gpu_instance', '3g.40gb', 4),
                                         ('create_gpu_instance', '4g.40gb', 0)]
    nodes = {'n1': [gpu(0, [('1g.10gb', 6, []), ('3g.40gb', 0, ['a/h'])])]}
    plan = plan_demand(nodes, [pod('a/p', {'1g.10gb': 1}), pod('a/q', {'3g.40gb': 1})], {'release_idle': True})
    # the 1g pod comes first (same priority and age, name); any of 4..6 takes the same room: it keeps the idle 1g at 6
    assert actions_of(plan, 'n1', 0) == []
    assert plan['served'][0]['devices'] == [{'gpu': 0, 'profile': '1g.10gb', 'start': 6, 'instance': 1}]
    assert plan['unmet_pods'] == ['a/q']
    nodes = {'n1': [gpu(0, [('3g.40gb', 4, []), ('3g.40gb', 0, ['a/h'])])]}
    plan = plan_demand(nodes, [pod('a/q', {'3g.40gb': 1})], {'release_idle': True})
    assert plan['nodes']['n1']['changed'] is False
    assert plan['served'][0]['devices'] == [{'gpu': 0, 'profile': '3g.40gb', 'start': 4, 'instance': 1}]


def test_release_idle_keeps_the_floor_and_the_budget():
    nodes = {'n1': [gpu(0, [('1g.10gb', 0, []), ('1g.10gb', 1, [])]), gpu(1, [('1g.10gb', 0, [])]), gpu(2, [('2g.20gb', 0, [])])]}
    plan = plan_demand(nodes, [], {'release_idle': True, 'floor': {'n1': {'1g.10gb': 1}}})
    assert destroyed_ids(plan) == [('n1', 0, 2), ('n1', 2, 1)]
    plan = plan_demand(nodes, [], {'release_idle': True, 'max_gpus_per_run': 1})
    assert destroyed_ids(plan) == [('n1', 0, 1), ('n1', 0, 2)]
    assert plan['gpus_changed'] == 1
    # a GPU that serves a pod counts first; release-only GPUs give their instances back beyond the budget
    plan = plan_demand(nodes, [pod('a/p', {'4g.40gb': 1})], {'release_idle': True, 'max_gpus_per_run': 1})
    assert plan['gpus_changed'] == 1
    assert plan['served'][0]['devices'][0]['gpu'] == 0
    with pytest.raises(DemandPlanError, match='policy.release_idle must be true or false'):
        plan_demand(nodes, [], {'release_idle': 'yes'})


# ---- decision 10: where the pod may run -------------------------------------------------------

def k8s_node(name, labels=None, taints=(), cpu='64', memory='512Gi'):
    return {'metadata': {'name': name, 'labels': dict(labels or {})},
            'spec': {'taints': [dict(zip(('key', 'value', 'effect'), t)) for t in taints]},
            'status': {'allocatable': {'cpu': cpu, 'memory': memory}}}


def k8s_pod(name, profile, spec=None, cpu=None):
    spec = dict(spec or {})
    resources = {'limits': {'nvidia.com/mig-%s' % profile: 1}}
    if cpu:
        resources['requests'] = {'cpu': cpu}
    spec['containers'] = [{'name': 'c', 'resources': resources}]
    return {'metadata': {'namespace': 'ml', 'name': name, 'creationTimestamp': '2026-01-01T00:00:0%dZ' % len(name)}, 'spec': spec}


def two_nodes():
    return {'n1': [gpu(0)], 'n2': [gpu(0)]}


def test_a_pod_pinned_to_n2_never_gets_a_slice_on_n1():
    cluster = {'nodes': {'n1': k8s_node('n1', {'pool': 'a'}), 'n2': k8s_node('n2', {'pool': 'b'})}, 'pods': []}
    for spec in ({'nodeSelector': {'pool': 'b'}},
                 {'affinity': {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {'nodeSelectorTerms': [
                     {'matchFields': [{'key': 'metadata.name', 'operator': 'In', 'values': ['n2']}]}]}}}}):
        plan = plan_demand(two_nodes(), [k8s_pod('pinned', '1g.10gb', spec)], {}, cluster)
        assert [(s['pod'], s['node']) for s in plan['served']] == [('ml/pinned', 'n2')]
        assert not plan['nodes']['n1']['changed']
    # without the cluster, nothing is known of the nodes: the first node serves
    assert plan_demand(two_nodes(), [k8s_pod('pinned', '1g.10gb', {'nodeSelector': {'pool': 'b'}})])['served'][0]['node'] == 'n1'


def test_an_existing_free_instance_on_a_node_the_pod_may_not_use_does_not_serve_it():
    nodes = {'n1': [gpu(0, [('1g.10gb', 0, [])])], 'n2': [gpu(0)]}
    cluster = {'nodes': {'n1': k8s_node('n1', taints=[('dedicated', 'cv', 'NoSchedule')]), 'n2': k8s_node('n2')}, 'pods': []}
    plan = plan_demand(nodes, [k8s_pod('p', '1g.10gb')], {}, cluster)
    assert plan['served'] == [{'pod': 'ml/p', 'node': 'n2', 'devices': [{'gpu': 0, 'profile': '1g.10gb', 'start': 0, 'instance': 'new'}]}]
    tolerant = k8s_pod('p', '1g.10gb', {'tolerations': [{'key': 'dedicated', 'operator': 'Exists'}]})
    assert plan_demand(nodes, [tolerant], {}, cluster)['served'][0]['devices'][0]['instance'] == 1


def test_a_pod_that_fits_nowhere_is_unmet_and_told_why():
    cluster = {'nodes': {'n1': k8s_node('n1', {'pool': 'a'}), 'n2': k8s_node('n2', {'pool': 'b'}, taints=[('gpu', '', 'NoExecute')])},
               'pods': []}
    plan = plan_demand(two_nodes(), [k8s_pod('lost', '1g.10gb', {'nodeSelector': {'pool': 'b'}})], {}, cluster)
    assert plan['served'] == [] and plan['unmet_pods'] == ['ml/lost'] and plan['gpus_changed'] == 0
    line = ("1g.10gb: 1 device(s) for ml/lost unmet: no node it may run on offers this profile "
            "(n1: node(s) didn't match Pod's node affinity/selector; n2: node(s) had untolerated taint {gpu})")
    assert plan['unmet'] == [line] and plan['unmet_reasons'] == {'ml/lost': [line]}


def test_refused_nodes_are_named_after_the_nearest_gpu_line():
    nodes = {'n1': [gpu(0, [('7g.80gb', 0, ['a/h'])])], 'n2': [gpu(0)]}
    cluster = {'nodes': {'n1': k8s_node('n1', {'pool': 'a'}), 'n2': k8s_node('n2', {'pool': 'b'})}, 'pods': []}
    plan = plan_demand(nodes, [k8s_pod('p', '1g.10gb', {'nodeSelector': {'pool': 'a'}}), k8s_pod('q', '1g.10gb')], {}, cluster)
    assert [s['pod'] for s in plan['served']] == ['ml/q']
    assert plan['unmet_reasons']['ml/p'] == [
        "1g.10gb: 1 device(s) for ml/p unmet: no GPU has room for it without touching instances pods hold; nearest is node n1 GPU 0, "
        "1 pod(s) (a/h) (it may not run on n2: node(s) didn't match Pod's node affinity/selector)"]


def test_cpu_and_memory_of_bound_pods_and_of_pods_served_in_the_plan_count():
    bound = {'metadata': {'namespace': 'x', 'name': 'busy'}, 'spec': {'nodeName': 'k8s-n1', 'containers': [
        {'name': 'c', 'resources': {'requests': {'cpu': '6'}}}]}, 'status': {'phase': 'Running'}}
    # the plan's node n1 is the Kubernetes node k8s-n1: bound pods are matched by the Node object's name
    cluster = {'nodes': {'n1': k8s_node('k8s-n1', cpu='10'), 'n2': k8s_node('n2', cpu='3')}, 'pods': [bound]}
    pending = [k8s_pod('a', '1g.10gb', cpu='3'), k8s_pod('bb', '1g.10gb', cpu='2'), k8s_pod('ccc', '1g.10gb', cpu='2')]
    plan = plan_demand(two_nodes(), pending, {}, cluster)
    # a (3 CPU) fits only n1 (4 left) and n2 (3); n1 first; then b (2) fits n2 only (n1 has 1 left); c (2): n2 has 1 left
    assert [(s['pod'], s['node']) for s in plan['served']] == [('ml/a', 'n1'), ('ml/bb', 'n2')]
    assert plan['unmet_reasons']['ml/ccc'] == [
        '1g.10gb: 1 device(s) for ml/ccc unmet: no node it may run on offers this profile (n1: Insufficient cpu; n2: Insufficient cpu)']


def test_plain_requests_take_their_rules_from_the_cluster_pods_and_hosts_without_node_object_serve_nobody():
    pinned = k8s_pod('pinned', '1g.10gb', {'nodeSelector': {'pool': 'b'}})
    cluster = {'nodes': {'n1': k8s_node('n1', {'pool': 'a'}), 'n2': k8s_node('n2', {'pool': 'b'})}, 'pods': [pinned]}
    plain = [pod('ml/pinned', {'1g.10gb': 1}), pod('ml/unknown', {'1g.10gb': 1})]
    plan = plan_demand(two_nodes(), plain, {}, cluster)
    assert [s['pod'] for s in plan['served']] == ['ml/pinned', 'ml/unknown'] and plan['served'][0]['node'] == 'n2'
    no_object = plan_demand(two_nodes(), plain, {}, {'nodes': {'n2': k8s_node('n2', {'pool': 'b'})}, 'pods': [pinned]})
    assert [(s['pod'], s['node']) for s in no_object['served']] == [('ml/pinned', 'n2'), ('ml/unknown', 'n2')]
    alone = plan_demand({'n1': [gpu(0)]}, [pod('ml/unknown', {'1g.10gb': 1})], {}, {'nodes': {}, 'pods': []})
    assert alone['unmet'] == ['1g.10gb: 1 device(s) for ml/unknown unmet: no node it may run on offers this profile '
                              '(n1: not a Kubernetes node (no Node object))']


@pytest.mark.parametrize('cluster, message', [
    ([], "cluster must be {'nodes'"),
    ({'nodes': [], 'pods': []}, "cluster must be {'nodes'"),
    ({'nodes': {}, 'pods': ['x']}, 'every Node and Pod must be an object'),
    ({'nodes': {'n1': {'metadata': {'name': 'n1'}, 'status': {'allocatable': {'cpu': 'many'}}}}, 'pods': []},
     "cluster.nodes[n1]: node n1 allocatable cpu: 'many' is not a quantity"),
    ({'nodes': {}, 'pods': [k8s_pod('p', '1g.10gb', {'tolerations': 'x'})]}, 'pending[0] (ml/p): spec.tolerations'),
])
def test_bad_cluster_is_one_line(cluster, message):
    with pytest.raises(DemandPlanError) as caught:
        plan_demand({'n1': [gpu(0)]}, [pod('ml/p', {'1g.10gb': 1})], {}, cluster)
    assert message in str(caught.value) and '\n' not in str(caught.value)


def test_node_rules_are_read_only_with_the_cluster():
    odd = k8s_pod('odd', '1g.10gb', cpu='lots')
    assert [s['pod'] for s in plan_demand(two_nodes(), [odd])['served']] == ['ml/odd']
    with pytest.raises(DemandPlanError, match=r"^pending\[0\] \(ml/odd\): container c cpu: 'lots' is not a quantity$"):
        plan_demand(two_nodes(), [odd], {}, {'nodes': {}, 'pods': []})
