# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU instances through the real pynvml: what MIG mode hides, return codes, placement rules, media-engine
exclusivity, the driver's choice of placement and the GPU instance id of each placement slot."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes

import pynvml
import pytest

import gpufleet_nvml_sim as sim_api
from gpufleet_nvml_sim.models import MODELS

from ansible_collections.gpufleet.mig.tests.unit.simulator.helpers import (
    DISTINCT_TABLES,
    ENABLED,
    create_gi,
    error_of,
    gi_info,
    gi_instances,
    gi_placements,
    profile_row,
    raw,
)

E = pynvml


def expected_id_range(model, profile):
    """The id range of a size, written out per level: whole GPU 0, halves 1-2, quarters 3-6, eighths 7-14."""
    slices = MODELS[model]['memory_slices']
    ranges = {slices: range(0, 1), slices // 2: range(1, 3), slices // 4: range(3, 7), slices // 8: range(7, 15)}
    return ranges[profile['memory_slices']]


# ---- MIG mode hides the profiles ---------------------------------------------------------------------

@pytest.mark.parametrize('mig', [{'current': 'disabled', 'pending': 'disabled'}, {'current': 'disabled', 'pending': 'enabled'}])
@pytest.mark.parametrize('model', ['A100-SXM4-80GB', 'H200', 'RTX-PRO-6000-SERVER'])
def test_mig_disabled_hides_the_profiles_but_not_their_placements(sim, model, mig):
    path = sim([{'model': model, 'mig': mig}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for row in MODELS[model]['profiles']:
        for call, args in ((pynvml.nvmlDeviceGetGpuInstanceProfileInfo, (row['enum'],)),                 # ...InfoV
                           (pynvml.nvmlDeviceGetGpuInstanceProfileInfo, (row['enum'], 1)),               # v1 symbol
                           (pynvml.nvmlDeviceGetGpuInstanceProfileInfoById, (row['id'],)),               # ...ByIdV
                           (pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity, (row['id'],)),
                           (gi_instances, (row['id'],)),
                           (create_gi, (row['id'], row['starts'][0])),
                           (pynvml.nvmlDeviceCreateGpuInstance, (row['id'],))):
            assert error_of(call, handle, *args) == E.NVML_ERROR_NOT_SUPPORTED, (call, row['name'])
        assert gi_placements(handle, row['id']) == [(s, row['memory_slices']) for s in row['starts']]
    assert error_of(pynvml.nvmlDeviceGetGpuInstanceById, handle, 0) == E.NVML_ERROR_NOT_SUPPORTED
    assert error_of(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, 0) == E.NVML_ERROR_NOT_SUPPORTED
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 0        # SUCCESS with 0 while MIG is off
    assert set(e['result'] for e in sim_api.read_call_log(path)) == {'NVML_ERROR_NOT_SUPPORTED'}   # the refused creates


def test_unsupported_profile_ids_are_not_supported_and_bad_placements_invalid(sim):
    sim([{'model': 'H100-SXM5-80GB', 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for call, args in ((pynvml.nvmlDeviceGetGpuInstanceProfileInfoById, (21,)), (gi_placements, (21,)),
                       (pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity, (21,)), (gi_instances, (21,)),
                       (create_gi, (21, 0)), (pynvml.nvmlDeviceCreateGpuInstance, (12345,))):
        assert error_of(call, handle, *args) == E.NVML_ERROR_NOT_SUPPORTED, call
    assert error_of(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME) == \
        E.NVML_ERROR_NOT_SUPPORTED                                                     # an enum H100 does not offer
    assert error_of(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, 0x12) == E.NVML_ERROR_INVALID_ARGUMENT   # past the enums
    assert error_of(create_gi, handle, 14, 1) == E.NVML_ERROR_INVALID_ARGUMENT        # not a 2g start
    assert error_of(pynvml.nvmlDeviceGetGpuInstances, None, 14, None, None) == E.NVML_ERROR_INVALID_ARGUMENT


def test_profile_info_struct_version_is_checked(sim):
    sim([{'model': 'H100-SXM5-80GB', 'mig': ENABLED, 'gpu_instances': [{'profile': '7g.80gb', 'start': 0}]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
    info.version = 0x01000098
    assert raw('nvmlDeviceGetGpuInstanceProfileInfoV')(handle, 0, ctypes.byref(info)) == E.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    assert raw('nvmlDeviceGetGpuInstanceProfileInfoByIdV')(handle, 19, ctypes.byref(info)) == E.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    info.version = pynvml.nvmlGpuInstanceProfileInfo_v2
    assert raw('nvmlDeviceGetGpuInstanceProfileInfoV')(handle, 0, ctypes.byref(info)) == E.NVML_SUCCESS and info.id == 19
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, 0)
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


# ---- filling, overlaps, ids ------------------------------------------------------------------------------------

@pytest.mark.parametrize('model', DISTINCT_TABLES)
def test_every_profile_fills_up_to_its_max_count_with_ids_of_its_size_range(sim, model):
    sim([{'model': model, 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for row in MODELS[model]['profiles']:
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, row['id']) == row['max_count']
        created = [create_gi(handle, row['id'], start) for start in reversed(row['starts'])     # ids do not follow creation order
                   if pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, row['id'])]
        assert len(created) == row['max_count'], row['name']
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, row['id']) == 0
        used = [gi_info(gi)[2] for gi in created]
        free = [s for s in row['starts'] if s not in used]
        for start in free[:1] or row['starts'][:1]:
            assert error_of(create_gi, handle, row['id'], start) == E.NVML_ERROR_INSUFFICIENT_RESOURCES, row['name']
        assert error_of(pynvml.nvmlDeviceCreateGpuInstance, handle, row['id']) == E.NVML_ERROR_INSUFFICIENT_RESOURCES
        assert len(gi_instances(handle, row['id'])) == row['max_count']
        ids = [gi_info(gi)[0] for gi in created]
        assert len(set(ids)) == len(ids)
        for gi in created:
            gi_id, profile_id, start, size = gi_info(gi)
            assert (profile_id, size) == (row['id'], row['memory_slices'])
            assert gi_id in expected_id_range(model, row), (row['name'], start)
            pynvml.nvmlGpuInstanceDestroy(gi)
        assert gi_instances(handle, row['id']) == []


def test_gpu_instance_ids_keep_to_their_size_range_but_not_to_a_placement(sim):
    # DCGM issue 138: the same placements gave ids 9/10/3/2 on one GPU and 13/14/5/1 on the next.
    sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'gi_id_seed': 0}, {'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'gi_id_seed': 5}])
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1)]
    ids = []
    for handle in handles:
        ids.append([gi_info(create_gi(handle, profile_id, start))[0] for profile_id, start in ((19, 0), (19, 1), (14, 2), (9, 4))])
    assert ids[0] != ids[1]
    for found in ids:
        assert found[0] in range(7, 15) and found[1] in range(7, 15) and found[2] in range(3, 7) and found[3] in range(1, 3)
    # destroyed and created again at the same placement: another id of the range
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handles[0], ids[0][0])
    pynvml.nvmlGpuInstanceDestroy(gi)
    again = gi_info(create_gi(handles[0], 19, 0))[0]
    assert again in range(7, 15) and again != ids[0][0]


def test_explicit_ids_of_old_state_files_are_kept_and_new_ids_avoid_them(sim, tmp_path):
    # lowest-free era ids: 1g instances holding 3..6, the ids of the 2g range
    path = sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'gpu_instances': [
        {'id': 3 + s, 'profile': '1g.10gb', 'start': s} for s in range(4)] + [{'profile': '1g.10gb', 'start': 4}]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert sorted(gi_info(gi)[:3] for gi in gi_instances(handle, 19))[:4] == [(3 + s, 19, s) for s in range(4)]
    ids = [g['id'] for g in sim_api.load_state(path)['gpus'][0]['gpu_instances']]
    assert ids[:4] == [3, 4, 5, 6] and ids[4] in range(7, 15)
    one_g = gi_info(create_gi(handle, 19, 5))[0]
    assert one_g in range(7, 15) and one_g != ids[4]
    pynvml.nvmlGpuInstanceDestroy(pynvml.nvmlDeviceGetGpuInstanceById(handle, one_g))
    for gi in gi_instances(handle, 19):
        if gi_info(gi)[2] == 4:
            pynvml.nvmlGpuInstanceDestroy(gi)
    assert gi_info(create_gi(handle, 14, 4))[0] == 15         # every 2g id is taken: the first id past the tree


def test_large_ids_work_everywhere(sim):
    path = sim([{'model': 'A30', 'mig': ENABLED, 'gpu_instances': [
        {'id': 4000, 'profile': '2g.12gb', 'start': 0, 'compute_instances': [{'id': 4094, 'profile': '1c.2g.12gb', 'start': 1,
                                                                             'pids': [9]}]}]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, 4000)
    assert gi_info(gi) == (4000, 5, 0, 2)
    ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 4094)
    assert pynvml.nvmlComputeInstanceGetInfo(ci).id == 4094
    device = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
    assert (pynvml.nvmlDeviceGetGpuInstanceId(device), pynvml.nvmlDeviceGetComputeInstanceId(device)) == (4000, 4094)
    assert [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(device)] == [9]
    sim_api.set_pids(path, 0, 4000, 4094, [])
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert sim_api.load_state(path)['gpus'][0]['gpu_instances'] == []


@pytest.mark.parametrize('model', ['A100-SXM4-40GB', 'H200'])
def test_overlap_invalid_start_and_mixed_layouts(sim, model):
    sim([{'model': model, 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    ids = dict((p['enum'], p['id']) for p in MODELS[model]['profiles'])
    three, two, four, seven, one = ids[2], ids[1], ids[3], ids[4], ids[0]
    assert error_of(create_gi, handle, two, 1) == E.NVML_ERROR_INVALID_ARGUMENT     # not a 2g start
    assert error_of(create_gi, handle, three, 2) == E.NVML_ERROR_INVALID_ARGUMENT
    create_gi(handle, three, 4)
    assert error_of(create_gi, handle, two, 4) == E.NVML_ERROR_INSUFFICIENT_RESOURCES
    assert error_of(create_gi, handle, one, 6) == E.NVML_ERROR_INSUFFICIENT_RESOURCES
    assert error_of(create_gi, handle, seven, 0) == E.NVML_ERROR_INSUFFICIENT_RESOURCES
    create_gi(handle, four, 0)                         # 4g + 3g: memory slices 0-3 and 4-7
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, one) == 0


def test_driver_chosen_placements(sim):
    sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED}, {'model': 'H100-SXM5-80GB', 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    created = [gi_info(pynvml.nvmlDeviceCreateGpuInstance(handle, 19)) for dummy in range(7)]
    assert [start for dummy, dummy, start, dummy in created] == [6, 4, 5, 0, 1, 2, 3]
    assert sorted(gi_id for gi_id, dummy, dummy, dummy in created) == sorted(set(gi_id for gi_id, dummy, dummy, dummy in created))
    other = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert gi_info(pynvml.nvmlDeviceCreateGpuInstance(other, 14))[2] == 4
    assert gi_info(pynvml.nvmlDeviceCreateGpuInstance(other, 9))[2] == 0


# ---- media engines ------------------------------------------------------------------------------------------

@pytest.mark.parametrize('model', [m for m in DISTINCT_TABLES if any(p['media_extensions'] for p in MODELS[m]['profiles'])])
def test_one_media_extension_instance_per_gpu(sim, model):
    sim([{'model': model, 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    media = [p for p in MODELS[model]['profiles'] if p['media_extensions']]
    first = create_gi(handle, media[0]['id'], media[0]['starts'][0])
    for row in media:
        free = [s for s in row['starts'] if s >= 2]      # not overlapping the first one: refused for being +me
        assert error_of(create_gi, handle, row['id'], free[0]) == E.NVML_ERROR_INSUFFICIENT_RESOURCES
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, row['id']) == 0
    plain = [p for p in MODELS[model]['profiles'] if p['compute_slices'] == 1 and not p['suffix'] and p['memory_slices'] == 1][0]
    create_gi(handle, plain['id'], 1)                    # a plain 1g beside it is fine
    pynvml.nvmlGpuInstanceDestroy(first)
    create_gi(handle, media[-1]['id'], media[-1]['starts'][-1])


def rtx(name):
    return profile_row('RTX-PRO-6000-SERVER', name)['id']


def test_all_media_engines_leave_room_only_for_instances_without_media_engines(sim):
    sim([{'model': 'RTX-PRO-6000-SERVER', 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    every = create_gi(handle, rtx('1g.24gb+me.all'), 0)
    for name in ('1g.24gb', '1g.24gb+gfx', '1g.24gb+me', '2g.48gb', '2g.48gb+gfx', '2g.48gb+me.all'):
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, rtx(name)) == 0, name
        start = 2 if name.startswith('2g') else 1
        assert error_of(create_gi, handle, rtx(name), start) == E.NVML_ERROR_INSUFFICIENT_RESOURCES, name
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, rtx('1g.24gb-me')) == 3
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, rtx('2g.48gb-me')) == 1
    create_gi(handle, rtx('1g.24gb-me'), 1)
    create_gi(handle, rtx('2g.48gb-me'), 2)
    pynvml.nvmlGpuInstanceDestroy(every)
    create_gi(handle, rtx('1g.24gb'), 0)                 # the media engines are free again
    # the other way round: an instance holding media engines keeps +me.all out
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, rtx('1g.24gb+me.all')) == 0


def test_media_extended_and_graphics_instances_beside_plain_ones(sim):
    sim([{'model': 'RTX-PRO-6000-SERVER', 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    create_gi(handle, rtx('1g.24gb+me'), 0)
    create_gi(handle, rtx('1g.24gb+gfx'), 1)
    create_gi(handle, rtx('1g.24gb'), 2)
    create_gi(handle, rtx('1g.24gb-me'), 3)
    assert [gi_info(gi)[2] for gi in gi_instances(handle, rtx('1g.24gb+gfx'))] == [1]
    assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, rtx('1g.24gb+me.all')) == 0
    for gi in [g for name in ('1g.24gb+me', '1g.24gb+gfx', '1g.24gb', '1g.24gb-me') for g in gi_instances(handle, rtx(name))]:
        pynvml.nvmlGpuInstanceDestroy(gi)
    create_gi(handle, rtx('2g.48gb+me.all'), 0)
    assert error_of(create_gi, handle, rtx('1g.24gb+me'), 2) == E.NVML_ERROR_INSUFFICIENT_RESOURCES   # +me and +me.all share the OFA
    create_gi(handle, rtx('1g.24gb-me'), 2)
    create_gi(handle, rtx('1g.24gb-me'), 3)


@pytest.mark.parametrize('instances, message', [
    ([{'profile': '1g.24gb', 'start': 0}, {'profile': '2g.48gb+me.all', 'start': 2}],
     'gpu_instances[1]: 2g.48gb+me.all takes every media engine, but 1g.24gb holds some'),
    ([{'profile': '1g.24gb+me.all', 'start': 0}, {'profile': '4g.96gb', 'start': 0}],
     'gpu_instances[1]: 1g.24gb+me.all holds every media engine: only -me GPU instances fit beside it, not 4g.96gb'),
    ([{'profile': '1g.24gb+me.all', 'start': 0}, {'profile': '1g.24gb+gfx', 'start': 1}],
     'gpu_instances[1]: 1g.24gb+me.all holds every media engine: only -me GPU instances fit beside it, not 1g.24gb+gfx'),
])
def test_state_files_obey_the_media_rules(tmp_path, instances, message):
    with pytest.raises(sim_api.SimulatorError) as failure:
        sim_api.write_state(str(tmp_path / 'host.json'), {'gpus': [{'model': 'RTX-PRO-6000-SERVER', 'mig': ENABLED,
                                                                    'gpu_instances': instances}]})
    assert message in str(failure.value)
