# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The NVML simulator, always through the real pynvml wrappers: per-model tables, NVML semantics,
faults, the call log and the state file as shared by separate processes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import json
import os
import subprocess
import sys
import textwrap

import pynvml
import pytest

from gpufleet_nvml_sim import library as _nvml_simulator, models as _gpu_models
from gpufleet_nvml_sim.models import COMPUTE_PLACEMENTS, MODELS

MIG_MODELS = sorted(name for name, model in MODELS.items() if model['mig_capable'])
AMPERE = [name for name in MIG_MODELS if not _gpu_models.mode_applies_immediately(MODELS[name])]
HOPPER_AND_LATER = [name for name in MIG_MODELS if _gpu_models.mode_applies_immediately(MODELS[name])]
ENABLED = {'current': 'enabled', 'pending': 'enabled'}

E = pynvml   # error codes and wrappers, shorter in assertions


@pytest.fixture
def sim(tmp_path):
    """``sim(gpus, faults=None, **top_level)`` -> state path, with the simulator installed and NVML initialised."""
    def start(gpus, faults=None, **extra):
        path = str(tmp_path / 'host.json')
        state = dict(extra, gpus=gpus, faults=faults or [])
        with open(path, 'w') as handle:
            json.dump(state, handle)
        _nvml_simulator.install(pynvml, path)
        pynvml.nvmlInit()
        return path
    yield start
    _nvml_simulator.uninstall(pynvml)


def error_of(function, *args, **kwargs):
    with pytest.raises(pynvml.NVMLError) as failure:
        function(*args, **kwargs)
    return failure.value.value


def raw(name):
    """The simulated C symbol itself, for calls no pynvml wrapper makes (bad versions, NULL arrays)."""
    return pynvml._nvmlGetFunctionPointer(name)


def address(handle):
    return ctypes.cast(handle, ctypes.c_void_p).value


def gi_placements(handle, profile_id):
    """Possible placements with NVML's two calls: count with a NULL array, then fill."""
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
    return [(array[i].start, array[i].size) for i in range(count.value)]


def ci_placements(gi, profile_id):
    array = (pynvml.c_nvmlComputeInstancePlacement_t * 8)()
    count = ctypes.c_uint(8)
    pynvml.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, profile_id, array, ctypes.byref(count))
    return [(array[i].start, array[i].size) for i in range(count.value)]


def create_gi(handle, profile_id, start):
    placement = pynvml.c_nvmlGpuInstancePlacement_t()
    placement.start = start
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, ctypes.byref(placement))


def create_ci(gi, profile_id, start):
    placement = pynvml.c_nvmlComputeInstancePlacement_t()
    placement.start = start
    return pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, profile_id, ctypes.byref(placement))


def gi_instances(handle, profile_id):
    info = profile_by_id(handle, profile_id)
    array = (pynvml.c_nvmlGpuInstance_t * info.instanceCount)()
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstances(handle, profile_id, array, ctypes.byref(count))
    return [array[i] for i in range(count.value)]


def profile_by_id(handle, profile_id):
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
        except pynvml.NVMLError:
            continue
        if info.id == profile_id:
            return info
    raise AssertionError('no profile id %d' % profile_id)


def profile(model, name):
    return [p for p in MODELS[model]['profiles'] if p['name'] == name][0]


def mutations(path):
    return [entry['call'] for entry in _nvml_simulator.read_call_log(path)]


def run_python(path, code):
    """Run ``code`` in a separate Python process with the simulator installed on ``path``; returns its JSON output."""
    script = textwrap.dedent('''
        import ctypes, json, sys
        import pynvml
        from gpufleet_nvml_sim import library as _nvml_simulator
        _nvml_simulator.install(pynvml, sys.argv[1])
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    ''') + textwrap.dedent(code)
    output = subprocess.check_output([sys.executable, '-c', script, path], env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    return json.loads(output.decode())


# ---- the model tables ----------------------------------------------------------------------------------

@pytest.mark.parametrize('model', sorted(MODELS))
def test_model_table_is_consistent(model):
    assert _gpu_models.model_problems(model) == []


def test_name_rule_matches_known_profiles():
    assert _gpu_models.name_rule_gb(9728, 81920) == 10
    assert _gpu_models.name_rule_gb(71424, 143771) == 71      # 70.5 rounds away from zero, as in Go
    assert _gpu_models.name_rule_gb(22784, 183359) == 23


def test_unknown_model_lists_the_valid_ones():
    with pytest.raises(_gpu_models.UnknownModel) as failure:
        _gpu_models.get_model('V100')
    assert 'V100' in str(failure.value) and 'A100-SXM4-80GB' in str(failure.value) and 'L40S' in str(failure.value)


# ---- identity ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize('model', sorted(MODELS))
def test_identity_through_pynvml(sim, model):
    path = sim([{'model': model}, {'model': model}], driver_version='580.95.05')
    assert pynvml.nvmlDeviceGetCount() == 2
    assert pynvml.nvmlSystemGetDriverVersion() == '580.95.05'
    assert pynvml.nvmlSystemGetNVMLVersion() == '13.580.95.05'
    first, second = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    table = MODELS[model]
    assert pynvml.nvmlDeviceGetName(first) == table['nvml_name']
    assert pynvml.nvmlDeviceGetArchitecture(first) == table['architecture']
    assert pynvml.nvmlDeviceGetMemoryInfo(first).total == table['memory_total_mib'] * 1024 * 1024
    pci = pynvml.nvmlDeviceGetPciInfo(first)
    assert pci.pciDeviceId == table['pci_device_id']
    assert pynvml.nvmlDeviceGetIndex(second) == 1
    uuids = [pynvml.nvmlDeviceGetUUID(h) for h in (first, second)]
    buses = [pynvml.nvmlDeviceGetPciInfo(h).busId for h in (first, second)]
    assert uuids[0].startswith('GPU-') and len(set(uuids)) == 2 and len(set(buses)) == 2
    assert buses[0] == '00000000:07:00.0'
    assert address(pynvml.nvmlDeviceGetHandleByUUID(uuids[1])) == address(second)
    # generated identities are stable: a fresh load derives the same ones
    _nvml_simulator.install(pynvml, path)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(1)) == uuids[1]
    assert error_of(pynvml.nvmlDeviceGetHandleByIndex, 2) == E.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(pynvml.nvmlDeviceGetHandleByUUID, 'GPU-nope') == E.NVML_ERROR_NOT_FOUND


def test_uuid_and_bus_id_from_the_file_win(sim):
    sim([{'model': 'A30', 'uuid': 'GPU-11111111-2222-3333-4444-555555555555', 'pci_bus_id': '00000000:B7:00.0'}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetUUID(handle) == 'GPU-11111111-2222-3333-4444-555555555555'
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    assert (pci.busId, pci.busIdLegacy, pci.bus) == ('00000000:B7:00.0', '0000:B7:00.0', 0xB7)
    assert address(pynvml.nvmlDeviceGetHandleByPciBusId('00000000:B7:00.0')) == address(handle)


# ---- GPU instance profiles and placements, per model ---------------------------------------------------------

@pytest.mark.parametrize('model', MIG_MODELS)
def test_gpu_instance_profiles_as_the_table_says(sim, model):
    sim([{'model': model}])      # MIG disabled: profiles and placements are still reported
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    by_enum = dict((p['enum'], p) for p in MODELS[model]['profiles'])
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        if enum not in by_enum:
            assert error_of(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, enum) == E.NVML_ERROR_NOT_SUPPORTED
            continue
        row = by_enum[enum]
        info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
        assert (info.id, info.name, info.sliceCount, info.instanceCount, info.memorySizeMB, info.multiprocessorCount) == (
            row['id'], 'MIG ' + row['name'], row['compute_slices'], row['max_count'], row['memory_mib'], row['multiprocessors'])
        assert (info.copyEngineCount, info.decoderCount, info.encoderCount, info.jpegCount, info.ofaCount) == (
            row['copy_engines'], row['decoders'], row['encoders'], row['jpegs'], row['ofas'])
        if row['media_extensions']:
            assert info.decoderCount and info.jpegCount and info.ofaCount
        v1 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum, version=1)
        assert (v1.id, v1.memorySizeMB, v1.instanceCount) == (row['id'], row['memory_mib'], row['max_count'])
        assert pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(handle, row['id']).name == 'MIG ' + row['name']
        assert gi_placements(handle, row['id']) == [(start, row['memory_slices']) for start in row['starts']]
    assert error_of(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT) == \
        E.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(gi_placements, handle, 99) == E.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity, handle, by_enum[0]['id']) == E.NVML_ERROR_NOT_SUPPORTED


def test_profile_info_struct_version_is_checked(sim):
    sim([{'model': 'H100-SXM5-80GB', 'mig': ENABLED, 'gpu_instances': [{'profile': '7g.80gb', 'start': 0}]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
    info.version = 0x01000098
    assert raw('nvmlDeviceGetGpuInstanceProfileInfoV')(handle, 0, ctypes.byref(info)) == E.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    info.version = pynvml.nvmlGpuInstanceProfileInfo_v2
    assert raw('nvmlDeviceGetGpuInstanceProfileInfoV')(handle, 0, ctypes.byref(info)) == E.NVML_SUCCESS and info.id == 19
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, 1)
    ci_info = pynvml.c_nvmlComputeInstanceProfileInfo_v2_t()
    ci_info.version = 1
    assert raw('nvmlGpuInstanceGetComputeInstanceProfileInfoV')(gi, 0, 0, ctypes.byref(ci_info)) == \
        E.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_placement_arrays_follow_the_count_protocol(sim):
    sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    short = (pynvml.c_nvmlGpuInstancePlacement_t * 3)()
    count = ctypes.c_uint(3)
    assert raw('nvmlDeviceGetGpuInstancePossiblePlacements_v2')(handle, 19, short, ctypes.byref(count)) == E.NVML_ERROR_INSUFFICIENT_SIZE
    assert count.value == 7
    instances = (pynvml.c_nvmlGpuInstance_t * 7)()
    assert raw('nvmlDeviceGetGpuInstances')(handle, 19, None, ctypes.byref(count)) == E.NVML_ERROR_INVALID_ARGUMENT
    for start in (0, 1):
        create_gi(handle, 19, start)
    assert raw('nvmlDeviceGetGpuInstances')(handle, 19, (pynvml.c_nvmlGpuInstance_t * 1)(), ctypes.byref(count)) == \
        E.NVML_ERROR_INSUFFICIENT_SIZE
    assert raw('nvmlDeviceGetGpuInstances')(handle, 19, instances, ctypes.byref(count)) == E.NVML_SUCCESS and count.value == 2


@pytest.mark.parametrize('model', MIG_MODELS)
def test_every_profile_fills_up_to_its_max_count(sim, model):
    sim([{'model': model, 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for row in MODELS[model]['profiles']:
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, row['id']) == row['max_count']
        created = [create_gi(handle, row['id'], start) for start in row['starts']
                   if pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, row['id'])]
        assert len(created) == row['max_count'], row['name']
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, row['id']) == 0
        free = [s for s in row['starts'] if s not in [pynvml.nvmlGpuInstanceGetInfo(gi).placement.start for gi in created]]
        for start in free[:1] or row['starts'][:1]:
            assert error_of(create_gi, handle, row['id'], start) == E.NVML_ERROR_INSUFFICIENT_RESOURCES, row['name']
        assert error_of(pynvml.nvmlDeviceCreateGpuInstance, handle, row['id']) == E.NVML_ERROR_INSUFFICIENT_RESOURCES
        assert len(gi_instances(handle, row['id'])) == row['max_count']
        for gi in created:
            info = pynvml.nvmlGpuInstanceGetInfo(gi)
            assert (info.profileId, info.placement.size) == (row['id'], row['memory_slices'])
            assert address(info.device) == address(handle)
            pynvml.nvmlGpuInstanceDestroy(gi)
        assert gi_instances(handle, row['id']) == []


@pytest.mark.parametrize('model', MIG_MODELS)
def test_one_media_extension_instance_per_gpu(sim, model):
    sim([{'model': model, 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    media = [p for p in MODELS[model]['profiles'] if p['media_extensions']]
    first = create_gi(handle, media[0]['id'], media[0]['starts'][0])
    for row in media:
        free = [s for s in row['starts'] if s >= 2]      # not overlapping the first one: refused for being +me
        assert error_of(create_gi, handle, row['id'], free[0]) == E.NVML_ERROR_INSUFFICIENT_RESOURCES
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, row['id']) == 0
    plain = [p for p in MODELS[model]['profiles'] if p['compute_slices'] == 1 and not p['media_extensions'] and p['memory_slices'] == 1][0]
    create_gi(handle, plain['id'], 1)                    # a plain 1g beside it is fine
    pynvml.nvmlGpuInstanceDestroy(first)
    create_gi(handle, media[-1]['id'], media[-1]['starts'][-1])


@pytest.mark.parametrize('model', ['A100-SXM4-40GB', 'H200'])
def test_overlap_invalid_start_and_mixed_layouts(sim, model):
    sim([{'model': model, 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    ids = dict((p['enum'], p['id']) for p in MODELS[model]['profiles'])
    three, two, four, seven, one = ids[2], ids[1], ids[3], ids[4], ids[0]
    assert error_of(create_gi, handle, two, 1) == E.NVML_ERROR_INVALID_ARGUMENT     # not a 2g start
    assert error_of(create_gi, handle, three, 2) == E.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(create_gi, handle, 12345, 0) == E.NVML_ERROR_INVALID_ARGUMENT   # not a profile id
    create_gi(handle, three, 4)
    assert error_of(create_gi, handle, two, 4) == E.NVML_ERROR_INSUFFICIENT_RESOURCES
    assert error_of(create_gi, handle, one, 6) == E.NVML_ERROR_INSUFFICIENT_RESOURCES
    assert error_of(create_gi, handle, seven, 0) == E.NVML_ERROR_INSUFFICIENT_RESOURCES
    create_gi(handle, four, 0)                         # 4g + 3g: memory slices 0-3 and 4-7
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, one) == 0


def test_driver_chosen_placements(sim):
    sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED}, {'model': 'H100-SXM5-80GB', 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    starts = [pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceCreateGpuInstance(handle, 19)).placement.start for dummy in range(7)]
    assert starts == [6, 4, 5, 0, 1, 2, 3]
    other = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceCreateGpuInstance(other, 14)).placement.start == 4
    assert pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceCreateGpuInstance(other, 9)).placement.start == 0


# ---- compute instances -----------------------------------------------------------------------------------------

@pytest.mark.parametrize('model', MIG_MODELS)
def test_compute_instance_profiles_per_gpu_instance_size(sim, model):
    sim([{'model': model, 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for row in MODELS[model]['profiles']:
        gi = create_gi(handle, row['id'], row['starts'][0])
        geometry = COMPUTE_PLACEMENTS[row['compute_slices']]
        found = {}
        for enum in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, enum, 0)
            except pynvml.NVMLError as exc:
                assert exc.value == E.NVML_ERROR_NOT_SUPPORTED
                continue
            assert info.id == enum
            assert pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, enum, 0, version=1).instanceCount == info.instanceCount
            found[info.sliceCount] = (info.name, info.instanceCount, ci_placements(gi, info.id))
        assert sorted(found) == sorted(geometry), row['name']
        for slices, starts in geometry.items():
            expected_name = 'MIG %s' % (row['name'] if slices == row['compute_slices'] else '%dc.%s' % (slices, row['name']))
            assert found[slices] == (expected_name, len(starts), [(s, slices) for s in starts])
        assert error_of(pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, 0, 1) == E.NVML_ERROR_INVALID_ARGUMENT
        assert error_of(pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT, 0) == \
            E.NVML_ERROR_INVALID_ARGUMENT
        pynvml.nvmlGpuInstanceDestroy(gi)


def test_compute_instance_placement_rules(sim):
    sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'gpu_instances': [{'profile': '7g.80gb', 'start': 0}]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, 1)
    assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, 0) == 7
    create_ci(gi, 2, 4)                                                       # 3c at 4: slices 4-6
    assert error_of(create_ci, gi, 1, 4) == E.NVML_ERROR_INSUFFICIENT_RESOURCES   # 2c at 4 overlaps
    assert error_of(create_ci, gi, 1, 1) == E.NVML_ERROR_INVALID_ARGUMENT         # not a 2c start
    assert error_of(create_ci, gi, 9, 0) == E.NVML_ERROR_INVALID_ARGUMENT         # not a CI profile here
    assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, 0) == 4
    assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, 4) == 0
    auto = [pynvml.nvmlComputeInstanceGetInfo(pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)) for dummy in range(4)]
    assert [(i.placement.start, i.placement.size, i.profileId) for i in auto] == [(0, 1, 0), (1, 1, 0), (2, 1, 0), (3, 1, 0)]
    assert [i.id for i in auto] == [1, 2, 3, 4]
    assert address(auto[0].gpuInstance) == address(gi) and address(auto[0].device) == address(handle)
    assert error_of(pynvml.nvmlGpuInstanceCreateComputeInstance, gi, 0) == E.NVML_ERROR_INSUFFICIENT_RESOURCES
    array = (pynvml.c_nvmlComputeInstance_t * 7)()
    count = ctypes.c_uint(0)
    pynvml.nvmlGpuInstanceGetComputeInstances(gi, 0, array, ctypes.byref(count))
    assert count.value == 4
    assert error_of(pynvml.nvmlGpuInstanceGetComputeInstanceById, gi, 42) == E.NVML_ERROR_NOT_FOUND


def test_destroy_order_and_stale_handles(sim):
    path = sim([{'model': 'A30', 'mig': ENABLED, 'gpu_instances': [
        {'profile': '2g.12gb', 'start': 2, 'compute_instances': [{'profile': '1c.2g.12gb', 'start': 1, 'pids': [77]}]}]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, 1)
    ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0)
    assert error_of(pynvml.nvmlGpuInstanceDestroy, gi) == E.NVML_ERROR_IN_USE        # a compute instance exists
    assert error_of(pynvml.nvmlComputeInstanceDestroy, ci) == E.NVML_ERROR_IN_USE    # a process runs on it
    _nvml_simulator.set_pids(path, 0, 1, 0, [])
    pynvml.nvmlComputeInstanceDestroy(ci)
    assert error_of(pynvml.nvmlComputeInstanceGetInfo, ci) == E.NVML_ERROR_INVALID_ARGUMENT   # stale handle
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert error_of(pynvml.nvmlGpuInstanceGetInfo, gi) == E.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(pynvml.nvmlDeviceGetGpuInstanceById, handle, 1) == E.NVML_ERROR_NOT_FOUND
    assert [entry['result'] for entry in _nvml_simulator.read_call_log(path)] == [
        'NVML_ERROR_IN_USE', 'NVML_ERROR_IN_USE', 'NVML_SUCCESS', 'NVML_SUCCESS']


# ---- MIG mode ---------------------------------------------------------------------------------------------------

def test_mig_disabled_refuses_instance_calls(sim):
    sim([{'model': 'H100-NVL'}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 0]
    assert error_of(create_gi, handle, 19, 0) == E.NVML_ERROR_NOT_SUPPORTED
    assert error_of(pynvml.nvmlDeviceCreateGpuInstance, handle, 19) == E.NVML_ERROR_NOT_SUPPORTED
    assert error_of(gi_instances, handle, 19) == E.NVML_ERROR_NOT_SUPPORTED
    assert error_of(pynvml.nvmlDeviceGetGpuInstanceById, handle, 1) == E.NVML_ERROR_NOT_SUPPORTED
    assert error_of(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, 0) == E.NVML_ERROR_NOT_SUPPORTED
    assert gi_placements(handle, 0) == [(0, 8)]


@pytest.mark.parametrize('model', AMPERE)
def test_ampere_mode_change_waits_for_a_reset_and_survives_reboots(sim, model):
    path = sim([{'model': model}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE) == 0     # activation status
    assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 1]
    one_g = MODELS[model]['profiles'][0]['id']
    assert error_of(create_gi, handle, one_g, 0) == E.NVML_ERROR_NOT_SUPPORTED
    _nvml_simulator.simulate_gpu_reset(path, 0)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 1]
    create_gi(handle, one_g, 0)
    _nvml_simulator.simulate_reboot(path)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 1]
    assert gi_instances(handle, one_g) == []
    pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_DISABLE)
    assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 0]
    _nvml_simulator.simulate_reboot(path)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 0]


@pytest.mark.parametrize('model', HOPPER_AND_LATER)
def test_hopper_and_later_switch_at_once_and_lose_the_mode_on_reboot(sim, model):
    path = sim([{'model': model}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE) == 0
    assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 1]
    create_gi(handle, 0, 0)
    assert error_of(pynvml.nvmlDeviceSetMigMode, handle, pynvml.NVML_DEVICE_MIG_DISABLE) == E.NVML_ERROR_IN_USE   # GIs present
    _nvml_simulator.simulate_reboot(path)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 0]
    state = _nvml_simulator.load_state(path)
    assert state['gpus'][0]['gpu_instances'] == [] and state['gpus'][0]['mig'] == {'current': 'disabled', 'pending': 'disabled'}


def test_processes_block_mode_changes_and_resets(sim):
    path = sim([{'model': 'H200', 'pids': [31]},
                {'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'gpu_instances': [
                    {'profile': '1g.10gb', 'start': 0, 'compute_instances': [{'profile': '1g.10gb', 'start': 0, 'pids': [32]}]}]}])
    hopper, ampere = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    assert error_of(pynvml.nvmlDeviceSetMigMode, hopper, 1) == E.NVML_ERROR_IN_USE
    assert pynvml.nvmlDeviceSetMigMode(hopper, 0) == 0        # already disabled: a no-op, even while busy
    assert error_of(pynvml.nvmlDeviceSetMigMode, ampere, 0) == E.NVML_ERROR_IN_USE
    assert error_of(pynvml.nvmlDeviceSetMigMode, hopper, 2) == E.NVML_ERROR_INVALID_ARGUMENT
    for index in (0, 1):
        with pytest.raises(_nvml_simulator.SimulatorError) as failure:
            _nvml_simulator.simulate_gpu_reset(path, index)
        assert 'in use by processes' in str(failure.value)
    log = _nvml_simulator.read_call_log(path)
    assert [(e['call'], e['gpu'], e['result']) for e in log[-2:]] == [
        ('simulate_gpu_reset', 0, 'NVML_ERROR_IN_USE'), ('simulate_gpu_reset', 1, 'NVML_ERROR_IN_USE')]
    assert [e['args'] for e in log[:4]] == [{'mode': 1}, {'mode': 0}, {'mode': 0}, {'mode': 2}]
    _nvml_simulator.simulate_reboot(path)     # processes are gone after a reboot
    _nvml_simulator.simulate_gpu_reset(path, 0)
    with pytest.raises(_nvml_simulator.SimulatorError):
        _nvml_simulator.simulate_gpu_reset(path, 5)


# ---- MIG devices and processes ------------------------------------------------------------------------------------

def test_mig_devices_and_their_processes(sim):
    sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'pids': [5], 'gpu_instances': [
        {'profile': '3g.40gb', 'start': 4, 'compute_instances': [
            {'profile': '1c.3g.40gb', 'start': 2, 'pids': [4242]}, {'profile': '2c.3g.40gb', 'start': 0, 'pids': [4243, 4244]}]},
        {'profile': '1g.10gb+me', 'start': 0, 'compute_instances': [{'profile': '1g.10gb+me', 'start': 0}]}]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 7
    assert pynvml.nvmlDeviceIsMigDeviceHandle(handle).value == 0
    devices = [pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i) for i in range(3)]
    assert error_of(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, 3) == E.NVML_ERROR_NOT_FOUND
    ids = [(pynvml.nvmlDeviceGetGpuInstanceId(d), pynvml.nvmlDeviceGetComputeInstanceId(d)) for d in devices]
    assert ids == [(2, 0), (1, 1), (1, 0)]       # by GI placement, then CI placement
    assert all(pynvml.nvmlDeviceIsMigDeviceHandle(d).value == 1 for d in devices)
    assert address(pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(devices[1])) == address(handle)
    assert [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(devices[1])] == [
        (4243, 1, 1), (4244, 1, 1)]
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(devices[0]) == []
    everything = [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
    assert sorted(everything) == [(5, 0xFFFFFFFF, 0xFFFFFFFF), (4242, 1, 0), (4243, 1, 1), (4244, 1, 1)]
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
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, 1)
    ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
    values = [address(h) for h in (handle, pynvml.nvmlDeviceGetHandleByIndex(1), gi, ci, mig)]
    assert all(values) and len(set(values)) == 5
    assert error_of(pynvml.nvmlDeviceGetName, pynvml.c_nvmlDevice_t()) == E.NVML_ERROR_INVALID_ARGUMENT   # NULL handle
    assert error_of(pynvml.nvmlDeviceGetMigMode, ctypes.cast(ctypes.c_void_p(0x1234), pynvml.c_nvmlDevice_t)) == \
        E.NVML_ERROR_INVALID_ARGUMENT


# ---- not MIG-capable, symbols, errors, init ---------------------------------------------------------------------------

def test_l40s_is_not_mig_capable(sim):
    sim([{'model': 'L40S', 'pids': [900]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetName(handle) == 'NVIDIA L40S'
    assert pynvml.nvmlDeviceGetPciInfo(handle).pciDeviceId == 0x26B510DE
    assert pynvml.nvmlDeviceGetArchitecture(handle) == pynvml.NVML_DEVICE_ARCH_ADA
    for call, args in ((pynvml.nvmlDeviceGetMigMode, ()), (pynvml.nvmlDeviceSetMigMode, (1,)),
                       (pynvml.nvmlDeviceGetGpuInstanceProfileInfo, (0,)), (gi_placements, (19,)),
                       (pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity, (19,)), (create_gi, (19, 0)),
                       (pynvml.nvmlDeviceGetMaxMigDeviceCount, ()), (pynvml.nvmlDeviceGetMigDeviceHandleByIndex, (0,))):
        assert error_of(call, handle, *args) == E.NVML_ERROR_NOT_SUPPORTED, call
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)] == [900]


def test_missing_symbols_error_strings_and_initialisation(tmp_path):
    path = str(tmp_path / 'host.json')
    _nvml_simulator.write_state(path, {'gpus': [{'model': 'A30'}]})
    lib = _nvml_simulator.install(pynvml, path)
    try:
        assert error_of(pynvml.nvmlDeviceGetCount) == E.NVML_ERROR_UNINITIALIZED
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert error_of(pynvml.nvmlDeviceGetTemperature, handle, 0) == E.NVML_ERROR_FUNCTION_NOT_FOUND
        assert error_of(pynvml.nvmlDeviceGetMigMode, None) == E.NVML_ERROR_INVALID_ARGUMENT
        assert pynvml.nvmlErrorString(E.NVML_ERROR_INSUFFICIENT_RESOURCES) == 'Insufficient resources'
        assert str(pynvml.NVMLError(E.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)) == 'Argument version mismatch'
        assert lib.call_counts['nvmlDeviceGetHandleByIndex_v2'] == 1 and lib.call_counts['nvmlInitWithFlags'] == 1
        pynvml.nvmlShutdown()
        assert error_of(pynvml.nvmlDeviceGetCount) == E.NVML_ERROR_UNINITIALIZED
        assert error_of(pynvml.nvmlShutdown) == E.NVML_ERROR_UNINITIALIZED
        assert _nvml_simulator.read_call_log(path) == []
    finally:
        _nvml_simulator.uninstall(pynvml)


# ---- faults --------------------------------------------------------------------------------------------------------

def test_a_fault_fires_once_on_the_nth_call_and_its_count_persists(sim):
    fault = {'call': 'nvmlDeviceCreateGpuInstanceWithPlacement', 'gpu': 0, 'nth': 3, 'error': 'NVML_ERROR_INSUFFICIENT_RESOURCES'}
    path = sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED}, {'model': 'A100-SXM4-80GB', 'mig': ENABLED}], faults=[fault])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    create_gi(handle, 19, 0)
    create_gi(pynvml.nvmlDeviceGetHandleByIndex(1), 19, 0)      # another GPU: not counted
    before = _nvml_simulator.load_state(path)['gpus']
    # the next count comes from a separate process: the count lives in the state file
    assert run_python(path, '''
        placement = pynvml.c_nvmlGpuInstancePlacement_t(); placement.start = 1
        pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 19, ctypes.byref(placement))
        print(json.dumps(None))
    ''') is None
    _nvml_simulator.install(pynvml, path)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    middle = _nvml_simulator.load_state(path)['gpus']
    assert error_of(create_gi, handle, 19, 2) == E.NVML_ERROR_INSUFFICIENT_RESOURCES      # third call on GPU 0
    assert _nvml_simulator.load_state(path)['gpus'] == middle != before                   # the fault mutated nothing
    create_gi(handle, 19, 2)                                                              # fired once only
    stored = _nvml_simulator.load_state(path)['faults'][0]
    assert (stored['seen'], stored['fired']) == (3, True)
    assert [e['result'] for e in _nvml_simulator.read_call_log(path)] == [
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
    with pytest.raises(_nvml_simulator.SimulatorError) as failure:
        _nvml_simulator.simulate_gpu_reset(path, 0)
    assert 'NVML_ERROR_UNKNOWN' in str(failure.value)
    _nvml_simulator.simulate_gpu_reset(path, 0)
    assert mutations(path) == ['simulate_gpu_reset', 'simulate_gpu_reset']     # reads are not logged
    state = _nvml_simulator.load_state(path)
    state['faults'] = [{'call': 'nvmlInitWithFlags', 'error': 'NVML_ERROR_DRIVER_NOT_LOADED'}]
    _nvml_simulator.write_state(path, state)
    _nvml_simulator.install(pynvml, path)
    assert error_of(pynvml.nvmlInit) == E.NVML_ERROR_DRIVER_NOT_LOADED
    pynvml.nvmlInit()


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
    assert _nvml_simulator.read_call_log(path) == []
    new_gi = create_gi(handle, 9, 4)
    new_ci = create_ci(new_gi, 0, 1)
    pynvml.nvmlComputeInstanceDestroy(new_ci)
    pynvml.nvmlGpuInstanceDestroy(new_gi)
    log = _nvml_simulator.read_call_log(path)
    assert [(e['call'], e['gpu'], e['args'], e['result'], e.get('created')) for e in log] == [
        ('nvmlDeviceCreateGpuInstanceWithPlacement', 0, {'profile_id': 9, 'start': 4}, 'NVML_SUCCESS', {'gpu_instance_id': 2, 'start': 4}),
        ('nvmlGpuInstanceCreateComputeInstanceWithPlacement', 0, {'gpu_instance_id': 2, 'profile_id': 0, 'start': 1}, 'NVML_SUCCESS',
         {'compute_instance_id': 0, 'start': 1}),
        ('nvmlComputeInstanceDestroy', 0, {'gpu_instance_id': 2, 'compute_instance_id': 0}, 'NVML_SUCCESS', None),
        ('nvmlGpuInstanceDestroy', 0, {'gpu_instance_id': 2}, 'NVML_SUCCESS', None)]
    assert all(e['call'] in _nvml_simulator.MUTATING_CALLS for e in log)


def test_a_fresh_install_and_another_process_read_back_the_same_host(sim):
    path = sim([{'model': 'A100-SXM4-40GB', 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = create_gi(handle, 14, 2)
    create_ci(gi, 0, 1)
    create_gi(handle, 19, 0)
    stored = json.load(open(path))['gpus'][0]
    assert [(g['id'], g['profile'], g['start']) for g in stored['gpu_instances']] == [(1, '2g.10gb', 2), (2, '1g.5gb', 0)]
    assert stored['gpu_instances'][0]['compute_instances'] == [{'id': 0, 'profile': '1c.2g.10gb', 'start': 1, 'pids': []}]
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
    assert seen == [[1, 14, 2, 2], [2, 19, 0, 1]]


def test_concurrent_processes_see_one_consistent_host(tmp_path):
    path = str(tmp_path / 'host.json')
    _nvml_simulator.write_state(path, {'gpus': [{'model': 'H100-SXM5-80GB', 'mig': ENABLED}]})
    script = textwrap.dedent('''
        import ctypes, sys
        import pynvml
        from gpufleet_nvml_sim import library as _nvml_simulator
        _nvml_simulator.install(pynvml, sys.argv[1])
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        for start in sys.argv[2:]:
            placement = pynvml.c_nvmlGpuInstancePlacement_t(); placement.start = int(start)
            pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 19, ctypes.byref(placement))
    ''')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    workers = [subprocess.Popen([sys.executable, '-c', script, path] + starts, env=env) for starts in (['0', '2', '4'], ['1', '3', '5'])]
    assert [w.wait() for w in workers] == [0, 0]
    instances = _nvml_simulator.load_state(path)['gpus'][0]['gpu_instances']
    assert sorted(g['start'] for g in instances) == [0, 1, 2, 3, 4, 5]
    assert sorted(g['id'] for g in instances) == [1, 2, 3, 4, 5, 6]
    assert len(_nvml_simulator.read_call_log(path)) == 6


def test_ids_are_assigned_stably_and_kept_once_written(tmp_path):
    path = str(tmp_path / 'host.json')
    with open(path, 'w') as handle:
        json.dump({'gpus': [{'model': 'H200', 'mig': ENABLED, 'gpu_instances': [
            {'profile': '1g.18gb', 'start': 3, 'id': 1}, {'profile': '2g.35gb', 'start': 4},
            {'profile': 'MIG 1g.18gb', 'compute_instances': [{'profile': '1g.18gb'}]}]}]}, handle)
    first = _nvml_simulator.load_state(path)
    assert _nvml_simulator.load_state(path) == first
    instances = first['gpus'][0]['gpu_instances']
    assert [(g['id'], g['profile'], g['start']) for g in instances] == [(1, '1g.18gb', 3), (2, '2g.35gb', 4), (3, '1g.18gb', 6)]
    assert instances[2]['compute_instances'][0]['id'] == 0 and instances[2]['compute_instances'][0]['start'] == 0


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
    ({'model': 'A30', 'pids': ['x']}, 'pids must be a list of positive integers'),
])
def test_bad_state_files_name_the_bad_entry(tmp_path, gpu, message):
    path = str(tmp_path / 'bad.json')
    with open(path, 'w') as handle:
        json.dump({'gpus': [gpu]}, handle)
    with pytest.raises(_nvml_simulator.SimulatorError) as failure:
        _nvml_simulator.load_state(path)
    assert message in str(failure.value)
    _nvml_simulator.install(pynvml, path)
    try:
        with pytest.raises(_nvml_simulator.SimulatorError):
            pynvml.nvmlInit()
    finally:
        _nvml_simulator.uninstall(pynvml)


@pytest.mark.parametrize('fault, message', [
    ({'call': 'nvmlDeviceFrobnicate'}, "faults[0]: unknown call 'nvmlDeviceFrobnicate'"),
    ({'call': 'nvmlDeviceSetMigMode', 'error': 'NVML_ERROR_NOPE'}, 'unknown error'),
    ({'call': 'nvmlDeviceSetMigMode', 'nth': 0}, 'nth must be an integer >= 1'),
])
def test_bad_faults_are_clear_errors(tmp_path, fault, message):
    path = str(tmp_path / 'bad.json')
    with pytest.raises(_nvml_simulator.SimulatorError) as failure:
        _nvml_simulator.write_state(path, {'gpus': [{'model': 'A30'}], 'faults': [fault]})
    assert message in str(failure.value)


def test_set_pids_helper(tmp_path):
    path = str(tmp_path / 'host.json')
    _nvml_simulator.write_state(path, {'gpus': [{'model': 'A30', 'mig': ENABLED, 'gpu_instances': [
        {'profile': '4g.24gb', 'start': 0, 'compute_instances': [{'profile': '4g.24gb', 'start': 0}]}]}]})
    _nvml_simulator.set_pids(path, 0, 1, 0, [10, 11])
    _nvml_simulator.set_pids(path, 0, None, None, [12])
    gpu = _nvml_simulator.load_state(path)['gpus'][0]
    assert gpu['pids'] == [12] and gpu['gpu_instances'][0]['compute_instances'][0]['pids'] == [10, 11]
    with pytest.raises(_nvml_simulator.SimulatorError):
        _nvml_simulator.set_pids(path, 0, 9, 0, [1])
    assert _nvml_simulator.read_call_log(path) == []
