# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hardware check (tests/hw/hw_check.py), with the NVML simulator posing as NVIDIA's library.

Its answers are read through the real pynvml wrappers from the simulator, and compared with the simulator's
tables: equal tables give no difference, a deliberately altered table gives exactly its differences. The
whole check (modules included) makes no mutating NVML call.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.mig.tests.unit.conftest import mutating_calls
from tests.hw import hw_check
from tests.hw.read_only import nvml_read_only

from .playbook import REPO, ansible_environment, ansible_settings, run_playbook
from .simulator import simulator_on_path

simulator = simulator_on_path()

SCRIPT = os.path.join(REPO, 'tests', 'hw', 'hw_check.py')
ENABLED = {'current': 'enabled', 'pending': 'enabled'}
THREE_G = {'profile': '3g.40gb', 'start': 4, 'compute_instances': [{'profile': '1c.3g.40gb', 'start': 0}]}


class Host(object):
    def __init__(self, path):
        self.path = path

    def calls(self):
        if not os.path.exists(self.path + '.calls.jsonl'):
            return []
        with open(self.path + '.calls.jsonl') as handle:
            return [json.loads(line) for line in handle if line.strip()]


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A100-80GB with MIG off, H100 with MIG on and one 3g instance (a 1c compute instance in it), an L40S."""
    path = str(tmp_path / 'gpus.json')
    with open(path, 'w') as handle:
        json.dump({'driver_version': '580.95.05', 'faults': [], 'gpus': [
            {'model': 'A100-SXM4-80GB'}, {'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED), 'gpu_instances': [THREE_G]},
            {'model': 'L40S'}]}, handle)
    monkeypatch.setenv(hw_check.SIMULATOR_ENV, path)
    return Host(path)


def read_answers():
    pynvml = hw_check.open_nvml('', simulated=True)
    try:
        return hw_check.read_nvml(pynvml)
    finally:
        pynvml.nvmlShutdown()


def test_nvml_answers_agree_with_the_simulators_own_tables(host):
    nvml = read_answers()
    a100, h100, l40s = nvml['gpus']
    # With MIG off: placements answer, profile infos do not (nvml.h).
    assert a100['placements_by_id']['9'] == [[0, 4], [4, 4]]
    assert set(answer.get('error') for answer in a100['profile_info_by_enum'].values()) == {'NVML_ERROR_NOT_SUPPORTED'}
    assert 'gpu_instances' in h100 and h100['gpu_instances'][0]['profile'] == 'MIG 3g.40gb'
    assert l40s['mig_mode'] == {'error': 'NVML_ERROR_NOT_SUPPORTED'}
    assert hw_check.compare(nvml, simulator.MODELS) == []
    assert mutating_calls(host) == []


def altered(models, key, change):
    models = dict(models)
    models[key] = copy.deepcopy(models[key])
    change(models[key])
    return models


def test_every_difference_from_an_altered_table_is_found(host):
    nvml = read_answers()

    def a100(model):
        model['nvml_name'] = 'NVIDIA A100 80GB (table)'
        one_g = [p for p in model['profiles'] if p['name'] == '1g.10gb'][0]
        one_g['starts'] = tuple(one_g['starts'][:-1])

    def h100(model):
        three_g = [p for p in model['profiles'] if p['name'] == '3g.40gb'][0]
        three_g['memory_mib'] += 1
        three_g['id'] = 8
        three_g['compute_placements'][1] = (0, 1)
        model['profiles'] = [p for p in model['profiles'] if p['name'] != '7g.80gb']

    models = altered(altered(simulator.MODELS, 'A100-SXM4-80GB', a100), 'H100-SXM5-80GB', h100)
    found = [(row['gpu'], row['item'], row['nvml'], row['simulator']) for row in hw_check.compare(nvml, models)]
    assert (0, 'name', 'NVIDIA A100-SXM4-80GB', 'NVIDIA A100 80GB (table)') in found
    assert (0, 'profile 19 placements: starts', [0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 4, 5]) in found
    assert (1, '3g.40gb: memory_mib', 40448, 40449) in found
    assert (1, '3g.40gb: id', 9, 8) in found
    assert (1, '3g.40gb: 1c starts', [0, 1, 2], [0, 1]) in found
    offered = sorted(p['enum'] for p in simulator.MODELS['H100-SXM5-80GB']['profiles'])
    refused = [enum for enum in range(18) if enum not in offered]
    assert (1, 'profile info answers', {'SUCCESS': offered, 'NVML_ERROR_NOT_SUPPORTED': refused},
            {'SUCCESS': [enum for enum in offered if enum != 4], 'NVML_ERROR_NOT_SUPPORTED': sorted(refused + [4])}) in found
    assert [row for row in found if row[1] == 'profile ids with placements']
    assert len(found) == 7, found
    # NVML answering a profile with MIG off, or a placement size unlike the table's, is a difference.
    answered = copy.deepcopy(nvml)
    one_g = simulator.MODELS['A100-SXM4-80GB']['profiles'][0]
    answered['gpus'][0]['profile_info_by_enum']['0'] = dict(
        dict((field, one_g[field]) for field in ('id', 'compute_slices', 'memory_mib', 'multiprocessors', 'max_count', 'copy_engines',
                                                 'decoders', 'encoders', 'jpegs', 'ofas')), name='MIG 1g.10gb')
    answered['gpus'][0]['placements_by_id']['0'] = [[0, 7]]
    found = [(row['gpu'], row['item'], row['nvml'], row['simulator']) for row in hw_check.compare(answered, simulator.MODELS)]
    assert found == [(0, 'profile 0 placements: size', [7], [8]),
                     (0, 'profile info answers with MIG off', {'SUCCESS': [0], 'NVML_ERROR_NOT_SUPPORTED': list(range(1, 18))},
                      {'NVML_ERROR_NOT_SUPPORTED': list(range(18))})]
    # A GPU no simulated model describes is a difference too.
    unknown = dict(nvml, gpus=[dict(nvml['gpus'][0], pci_device_id=0x12345678)])
    assert [row['item'] for row in hw_check.compare(unknown, simulator.MODELS)] == ['model']


def test_the_whole_check_prints_the_differences_and_changes_nothing(host, tmp_path, capsys, monkeypatch):
    for name, value in ansible_environment().items():
        if name.startswith('ANSIBLE_') or name == 'PATH':
            monkeypatch.setenv(name, value)

    def renamed(model):
        model['memory_total_mib'] += 1

    models = altered(simulator.MODELS, 'H100-SXM5-80GB', renamed)
    out = str(tmp_path / 'out')
    assert hw_check.main(['--simulated', '--out', out], models=models) == 1
    printed = capsys.readouterr().out
    assert '1 difference(s)' in printed and 'memory_total_mib' in printed and '81560' in printed
    lines = printed.splitlines()
    header = [line for line in lines if line.startswith('gpu ')][0]
    assert header.split() == ['gpu', 'model', 'item', 'nvml', 'simulator']
    for task in ('read-only guard', 'facts', 'mode GPU 0', 'instance GPU 1', 'layout'):
        assert [line for line in lines if line.startswith(task + ' ') and ' ok ' in line], printed
    assert 'mode GPU 2' not in printed      # the L40S has no MIG
    # The A100's MIG is off: the instance module refuses it, as expected there (a failure anywhere else).
    assert [line for line in lines if line.startswith('instance GPU 0 ') and ' refused as expected ' in line], printed
    for name in ('nvml.json', 'modules.json', 'differences.json'):
        assert os.path.getsize(os.path.join(out, name)) > 0
    with open(os.path.join(out, 'modules.json')) as handle:
        modules = json.load(handle)
    assert modules['mode GPU 0']['changed'] and modules['layout']['changed']     # check mode: would change
    assert 'forecast' in modules['layout']['gpus'][0]['checked_with']
    # Read-only: no NVML mutation, no reset, no file on the host's paths.
    assert mutating_calls(host) == []
    assert not os.path.exists(os.path.join(out, 'host', 'etc', 'layout.json'))


def test_no_library_is_one_line_and_fails(tmp_path):
    env = dict(os.environ)
    env.pop(hw_check.SIMULATOR_ENV, None)
    done = subprocess.run([sys.executable, SCRIPT, '--nvml-library', str(tmp_path / 'libnvidia-ml.so.1'), '--out', str(tmp_path)],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert done.returncode == 2
    assert len(done.stdout.splitlines()) == 1 and "NVIDIA's library" in done.stdout, done.stdout


def test_the_simulator_is_not_taken_for_real_gpus(host, capsys):
    assert hw_check.main(['--skip-modules']) == 2
    assert capsys.readouterr().out.startswith('hw-check: GPUFLEET_MIG_SIMULATOR is set')
    assert mutating_calls(host) == []


# ---- issue 30: every value of the MIG-off answers, against the driver variant that answered -------------------------

RECORDED = os.path.join(REPO, 'tests', 'hw', 'recorded', 'h200-580.159.04.json')


def recorded():
    with open(RECORDED) as handle:
        return json.load(handle)


def rows_of(nvml, models=None):
    return [(row['item'], row['nvml'], row['simulator']) for row in hw_check.compare(nvml, models or simulator.MODELS)]


def test_the_recorded_answers_are_the_real_h200s():
    """The recorded set holds what docs/hardware.md and issue 30 say the driver answered (the fixture is pinned)."""
    nvml = recorded()
    gpu = nvml['gpus'][0]
    assert (nvml['driver_version'], gpu['name'], gpu['pci_device_id'], gpu['memory_total_mib'], gpu['mig_mode']) == (
        '580.159.04', 'NVIDIA H200', 0x233510DE, 143771, {'value': [0, 0]})
    described = dict((answer['name'], answer['memory_mib']) for answer in gpu['profile_info_by_enum'].values() if 'id' in answer)
    assert described == {'MIG 1g.18gb': 16384, 'MIG 1g.18gb+me': 16384, 'MIG 1g.35gb': 33280, 'MIG 2g.35gb': 33280,
                         'MIG 3g.71gb': 71424, 'MIG 4g.71gb': 71424, 'MIG 7g.141gb': 143360}
    assert gpu['profile_info_by_enum']['17'] == {'error': 'NVML_ERROR_INVALID_ARGUMENT'}
    assert sorted(int(i) for i, found in gpu['placements_by_id'].items() if not found) == [32, 35, 38, 47, 48, 64, 65, 66, 67, 72, 73]


def test_the_recorded_h200_answers_agree_with_the_580_variant(tmp_path, capsys):
    assert rows_of(recorded()) == []
    assert hw_check.main(['--answers', RECORDED, '--out', str(tmp_path)]) == 0
    assert "NVML and the simulator's tables agree" in capsys.readouterr().out


def test_against_the_older_table_every_value_that_differs_is_a_difference():
    """The same answers from a driver the variant does not cover: the older table's memory, no MIG-off answers."""
    older = dict(recorded(), driver_version='580.95.05')
    found = rows_of(older)
    assert ('1g.35gb: memory_mib', 33280, 33024) in found and ('2g.35gb: memory_mib', 33280, 33024) in found
    assert ('3g.71gb: memory_mib', 71424, 71168) in found and ('4g.71gb: memory_mib', 71424, 71168) in found
    assert ('7g.141gb: memory_mib', 143360, 143104) in found
    assert ('profile ids answering no placement', [32, 35, 38, 47, 48, 64, 65, 66, 67, 72, 73], []) in found
    status = [row for row in found if row[0] == 'profile info answers with MIG off']
    assert status and status[0][2] == {'NVML_ERROR_NOT_SUPPORTED': list(range(18))}
    assert len(found) == 7, found       # and nothing else: 1g.18gb kept its memory


@pytest.mark.parametrize('drift, row', [
    (lambda gpu: gpu['profile_info_by_enum']['1'].update(memory_mib=33281), ('2g.35gb: memory_mib', 33281, 33280)),
    (lambda gpu: gpu['profile_info_by_enum']['4'].update(memory_mib=143104), ('7g.141gb: memory_mib', 143104, 143360)),
    (lambda gpu: gpu['profile_info_by_enum']['9'].update(name='MIG 1g.36gb'), ('1g.35gb: name', 'MIG 1g.36gb', 'MIG 1g.35gb')),
    (lambda gpu: gpu['profile_info_by_enum']['2'].update(compute_slices=4), ('3g.71gb: compute_slices', 4, 3)),
    (lambda gpu: gpu['profile_info_by_enum']['0'].update(multiprocessors=18), ('1g.18gb: multiprocessors', 18, 16)),
    (lambda gpu: gpu['profile_info_by_enum']['7'].update(id=21), ('1g.18gb+me: id', 21, 20)),
    (lambda gpu: gpu['profile_info_by_enum']['3'].update(max_count=2), ('4g.71gb: max_count', 2, 1)),
    (lambda gpu: gpu['profile_info_by_enum']['4'].update(ofas=0), ('7g.141gb: ofas', 0, 1)),
    (lambda gpu: gpu['placements_by_id'].update({'14': [[0, 2], [2, 2]]}), ('profile 14 placements: starts', [0, 2], [0, 2, 4])),
    (lambda gpu: gpu['placements_by_id'].pop('72'), ('profile ids answering no placement', [32, 35, 38, 47, 48, 64, 65, 66, 67, 73],
                                                     [32, 35, 38, 47, 48, 64, 65, 66, 67, 72, 73])),
])
def test_a_value_that_drifts_is_a_difference_and_fails_the_check(tmp_path, drift, row):
    nvml = recorded()
    drift(nvml['gpus'][0])
    assert rows_of(nvml) == [row]
    path = str(tmp_path / 'nvml.json')
    with open(path, 'w') as handle:
        json.dump(nvml, handle)
    assert hw_check.main(['--answers', path, '--out', str(tmp_path / 'out')]) == 1


def test_a_status_that_drifts_is_a_difference():
    nvml = recorded()
    nvml['gpus'][0]['profile_info_by_enum']['17'] = {'error': 'NVML_ERROR_NOT_SUPPORTED'}
    assert rows_of(nvml) == [('profile info answers with MIG off',
                              {'SUCCESS': [0, 1, 2, 3, 4, 7, 9], 'NVML_ERROR_NOT_SUPPORTED': [5, 6, 8, 10, 11, 12, 13, 14, 15, 16, 17]},
                              {'SUCCESS': [0, 1, 2, 3, 4, 7, 9], 'NVML_ERROR_NOT_SUPPORTED': [5, 6, 8, 10, 11, 12, 13, 14, 15, 16],
                               'NVML_ERROR_INVALID_ARGUMENT': [17]})]


def test_unreadable_recorded_answers_are_one_line(tmp_path, capsys):
    path = tmp_path / 'nvml.json'
    path.write_text('{"gpus": 3}')
    assert hw_check.main(['--answers', str(path), '--out', str(tmp_path)]) == 2
    assert capsys.readouterr().out.startswith('hw-check: cannot read the recorded answers')


def test_a_simulated_h200_on_driver_580_159_answers_what_the_real_one_did(tmp_path, monkeypatch):
    path = str(tmp_path / 'gpus.json')
    with open(path, 'w') as handle:
        json.dump({'driver_version': '580.159.04', 'gpus': [{'model': 'H200', 'pci_subsystem_id': '0x18BE10DE'}]}, handle)
    monkeypatch.setenv(hw_check.SIMULATOR_ENV, path)
    nvml = read_answers()
    real = recorded()['gpus'][0]
    assert dict(nvml['gpus'][0], uuid=real['uuid']) == real
    assert rows_of(nvml) == []


# ---- issue 30: read-only by construction ------------------------------------------------------------------------------

# What the brief names, and what the simulator logs as mutating: each refused before it reaches the library.
MUTATING = ('nvmlDeviceSetMigMode', 'nvmlDeviceCreateGpuInstance', 'nvmlDeviceCreateGpuInstanceWithPlacement',
            'nvmlGpuInstanceCreateComputeInstance', 'nvmlGpuInstanceCreateComputeInstanceWithPlacement', 'nvmlGpuInstanceDestroy',
            'nvmlComputeInstanceDestroy', 'nvmlDeviceResetGpuLockedClocks', 'nvmlDeviceResetMemoryLockedClocks',
            'nvmlDeviceResetApplicationsClocks', 'nvmlDeviceModifyDrainState', 'nvmlDeviceRemoveGpu', 'nvmlDeviceSetPersistenceMode',
            'nvmlDeviceClearEccErrorCounts', 'nvmlDeviceReadWritePRM_v1', 'nvmlSystemSetNvlinkBwMode', 'nvmlUnitSetLedState')
# Words of a C function name that change something: a call the guard lets through has none of them.
CHANGING_WORDS = {'Set', 'Create', 'Destroy', 'Reset', 'Clear', 'Remove', 'Modify', 'Register', 'Free', 'Activate', 'Update',
                  'Write', 'Discover', 'Force', 'Freeze', 'Alloc', 'Wait', 'Enable', 'Disable', 'Inject', 'Start', 'Stop'}


def pynvml_symbols():
    """Every C function nvidia-ml-py's wrappers resolve."""
    import re
    import pynvml
    with open(pynvml.__file__) as handle:
        return sorted(set(re.findall(r'_nvmlGetFunctionPointer\("(\w+)"\)', handle.read())))


def test_the_guard_lets_through_only_calls_that_read():
    import re
    symbols = pynvml_symbols()
    assert len(symbols) > 300 and set(MUTATING) <= set(symbols) and set(simulator.MUTATING_CALLS) <= set(MUTATING)
    passed = [name for name in symbols if nvml_read_only.is_read_call(name)]
    for name in passed:
        words = set(re.findall(r'[A-Z][a-z]*', name[len('nvml'):]))
        # read with "Set" a noun in their name: the thermal settings, the set of GPUs of a topology level
        assert not words & CHANGING_WORDS or name in ('nvmlDeviceGetThermalSettings', 'nvmlSystemGetTopologyGpuSet'), name
    assert not [name for name in MUTATING if nvml_read_only.is_read_call(name)]
    # Every call the NVML backend reads with passes (the simulated library answers exactly those).
    assert [name for name in simulator.SYMBOLS if name not in simulator.MUTATING_CALLS and not nvml_read_only.is_read_call(name)] == []


@pytest.fixture
def guarded(host):
    import pynvml
    refusal = nvml_read_only.install(pynvml)
    try:
        yield pynvml, refusal
    finally:
        nvml_read_only.uninstall(pynvml)
        simulator.uninstall(pynvml)


def test_a_mutating_call_is_refused_under_the_guard_before_it_reaches_the_library_while_reads_pass(host, guarded):
    import ctypes
    pynvml, refusal = guarded
    simulator.install(pynvml, host.path)
    pynvml.nvmlInit()
    a100, h100 = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetMigMode(a100) == [0, 0] and pynvml.nvmlDeviceGetName(h100) == 'NVIDIA H100 80GB HBM3'
    gi = pynvml.nvmlDeviceGetGpuInstanceById(h100, read_answers_gi_id(host))
    placement = pynvml.c_nvmlGpuInstancePlacement_t()
    placement.start, placement.size = 0, 8
    attempts = [
        lambda: pynvml.nvmlDeviceSetMigMode(a100, 1),
        lambda: pynvml.nvmlDeviceCreateGpuInstance(h100, 0),
        lambda: pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h100, 0, ctypes.byref(placement)),
        lambda: pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0),
        lambda: pynvml.nvmlGpuInstanceDestroy(gi),
        lambda: pynvml.nvmlComputeInstanceDestroy(pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0)),
        lambda: pynvml.nvmlDeviceResetGpuLockedClocks(a100),
    ]
    for attempt in attempts:
        with pytest.raises(refusal) as refused:
            attempt()
        assert isinstance(refused.value, pynvml.NVMLError) and refused.value.value == pynvml.NVML_ERROR_NO_PERMISSION
        assert 'refused: the hardware check is read-only' in str(refused.value)
    counts = pynvml.nvmlLib.call_counts
    assert not [name for name in simulator.MUTATING_CALLS if counts.get(name)]     # none reached the library
    assert mutating_calls(host) == []
    pynvml.nvmlShutdown()


def read_answers_gi_id(host):
    return simulator.load_state(host.path)['gpus'][1]['gpu_instances'][0]['id']


def test_the_backend_reads_a_whole_host_under_the_guard(host, guarded):
    from ansible_collections.gpufleet.mig.plugins.module_utils.host._nvml_backend import BackendError, NvmlBackend
    backend = NvmlBackend()
    try:
        gpus = backend.read_host().gpus
        assert [g.mig_mode.current for g in gpus] == ['disabled', 'enabled', 'disabled'] and gpus[1].gpu_instances
        with pytest.raises(BackendError) as refused:
            backend.set_mig_mode(0, True)
    finally:
        backend.close()
    assert 'NVML_ERROR_NO_PERMISSION' in str(refused.value) and 'nvmlDeviceSetMigMode refused' in str(refused.value)
    assert mutating_calls(host) == []


def test_the_guard_reaches_the_module_processes_ansible_starts(host, tmp_path):
    """A module that would change the GPU (not check mode), run with the check's environment: refused, nothing changed."""
    playbook = str(tmp_path / 'change.yml')
    with open(playbook, 'w') as handle:
        json.dump([{'hosts': 'localhost', 'connection': 'local', 'gather_facts': False,
                    'vars': {'ansible_python_interpreter': sys.executable},
                    'tasks': hw_check.module_playbook({'gpus': []}, str(tmp_path / 'host'))[0]['tasks'][:1] + [
                        {'name': 'enable', 'gpufleet.mig.nvidia_mig_mode': {'gpus': ['0'], 'state': 'enabled', 'pod_resources': 'off'}}]}],
                  handle)
    envvars = dict(ansible_settings(), **simulator_environment(host))
    run = run_playbook(playbook, inventory='localhost,', envvars=hw_check.read_only_environment(envvars), project_dir=REPO, timeout=240)
    statuses = [(result['task'], result['status']) for result in run.results]
    assert statuses == [(hw_check.GUARD_TASK, 'ok'), ('enable', 'failed')], run.describe()
    enable = run.task_results('enable')['localhost']
    assert 'nvmlDeviceSetMigMode refused: the hardware check is read-only' in enable['msg'], enable
    assert mutating_calls(host) == []
    # Without the guard's folder on PYTHONPATH the first task fails, and no module runs.
    run = run_playbook(playbook, inventory='localhost,', envvars=envvars, project_dir=REPO, timeout=240)
    assert [(result['task'], result['status']) for result in run.results] == [(hw_check.GUARD_TASK, 'failed')], run.describe()
    assert mutating_calls(host) == []


def simulator_environment(host):
    from tests.support.simulator import simulated_environment
    return simulated_environment(host.path)


def test_a_module_that_fails_is_reported_and_fails_the_check(host, tmp_path, capsys, monkeypatch):
    """A failed task's result does not say 'failed' on ansible-core 2.19: its status does (the check once read it as ok)."""
    for name, value in ansible_environment().items():
        if name.startswith('ANSIBLE_') or name == 'PATH':
            monkeypatch.setenv(name, value)
    state = simulator.load_state(host.path)
    # The check's own read is the first call on GPU 0, the facts module's the second.
    state['faults'] = [{'call': 'nvmlDeviceGetMigMode', 'gpu': 0, 'nth': 2, 'error': 'NVML_ERROR_UNKNOWN'}]
    simulator.write_state(host.path, state)
    out = str(tmp_path / 'out')
    assert hw_check.main(['--simulated', '--out', out]) == 1
    printed = capsys.readouterr().out
    assert [line for line in printed.splitlines() if line.startswith('facts ') and ' failed ' in line], printed
    with open(os.path.join(out, 'modules.json')) as handle:
        assert json.load(handle)['facts']['failed'] is True
    assert mutating_calls(host) == []
