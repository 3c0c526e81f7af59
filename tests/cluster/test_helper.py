# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""helper.py's, device_plugin.py's and dra_plugin.py's pieces for the in-place switch check (molecule/cluster, check 6),
without a cluster: what the switch watch makes of the node and pod objects it sees, the simulated host
it writes, and the device plugin's modes (index ids, destroyed ids kept).

  make cluster-units      (or: python -m pytest -q tests/cluster/test_helper.py)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import device_plugin  # noqa: E402  (after the path: it lives beside this file)
import dra_plugin  # noqa: E402
import helper  # noqa: E402


def pod(name='busy-a', uid='u-1', phase='Running', restarts=0, running=True, deleting=False, disruption=None):
    obj = {'metadata': {'name': name, 'uid': uid},
           'status': {'phase': phase, 'containerStatuses': [
               {'restartCount': restarts, 'state': {'running': {}} if running else {'terminated': {}}}]}}
    if deleting:
        obj['metadata']['deletionTimestamp'] = '2026-01-01T00:00:00Z'
    if disruption:
        obj['status']['conditions'] = [{'type': 'DisruptionTarget', 'status': 'True', 'reason': disruption}]
    return obj


def node(state=None, unschedulable=False, allocatable=None):
    labels = {'nvidia.com/gpu.deploy.device-plugin': 'true'}
    if state:
        labels['nvidia.com/mig.config.state'] = state
    return {'metadata': {'name': 'gpu-node', 'labels': labels},
            'spec': {'unschedulable': unschedulable},
            'status': {'allocatable': allocatable or {}}}


def lines(out):
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_node_view_keeps_the_nvidia_resources_it_can_hand_out():
    view = helper.node_switch_view(node('pending', True, {'cpu': '2', 'nvidia.com/mig-1g.10gb': '4',
                                                          'nvidia.com/mig-1g.20gb': '0', 'nvidia.com/gpu': '1'}))
    assert view['allocatable'] == {'nvidia.com/mig-1g.10gb': 4, 'nvidia.com/gpu': 1}
    assert view['state'] == 'pending' and view['unschedulable'] is True


def test_pod_view_reads_an_eviction():
    view = helper.pod_view(pod(deleting=True, disruption='EvictionByEvictionAPI', restarts=2))
    assert view == {'name': 'busy-a', 'uid': 'u-1', 'phase': 'Running', 'restarts': 2, 'running': True,
                    'deleting': True, 'disruption': 'EvictionByEvictionAPI', 'node': None}
    # A pod not yet started has no containerStatuses; a bound one names its node.
    assert helper.pod_view({'metadata': {'name': 'p', 'uid': 'u'}, 'status': {'phase': 'Pending'}})['running'] is False
    assert helper.pod_view({'metadata': {'name': 'p', 'uid': 'u'}, 'spec': {'nodeName': 'n1'}})['node'] == 'n1'


def test_summary_of_a_pod_left_alone_and_one_evicted():
    out = io.StringIO()
    recorder = helper.SwitchRecorder(out)
    for event, obj in [('LISTED', pod()), ('LISTED', pod('guarded-d', 'u-4')), ('MODIFIED', pod()),
                       ('MODIFIED', pod('guarded-d', 'u-4', deleting=True, disruption='EvictionByEvictionAPI')),
                       ('MODIFIED', pod('guarded-d', 'u-4', phase='Failed', running=False, deleting=True,
                                        disruption='EvictionByEvictionAPI')),
                       ('DELETED', pod('guarded-d', 'u-4', phase='Failed', running=False, deleting=True,
                                       disruption='EvictionByEvictionAPI'))]:
        recorder.record('pod', event, helper.pod_view(obj))
    for event, obj in [('LISTED', node()), ('MODIFIED', node('pending')), ('MODIFIED', node('pending', True)),
                       ('MODIFIED', node('pending', True, {'nvidia.com/mig-3g.40gb': '1'})),
                       ('MODIFIED', node('success', False, {'nvidia.com/mig-3g.40gb': '1'}))]:
        recorder.record('node', event, helper.node_switch_view(obj))
    recorder.summary()
    written = lines(out)
    # An unchanged view is not written twice; a deletion always is.
    assert [(line['kind'], line['event']) for line in written[:5]] == [
        ('pod', 'LISTED'), ('pod', 'LISTED'), ('pod', 'MODIFIED'), ('pod', 'MODIFIED'), ('pod', 'DELETED')]
    summary = written[-1]
    assert summary['kind'] == 'summary' and summary['errors'] == []
    assert summary['pods']['busy-a'] == {'uids': ['u-1'], 'phases': ['Running'], 'restarts': [0], 'deleted': False,
                                         'gone': False, 'evicted': False, 'running_throughout': True}
    assert summary['pods']['guarded-d'] == {'uids': ['u-4'], 'phases': ['Running', 'Failed'], 'restarts': [0],
                                            'deleted': True, 'gone': True, 'evicted': True,
                                            'running_throughout': False}
    assert summary['node']['states'] == [None, 'pending', 'success']
    assert summary['node']['unschedulable'] == [False, True, False]
    assert summary['node']['allocatable'] == [{}, {'nvidia.com/mig-3g.40gb': 1}]


def test_a_restarted_container_is_seen():
    out = io.StringIO()
    recorder = helper.SwitchRecorder(out)
    recorder.record('pod', 'LISTED', helper.pod_view(pod()))
    recorder.record('pod', 'MODIFIED', helper.pod_view(pod(running=False)))
    recorder.record('pod', 'MODIFIED', helper.pod_view(pod(restarts=1)))
    recorder.summary()
    summary = lines(out)[-1]['pods']['busy-a']
    assert summary['restarts'] == [0, 1] and summary['running_throughout'] is False
    # Each line carries the wall clock, to line the watch up with other logs (eda_timeline.py).
    assert all(isinstance(line['at'], float) for line in lines(out)[:-1])


def test_sim_host_and_sim_pids(tmp_path):
    state_file = str(tmp_path / 'host' / 'gpus.json')
    helper.sim_host(state_file, ['1g.10gb@0', '1g.10gb@4'])
    with open(state_file) as handle:
        state = json.load(handle)
    gpu = state['gpus'][0]
    assert gpu['model'] == 'A100-SXM4-80GB' and gpu['mig']['current'] == 'enabled' and gpu['minor_number'] == 2
    assert [(gi['profile'], gi['start']) for gi in gpu['gpu_instances']] == [('1g.10gb', 0), ('1g.10gb', 4)]
    assert [gi['id'] for gi in gpu['gpu_instances']] == [7, 11]
    helper.sim_pids(state_file, '4', ['4242'])
    with open(state_file) as handle:
        gpu = json.load(handle)['gpus'][0]
    assert [gi['compute_instances'][0]['pids'] for gi in gpu['gpu_instances']] == [[], [4242]]
    with pytest.raises(SystemExit, match='no GPU instance with one compute instance at start 2'):
        helper.sim_pids(state_file, '2', ['1'])
    with pytest.raises(SystemExit, match='is not PROFILE@START'):
        helper.sim_host(state_file, ['1g.10gb'])
    # The instance at a start keeps its id, so its MIG UUID, when the host is laid out anew with more.
    helper.sim_host(state_file, ['1g.10gb@%d' % start for start in range(7)])
    with open(state_file) as handle:
        gpu = json.load(handle)['gpus'][0]
    assert [gi['id'] for gi in gpu['gpu_instances']] == [7, 8, 9, 10, 11, 12, 13]
    assert helper.placement_gi_id('1g.20gb', 6) == 6 and helper.placement_gi_id('3g.40gb', 4) == 2
    assert helper.placement_gi_id('7g.80gb', 0) == 0
    with pytest.raises(SystemExit, match="no GPU instance profile '2g.15gb'"):
        helper.placement_gi_id('2g.15gb', 0)


# ---- device_plugin.py's modes (the allocatable and index-id cluster cases rest on them) -----------

def test_device_plugin_enumerates_both_id_schemes_of_the_simulated_host(tmp_path):
    state_file = str(tmp_path / 'host' / 'gpus.json')
    helper.sim_host(state_file, ['1g.10gb@0', '1g.20gb@4', '1g.10gb@6'])
    devices = device_plugin.enumerate_devices(state_file)
    assert sorted(devices) == ['nvidia.com/mig-1g.10gb', 'nvidia.com/mig-1g.20gb']
    index_ids = sorted(d['index'] for found in devices.values() for d in found)
    # One position per MIG device of GPU 0, in NVML's order: 0:0, 0:1, 0:2.
    assert index_ids == ['0:0', '0:1', '0:2']
    assert all(d['uuid'].startswith('MIG-') for found in devices.values() for d in found)
    assert device_plugin.enumerate_resources(state_file, 'index')['nvidia.com/mig-1g.20gb'] == [
        devices['nvidia.com/mig-1g.20gb'][0]['index']]


def test_device_plugin_advertises_by_the_mode():
    devices = {'nvidia.com/mig-1g.10gb': [{'uuid': 'MIG-a', 'index': '0:0'}, {'uuid': 'MIG-c', 'index': '0:1'}]}
    uuid_mode = dict(device_plugin.DEFAULT_MODE)
    index_mode = dict(uuid_mode, device_id_strategy='index')
    before = {'nvidia.com/mig-1g.10gb': ['MIG-a', 'MIG-b'], 'nvidia.com/mig-3g.40gb': ['MIG-d']}
    # The default: what the GPUs hold, nothing of before.
    assert device_plugin.advertised(devices, uuid_mode, before) == (
        {'nvidia.com/mig-1g.10gb': ['MIG-a', 'MIG-c']}, {'MIG-a': 'MIG-a', 'MIG-c': 'MIG-c'})
    resources, names = device_plugin.advertised(devices, index_mode)
    assert resources == {'nvidia.com/mig-1g.10gb': ['0:0', '0:1']} and names == {'0:0': 'MIG-a', '0:1': 'MIG-c'}
    # keep_destroyed: the gone ids stay advertised after the current ones, also of a resource now gone.
    resources, dummy = device_plugin.advertised(devices, dict(uuid_mode, keep_destroyed=True), before)
    assert resources == {'nvidia.com/mig-1g.10gb': ['MIG-a', 'MIG-c', 'MIG-b'], 'nvidia.com/mig-3g.40gb': ['MIG-d']}


def test_device_plugin_time_slicing_renames_and_replicates():
    """The device_plugin role's rename: each MIG device of the profile once per replica, under the new name; the
    container sees the bare MIG UUID once."""
    devices = {'nvidia.com/mig-1g.10gb': [{'uuid': 'MIG-a', 'index': '0:0'}], 'nvidia.com/mig-3g.40gb': [{'uuid': 'MIG-d', 'index': '0:1'}]}
    mode = dict(device_plugin.DEFAULT_MODE, time_slicing=[{'name': 'nvidia.com/mig-1g.10gb', 'replicas': 2, 'rename': 'nvidia.com/small-gpu'}])
    resources, names = device_plugin.advertised(devices, mode)
    assert resources == {'nvidia.com/small-gpu': ['MIG-a::0', 'MIG-a::1'], 'nvidia.com/mig-3g.40gb': ['MIG-d']}
    assert names['MIG-a::1'] == 'MIG-a' and names['MIG-d'] == 'MIG-d'
    without_rename = dict(mode, time_slicing=[{'name': 'nvidia.com/mig-1g.10gb', 'replicas': 3}])
    assert device_plugin.advertised(devices, without_rename)[0]['nvidia.com/mig-1g.10gb'] == ['MIG-a::0', 'MIG-a::1', 'MIG-a::2']
    response = device_plugin.wire.decode_message(device_plugin.allocate_response([['MIG-a::1', 'MIG-a::0', 'MIG-d']]))
    container = device_plugin.wire.field_messages(response, 1)[0]
    env = device_plugin.wire.field_messages(container, 1)[0]
    assert device_plugin.wire.field_strings(env, 2) == ['MIG-a,MIG-d']


def test_device_plugin_mode_file(tmp_path):
    path = tmp_path / 'mode.json'
    assert device_plugin.read_mode(str(path)) == device_plugin.DEFAULT_MODE
    path.write_text(json.dumps({'device_id_strategy': 'index'}))
    assert device_plugin.read_mode(str(path)) == {'device_id_strategy': 'index', 'keep_destroyed': False, 'time_slicing': []}
    for bad in ({'name': 'nvidia.com/mig-1g.10gb', 'replicas': 1}, {'name': 'nvidia.com/mig-1g.10gb', 'replicas': True},
                {'replicas': 2}, {'name': 'nvidia.com/mig-1g.10gb', 'replicas': 2, 'renameto': 'x'}):
        path.write_text(json.dumps({'time_slicing': [bad]}))
        with pytest.raises(ValueError, match='time_slicing entry'):
            device_plugin.read_mode(str(path))
    path.write_text(json.dumps({'device_id_strategy': 'position'}))
    with pytest.raises(ValueError, match='must be uuid or index'):
        device_plugin.read_mode(str(path))
    path.write_text(json.dumps({'keep_destroyd': True}))
    with pytest.raises(ValueError, match='unknown setting'):
        device_plugin.read_mode(str(path))


def test_device_plugin_runs_as_the_node_starts_it_without_the_collection_on_the_path(tmp_path):
    """node.sh runs device_plugin.py as a script: the module_utils it loads by path must bring all they import."""
    state_file = str(tmp_path / 'host.json')
    helper.sim_host(state_file, ['3g.40gb@4'])
    env = dict((name, value) for name, value in os.environ.items() if name != 'PYTHONPATH')
    env[device_plugin.SIMULATOR_ENV] = state_file
    done = subprocess.run([sys.executable, os.path.join(HERE, 'device_plugin.py'), '--list'], cwd=str(tmp_path), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert list(json.loads(done.stdout)) == ['nvidia.com/mig-3g.40gb']


# ---- dra_plugin.py (check 10: a DRA claim on the real node) -----------------------------------------------

def test_dra_plugin_names_the_mig_devices_as_nvidia_s_driver_and_the_collection_maps_them(tmp_path):
    state_file = str(tmp_path / 'host' / 'gpus.json')
    helper.sim_host(state_file, ['1g.10gb@0', '2g.20gb@2', '3g.40gb@4'])
    devices = dra_plugin.enumerate_mig_devices(state_file)
    # The A100's GI profile ids: 1g.10gb 19, 2g.20gb 14, 3g.40gb 9; the minor number 2 (not the NVML index 0).
    assert [d['name'] for d in devices] == ['gpu-2-mig-1g10gb-19-0', 'gpu-2-mig-2g20gb-14-2', 'gpu-2-mig-3g40gb-9-4']
    assert all(d['uuid'].startswith('MIG-') and d['parent_uuid'].startswith('GPU-') for d in devices)
    # The collection's own reading of a DRA device name (make cluster-units puts the collection on the path).
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _pod_allocations as allocations
    assert [allocations._dra_key(d['name']) for d in devices] == [('mig', 2, 19, 0), ('mig', 2, 14, 2), ('mig', 2, 9, 4)]
    assert dra_plugin.device_name(0, '1g.10gb+me', 20, 6) == 'gpu-0-mig-1g10gb-me-20-6'
    published = dra_plugin.resource_slice('gpu-node', devices, 3)
    assert published['metadata']['name'] == 'gpu-node-gpu.nvidia.com'
    assert published['spec']['pool'] == {'name': 'gpu-node', 'generation': 3, 'resourceSliceCount': 1}
    assert published['spec']['driver'] == 'gpu.nvidia.com' and 'sharedCounters' not in published['spec']
    big = published['spec']['devices'][2]
    assert big['attributes']['type'] == {'string': 'mig'} and big['attributes']['profile'] == {'string': '3g.40gb'}
    assert big['capacity']['memory']['value'].endswith('Mi')


def dra_claim(uid='uid-1', results=None):
    return {'metadata': {'name': 'dra-mig', 'namespace': 'ml', 'uid': uid},
            'status': {'allocation': {'devices': {'results': results if results is not None else [
                {'request': 'mig', 'driver': 'gpu.nvidia.com', 'pool': 'gpu-node', 'device': 'gpu-2-mig-3g40gb-9-4'}]}}}}


def test_dra_plugin_prepares_the_devices_the_scheduler_allocated_and_nothing_else():
    ref = {'namespace': 'ml', 'name': 'dra-mig', 'uid': 'uid-1'}
    published = {'gpu-2-mig-3g40gb-9-4'}
    assert dra_plugin.prepare_answer(ref, dra_claim(), 'gpu-node', published) == {'devices': [
        {'requests': ['mig'], 'pool': 'gpu-node', 'device': 'gpu-2-mig-3g40gb-9-4',
         'cdi_devices': ['k8s.gpu.nvidia.com/device=gpu-2-mig-3g40gb-9-4']}]}
    assert dra_plugin.prepare_answer(ref, None, 'gpu-node', published) == {'error': 'ResourceClaim ml/dra-mig not found'}
    assert 'has UID uid-2, not uid-1' in dra_plugin.prepare_answer(ref, dra_claim('uid-2'), 'gpu-node', published)['error']
    other = dra_claim(results=[{'request': 'nic', 'driver': 'net.example.com', 'pool': 'gpu-node', 'device': 'eth0'}])
    assert 'no device of driver gpu.nvidia.com' in dra_plugin.prepare_answer(ref, other, 'gpu-node', published)['error']
    assert 'which node gpu-node does not publish' in dra_plugin.prepare_answer(ref, dra_claim(), 'gpu-node', set())['error']
    assert 'of pool gpu-node, which node other-node' in dra_plugin.prepare_answer(ref, dra_claim(), 'other-node', published)['error']


def test_dra_plugin_speaks_the_kubelet_s_messages():
    wire = dra_plugin.wire
    info = wire.decode_message(dra_plugin.plugin_info('/k/plugins/gpu.nvidia.com/dra.sock'))
    assert (wire.field_string(info, 1), wire.field_string(info, 2), wire.field_string(info, 3), wire.field_strings(info, 4)) == (
        'DRAPlugin', 'gpu.nvidia.com', '/k/plugins/gpu.nvidia.com/dra.sock', ['v1.DRAPlugin'])
    assert dra_plugin.parse_registration_status(wire.encode_message([(1, True)])) == {'registered': True, 'error': ''}
    assert dra_plugin.parse_registration_status(wire.encode_message([(2, 'no')])) == {'registered': False, 'error': 'no'}
    request = wire.encode_message([(1, [wire.encode_message([(1, 'ml'), (2, 'uid-1'), (3, 'dra-mig')]),
                                        wire.encode_message([(1, 'ml'), (2, 'uid-2'), (3, 'other')])])])
    assert dra_plugin.parse_claims(request) == [{'namespace': 'ml', 'uid': 'uid-1', 'name': 'dra-mig'},
                                                {'namespace': 'ml', 'uid': 'uid-2', 'name': 'other'}]
    answer = dra_plugin.encode_prepare_response({
        'uid-1': {'devices': [{'requests': ['mig'], 'pool': 'p', 'device': 'gpu-2-mig-3g40gb-9-4', 'cdi_devices': ['k=v']}]},
        'uid-2': {'error': 'not found'}})
    entries = dict((wire.field_string(e, 1), wire.field_messages(e, 2)[0]) for e in wire.field_messages(wire.decode_message(answer), 1))
    device = wire.field_messages(entries['uid-1'], 1)[0]
    assert (wire.field_strings(device, 1), wire.field_string(device, 2), wire.field_string(device, 3), wire.field_strings(device, 4)) == (
        ['mig'], 'p', 'gpu-2-mig-3g40gb-9-4', ['k=v'])
    assert wire.field_string(entries['uid-1'], 2) == '' and wire.field_string(entries['uid-2'], 2) == 'not found'
    assert wire.field_messages(entries['uid-2'], 1) == []
    done = wire.decode_message(dra_plugin.encode_unprepare_response({'uid-1': '', 'uid-2': 'busy'}))
    assert [(wire.field_string(e, 1), wire.field_string(wire.field_messages(e, 2)[0], 1)) for e in wire.field_messages(done, 1)] == [
        ('uid-1', ''), ('uid-2', 'busy')]


class FakeApi(object):
    def __init__(self, claim):
        self.claim = claim
        self.calls = []

    def call(self, method, path, body=None):
        self.calls.append((method, path))
        return self.claim


def test_dra_plugin_serves_registration_and_dra_over_grpc_as_the_kubelet_calls_them(tmp_path):
    """The full method names the kubelet calls: /pluginregistration.Registration/... and
    /k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/... (the packages of their api.proto files)."""
    import grpc

    wire = dra_plugin.wire
    api = FakeApi(dra_claim())
    plugin = dra_plugin.Plugin(api, 'gpu-node', str(tmp_path), str(tmp_path), str(tmp_path / 'status.json'))
    plugin.devices = [{'name': 'gpu-2-mig-3g40gb-9-4'}]
    plugin._serve(plugin.dra_socket, dra_plugin.DRA_SERVICE,
                  {'NodePrepareResources': plugin._prepare, 'NodeUnprepareResources': plugin._unprepare})
    plugin._serve(plugin.registration_socket, dra_plugin.REGISTRATION_SERVICE,
                  {'GetInfo': plugin._get_info, 'NotifyRegistrationStatus': plugin._notify})
    try:
        channel = grpc.insecure_channel('unix:' + plugin.registration_socket)
        info = wire.decode_message(channel.unary_unary('/pluginregistration.Registration/GetInfo')(b'', timeout=5))
        assert wire.field_string(info, 3) == plugin.dra_socket
        channel.unary_unary('/pluginregistration.Registration/NotifyRegistrationStatus')(wire.encode_message([(1, True)]), timeout=5)
        channel.close()
        channel = grpc.insecure_channel('unix:' + wire.field_string(info, 3))
        claims = wire.encode_message([(1, [wire.encode_message([(1, 'ml'), (2, 'uid-1'), (3, 'dra-mig')])])])
        answer = channel.unary_unary('/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources')(claims, timeout=5)
        assert api.calls == [('GET', '/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/dra-mig')]
        assert 'gpu-2-mig-3g40gb-9-4' in answer.decode('utf-8', 'replace')
        with open(str(tmp_path / 'status.json')) as handle:
            status = json.load(handle)
        assert status['prepared'] == {'uid-1': {'claim': 'ml/dra-mig', 'devices': ['gpu-2-mig-3g40gb-9-4']}}
        assert status['registration'] == {'registered': True, 'error': ''}
        channel.unary_unary('/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources')(claims, timeout=5)
        channel.close()
        with open(str(tmp_path / 'status.json')) as handle:
            status = json.load(handle)
        assert status['prepared'] == {} and status['prepare_calls'] == 1 and status['unprepare_calls'] == 1
    finally:
        for server, dummy in plugin._servers:
            server.stop(None).wait(5)


def test_dra_plugin_runs_as_the_node_starts_it_without_the_collection_on_the_path(tmp_path):
    state_file = str(tmp_path / 'host.json')
    helper.sim_host(state_file, ['3g.40gb@4'])
    env = dict((name, value) for name, value in os.environ.items() if name != 'PYTHONPATH')
    env[device_plugin.SIMULATOR_ENV] = state_file
    done = subprocess.run([sys.executable, os.path.join(HERE, 'dra_plugin.py'), '--list', '--node-name', 'gpu-node'], cwd=str(tmp_path),
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert [d['name'] for d in json.loads(done.stdout)['spec']['devices']] == ['gpu-2-mig-3g40gb-9-4']
