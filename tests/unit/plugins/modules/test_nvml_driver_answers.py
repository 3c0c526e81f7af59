# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The modules against NVML as real drivers answer it (issue 18, section 1), through the real pynvml wrappers:
compute profile pairs, GPU instance ids that follow no placement, driver-dependent names, subsystem ids,
Hopper's reset-less mode, and GPU clients (DCGM) that hold MIG devices with no process listed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import gpufleet_nvml_sim as simulator
import pynvml
import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.host import _nvml_backend
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import Gpu
from ansible_collections.gpufleet.mig.plugins.module_utils.host._mig_mode import ModeDecision
from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_facts, nvidia_mig_layout, nvidia_mig_mode
from ansible_collections.gpufleet.mig.tests.unit.conftest import mutating_calls
from ansible_collections.gpufleet.mig.tests.unit.plugins.modules import test_nvidia_mig_layout as layout_tests

# The layout module's fixtures and argument helper, shared.
fake_systemctl = layout_tests.fake_systemctl
layout_args = layout_tests.layout_args

ENABLED = {'current': 'enabled', 'pending': 'enabled'}
DCGM_UNIT = 'nvidia-dcgm.service'


def one(mig_devices, **entry):
    return {'the-layout': [dict({'devices': 'all', 'mig-enabled': True, 'mig-devices': mig_devices}, **entry)]}


def apply_layout(run_module, host_paths, config, **extra):
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, config, **extra))
    return result, failed


def profiles_on(host, gpu=0):
    return sorted((gi['profile'], gi['start']) for gi in host.read()['gpus'][gpu]['gpu_instances'])


# ---- 1. compute instance profile pairs: the plain one is created -------------------------------------------------

@pytest.mark.parametrize('model, key, plain, variant', [
    ('A100-SXM4-80GB', '7g.80gb', pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL),
    ('H100-SXM5-80GB', '1g.20gb', pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1),
])
def test_the_plain_compute_profile_of_a_pair_is_created(simulated_host, run_module, host_paths, model, key, plain, variant):
    host = simulated_host([{'model': model, 'mig': dict(ENABLED)}])
    result, failed = apply_layout(run_module, host_paths, one({key: 1}))
    assert not failed and result['in_layout'], result
    created = [c for c in host.calls() if c['call'] == 'nvmlGpuInstanceCreateComputeInstanceWithPlacement']
    assert [c['args']['profile_id'] for c in created] == [plain]
    # read back through the real pynvml wrappers: the driver offers both, the instance has the plain one
    simulator.install(pynvml, host.path)
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, host.read()['gpus'][0]['gpu_instances'][0]['id'])
    for profile_id in (plain, variant):
        assert pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, profile_id, 0).sliceCount >= 1
    ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, 0)
    assert pynvml.nvmlComputeInstanceGetInfo(ci).profileId == plain
    pynvml.nvmlShutdown()


def test_an_instance_created_with_the_variant_profile_reads_as_in_layout(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '7g.80gb', 'start': 0, 'compute_instances': [{'profile': '7g.80gb', 'profile_id': 8}]}]}])
    result, failed = apply_layout(run_module, host_paths, one({'7g.80gb': 1}))
    assert not failed and result['in_layout'] and result['actions'] == [], result
    assert mutating_calls(host) == []


# ---- 2. GPU instance ids follow no placement ----------------------------------------------------------------------

def test_the_same_layout_on_two_gpus_gets_other_ids_and_converges(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gi_id_seed': 1},
                           {'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gi_id_seed': 6}])
    config = one({'1g.10gb': 2, '2g.20gb': 1, '3g.40gb': 1})
    result, failed = apply_layout(run_module, host_paths, config)
    assert not failed and result['in_layout'], result
    gpus = host.read()['gpus']
    assert profiles_on(host, 0) == profiles_on(host, 1)
    assert [gi['id'] for gi in gpus[0]['gpu_instances']] != [gi['id'] for gi in gpus[1]['gpu_instances']]
    again, failed = apply_layout(run_module, host_paths, config)
    assert not failed and not again['changed'] and again['actions'] == []


# ---- 3. MaxMigDeviceCount answers 0 where MIG is off or unsupported -------------------------------------------------

def test_facts_read_gpus_with_mig_off_and_without_mig(simulated_host, run_module):
    simulated_host([{'model': 'A100-SXM4-80GB'}, {'model': 'L40S'}, {'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED)}])
    result, failed = run_module(nvidia_mig_facts.main, {})
    assert not failed, result
    gpus = result['ansible_facts']['nvidia_mig']['gpus']
    assert [g['mig_capable'] for g in gpus] == [True, False, True]
    simulator.install(pynvml, os.environ[simulator.SIMULATOR_ENV])
    pynvml.nvmlInit()
    assert [pynvml.nvmlDeviceGetMaxMigDeviceCount(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(3)] == [0, 0, 7]
    pynvml.nvmlShutdown()


# ---- 4. Hopper and later: ask again before any reset ---------------------------------------------------------------

@pytest.mark.parametrize('model, resetless', [('H100-SXM5-80GB', True), ('B200', True), ('A100-SXM4-80GB', False)])
def test_a_pending_change_on_an_idle_gpu(simulated_host, run_module, model, resetless):
    host = simulated_host([{'model': model, 'mig': {'current': 'disabled', 'pending': 'enabled'}}])
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': ['all'], 'state': 'enabled', 'allow_reset': True})
    assert not failed and result['gpus'][0]['after'] == ENABLED, result
    assert [c['call'] for c in mutating_calls(host)] == (['nvmlDeviceSetMigMode'] if resetless else ['simulate_gpu_reset'])
    assert result['gpus'][0]['reset_performed'] is not resetless


def test_the_mode_decision_asks_again_only_on_reset_less_architectures():
    gpu = {'index': 0, 'uuid': 'GPU-x', 'mig_mode': {'current': 'disabled', 'pending': 'enabled'}, 'gpu_instances': []}
    hopper = ModeDecision(Gpu.from_dict(dict(gpu, architecture='hopper')), True, allow_reset=False)
    ampere = ModeDecision(Gpu.from_dict(dict(gpu, architecture='ampere')), True, allow_reset=True)
    assert (hopper.needs_set, hopper.needs_reset) == (True, False)
    assert (ampere.needs_set, ampere.needs_reset) == (False, True)
    done = ModeDecision(Gpu.from_dict(dict(gpu, architecture='blackwell', mig_mode=ENABLED)), True, allow_reset=True)
    assert not done.changed


# ---- 5. GPU clients holding MIG devices: destroy refused, no process listed ------------------------------------------

def dcgm_host(simulated_host, fake_systemctl, gpus=1):
    """GPUs with two 3g instances each, DCGM holding their MIG devices while its service runs."""
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'mig_clients': ['dcgm'], 'gpu_instances': [
        {'profile': '3g.40gb', 'start': s, 'compute_instances': [{'profile': '3g.40gb'}]} for s in (0, 4)]}
        for dummy in range(gpus)])
    fake_systemctl['active'].add(DCGM_UNIT)

    def follow(verb, unit):
        if unit == DCGM_UNIT and verb in ('stop', 'start'):
            for index in range(gpus):
                simulator.set_mig_clients(host.path, index, [] if verb == 'stop' else ['dcgm'])
    fake_systemctl['follow'] = follow
    return host


@pytest.fixture
def dcgm_systemctl(fake_systemctl, monkeypatch):
    """fake_systemctl whose stop/start of nvidia-dcgm.service also takes DCGM off or puts it back on the GPUs."""
    from ansible.module_utils import basic
    original = basic.AnsibleModule.run_command

    def run_command(self, args, **kwargs):
        result = original(self, args, **kwargs)
        hook = fake_systemctl.get('follow')
        if hook and result[0] == 0:
            hook(args[1], args[-1])
        return result
    monkeypatch.setattr(basic.AnsibleModule, 'run_command', run_command)
    return fake_systemctl


def test_the_known_gpu_clients_are_stopped_by_default(simulated_host, run_module, host_paths, dcgm_systemctl):
    host = dcgm_host(simulated_host, dcgm_systemctl)
    args = layout_args(host_paths, one({'1g.10gb': 7}), systemd=True)        # gpu_clients left to its default
    result, failed = run_module(nvidia_mig_layout.main, args)
    assert not failed and result['in_layout'], result
    assert result['clients_stopped'] == [DCGM_UNIT] and DCGM_UNIT in dcgm_systemctl['active']
    assert profiles_on(host) == [('1g.10gb', s) for s in range(7)]
    assert host.read()['gpus'][0]['mig_clients'] == ['dcgm']        # started again


def test_a_client_left_running_fails_the_gpu_as_busy_and_says_where_every_gpu_stands(
        simulated_host, run_module, host_paths, dcgm_systemctl):
    host = dcgm_host(simulated_host, dcgm_systemctl, gpus=2)
    before = [profiles_on(host, 0), profiles_on(host, 1)]
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, one({'1g.10gb': 7}), systemd=True, gpu_clients=[]))
    assert failed
    assert 'GPU 0 is busy' in result['msg'] and 'lists no process' in result['msg'] and 'gpu_clients' in result['msg']
    assert 'GPU 1 not started' in result['msg']
    states = result['gpu_states']
    assert [(s['index'], s['status']) for s in states] == [(0, 'failed'), (1, 'not started')]
    failed_gpu, untouched = states
    assert failed_gpu['done'] == [] and failed_gpu['left'][0]['action'] == 'destroy_compute_instance'
    assert [a['action'] for a in failed_gpu['left']].count('create_gpu_instance') == 7
    assert sorted((e['profile'], e['placement']['start']) for e in failed_gpu['layout_now']) == before[0]
    assert len(untouched['left']) == len(failed_gpu['left']) and untouched['done'] == []
    # the refusal listed no process, and nothing changed on either GPU
    refused = [c for c in host.calls() if c['call'] == 'nvmlComputeInstanceDestroy']
    assert [c['result'] for c in refused] == ['NVML_ERROR_IN_USE']
    assert [profiles_on(host, 0), profiles_on(host, 1)] == before


def test_a_failure_part_way_lists_what_each_gpu_did_and_has_left(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED)}, {'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED)},
                           {'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED)}],
                          faults=[{'call': 'nvmlDeviceCreateGpuInstanceWithPlacement', 'gpu': 1, 'nth': 4}])
    result, failed = apply_layout(run_module, host_paths, one({'1g.10gb': 7}))
    assert failed
    states = result['gpu_states']
    assert [s['status'] for s in states] == ['applied', 'failed', 'not started']
    assert result['gpus_changed'] is True       # the role keeps the node cordoned
    assert len(states[0]['done']) == 14 and states[0]['left'] == []
    assert [a['action'] for a in states[1]['done']] == ['create_gpu_instance', 'create_compute_instance'] * 3
    assert len(states[1]['left']) == 8 and len(states[1]['layout_now']) == 3
    assert len(states[2]['left']) == 14 and states[2]['done'] == []
    assert 'GPU 0 applied (14 action(s))' in result['msg'] and 'GPU 2 not started (14 action(s) planned)' in result['msg']
    assert 'GPU 1 failed after 6 action(s)' in result['msg'] and '8 left' in result['msg']
    assert len(profiles_on(host, 1)) == 3
    again, failed = apply_layout(run_module, host_paths, one({'1g.10gb': 7}))       # a re-run converges
    assert not failed and again['in_layout'], again


def two_3g_with_a_job_starting_at_the_first_destroy(simulated_host, monkeypatch):
    """Two idle 3g instances; a job starts on the first one the apply destroys, between the read and the destroy."""
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'id': 1, 'profile': '3g.40gb', 'start': 0, 'compute_instances': [{'profile': '3g.40gb'}]},
        {'id': 2, 'profile': '3g.40gb', 'start': 4, 'compute_instances': [{'profile': '3g.40gb'}]}]}])
    real = _nvml_backend.NvmlBackend.destroy_compute_instance
    started = []

    def destroy_after_a_job_starts(self, index, gi_id, ci_id):
        if not started:
            started.append(gi_id)
            simulator.set_pids(host.path, index, gi_id, ci_id, [4242])
        return real(self, index, gi_id, ci_id)
    monkeypatch.setattr(_nvml_backend.NvmlBackend, 'destroy_compute_instance', destroy_after_a_job_starts)
    return host, started


def test_a_job_that_starts_before_the_destroy_is_kept_by_planning_again(simulated_host, run_module, host_paths, monkeypatch):
    host, started = two_3g_with_a_job_starting_at_the_first_destroy(simulated_host, monkeypatch)
    # 3g + 3x1g can keep either 3g: the plan made again keeps the busy one
    result, failed = apply_layout(run_module, host_paths, one({'3g.40gb': 1, '1g.10gb': 3}))
    assert not failed and result['in_layout'], result
    kept = [gi for gi in host.read()['gpus'][0]['gpu_instances'] if gi['profile'] == '3g.40gb']
    assert [gi['id'] for gi in kept] == started


def test_a_job_on_an_instance_the_layout_cannot_keep_reports_the_gpu_busy(simulated_host, run_module, host_paths, monkeypatch):
    host, started = two_3g_with_a_job_starting_at_the_first_destroy(simulated_host, monkeypatch)
    # 3g + 4x1g keeps only the 3g at slice 4: the job on the 3g at slice 0 makes the layout impossible
    result, failed = apply_layout(run_module, host_paths, one({'3g.40gb': 1, '1g.10gb': 4}))
    assert failed and started == [1]
    assert 'GPU instance 1 (3g.40gb at slice 0) has running processes [4242]' in result['msg']
    assert [s['status'] for s in result['gpu_states']] == ['failed']
    assert profiles_on(host) == [('3g.40gb', 0), ('3g.40gb', 4)]


# ---- 6. names and memory change with the driver ---------------------------------------------------------------------

@pytest.mark.parametrize('driver, offered', [('535.183.01', '3g.39gb'), ('545.29.06', '3g.39gb'), ('580.95.05', '3g.40gb')])
@pytest.mark.parametrize('written', ['3g.39gb', '3g.40gb', '1c.3g.39gb'])
def test_a_layout_written_with_either_name_works_on_either_driver(simulated_host, run_module, host_paths, driver, offered, written):
    host = simulated_host([{'model': 'A100-SXM4-80GB'}], driver_version=driver)
    result, failed = apply_layout(run_module, host_paths, one({written: 2}))
    assert not failed and result['in_layout'], result
    compute = [ci['profile'] for gi in host.read()['gpus'][0]['gpu_instances'] for ci in gi['compute_instances']]
    if written.startswith('1c.'):       # two 1-slice compute instances share one 3g GPU instance
        assert compute == ['1c.' + offered] * 2 and profiles_on(host) == [(offered, 0)]
    else:
        assert compute == [offered] * 2 and profiles_on(host) == [(offered, 0), (offered, 4)]


@pytest.mark.parametrize('driver, name, memory_mib', [('570.86.15', '1g.24gb', 20480), ('580.95.05', '1g.23gb', 22528)])
def test_gb200_names_its_1g_by_the_driver_and_both_names_apply(simulated_host, run_module, host_paths, driver, name, memory_mib):
    host = simulated_host([{'model': 'GB200', 'mig': dict(ENABLED)}], driver_version=driver)
    facts, failed = run_module(nvidia_mig_facts.main, {})
    assert not failed
    one_g = [p for p in facts['ansible_facts']['nvidia_mig']['gpus'][0]['profiles'] if p['name'] == name][0]
    assert one_g['memory_mib'] == memory_mib
    for written in ('1g.24gb', '1g.23gb'):
        result, failed = apply_layout(run_module, host_paths, one({written: 7}))
        assert not failed and result['in_layout'], (written, result)
        assert profiles_on(host) == [(name, s) for s in range(7)]


@pytest.mark.parametrize('model, driver, memory_mib', [
    ('B200', '565.57.01', 22528), ('B200', '580.95.05', 20992),
    ('RTX-PRO-6000-SERVER', '575.51.03', 23675), ('RTX-PRO-6000-SERVER', '580.95.05', 24187),
])
def test_memory_of_a_profile_follows_the_driver(simulated_host, run_module, model, driver, memory_mib):
    simulated_host([{'model': model, 'mig': dict(ENABLED)}], driver_version=driver)
    facts, failed = run_module(nvidia_mig_facts.main, {})
    assert not failed
    one_g = min(facts['ansible_facts']['nvidia_mig']['gpus'][0]['profiles'], key=lambda p: (p['memory_slices'], p['id']))
    assert one_g['memory_mib'] == memory_mib


def test_a_name_of_another_model_is_still_not_offered(simulated_host, run_module, host_paths):
    simulated_host([{'model': 'GH200-96GB', 'mig': dict(ENABLED)}])
    result, failed = apply_layout(run_module, host_paths, one({'1g.23gb': 4}))
    assert failed and '1g.23gb is not offered' in result['msg']


# ---- 7. subsystem ids in device filters ----------------------------------------------------------------------------

@pytest.mark.parametrize('device_filter, matched', [
    ('0x233010DE:0x16C110DE', True), ('0x233010DE:0x16C010DE', False), ('0x233010DE', True)])
def test_device_filters_naming_the_subsystem_id(simulated_host, run_module, host_paths, device_filter, matched):
    host = simulated_host([{'model': 'H100-SXM5-80GB'}, {'model': 'H100-SXM5-80GB', 'pci_subsystem_id': '0x16C010DE'}])
    facts, failed = run_module(nvidia_mig_facts.main, {})
    assert [g['pci_subsystem_id'] for g in facts['ansible_facts']['nvidia_mig']['gpus']] == ['0x16C110DE', '0x16C010DE']
    result, failed = apply_layout(run_module, host_paths, one({'7g.80gb': 1}, **{'device-filter': [device_filter]}))
    assert not failed, result
    assert (profiles_on(host, 0) == [('7g.80gb', 0)]) is matched
    assert (profiles_on(host, 1) == [('7g.80gb', 0)]) is (device_filter == '0x233010DE' or device_filter.endswith('16C010DE'))


# ---- section 2: a 2-memory-slice GPU ---------------------------------------------------------------------------------

@pytest.mark.parametrize('mig_devices, expected', [
    ({'1g': 'max'}, [('1g.24gb', 0), ('1g.24gb', 1)]),
    ({'2g': 1}, [('2g.48gb', 0)]),
    ({'1g.24gb': 1}, [('1g.24gb', 0)]),
])
def test_the_rtx_pro_5000_has_two_memory_slices(simulated_host, run_module, host_paths, mig_devices, expected):
    host = simulated_host([{'model': 'RTX-PRO-5000'}])
    result, failed = apply_layout(run_module, host_paths, one(mig_devices))
    assert not failed and result['in_layout'], result
    assert profiles_on(host) == expected
    facts, failed = run_module(nvidia_mig_facts.main, {})
    gpu = facts['ansible_facts']['nvidia_mig']['gpus'][0]
    assert gpu['free_slices'] == 2 - sum(2 if name.startswith('2g') else 1 for name, dummy in expected)


# ---- issue 30: an H200 with MIG off, on a driver that describes its profiles then and on one that does not -----------

@pytest.mark.parametrize('driver, basis', [('580.159.04', 'the profiles the driver describes for this GPU with MIG off'),
                                           ('580.95.05', 'a forecast, as MIG is off')])
def test_the_layout_module_checks_a_mig_off_h200_before_any_change(simulated_host, run_module, host_paths, driver, basis):
    host = simulated_host([{'model': 'H200'}, {'model': 'H200'}], driver_version=driver)
    layout = one({'1g.18gb+me': 1, '2g.35gb': 1, '3g.71gb': 1})
    planned, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, layout), check_mode=True)
    assert not failed and [g['checked_with'].startswith(basis) for g in planned['gpus']] == [True, True], planned
    assert mutating_calls(host) == []
    result, failed = apply_layout(run_module, host_paths, layout)
    assert not failed and result['in_layout'], result
    assert [sorted(name for name, dummy in profiles_on(host, gpu)) for gpu in (0, 1)] == [['1g.18gb+me', '2g.35gb', '3g.71gb']] * 2


@pytest.mark.parametrize('driver, refused', [('580.159.04', True), ('580.95.05', False)])
def test_two_media_extended_instances_are_refused_before_the_mode_step_where_the_driver_says_so(
        simulated_host, run_module, host_paths, driver, refused):
    host = simulated_host([{'model': 'H200'}], driver_version=driver)
    result, failed = apply_layout(run_module, host_paths, one({'1g.18gb+me': 2}))
    assert failed
    if refused:     # the driver's own profiles: one +me instance per GPU, known with MIG off
        assert 'the profiles the driver describes for this GPU with MIG off' in result['msg'], result['msg']
        assert mutating_calls(host) == []
    else:           # the forecast checks it as the plain 1g: found only after MIG was enabled
        assert [c['call'] for c in mutating_calls(host)][:1] == ['nvmlDeviceSetMigMode']
