# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Kubernetes hand-over decisions (issue 17, sections 1-3): each rule with a test that fails if it broke."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _node_advertisement as node_advertisement
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _node_events as node_events
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _node_evictions as node_evictions
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _node_handover as h
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import Host

NODE = 'gpu-1'


def pod(name, namespace='ml', uid=None, owner='ReplicaSet', gpu='nvidia.com/mig-1g.10gb', phase='Running',
        node_selector=None, volumes=None, annotations=None, affinity_keys=None):
    owners = [] if owner is None else [{'kind': owner, 'name': name + '-owner', 'controller': True}]
    spec = {'containers': [{'name': 'c', 'resources': {'limits': {gpu: 1}} if gpu else {}}]}
    if node_selector:
        spec['nodeSelector'] = node_selector
    if affinity_keys:
        spec['affinity'] = {'nodeAffinity': {'requiredDuringSchedulingIgnoredDuringExecution': {
            'nodeSelectorTerms': [{'matchExpressions': [{'key': k, 'operator': 'In', 'values': ['true']} for k in affinity_keys]}]}}}
    if volumes:
        spec['volumes'] = volumes
    return {'kind': 'Pod', 'apiVersion': 'v1',
            'metadata': {'name': name, 'namespace': namespace, 'uid': uid or 'uid-' + name, 'ownerReferences': owners,
                         'annotations': annotations or {}},
            'spec': spec, 'status': {'phase': phase}}


def node(labels=None, annotations=None, unschedulable=False):
    return {'kind': 'Node', 'apiVersion': 'v1',
            'metadata': {'name': NODE, 'uid': 'node-uid', 'labels': labels or {}, 'annotations': annotations or {}},
            'spec': {'unschedulable': unschedulable} if unschedulable else {}}


# --- the switch mode, decided once ----------------------------------------------------------------

@pytest.mark.parametrize('switch, read, fallback, repack, mode', [
    ('in_place', True, False, False, 'in_place'),
    ('in_place', False, True, False, 'drain'),
    ('drain', True, False, False, 'drain'),
    ('drain', False, False, False, 'drain'),
    ('in_place', True, False, True, 'repack'),
    ('drain', False, True, True, 'repack'),
])
def test_switch_mode(switch, read, fallback, repack, mode):
    decided = h.SwitchMode(switch, {'read': read, 'reason': 'socket missing'}, fallback, repack)
    assert decided.mode == mode
    assert decided.problem() is None
    assert decided.reason


def test_switch_cordons_in_every_mode_but_create_only():
    read = {'read': True}
    assert h.SwitchMode('in_place', read).as_dict()['cordon'] is True
    assert h.SwitchMode('drain', read).as_dict()['cordon'] is True
    assert h.SwitchMode('in_place', read, repack=True).as_dict()['cordon'] is True
    created = h.SwitchMode('in_place', read, create_only=True).as_dict()
    assert created['mode'] == 'create_only' and created['cordon'] is False and created['problem'] is None
    assert 'not cordoned' in created['reason'] and 'device plugin' in created['reason']
    # A repack stays a repack; a chosen drain stays a drain (the user asked for the GPU operator's way); without
    # pod-resources, pods holding index ids are unknown: the cordoned path (or its problem) stays.
    assert h.SwitchMode('in_place', read, repack=True, create_only=True).mode == 'repack'
    assert h.SwitchMode('drain', read, create_only=True).mode == 'drain'
    assert h.SwitchMode('in_place', {'read': False}, drain_fallback=True, create_only=True).mode == 'drain'
    unread = h.SwitchMode('in_place', {'read': False}, create_only=True).as_dict()
    assert unread['mode'] is None and unread['problem'] and unread['cordon'] is False


def create(profile='3g.40gb', start=4):
    return {'action': 'create_gpu_instance', 'profile': profile, 'placement': {'start': start, 'size': 4}}


def decision(*gpus, **extra):
    found = {'in_layout': False, 'reboot_required': False, 'pods_to_evict': [],
             'gpus': [dict({'index': i, 'deferred': False}, actions=actions) for i, actions in enumerate(gpus)]}
    found.update(extra)
    return found


CREATE_CI = {'action': 'create_compute_instance', 'gpu_instance_ref': 'new-0', 'gpu_instance_profile': '3g.40gb'}


def test_a_change_that_only_creates_instances_is_create_only():
    scope = h.ChangeScope(decision([create(), CREATE_CI], [], [create('1g.10gb', 0)])).as_dict()
    assert scope == {'create_only': True, 'creates': 3, 'disturbing': [],
                     'reason': 'the change only creates 3 instance(s) in free slices'}


@pytest.mark.parametrize('gpus, extra, disturbing', [
    # A destroy anywhere on the host (another GPU included) takes the cordoned path.
    (([create()], [{'action': 'destroy_gpu_instance', 'gpu_instance_id': 3}]), {}, ['GPU 1: destroy gpu instance']),
    (([{'action': 'destroy_compute_instance', 'gpu_instance_id': 3}, create()],), {}, ['GPU 0: destroy compute instance']),
    (([{'action': 'set_mig_mode', 'mode': True}, create()],), {}, ['GPU 0: set mig mode']),
    (([{'action': 'reset_gpu', 'mode': True}],), {}, ['GPU 0: reset gpu']),
    (([create()],), {'reboot_required': True}, ['a reboot']),
    # A pod holding an index id that a new instance would shift is named by the decision: it must move.
    (([create()],), {'pods_to_evict': ['ml/a']}, ['pod(s) to evict: ml/a']),
])
def test_anything_but_creates_is_not_create_only(gpus, extra, disturbing):
    scope = h.ChangeScope(decision(*gpus, **extra)).as_dict()
    assert scope['create_only'] is False
    assert scope['disturbing'] == disturbing
    assert scope['reason'].startswith('the change does more than create instances')


def test_a_gpu_waiting_for_its_mode_step_or_no_step_at_all_is_not_create_only():
    deferred = decision([create()])
    deferred['gpus'][0]['deferred'] = True
    assert h.ChangeScope(deferred).as_dict()['disturbing'] == ['GPU 0: its instances wait for a MIG mode change']
    nothing = h.ChangeScope(decision([], [])).as_dict()
    assert nothing['create_only'] is False and nothing['reason'] == 'the change plans no step'
    assert h.ChangeScope(None).create_only is False
    # The repack's stand-in decision (no gpus).
    assert h.ChangeScope({'pods_to_evict': [], 'pod_resources': {'read': True}}).create_only is False


def test_create_only_evicts_nobody_even_when_pods_are_named():
    pods = [pod('a'), pod('b')]
    plan = node_evictions.EvictionPlan(pods, 'create_only', ['ml/a'], node=NODE).as_dict()
    assert plan['evict'] == [] and plan['refused'] == [] and plan['problem'] is None
    assert plan['gpu_pods'] == ['ml/a', 'ml/b']


def test_switch_fallback_says_why_it_drains():
    decided = h.SwitchMode('in_place', {'read': False, 'reason': 'socket missing'}, drain_fallback=True)
    assert 'socket missing' in decided.reason and 'mig_layout_k8s_drain_fallback=true' in decided.reason


def test_switch_in_place_without_pod_resources_and_no_fallback_is_a_problem():
    decided = h.SwitchMode('in_place', {'read': False, 'reason': 'socket missing'})
    assert decided.mode is None
    assert decided.as_dict()['problem'] == ('which pod holds which instance cannot be read (socket missing) and '
                                            'mig_layout_k8s_drain_fallback=false: nothing was changed')


def test_switch_unknown_option_refused():
    with pytest.raises(h.HandoverError, match='must be one of in_place, drain'):
        h.SwitchMode('evict_all', {'read': True})


# --- pods to evict and to refuse (items 4, 5, 9) -----------------------------------------------------

def test_in_place_evicts_only_the_named_pods_by_name_or_uid():
    pods = [pod('a'), pod('b'), pod('c'), pod('cpu', gpu=None)]
    plan = node_evictions.EvictionPlan(pods, 'in_place', ['ml/a', 'uid:uid-c'], node=NODE)
    assert [p['name'] for p in plan.evict] == ['a', 'c']
    assert plan.evict[0] == {'namespace': 'ml', 'name': 'a', 'uid': 'uid-a'}
    assert plan.refused == [] and plan.problem() is None
    assert plan.gpu_pods == ['ml/a', 'ml/b', 'ml/c']


def test_decided_after_the_cordon_a_pod_named_but_gone_from_the_list_is_refused():
    # Item 5: the names come from a decision after the cordon; one the API no longer lists is not silently skipped.
    plan = node_evictions.EvictionPlan([pod('a')], 'in_place', ['ml/a', 'ml/ghost'], node=NODE)
    assert [r['pod'] for r in plan.refused] == ['ml/ghost']
    assert 'lists no such running pod' in plan.problem()


def test_drain_evicts_every_running_gpu_pod_but_not_finished_or_cpu_pods():
    pods = [pod('a'), pod('done', phase='Succeeded'), pod('cpu', gpu=None), pod('shared', gpu='nvidia.com/mig-1g.10gb.shared'),
            pod('net', gpu='nvidia.com/hostdev')]
    plan = node_evictions.EvictionPlan(pods, 'drain', node=NODE)
    assert [p['name'] for p in plan.evict] == ['a', 'shared']


def test_a_pod_the_host_names_is_on_the_gpus_however_it_asked_for_them():
    # A DRA claim or a renamed resource is no GPU request in the pod's spec; the host (pod-resources) says it holds one.
    pods = [pod('a'), pod('dra', gpu=None), pod('cpu', gpu=None)]
    for mode in ('drain', 'in_place'):
        plan = node_evictions.EvictionPlan(pods, mode, ['ml/dra'], node=NODE)
        assert plan.gpu_pods == ['ml/a', 'ml/dra'] and 'ml/cpu' not in [p['name'] for p in plan.evict]


def test_reboot_evicts_every_running_pod_a_drain_moves():
    pods = [pod('a'), pod('cpu', gpu=None), pod('done', gpu=None, phase='Succeeded'), pod('ds', owner='DaemonSet'),
            pod('static', owner='Node'), pod('mirror', owner=None, annotations={'kubernetes.io/config.mirror': 'abc'})]
    plan = node_evictions.EvictionPlan(pods, 'reboot', node=NODE)
    # DaemonSet and static pods come back with the node: left alone, not refused (kubectl drain --ignore-daemonsets).
    assert [p['name'] for p in plan.evict] == ['a', 'cpu'] and plan.refused == [] and plan.problem() is None
    assert plan.gpu_pods == ['ml/a', 'ml/ds', 'ml/mirror', 'ml/static']
    # A bare pod or emptyDir data only with the user's consent, as kubectl drain --force --delete-emptydir-data.
    bare = node_evictions.EvictionPlan(pods + [pod('bare', owner=None, gpu=None)], 'reboot', node=NODE)
    assert [r['pod'] for r in bare.refused] == ['ml/bare']
    assert bare.problem().startswith('pod(s) the reboot would end cannot be moved from node gpu-1, so nobody was evicted '
                                     'and the host was not rebooted: ml/bare: no controller')
    assert [p['name'] for p in node_evictions.EvictionPlan(pods + [pod('bare', owner=None, gpu=None)], 'reboot', force=True).evict] == [
        'a', 'bare', 'cpu']


def test_repack_evicts_nobody():
    plan = node_evictions.EvictionPlan([pod('a')], 'repack', ['ml/a'])
    assert plan.evict == [] and plan.refused == [] and plan.gpu_pods == ['ml/a']


@pytest.mark.parametrize('victim, reason', [
    (pod('ds', owner='DaemonSet'), 'a DaemonSet pod'),
    (pod('static', owner='Node'), 'a static pod'),
    (pod('mirror', owner=None, annotations={'kubernetes.io/config.mirror': 'abc'}), 'a static pod'),
    (pod('bare', owner=None), 'mig_layout_k8s_evict_bare_pods=true'),
    (pod('scratch', volumes=[{'name': 's', 'emptyDir': {}}]), 'mig_layout_k8s_delete_emptydir_data=true'),
])
def test_a_pod_the_drain_would_not_move_refuses_everyone_before_any_eviction(victim, reason):
    name = victim['metadata']['name']
    plan = node_evictions.EvictionPlan([pod('a'), victim], 'in_place', ['ml/a', 'ml/' + name], node=NODE)
    assert [p['name'] for p in plan.evict] == ['a']
    assert [r['pod'] for r in plan.refused] == ['ml/' + name]
    problem = plan.as_dict()['problem']
    assert problem.startswith('pod(s) on instances that go cannot be moved from node gpu-1, so nobody was evicted')
    assert 'ml/%s: ' % name in problem and reason in problem


def test_drain_refuses_a_gpu_daemonset_pod_too():
    plan = node_evictions.EvictionPlan([pod('ds', owner='DaemonSet')], 'drain', node=NODE)
    assert plan.evict == [] and [r['pod'] for r in plan.refused] == ['ml/ds']


def test_bare_and_emptydir_pods_are_evicted_when_the_user_says_so():
    pods = [pod('bare', owner=None), pod('scratch', volumes=[{'name': 's', 'emptyDir': {}}]),
            pod('cm', volumes=[{'name': 'c', 'configMap': {'name': 'x'}}])]
    names = ['ml/bare', 'ml/scratch', 'ml/cm']
    assert [r['pod'] for r in node_evictions.EvictionPlan(pods, 'in_place', names, force=True).refused] == ['ml/scratch']
    assert [r['pod'] for r in node_evictions.EvictionPlan(pods, 'in_place', names, delete_emptydir_data=True).refused] == ['ml/bare']
    assert node_evictions.EvictionPlan(pods, 'in_place', names, force=True, delete_emptydir_data=True).refused == []


def test_an_owner_that_is_not_the_controller_does_not_count():
    bare = pod('bare', owner=None)
    bare['metadata']['ownerReferences'] = [{'kind': 'ConfigMap', 'name': 'x'}]
    assert [r['pod'] for r in node_evictions.EvictionPlan([bare], 'in_place', ['ml/bare']).refused] == ['ml/bare']


def test_a_paused_components_pod_goes_with_the_pause_not_by_eviction():
    label = 'nvidia.com/gpu.deploy.dcgm-exporter'
    exporter = pod('dcgm-exporter-x', owner='DaemonSet', node_selector={label: 'true'})
    plan = node_evictions.EvictionPlan([exporter, pod('a')], 'in_place', ['ml/dcgm-exporter-x', 'ml/a'], paused_labels=[label])
    assert [p['name'] for p in plan.evict] == ['a'] and plan.refused == []
    assert plan.gpu_pods == ['ml/a']
    # Not paused: the same pod is refused.
    assert [r['pod'] for r in node_evictions.EvictionPlan([exporter], 'in_place', ['ml/dcgm-exporter-x']).refused] == ['ml/dcgm-exporter-x']


def test_bad_mode_refused():
    with pytest.raises(h.HandoverError):
        node_evictions.EvictionPlan([], None)


# --- the dry-run answers (item 4) ---------------------------------------------------------------------

PDB_REFUSAL = {'pod': 'ml/guarded-d', 'allowed': False, 'status': 429,
               'message': "Cannot evict pod as it would violate the pod's disruption budget.",
               'causes': [{'reason': 'DisruptionBudget', 'message': 'The disruption budget guarded-d needs 1 healthy pods and has 1 currently'}]}


def test_eviction_problem_names_the_pod_and_the_budget():
    problem = node_evictions.eviction_problem([{'pod': 'ml/a', 'allowed': True, 'status': 201}, PDB_REFUSAL], NODE)
    assert problem == ("the API server refused the eviction (tried as a dry run first) of a pod on node gpu-1: ml/guarded-d: HTTP 429 "
                       "Cannot evict pod as it would violate the pod's disruption budget (The disruption budget guarded-d needs 1 "
                       "healthy pods and has 1 currently); nobody was evicted and no GPU was changed")


def test_eviction_problem_none_when_all_allowed_and_counts_refusals():
    assert node_evictions.eviction_problem([{'pod': 'ml/a', 'allowed': True}], NODE) is None
    other = {'pod': 'ml/b', 'allowed': False, 'status': 403, 'message': 'forbidden', 'causes': []}
    problem = node_evictions.eviction_problem([PDB_REFUSAL, other], NODE, dry_run=False)
    assert 'of 2 pods on node gpu-1' in problem and 'ml/b: HTTP 403 forbidden' in problem
    assert problem.endswith('the pods before it were evicted; no GPU was changed')


def test_pods_left_after_eviction_by_uid():
    evicted = [{'namespace': 'ml', 'name': 'a', 'uid': 'uid-a'}, {'namespace': 'ml', 'name': 'b', 'uid': 'uid-b'}]
    # b was replaced by a new pod of the same name (another UID): not the evicted one.
    pods = [pod('a'), pod('b', uid='uid-b2'), pod('c'), pod('a-done', uid='uid-b', phase='Failed')]
    assert node_evictions.pods_left(pods, evicted) == ['ml/a']


def test_pods_in_the_way_of_a_reboot():
    pods = [pod('a'), pod('ds', owner='DaemonSet'), pod('static', owner='Node'),
            pod('mirror', owner=None, annotations={'kubernetes.io/config.mirror': 'x'}), pod('done', phase='Succeeded'),
            pod('cpu', gpu=None)]
    assert node_evictions.pods_in_the_way_of_reboot(pods) == ['ml/a', 'ml/cpu']


# --- the components to pause and restore (item 6, section 3) ----------------------------------------

def test_components_paused_left_alone_and_restored():
    labels = {'nvidia.com/gpu.deploy.device-plugin': 'true', 'nvidia.com/gpu.deploy.dcgm': 'false',
              'nvidia.com/gpu.deploy.dcgm-exporter': h.PAUSED, 'nvidia.com/gpu.deploy.nvsm': 'true'}
    pause = h.ComponentPause(labels)
    assert pause.pause == {'nvidia.com/gpu.deploy.device-plugin': h.PAUSED, 'nvidia.com/gpu.deploy.dcgm-exporter': h.PAUSED,
                           'nvidia.com/gpu.deploy.nvsm': h.PAUSED}
    # A label left paused by a dead run comes back "true"; "false" set by someone else is left alone.
    assert pause.restore == {'nvidia.com/gpu.deploy.device-plugin': 'true', 'nvidia.com/gpu.deploy.dcgm-exporter': 'true',
                             'nvidia.com/gpu.deploy.nvsm': 'true'}
    assert pause.left_alone == ['nvidia.com/gpu.deploy.dcgm']


def test_the_operators_whole_set_by_default_and_a_configured_list():
    labels = dict((h.DEPLOY_PREFIX + c, 'true') for c in
                  ('device-plugin', 'gpu-feature-discovery', 'dcgm-exporter', 'dcgm', 'nvsm', 'operator-validator', 'mig-manager'))
    assert sorted(h.ComponentPause(labels).pause) == sorted(h.DEPLOY_PREFIX + c for c in h.DEFAULT_COMPONENTS)
    assert list(h.ComponentPause(labels, ['device-plugin']).pause) == ['nvidia.com/gpu.deploy.device-plugin']
    with pytest.raises(h.HandoverError, match='not a component name'):
        h.ComponentPause(labels, ['nvidia.com/gpu.deploy.device-plugin=true'])


def test_paused_pods_left_by_node_selector_and_affinity():
    label = 'nvidia.com/gpu.deploy.device-plugin'
    pods = [pod('dp', owner='DaemonSet', node_selector={label: 'true'}),
            pod('gfd', owner='DaemonSet', affinity_keys=['nvidia.com/gpu.deploy.gpu-feature-discovery']),
            pod('other', owner='DaemonSet', node_selector={'kubernetes.io/os': 'linux'})]
    assert h.paused_pods_left(pods, [label]) == ['ml/dp']
    assert h.paused_pods_left(pods, [label, 'nvidia.com/gpu.deploy.gpu-feature-discovery']) == ['ml/dp', 'ml/gfd']
    assert h.paused_pods_left(pods, []) == []


# --- the allocatable comparison on device-id sets (item 7) ------------------------------------------

EXPECTED = {'nvidia.com/mig-1g.10gb': {'uuid': ['MIG-a', 'MIG-b', 'MIG-c', 'MIG-d'], 'index': ['0:0', '0:1', '0:2', '0:3']}}


def test_seven_to_four_does_not_pass_while_destroyed_uuids_are_advertised():
    advertised = {'nvidia.com/mig-1g.10gb': ['MIG-a', 'MIG-b', 'MIG-c', 'MIG-d', 'MIG-e', 'MIG-f', 'MIG-g']}
    result = node_advertisement.Advertisement(EXPECTED, advertised)
    assert not result.matches
    assert result.stale == {'nvidia.com/mig-1g.10gb': ['MIG-e', 'MIG-f', 'MIG-g']} and result.missing == {}
    assert result.problem() == 'still advertised although gone: nvidia.com/mig-1g.10gb MIG-e, MIG-f, MIG-g'


def test_every_new_instance_must_be_advertised():
    result = node_advertisement.Advertisement(EXPECTED, {'nvidia.com/mig-1g.10gb': ['MIG-a', 'MIG-b', 'MIG-c']})
    assert result.missing == {'nvidia.com/mig-1g.10gb': ['MIG-d']}
    assert result.problem() == 'not advertised yet: nvidia.com/mig-1g.10gb MIG-d'


def test_exact_sets_match_by_strategy_shared_names_and_replicas():
    assert node_advertisement.Advertisement(EXPECTED, {'nvidia.com/mig-1g.10gb': ['MIG-d', 'MIG-c', 'MIG-b', 'MIG-a']}).matches
    assert node_advertisement.Advertisement(EXPECTED, {'nvidia.com/mig-1g.10gb': ['0:0', '0:1', '0:2', '0:3']}, 'index').matches
    assert not node_advertisement.Advertisement(EXPECTED, {'nvidia.com/mig-1g.10gb': ['0:0', '0:1', '0:2', '0:3']}, 'uuid').matches
    shared = {'nvidia.com/mig-1g.10gb.shared': ['MIG-%s::%d' % (u, r) for u in 'abcd' for r in range(2)],
              'nvidia.com/hostdev': ['x']}
    assert node_advertisement.Advertisement(EXPECTED, shared).matches


def test_a_renamed_resource_counts_by_device_id():
    """The device_plugin role's rename (time-slicing): the MIG devices advertised as nvidia.com/small-gpu, each once
    per replica. Their ids count for the profile the GPUs hold them as; a gone MIG device under the new name is
    stale; a renamed whole GPU's plain index, which any vendor's device may have, and other ids count for nothing."""
    renamed = {'nvidia.com/small-gpu': ['MIG-%s::%d' % (u, r) for u in 'abcd' for r in range(2)], 'nvidia.com/hostdev': ['7']}
    assert node_advertisement.Advertisement(EXPECTED, renamed).matches
    index_renamed = {'nvidia.com/small-gpu': ['0:0', '0:1', '0:2', '0:3::1']}
    assert node_advertisement.Advertisement(EXPECTED, index_renamed, 'index').matches
    result = node_advertisement.Advertisement(EXPECTED, {'nvidia.com/small-gpu': ['MIG-a', 'MIG-b', 'MIG-c', 'MIG-e::0', '3']})
    assert result.missing == {'nvidia.com/mig-1g.10gb': ['MIG-d']}
    assert result.stale == {'nvidia.com/small-gpu': ['MIG-e']}
    assert result.problem() == ('not advertised yet: nvidia.com/mig-1g.10gb MIG-d and still advertised although gone: '
                                'nvidia.com/small-gpu MIG-e')
    whole = {'nvidia.com/gpu': {'uuid': ['GPU-x'], 'index': ['0']}}
    assert node_advertisement.Advertisement(whole, {'nvidia.com/small-gpu': ['0::0', '0::1']}, 'index').missing == {
        'nvidia.com/gpu': ['0']}


def test_a_profile_advertised_under_another_resource_is_both_missing_and_stale():
    result = node_advertisement.Advertisement(EXPECTED, {'nvidia.com/mig-2g.20gb': ['MIG-a', 'MIG-b', 'MIG-c', 'MIG-d']})
    assert result.missing == {'nvidia.com/mig-1g.10gb': ['MIG-a', 'MIG-b', 'MIG-c', 'MIG-d']}
    assert result.stale == {'nvidia.com/mig-2g.20gb': ['MIG-a', 'MIG-b', 'MIG-c', 'MIG-d']}


def test_bad_strategy_refused():
    with pytest.raises(h.HandoverError, match='uuid or index'):
        node_advertisement.Advertisement(EXPECTED, {}, 'serial')


# --- the requested layout (section 3) -----------------------------------------------------------------

def test_the_label_is_honoured_only_when_followed():
    labels = {h.CONFIG_LABEL: 'nighttime'}
    followed = h.LayoutRequest(labels, 'daytime', True, ['daytime', 'nighttime'])
    assert (followed.name, followed.source, followed.relabel, followed.problem()) == ('nighttime', 'label', False, None)
    ignored = h.LayoutRequest(labels, 'daytime', False, ['daytime', 'nighttime'])
    # A run that targets another layout sets the label first.
    assert (ignored.name, ignored.source, ignored.relabel) == ('daytime', 'role', True)
    unlabelled = h.LayoutRequest({}, 'daytime', True, ['daytime'])
    assert (unlabelled.name, unlabelled.source, unlabelled.relabel) == ('daytime', 'role', True)


def test_a_label_naming_no_layout_is_refused():
    request = h.LayoutRequest({h.CONFIG_LABEL: 'weekend'}, 'daytime', True, ['daytime', 'nighttime'])
    assert request.as_dict()['problem'] == ('node label nvidia.com/mig.config=weekend names no layout of the catalog '
                                            '(daytime, nighttime): nothing was changed')


# --- the node's labels and states (section 3, item 10) --------------------------------------------------

def test_start_success_rebooting_patches():
    handover = h.NodeHandover(node({'nvidia.com/gpu.deploy.device-plugin': 'true', h.CONFIG_LABEL: 'daytime'}), 'nighttime')
    start = handover.start()
    assert start == {'metadata': {'labels': {'nvidia.com/gpu.deploy.device-plugin': h.PAUSED, h.STATE_LABEL: 'pending',
                                             h.CONFIG_LABEL: 'nighttime'},
                                  'annotations': {h.CORDON_ANNOTATION: 'nighttime'}}}
    assert handover.rebooting() == {'metadata': {'labels': {h.STATE_LABEL: 'rebooting'}}}
    assert handover.success() == {'metadata': {
        'labels': {'nvidia.com/gpu.deploy.device-plugin': 'true', h.STATE_LABEL: 'success', h.CONFIG_LABEL: 'nighttime'},
        'annotations': {h.CORDON_ANNOTATION: None, h.FAILURE_ANNOTATION: None}}}
    assert set(h.STATES) == set(['pending', 'rebooting', 'success', 'failed'])


def test_a_node_cordoned_by_someone_else_gets_no_mark_and_is_never_uncordoned():
    found = h.NodeHandover(node(unschedulable=True), 'nighttime').as_dict()
    assert found['cordoned_by_others'] and found['start']['metadata']['annotations'] == {}
    assert not h.failure(found, 'boom', gpu_changed=False)['uncordon']
    # Cordoned by an earlier failed run of ours (its mark): ours to uncordon.
    ours = h.NodeHandover(node(annotations={h.CORDON_ANNOTATION: 'daytime'}, unschedulable=True), 'nighttime').as_dict()
    assert not ours['cordoned_by_others']


def test_failure_keeps_the_cordon_only_when_a_gpu_may_have_changed():
    found = h.NodeHandover(node({'nvidia.com/gpu.deploy.device-plugin': 'true'}), 'nighttime').as_dict()
    touched = h.failure(found, 'GPU 0: create failed', gpu_changed=True)
    assert touched == {'uncordon': False, 'cordoned': True, 'patch': {'metadata': {
        'labels': {'nvidia.com/gpu.deploy.device-plugin': 'true', h.STATE_LABEL: 'failed'},
        'annotations': {h.FAILURE_ANNOTATION: 'GPU 0: create failed'}}}}
    untouched = h.failure(found, 'budget', gpu_changed=False)
    assert untouched['uncordon']
    assert untouched['patch']['metadata']['annotations'] == {h.FAILURE_ANNOTATION: 'budget', h.CORDON_ANNOTATION: None}
    assert len(h.failure(found, 'x' * 5000, True)['patch']['metadata']['annotations'][h.FAILURE_ANNOTATION]) == 4096


def test_a_create_only_change_never_marks_nor_uncordons_the_node():
    plain = node({'nvidia.com/gpu.deploy.device-plugin': 'true'})
    found = h.NodeHandover(plain, 'demand-1', cordon=False).as_dict()
    assert found['cordon'] is False and found['uncordon'] is False
    # Components are still paused (the device plugin restarts and enumerates the new instances), no cordon mark.
    assert found['start'] == {'metadata': {'labels': {'nvidia.com/gpu.deploy.device-plugin': h.PAUSED, h.STATE_LABEL: 'pending',
                                                      h.CONFIG_LABEL: 'demand-1'}, 'annotations': {}}}
    assert found['success']['metadata']['labels']['nvidia.com/gpu.deploy.device-plugin'] == 'true'
    # Cordoned by someone else meanwhile, or not: a run that did not cordon does not uncordon, even after a failure.
    for gpu_changed in (False, True):
        failed = h.failure(found, 'create failed', gpu_changed)
        assert failed['uncordon'] is False and failed['cordoned'] is False
        assert h.failure_outcome(failed, 'n1') == (
            'the node was not cordoned (the change only created instances) and says nvidia.com/mig.config.state=failed.')
        assert h.failure_outcome(failed, 'n1', write_error='timeout') == (
            'writing nvidia.com/mig.config.state=failed to node n1 also failed (timeout): it may still say pending, '
            'with its GPU components paused.')
    cordoning = h.NodeHandover(plain, 'demand-1').as_dict()
    assert cordoning['cordon'] and cordoning['uncordon']
    assert cordoning['start']['metadata']['annotations'] == {h.CORDON_ANNOTATION: 'demand-1'}


def test_failure_outcome_says_what_the_node_shows():
    kept = {'uncordon': False}
    handed_back = {'uncordon': True}
    assert h.failure_outcome(kept, 'n1') == 'the node stays cordoned with nvidia.com/mig.config.state=failed.'
    assert h.failure_outcome(handed_back, 'n1') == (
        'no GPU was changed, so the node is schedulable again, with nvidia.com/mig.config.state=failed.')
    assert h.failure_outcome(handed_back, 'n1', uncordon_error='HTTP 409') == (
        'no GPU was changed; uncordoning node n1 failed (HTTP 409), it says nvidia.com/mig.config.state=failed.')
    # The failed state could not be written: said, with what the node may still show.
    assert h.failure_outcome(kept, 'n1', write_error='HTTP 403 forbidden') == (
        'writing nvidia.com/mig.config.state=failed to node n1 also failed (HTTP 403 forbidden): it may still say pending, '
        'with its GPU components paused and cordoned.')
    assert h.failure_outcome(handed_back, 'n1', write_error='timeout') == (
        'writing nvidia.com/mig.config.state=failed to node n1 also failed (timeout): it may still say pending, '
        'with its GPU components paused.')
    assert h.failure_outcome(handed_back, 'n1', write_error='timeout', uncordon_error='') == (
        'writing nvidia.com/mig.config.state=failed to node n1 also failed (timeout): it may still say pending, '
        'with its GPU components paused; uncordoning it failed too (unknown error).')
    assert h.failure_outcome(kept, 'n1', write_error='') == (
        'writing nvidia.com/mig.config.state=failed to node n1 also failed (unknown error): it may still say pending, '
        'with its GPU components paused and cordoned.')


def test_decision_retry_installs_a_missing_package_or_drains_where_allowed():
    unreadable = ('which pods hold which GPU cannot be read (pod_resources=required): connection refused. Nothing was '
                  'changed. Set pod_resources=off ...')
    pynvml = "Failed to import the required Python library (nvidia-ml-py) on host's Python /usr/bin/python3."
    grpc = ('which pods hold which GPU cannot be read (the socket exists, so this is a Kubernetes node): reading the '
            'kubelet pod-resources API needs the Python package grpcio, which cannot be imported (No module named grpc): ...')
    unknown = 'the kubelet lists device(s) 9:9 that match no ...: which instances pods hold is unknown, so nothing is planned'
    no = {'install_missing': False, 'drain_instead': False, 'pod_resources_off': False, 'retry': False}
    assert h.decision_retry(pynvml, False, True, False) == dict(no, install_missing=True, retry=True)
    assert h.decision_retry(pynvml, True, False, True) == no
    assert h.decision_retry(unreadable, True, True, True) == dict(no, drain_instead=True, pod_resources_off=True, retry=True)
    assert h.decision_retry(unknown, True, False, True) == dict(no, drain_instead=True, pod_resources_off=True, retry=True)
    # A drain only on a Kubernetes node, and only when the user allowed it.
    assert h.decision_retry(unreadable, False, True, True) == no
    assert h.decision_retry(unreadable, True, True, False) == no
    # grpcio missing: installed first, then the retry reads the pod-resources (no drain).
    both = {'install_missing': True, 'drain_instead': True, 'pod_resources_off': False, 'retry': True}
    assert h.decision_retry(grpc, True, True, True) == both
    assert h.decision_retry(grpc, True, False, True) == dict(no, drain_instead=True, pod_resources_off=True, retry=True)
    assert h.decision_retry('GPU 0: NVML_ERROR_UNKNOWN', True, True, True) == no
    assert h.decision_retry(None, True, True, True) == no


def test_decision_retry_reads_the_words_the_producers_write():
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _pod_allocations as pr_allocations
    host = Host.from_dict({'gpus': [{'index': 0, 'uuid': 'GPU-0', 'minor_number': 0, 'gpu_instances': [], 'processes': []}]})
    with pytest.raises(pr_allocations.UnknownDeviceIds) as unknown:
        pr_allocations.allocations_of(host, [{'namespace': 'ml', 'pod': 'a', 'container': 'c', 'resource': 'nvidia.com/gpu',
                                              'device_ids': ['GPU-gone']}])
    assert h.decision_retry(str(unknown.value), True, False, True)['drain_instead']


def test_no_node_refused():
    with pytest.raises(h.HandoverError):
        h.NodeHandover({}, 'daytime')


def test_recovery_of_a_node_left_handed_over():
    left = node({'nvidia.com/gpu.deploy.device-plugin': h.PAUSED, 'nvidia.com/gpu.deploy.dcgm': 'false', h.STATE_LABEL: 'pending',
                 h.CONFIG_LABEL: 'daytime'}, {h.CORDON_ANNOTATION: 'daytime'}, unschedulable=True)
    # Components back first, the advertisement awaited, then uncordon and success (issue 27: recovery checks it first).
    assert h.recovery(left, 'daytime') == {
        'uncordon': True, 'await_advertisement': True,
        'restore': {'metadata': {'labels': {'nvidia.com/gpu.deploy.device-plugin': 'true'}}},
        'patch': {'metadata': {'labels': {h.CONFIG_LABEL: 'daytime', h.STATE_LABEL: 'success'},
                               'annotations': {h.CORDON_ANNOTATION: None}}}}
    fine = node({h.STATE_LABEL: 'success', h.CONFIG_LABEL: 'daytime'})
    assert h.recovery(fine, 'daytime') is None
    # Labelled for another layout: relabelled, not uncordoned, nothing to await.
    assert h.recovery(fine, 'nighttime') == {'uncordon': False, 'await_advertisement': False, 'restore': None, 'patch': {'metadata': {
        'labels': {h.CONFIG_LABEL: 'nighttime', h.STATE_LABEL: 'success'}, 'annotations': {}}}}
    # A node cordoned by someone else without our mark stays cordoned; a failed one is awaited before it says success.
    failed = h.recovery(node({h.STATE_LABEL: 'failed'}, unschedulable=True), 'daytime')
    assert not failed['uncordon'] and failed['await_advertisement']


# --- issue 27, section 3: the holes -------------------------------------------------------------------------

def test_pause_timeout_zero_means_do_not_pause_and_a_negative_one_is_refused():
    labels = {'nvidia.com/gpu.deploy.device-plugin': 'true', 'nvidia.com/gpu.deploy.dcgm': 'true'}
    off = h.ComponentPause(labels, pause_timeout=0)
    assert off.pause == {} and off.restore == {} and off.left_alone == ['nvidia.com/gpu.deploy.device-plugin', 'nvidia.com/gpu.deploy.dcgm']
    start = h.NodeHandover(node(labels), 'daytime', pause_timeout=0).start()['metadata']['labels']
    assert start == {h.STATE_LABEL: 'pending', h.CONFIG_LABEL: 'daytime'}
    assert h.ComponentPause(labels, pause_timeout=301).wait_retries == 151
    assert h.ComponentPause(labels, pause_timeout='1').as_dict()['wait_retries'] == 1
    assert h.ComponentPause(labels).as_dict()['pause_timeout'] == 300
    for bad in (-1, True, 'soon', 2.5):
        with pytest.raises(h.HandoverError, match='mig_layout_k8s_pause_timeout'):
            h.ComponentPause(labels, pause_timeout=bad)


def test_the_paused_components_wait_fails_loudly_when_the_pods_cannot_be_listed():
    paused = ['nvidia.com/gpu.deploy.dcgm']
    # An API error is not "no pods": the change must not go on (issue 27: no default([]) masking).
    errored = h.paused_wait({'failed': True, 'msg': 'Forbidden: pods is forbidden'}, paused, NODE, 300)
    assert errored['done'] is False and 'listing the pods of node gpu-1 failed (Forbidden: pods is forbidden)' in errored['problem']
    assert 'no GPU was changed' in errored['problem']
    assert h.paused_wait({}, paused, NODE)['problem'] is not None
    dcgm = pod('dcgm', namespace='gpu-operator', owner='DaemonSet', gpu=None, node_selector={'nvidia.com/gpu.deploy.dcgm': 'true'})
    left = h.paused_wait({'resources': [dcgm, pod('a')]}, paused, NODE, 300)
    assert left['left'] == ['gpu-operator/dcgm'] and not left['done'] and 'still run on node gpu-1 300 s' in left['problem']
    assert h.paused_wait({'resources': [pod('a')]}, paused, NODE) == {'done': True, 'left': [], 'problem': None}
    # Nothing paused: nothing to wait for; a wait skipped (check mode) is not a problem either.
    assert h.paused_wait({'failed': True}, [], NODE)['problem'] is None
    assert h.paused_wait({'skipped': True}, paused, NODE)['problem'] is None


def test_a_refused_request_says_failed_with_the_reason_on_the_node():
    request = h.LayoutRequest({h.CONFIG_LABEL: 'weekend', h.STATE_LABEL: 'success'}, 'daytime', True, ['daytime']).as_dict()
    assert request['refusal'] == {'metadata': {'labels': {h.STATE_LABEL: 'failed'}, 'annotations': {
        h.FAILURE_ANNOTATION: request['problem']}}}
    assert h.LayoutRequest({h.CONFIG_LABEL: 'daytime'}, 'daytime', True, ['daytime']).as_dict()['refusal'] is None


def test_an_apply_refused_before_any_nvml_change_hands_the_node_back_uncordoned():
    found = h.NodeHandover(node({'nvidia.com/gpu.deploy.device-plugin': 'true'}), 'nighttime').as_dict()
    refused = {'failed': True, 'msg': 'instance allocated to pod(s) ml/a', 'gpus_changed': False}
    assert h.failure(found, 'refused', True, refused)['uncordon'] is True
    assert h.gpu_touched(True, refused) is False
    # Part-way, unknown (no gpus_changed: an unexpected error, an unreachable host) or after a successful apply: cordoned.
    assert h.failure(found, 'half', True, {'failed': True, 'gpus_changed': True})['uncordon'] is False
    assert h.gpu_touched(True, {'failed': True, 'msg': 'unexpected error'}) is True
    assert h.gpu_touched(True, {'changed': True, 'reboot_required': True}) is True
    assert h.gpu_touched(True, None) is True
    assert h.gpu_touched(False, {'failed': True, 'gpus_changed': True}) is False


# --- Events (section 3) ------------------------------------------------------------------------------

def test_node_event_lives_in_default_and_pod_event_in_its_namespace():
    stamp = '2026-12-03T20:10:00.123456Z'
    ev = node_events.event(node(), 'MIGChangeStarted', 'layout nighttime', stamp, 2)
    assert ev['metadata'] == {'name': 'gpu-1.mig.20261203201000123456.2', 'namespace': 'default'}
    assert ev['regarding'] == {'apiVersion': 'v1', 'kind': 'Node', 'name': 'gpu-1', 'uid': 'node-uid'}
    assert (ev['apiVersion'], ev['type'], ev['eventTime'], ev['reportingController']) == (
        'events.k8s.io/v1', 'Normal', stamp, 'gpufleet.mig/mig-layout')
    pev = node_events.event(pod('a'), 'EvictedForMIGChange', 'n' * 2000, stamp, warning=True)
    assert pev['metadata']['namespace'] == 'ml' and pev['regarding']['namespace'] == 'ml'
    assert pev['type'] == 'Warning' and len(pev['note']) == 1024


def test_allocatable_counts_where_no_device_ids_are_expected():
    expected = {'nvidia.com/mig-1g.10gb': 4, 'nvidia.com/mig-3g.40gb': 1, 'nvidia.com/mig-7g.80gb': 0}
    assert node_advertisement.allocatable_short(expected, {'nvidia.com/mig-1g.10gb': '4', 'nvidia.com/mig-3g.40gb': '1'}) == []
    assert node_advertisement.allocatable_short(expected, {'nvidia.com/mig-1g.10gb.shared': '8', 'nvidia.com/hostdev': '9'}) == [
        'nvidia.com/mig-3g.40gb: 0 advertised, 1 held']
    assert node_advertisement.allocatable_short(expected, {'nvidia.com/mig-1g.10gb': '3', 'nvidia.com/mig-3g.40gb': '1'}) == [
        'nvidia.com/mig-1g.10gb: 3 advertised, 4 held']


# --- unmet demand told on the pod (issue 20, section 3) -----------------------------------------------------

STAMP = '2026-12-04T03:00:00.123456Z'
LATER = '2026-12-04T03:05:00.000001Z'
WHY = '7g.80gb: 1 device(s) for ml/big unmet: no GPU is free of pods; nearest is node gpu-1 GPU 0, 3 pod(s) (ml/a, ml/b, ml/c)'


def test_an_unmet_pod_gets_a_warning_event_about_it_with_the_reason():
    events = node_events.unmet_demand_events({'ml/big': [WHY]}, [pod('big'), pod('other')], [], STAMP)
    assert events['count'] == []
    [made] = events['create']
    assert made['regarding'] == {'apiVersion': 'v1', 'kind': 'Pod', 'name': 'big', 'namespace': 'ml', 'uid': 'uid-big'}
    assert made['metadata']['namespace'] == 'ml' and made['metadata']['labels'] == {node_events.DEMAND_LABEL: 'true'}
    assert made['metadata']['name'].startswith('big.migdemand.')
    assert (made['type'], made['reason'], made['reportingController']) == ('Warning', 'MIGDemandUnmet', 'gpufleet.mig/mig-demand')
    assert made['note'] == 'gpufleet.mig cannot give this pod its MIG devices: ' + WHY
    assert made['eventTime'] == STAMP


def test_the_same_reason_next_run_counts_the_event_again_instead_of_a_new_one():
    first = node_events.unmet_demand_events({'ml/big': [WHY]}, [pod('big')], [], STAMP)['create'][0]
    again = node_events.unmet_demand_events({'ml/big': [WHY]}, [pod('big')], [first], LATER)
    assert again['create'] == []
    assert again['count'] == [{'namespace': 'ml', 'name': first['metadata']['name'],
                               'series': {'count': 2, 'lastObservedTime': LATER}}]
    counted = dict(first, series={'count': 2, 'lastObservedTime': LATER})
    assert node_events.unmet_demand_events({'ml/big': [WHY]}, [pod('big')], [counted], LATER)['count'][0]['series']['count'] == 3
    # The name depends on the reason only, not on the run's time.
    assert node_events.unmet_demand_events({'ml/big': [WHY]}, [pod('big')], [], LATER)['create'][0]['metadata']['name'] == first['metadata']['name']


def test_a_changed_reason_or_another_pod_of_the_same_name_is_a_new_event():
    first = node_events.unmet_demand_events({'ml/big': [WHY]}, [pod('big')], [], STAMP)['create'][0]
    changed = node_events.unmet_demand_events({'ml/big': [WHY.replace('3 pod(s)', '2 pod(s)')]}, [pod('big')], [first], LATER)
    assert changed['count'] == [] and changed['create'][0]['metadata']['name'] != first['metadata']['name']
    recreated = node_events.unmet_demand_events({'ml/big': [WHY]}, [pod('big', uid='uid-new')], [first], LATER)
    assert recreated['count'] == [] and recreated['create'][0]['regarding']['uid'] == 'uid-new'


def test_a_pod_bound_or_gone_meanwhile_or_without_reason_is_told_nothing():
    assert node_events.unmet_demand_events({'ml/big': [WHY]}, [pod('other')], [], STAMP) == {'create': [], 'count': []}
    assert node_events.unmet_demand_events({'ml/big': []}, [pod('big')], [], STAMP) == {'create': [], 'count': []}
    assert node_events.unmet_demand_events(None, None, None, STAMP) == {'create': [], 'count': []}


def test_unmet_demand_event_names_and_notes_stay_within_the_api_limits():
    long_name = 'x' * 253
    made = node_events.unmet_demand_events({'ml/' + long_name: [WHY] * 20}, [pod(long_name)], [], STAMP)['create'][0]
    assert len(made['metadata']['name']) <= 253 and made['metadata']['name'].endswith(made['metadata']['name'][-16:])
    assert len(made['note']) == node_events.EVENT_NOTE_LIMIT and made['note'].endswith('...')


# ---- issue 27, section 1: one rule for in place, drain and the drain fallback -----------------------------------

def _dra_pod(name):
    claimed = pod(name, gpu=None)
    claimed['spec']['resourceClaims'] = [{'name': 'gpu', 'resourceClaimTemplateName': 'one-mig'}]
    return claimed


def test_drain_evicts_the_pods_the_host_names_whatever_they_request():
    # An idle DRA pod and a renamed resource's pod request no GPU by name: the host's decision (drain=true) names them.
    pods = [pod('a'), _dra_pod('claimed'), pod('renamed', gpu='nvidia.com/small-gpu'), pod('cpu', gpu=None)]
    plan = node_evictions.EvictionPlan(pods, 'drain', ['ml/claimed', 'uid:uid-renamed'], node=NODE)
    assert [p['name'] for p in plan.evict] == ['a', 'claimed', 'renamed'] and plan.problem() is None


def test_drain_without_pod_resources_refuses_pods_that_may_hold_a_gpu_unseen():
    pods = [pod('a'), _dra_pod('claimed'), pod('renamed', gpu='nvidia.com/small-gpu'), pod('cpu', gpu=None)]
    plan = node_evictions.EvictionPlan(pods, 'drain', [], node=NODE, pod_resources_read=False)
    assert [p['name'] for p in plan.evict] == ['a']
    assert [r['pod'] for r in plan.refused] == ['ml/claimed', 'ml/renamed']
    assert 'whether it holds a GPU is unknown' in plan.problem() and 'nobody was evicted' in plan.problem()
    # Where pod-resources were read, a pod they do not name holds nothing: not refused, not evicted.
    read = node_evictions.EvictionPlan(pods, 'drain', [], node=NODE)
    assert [p['name'] for p in read.evict] == ['a'] and read.refused == []


# ---- issue 27, section 4: what the role's YAML used to decide ------------------------------------------------

def test_in_place_and_drain_decide_again_and_only_a_drain_names_every_holder():
    read = {'read': True}
    assert h.SwitchMode('in_place', read).as_dict()['decide_again'] is True
    assert h.SwitchMode('in_place', read).as_dict()['drain'] is False
    assert h.SwitchMode('drain', read).as_dict()['decide_again'] is True and h.SwitchMode('drain', read).drain is True
    assert h.SwitchMode('in_place', {'read': False}, drain_fallback=True).as_dict()['drain'] is True
    for quiet in (h.SwitchMode('in_place', read, repack=True), h.SwitchMode('in_place', read, create_only=True)):
        assert quiet.decide_again is False and quiet.drain is False


def test_other_owners_of_mig_on_the_node():
    assert h.other_owners(node()) == []
    assert h.other_owners(node({h.MIG_MANAGER_LABEL: 'false'})) == []
    assert h.other_owners(node({h.MIG_MANAGER_LABEL: 'true'})) == [
        'the GPU operator MIG manager (node label nvidia.com/gpu.deploy.mig-manager=true)']
    static = {'metadata': {'name': 'static'}, 'spec': {'devices': []}}
    dynamic = {'metadata': {'name': 'dyn'}, 'spec': {'sharedCounters': [{'name': 'gpu-0'}]}}
    empty = {'metadata': {'name': 'none'}, 'spec': {'sharedCounters': None}}
    # The same slice seen through two API versions is named once.
    assert h.other_owners(node(), [static, dynamic, empty, dynamic]) == [
        "NVIDIA's DRA driver with dynamic MIG (ResourceSlices dyn publish partitionable devices)"]
    assert len(h.other_owners(node({h.MIG_MANAGER_LABEL: 'true'}), [dynamic])) == 2
