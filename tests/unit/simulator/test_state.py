# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The state file as the host: validation, defaults and ids, faults, the call log, separate processes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys
import textwrap

import pynvml
import pytest

import gpufleet_nvml_sim as sim_api

from ansible_collections.gpufleet.mig.tests.unit.simulator.helpers import (
    ENABLED,
    create_ci,
    create_gi,
    error_of,
    gi_instances,
    gi_placements,
    mutations,
    run_python,
)

E = pynvml


# ---- faults --------------------------------------------------------------------------------------------------------

def test_a_fault_fires_once_on_the_nth_call_and_its_count_persists(sim):
    fault = {'call': 'nvmlDeviceCreateGpuInstanceWithPlacement', 'gpu': 0, 'nth': 3, 'error': 'NVML_ERROR_INSUFFICIENT_RESOURCES'}
    path = sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED}, {'model': 'A100-SXM4-80GB', 'mig': ENABLED}], faults=[fault])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    create_gi(handle, 19, 0)
    create_gi(pynvml.nvmlDeviceGetHandleByIndex(1), 19, 0)      # another GPU: not counted
    before = sim_api.load_state(path)['gpus']
    # the next count comes from a separate process: the count lives in the state file
    assert run_python(path, '''
        placement = pynvml.c_nvmlGpuInstancePlacement_t(); placement.start = 1; placement.size = 1
        pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 19, ctypes.byref(placement))
        print(json.dumps(None))
    ''') is None
    sim_api.install(pynvml, path)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    middle = sim_api.load_state(path)['gpus']
    assert error_of(create_gi, handle, 19, 2) == E.NVML_ERROR_INSUFFICIENT_RESOURCES      # third call on GPU 0
    assert sim_api.load_state(path)['gpus'] == middle != before                          # the fault mutated nothing
    create_gi(handle, 19, 2)                                                             # fired once only
    stored = sim_api.load_state(path)['faults'][0]
    assert (stored['seen'], stored['fired']) == (3, True)
    assert [e['result'] for e in sim_api.read_call_log(path)] == [
        'NVML_SUCCESS', 'NVML_SUCCESS', 'NVML_SUCCESS', 'NVML_ERROR_INSUFFICIENT_RESOURCES', 'NVML_SUCCESS']


def test_faults_on_reads_init_and_resets(sim):
    faults = [{'call': 'nvmlDeviceGetMigMode', 'nth': 2, 'error': 'GPU_IS_LOST'},          # any GPU, short error name
              {'call': 'nvmlDeviceGetComputeRunningProcesses_v3', 'gpu': 1, 'error': 'NVML_ERROR_NO_PERMISSION'},
              {'call': 'simulate_gpu_reset', 'gpu': 0, 'error': 'NVML_ERROR_UNKNOWN'}]
    path = sim([{'model': 'A30'}, {'model': 'GH200-96GB'}], faults=faults)
    first, second = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    pynvml.nvmlDeviceGetMigMode(first)
    assert error_of(pynvml.nvmlDeviceGetMigMode, second) == E.NVML_ERROR_GPU_IS_LOST
    assert pynvml.nvmlDeviceGetMigMode(second) == [0, 0]
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(first) == []
    assert error_of(pynvml.nvmlDeviceGetComputeRunningProcesses, second) == E.NVML_ERROR_NO_PERMISSION
    with pytest.raises(sim_api.SimulatorError) as failure:
        sim_api.simulate_gpu_reset(path, 0)
    assert 'NVML_ERROR_UNKNOWN' in str(failure.value)
    sim_api.simulate_gpu_reset(path, 0)
    assert mutations(path) == ['simulate_gpu_reset', 'simulate_gpu_reset']     # reads are not logged
    state = sim_api.load_state(path)
    state['faults'] = [{'call': 'nvmlInitWithFlags', 'error': 'NVML_ERROR_DRIVER_NOT_LOADED'}]
    sim_api.write_state(path, state)
    sim_api.install(pynvml, path)
    assert error_of(pynvml.nvmlInit) == E.NVML_ERROR_DRIVER_NOT_LOADED
    pynvml.nvmlInit()


def test_a_fault_on_set_mig_mode_changes_nothing(sim):
    path = sim([{'model': 'H100-SXM5-80GB'}], faults=[{'call': 'nvmlDeviceSetMigMode', 'error': 'NO_PERMISSION'}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert error_of(pynvml.nvmlDeviceSetMigMode, handle, 1) == E.NVML_ERROR_NO_PERMISSION
    assert sim_api.load_state(path)['gpus'][0]['mig'] == {'current': 'disabled', 'pending': 'disabled'}
    assert pynvml.nvmlDeviceSetMigMode(handle, 1) == pynvml.NVML_SUCCESS


# ---- the call log and the state file --------------------------------------------------------------------------------

def test_the_call_log_records_mutations_only(sim):
    path = sim([{'model': 'H100-SXM5-80GB', 'mig': ENABLED, 'gpu_instances': [
        {'profile': '3g.40gb', 'start': 0, 'compute_instances': [{'profile': '3g.40gb', 'start': 0}]}]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, 1)
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):       # a full read, as the backend does
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
        except pynvml.NVMLError:
            continue
        gi_placements(handle, info.id)
        gi_instances(handle, info.id)
        pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, info.id)
    pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 0)
    pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0))
    assert sim_api.read_call_log(path) == []
    new_gi = create_gi(handle, 9, 4)
    new_id = pynvml.nvmlGpuInstanceGetInfo(new_gi).id
    new_ci = create_ci(new_gi, 0, 1)
    pynvml.nvmlComputeInstanceDestroy(new_ci)
    pynvml.nvmlGpuInstanceDestroy(new_gi)
    pynvml.nvmlDeviceSetMigMode(handle, 1)
    log = sim_api.read_call_log(path)
    assert [(e['call'], e['gpu'], e['args'], e['result'], e.get('created')) for e in log] == [
        ('nvmlDeviceCreateGpuInstanceWithPlacement', 0, {'profile_id': 9, 'start': 4, 'size': 4}, 'NVML_SUCCESS',
         {'gpu_instance_id': new_id, 'start': 4}),
        ('nvmlGpuInstanceCreateComputeInstanceWithPlacement', 0, {'gpu_instance_id': new_id, 'profile_id': 0, 'start': 1}, 'NVML_SUCCESS',
         {'compute_instance_id': 0, 'start': 1}),
        ('nvmlComputeInstanceDestroy', 0, {'gpu_instance_id': new_id, 'compute_instance_id': 0}, 'NVML_SUCCESS', None),
        ('nvmlGpuInstanceDestroy', 0, {'gpu_instance_id': new_id}, 'NVML_SUCCESS', None),
        ('nvmlDeviceSetMigMode', 0, {'mode': 1}, 'NVML_SUCCESS', None)]
    assert log[-1]['activation_status'] == 'NVML_SUCCESS' and log[-1]['pid'] == os.getpid()
    assert all(e['call'] in sim_api.MUTATING_CALLS for e in log)


def test_a_fresh_install_and_another_process_read_back_the_same_host(sim):
    path = sim([{'model': 'A100-SXM4-40GB', 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = create_gi(handle, 14, 2)
    create_ci(gi, 0, 1)
    create_gi(handle, 19, 0)
    stored = json.load(open(path))['gpus'][0]
    two_g, one_g = [g['id'] for g in stored['gpu_instances']]
    assert [(g['profile'], g['start']) for g in stored['gpu_instances']] == [('2g.10gb', 2), ('1g.5gb', 0)]
    assert two_g in range(3, 7) and one_g in range(7, 15)
    assert stored['gpu_instances'][0]['compute_instances'] == [{'id': 0, 'profile': '1c.2g.10gb', 'profile_id': 0, 'start': 1, 'pids': []}]
    seen = run_python(path, '''
        out = []
        for profile_id in (14, 19):
            array = (pynvml.c_nvmlGpuInstance_t * 7)(); count = ctypes.c_uint(0)
            pynvml.nvmlDeviceGetGpuInstances(handle, profile_id, array, ctypes.byref(count))
            for i in range(count.value):
                info = pynvml.nvmlGpuInstanceGetInfo(array[i])
                out.append([info.id, info.profileId, info.placement.start, info.placement.size])
        print(json.dumps(out))
    ''')
    assert seen == [[two_g, 14, 2, 2], [one_g, 19, 0, 1]]


def test_concurrent_processes_see_one_consistent_host(tmp_path):
    path = str(tmp_path / 'host.json')
    sim_api.write_state(path, {'gpus': [{'model': 'H100-SXM5-80GB', 'mig': ENABLED}]})
    script = textwrap.dedent('''
        import ctypes, sys
        import pynvml
        import gpufleet_nvml_sim
        gpufleet_nvml_sim.install(pynvml, sys.argv[1])
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        for start in sys.argv[2:]:
            placement = pynvml.c_nvmlGpuInstancePlacement_t(); placement.start = int(start); placement.size = 1
            pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 19, ctypes.byref(placement))
    ''')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    workers = [subprocess.Popen([sys.executable, '-c', script, path] + starts, env=env) for starts in (['0', '2', '4'], ['1', '3', '5'])]
    assert [w.wait() for w in workers] == [0, 0]
    instances = sim_api.load_state(path)['gpus'][0]['gpu_instances']
    assert sorted(g['start'] for g in instances) == [0, 1, 2, 3, 4, 5]
    assert len(set(g['id'] for g in instances)) == 6 and set(g['id'] for g in instances) <= set(range(7, 15))
    assert len(sim_api.read_call_log(path)) == 6


def test_defaults_and_ids_are_filled_stably_and_kept_once_written(tmp_path):
    path = str(tmp_path / 'host.json')
    with open(path, 'w') as handle:
        json.dump({'gpus': [{'model': 'H200', 'mig': ENABLED, 'gpu_instances': [
            {'profile': '1g.18gb', 'start': 3, 'id': 1}, {'profile': '2g.35gb', 'start': 4},
            {'profile': 'MIG 1g.18gb', 'compute_instances': [{'profile': '1g.18gb'}]}]}]}, handle)
    first = sim_api.load_state(path)
    assert sim_api.load_state(path) == first
    gpu = first['gpus'][0]
    assert [(g['profile'], g['start']) for g in gpu['gpu_instances']] == [('1g.18gb', 3), ('2g.35gb', 4), ('1g.18gb', 6)]
    assert gpu['gpu_instances'][0]['id'] == 1 and gpu['gpu_instances'][1]['id'] in range(3, 7)
    assert gpu['gpu_instances'][2]['id'] in range(7, 15)
    assert gpu['gpu_instances'][2]['compute_instances'][0]['id'] == 0 and gpu['gpu_instances'][2]['compute_instances'][0]['start'] == 0
    assert (gpu['pids'], gpu['clients'], first['driver_version'], first['faults']) == ([], [], '580.95.05', [])
    written = sim_api.write_state(path, first)
    assert written == first and json.load(open(path)) == first


@pytest.mark.parametrize('gpu, message', [
    ({'model': 'V100'}, 'gpus[0]: unknown GPU model'),
    ({'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'gpu_instances': [{'profile': '5g.50gb', 'start': 0}]},
     'gpus[0].gpu_instances[0]: unknown GPU instance profile'),
    ({'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'gpu_instances': [{'profile': '3g.40gb', 'start': 2}]}, 'cannot start at slice 2'),
    ({'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'gpu_instances': [{'profile': '3g.40gb', 'start': 4}, {'profile': '2g.20gb', 'start': 4}]},
     'gpus[0].gpu_instances[1]: 2g.20gb at slice 4 overlaps'),
    ({'model': 'A30', 'mig': ENABLED, 'gpu_instances': [{'profile': '1g.6gb+me', 'start': 0}, {'profile': '2g.12gb+me', 'start': 2}]},
     'only one +me'),
    ({'model': 'A100-SXM4-80GB', 'gpu_instances': [{'profile': '3g.40gb', 'start': 0}]}, 'need mig.current enabled'),
    ({'model': 'L40S', 'mig': {'current': 'enabled'}}, 'not MIG-capable'),
    ({'model': 'A100-SXM4-80GB', 'mig': {'current': 'on'}}, 'mig.current must be enabled or disabled'),
    ({'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'gpu_instances': [
        {'profile': '3g.40gb', 'start': 0, 'compute_instances': [{'profile': '4c.3g.40gb', 'start': 0}]}]},
     'gpu_instances[0].compute_instances[0]: compute instance profile \'4c.3g.40gb\' is not valid in 3g.40gb'),
    ({'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'gpu_instances': [
        {'profile': '7g.80gb', 'start': 0, 'compute_instances': [{'profile': '3c.7g.80gb', 'start': 4}, {'profile': '1c.7g.80gb', 'start': 5}]}]},
     'compute_instances[1]: compute instance 1c.7g.80gb at 5 overlaps'),
    ({'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'gpu_instances': [
        {'profile': '1g.10gb', 'start': 0, 'id': 3}, {'profile': '1g.10gb', 'start': 1, 'id': 3}]}, 'duplicate GPU instance ids'),
    ({'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'gpu_instances': [{'profile': '1g.10gb', 'start': 0, 'id': 4095}]},
     'GPU instance id 4095 must be an integer from 0 to 4094'),
    ({'model': 'A30', 'pids': ['x']}, 'pids must be a list of positive integers'),
    ({'model': 'A30', 'clients': 'nvidia-persistenced'}, 'gpus[0]: clients must be a list of names'),
    ({'model': 'A30', 'pci_device_id': '0x20B010DE'}, "gpus[0]: pci_device_id '0x20B010DE' is not one of the A30 ids 0x20B710DE"),
    ({'model': 'A100-PCIE-40GB', 'pci_device_id': 'twenty'}, 'is not one of the A100-PCIE-40GB ids 0x20F110DE, 0x20B110DE'),
    ({'model': 'A30', 'minor_number': -1}, 'gpus[0]: minor_number -1 must be a non-negative integer'),
])
def test_bad_state_files_name_the_bad_entry(tmp_path, gpu, message):
    path = str(tmp_path / 'bad.json')
    with open(path, 'w') as handle:
        json.dump({'gpus': [gpu]}, handle)
    with pytest.raises(sim_api.SimulatorError) as failure:
        sim_api.load_state(path)
    assert message in str(failure.value)
    sim_api.install(pynvml, path)
    try:
        with pytest.raises(sim_api.SimulatorError):
            pynvml.nvmlInit()
    finally:
        sim_api.uninstall(pynvml)


@pytest.mark.parametrize('fault, message', [
    ({'call': 'nvmlDeviceFrobnicate'}, "faults[0]: unknown call 'nvmlDeviceFrobnicate'"),
    ({'call': 'nvmlDeviceSetMigMode', 'error': 'NVML_ERROR_NOPE'}, 'unknown error'),
    ({'call': 'nvmlDeviceSetMigMode', 'nth': 0}, 'nth must be an integer >= 1'),
    ({'call': 'simulate_gpu_reset', 'gpu': -1}, 'gpu must be the index of one of the 1 GPU(s), or absent'),
    # Faults that could never fire.
    ({'call': 'nvmlDeviceSetMigMode', 'gpu': 1}, 'gpu must be the index of one of the 1 GPU(s), or absent'),
    ({'call': 'nvmlInitWithFlags', 'gpu': 0}, 'nvmlInitWithFlags concerns no GPU, so a fault on it cannot name one'),
    ({'call': 'nvmlInit_v2'}, "unknown call 'nvmlInit_v2' (a simulated NVML symbol that can fail"),
    ({'call': 'simulate_reboot'}, "unknown call 'simulate_reboot'"),
])
def test_bad_faults_are_clear_errors(tmp_path, fault, message):
    path = str(tmp_path / 'bad.json')
    with pytest.raises(sim_api.SimulatorError) as failure:
        sim_api.write_state(path, {'gpus': [{'model': 'A30'}], 'faults': [fault]})
    assert message in str(failure.value)


def test_set_pids_helper(tmp_path):
    path = str(tmp_path / 'host.json')
    sim_api.write_state(path, {'gpus': [{'model': 'A30', 'mig': ENABLED, 'gpu_instances': [
        {'profile': '4g.24gb', 'start': 0, 'compute_instances': [{'profile': '4g.24gb', 'start': 0}]}]}]})
    sim_api.set_pids(path, 0, 0, 0, [10, 11])
    sim_api.set_pids(path, 0, None, None, (12,))
    gpu = sim_api.load_state(path)['gpus'][0]
    assert gpu['pids'] == [12] and gpu['gpu_instances'][0]['compute_instances'][0]['pids'] == [10, 11]
    with pytest.raises(sim_api.SimulatorError) as failure:
        sim_api.set_pids(path, 0, 9, 0, [1])
    assert 'set_pids: GPU 0 has no compute instance 0 in GPU instance 9' in str(failure.value)
    with pytest.raises(sim_api.SimulatorError) as failure:
        sim_api.set_pids(path, 0, None, None, 12)
    assert 'pids must be a list of positive integers' in str(failure.value)
    assert sim_api.read_call_log(path) == []


def test_the_minor_number_is_the_state_s_or_not_supported(sim):
    # NVIDIA's DRA driver names devices by /dev/nvidia<minor>, which need not be the NVML index.
    sim([{'model': 'A30', 'minor_number': 5}, {'model': 'A30'}])
    assert pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(0)) == 5
    assert error_of(lambda: pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(1))) == E.NVML_ERROR_NOT_SUPPORTED
