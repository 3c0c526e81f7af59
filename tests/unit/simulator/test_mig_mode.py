# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG mode changes through the real pynvml, and the host events around them: GPU reset, reboot,
processes and clients (nvidia-persistenced, DCGM, nvidia_drm) that hold a GPU."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pynvml
import pytest

import gpufleet_nvml_sim as sim_api
from gpufleet_nvml_sim.models import MODELS

from ansible_collections.gpufleet.mig.tests.unit.simulator.helpers import (
    AMPERE,
    ENABLED,
    HOPPER_AND_LATER,
    create_gi,
    error_of,
    gi_instances,
    reinit,
)

E = pynvml
ENABLE, DISABLE = pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_DISABLE
HOLDERS = [{'pids': [31]}, {'clients': ['nvidia-persistenced']}, {'clients': ['dcgm', 'nvidia_drm']}]


def smallest_profile(model):
    return [p for p in MODELS[model]['profiles'] if p['memory_slices'] == 1 and not p['suffix']][0]


def mode_log(path):
    return [(e['call'], e['result'], e.get('activation_status')) for e in sim_api.read_call_log(path)]


@pytest.mark.parametrize('model', AMPERE)
def test_ampere_idle_gpu_switches_at_once_and_keeps_the_mode_across_reboots(sim, model):
    path = sim([{'model': model}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    one_g = smallest_profile(model)
    assert pynvml.nvmlDeviceSetMigMode(handle, ENABLE) == pynvml.NVML_SUCCESS     # activation status
    assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 1]                           # the driver reset the GPU itself
    assert pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, one_g['enum']).id == one_g['id']
    create_gi(handle, one_g['id'], one_g['starts'][0])
    sim_api.simulate_reboot(path)
    reinit()
    assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 1]
    assert gi_instances(handle, one_g['id']) == []
    assert pynvml.nvmlDeviceSetMigMode(handle, DISABLE) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 0]
    sim_api.simulate_reboot(path)
    reinit()
    assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 0]
    assert mode_log(path) == [('nvmlDeviceSetMigMode', 'NVML_SUCCESS', 'NVML_SUCCESS'), ('nvmlDeviceCreateGpuInstanceWithPlacement',
                              'NVML_SUCCESS', None), ('simulate_reboot', 'NVML_SUCCESS', None),
                              ('nvmlDeviceSetMigMode', 'NVML_SUCCESS', 'NVML_SUCCESS'), ('simulate_reboot', 'NVML_SUCCESS', None)]


@pytest.mark.parametrize('holder', HOLDERS)
@pytest.mark.parametrize('model', AMPERE)
def test_ampere_held_gpu_keeps_the_change_pending_until_a_reset(sim, model, holder):
    path = sim([dict(holder, model=model)])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    one_g = smallest_profile(model)
    assert pynvml.nvmlDeviceSetMigMode(handle, ENABLE) == pynvml.NVML_ERROR_IN_USE    # the call succeeds; activation did not
    assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 1]
    assert error_of(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, one_g['enum']) == E.NVML_ERROR_NOT_SUPPORTED
    assert error_of(create_gi, handle, one_g['id'], 0) == E.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(sim_api.SimulatorError) as failure:
        sim_api.simulate_gpu_reset(path, 0)
    assert 'GPU 0 is in use by %s' % ('processes [31]' if 'pids' in holder else 'clients %s' % holder['clients']) in str(failure.value)
    if 'pids' in holder:
        sim_api.set_pids(path, 0, None, None, [])
    else:
        sim_api.set_clients(path, 0, [])
    sim_api.simulate_gpu_reset(path, 0)
    reinit()
    assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 1]
    create_gi(handle, one_g['id'], 0)
    assert mode_log(path) == [('nvmlDeviceSetMigMode', 'NVML_SUCCESS', 'NVML_ERROR_IN_USE'),
                              ('nvmlDeviceCreateGpuInstanceWithPlacement', 'NVML_ERROR_NOT_SUPPORTED', None),
                              ('simulate_gpu_reset', 'NVML_ERROR_IN_USE', None), ('simulate_gpu_reset', 'NVML_SUCCESS', None),
                              ('nvmlDeviceCreateGpuInstanceWithPlacement', 'NVML_SUCCESS', None)]
    assert sim_api.read_call_log(path)[2]['args'] == dict({'pids': [], 'clients': []}, **holder)


def test_a_pending_change_applies_at_reboot_or_on_a_repeated_call_once_idle(sim):
    path = sim([{'model': 'A100-SXM4-80GB', 'pids': [7]}, {'model': 'A30', 'clients': ['nvidia-persistenced']}])
    first, second = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
    assert [pynvml.nvmlDeviceSetMigMode(h, ENABLE) for h in (first, second)] == [pynvml.NVML_ERROR_IN_USE] * 2
    sim_api.simulate_reboot(path)                   # processes are gone; clients are services that start again
    reinit()
    assert [pynvml.nvmlDeviceGetMigMode(h) for h in (first, second)] == [[1, 1], [1, 1]]
    state = sim_api.load_state(path)
    assert [(g['pids'], g['clients']) for g in state['gpus']] == [([], []), ([], ['nvidia-persistenced'])]
    assert pynvml.nvmlDeviceSetMigMode(second, DISABLE) == pynvml.NVML_ERROR_IN_USE
    assert pynvml.nvmlDeviceGetMigMode(second) == [1, 0]
    assert pynvml.nvmlDeviceSetMigMode(second, ENABLE) == pynvml.NVML_SUCCESS      # back to the current mode: nothing to activate
    assert pynvml.nvmlDeviceGetMigMode(second) == [1, 1]
    assert pynvml.nvmlDeviceSetMigMode(second, DISABLE) == pynvml.NVML_ERROR_IN_USE
    sim_api.set_clients(path, 1, [])
    assert pynvml.nvmlDeviceSetMigMode(second, DISABLE) == pynvml.NVML_SUCCESS     # idle now: the driver resets it
    assert pynvml.nvmlDeviceGetMigMode(second) == [0, 0]


@pytest.mark.parametrize('model', HOPPER_AND_LATER)
def test_hopper_and_later_switch_at_once_when_idle_and_lose_the_mode_on_reboot(sim, model):
    path = sim([{'model': model}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceSetMigMode(handle, ENABLE) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 1]
    whole = [p for p in MODELS[model]['profiles'] if p['memory_slices'] == MODELS[model]['memory_slices']][0]
    create_gi(handle, whole['id'], 0)
    # GPU instances present: the call succeeds, the activation status says IN_USE and the change stays pending (nvml.h)
    assert pynvml.nvmlDeviceSetMigMode(handle, DISABLE) == pynvml.NVML_ERROR_IN_USE
    assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 0]
    assert len(gi_instances(handle, whole['id'])) == 1
    sim_api.simulate_reboot(path)
    reinit()
    assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 0]
    state = sim_api.load_state(path)
    assert state['gpus'][0]['gpu_instances'] == [] and state['gpus'][0]['mig'] == {'current': 'disabled', 'pending': 'disabled'}


@pytest.mark.parametrize('holder', HOLDERS)
def test_hopper_held_gpu_keeps_the_change_pending_too(sim, holder):
    path = sim([dict(holder, model='H100-SXM5-80GB')])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceSetMigMode(handle, ENABLE) == pynvml.NVML_ERROR_IN_USE
    assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 1]
    assert error_of(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, 0) == E.NVML_ERROR_NOT_SUPPORTED
    sim_api.simulate_reboot(path)                   # not persistent: the pending request is gone too
    reinit()
    assert pynvml.nvmlDeviceGetMigMode(handle) == [0, 0]


def test_disabling_with_gpu_instances_reports_through_the_activation_status(sim):
    # nvml.h: activationStatus returns the error of an unsuccessful activation (IN_USE when the device is not idle);
    # the call itself succeeds and the instances stay.
    path = sim([{'model': 'A30', 'mig': ENABLED, 'gpu_instances': [{'profile': '4g.24gb', 'start': 0}]}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceSetMigMode(handle, DISABLE) == pynvml.NVML_ERROR_IN_USE
    assert pynvml.nvmlDeviceGetMigMode(handle) == [1, 0]
    assert len(gi_instances(handle, 0)) == 1
    assert pynvml.nvmlDeviceSetMigMode(handle, ENABLE) == pynvml.NVML_SUCCESS          # back to the mode it has: a no-op
    assert error_of(pynvml.nvmlDeviceSetMigMode, handle, 2) == E.NVML_ERROR_INVALID_ARGUMENT
    assert [(e['args'], e['result'], e.get('activation_status')) for e in sim_api.read_call_log(path)] == [
        ({'mode': 0}, 'NVML_SUCCESS', 'NVML_ERROR_IN_USE'), ({'mode': 1}, 'NVML_SUCCESS', 'NVML_SUCCESS'),
        ({'mode': 2}, 'NVML_ERROR_INVALID_ARGUMENT', None)]
    assert sim_api.load_state(path)['gpus'][0]['mig'] == ENABLED


def test_reset_of_an_idle_gpu_drops_its_instances(sim):
    path = sim([{'model': 'H200', 'mig': ENABLED, 'gpu_instances': [{'profile': '7g.141gb', 'compute_instances': [
        {'profile': '7g.141gb'}]}]}, {'model': 'H200', 'pids': [3]}])
    sim_api.simulate_gpu_reset(path, 0)
    state = sim_api.load_state(path)
    assert state['gpus'][0]['gpu_instances'] == [] and state['gpus'][0]['mig'] == ENABLED
    with pytest.raises(sim_api.SimulatorError) as failure:
        sim_api.simulate_gpu_reset(path, 1)
    assert 'GPU 1 is in use by processes [3]' in str(failure.value)
    with pytest.raises(sim_api.SimulatorError) as failure:
        sim_api.simulate_gpu_reset(path, 5)
    assert 'simulated reset: no GPU 5 (the host has 2)' in str(failure.value)


@pytest.mark.parametrize('clients, message', [
    ('nvidia-persistenced', 'clients must be a list of names'), ([''], 'clients must be a list of names'), ([3], 'clients must be'),
])
def test_set_clients_checks_its_arguments(tmp_path, clients, message):
    path = str(tmp_path / 'host.json')
    sim_api.write_state(path, {'gpus': [{'model': 'A30'}]})
    with pytest.raises(sim_api.SimulatorError) as failure:
        sim_api.set_clients(path, 0, clients)
    assert message in str(failure.value)
    with pytest.raises(sim_api.SimulatorError) as failure:
        sim_api.set_clients(path, 1, ['dcgm'])
    assert 'set_clients: no GPU 1 (the host has 1)' in str(failure.value)
    sim_api.set_clients(path, 0, ('dcgm',))
    assert sim_api.load_state(path)['gpus'][0]['clients'] == ['dcgm']
    assert sim_api.read_call_log(path) == []
