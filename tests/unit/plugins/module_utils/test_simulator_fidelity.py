# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulator through the real pynvml wrappers: ids, names, placements, capacities, errors."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import json

import pynvml
import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils import _nvml_simulator
from ansible_collections.gpufleet.mig.plugins.module_utils._gpu_models import MODELS

EIGHT_SLICE_IDS = {'1g': 19, '1g+me': 20, '1g-double': 15, '2g': 14, '3g': 9, '4g': 5, '7g': 0}


@pytest.fixture
def nvml(tmp_path):
    """``nvml(gpus, faults)`` -> (pynvml, state path), with the simulator installed and initialised."""
    def start(gpus, faults=None):
        path = str(tmp_path / 'host.json')
        with open(path, 'w') as handle:
            json.dump({'gpus': gpus, 'faults': faults or []}, handle)
        _nvml_simulator.install(pynvml, path)
        pynvml.nvmlInit()
        return path
    yield start
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()


def error_of(function, *args):
    with pytest.raises(pynvml.NVMLError) as failure:
        function(*args)
    return failure.value.value


def enum_profiles(handle):
    found = {}
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
        except pynvml.NVMLError as exc:
            assert exc.value in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT)
            continue
        found[enum] = info
    return found


def placements(handle, profile_id):
    array = (pynvml.c_nvmlGpuInstancePlacement_t * 16)()
    count = ctypes.c_uint(16)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
    return [(array[i].start, array[i].size) for i in range(count.value)]


def create(handle, profile_id, start):
    placement = pynvml.c_nvmlGpuInstancePlacement_t()
    placement.start = start
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, ctypes.byref(placement))


@pytest.mark.parametrize('model', sorted(m for m in MODELS if MODELS[m]['mig_capable'] and m != 'A30'))
def test_eight_slice_models_report_real_profile_ids_and_placements(nvml, model):
    nvml([{'model': model, 'mig': {'current': 'enabled'}}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetName(handle) == MODELS[model]['nvml_name']
    profiles = enum_profiles(handle)
    assert sorted(profiles) == [0, 1, 2, 3, 4, 7, 9]
    assert [profiles[e].id for e in (0, 7, 9, 1, 2, 3, 4)] == [19, 20, 15, 14, 9, 5, 0]
    assert profiles[7].name.endswith('+me') and profiles[0].name.startswith('MIG 1g.')
    assert placements(handle, 19) == [(s, 1) for s in range(7)]
    assert placements(handle, 15) == [(0, 2), (2, 2), (4, 2), (6, 2)]
    assert placements(handle, 14) == [(0, 2), (2, 2), (4, 2)]
    assert placements(handle, 9) == [(0, 4), (4, 4)]
    assert placements(handle, 5) == [(0, 4)]
    assert placements(handle, 0) == [(0, 8)]
    assert [profiles[e].instanceCount for e in (0, 7, 9, 1, 2, 3, 4)] == [7, 1, 4, 3, 2, 1, 1]


def test_a30_geometry(nvml):
    nvml([{'model': 'A30', 'mig': {'current': 'enabled'}}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    profiles = enum_profiles(handle)
    assert dict((e, (p.id, p.name)) for e, p in profiles.items()) == {
        0: (14, 'MIG 1g.6gb'), 7: (21, 'MIG 1g.6gb+me'), 1: (5, 'MIG 2g.12gb'), 8: (6, 'MIG 2g.12gb+me'), 3: (0, 'MIG 4g.24gb')}
    assert placements(handle, 5) == [(0, 2), (2, 2)]


def test_placement_conflicts_counts_and_media_engines(nvml):
    path = nvml([{'model': 'A100-SXM4-80GB', 'mig': {'current': 'enabled'}}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    create(handle, 9, 4)
    assert error_of(create, handle, 14, 4) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES   # overlaps the 3g
    assert error_of(create, handle, 14, 1) == pynvml.NVML_ERROR_INVALID_ARGUMENT         # not a 2g start
    create(handle, 20, 0)
    assert error_of(create, handle, 20, 1) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES   # one +me per GPU
    create(handle, 19, 1)
    create(handle, 19, 2)
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, 19) == 1
    calls = [json.loads(line) for line in open(path + '.calls.jsonl')]
    assert [c['result'] for c in calls] == ['NVML_SUCCESS', 'NVML_ERROR_INSUFFICIENT_RESOURCES', 'NVML_ERROR_INVALID_ARGUMENT',
                                            'NVML_SUCCESS', 'NVML_ERROR_INSUFFICIENT_RESOURCES', 'NVML_SUCCESS', 'NVML_SUCCESS']


def test_compute_instances_and_destroy_order(nvml):
    nvml([{'model': 'A100-SXM4-80GB', 'mig': {'current': 'enabled'}, 'gpu_instances': [
        {'profile': '7g.80gb', 'start': 0, 'compute_instances': [{'profile': '3c.7g.80gb', 'start': 4, 'pids': [9]}]}]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, 1)
    names = {}
    for enum in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, enum, 0)
        except pynvml.NVMLError:
            continue
        names[info.name] = (info.id, info.instanceCount)
    assert names == {'MIG 1c.7g.80gb': (0, 7), 'MIG 2c.7g.80gb': (1, 3), 'MIG 3c.7g.80gb': (2, 2), 'MIG 4c.7g.80gb': (3, 1),
                     'MIG 7g.80gb': (4, 1)}
    assert error_of(pynvml.nvmlGpuInstanceDestroy, gi) == pynvml.NVML_ERROR_IN_USE
    ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0)
    assert error_of(pynvml.nvmlComputeInstanceDestroy, ci) == pynvml.NVML_ERROR_IN_USE
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(mig)] == [9]
    assert pynvml.nvmlDeviceGetGpuInstanceId(mig) == 1 and pynvml.nvmlDeviceGetComputeInstanceId(mig) == 0


def test_ampere_pending_until_reset_hopper_immediate_and_reboot(nvml):
    path = nvml([{'model': 'A100-SXM4-80GB'}, {'model': 'H200'}])
    ampere, hopper = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    pynvml.nvmlDeviceSetMigMode(ampere, 1)
    pynvml.nvmlDeviceSetMigMode(hopper, 1)
    assert pynvml.nvmlDeviceGetMigMode(ampere) == [0, 1]
    assert pynvml.nvmlDeviceGetMigMode(hopper) == [1, 1]
    assert error_of(create, ampere, 19, 0) == pynvml.NVML_ERROR_NOT_SUPPORTED   # MIG not current yet
    _nvml_simulator.simulate_gpu_reset(path, 0)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetMigMode(ampere) == [1, 1]
    create(ampere, 19, 0)
    create(hopper, 0, 0)
    _nvml_simulator.simulate_reboot(path)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetMigMode(ampere) == [1, 1]   # Ampere keeps its mode
    assert pynvml.nvmlDeviceGetMigMode(hopper) == [0, 0]   # Hopper loses it
    state = json.load(open(path))
    assert [g['gpu_instances'] for g in state['gpus']] == [[], []]


def test_in_use_with_processes_and_reset_refused(nvml):
    path = nvml([{'model': 'H100-SXM5-80GB', 'pids': [31]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert error_of(pynvml.nvmlDeviceSetMigMode, handle, 1) == pynvml.NVML_ERROR_IN_USE
    with pytest.raises(_nvml_simulator.SimulatorError):
        _nvml_simulator.simulate_gpu_reset(path, 0)


def test_fault_fires_once_on_the_nth_call_and_survives_reloads(nvml):
    fault = {'call': 'nvmlDeviceCreateGpuInstanceWithPlacement', 'gpu': 0, 'nth': 2, 'error': 'NVML_ERROR_INSUFFICIENT_RESOURCES'}
    path = nvml([{'model': 'A100-SXM4-80GB', 'mig': {'current': 'enabled'}}], faults=[fault])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    create(handle, 19, 0)
    _nvml_simulator.install(pynvml, path)   # a separate run sees the same count
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert error_of(create, handle, 19, 1) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    create(handle, 19, 1)
    assert json.load(open(path))['faults'][0]['fired'] is True


def test_not_capable_and_unknown_symbols(nvml):
    nvml([{'model': 'L40S'}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert error_of(pynvml.nvmlDeviceGetMigMode, handle) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert error_of(pynvml.nvmlDeviceGetTemperature, handle, 0) == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    assert str(pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)) == 'In use by another client'  # through nvmlErrorString


@pytest.mark.parametrize('gpu, message', [
    ({'model': 'V100'}, 'unknown GPU model'),
    ({'model': 'A100-SXM4-80GB', 'mig': {'current': 'enabled'}, 'gpu_instances': [{'profile': '3g.40gb', 'start': 2}]}, 'cannot start'),
    ({'model': 'A100-SXM4-80GB', 'gpu_instances': [{'profile': '3g.40gb', 'start': 0}]}, 'need mig.current enabled'),
    ({'model': 'L40S', 'mig': {'current': 'enabled'}}, 'not MIG-capable'),
])
def test_bad_state_files_are_clear_errors(tmp_path, gpu, message):
    path = str(tmp_path / 'bad.json')
    with open(path, 'w') as handle:
        json.dump({'gpus': [gpu]}, handle)
    with pytest.raises(_nvml_simulator.SimulatorError) as failure:
        _nvml_simulator.load_state(path)
    assert message in str(failure.value)
