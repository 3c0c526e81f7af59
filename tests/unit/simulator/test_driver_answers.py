# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the simulator answers as real drivers do (issue 18, section 1), through the real pynvml wrappers:
placement sizes, the placement count as an output, GPU clients that hold MIG devices, driver-dependent names
and memory, subsystem ids, the A30's 1g decoders, and the models of section 2."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes

import pynvml
import pytest

import gpufleet_nvml_sim as sim_api
from gpufleet_nvml_sim import models
from gpufleet_nvml_sim.models import MODELS

from ansible_collections.gpufleet.mig.tests.unit.simulator.helpers import (
    ENABLED,
    create_ci,
    create_gi,
    error_of,
    gi_info,
    gi_placements,
    raw,
    reinit,
)

E = pynvml


def profile_infos(handle):
    """{name: (id, memorySizeMB, decoders)} of every GPU instance profile, read as the backend does."""
    found = {}
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
        except pynvml.NVMLError:
            continue
        found[info.name.decode() if isinstance(info.name, bytes) else info.name] = (info.id, info.memorySizeMB, info.decoderCount)
    return found


# ---- placements -----------------------------------------------------------------------------------------------------

def test_a_placement_whose_size_is_not_the_profiles_is_refused(sim):
    path = sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    for size in (0, 1, 8):
        assert error_of(create_gi, handle, 9, 4, size=size) == E.NVML_ERROR_INVALID_ARGUMENT      # 3g: size 4
    assert gi_info(create_gi(handle, 9, 4, size=4))[2:] == (4, 4)
    assert [(e['args'].get('size'), e['result']) for e in sim_api.read_call_log(path)] == [
        (0, 'NVML_ERROR_INVALID_ARGUMENT'), (1, 'NVML_ERROR_INVALID_ARGUMENT'), (8, 'NVML_ERROR_INVALID_ARGUMENT'), (4, 'NVML_SUCCESS')]


@pytest.mark.parametrize('count_in', [0, 1, 99])
def test_the_placement_count_is_an_output_only(sim, count_in):
    sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    array = (pynvml.c_nvmlGpuInstancePlacement_t * 8)()
    count = ctypes.c_uint(count_in)
    assert raw('nvmlDeviceGetGpuInstancePossiblePlacements_v2')(handle, 19, array, ctypes.byref(count)) == E.NVML_SUCCESS
    assert count.value == 7 and [array[i].start for i in range(7)] == list(range(7))
    short = (pynvml.c_nvmlGpuInstancePlacement_t * 2)()          # an array too small is still refused
    assert raw('nvmlDeviceGetGpuInstancePossiblePlacements_v2')(handle, 19, short, ctypes.byref(count)) == \
        E.NVML_ERROR_INSUFFICIENT_SIZE and count.value == 7
    gi = create_gi(handle, 0, 0)
    ci_array = (pynvml.c_nvmlComputeInstancePlacement_t * 8)()
    count = ctypes.c_uint(count_in)
    assert raw('nvmlGpuInstanceGetComputeInstancePossiblePlacements')(gi, 0, ci_array, ctypes.byref(count)) == E.NVML_SUCCESS
    assert count.value == 7


# ---- GPU clients holding MIG devices (DCGM issues 95 and 276) ------------------------------------------------------

def test_a_client_holding_mig_devices_refuses_destroys_with_no_process_listed(sim):
    path = sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'mig_clients': ['dcgm'], 'gpu_instances': [
        {'id': 1, 'profile': '3g.40gb', 'start': 0, 'compute_instances': [{'profile': '3g.40gb'}]},
        {'id': 2, 'profile': '3g.40gb', 'start': 4}]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, 1)
    ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0)
    assert error_of(pynvml.nvmlComputeInstanceDestroy, ci) == E.NVML_ERROR_IN_USE
    assert error_of(pynvml.nvmlGpuInstanceDestroy, pynvml.nvmlDeviceGetGpuInstanceById(handle, 2)) == E.NVML_ERROR_IN_USE
    device = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
    assert pynvml.nvmlDeviceGetComputeRunningProcesses(device) == [] and pynvml.nvmlDeviceGetComputeRunningProcesses(handle) == []
    with pytest.raises(sim_api.SimulatorError, match=r"clients \['dcgm'\]"):
        sim_api.simulate_gpu_reset(path, 0)
    sim_api.set_mig_clients(path, 0, [])            # the client stopped: destroys go through
    reinit()
    pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert [e['result'] for e in sim_api.read_call_log(path)] == [
        'NVML_ERROR_IN_USE', 'NVML_ERROR_IN_USE', 'NVML_ERROR_IN_USE', 'NVML_SUCCESS', 'NVML_SUCCESS']


def test_mig_clients_are_validated(tmp_path):
    with pytest.raises(sim_api.SimulatorError, match='clients must be a list of names'):
        sim_api.write_state(str(tmp_path / 'h.json'), {'gpus': [{'model': 'A30', 'mig_clients': 'dcgm'}]})
    with pytest.raises(sim_api.SimulatorError, match='set_mig_clients: no GPU 3'):
        path = str(tmp_path / 'h.json')
        sim_api.write_state(path, {'gpus': [{'model': 'A30'}]})
        sim_api.set_mig_clients(path, 3, [])


# ---- names and memory change with the driver branch ------------------------------------------------------------------

@pytest.mark.parametrize('model, driver, name, memory_mib', [
    ('A100-SXM4-80GB', '535.183.01', 'MIG 3g.39gb', 40192), ('A100-SXM4-80GB', '545.29.06', 'MIG 3g.39gb', 40192),
    ('A100-SXM4-80GB', '550.54.15', 'MIG 3g.40gb', 40192), ('A100-PCIE-80GB', '535.183.01', 'MIG 3g.39gb', 40192),
    ('B200', '565.57.01', 'MIG 1g.23gb', 22528), ('B200', '580.95.05', 'MIG 1g.23gb', 20992),
    ('GB200', '570.86.15', 'MIG 1g.24gb', 20480), ('GB200', '580.95.05', 'MIG 1g.23gb', 22528),
    ('RTX-PRO-6000-SERVER', '575.51.03', 'MIG 1g.24gb', 23675), ('RTX-PRO-6000-SERVER', '580.95.05', 'MIG 1g.24gb', 24187),
])
def test_the_driver_branch_sets_names_and_memory(sim, model, driver, name, memory_mib):
    sim([{'model': model, 'mig': ENABLED}], driver_version=driver)
    infos = profile_infos(pynvml.nvmlDeviceGetHandleByIndex(0))
    assert infos[name][1] == memory_mib


def test_a_state_file_names_instances_as_its_driver_does(sim, tmp_path):
    path = sim([{'model': 'A100-SXM4-80GB', 'mig': ENABLED, 'gpu_instances': [
        {'profile': '3g.39gb', 'start': 0, 'compute_instances': [{'profile': '1c.3g.39gb'}]}]}], driver_version='535.183.01')
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)) == \
        'NVIDIA A100-SXM4-80GB MIG 1c.3g.39gb'
    with pytest.raises(sim_api.SimulatorError, match="unknown GPU instance profile '3g.39gb'"):
        sim_api.write_state(path, dict(sim_api.load_state(path), driver_version='580.95.05'))


def test_every_driver_variant_is_a_rename_within_one_shape():
    for key, model in MODELS.items():
        assert not models._variant_problems(model), key
    broken = dict(MODELS['GB200'], key='GB200', driver_variants=((0, 579, {'1g.23gb': ('2g.24gb', None)}),))
    assert 'is not a rename within one shape' in models._variant_problems(broken)[0]


# ---- subsystem ids --------------------------------------------------------------------------------------------------

def test_gpus_report_a_subsystem_id(sim):
    sim([{'model': 'H100-SXM5-80GB'}, {'model': 'H100-SXM5-80GB', 'pci_subsystem_id': '0x16C010DE'}, {'model': 'L40S'}])
    ids = [pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).pciSubSystemId for i in range(3)]
    assert ids == [0x16C110DE, 0x16C010DE, MODELS['L40S']['pci_subsystem_id']]
    assert all(i & 0xFFFF == 0x10DE for i in ids)


def test_every_model_has_a_subsystem_id_of_nvidia():
    for key, model in MODELS.items():
        assert model['pci_subsystem_id'] & 0xFFFF == 0x10DE and model['pci_subsystem_id'] >> 16, key


@pytest.mark.parametrize('value', ['0xZZ', -1, 2 ** 32, True])
def test_a_bad_subsystem_id_is_refused(tmp_path, value):
    with pytest.raises(sim_api.SimulatorError, match='pci_subsystem_id'):
        sim_api.write_state(str(tmp_path / 'h.json'), {'gpus': [{'model': 'A30', 'pci_subsystem_id': value}]})


# ---- compute instance profile ids in state files -----------------------------------------------------------------

def test_a_state_file_can_name_the_variant_profile_and_only_one_of_its_size(sim, tmp_path):
    path = sim([{'model': 'H100-SXM5-80GB', 'mig': ENABLED, 'gpu_instances': [
        {'id': 3, 'profile': '1g.20gb', 'start': 0, 'compute_instances': [{'profile': '1g.20gb', 'profile_id': 7}]}]}])
    gi = pynvml.nvmlDeviceGetGpuInstanceById(pynvml.nvmlDeviceGetHandleByIndex(0), 3)
    assert pynvml.nvmlComputeInstanceGetInfo(pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0)).profileId == 7
    assert error_of(create_ci, gi, 0, 0) == E.NVML_ERROR_INSUFFICIENT_RESOURCES        # the pair shares one slice
    state = sim_api.load_state(path)
    state['gpus'][0]['gpu_instances'][0]['compute_instances'][0]['profile_id'] = 8
    with pytest.raises(sim_api.SimulatorError, match='compute instance profile id 8 is not one of 1g.20gb'):
        sim_api.write_state(path, state)


# ---- A30 1g.6gb: no decoder (MIG User Guide) -----------------------------------------------------------------------

def test_the_a30_1g_has_no_decoder_and_its_media_extension_one(sim):
    sim([{'model': 'A30', 'mig': ENABLED}])
    infos = profile_infos(pynvml.nvmlDeviceGetHandleByIndex(0))
    assert (infos['MIG 1g.6gb'][2], infos['MIG 1g.6gb+me'][2]) == (0, 1)


# ---- section 2: the models added -------------------------------------------------------------------------------------

@pytest.mark.parametrize('model, pci_id, names', [
    ('H100-SXM5-94GB', 0x233910DE, ('1g.12gb', '3g.47gb', '7g.94gb')),
    ('H100-96GB', 0x233D10DE, ('1g.12gb', '3g.48gb', '7g.96gb')),
    ('PG506-96GB', 0x20B610DE, ('1g.12gb', '3g.48gb', '7g.96gb')),
    ('RTX-PRO-6000-WORKSTATION', 0x2BB110DE, ('1g.24gb', '2g.48gb', '4g.96gb')),
    ('RTX-PRO-6000-MAX-Q', 0x2BB410DE, ('1g.24gb', '2g.48gb', '4g.96gb')),
    ('RTX-PRO-5000', 0x2BB310DE, ('1g.24gb', '2g.48gb')),
])
def test_the_added_models_answer_through_pynvml(sim, model, pci_id, names):
    sim([{'model': model, 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetPciInfo(handle).pciDeviceId == pci_id
    offered = profile_infos(handle)
    assert all('MIG ' + name in offered for name in names)
    whole = max(MODELS[model]['profiles'], key=lambda p: p['memory_slices'])
    assert gi_info(create_gi(handle, whole['id'], 0))[3] == MODELS[model]['memory_slices']


def test_the_rtx_pro_5000_splits_in_two(sim):
    sim([{'model': 'RTX-PRO-5000', 'mig': ENABLED}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    first, second = (gi_info(create_gi(handle, 14, s)) for s in (0, 1))
    assert (first[2], second[2]) == (0, 1) and set((first[0], second[0])) == {1, 2}
    assert error_of(create_gi, handle, 0, 0) == E.NVML_ERROR_INSUFFICIENT_RESOURCES
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 2
    assert MODELS['PG506-96GB']['mig_mode_change'] == models.PENDING_UNTIL_RESET       # GA100: Ampere


# ---- issue 30: the 580 branch's answers on an H200, as make hw-check saw them (docs/hardware.md) ----------------------

H200_580 = '580.159.04'
EMPTY_PLACEMENT_IDS = [32, 35, 38, 47, 48, 64, 65, 66, 67, 72, 73]
H200_580_MEMORY = {'MIG 1g.18gb': 16384, 'MIG 1g.18gb+me': 16384, 'MIG 1g.35gb': 33280, 'MIG 2g.35gb': 33280,
                   'MIG 3g.71gb': 71424, 'MIG 4g.71gb': 71424, 'MIG 7g.141gb': 143360}


def profile_answers(handle):
    """{enum: profile name or NVML error code} of every enum pynvml knows."""
    found = {}
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
        except pynvml.NVMLError as exc:
            found[enum] = exc.value
        else:
            found[enum] = info.name.decode() if isinstance(info.name, bytes) else info.name
    return found


def placement_answers(handle):
    """{profile id: [(start, size)]} of every id 0..95 whose possible placements answer."""
    found = {}
    for profile_id in range(96):
        try:
            found[profile_id] = gi_placements(handle, profile_id)
        except pynvml.NVMLError as exc:
            assert exc.value == E.NVML_ERROR_NOT_SUPPORTED, profile_id
    return found


@pytest.mark.parametrize('mig', [{'current': 'disabled', 'pending': 'disabled'}, ENABLED])
def test_the_h200_on_driver_580_159_describes_its_profiles_with_mig_off_too(sim, mig):
    sim([{'model': 'H200', 'mig': mig}], driver_version=H200_580)
    answers = profile_answers(pynvml.nvmlDeviceGetHandleByIndex(0))
    offered = dict((enum, name) for enum, name in answers.items() if not isinstance(name, int))
    assert sorted(offered.values()) == sorted(H200_580_MEMORY)
    infos = profile_infos(pynvml.nvmlDeviceGetHandleByIndex(0))
    assert dict((name, infos[name][1]) for name in infos) == H200_580_MEMORY
    assert [enum for enum, name in answers.items() if name == E.NVML_ERROR_NOT_SUPPORTED] == \
        [enum for enum in range(models.ENUM_3_SLICE_GFX) if enum not in offered]
    assert answers[models.ENUM_3_SLICE_GFX] == E.NVML_ERROR_INVALID_ARGUMENT      # an enum that driver does not know


def test_the_default_driver_keeps_nvml_h_and_the_older_table(sim):
    sim([{'model': 'H200'}, {'model': 'H200', 'mig': ENABLED}])        # driver 580.95.05
    mig_off, mig_on = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
    assert set(profile_answers(mig_off).values()) == {E.NVML_ERROR_NOT_SUPPORTED}
    assert dict((name, info[1]) for name, info in profile_infos(mig_on).items()) == dict(
        H200_580_MEMORY, **{'MIG 1g.35gb': 33024, 'MIG 2g.35gb': 33024, 'MIG 3g.71gb': 71168, 'MIG 4g.71gb': 71168,
                            'MIG 7g.141gb': 143104})
    assert profile_answers(mig_on)[models.ENUM_3_SLICE_GFX] == E.NVML_ERROR_NOT_SUPPORTED
    assert sorted(placement_answers(mig_off)) == [0, 5, 9, 14, 15, 19, 20]


@pytest.mark.parametrize('driver, empty', [(H200_580, EMPTY_PLACEMENT_IDS), ('580.95.05', []), ('590.48.01', [])])
def test_ids_the_h200_lacks_answer_no_placement_on_driver_580_159(sim, driver, empty):
    sim([{'model': 'H200'}], driver_version=driver)
    answers = placement_answers(pynvml.nvmlDeviceGetHandleByIndex(0))
    assert sorted(i for i, found in answers.items() if not found) == empty
    assert answers[9] == [(0, 4), (4, 4)] and answers[15] == [(0, 2), (2, 2), (4, 2), (6, 2)]
    array = (pynvml.c_nvmlGpuInstancePlacement_t * 8)()
    count = ctypes.c_uint(5)
    placements = raw('nvmlDeviceGetGpuInstancePossiblePlacements_v2')
    for profile_id in empty:
        assert placements(pynvml.nvmlDeviceGetHandleByIndex(0), profile_id, array, ctypes.byref(count)) == E.NVML_SUCCESS
        assert count.value == 0


@pytest.mark.parametrize('driver, applies', [
    ('580.159.04', True), ('580.172.08', True), ('580.159', True), ('580.95.05', False), ('580.126.09', False),
    ('590.48.01', False), ('575.57.08', False), ('unknown', False)])
def test_the_h200_variant_covers_580_159_to_the_end_of_the_branch(driver, applies):
    variant = models.for_driver('H200', driver)
    assert (variant is not MODELS['H200']) is applies
    assert variant['profile_info_without_mig'] is applies
    assert (variant['empty_placement_ids'] == tuple(EMPTY_PLACEMENT_IDS)) is applies


def test_the_h200_580_memory_gives_the_same_names_by_nvidias_rule():
    variant = models.for_driver('H200', H200_580)
    for profile in variant['profiles']:
        gb = int(models.PROFILE_NAME.match(profile['name']).group('gb'))
        assert models.name_rule_gb(profile['memory_mib'], variant['memory_total_mib']) == gb, profile['name']


def test_a_driver_variant_with_unknown_answers_or_no_placement_for_an_offered_id_is_refused():
    broken = dict(MODELS['H200'], driver_variants=(((580, 159), 580, {}, {'profile_info_with_mig_off': True}),))
    assert models._variant_problems(broken) == ["H200: driver variant R580.159-R580 sets unknown answers ['profile_info_with_mig_off']"]
    offered = dict(MODELS['H200'], key='H200-TEST', driver_variants=((580, None, {}, {'empty_placement_ids': (9, 32)}),))
    models.MODELS['H200-TEST'] = offered
    try:
        assert models._variant_problems(offered) == ['H200-TEST: driver variant R580-Rnow answers no placement for the offered ids [9]']
    finally:
        del models.MODELS['H200-TEST']
