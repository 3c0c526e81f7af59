# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-model tables: internally consistent, faithful to the reference, and answered as such through pynvml."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pynvml
import pytest

import gpufleet_nvml_sim as sim_api
from gpufleet_nvml_sim import models
from gpufleet_nvml_sim.models import MODELS

from ansible_collections.gpufleet.mig.tests.unit.simulator.helpers import (
    ALL_MODELS,
    DISTINCT_TABLES,
    ENABLED,
    address,
    error_of,
    gi_placements,
    profile_row,
)

E = pynvml


@pytest.mark.parametrize('model', ALL_MODELS)
def test_model_table_is_consistent(model):
    assert models.model_problems(model) == []


def _broken(monkeypatch, base, **changes):
    """Register a copy of ``base`` with ``changes`` (rows replaced by name) as model 'BROKEN'."""
    table = dict(models._TABLES[base])
    rows = dict((row[2], row) for row in table['gpu_instance_profiles'])
    for name, row in changes.pop('rows', {}).items():
        rows[name] = row
    table['gpu_instance_profiles'] = tuple(rows.values())
    table.update(changes)
    monkeypatch.setitem(MODELS, 'BROKEN', models._build('BROKEN', table))
    return models.model_problems('BROKEN')


@pytest.mark.parametrize('base, changes, problem', [
    ('H200', {'rows': {'3g.71gb': (models.ENUM_3_SLICE, 9, '3g.71gb', 3, 4, 40000, 60, 2, (0, 4), (3, 3, 0, 3, 0))}},
     'BROKEN 3g.71gb: memorySizeMB 40000 gives 53gb by the name rule'),
    ('H200', {'rows': {'2g.35gb': (models.ENUM_2_SLICE, 14, '2g.35gb', 2, 2, 33024, 32, 4, (0, 2, 4), (2, 2, 0, 2, 0))}},
     'BROKEN 2g.35gb: max count outside 1..3 placements'),
    ('H200', {'rows': {'2g.35gb': (models.ENUM_2_SLICE, 14, '2g.35gb', 2, 2, 33024, 32, 3, (0, 3, 4), (2, 2, 0, 2, 0))}},
     'BROKEN 2g.35gb: placement 3:2 does not fit'),
    ('H200', {'rows': {'1g.18gb+me': (models.ENUM_1_SLICE, 20, '1g.18gb+me', 1, 1, 16384, 16, 1, (0,), (1, 1, 0, 1, 1))}},
     'BROKEN 1g.18gb+me: enum 0 does not fit the suffix'),
    ('H200', {'rows': {'1g.35gb': (models.ENUM_1_SLICE, 15, '1g.35gb', 1, 2, 33024, 26, 4, (0, 2, 4, 6), (1, 1, 0, 1, 0))}},
     'BROKEN: duplicate enums'),
    ('RTX-PRO-6000-SERVER', {'rows': {'1g.24gb-me': (models.ENUM_1_SLICE_NO_ME, 67, '1g.24gb-me', 1, 1, 24187, 46, 4, (0, 1, 2, 3),
                                                     (1, 1, 0, 0, 0))}},
     'BROKEN 1g.24gb-me: a -me profile has media engines'),
    ('RTX-PRO-6000-SERVER', {'rows': {'2g.48gb+me.all': (models.ENUM_2_SLICE_ALL_ME, 64, '2g.48gb+me.all', 2, 2, 48517, 94, 1, (0, 2),
                                                         (2, 2, 2, 2, 1))}},
     "BROKEN 2g.48gb+me.all: a +me.all profile has (2, 2, 2, 1), not the GPU's media engines (4, 4, 4, 1)"),
    ('RTX-PRO-6000-SERVER', {'rows': {'1g.24gb+gfx': (models.ENUM_1_SLICE_GFX, 47, '1g.24gb+gfx', 1, 1, 24187, 40, 4, (0, 1, 2, 3),
                                                      (1, 1, 1, 1, 0))}},
     'differ in memory or SMs'),
    ('A30', {'pci_device_ids': (0x20B71002,)}, 'BROKEN: PCI device id 0x20B71002 is not NVIDIA'),
])
def test_model_problems_name_what_is_wrong(monkeypatch, base, changes, problem):
    found = _broken(monkeypatch, base, **changes)
    assert any(problem in p for p in found), found


def test_name_rule_matches_known_profiles():
    assert models.name_rule_gb(9728, 81920) == 10
    assert models.name_rule_gb(71168, 143771) == 71       # 70.5 rounds away from zero, as in Go
    assert models.name_rule_gb(20992, 183359) == 23       # 22.5 likewise
    assert models.name_rule_gb(22144, 95830) == 24        # 23.5 likewise
    assert models.name_rule_gb(24187, 97887) == 24


def test_unknown_model_lists_the_valid_ones():
    with pytest.raises(models.UnknownModel) as failure:
        models.get_model('V100')
    assert 'V100' in str(failure.value) and 'RTX-PRO-6000-SERVER' in str(failure.value) and 'L40S' in str(failure.value)


# The figures of the published `nvidia-smi mig -lgip` transcripts ([REF] in models.py), as the tables hold them.
@pytest.mark.parametrize('model, name, memory_mib, sms', [
    ('H200', '1g.18gb', 16384, 16), ('H200', '1g.35gb', 33024, 26), ('H200', '2g.35gb', 33024, 32),
    ('H200', '3g.71gb', 71168, 60), ('H200', '4g.71gb', 71168, 64), ('H200', '7g.141gb', 143104, 132),
    ('B200', '1g.23gb', 20992, 18), ('B200', '1g.45gb', 45312, 30), ('B200', '2g.45gb', 45312, 36),
    ('B200', '3g.90gb', 91136, 70), ('B200', '4g.90gb', 91136, 72), ('B200', '7g.180gb', 182784, 148),
    ('H100-NVL', '1g.12gb', 11008, 16), ('H100-NVL', '1g.24gb', 22144, 26), ('H100-NVL', '3g.47gb', 47488, 60),
    ('H100-NVL', '7g.94gb', 95360, 132), ('A100-SXM4-80GB', '7g.80gb', 80640, 98),
    ('GH200-144GB', '1g.18gb', 17920, 16), ('GH200-144GB', '1g.36gb', 36096, 26), ('GH200-144GB', '2g.36gb', 36096, 32),
    ('GB200', '1g.23gb', 22528, 18), ('GB200', '1g.47gb', 46592, 32), ('GB200', '2g.47gb', 46592, 38),
    ('RTX-PRO-6000-SERVER', '1g.24gb', 24187, 46), ('RTX-PRO-6000-SERVER', '2g.48gb', 48517, 94),
    ('RTX-PRO-6000-SERVER', '4g.96gb', 97280, 188),
])
def test_tables_carry_the_reference_corrections(model, name, memory_mib, sms):
    row = profile_row(model, name)
    assert (row['memory_mib'], row['multiprocessors']) == (memory_mib, sms)


def test_engine_corrections():
    assert [profile_row('B200', n)['copy_engines'] for n in ('1g.23gb', '2g.45gb')] == [2, 4]
    # MIG User Guide, A30 table: 1g.6gb has no decoder; only 1g.6gb+me gets one
    assert (profile_row('A30', '1g.6gb')['decoders'], profile_row('A30', '1g.6gb+me')['decoders']) == (0, 1)
    assert MODELS['H200']['memory_total_mib'] == 143771 and MODELS['B200']['memory_total_mib'] == 183359


@pytest.mark.parametrize('model, ids', [
    ('H200', {'1g.18gb': 19, '1g.18gb+me': 20, '1g.35gb': 15, '2g.35gb': 14, '3g.71gb': 9, '4g.71gb': 5, '7g.141gb': 0}),
    ('GB300', {'1g.35gb': 19, '1g.35gb+me': 20, '1g.70gb': 15, '2g.70gb': 14, '3g.139gb': 9, '4g.139gb': 5, '7g.278gb': 0}),
    ('A30', {'1g.6gb': 14, '1g.6gb+me': 21, '2g.12gb': 5, '2g.12gb+me': 6, '4g.24gb': 0}),
    ('RTX-PRO-6000-SERVER', {'1g.24gb': 14, '1g.24gb+me': 21, '1g.24gb+gfx': 47, '1g.24gb+me.all': 65, '1g.24gb-me': 67,
                             '2g.48gb': 5, '2g.48gb+gfx': 35, '2g.48gb+me.all': 64, '2g.48gb-me': 66, '4g.96gb': 0, '4g.96gb+gfx': 32}),
])
def test_profile_ids(model, ids):
    assert dict((p['name'], p['id']) for p in MODELS[model]['profiles']) == ids


@pytest.mark.parametrize('model, max_counts', [
    ('B300', {'1g.34gb': 7, '1g.34gb+me': 1, '1g.67gb': 4, '2g.67gb': 3, '3g.135gb': 2, '4g.135gb': 1, '7g.269gb': 1}),
    ('RTX-PRO-6000-SERVER', {'1g.24gb': 4, '1g.24gb+me': 1, '1g.24gb+gfx': 4, '1g.24gb+me.all': 1, '1g.24gb-me': 4,
                             '2g.48gb': 2, '2g.48gb+gfx': 2, '2g.48gb+me.all': 1, '2g.48gb-me': 2, '4g.96gb': 1, '4g.96gb+gfx': 1}),
])
def test_max_counts(model, max_counts):
    assert dict((p['name'], p['max_count']) for p in MODELS[model]['profiles']) == max_counts


# ---- identity through pynvml, every model --------------------------------------------------------------------

@pytest.mark.parametrize('model, nvml_name, pci_device_id', [
    ('A100-PCIE-40GB', 'NVIDIA A100-PCIE-40GB', 0x20F110DE), ('A800-40GB-ACTIVE', 'NVIDIA A800 40GB Active', 0x20F610DE),
    ('A100-PCIE-80GB', 'NVIDIA A100 80GB PCIe', 0x20B510DE), ('A800-SXM4-80GB', 'NVIDIA A800-SXM4-80GB', 0x20F310DE),
    ('A800-80GB-PCIE', 'NVIDIA A800 80GB PCIe', 0x20F510DE), ('H100-PCIE-80GB', 'NVIDIA H100 PCIe', 0x233110DE),
    ('H800-PCIE-80GB', 'NVIDIA H800 PCIe', 0x232210DE), ('H800-SXM5-80GB', 'NVIDIA H800', 0x232410DE),
    ('H800-NVL', 'NVIDIA H800 NVL', 0x233A10DE), ('H20', 'NVIDIA H20', 0x232910DE), ('H200-NVL', 'NVIDIA H200 NVL', 0x233B10DE),
    ('GH200-144GB', 'NVIDIA GH200 144G HBM3e', 0x234810DE), ('GB200', 'NVIDIA GB200', 0x294110DE),
    ('B300', 'NVIDIA B300 SXM6 AC', 0x318210DE), ('GB300', 'NVIDIA GB300', 0x31C210DE),
    ('RTX-PRO-6000-SERVER', 'NVIDIA RTX PRO 6000 Blackwell Server Edition', 0x2BB510DE), ('L40S', 'NVIDIA L40S', 0x26B910DE),
])
def test_new_models_are_named_as_the_driver_names_them(model, nvml_name, pci_device_id):
    assert (MODELS[model]['nvml_name'], MODELS[model]['pci_device_id']) == (nvml_name, pci_device_id)


@pytest.mark.parametrize('model', ALL_MODELS)
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
    assert pynvml.nvmlDeviceGetPciInfo(first).pciDeviceId == table['pci_device_ids'][0]
    assert pynvml.nvmlDeviceGetIndex(second) == 1
    uuids = [pynvml.nvmlDeviceGetUUID(h) for h in (first, second)]
    buses = [pynvml.nvmlDeviceGetPciInfo(h).busId for h in (first, second)]
    assert uuids[0].startswith('GPU-') and len(set(uuids)) == 2 and len(set(buses)) == 2
    assert buses[0] == '00000000:07:00.0'
    assert address(pynvml.nvmlDeviceGetHandleByUUID(uuids[1])) == address(second)
    # generated identities are stable: a fresh load derives the same ones
    sim_api.install(pynvml, path)
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(1)) == uuids[1]
    assert error_of(pynvml.nvmlDeviceGetHandleByIndex, 2) == E.NVML_ERROR_INVALID_ARGUMENT
    assert error_of(pynvml.nvmlDeviceGetHandleByUUID, 'GPU-nope') == E.NVML_ERROR_NOT_FOUND


def test_a_gpu_can_report_another_pci_id_of_its_model(sim):
    sim([{'model': 'A100-PCIE-40GB', 'pci_device_id': '0x20B110DE'}, {'model': 'GB300', 'pci_device_id': 0x31C310DE}])
    assert pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).pciDeviceId == 0x20B110DE
    assert pynvml.nvmlDeviceGetPciInfo(pynvml.nvmlDeviceGetHandleByIndex(1)).pciDeviceId == 0x31C310DE


def test_uuid_and_bus_id_from_the_file_win(sim):
    sim([{'model': 'A30', 'uuid': 'GPU-11111111-2222-3333-4444-555555555555', 'pci_bus_id': '00000000:B7:00.0'}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetUUID(handle) == 'GPU-11111111-2222-3333-4444-555555555555'
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    assert (pci.busId, pci.busIdLegacy, pci.bus) == ('00000000:B7:00.0', '0000:B7:00.0', 0xB7)
    assert address(pynvml.nvmlDeviceGetHandleByPciBusId('00000000:B7:00.0')) == address(handle)


# ---- GPU instance profiles through pynvml, one model per table --------------------------------------------------

@pytest.mark.parametrize('model', DISTINCT_TABLES)
def test_gpu_instance_profiles_as_the_table_says(sim, model):
    sim([{'model': model, 'mig': ENABLED}])
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
        if row['media_extensions'] or row['all_media_engines']:
            assert info.ofaCount == 1
        v1 = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum, version=1)
        assert (v1.id, v1.memorySizeMB, v1.instanceCount) == (row['id'], row['memory_mib'], row['max_count'])
        assert pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(handle, row['id']).name == 'MIG ' + row['name']
        assert gi_placements(handle, row['id']) == [(start, row['memory_slices']) for start in row['starts']]
    assert error_of(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT) == \
        E.NVML_ERROR_INVALID_ARGUMENT
