# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the modules read from the kubelet, through a real gRPC pod-resources server: under the host lock, the
advertised device ids (GetAllocatableResources) on request, and the ids the device plugin should advertise."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fcntl
import shutil
import tempfile

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.host import _nvml_backend
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_resources_wire import encode_allocatable_response, encode_list_response
from ansible_collections.gpufleet.mig.plugins.modules import (
    nvidia_mig_facts,
    nvidia_mig_instance,
    nvidia_mig_layout,
    nvidia_mig_mode,
    nvidia_mig_repack,
)
from ansible_collections.gpufleet.mig.tests.unit.plugins.modules.conftest import mig_uuids
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.test_pod_resources import FakeKubelet

ENABLED = {'current': 'enabled', 'pending': 'enabled'}
DAY = {'daytime': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 7}}]}


@pytest.fixture
def kubelet():
    servers = []
    # Short: a unix socket path must fit in 108 bytes, which pytest's tmp_path may not.
    directory = tempfile.mkdtemp(prefix='podres-')

    def start(**kwargs):
        server = FakeKubelet(tempfile.mkdtemp(dir=directory), **kwargs)
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.stop()
    shutil.rmtree(directory)


def lock_held():
    """Whether someone holds the host lock now: a second open file description cannot take it."""
    with open(_nvml_backend.host_lock_path(), 'a') as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (IOError, OSError):
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def three_small(simulated_host):
    return simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '1g.10gb', 'start': s, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]} for s in (0, 1, 2)]},
        {'model': 'L40S'}])


@pytest.mark.parametrize('main, args', [
    (nvidia_mig_layout.main, {'name': 'daytime', 'config': DAY, 'systemd': False, 'boot_persistence': False}),
    (nvidia_mig_facts.main, {'kubelet_allocatable': True}),
    (nvidia_mig_instance.main, {'gpus': [0], 'instances': {'1g.10gb': 7}}),
    (nvidia_mig_mode.main, {'gpus': [0], 'state': 'enabled'}),
    (nvidia_mig_repack.main, {'gpus': [0]}),
], ids=['layout', 'facts', 'instance', 'mode', 'repack'])
def test_the_kubelet_is_read_under_the_host_lock(simulated_host, run_module, kubelet, tmp_path, main, args):
    three_small(simulated_host)
    seen = []
    server = kubelet(list_answer=encode_list_response([]), allocatable_answer=encode_allocatable_response({}),
                     on_call=lambda method: seen.append((method, lock_held())))
    assert not lock_held()
    arguments = dict(args, pod_resources='required', pod_resources_socket=server.path)
    if main is nvidia_mig_layout.main:
        arguments.update(config_dir=str(tmp_path / 'etc'), lib_dir=str(tmp_path / 'lib'), bin_dir=str(tmp_path / 'bin'),
                         systemd_dir=str(tmp_path / 'systemd'))
    result, failed = run_module(main, arguments)
    assert not failed, result
    assert seen and all(held for method, held in seen), seen
    assert ('GetAllocatableResources', True) in seen if args.get('kubelet_allocatable') else [m for m, dummy in seen] == ['List']


def test_facts_kubelet_allocatable_lists_the_gpu_resources_ids(simulated_host, run_module, kubelet):
    three_small(simulated_host)
    uuids = mig_uuids(run_module)
    server = kubelet(list_answer=encode_list_response([]), allocatable_answer=encode_allocatable_response({
        'nvidia.com/mig-1g.10gb': [uuids[2], uuids[0], uuids[1]], 'nvidia.com/gpu': ['GPU-x'],
        'nvidia.com/hostdev': ['0000:3b:00.2']}))
    result, failed = run_module(nvidia_mig_facts.main, {'pod_resources_socket': server.path, 'kubelet_allocatable': True})
    assert not failed, result
    assert result['ansible_facts']['nvidia_mig']['kubelet_allocatable'] == {
        'nvidia.com/mig-1g.10gb': sorted(uuids.values()), 'nvidia.com/gpu': ['GPU-x']}
    # Not asked: not read, not returned.
    server.calls[:] = []
    result, failed = run_module(nvidia_mig_facts.main, {'pod_resources_socket': server.path})
    assert not failed and 'kubelet_allocatable' not in result['ansible_facts']['nvidia_mig']
    assert [call[0] for call in server.calls] == ['List']


def test_facts_kubelet_allocatable_fails_clearly(simulated_host, run_module, kubelet, tmp_path):
    three_small(simulated_host)
    # A kubelet before 1.23: List only.
    server = kubelet(list_answer=encode_list_response([]))
    result, failed = run_module(nvidia_mig_facts.main, {'pod_resources_socket': server.path, 'kubelet_allocatable': True})
    assert failed and result['msg'].startswith('kubelet_allocatable: the device ids the kubelet advertises cannot be read')
    assert 'GetAllocatableResources' in result['msg']
    result, failed = run_module(nvidia_mig_facts.main, {'pod_resources': 'off', 'kubelet_allocatable': True,
                                                        'pod_resources_socket': str(tmp_path / 'none.sock')})
    assert failed and 'pod_resources=off never does' in result['msg']


def test_layout_returns_the_ids_the_device_plugin_should_advertise_after_the_change(simulated_host, run_module, tmp_path):
    three_small(simulated_host)
    args = {'name': 'daytime', 'config': DAY, 'systemd': False, 'boot_persistence': False, 'pod_resources': 'off',
            'config_dir': str(tmp_path / 'etc'), 'lib_dir': str(tmp_path / 'lib'), 'bin_dir': str(tmp_path / 'bin'),
            'systemd_dir': str(tmp_path / 'systemd')}
    planned, failed = run_module(nvidia_mig_layout.main, dict(args, apply=False))
    assert not failed, planned
    # Before the change: what the GPUs hold now (three 1g), the L40S whole.
    assert len(planned['expected_device_ids']['nvidia.com/mig-1g.10gb']['uuid']) == 3
    result, failed = run_module(nvidia_mig_layout.main, args)
    assert not failed and result['actions'], result
    from ansible_collections.gpufleet.mig.plugins.modules.nvidia_mig_facts import main as facts_main
    facts, failed = run_module(facts_main, {'pod_resources': 'off'})
    gpus = facts['ansible_facts']['nvidia_mig']['gpus']
    cis = [gi['compute_instances'][0] for gi in gpus[0]['gpu_instances']]
    assert result['expected_device_ids'] == {
        'nvidia.com/mig-1g.10gb': {'uuid': sorted(ci['uuid'] for ci in cis),
                                   'index': sorted('0:%d' % ci['mig_index'] for ci in cis)},
        'nvidia.com/gpu': {'uuid': [gpus[1]['uuid']], 'index': ['1']},
    }
    assert len(cis) == 7 and result['resources'] == {'nvidia.com/mig-1g.10gb': 7, 'nvidia.com/gpu': 1}


# ---- index device ids in the modules that change instances without evicting ------------------------------------

def index_ids(run_module, gpu=0):
    """{GPU instance start: '<gpu>:<mig device index>'}, as the device plugin (deviceIDStrategy index) names them."""
    facts, failed = run_module(nvidia_mig_facts.main, {'pod_resources': 'off'})
    assert not failed, facts
    return dict((gi['placement']['start'], '%d:%d' % (gpu, gi['compute_instances'][0]['mig_index']))
                for gi in facts['ansible_facts']['nvidia_mig']['gpus'][gpu]['gpu_instances'])


def holding(kubelet, device_id, resource='nvidia.com/mig-1g.10gb'):
    return kubelet(list_answer=encode_list_response([{'namespace': 'team', 'pod': 'p', 'containers': [
        {'name': 'c', 'devices': {resource: [device_id]}}]}])).path


def test_instance_refuses_to_change_a_gpu_whose_devices_pods_hold_by_index(simulated_host, run_module, kubelet):
    from ansible_collections.gpufleet.mig.tests.unit.conftest import mutating_calls
    host = three_small(simulated_host)
    socket = holding(kubelet, index_ids(run_module)[2] + '::1')
    result, failed = run_module(nvidia_mig_instance.main, {'gpus': [0], 'instances': {'1g.10gb': 7}, 'pod_resources_socket': socket})
    assert failed and 'team/p hold MIG devices by index id' in result['msg'] and 'changing its instances' in result['msg']
    assert mutating_calls(host) == []
    # Nothing to change: the pod's id stays valid, nothing to refuse.
    result, failed = run_module(nvidia_mig_instance.main, {'gpus': [0], 'instances': {'1g.10gb': 3}, 'pod_resources_socket': socket})
    assert not failed and not result['changed'], result
    # The same pod by UUID: the change goes ahead and keeps its instance.
    socket = holding(kubelet, mig_uuids(run_module)[2])
    result, failed = run_module(nvidia_mig_instance.main, {'gpus': [0], 'instances': {'1g.10gb': 7}, 'pod_resources_socket': socket})
    assert not failed and result['changed'], result


def test_repack_leaves_a_gpu_whose_devices_pods_hold_by_index(simulated_host, run_module, kubelet):
    from ansible_collections.gpufleet.mig.tests.unit.conftest import mutating_calls
    # 1g at 0 and 1 held, 1g at 4 idle: a repack would move the idle one (see test_repack_moves_only_idle_unallocated_instances).
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '1g.10gb', 'start': s, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]} for s in (0, 1, 4)]}])
    uuids = mig_uuids(run_module)
    server = kubelet(list_answer=encode_list_response([
        {'namespace': 'team', 'pod': 'p0', 'containers': [{'name': 'c', 'devices': {'nvidia.com/mig-1g.10gb': [uuids[0]]}}]},
        {'namespace': 'team', 'pod': 'p1', 'containers': [{'name': 'c', 'devices': {'nvidia.com/mig-1g.10gb': ['0:1']}}]}]))
    result, failed = run_module(nvidia_mig_repack.main, {'pod_resources_socket': server.path})
    assert not failed and not result['changed'] and mutating_calls(host) == []
    assert result['gpus'][0]['status'] == 'no_idle_move' and 'team/p1 hold MIG devices by index id' in result['gpus'][0]['reason']
    # By UUID, the same pods let the idle instance move.
    server = kubelet(list_answer=encode_list_response([{'namespace': 'team', 'pod': 'p%d' % s, 'containers': [
        {'name': 'c', 'devices': {'nvidia.com/mig-1g.10gb': [uuids[s]]}}]} for s in (0, 1)]))
    result, failed = run_module(nvidia_mig_repack.main, {'pod_resources_socket': server.path})
    assert not failed and result['changed'] and result['gpus'][0]['status'] == 'repacked'


# ---- why each pod goes ---------------------------------------------------------------------------------------------

LAYOUT_PATHS = ('config_dir', 'lib_dir', 'bin_dir', 'systemd_dir')


def decide(run_module, tmp_path, config, socket):
    args = dict(('%s' % key, str(tmp_path / key)) for key in LAYOUT_PATHS)
    args.update(name=sorted(config)[0], config=config, systemd=False, boot_persistence=False, apply=False, evict=True,
                pod_resources='required', pod_resources_socket=socket)
    result, failed = run_module(nvidia_mig_layout.main, args)
    assert not failed, result
    return result


def test_eviction_reasons_name_the_instance_the_mode_change_or_the_index_id(simulated_host, run_module, kubelet, tmp_path):
    # GPU 0: 1g at 0, 1, 2 (A100); GPU 1: a second A100 with MIG off, held whole by a pod.
    simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '1g.10gb', 'start': s, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]} for s in (0, 1, 2)]},
        {'model': 'A100-SXM4-80GB'}])
    facts, failed = run_module(nvidia_mig_facts.main, {'pod_resources': 'off'})
    gpus = facts['ansible_facts']['nvidia_mig']['gpus']
    uuids = dict((gi['placement']['start'], gi['compute_instances'][0]['uuid']) for gi in gpus[0]['gpu_instances'])
    ids = index_ids(run_module)
    server = kubelet(list_answer=encode_list_response([
        {'namespace': 'ml', 'pod': 'by-uuid', 'containers': [{'name': 'c', 'devices': {'nvidia.com/mig-1g.10gb': [uuids[0]]}}]},
        {'namespace': 'ml', 'pod': 'by-index', 'containers': [{'name': 'c', 'devices': {'nvidia.com/mig-1g.10gb': [ids[2]]}}]},
        {'namespace': 'ml', 'pod': 'whole', 'containers': [{'name': 'c', 'devices': {'nvidia.com/gpu': [gpus[1]['uuid']]}}]}]))
    result = decide(run_module, tmp_path, {'big': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'7g.80gb': 1}}]}, server.path)
    reasons = result['eviction_reasons']
    assert result['pods_to_evict'] == sorted(reasons) == ['ml/by-index', 'ml/by-uuid', 'ml/whole']
    assert reasons['ml/whole'] == 'holds GPU 1, whose MIG mode changes'
    assert reasons['ml/by-uuid'].startswith("holds GPU 0's GPU instance") and reasons['ml/by-uuid'].endswith('(1g.10gb), which the layout destroys')
    # The index pod's own instance is destroyed too: that reason comes first, the index id adds nothing new.
    assert reasons['ml/by-index'].endswith('which the layout destroys')
    assert result['gpus'][0]['index_id_pods'] == ['ml/by-index'] and result['gpus'][1]['index_id_pods'] == []


def test_a_dra_claimed_instance_is_kept_by_the_layout_module(simulated_host, run_module, kubelet, tmp_path, monkeypatch):
    # The simulated GPUs have no minor number (nvmlDeviceGetMinorNumber: not supported): pinned here to 3.
    monkeypatch.setattr(_nvml_backend.NvmlBackend, '_minor_number', lambda self, index, handle: 3 + index)
    three_small(simulated_host)
    facts, failed = run_module(nvidia_mig_facts.main, {'pod_resources': 'off'})
    gi = [g for g in facts['ansible_facts']['nvidia_mig']['gpus'][0]['gpu_instances'] if g['placement']['start'] == 2][0]
    claimed = 'gpu-3-mig-1g10gb-%d-2' % gi['profile_id']
    server = kubelet(list_answer=encode_list_response([{'namespace': 'ml', 'pod': 'dra', 'containers': [
        {'name': 'c', 'claims': {'ml/mig': [{'driver': 'gpu.nvidia.com', 'pool': 'node-a', 'device': claimed}]}}]}]))
    result = decide(run_module, tmp_path, {'big': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'7g.80gb': 1}}]}, server.path)
    assert result['pods_to_evict'] == ['ml/dra'] and 'which the layout destroys' in result['eviction_reasons']['ml/dra']
    assert result['pod_resources']['pods'] == ['ml/dra']
    # Without evict the held instance is never destroyed, with no process on it.
    args = dict((key, str(tmp_path / key)) for key in LAYOUT_PATHS)
    args.update(name='big', config={'big': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'7g.80gb': 1}}]},
                systemd=False, boot_persistence=False, pod_resources_socket=server.path)
    result, failed = run_module(nvidia_mig_layout.main, args)
    assert failed and 'ml/dra' in result['msg']
    # A claimed device that names nothing here: nothing is planned.
    server = kubelet(list_answer=encode_list_response([{'namespace': 'ml', 'pod': 'dra', 'containers': [
        {'name': 'c', 'claims': {'ml/mig': [{'driver': 'gpu.nvidia.com', 'pool': 'node-a', 'device': 'gpu-9-mig-1g10gb-19-2'}]}}]}]))
    args['pod_resources_socket'] = server.path
    result, failed = run_module(nvidia_mig_layout.main, args)
    assert failed and 'gpu-9-mig-1g10gb-19-2 (DRA claim ml/mig of pod ml/dra' in result['msg']


def test_minor_number_where_nvml_cannot_tell_is_none(simulated_host, run_module):
    # A state without minor_number: nvmlDeviceGetMinorNumber answers NVML_ERROR_NOT_SUPPORTED: unknown, not an error.
    three_small(simulated_host)
    facts, failed = run_module(nvidia_mig_facts.main, {'pod_resources': 'off'})
    assert not failed and [g['minor_number'] for g in facts['ansible_facts']['nvidia_mig']['gpus']] == [None, None]
