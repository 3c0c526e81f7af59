# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The three modules, in-process, against simulated hosts through the real pynvml."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import multiprocessing
import os
import sys

import gpufleet_nvml_sim as simulator
import pytest

from ansible.module_utils.common import arg_spec

from ansible_collections.gpufleet.mig.plugins.module_utils.host import _nvml_backend
from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.mig.plugins.module_utils.host._gpu_selection import SelectionError
from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_lock import LockPermissionDenied, LockTimeout, UnsafeLockPath
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import LayoutConfigError
from ansible_collections.gpufleet.mig.plugins.module_utils.host._plan_executor import ApplyError
from ansible_collections.gpufleet.mig.plugins.module_utils.host._systemd import SystemctlError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError
from ansible_collections.gpufleet.mig.plugins.module_utils._module_support import run_module
from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_facts, nvidia_mig_instance, nvidia_mig_mode, nvidia_mig_repack
from ansible_collections.gpufleet.mig.tests.support.simulator import SIMULATOR_ENV
from ansible_collections.gpufleet.mig.tests.unit.conftest import mutating_calls
from ansible_collections.gpufleet.mig.tests.unit.plugins.modules.conftest import mig_uuids, pods_on
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import MIG_MODELS

ENABLED = {'current': 'enabled', 'pending': 'enabled'}


def busy_3g_host(simulated_host, pids=(4242,)):
    return simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '3g.40gb', 'start': 4, 'compute_instances': [{'profile': '3g.40gb', 'start': 0, 'pids': list(pids)}]}]}])


def layout(result, gpu=0):
    entry = [g for g in result['gpus'] if g['index'] == gpu][0]
    return sorted((e['profile'], e['placement']['start'], tuple(c['profile'] for c in e['compute_instances'])) for e in entry['after'])


def without_new_ids(actions):
    """Actions without the instance ids NVML assigns on create (unknown in check mode)."""
    return [dict((k, v) for k, v in a.items() if not k.endswith('_id') or k == 'profile_id') for a in actions]


def facts_of(run_module):
    result, failed = run_module(nvidia_mig_facts.main, {})
    assert not failed, result
    return result['ansible_facts']['nvidia_mig']


# ---- facts ------------------------------------------------------------------------

@pytest.mark.parametrize('model', MIG_MODELS)
def test_facts_on_every_model(simulated_host, run_module, model):
    simulated_host([{'model': model, 'mig': dict(ENABLED)}])
    facts = facts_of(run_module)
    gpu = facts['gpus'][0]
    assert gpu['mig_capable'] and gpu['mig_mode'] == ENABLED
    assert gpu['free_slices'] == simulator.MODELS[model]['memory_slices']
    assert gpu['stranded_slices'] == 0 and gpu['fragmentation'] == 0.0
    biggest = max(gpu['profiles'], key=lambda p: p['memory_slices'])
    assert gpu['largest_placeable'] == biggest['name']
    assert all(gpu['placeable'][p['name']] >= 1 for p in gpu['profiles'])
    assert facts['simulated'] is True and facts['driver_version'] == '580.95.05'


def test_facts_busy_detection_and_fragmentation(simulated_host, run_module):
    simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '1g.10gb', 'start': 0, 'compute_instances': [{'profile': '1g.10gb', 'start': 0, 'pids': [11]}]},
        {'profile': '1g.10gb', 'start': 4, 'compute_instances': [{'profile': '1g.10gb', 'start': 0, 'pids': []}]}]}])
    gpu = facts_of(run_module)['gpus'][0]
    assert gpu['busy'] is True
    assert [gi['busy'] for gi in gpu['gpu_instances']] == [True, False]
    assert gpu['gpu_instances'][0]['compute_instances'][0]['processes'][0]['pid'] == 11
    assert gpu['free_slices'] == 6
    assert gpu['placeable']['7g.80gb'] == 0 and gpu['placeable']['3g.40gb'] == 0
    assert gpu['largest_placeable'] == '2g.20gb'
    # 1g at 0 and 1 would leave a 3g.40gb at 4: half of it is lost to the placement; no slice is wasted
    assert gpu['fragmentation'] == 0.5
    assert gpu['stranded_slices'] == 0


def test_facts_seven_small_instances_strand_nothing(simulated_host, run_module):
    """Slice 7 after 7x1g is free, but every compute slice is taken: no arrangement could use it."""
    simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '1g.10gb', 'start': s, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]} for s in range(7)]}])
    gpu = facts_of(run_module)['gpus'][0]
    assert gpu['free_slices'] == 1 and gpu['stranded_slices'] == 0
    assert gpu['largest_placeable'] is None and gpu['fragmentation'] == 0.0


def test_facts_churned_gpu_strands_a_slice(simulated_host, run_module):
    """1g at 0, 3, 6: slice 7 is wasted and a 2g is the largest fit, where 1g at 0, 1, 2 would leave a 4g."""
    simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '1g.10gb', 'start': s, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]} for s in (0, 3, 6)]}])
    gpu = facts_of(run_module)['gpus'][0]
    assert gpu['stranded_slices'] == 1 and gpu['fragmentation'] == 0.5 and gpu['largest_placeable'] == '2g.20gb'


def test_facts_selectors_and_non_capable_gpu(simulated_host, run_module):
    simulated_host([{'model': 'A100-SXM4-80GB'}, {'model': 'L40S'}, {'model': 'H100-SXM5-80GB'}])
    all_gpus = facts_of(run_module)['gpus']
    assert [g['mig_capable'] for g in all_gpus] == [True, False, True]
    assert 'not MIG-capable' in all_gpus[1]['skip_reason']
    by_pci, failed = run_module(nvidia_mig_facts.main, {'gpus': ['0x233010DE']})
    assert not failed and [g['index'] for g in by_pci['ansible_facts']['nvidia_mig']['gpus']] == [2]
    by_uuid, failed = run_module(nvidia_mig_facts.main, {'gpus': [all_gpus[0]['uuid']]})
    assert not failed and [g['index'] for g in by_uuid['ansible_facts']['nvidia_mig']['gpus']] == [0]
    result, failed = run_module(nvidia_mig_facts.main, {'gpus': ['7']})
    assert failed and "'7' matches no GPU" in result['msg']
    result, failed = run_module(nvidia_mig_facts.main, {'gpus': ['first']})
    assert failed and 'invalid GPU selector' in result['msg']


# ---- mode -------------------------------------------------------------------------

def test_mode_idle_ampere_applies_at_once(simulated_host, run_module):
    # The driver resets an idle A100 itself: no GPU reset needed.
    host = simulated_host([{'model': 'A100-SXM4-80GB'}])
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': ['all'], 'state': 'enabled'})
    assert not failed and result['changed']
    assert result['gpus'][0]['after'] == ENABLED and not result['gpus'][0]['reset_required']
    assert [c['call'] for c in mutating_calls(host)] == ['nvmlDeviceSetMigMode']


@pytest.mark.parametrize('model', ['A100-SXM4-80GB', 'H100-SXM5-80GB'])
def test_mode_held_by_a_client_stays_pending_with_the_reason(simulated_host, run_module, model):
    host = simulated_host([{'model': model, 'clients': ['nvidia-persistenced']}])
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': ['all'], 'state': 'enabled', 'allow_reset': False})
    assert not failed and result['changed']
    gpu = result['gpus'][0]
    assert gpu['after'] == {'current': 'disabled', 'pending': 'enabled'} and gpu['reset_required']
    assert 'NVML_ERROR_IN_USE' in gpu['pending_reason'] and 'another client' in gpu['pending_reason']
    # A reset (allowed by default) is refused while the client holds the GPU: the mode stays pending and the
    # refusal is the reason, as nvidia_mig_layout reports it.
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': ['all'], 'state': 'enabled'})
    assert not failed and result['gpus'][0]['reset_required'] and not result['gpus'][0]['reset_performed']
    assert 'the GPU reset was refused' in result['gpus'][0]['pending_reason'], result
    assert host.read()['gpus'][0]['mig'] == {'current': 'disabled', 'pending': 'enabled'}
    simulator.set_clients(host.path, 0, [])
    calls_before = len(mutating_calls(host))
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': ['all'], 'state': 'enabled', 'allow_reset': True})
    # Ampere: a reset applies the pending mode. Hopper: MIG mode is driver state, asking again applies it.
    hopper = model.startswith('H100')
    assert not failed and result['changed'] and result['gpus'][0]['reset_performed'] is not hopper
    assert result['gpus'][0]['after'] == ENABLED and not result['gpus'][0]['reset_required']
    assert [c['call'] for c in mutating_calls(host)[calls_before:]] == (
        ['nvmlDeviceSetMigMode'] if hopper else ['simulate_gpu_reset'])
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': ['all'], 'state': 'enabled', 'allow_reset': True})
    assert not failed and not result['changed']


@pytest.mark.parametrize('reset, performed', [('if_idle', True), ('never', False)])
def test_mode_deprecated_reset_still_means_allow_reset_and_warns(simulated_host, run_module, monkeypatch, reset, performed):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'clients': ['nvidia-persistenced']}])
    run_module(nvidia_mig_mode.main, {'gpus': ['all'], 'state': 'enabled'})
    simulator.set_clients(host.path, 0, [])
    # Where the argument validation reports a deprecated option (its global store differs between ansible-core versions).
    deprecations = []
    monkeypatch.setattr(arg_spec, 'deprecate', lambda msg, version=None, **kwargs: deprecations.append((msg, version)))
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': ['all'], 'state': 'enabled', 'reset': reset})
    assert not failed, result
    assert result['gpus'][0]['reset_performed'] is performed and result['gpus'][0]['reset_required'] is not performed
    assert [(version, "'reset'" in msg) for msg, version in deprecations] == [('1.0.0', True)], deprecations


def test_mode_hopper_applies_at_once(simulated_host, run_module):
    simulated_host([{'model': 'H100-SXM5-80GB'}, {'model': 'H200'}])
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': ['all'], 'state': 'enabled'})
    assert not failed and result['changed']
    assert [g['after'] for g in result['gpus']] == [ENABLED, ENABLED]
    assert not any(g['reset_performed'] for g in result['gpus'])


def test_mode_check_mode_predicts_and_mutates_nothing(simulated_host, run_module):
    host = simulated_host([{'model': 'A100-SXM4-80GB'}, {'model': 'H100-SXM5-80GB'}])
    before = host.read()['gpus']
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': ['all'], 'state': 'enabled', 'allow_reset': True},
                                check_mode=True, diff=True)
    assert not failed and result['changed']
    assert [g['after'] for g in result['gpus']] == [ENABLED, ENABLED]
    assert 'GPU 0: current=enabled' in result['diff']['after']
    assert mutating_calls(host) == []
    assert [g.get('mig') for g in host.read()['gpus']] == [g.get('mig') for g in before]


def test_mode_disable_refuses_busy_gpu_and_changes_nothing(simulated_host, run_module):
    host = busy_3g_host(simulated_host)
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': [0], 'state': 'disabled'})
    assert failed and '4242' in result['msg'] and 'GPU 0' in result['msg']
    assert mutating_calls(host) == []


@pytest.mark.parametrize('module, args', [
    (nvidia_mig_mode, {'state': 'enabled'}),
    (nvidia_mig_instance, {'instances': {}, 'state': 'present'}),
    (nvidia_mig_repack, {'pod_resources': 'off'}),
], ids=['mode', 'instance', 'repack'])
def test_every_gpu_module_skips_a_gpu_without_mig_under_all_and_refuses_it_by_name(simulated_host, run_module, module, args):
    host = simulated_host([{'model': 'L40S'}, {'model': 'H200', 'mig': {'current': 'enabled', 'pending': 'enabled'}}])
    result, failed = run_module(module.main, dict(args, gpus=['all']), check_mode=True)
    assert not failed, result
    assert result['skipped_gpus'] == [{'index': 0, 'name': 'NVIDIA L40S', 'reason': 'not MIG-capable'}]
    assert [g['index'] for g in result['gpus']] == [1]
    result, failed = run_module(module.main, dict(args, gpus=[0]), check_mode=True)
    assert failed and result['msg'] == 'GPU 0 (NVIDIA L40S) is not MIG-capable'
    assert mutating_calls(host) == []


def test_mode_disable_destroys_idle_instances_first(simulated_host, run_module):
    host = busy_3g_host(simulated_host, pids=())
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': [0], 'state': 'disabled', 'allow_reset': True})
    assert not failed, result
    assert result['gpus'][0]['destroyed_instances'][0]['profile'] == '3g.40gb'
    assert result['gpus'][0]['after'] == {'current': 'disabled', 'pending': 'disabled'}
    calls = [c['call'] for c in mutating_calls(host)]
    assert calls[:3] == ['nvmlComputeInstanceDestroy', 'nvmlGpuInstanceDestroy', 'nvmlDeviceSetMigMode']


def test_mode_non_capable_explicit_is_error_all_is_skipped(simulated_host, run_module):
    host = simulated_host([{'model': 'L40S'}, {'model': 'H200'}])
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': [0], 'state': 'enabled'})
    assert failed and 'not MIG-capable' in result['msg']
    assert mutating_calls(host) == []
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': ['all'], 'state': 'enabled'})
    assert not failed and result['skipped_gpus'][0]['index'] == 0 and [g['index'] for g in result['gpus']] == [1]


@pytest.mark.parametrize('args, message', [
    ({'gpus': ['all'], 'state': 'on'}, 'value of state must be one of'),
    ({'gpus': ['nine'], 'state': 'enabled'}, 'invalid GPU selector'),
    ({'gpus': ['all'], 'state': 'enabled', 'allow_reset': 'if_idle'}, 'allow_reset'),
    ({'gpus': ['all'], 'state': 'enabled', 'reset': 'always'}, 'value of reset must be one of'),
    ({'gpus': ['all'], 'state': 'enabled', 'reset': 'if_idle', 'allow_reset': True}, 'mutually exclusive: allow_reset|reset'),
    ({'gpus': ['all'], 'state': 'enabled', 'lock_timeout': -1}, 'lock_timeout'),
])
def test_mode_bad_input(simulated_host, run_module, args, message):
    host = simulated_host([{'model': 'A100-SXM4-80GB'}])
    result, failed = run_module(nvidia_mig_mode.main, args)
    assert failed and message in result['msg']
    assert mutating_calls(host) == []


# ---- instances ------------------------------------------------------------------------

def test_instance_keeps_busy_and_places_around_it(simulated_host, run_module):
    host = busy_3g_host(simulated_host)
    args = {'gpus': [0], 'instances': {'2g.20gb': 2, '3g.40gb': 1}}
    result, failed = run_module(nvidia_mig_instance.main, args, diff=True)
    assert not failed, result
    assert layout(result) == [('2g.20gb', 0, ('2g.20gb',)), ('2g.20gb', 2, ('2g.20gb',)), ('3g.40gb', 4, ('3g.40gb',))]
    assert not [a for a in result['actions'] if a['action'].startswith('destroy')]
    assert 'GPU 0: 2g.20gb@0' in result['diff']['after']
    assert all(c['call'] != 'nvmlDeviceCreateGpuInstance' for c in mutating_calls(host))  # always with placement
    again, failed = run_module(nvidia_mig_instance.main, args)
    assert not failed and not again['changed'] and again['actions'] == []


def test_instance_check_mode_returns_the_plan_and_mutates_nothing(simulated_host, run_module):
    host = busy_3g_host(simulated_host)
    args = {'gpus': [0], 'instances': {'2g.20gb': 2, '3g.40gb': 1}}
    checked, failed = run_module(nvidia_mig_instance.main, args, check_mode=True)
    assert not failed and checked['changed']
    assert mutating_calls(host) == []
    applied, failed = run_module(nvidia_mig_instance.main, args)
    assert without_new_ids(checked['actions']) == without_new_ids(applied['actions'])


def test_instance_packs_compute_instances(simulated_host, run_module):
    simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED)}])
    result, failed = run_module(nvidia_mig_instance.main, {'gpus': [0], 'instances': {'1c.3g.40gb': 4}})
    assert not failed, result
    assert layout(result) == [('3g.40gb', 0, ('1c.3g.40gb',) * 3), ('3g.40gb', 4, ('1c.3g.40gb',))]
    facts = facts_of(run_module)['gpus'][0]
    assert sorted(len(gi['compute_instances']) for gi in facts['gpu_instances']) == [1, 3]


def test_instance_refuses_layout_that_drops_busy_instance(simulated_host, run_module):
    host = busy_3g_host(simulated_host)
    result, failed = run_module(nvidia_mig_instance.main, {'gpus': [0], 'instances': {'1g.10gb': 7}})
    assert failed and '4242' in result['msg'] and '3g.40gb' in result['msg']
    assert mutating_calls(host) == []


def test_instance_on_disabled_mig_points_to_mode_module(simulated_host, run_module):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': {'current': 'disabled', 'pending': 'enabled'}}])
    result, failed = run_module(nvidia_mig_instance.main, {'gpus': [0], 'instances': {'7g.80gb': 1}})
    assert failed and 'nvidia_mig_mode' in result['msg']
    planned, failed = run_module(nvidia_mig_instance.main, {'gpus': [0], 'instances': {'7g.80gb': 1}}, check_mode=True)
    assert not failed and planned['changed']
    # NVML hides the profiles while MIG is off: the instances can only be planned once it is on.
    assert planned['gpus'][0]['deferred'] and planned['gpus'][0]['after'] is None and 'after MIG is enabled' in planned['gpus'][0]['note']
    assert mutating_calls(host) == []


BAD_INSTANCE_INPUT = [
    ({'instances': {'9g.90gb': 1}}, 'not offered by this GPU'),
    ({'instances': {'3g.40gb': 3}}, 'at most 2'),
    ({'instances': {'5c.7g.80gb': 1}}, 'not valid inside'),
    ({'instances': {'1g.10gb+me': 1, '1g.10gb': 6, '1g.20gb+me': 1}}, 'not offered'),
    ({'instances': {'7g.80gb': 1, '1g.10gb': 1}}, 'does not fit on an empty GPU'),
    ({'instances': {'3g.40gb': 'two'}}, 'non-negative integer'),
    ({'instances': {'3g.40gb': -1}}, 'non-negative integer'),
    ({'instances': {'threeg': 1}}, 'invalid MIG profile'),
    ({'instances': {'3g.40gb': 1}, 'state': 'absent'}, 'leave instances empty'),
    ({'gpus': ['5']}, 'matches no GPU'),
    ({'state': 'gone'}, 'value of state must be one of'),
]


@pytest.mark.parametrize('args, message', BAD_INSTANCE_INPUT)
def test_instance_bad_input_is_a_clear_error_with_zero_mutations(simulated_host, run_module, args, message):
    host = busy_3g_host(simulated_host, pids=())
    request = dict({'gpus': [0]}, **args)
    result, failed = run_module(nvidia_mig_instance.main, request)
    assert failed and message in result['msg'], result['msg']
    assert mutating_calls(host) == []


def test_instance_two_media_engine_instances_are_rejected(simulated_host, run_module):
    host = simulated_host([{'model': 'A30', 'mig': dict(ENABLED)}])
    result, failed = run_module(nvidia_mig_instance.main, {'gpus': [0], 'instances': {'1g.6gb+me': 1, '2g.12gb+me': 1}})
    assert failed and '+me' in result['msg']
    assert mutating_calls(host) == []


def test_instance_absent_clears_idle_gpu(simulated_host, run_module):
    busy_3g_host(simulated_host, pids=())
    result, failed = run_module(nvidia_mig_instance.main, {'gpus': [0], 'state': 'absent'})
    assert not failed and result['changed'] and layout(result) == []
    assert facts_of(run_module)['gpus'][0]['gpu_instances'] == []


TRANSITION = {'gpus': ['all'], 'instances': {'1g.10gb': 2, '2g.20gb': 1, '3g.40gb': 1}}


def _transition_host(simulated_host, faults=None):
    return simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '1g.10gb', 'start': s, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]} for s in range(7)]}],
        faults=faults)


def _count_mutations(simulated_host, run_module):
    host = _transition_host(simulated_host)
    result, failed = run_module(nvidia_mig_instance.main, TRANSITION)
    assert not failed, result
    return result, len(mutating_calls(host))


def test_fault_at_every_mutating_call_then_rerun_converges(simulated_host, run_module, tmp_path):
    reference, total = _count_mutations(simulated_host, run_module)
    assert total >= 6
    calls = [(a['action']) for a in reference['actions']]
    names = {'destroy_compute_instance': 'nvmlComputeInstanceDestroy', 'destroy_gpu_instance': 'nvmlGpuInstanceDestroy',
             'create_gpu_instance': 'nvmlDeviceCreateGpuInstanceWithPlacement',
             'create_compute_instance': 'nvmlGpuInstanceCreateComputeInstanceWithPlacement'}
    for position, action in enumerate(calls):
        nth = calls[:position + 1].count(action)
        fault = {'call': names[action], 'gpu': 0, 'nth': nth, 'error': 'NVML_ERROR_UNKNOWN'}
        host = _transition_host(simulated_host, faults=[fault])
        result, failed = run_module(nvidia_mig_instance.main, TRANSITION)
        assert failed, 'fault %s did not stop the apply' % fault
        assert 'NVML_ERROR_UNKNOWN' in result['msg'] and 're-run to converge' in result['msg']
        assert len(result['done']) == position
        rerun, failed = run_module(nvidia_mig_instance.main, TRANSITION)
        assert not failed, rerun['msg']
        assert layout(rerun) == layout(reference)
        final, failed = run_module(nvidia_mig_instance.main, TRANSITION)
        assert not failed and not final['changed']
        os.remove(host.path)


def _locked_run(path, queue):
    # a separate process holds the host lock for a while, as a concurrent run would
    os.environ[SIMULATOR_ENV] = path
    from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_lock import HostLock
    import time
    with HostLock(path + '.host.lock', 10):
        queue.put('locked')
        time.sleep(1.5)


def test_concurrent_runs_on_one_host_serialise(simulated_host, run_module):
    host = _transition_host(simulated_host)
    queue = multiprocessing.Queue()
    holder = multiprocessing.Process(target=_locked_run, args=(host.path, queue))
    holder.start()
    assert queue.get(timeout=10) == 'locked'
    result, failed = run_module(nvidia_mig_instance.main, dict(TRANSITION, lock_timeout=0))
    assert failed and 'another gpufleet.mig run holds' in result['msg']
    result, failed = run_module(nvidia_mig_instance.main, dict(TRANSITION, lock_timeout=20))
    holder.join()
    assert not failed and result['changed']


def test_state_file_round_trip_is_readable_json(simulated_host, run_module):
    host = busy_3g_host(simulated_host, pids=())
    run_module(nvidia_mig_instance.main, {'gpus': [0], 'instances': {'7g.80gb': 1}})
    with open(host.path) as handle:
        state = json.load(handle)
    assert [gi['profile'] for gi in state['gpus'][0]['gpu_instances']] == ['7g.80gb']


# ---- pods that hold a GPU or its instances (the kubelet's pod-resources API) ------------------------

def seven_small(simulated_host):
    return simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '1g.10gb', 'start': s, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]} for s in range(7)]}])


def test_instance_never_destroys_an_idle_instance_a_pod_holds(simulated_host, run_module, kubelet_with):
    host = seven_small(simulated_host)
    socket = kubelet_with(pods_on(mig_uuids(run_module), [3]))
    for args in ({'instances': {'3g.40gb': 2}}, {'state': 'absent'}):
        result, failed = run_module(nvidia_mig_instance.main, dict(args, gpus=[0], pod_resources_socket=socket))
        assert failed and 'allocated to pod(s) team/p3' in result['msg'] and 'never destroyed' in result['msg'], result
    assert mutating_calls(host) == []


def test_instance_keeps_the_held_instance_and_plans_around_it(simulated_host, run_module, kubelet_with):
    seven_small(simulated_host)
    uuids = mig_uuids(run_module)
    # Unheld, the 1g at 0 would stay and the 3g go at 4; the pod on the 1g at 5 turns that round.
    socket = kubelet_with(pods_on(uuids, [5]))
    result, failed = run_module(nvidia_mig_instance.main, {'gpus': [0], 'instances': {'1g.10gb': 1, '3g.40gb': 1},
                                                           'pod_resources': 'required', 'pod_resources_socket': socket})
    assert not failed, result
    assert result['pod_resources'] == {'read': True}
    assert layout(result) == [('1g.10gb', 5, ('1g.10gb',)), ('3g.40gb', 0, ('3g.40gb',))]
    # The pod's MIG device is the same one: kept, not recreated.
    assert mig_uuids(run_module)[5] == uuids[5]


def test_mode_refuses_to_disable_mig_under_a_pod_on_an_idle_instance(simulated_host, run_module, kubelet_with):
    host = busy_3g_host(simulated_host, pids=())
    socket = kubelet_with(pods_on(mig_uuids(run_module), [4], resource='nvidia.com/mig-3g.40gb'))
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': [0], 'state': 'disabled', 'pod_resources_socket': socket})
    assert failed and 'GPU 0' in result['msg'] and 'team/p4' in result['msg'] and 'MIG mode' in result['msg'], result
    assert mutating_calls(host) == []
    # Nothing to change: the pod is no obstacle.
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': [0], 'state': 'enabled', 'pod_resources_socket': socket})
    assert not failed and not result['changed'] and result['pod_resources'] == {'read': True}


@pytest.mark.parametrize('device_id', ['uuid', 'index', 'replica'])
def test_mode_refuses_to_enable_mig_under_a_pod_holding_the_whole_gpu(simulated_host, run_module, kubelet_with, device_id):
    host = simulated_host([{'model': 'A100-SXM4-80GB'}, {'model': 'H100-SXM5-80GB'}])
    uuid = facts_of(run_module)['gpus'][1]['uuid']
    ids = {'uuid': uuid, 'index': '1', 'replica': uuid + '::3'}
    socket = kubelet_with([{'namespace': 'ml', 'pod': 'trainer', 'containers': [{'name': 'c', 'devices': {'nvidia.com/gpu': [ids[device_id]]}}]}])
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': ['all'], 'state': 'enabled', 'pod_resources_socket': socket})
    assert failed and 'GPU 1' in result['msg'] and 'ml/trainer' in result['msg'] and 'GPU 0' not in result['msg'], result
    assert mutating_calls(host) == []
    # The other GPU alone is free to change.
    result, failed = run_module(nvidia_mig_mode.main, {'gpus': [0], 'state': 'enabled', 'pod_resources_socket': socket})
    assert not failed and result['changed']


def test_an_unknown_device_id_stops_every_module_before_any_change(simulated_host, run_module, kubelet_with):
    host = seven_small(simulated_host)
    socket = kubelet_with([{'namespace': 'team', 'pod': 'odd', 'containers': [
        {'name': 'c', 'devices': {'nvidia.com/mig-1g.10gb': ['mig-slot-7']}}]}])
    runs = [(nvidia_mig_instance.main, {'gpus': [0], 'state': 'absent'}),
            (nvidia_mig_mode.main, {'gpus': [0], 'state': 'disabled'}),
            (nvidia_mig_facts.main, {})]
    for main, args in runs:
        result, failed = run_module(main, dict(args, pod_resources_socket=socket))
        assert failed and 'mig-slot-7' in result['msg'] and 'team/odd' in result['msg'], result
        assert 'pod_resources=off' in result['msg'] and 'unexpected error' not in result['msg']
    assert mutating_calls(host) == []


def test_an_existing_socket_that_cannot_be_read_fails_auto(simulated_host, run_module, monkeypatch):
    import socket as sockets
    import tempfile
    host = seven_small(simulated_host)
    directory = tempfile.mkdtemp(prefix='podres-')
    stale = os.path.join(directory, 'kubelet.sock')
    listener = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
    listener.bind(stale)
    listener.close()  # the file stays, as after a kubelet crash
    try:
        result, failed = run_module(nvidia_mig_instance.main, {'gpus': [0], 'state': 'absent', 'pod_resources_socket': stale})
        assert failed and 'which pods hold which GPU cannot be read' in result['msg'] and 'Kubernetes node' in result['msg']
        assert 'nothing answers' in result['msg'] and 'pod_resources=off' in result['msg']
        monkeypatch.setitem(sys.modules, 'grpc', None)  # import grpc now raises ImportError
        result, failed = run_module(nvidia_mig_facts.main, {'pod_resources_socket': stale})
        assert failed and 'grpcio' in result['msg'] and 'pod_resources=off' in result['msg']
        assert mutating_calls(host) == []
        # off skips the kubelet, as the message says.
        result, failed = run_module(nvidia_mig_facts.main, {'pod_resources_socket': stale, 'pod_resources': 'off'})
        assert not failed and result['ansible_facts']['nvidia_mig']['pod_resources'] == {'read': False, 'reason': 'pod_resources=off'}
    finally:
        os.remove(stale)
        os.rmdir(directory)
    # No socket at all: not a Kubernetes node, auto goes on.
    result, failed = run_module(nvidia_mig_facts.main, {'pod_resources_socket': stale})
    assert not failed and 'not a Kubernetes node' in result['ansible_facts']['nvidia_mig']['pod_resources']['reason']


def test_a_socket_that_cannot_even_be_looked_at_is_not_taken_for_absent(monkeypatch):
    from ansible_collections.gpufleet.mig.plugins.module_utils import _module_support

    class DeniedOs(object):
        @staticmethod
        def stat(path):
            raise OSError(errno.EACCES, 'Permission denied', path)

    monkeypatch.setattr(_module_support, 'os', DeniedOs)
    assert _module_support._socket_absent('/var/lib/kubelet/pod-resources/kubelet.sock') is False


# ---- who may run the modules -----------------------------------------------------------------------

def test_a_non_root_user_is_told_to_use_become(simulated_host, run_module, monkeypatch):
    from ansible_collections.gpufleet.mig.plugins.module_utils.host import _host_lock
    host = busy_3g_host(simulated_host)
    # The lock folder (the test's) is root's; the module now runs as an ordinary user.
    monkeypatch.setattr(_host_lock.os, 'geteuid', lambda: 1000)
    for main, args in ((nvidia_mig_facts.main, {'pod_resources': 'off'}),
                       (nvidia_mig_instance.main, {'gpus': [0], 'state': 'absent', 'pod_resources': 'off'})):
        result, failed = run_module(main, args)
        assert failed and 'needs root' in result['msg'] and 'become: true' in result['msg'], result
        assert 'unexpected error' not in result['msg'] and 'exception' not in result
    assert mutating_calls(host) == []


# ---- NVML errors are never read as "nothing there" ---------------------------------------------------

def test_a_failed_compute_profile_read_is_an_error_not_an_idle_instance(simulated_host, run_module):
    fault = {'call': 'nvmlGpuInstanceGetComputeInstanceProfileInfoV', 'gpu': 0, 'nth': 1, 'error': 'NVML_ERROR_UNKNOWN'}
    host = busy_3g_host(simulated_host)
    state = host.read()
    state['faults'] = [fault]
    host.write(state)
    result, failed = run_module(nvidia_mig_facts.main, {'pod_resources': 'off'})
    assert failed and 'read compute profile 0 of GPU instance' in result['msg'] and 'NVML_ERROR_UNKNOWN' in result['msg'], result
    # Read again once the error is gone: the busy compute instance is there.
    facts = facts_of(run_module)['gpus'][0]
    assert facts['gpu_instances'][0]['busy'] and facts['gpu_instances'][0]['compute_instances'][0]['processes'][0]['pid'] == 4242
    assert mutating_calls(host) == []


# ---- run_module's error policy: one base class for the failures that explain themselves ----------------------

class _Reported(Exception):
    pass


class _Module(object):
    def fail_json(self, **result):
        raise _Reported(result)


@pytest.mark.parametrize('error', [
    _nvml_backend.BackendError('GPU 0: destroy GPU instance 3 failed: NVML_ERROR_IN_USE'),
    SelectionError('no GPU matches 0x20B510DE'),
    PlanningError('GPU 0: layout 2x4g.40gb does not fit'),
    LayoutConfigError('layout daytime: unknown profile 9g.99gb'),
    ApplyError('GPU 0 failed', [], None),
    LockTimeout('held by another run'),
    UnsafeLockPath('/run/gpufleet-mig is world-writable'),
    LockPermissionDenied('the lock is root\'s'),
    SystemctlError('systemctl start nvidia-dcgm.service failed (rc=1): Job for nvidia-dcgm.service failed.'),
])
def test_a_failure_that_explains_itself_is_reported_in_one_line_without_a_traceback(error):
    assert isinstance(error, GpufleetError)

    def body(module):
        raise error
    with pytest.raises(_Reported) as reported:
        run_module(_Module(), body)
    assert reported.value.args[0] == {'msg': str(error)}


def test_any_other_failure_is_reported_as_unexpected_with_its_traceback():
    def body(module):
        raise KeyError('gpu_instances')
    with pytest.raises(_Reported) as reported:
        run_module(_Module(), body)
    result = reported.value.args[0]
    assert result['msg'] == "unexpected error: 'gpu_instances'" and 'Traceback' in result['exception']
