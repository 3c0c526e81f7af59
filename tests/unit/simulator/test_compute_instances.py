# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compute instances, MIG devices and their processes through the real pynvml."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes

import pynvml
import pytest

import gpufleet_nvml_sim as sim_api
from gpufleet_nvml_sim.models import ARCH_HOPPER, COMPUTE_PLACEMENTS, MODELS

from ansible_collections.gpufleet.mig.tests.unit.simulator.helpers import (
    DISTINCT_TABLES,
    ENABLED,
    address,
    ci_placements,
    ci_profile_infos,
    create_ci,
    create_gi,
    error_of,
)

E = pynvml
SLICE_ENUMS = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}


def expected_ci_profile_ids(model, gi_row, slices):
    """Written out from the reference: every size has its plain id; Hopper's double-memory 1g and A100's 7g (R580
    here) offer their full-size CI under a second id too (the pairs real drivers offer)."""
    ids = [SLICE_ENUMS[slices]]
    if slices == gi_row['compute_slices']:
        if gi_row['double_memory'] and MODELS[model]['architecture'] >= ARCH_HOPPER:
            ids.append(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1)
        if slices == 7 and MODELS[model]['architecture'] < ARCH_HOPPER:
            ids.append(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL)
    return ids


@pytest.mark.parametrize('model', DISTINCT_TABLES)
def test_compute_instance_profiles_per_gpu_instance_size(sim, model):
    sim([{'model': model, 'mig': ENABLED}], driver_version='580.95.05')
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for row in MODELS[model]['profiles']:
        gi = create_gi(handle, row['id'], row['starts'][0])
        expected = {}
        for slices, starts in COMPUTE_PLACEMENTS[row['compute_slices']].items():
            name = row['name'] if slices == row['compute_slices'] else '%dc.%s' % (slices, row['name'])
            for ci_id in expected_ci_profile_ids(model, row, slices):
                expected[ci_id] = (ci_id, slices, len(starts), 'MIG %s' % name)
        found = ci_profile_infos(gi)
        assert found == expected, row['name']
        for ci_id, (dummy, slices, dummy, dummy) in found.items():
            assert ci_placements(gi, ci_id) == [(s, slices) for s in COMPUTE_PLACEMENTS[row['compute_slices']][slices]]
            assert pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_id, 0, version=1).sliceCount == slices
        assert error_of(pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, 0, 1) == E.NVML_ERROR_INVALID_ARGUMENT
        assert error_of(pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT, 0) == \
            E.NVML_ERROR_INVALID_ARGUMENT
        pynvml.nvmlGpuInstanceDestroy(gi)


def test_double_memory_1g_offers_1_slice_and_1_slice_rev1_on_hopper(sim):
    sim([{'model': 'H100-SXM5-80GB', 'mig': ENABLED}, {'model': 'A100-SXM4-80GB', 'mig': ENABLED}])
    hopper, ampere = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    gi = create_gi(hopper, 15, 0)                               # 1g.20gb
    assert ci_profile_infos(gi) == {0: (0, 1, 1, 'MIG 1g.20gb'), 7: (7, 1, 1, 'MIG 1g.20gb')}
    assert ci_placements(gi, 0) == ci_placements(gi, 7) == [(0, 1)]
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 7)
    assert pynvml.nvmlComputeInstanceGetInfo(ci).profileId == 7
    # one compute slice: the pair shares it, and each id lists the instances created with it
    assert [pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, i) for i in (0, 7)] == [0, 0]
    assert error_of(create_ci, gi, 0, 0) == E.NVML_ERROR_INSUFFICIENT_RESOURCES
    count = ctypes.c_uint(0)
    array = (pynvml.c_nvmlComputeInstance_t * 1)()
    pynvml.nvmlGpuInstanceGetComputeInstances(gi, 0, array, ctypes.byref(count))
    assert count.value == 0
    pynvml.nvmlGpuInstanceGetComputeInstances(gi, 7, array, ctypes.byref(count))
    assert count.value == 1
    assert ci_profile_infos(create_gi(ampere, 15, 0)) == {0: (0, 1, 1, 'MIG 1g.20gb')}     # Ampere: 1_SLICE only


@pytest.mark.parametrize('driver, full', [('580.95.05', (4, 8)), ('535.183.01', (4,))])
def test_a100_7g_offers_7_slice_and_7_slice_nvl_on_recent_drivers(sim, driver, full):
    sim([{'model': 'A100-SXM4-40GB', 'mig': ENABLED, 'gpu_instances': [{'profile': '7g.40gb', 'start': 0}]}], driver_version=driver)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, 0)        # the whole GPU's id range is {0}
    infos = ci_profile_infos(gi)
    assert [i for i in infos if infos[i][1] == 7] == list(full) and infos[0] == (0, 1, 7, 'MIG 1c.7g.40gb')
    assert all(infos[i] == (i, 7, 1, 'MIG 7g.40gb') for i in full)
    if 8 not in full:
        assert error_of(create_ci, gi, 8, 0) == E.NVML_ERROR_NOT_SUPPORTED
    ci = create_ci(gi, full[-1], 0)
    assert pynvml.nvmlComputeInstanceGetInfo(ci).profileId == full[-1]
    array = (pynvml.c_nvmlComputeInstance_t * 1)()
    count = ctypes.c_uint(0)
    pynvml.nvmlGpuInstanceGetComputeInstances(gi, full[-1], array, ctypes.byref(count))
    assert count.value == 1


def test_compute_instance_placement_rules(sim):
    sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'gpu_instances': [{'profile': '7g.80gb', 'start': 0}]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, 0)
    assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, 0) == 7
    create_ci(gi, 2, 4)                                                       # 3c at 4: slices 4-6
    assert error_of(create_ci, gi, 1, 4) == E.NVML_ERROR_INSUFFICIENT_RESOURCES   # 2c at 4 overlaps
    assert error_of(create_ci, gi, 1, 1) == E.NVML_ERROR_INVALID_ARGUMENT         # not a 2c start
    assert error_of(create_ci, gi, 6, 0) == E.NVML_ERROR_NOT_SUPPORTED            # not a CI profile of a 7g GI
    assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, 0) == 4
    assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, 8) == 0
    auto = [pynvml.nvmlComputeInstanceGetInfo(pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)) for dummy in range(4)]
    assert [(i.placement.start, i.placement.size, i.profileId) for i in auto] == [(0, 1, 0), (1, 1, 0), (2, 1, 0), (3, 1, 0)]
    assert [i.id for i in auto] == [1, 2, 3, 4]
    assert address(auto[0].gpuInstance) == address(gi) and address(auto[0].device) == address(handle)
    assert error_of(pynvml.nvmlGpuInstanceCreateComputeInstance, gi, 0) == E.NVML_ERROR_INSUFFICIENT_RESOURCES
    array = (pynvml.c_nvmlComputeInstance_t * 7)()
    count = ctypes.c_uint(0)
    pynvml.nvmlGpuInstanceGetComputeInstances(gi, 0, array, ctypes.byref(count))
    assert count.value == 4
    assert error_of(pynvml.nvmlGpuInstanceGetComputeInstances, gi, 5, array, ctypes.byref(count)) == E.NVML_ERROR_NOT_SUPPORTED
    assert error_of(pynvml.nvmlGpuInstanceGetComputeInstanceById, gi, 42) == E.NVML_ERROR_NOT_FOUND


def test_destroy_order_and_stale_handles(sim):
    path = sim([{'model': 'A30', 'mig': ENABLED, 'gpu_instances': [
        {'id': 2, 'profile': '2g.12gb', 'start': 2, 'compute_instances': [{'profile': '1c.2g.12gb', 'start': 1, 'pids': [77]}]}]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, 2)
    ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0)
    assert error_of(pynvml.nvmlGpuInstanceDestroy, gi) == E.NVML_ERROR_IN_USE        # a compute instance exists
    assert error_of(pynvml.nvmlComputeInstanceDestroy, ci) == E.NVML_ERROR_IN_USE    # a process runs on it
    sim_api.set_pids(path, 0, 2, 0, [])
    pynvml.nvmlComputeInstanceDestroy(ci)
    assert error_of(pynvml.nvmlComputeInstanceGetInfo, ci) == E.NVML_ERROR_INVALID_ARGUMENT   # stale handle
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert error_of(pynvml.nvmlGpuInstanceGetInfo, gi) == E.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(pynvml.nvmlDeviceGetGpuInstanceById, handle, 2) == E.NVML_ERROR_NOT_FOUND
    assert [entry['result'] for entry in sim_api.read_call_log(path)] == [
        'NVML_ERROR_IN_USE', 'NVML_ERROR_IN_USE', 'NVML_SUCCESS', 'NVML_SUCCESS']


# ---- MIG devices and processes ------------------------------------------------------------------------------------

def test_mig_devices_and_their_processes(sim):
    sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'pids': [5], 'gpu_instances': [
        {'id': 2, 'profile': '3g.40gb', 'start': 4, 'compute_instances': [
            {'profile': '1c.3g.40gb', 'start': 2, 'pids': [4242]}, {'profile': '2c.3g.40gb', 'start': 0, 'pids': [4243, 4244]}]},
        {'id': 7, 'profile': '1g.10gb+me', 'start': 0, 'compute_instances': [{'profile': '1g.10gb+me', 'start': 0}]}],
        'clients': ['nvidia-persistenced']}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 7
    assert pynvml.nvmlDeviceIsMigDeviceHandle(handle).value == 0
    devices = [pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i) for i in range(3)]
    assert error_of(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, 3) == E.NVML_ERROR_NOT_FOUND
    ids = [(pynvml.nvmlDeviceGetGpuInstanceId(d), pynvml.nvmlDeviceGetComputeInstanceId(d)) for d in devices]
    assert ids == [(7, 0), (2, 1), (2, 0)]       # by GI placement, then CI placement; GI ids as the state file gives them
    assert all(pynvml.nvmlDeviceIsMigDeviceHandle(d).value == 1 for d in devices)
    assert address(pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(devices[1])) == address(handle)
    assert [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(devices[1])] == [
        (4243, 2, 1), (4244, 2, 1)]
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(devices[0]) == []
    everything = [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
    assert sorted(everything) == [(5, 0xFFFFFFFF, 0xFFFFFFFF), (4242, 2, 0), (4243, 2, 1), (4244, 2, 1)]   # clients are not processes
    assert pynvml.nvmlDeviceGetName(devices[2]) == 'NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb'
    assert pynvml.nvmlDeviceGetMemoryInfo(devices[2]).total == 40192 * 1024 * 1024
    uuid = pynvml.nvmlDeviceGetUUID(devices[2])
    assert uuid.startswith('MIG-') and address(pynvml.nvmlDeviceGetHandleByUUID(uuid)) == address(devices[2])
    assert error_of(pynvml.nvmlDeviceGetGpuInstanceId, handle) == E.NVML_ERROR_NOT_SUPPORTED
    assert error_of(pynvml.nvmlDeviceGetMigMode, devices[0]) == E.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle, handle) == E.NVML_ERROR_INVALID_ARGUMENT


def test_handles_are_distinct_nonzero_addresses(sim):
    sim([{'model': 'B200', 'mig': ENABLED, 'gpu_instances': [{'profile': '7g.180gb', 'start': 0, 'compute_instances': [
        {'profile': '7g.180gb', 'start': 0}]}]}, {'model': 'B200'}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, 0)
    ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
    values = [address(h) for h in (handle, pynvml.nvmlDeviceGetHandleByIndex(1), gi, ci, mig)]
    assert all(values) and len(set(values)) == 5
    assert error_of(pynvml.nvmlDeviceGetName, pynvml.c_nvmlDevice_t()) == E.NVML_ERROR_INVALID_ARGUMENT   # NULL handle
    assert error_of(pynvml.nvmlDeviceGetMigMode, ctypes.cast(ctypes.c_void_p(0x1234), pynvml.c_nvmlDevice_t)) == \
        E.NVML_ERROR_INVALID_ARGUMENT


def test_l40s_is_not_mig_capable(sim):
    sim([{'model': 'L40S', 'pids': [900]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetName(handle) == 'NVIDIA L40S'
    assert pynvml.nvmlDeviceGetArchitecture(handle) == pynvml.NVML_DEVICE_ARCH_ADA
    count = ctypes.byref(ctypes.c_uint())
    for call, args in ((pynvml.nvmlDeviceGetMigMode, ()), (pynvml.nvmlDeviceSetMigMode, (1,)),
                       (pynvml.nvmlDeviceGetGpuInstanceProfileInfo, (0,)),
                       (pynvml.nvmlDeviceGetGpuInstancePossiblePlacements, (19, None, count)),
                       (pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity, (19,)), (create_gi, (19, 0)),
                       (pynvml.nvmlDeviceGetMigDeviceHandleByIndex, (0,))):
        assert error_of(call, handle, *args) == E.NVML_ERROR_NOT_SUPPORTED, call
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 0        # SUCCESS with 0 where MIG is unsupported
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)] == [900]
