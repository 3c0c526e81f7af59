# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia_mig_layout in-process against simulated hosts, and the boot-time apply it installs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible.module_utils import basic

from ansible_collections.gpufleet.mig.plugins.module_utils.host import _boot_entry, _boot_install
from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_layout
from ansible_collections.gpufleet.mig.tests.support.simulator import simulated_environment
from ansible_collections.gpufleet.mig.tests.unit.conftest import mutating_calls
from ansible_collections.gpufleet.mig.tests.unit.plugins.modules.conftest import mig_uuids, pods_on
import gpufleet_nvml_sim as simulator

ENABLED = {'current': 'enabled', 'pending': 'enabled'}
NIGHT = {'nighttime': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'3g.40gb': 2}}]}
DAY = {'daytime': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 7}}]}
OFF = {'all-disabled': [{'devices': 'all', 'mig-enabled': False}]}


def layout_args(host_paths, config, **extra):
    args = dict(host_paths, name=sorted(config)[0], config=config)
    args.update(extra)
    return args


def profiles(state, gpu=0):
    return sorted((gi['profile'], gi['start']) for gi in state['gpus'][gpu]['gpu_instances'])


def read(path):
    with open(path) as handle:
        return handle.read()


def test_decide_only_changes_no_gpu_and_declares_nothing_new(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB'}, {'model': 'H100-SXM5-80GB'}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, apply=False))
    assert not failed, result
    assert mutating_calls(host) == []
    assert result['in_layout'] is False and result['actions'] == []
    # MIG is off: NVML hides the profiles, so the instances are planned after the mode step.
    for gpu in result['gpus']:
        assert gpu['deferred'] and gpu['instances'] is None and 'after MIG is enabled' in gpu['note']
        assert gpu['actions'] == [{'action': 'set_mig_mode', 'mode': 'enabled'}]
    # The host does not hold the layout yet: nothing is declared for the boot unit before the change.
    assert not result['changed'] and result['files'] == [] and not os.path.exists(host_paths['config_dir'])


def test_decide_only_keeps_the_files_of_a_host_in_the_layout(simulated_host, run_module, host_paths):
    simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '3g.40gb', 'start': s, 'compute_instances': [{'profile': '3g.40gb', 'start': 0}]} for s in (0, 4)]}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, apply=False))
    assert not failed and result['in_layout'], result
    declared = json.loads(read(os.path.join(host_paths['config_dir'], 'layout.json')))
    assert declared['name'] == 'nighttime' and declared['entries'][0]['mig-devices'] == {'3g.40gb': 2}
    assert result['changed'] and os.path.join(host_paths['config_dir'], 'layout.json') in result['files']
    again, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, apply=False))
    assert not failed and not again['changed'] and again['files'] == []


def test_apply_converges_verifies_and_is_idempotent(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB'}, {'model': 'H100-SXM5-80GB'}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT), diff=True)
    assert not failed, result
    assert result['changed'] and result['in_layout'] and not result['reboot_required']
    state = host.read()
    assert profiles(state, 0) == profiles(state, 1) == [('3g.40gb', 0), ('3g.40gb', 4)]
    assert [a['action'] for a in result['actions'] if a['gpu'] == 0] == [
        'set_mig_mode', 'create_gpu_instance', 'create_compute_instance', 'create_gpu_instance', 'create_compute_instance']
    assert 'GPU 0: MIG current=enabled pending=enabled' in result['diff']['after']
    record = json.loads(read(os.path.join(host_paths['config_dir'], 'last_apply.json')))
    assert record['result'] == 'success' and record['source'] == 'ansible' and record['layout'] == 'nighttime'
    metrics = read(os.path.join(host_paths['metrics_dir'], 'gpufleet_mig.prom'))
    assert re.findall(r'(?m)^gpufleet_mig_gpu_in_layout\{.*\} 1$', metrics) and 'gpufleet_mig_gpu_in_layout{' in metrics
    assert 'gpufleet_mig_layout_last_apply_success{layout="nighttime",source="ansible"} 1' in metrics
    calls = len(host.calls())
    again, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))
    assert not failed and not again['changed'] and again['in_layout'] and again['files'] == []
    assert len(host.calls()) == calls


def test_check_mode_writes_nothing_and_calls_no_mutation(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED)}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT), check_mode=True)
    assert not failed and result['changed']
    assert mutating_calls(host) == [] and not os.path.exists(host_paths['config_dir'])
    gpu = result['gpus'][0]
    assert not gpu['deferred'] and gpu['instances'] == {'3g.40gb': 2}
    assert [a['action'] for a in gpu['actions']] == ['create_gpu_instance', 'create_compute_instance'] * 2
    assert os.path.join(host_paths['config_dir'], 'layout.json') in result['files']


def test_busy_instance_fails_before_any_change(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '7g.80gb', 'start': 0, 'compute_instances': [{'profile': '7g.80gb', 'start': 0, 'pids': [4242]}]}]}])
    before = host.read()['gpus']
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))
    assert failed and 'running processes [4242]' in result['msg'] and 'never destroyed' in result['msg']
    assert host.read()['gpus'] == before and mutating_calls(host) == []
    # The decision failed, so no declared layout was written for the boot unit.
    assert not os.path.exists(os.path.join(host_paths['config_dir'], 'layout.json'))


def test_unmatched_gpu_is_left_alone_or_fails_when_asked(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB'}, {'model': 'H100-SXM5-80GB'}])
    only_a100 = {'nighttime': [{'devices': 'all', 'device-filter': ['0x20B210DE'], 'mig-enabled': True, 'mig-devices': {'3g.40gb': 2}}]}
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, only_a100))
    assert not failed, result
    assert [g['index'] for g in result['gpus']] == [0]
    assert [g['index'] for g in result['unmatched_gpus']] == [1] and result['unmatched_gpus'][0]['reason']
    state = host.read()
    assert profiles(state, 0) == [('3g.40gb', 0), ('3g.40gb', 4)]
    assert state['gpus'][1]['mig']['current'] == 'disabled' and not state['gpus'][1]['gpu_instances']
    calls = len(host.calls())
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, only_a100, unmatched='fail'))
    assert failed and 'GPU 1' in result['msg']
    assert len(host.calls()) == calls


NOWHERE = {'nowhere': [{'devices': 'all', 'device-filter': ['0xDEADBEEF'], 'mig-enabled': True, 'mig-devices': {'1g': 1}},
                       {'devices': [7], 'mig-enabled': False}]}


@pytest.mark.parametrize('args, check_mode', [
    ({}, False), ({'apply': False}, False), ({}, True)], ids=['apply', 'decision', 'check mode'])
def test_a_layout_matching_none_of_the_hosts_gpus_is_refused_before_any_change(
        simulated_host, run_module, host_paths, args, check_mode):
    """Declared there it would apply nowhere: refused in one line naming the GPU models and the device-filters,
    nothing declared (no layout.json) and no GPU changed, though unmatched is ignore (its default)."""
    host = simulated_host([{'model': 'A100-SXM4-80GB'}, {'model': 'A100-SXM4-80GB'}, {'model': 'H100-SXM5-80GB'}, {'model': 'L40S'}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NOWHERE, **args), check_mode=check_mode)
    assert failed and result['msg'] == (
        'layout nowhere matches none of the MIG-capable GPUs of this host (NVIDIA A100-SXM4-80GB 0x20B210DE x2, '
        'NVIDIA H100 80GB HBM3 0x233010DE; device-filters: entry 0 0xDEADBEEF, entry 1 any devices 7): nothing was '
        'declared or changed; add an entry for these GPUs or give this host another layout'), result['msg']
    assert '\n' not in result['msg']
    # The refusal names the GPUs it left (the rollout's pre-flight refuses a layout that matches no GPU of the fleet
    # from its first decisions): the A100s and the H100, not the L40S (no MIG).
    assert [(gpu['index'], gpu['pci_device_id']) for gpu in result['unmatched_gpus']] == [
        (0, '0x20B210DE'), (1, '0x20B210DE'), (2, '0x233010DE')], result
    assert mutating_calls(host) == [] and not os.path.exists(os.path.join(host_paths['config_dir'], 'layout.json'))
    # An apply refused so is recorded as failed (for the metrics), as every refused apply; a decision records nothing.
    recorded = os.path.exists(os.path.join(host_paths['config_dir'], 'last_apply.json'))
    assert recorded == (args.get('apply', True) and not check_mode)


def test_a_host_without_mig_capable_gpus_is_not_refused_and_a_partial_match_is_not_either(simulated_host, run_module, host_paths):
    simulated_host([{'model': 'L40S'}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NOWHERE, apply=False))
    assert not failed and result['gpus'] == [] and result['unmatched_gpus'] == [], result


def test_disabling_mig_destroys_idle_instances_first(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '3g.40gb', 'start': 0, 'compute_instances': [{'profile': '3g.40gb', 'start': 0}]}]}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, OFF))
    assert not failed, result
    assert [a['action'] for a in result['actions']] == ['destroy_compute_instance', 'destroy_gpu_instance', 'set_mig_mode']
    state = host.read()
    assert state['gpus'][0]['mig'] == {'current': 'disabled', 'pending': 'disabled'} and not state['gpus'][0]['gpu_instances']


def test_mode_and_layout_modules_report_the_instances_disabling_mig_destroys_in_one_shape(simulated_host, run_module, host_paths):
    from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_mode
    host = simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '3g.40gb', 'start': 4, 'compute_instances': [{'profile': '3g.40gb', 'start': 0}]},
        {'profile': '2g.20gb', 'start': 0, 'compute_instances': [{'profile': '1c.2g.20gb', 'start': 0}, {'profile': '1c.2g.20gb', 'start': 1}]}]}])
    uuids = mig_uuids(run_module)
    by_layout, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, OFF), check_mode=True)
    assert not failed, by_layout
    by_mode, failed = run_module(nvidia_mig_mode.main, {'gpus': [0], 'state': 'disabled', 'pod_resources': 'off'}, check_mode=True)
    assert not failed, by_mode
    destroyed = by_layout['gpus'][0]['destroyed_instances']
    assert by_mode['gpus'][0]['destroyed_instances'] == destroyed
    assert [(d['profile'], d['placement']['start'], d['allocated_to']) for d in destroyed] == [('2g.20gb', 0, []), ('3g.40gb', 4, [])]
    assert destroyed[0]['mig_uuids'][0] == uuids[0] and len(destroyed[0]['mig_uuids']) == 2 and destroyed[1]['mig_uuids'] == [uuids[4]]
    assert mutating_calls(host) == []


def test_bad_layout_is_refused_with_the_reason(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A30'}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, name='weekend'))
    assert failed and 'weekend' in result['msg'] and 'nighttime' in result['msg']
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, {'x': [{'devices': 'all', 'mig-enabled': 'yes'}]}))
    assert failed and 'mig-enabled' in result['msg']
    assert mutating_calls(host) == []
    # A profile the GPU does not offer: with MIG on, the decision fails before any change ...
    enabled = simulated_host([{'model': 'A30', 'mig': dict(ENABLED)}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))
    assert failed and '3g.40gb' in result['msg'] and '2g.12gb' in result['msg'] and mutating_calls(enabled) == []
    # ... and with MIG off too, though NVML names the profiles only after the mode step (test_mig_forecast).
    disabled = simulated_host([{'model': 'A30'}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))
    assert failed and '3g.40gb is not offered' in result['msg'] and 'before any change' in result['msg']
    assert mutating_calls(disabled) == []


# ---- systemd: units, GPU clients, other owners -------------------------------------------

@pytest.fixture
def fake_systemctl(monkeypatch):
    """systemctl as the module calls it (argument lists through run_command); ``active``/``enabled`` are the state,
    ``failing`` the (verb, unit) calls that fail."""
    state = {'active': set(), 'enabled': set(), 'calls': [], 'failing': set()}

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return '/usr/bin/' + name

    def run_command(self, args, **kwargs):
        assert isinstance(args, list) and args[0] == '/usr/bin/systemctl', args
        state['calls'].append(args[1:])
        verb, unit = args[1], args[-1]
        if (verb, unit) in state['failing']:
            return 1, '', 'Job for %s failed.' % unit
        if verb == 'is-active':
            return (0 if unit in state['active'] else 3), '', ''
        if verb == 'is-enabled':
            return (0 if unit in state['enabled'] else 1), '', ''
        if verb == 'stop':
            state['active'].discard(unit)
        elif verb == 'start':
            state['active'].add(unit)
        elif verb == 'enable':
            state['enabled'].add(unit)
        return 0, '', ''

    monkeypatch.setattr(basic.AnsibleModule, 'get_bin_path', get_bin_path)
    monkeypatch.setattr(basic.AnsibleModule, 'run_command', run_command)
    return state


def test_units_are_enabled_and_gpu_clients_stopped_during_the_change(simulated_host, run_module, host_paths, fake_systemctl):
    simulated_host([{'model': 'H100-SXM5-80GB'}])
    fake_systemctl['active'].update(['nvidia-dcgm.service'])
    args = layout_args(host_paths, NIGHT, systemd=True, gpu_clients=['nvidia-dcgm.service', 'dcgm-exporter.service'])
    result, failed = run_module(nvidia_mig_layout.main, args)
    assert not failed, result
    calls = fake_systemctl['calls']
    assert ['stop', 'nvidia-dcgm.service'] in calls and ['start', 'nvidia-dcgm.service'] in calls
    assert calls.index(['stop', 'nvidia-dcgm.service']) < calls.index(['start', 'nvidia-dcgm.service'])
    assert ['stop', 'dcgm-exporter.service'] not in calls
    assert result['clients_stopped'] == ['nvidia-dcgm.service'] and 'nvidia-dcgm.service' in fake_systemctl['active']
    assert ['daemon-reload'] in calls and ['enable', 'gpufleet-mig-layout.service'] in calls
    assert ['enable', '--now', 'gpufleet-mig-metrics.timer'] in calls
    unit = read(os.path.join(host_paths['systemd_dir'], 'gpufleet-mig-layout.service'))
    assert re.search(r'(?m)^ExecStart=\S+ \S+/gpufleet-mig-apply apply --layout \S+/layout.json --metrics-dir \S+$', unit)
    timer_service = read(os.path.join(host_paths['systemd_dir'], 'gpufleet-mig-metrics.service'))
    assert re.search(r'(?m)^ExecStart=.* metrics --layout .* --lock-timeout 5$', timer_service)
    # A second run: nothing to reload, enable or stop.
    fake_systemctl['calls'][:] = []
    again, failed = run_module(nvidia_mig_layout.main, args)
    assert not failed and not again['changed']
    assert [c for c in fake_systemctl['calls'] if c[0] not in ('is-active', 'is-enabled')] == []


def test_every_stopped_client_is_started_and_all_failures_are_reported_with_the_first_error(
        simulated_host, run_module, host_paths, fake_systemctl):
    fault = {'call': 'nvmlDeviceCreateGpuInstanceWithPlacement', 'gpu': 0, 'nth': 1, 'error': 'NVML_ERROR_UNKNOWN'}
    simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED)}], faults=[fault])
    clients = ['nvidia-dcgm.service', 'dcgm-exporter.service', 'nvidia-persistenced.service']
    fake_systemctl['active'].update(clients)
    fake_systemctl['failing'].update([('start', 'nvidia-dcgm.service'), ('start', 'dcgm-exporter.service')])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, systemd=True, gpu_clients=clients))
    assert failed
    # Every stopped client was started again, the failing ones included, and nothing was lost from the report.
    starts = [c[1] for c in fake_systemctl['calls'] if c[0] == 'start']
    assert sorted(starts) == sorted(clients)
    assert 'nvidia-persistenced.service' in fake_systemctl['active']
    assert 'NVML_ERROR_UNKNOWN' in result['msg'], result['msg']
    assert 'systemctl start nvidia-dcgm.service failed (rc=1)' in result['msg']
    assert 'systemctl start dcgm-exporter.service failed (rc=1)' in result['msg']
    assert result['msg'].index('NVML_ERROR_UNKNOWN') < result['msg'].index('systemctl start')
    assert 'unexpected error' not in result['msg']
    record = json.loads(read(os.path.join(host_paths['config_dir'], 'last_apply.json')))
    assert record['result'] == 'failed' and 'systemctl start' in record['message']


def test_a_failed_start_after_a_good_change_is_reported(simulated_host, run_module, host_paths, fake_systemctl):
    simulated_host([{'model': 'H100-SXM5-80GB'}])
    fake_systemctl['active'].update(['nvidia-dcgm.service'])
    fake_systemctl['failing'].add(('start', 'nvidia-dcgm.service'))
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, systemd=True, gpu_clients=['nvidia-dcgm.service']))
    assert failed and result['msg'].startswith('starting the stopped GPU clients again failed: systemctl start nvidia-dcgm.service')


def test_a_failed_stop_starts_the_clients_already_stopped(simulated_host, run_module, host_paths, fake_systemctl):
    host = simulated_host([{'model': 'H100-SXM5-80GB'}])
    clients = ['nvidia-dcgm.service', 'dcgm-exporter.service']
    fake_systemctl['active'].update(clients)
    fake_systemctl['failing'].add(('stop', 'dcgm-exporter.service'))
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, systemd=True, gpu_clients=clients))
    assert failed and 'systemctl stop dcgm-exporter.service failed' in result['msg']
    assert ['start', 'nvidia-dcgm.service'] in fake_systemctl['calls'] and set(clients) <= fake_systemctl['active']
    assert mutating_calls(host) == []


def test_another_owner_of_mig_is_refused(simulated_host, run_module, host_paths, fake_systemctl):
    host = simulated_host([{'model': 'A30'}])
    fake_systemctl['enabled'].add('nvidia-mig-manager.service')
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, OFF, systemd=True))
    assert failed and 'nvidia-mig-manager.service' in result['msg'] and mutating_calls(host) == []
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, OFF, systemd=True, allow_other_owner=True))
    assert not failed, result


# ---- the host code it installs ---------------------------------------------------------------

def test_installed_code_is_the_collections_own_and_needs_no_ansible(simulated_host, run_module, host_paths):
    simulated_host([{'model': 'A30'}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, OFF))
    assert not failed, result
    installed = os.path.join(host_paths['lib_dir'], 'ansible_collections', 'gpufleet', 'mig', 'plugins', 'module_utils')
    kept = sorted(os.path.relpath(os.path.join(folder, name), installed) for folder, dummy, names in os.walk(installed) for name in names)
    assert kept == sorted(name + '.py' for name in _boot_install.BOOT_CODE)
    repository = os.path.join(os.path.dirname(nvidia_mig_layout.__file__), '..', 'module_utils')
    for name in kept:
        assert read(os.path.join(installed, name)) == read(os.path.join(repository, name)), name
        # The boot unit runs without Ansible on the host.
        assert not re.search(r'(?m)^\s*(from|import) ansible(\.| |$)', read(os.path.join(installed, name))), name


def test_boot_unit_command_restores_the_layout_after_a_reboot(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB'}, {'model': 'H100-SXM5-80GB'}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))
    assert not failed, result
    simulator.simulate_reboot(host.path)
    state = host.read()
    assert state['gpus'][1]['mig']['current'] == 'disabled' and not state['gpus'][0]['gpu_instances']
    # The unit's command, run as systemd would: no Ansible importable, only the installed code and the simulator.
    script = os.path.join(host_paths['bin_dir'], 'gpufleet-mig-apply')
    poison = "import sys; sys.modules['ansible'] = None; sys.argv = sys.argv[1:]; exec(open(sys.argv[0]).read())"
    env = dict(os.environ, **simulated_environment(host.path))
    layout = os.path.join(host_paths['config_dir'], 'layout.json')
    boot = subprocess.run([sys.executable, '-c', poison, script, 'apply', '--layout', layout, '--metrics-dir', host_paths['metrics_dir']],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    assert boot.returncode == 0, boot.stdout
    assert 'GPU 1: MIG mode set to enabled' in boot.stdout and 'layout nighttime applied' in boot.stdout
    state = host.read()
    assert profiles(state, 0) == profiles(state, 1) == [('3g.40gb', 0), ('3g.40gb', 4)]
    metrics = read(os.path.join(host_paths['metrics_dir'], 'gpufleet_mig.prom'))
    assert 'gpufleet_mig_layout_last_apply_success{layout="nighttime",source="boot"} 1' in metrics


def test_boot_apply_records_a_busy_instance_and_fails(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED)}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))
    assert not failed, result
    first = host.read()['gpus'][0]['gpu_instances'][0]
    simulator.set_pids(host.path, 0, first['id'], first['compute_instances'][0]['id'], [77])
    layout = os.path.join(host_paths['config_dir'], 'layout.json')
    declared = json.loads(read(layout))
    declared['entries'] = DAY['daytime']
    with open(layout, 'w') as handle:
        json.dump(declared, handle)
    before = host.read()['gpus']
    assert _boot_entry.main(['apply', '--layout', layout, '--metrics-dir', host_paths['metrics_dir']]) == 1
    assert host.read()['gpus'] == before
    record = json.loads(read(os.path.join(host_paths['config_dir'], 'last_apply.json')))
    assert record['result'] == 'failed' and record['source'] == 'boot' and '[77]' in record['message']
    metrics = read(os.path.join(host_paths['metrics_dir'], 'gpufleet_mig.prom'))
    assert re.search(r'(?m)^gpufleet_mig_gpu_in_layout\{gpu="0",.*\} 0$', metrics)


def test_metrics_action_reads_only_and_skips_a_held_lock(simulated_host, run_module, host_paths, capsys):
    host = simulated_host([{'model': 'A30'}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, OFF))
    assert not failed, result
    layout = os.path.join(host_paths['config_dir'], 'layout.json')
    calls = len(host.calls())
    os.remove(os.path.join(host_paths['metrics_dir'], 'gpufleet_mig.prom'))
    assert _boot_entry.main(['metrics', '--layout', layout, '--metrics-dir', host_paths['metrics_dir']]) == 0
    assert len(host.calls()) == calls
    assert 'gpufleet_mig_layout_info{layout="all-disabled"} 1' in read(os.path.join(host_paths['metrics_dir'], 'gpufleet_mig.prom'))
    from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_lock import HostLock
    with HostLock(host.path + '.host.lock', 1):
        assert _boot_entry.main(['metrics', '--layout', layout, '--metrics-dir', host_paths['metrics_dir'], '--lock-timeout', '0']) == 0
    assert 'gave up' in capsys.readouterr().err
    assert _boot_entry.main(['metrics', '--layout', layout]) == 2


def test_bad_declared_layout_file(tmp_path, capsys):
    bad = tmp_path / 'layout.json'
    bad.write_text('{"gpus": 1}')
    assert _boot_entry.main(['apply', '--layout', str(bad)]) == 2
    assert 'needs "name" and an "entries" list' in capsys.readouterr().err


# ---- pods that hold instances (the kubelet's pod-resources API) -------------------------------------

def seven_small(simulated_host):
    return simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '1g.10gb', 'start': s, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]} for s in range(7)]}])


def test_facts_name_the_pod_that_holds_each_instance(simulated_host, run_module, kubelet_with):
    from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_facts
    seven_small(simulated_host)
    uuids = mig_uuids(run_module)
    socket = kubelet_with(pods_on(uuids, [0, 5]) + [{'namespace': 'x', 'pod': 'cpu', 'containers': [{'name': 'c', 'devices': {'example.com/nic': ['1']}}]}])
    facts, failed = run_module(nvidia_mig_facts.main, {'pod_resources': 'required', 'pod_resources_socket': socket})
    assert not failed, facts
    gpu = facts['ansible_facts']['nvidia_mig']['gpus'][0]
    assert dict((gi['placement']['start'], gi['allocated_to']) for gi in gpu['gpu_instances']) == {
        0: ['team/p0'], 1: [], 2: [], 3: [], 4: [], 5: ['team/p5'], 6: []}
    assert facts['ansible_facts']['nvidia_mig']['pod_resources'] == {'read': True}


def test_an_allocated_idle_instance_is_never_destroyed_by_a_direct_run(simulated_host, run_module, host_paths, kubelet_with):
    host = seven_small(simulated_host)
    socket = kubelet_with(pods_on(mig_uuids(run_module), [3]))
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, pod_resources_socket=socket))
    assert failed and 'allocated to pod(s) team/p3' in result['msg'] and 'never destroyed' in result['msg']
    assert mutating_calls(host) == []
    # Refused before any NVML change: the role hands the node back uncordoned (issue 27).
    assert result['gpus_changed'] is False


def test_evict_decision_names_only_the_pods_on_instances_that_go(simulated_host, run_module, host_paths, kubelet_with):
    host = seven_small(simulated_host)
    uuids = mig_uuids(run_module)
    socket = kubelet_with(pods_on(uuids, [0, 1, 2]))
    keep_three = {'mixed': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 3, '3g.40gb': 1}}]}
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, keep_three, pod_resources_socket=socket,
                                                                    apply=False, evict=True))
    assert not failed, result
    # The three held instances stay where they are: nothing to evict.
    assert result['pods_to_evict'] == [] and mutating_calls(host) == []
    destroyed = result['gpus'][0]['destroyed_instances']
    assert sorted(d['placement']['start'] for d in destroyed) == [3, 4, 5, 6] and all(not d['allocated_to'] for d in destroyed)
    assert result['pod_resources']['pods'] == ['team/p0', 'team/p1', 'team/p2']
    whole = {'whole': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'7g.80gb': 1}}]}
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, whole, pod_resources_socket=socket,
                                                                    apply=False, evict=True))
    assert not failed and result['pods_to_evict'] == ['team/p0', 'team/p1', 'team/p2']
    # Between two plans the one that evicts fewer pods wins: 2g.20gb at 4 leaves 0-2 in place.
    two = {'two': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 2, '2g.20gb': 1}}]}
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, two, pod_resources_socket=socket,
                                                                    apply=False, evict=True))
    assert not failed and len(result['pods_to_evict']) == 1
    # The apply itself never takes a held instance, and evict never applies.
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, whole, pod_resources_socket=socket))
    assert failed and 'allocated to pod(s)' in result['msg']
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, whole, evict=True))
    assert failed and 'apply=false' in result['msg']
    assert mutating_calls(host) == []


def test_pod_resources_required_but_missing_fails_clearly(simulated_host, run_module, host_paths, tmp_path):
    host = simulated_host([{'model': 'A30'}])
    missing = str(tmp_path / 'no' / 'kubelet.sock')
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, OFF, pod_resources='required', pod_resources_socket=missing))
    assert failed and 'which pods hold which GPU cannot be read' in result['msg'] and missing in result['msg']
    assert mutating_calls(host) == []
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, OFF, pod_resources_socket=missing))
    assert not failed and result['pod_resources']['read'] is False and 'not a Kubernetes node' in result['pod_resources']['reason']


# ---- the shipped, model-agnostic catalog on every simulated MIG GPU -------------------------------

def _shipped_catalog():
    import yaml
    catalog = os.path.join(os.path.dirname(nvidia_mig_layout.__file__), '..', '..', 'roles', 'mig_layout', 'files', 'catalog.yml')
    with open(catalog) as handle:
        return yaml.safe_load(handle)['mig-configs']


def _expected(model, layout):
    """What a layout must give on ``model``, from the simulator's table alone (not from the catalog):
    the plain profile of each compute size with the fewest memory slices."""
    def plain(compute_slices):
        return min((p for p in model['profiles'] if p['compute_slices'] == compute_slices and not p['suffix']),
                   key=lambda p: p['memory_slices'])
    eight = model['memory_slices'] == 8
    if layout == 'daytime':
        small = plain(1)
        return {small['name']: small['max_count']}
    half = {8: 3, 4: 2, 2: 1}[model['memory_slices']]
    if layout == 'nighttime':
        return {plain(half)['name']: 2}
    if model['memory_slices'] == 2:
        return {plain(1)['name']: 2}
    counts = {plain(1)['name']: 2, plain(2)['name']: 1}
    if eight:
        counts[plain(3)['name']] = 1
    return counts


@pytest.mark.parametrize('model', sorted(k for k, m in simulator.MODELS.items() if m['mig_capable']))
def test_the_shipped_catalog_on_every_model(simulated_host, run_module, host_paths, model):
    host = simulated_host([{'model': model}])
    catalog = _shipped_catalog()
    for layout in ('daytime', 'nighttime', 'all-balanced'):
        args = layout_args(host_paths, {layout: catalog[layout]}, name=layout)
        result, failed = run_module(nvidia_mig_layout.main, args)
        assert not failed, (layout, result)
        assert result['in_layout'] and not result['unmatched_gpus'], (layout, result)
        counts = {}
        for gi in host.read()['gpus'][0]['gpu_instances']:
            assert [ci['profile'] for ci in gi['compute_instances']] == [gi['profile']]
            counts[gi['profile']] = counts.get(gi['profile'], 0) + 1
        assert counts == _expected(simulator.MODELS[model], layout), layout
        again, failed = run_module(nvidia_mig_layout.main, args)
        assert not failed and not again['changed'] and again['in_layout']


# ---- metrics: per instance, unmatched GPUs, stranded slice-seconds ----------------------------------

def test_metrics_per_instance_with_their_pods_and_unmatched_gpus(simulated_host, run_module, host_paths, kubelet_with):
    simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '1g.10gb', 'start': s, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]} for s in range(7)]},
        {'model': 'H100-SXM5-80GB'}])
    socket = kubelet_with(pods_on(mig_uuids(run_module), [2]))
    only_a100 = {'day': [{'devices': 'all', 'device-filter': '0x20B210DE', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 7}}]}
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, only_a100, pod_resources_socket=socket))
    assert not failed, result
    metrics = read(os.path.join(host_paths['metrics_dir'], 'gpufleet_mig.prom'))
    lines = [line for line in metrics.splitlines() if line.startswith('gpufleet_mig_instance_info{')]
    assert len(lines) == 7
    assert any('pods="team/p2"' in line and 'start="2"' in line and 'busy="false"' in line for line in lines)
    assert re.search(r'(?m)^gpufleet_mig_gpu_unmatched\{gpu="1",model="NVIDIA H100 80GB HBM3",.*\} 1$', metrics)
    assert re.search(r'(?m)^gpufleet_mig_gpu_in_layout\{gpu="0",.*\} 1$', metrics)
    assert 'gpufleet_mig_gpu_in_layout{gpu="1"' not in metrics
    # Seven 1g on an A100 strand nothing (slice 7 is free, but every compute slice is taken); the first refresh starts the count.
    assert re.search(r'(?m)^gpufleet_mig_stranded_slice_seconds_total\{gpu="0",model="NVIDIA A100-SXM4-80GB",uuid="GPU-[^"]+"\} 0.0$', metrics)
    assert re.search(r'(?m)^gpufleet_mig_stranded_slices\{gpu="0",.*\} 0$', metrics)


def test_stranded_slice_seconds_add_up_between_refreshes(tmp_path):
    from ansible_collections.gpufleet.mig.plugins.module_utils.host._layout_metrics import accumulate_stranded
    path = str(tmp_path / 'stranded.json')
    assert accumulate_stranded(path, {'GPU-a': 1, 'GPU-b': 0}, 1000.0) == {'GPU-a': 0.0, 'GPU-b': 0.0}
    assert accumulate_stranded(path, {'GPU-a': 3, 'GPU-b': 2}, 1060.0) == {'GPU-a': 60.0, 'GPU-b': 0.0}
    # The count seen at the last refresh lasted until this one; a clock going back adds nothing.
    assert accumulate_stranded(path, {'GPU-a': 0, 'GPU-b': 2}, 1090.0) == {'GPU-a': 150.0, 'GPU-b': 60.0}
    assert accumulate_stranded(path, {'GPU-a': 0}, 1000.0) == {'GPU-a': 150.0}
    (tmp_path / 'bad.json').write_text('not json')
    assert accumulate_stranded(str(tmp_path / 'bad.json'), {'GPU-a': 1}, 5.0) == {'GPU-a': 0.0}


# ---- nvidia_mig_repack ------------------------------------------------------------------------------

def test_repack_moves_only_idle_unallocated_instances(simulated_host, run_module, kubelet_with):
    from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_repack
    # 1g at 0 (busy), 1g at 1 (held by a pod), 1g at 4 (idle): the idle one keeps a 3g from fitting.
    host = simulated_host([
        {'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
            {'profile': '1g.10gb', 'start': 0, 'compute_instances': [{'profile': '1g.10gb', 'start': 0, 'pids': [11]}]},
            {'profile': '1g.10gb', 'start': 1, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]},
            {'profile': '1g.10gb', 'start': 4, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]}]},
        {'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
            {'profile': '3g.40gb', 'start': 0, 'compute_instances': [{'profile': '3g.40gb', 'start': 0}]}]}])
    uuids = mig_uuids(run_module)
    socket = kubelet_with(pods_on(uuids, [1]))
    planned, failed = run_module(nvidia_mig_repack.main, {'pod_resources_socket': socket}, check_mode=True)
    assert not failed, planned
    assert mutating_calls(host) == []
    gpu0, gpu1 = planned['gpus']
    assert gpu1['status'] == 'below_threshold'
    assert gpu0['status'] == 'repacked' and (gpu0['before']['largest_placeable'], gpu0['after']['largest_placeable']) == ('2g.20gb', '3g.40gb')
    moved = [a for a in gpu0['actions'] if a['action'] == 'destroy_gpu_instance']
    assert [a['placement']['start'] for a in moved] == [4]
    assert planned['pod_resources'] == {'read': True}
    result, failed = run_module(nvidia_mig_repack.main, {'pod_resources_socket': socket})
    assert not failed and result['changed']
    starts = sorted(gi['start'] for gi in host.read()['gpus'][0]['gpu_instances'])
    assert starts[:2] == [0, 1] and starts[2] in (2, 3)
    assert result['resources'] == {'nvidia.com/mig-1g.10gb': 3, 'nvidia.com/mig-3g.40gb': 1}
    # The moved instance is a new MIG device: the same counts, another id. The ids the repack expects are those of
    # the GPUs as they end (what the hand-back compares with the kubelet's), not those of the plan.
    after = mig_uuids(run_module)
    assert after[0] == uuids[0] and after[1] == uuids[1] and after[starts[2]] not in uuids.values()
    assert result['expected_device_ids']['nvidia.com/mig-1g.10gb']['uuid'] == sorted(after.values())
    assert planned['expected_device_ids']['nvidia.com/mig-1g.10gb']['uuid'] == sorted(uuids.values())
    assert result['pod_resources'] == {'read': True}
    again, failed = run_module(nvidia_mig_repack.main, {'pod_resources_socket': socket})
    assert not failed and not again['changed']
    assert again['gpus'][0]['status'] in ('no_idle_move', 'below_threshold')


def test_repack_leaves_an_idle_instance_a_pod_holds_where_moving_it_would_help(simulated_host, run_module, kubelet_with):
    from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_repack
    # 1g at 0 (busy) and 1g at 4, idle but held by a pod: moving the one at 4 would make room for a 4g,
    # and the pod would lose its device. Without the pod, the same GPU is repacked (the second run).
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '1g.10gb', 'start': 0, 'compute_instances': [{'profile': '1g.10gb', 'start': 0, 'pids': [11]}]},
        {'profile': '1g.10gb', 'start': 4, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]}]}])
    socket = kubelet_with(pods_on(mig_uuids(run_module), [4]))
    result, failed = run_module(nvidia_mig_repack.main, {'pod_resources_socket': socket})
    assert not failed and not result['changed'] and mutating_calls(host) == [], result
    assert result['gpus'][0]['status'] == 'no_idle_move' and 'stay where they are' in result['gpus'][0]['reason']
    planned, failed = run_module(nvidia_mig_repack.main, {'pod_resources_socket': kubelet_with([])}, check_mode=True)
    assert not failed and planned['gpus'][0]['status'] == 'repacked', planned
    assert [a['placement']['start'] for a in planned['gpus'][0]['actions'] if a['action'] == 'destroy_gpu_instance'] == [4]


def test_repack_never_forces_a_gpu_whose_instances_are_all_held(simulated_host, run_module):
    from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_repack
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '1g.10gb', 'start': s, 'compute_instances': [{'profile': '1g.10gb', 'start': 0, 'pids': [100 + s]}]}
        for s in (1, 3, 5)]}])
    result, failed = run_module(nvidia_mig_repack.main, {'pod_resources': 'off'})
    assert not failed and not result['changed'] and mutating_calls(host) == []
    assert result['gpus'][0]['status'] == 'no_idle_move' and 'stay where they are' in result['gpus'][0]['reason']
    result, failed = run_module(nvidia_mig_repack.main, {'pod_resources': 'off', 'stranded_above': -1})
    assert failed and 'or more' in result['msg']


def test_facts_say_whether_each_gpu_holds_the_declared_layout(simulated_host, run_module, host_paths):
    from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_facts
    host = simulated_host([{'model': 'A100-SXM4-80GB'}, {'model': 'H100-SXM5-80GB'}, {'model': 'L40S'}])
    only_a100 = {'nighttime': [{'devices': 'all', 'device-filter': '0x20B210DE', 'mig-enabled': True, 'mig-devices': {'3g.40gb': 2}}]}
    layout_file = os.path.join(host_paths['config_dir'], 'layout.json')
    facts, failed = run_module(nvidia_mig_facts.main, {'layout_file': layout_file})
    assert not failed and facts['ansible_facts']['nvidia_mig']['layout'] is None
    assert [g['in_layout'] for g in facts['ansible_facts']['nvidia_mig']['gpus']] == [None, None, None]
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, only_a100))
    assert not failed, result
    facts, failed = run_module(nvidia_mig_facts.main, {'layout_file': layout_file})
    assert not failed, facts
    assert facts['ansible_facts']['nvidia_mig']['layout'] == 'nighttime'
    assert [g['in_layout'] for g in facts['ansible_facts']['nvidia_mig']['gpus']] == [True, None, None]
    assert mutating_calls(host)
    # The instances are gone after a reboot (before the boot unit ran): the GPU no longer holds the layout.
    simulator.simulate_reboot(host.path)
    facts, failed = run_module(nvidia_mig_facts.main, {'layout_file': layout_file})
    assert [g['in_layout'] for g in facts['ansible_facts']['nvidia_mig']['gpus']] == [False, None, None]


def test_bare_facts_read_the_layout_nvidia_mig_layout_declared_where_it_keeps_it_by_default(
        simulated_host, run_module, host_paths, monkeypatch):
    """The README's bare nvidia_mig_facts call answers whether each GPU holds the declared layout: its layout_file
    defaults to nvidia_mig_layout's <config_dir>/layout.json (moved under tmp here, as the module's constant)."""
    from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_facts
    assert nvidia_mig_facts.DEFAULT_LAYOUT_FILE == os.path.join(
        yaml.safe_load(nvidia_mig_layout.DOCUMENTATION)['options']['config_dir']['default'], 'layout.json')
    assert yaml.safe_load(nvidia_mig_facts.DOCUMENTATION)['options']['layout_file']['default'] == nvidia_mig_facts.DEFAULT_LAYOUT_FILE
    simulated_host(HELD_NIGHT)
    monkeypatch.setattr(nvidia_mig_facts, 'DEFAULT_LAYOUT_FILE', os.path.join(host_paths['config_dir'], 'layout.json'))
    facts, failed = run_module(nvidia_mig_facts.main, {})
    assert not failed and facts['ansible_facts']['nvidia_mig']['layout'] is None, facts
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))
    assert not failed and result['in_layout'], result
    facts, failed = run_module(nvidia_mig_facts.main, {})
    assert facts['ansible_facts']['nvidia_mig']['layout'] == 'nighttime'
    assert [g['in_layout'] for g in facts['ansible_facts']['nvidia_mig']['gpus']] == [True]
    facts, failed = run_module(nvidia_mig_facts.main, {'layout_file': ''})
    assert facts['ansible_facts']['nvidia_mig']['layout'] is None


def test_disabling_mig_under_pods_evicts_them_first_but_never_touches_other_processes(
        simulated_host, run_module, host_paths, kubelet_with):
    busy = {'profile': '3g.40gb', 'start': 0, 'compute_instances': [{'profile': '3g.40gb', 'start': 0, 'pids': [4242]}]}
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [busy]}])
    uuid = list(mig_uuids(run_module).values())[0]
    socket = kubelet_with([{'namespace': 'team', 'pod': 'train', 'containers': [{'name': 'c', 'devices': {'nvidia.com/mig-3g.40gb': [uuid]}}]}])
    # The process runs in the pod that holds the instance: evicting the pod ends it.
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, OFF, pod_resources_socket=socket, apply=False, evict=True))
    assert not failed, result
    assert result['pods_to_evict'] == ['team/train']
    # Without the pod (pod-resources says nothing), the process is nobody's: never touched.
    empty = kubelet_with([])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, OFF, pod_resources_socket=empty, apply=False, evict=True))
    assert failed and '4242' in result['msg']
    assert mutating_calls(host) == []


def test_a_mode_change_under_a_pod_holding_the_whole_gpu_needs_its_eviction(simulated_host, run_module, host_paths, kubelet_with):
    from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_facts
    host = simulated_host([{'model': 'A100-SXM4-80GB'}])
    facts, failed = run_module(nvidia_mig_facts.main, {'pod_resources': 'off'})
    assert not failed, facts
    uuid = facts['ansible_facts']['nvidia_mig']['gpus'][0]['uuid']
    socket = kubelet_with([{'namespace': 'ml', 'pod': 'trainer', 'containers': [{'name': 'c', 'devices': {'nvidia.com/gpu': [uuid]}}]}])
    # No process runs, but the pod holds the GPU: enabling MIG would take it away.
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, pod_resources_socket=socket))
    assert failed and 'GPU 0' in result['msg'] and 'ml/trainer' in result['msg'] and 'MIG mode' in result['msg'], result
    # Deciding for an eviction names the pod instead.
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, pod_resources_socket=socket, apply=False, evict=True))
    assert not failed and result['pods_to_evict'] == ['ml/trainer'], result
    assert mutating_calls(host) == []


# ---- a MIG mode that stays pending -----------------------------------------------------------------

def test_a_pending_enable_without_reset_is_reboot_required_not_an_error(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'clients': ['nvidia-persistenced']}])
    args = layout_args(host_paths, NIGHT, allow_reset=False)
    result, failed = run_module(nvidia_mig_layout.main, args)
    assert not failed, result
    assert result['reboot_required'] and not result['in_layout']
    assert [a['action'] for a in result['actions']] == ['set_mig_mode'] and result['actions'][0]['reset_required']
    assert host.read()['gpus'][0]['mig'] == {'current': 'disabled', 'pending': 'enabled'}
    # Again, with the enable still pending: nothing to do until a reset or a reboot, and no error either.
    calls = len(mutating_calls(host))
    again, failed = run_module(nvidia_mig_layout.main, args)
    assert not failed, again
    assert again['reboot_required'] and again['gpus'][0]['reboot_required'] and again['actions'] == []
    assert len(mutating_calls(host)) == calls


def test_a_refused_reset_is_reboot_required_with_the_reason(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'clients': ['nvidia-persistenced']}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))
    assert not failed, result
    assert result['reboot_required'] and not result['in_layout']
    mode_step = result['actions'][0]
    assert mode_step['action'] == 'set_mig_mode' and mode_step['reset_required'] and not mode_step['reset_performed']
    assert 'NVML_ERROR_IN_USE' in mode_step['pending_reason'] and 'reset was refused' in mode_step['pending_reason']
    assert 'nvidia-persistenced' in mode_step['pending_reason']
    assert [c['call'] for c in mutating_calls(host)] == ['nvmlDeviceSetMigMode', 'simulate_gpu_reset']
    assert not host.read()['gpus'][0]['gpu_instances']
    # Once the client is gone, the next run resets the GPU and makes the instances.
    simulator.set_clients(host.path, 0, [])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))
    assert not failed and result['in_layout'] and not result['reboot_required']
    assert profiles(host.read()) == [('3g.40gb', 0), ('3g.40gb', 4)]


# ---- nvidia_mig_repack keeps every GPU instance as it is ---------------------------------------------

def two_split_2g(simulated_host, pids_at=None):
    """A100-80GB with two 2g.20gb at slices 2 and 4, each holding one 1c.2g.20gb compute instance."""
    return simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '2g.20gb', 'start': start, 'compute_instances': [
            {'profile': '1c.2g.20gb', 'start': 0, 'pids': [4242] if start == pids_at else []}]} for start in (2, 4)]}])


def instances_of(host):
    return sorted((gi['profile'], gi['start'], tuple(ci['profile'] for ci in gi['compute_instances']))
                  for gi in host.read()['gpus'][0]['gpu_instances'])


def test_repack_never_merges_compute_instances_into_fewer_gpu_instances(simulated_host, run_module):
    from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_repack
    host = two_split_2g(simulated_host)
    result, failed = run_module(nvidia_mig_repack.main, {'pod_resources': 'off'})
    assert not failed, result
    gpu = result['gpus'][0]
    assert gpu['status'] == 'repacked' and result['changed']
    # Still two 2g GPU instances, each with its one 1c compute instance; one moved to make room for a 4-slice profile.
    assert instances_of(host) == [('2g.20gb', 0, ('1c.2g.20gb',)), ('2g.20gb', 2, ('1c.2g.20gb',))]
    assert [(a['action'], a['placement']['start']) for a in gpu['actions'] if a['action'].endswith('gpu_instance')] == [
        ('destroy_gpu_instance', 4), ('create_gpu_instance', 0)]
    assert gpu['after']['largest_placeable_slices'] == 4 and gpu['before']['largest_placeable_slices'] == 2


def test_repack_moves_the_idle_instance_beside_a_busy_one(simulated_host, run_module):
    from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_repack
    host = two_split_2g(simulated_host, pids_at=2)
    result, failed = run_module(nvidia_mig_repack.main, {'pod_resources': 'off'})
    assert not failed, result
    assert result['gpus'][0]['status'] == 'repacked'
    assert instances_of(host) == [('2g.20gb', 0, ('1c.2g.20gb',)), ('2g.20gb', 2, ('1c.2g.20gb',))]
    busy = [gi for gi in host.read()['gpus'][0]['gpu_instances'] if gi['start'] == 2][0]
    assert busy['compute_instances'][0]['pids'] == [4242]
    # The busy one at 4 instead: moving the idle one to 0 frees nothing bigger, so nothing moves.
    host = two_split_2g(simulated_host, pids_at=4)
    calls = len(mutating_calls(host))  # the call log goes on from the first host
    result, failed = run_module(nvidia_mig_repack.main, {'pod_resources': 'off'})
    assert not failed and not result['changed'] and result['gpus'][0]['status'] == 'no_idle_move'
    assert len(mutating_calls(host)) == calls


# ---- index device ids (deviceIDStrategy index) ------------------------------------------------------

KEEP_THREE_AND_3G = {'mixed': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 3, '3g.40gb': 1}}]}


def index_ids(run_module, gpu=0):
    """{GPU instance start: '<gpu>:<mig device index>'} as the device plugin (deviceIDStrategy index) names them."""
    from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_facts
    facts, failed = run_module(nvidia_mig_facts.main, {'pod_resources': 'off'})
    assert not failed, facts
    return dict((gi['placement']['start'], '%d:%d' % (gpu, gi['compute_instances'][0]['mig_index']))
                for gi in facts['ansible_facts']['nvidia_mig']['gpus'][gpu]['gpu_instances'])


def test_index_ids_shift_when_an_instance_before_them_goes(simulated_host, run_module, host_paths, kubelet_with):
    # Why index ids need a rule: the 1g at 4 is kept (a pod holds it by UUID), 3g.40gb at 0 replaces 0-3, and the
    # kept instance moves in the GPU's list of MIG devices (the simulator lists them by placement).
    seven_small(simulated_host)
    before = index_ids(run_module)
    assert before[4] == '0:4'
    socket = kubelet_with(pods_on(mig_uuids(run_module), [4]))
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, KEEP_THREE_AND_3G, pod_resources_socket=socket))
    assert not failed, result
    after = index_ids(run_module)
    assert sorted(after) == [0, 4, 5, 6] and after[4] != '0:4'


def test_a_pod_holding_an_index_id_on_a_gpu_that_changes_is_evicted_never_remapped(simulated_host, run_module, host_paths, kubelet_with):
    host = seven_small(simulated_host)
    ids, uuids = index_ids(run_module), mig_uuids(run_module)
    # p4 holds the kept instance at 4 by index id, p5 the kept one at 5 by UUID; 0-3 are idle.
    socket = kubelet_with([
        {'namespace': 'team', 'pod': 'p4', 'containers': [{'name': 'c', 'devices': {'nvidia.com/mig-1g.10gb': [ids[4]]}}]},
        {'namespace': 'team', 'pod': 'p5', 'containers': [{'name': 'c', 'devices': {'nvidia.com/mig-1g.10gb.shared': [uuids[5] + '::1']}}]}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, KEEP_THREE_AND_3G, pod_resources_socket=socket,
                                                                    apply=False, evict=True))
    assert not failed, result
    gpu = result['gpus'][0]
    # Only idle instances are destroyed, yet the index-id pod must go; the UUID one stays.
    assert all(not d['allocated_to'] for d in gpu['destroyed_instances'])
    assert result['pods_to_evict'] == ['team/p4'] and gpu['index_id_pods'] == ['team/p4']
    assert 'by index id' in result['eviction_reasons']['team/p4'] and list(result['eviction_reasons']) == ['team/p4']
    # The apply refuses while the pod still holds the index id: nothing changes.
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, KEEP_THREE_AND_3G, pod_resources_socket=socket))
    assert failed and 'team/p4 hold MIG devices by index id' in result['msg'] and 'Nothing was changed' in result['msg']
    assert mutating_calls(host) == []
    # Once it is gone (evicted), the change goes ahead and the UUID pod keeps its instance.
    socket = kubelet_with([
        {'namespace': 'team', 'pod': 'p5', 'containers': [{'name': 'c', 'devices': {'nvidia.com/mig-1g.10gb.shared': [uuids[5] + '::1']}}]}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, KEEP_THREE_AND_3G, pod_resources_socket=socket))
    assert not failed and result['in_layout'], result
    assert mig_uuids(run_module)[5] == uuids[5]


def test_index_ids_on_a_gpu_that_does_not_change_stay(simulated_host, run_module, host_paths, kubelet_with):
    seven_small(simulated_host)
    ids = index_ids(run_module)
    socket = kubelet_with([{'namespace': 'team', 'pod': 'p%d' % s, 'containers': [
        {'name': 'c', 'devices': {'nvidia.com/mig-1g.10gb': [ids[s] + '::0']}}]} for s in (0, 3, 6)])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, DAY, pod_resources_socket=socket, apply=False, evict=True))
    assert not failed and result['in_layout'] and result['pods_to_evict'] == [] and result['eviction_reasons'] == {}
    assert result['gpus'][0]['index_id_pods'] == []
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, DAY, pod_resources_socket=socket))
    assert not failed and not result['actions']


# ---- the declared layout changes only with a change that succeeded ----------------------------------

BALANCED = {'all-balanced': [
    {'devices': 'all', 'gpufleet-memory-slices': [8], 'mig-enabled': True, 'mig-devices': {'1g': 2, '2g': 1, '3g': 1}},
    {'devices': 'all', 'gpufleet-memory-slices': [4], 'mig-enabled': True, 'mig-devices': {'1g': 2, '2g': 1}}]}


def test_the_run_after_the_one_that_enabled_mig_is_a_no_op(simulated_host, run_module, host_paths):
    # The entry of each GPU depends on its memory slices, known only once the first run enabled MIG.
    host = simulated_host([{'model': 'A100-SXM4-80GB'}, {'model': 'A30'}])
    first, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, BALANCED))
    assert not failed and first['changed'] and first['in_layout'], first
    calls = len(mutating_calls(host))
    second, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, BALANCED))
    assert not failed and second['in_layout'], second
    assert not second['changed'] and second['files'] == [] and second['actions'] == []
    assert len(mutating_calls(host)) == calls


def test_config_may_be_a_whole_mig_parted_file(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'H100-SXM5-80GB'}])
    document = {'version': 'v1', 'mig-configs': dict(NIGHT, **DAY)}
    result, failed = run_module(nvidia_mig_layout.main, dict(host_paths, name='nighttime', config=document))
    assert not failed, result
    assert profiles(host.read()) == [('3g.40gb', 0), ('3g.40gb', 4)]
    result, failed = run_module(nvidia_mig_layout.main, dict(host_paths, name='nighttime', config={'version': 'v2', 'mig-configs': NIGHT}))
    assert failed and "unsupported mig-parted config version 'v2'" in result['msg']


def boot_state(host_paths):
    """Every file the boot-time apply depends on, byte for byte."""
    found = {}
    for folder in (host_paths['config_dir'], host_paths['systemd_dir'], host_paths['bin_dir']):
        for name in sorted(os.listdir(folder)):
            if name in ('layout.json', 'gpufleet-mig-apply') or name.endswith(('.service', '.timer')):
                with open(os.path.join(folder, name), 'rb') as handle:
                    found[os.path.join(folder, name)] = handle.read()
    return found


def test_a_refused_change_keeps_the_declared_layout_and_the_boot_applies_it(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED)}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))
    assert not failed, result
    declared = boot_state(host_paths)
    assert os.path.join(host_paths['config_dir'], 'layout.json') in declared
    assert os.path.join(host_paths['systemd_dir'], 'gpufleet-mig-layout.service') in declared
    first = host.read()['gpus'][0]['gpu_instances'][0]
    simulator.set_pids(host.path, 0, first['id'], first['compute_instances'][0]['id'], [77])
    # The decision for another layout (the role's first call), then the refused apply: nothing declared.
    decision, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, DAY, apply=False))
    assert failed and '[77]' in decision['msg']
    refused, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, DAY))
    assert failed and '[77]' in refused['msg']
    assert boot_state(host_paths) == declared
    # After a reboot the boot unit brings back the layout the host held, not the refused one.
    simulator.simulate_reboot(host.path)
    assert _boot_entry.main(['apply', '--layout', os.path.join(host_paths['config_dir'], 'layout.json')]) == 0
    assert profiles(host.read()) == [('3g.40gb', 0), ('3g.40gb', 4)]
    # A change that succeeds declares the new layout.
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, DAY))
    assert not failed, result
    assert json.loads(read(os.path.join(host_paths['config_dir'], 'layout.json')))['name'] == 'daytime'
    assert 'layout (daytime)' in read(os.path.join(host_paths['systemd_dir'], 'gpufleet-mig-layout.service'))


def test_a_decision_that_passes_then_a_failed_apply_keeps_the_declared_layout(simulated_host, run_module, host_paths):
    fault = {'call': 'nvmlDeviceCreateGpuInstanceWithPlacement', 'gpu': 0, 'nth': 1, 'error': 'NVML_ERROR_UNKNOWN'}
    simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED)}], faults=[fault])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, {'all-enabled': [
        {'devices': 'all', 'mig-enabled': True, 'mig-devices': {}}]}))
    assert not failed, result
    declared = boot_state(host_paths)
    decision, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, apply=False))
    assert not failed and not decision['in_layout'] and decision['files'] == []
    applied, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))
    assert failed and 'NVML_ERROR_UNKNOWN' in applied['msg']
    assert boot_state(host_paths) == declared


# ---- the failure record: the next success resolves it ------------------------------------------

def last_apply(host_paths):
    return json.loads(read(os.path.join(host_paths['config_dir'], 'last_apply.json')))


def last_apply_metric(host_paths):
    metrics = read(os.path.join(host_paths['metrics_dir'], 'gpufleet_mig.prom'))
    return re.findall(r'(?m)^gpufleet_mig_layout_last_apply_success\{(.*)\} (\d)$', metrics)


HELD_NIGHT = [{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
    {'profile': '3g.40gb', 'start': s, 'compute_instances': [{'profile': '3g.40gb', 'start': 0}]} for s in (0, 4)]}]


@pytest.mark.parametrize('apply', [True, False], ids=['no-op apply', 'no-op decision'])
def test_a_no_op_run_after_a_refused_apply_resolves_the_failure_record_and_metric(simulated_host, run_module, host_paths, apply):
    """Refused (a busy instance in the way of daytime), then the host's own layout again: nothing to do, and the
    record and gpufleet_mig_layout_last_apply_success say success (MigLayoutApplyFailed resolves). The role's
    no-op run is the decision alone (apply: false), so that resolves it too."""
    busy = json.loads(json.dumps(HELD_NIGHT))
    busy[0]['gpu_instances'][0]['compute_instances'][0]['pids'] = [77]
    host = simulated_host(busy)
    refused, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, DAY))
    assert failed and '[77]' in refused['msg']
    assert last_apply(host_paths)['result'] == 'failed'
    assert last_apply_metric(host_paths) == [('layout="daytime",source="ansible"', '0')]
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, apply=apply))
    assert not failed and result['in_layout'] and result['actions'] == [], result
    assert last_apply(host_paths) == dict(last_apply(host_paths), result='success', layout='nighttime', source='ansible')
    assert last_apply_metric(host_paths) == [('layout="nighttime",source="ansible"', '1')]
    assert mutating_calls(host) == []


def test_a_no_op_run_after_a_success_rewrites_no_record_and_check_mode_none(simulated_host, run_module, host_paths):
    simulated_host(HELD_NIGHT)
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, DAY, apply=False))
    assert not failed and not result['in_layout']
    # A decision of another layout is no success: nothing recorded.
    assert not os.path.exists(os.path.join(host_paths['config_dir'], 'last_apply.json'))
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT), check_mode=True)
    assert not failed and result['in_layout']
    assert not os.path.exists(os.path.join(host_paths['config_dir'], 'last_apply.json'))
    run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))
    record = last_apply(host_paths)
    assert record['result'] == 'success'
    path = os.path.join(host_paths['config_dir'], 'last_apply.json')
    os.utime(path, (1, 1))
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, apply=False))
    assert not failed and result['in_layout'] and os.stat(path).st_mtime == 1


def test_a_failure_recorded_by_the_role_is_resolved_by_its_next_no_op_decision(simulated_host, run_module, host_paths):
    """The role's rescue records a failure outside the module (nvidia_mig_layout_failure); its next run on a host in
    the layout is only the decision (apply: false), which resolves it."""
    from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_layout_failure
    simulated_host(HELD_NIGHT)
    result, failed = run_module(nvidia_mig_layout_failure.main, {
        'name': 'nighttime', 'config': NIGHT, 'reason': 'eviction refused', 'config_dir': host_paths['config_dir'],
        'metrics_dir': host_paths['metrics_dir']})
    assert not failed, result
    assert last_apply_metric(host_paths) == [('layout="nighttime",source="ansible"', '0')]
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, apply=False))
    assert not failed and result['in_layout']
    assert last_apply(host_paths)['result'] == 'success'
    assert last_apply_metric(host_paths) == [('layout="nighttime",source="ansible"', '1')]


# ---- with and without systemd (the option unset: detected) ----------------------------------------

FAKE_SYSTEMCTL = '''#!/bin/sh
echo "$*" >> "%(log)s"
case "$1" in is-active|is-enabled) exit 3;; esac
exit 0
'''
# systemctl installed on a host that systemd did not boot (a container, a chroot): every call that needs systemd fails.
FAILING_SYSTEMCTL = '''#!/bin/sh
echo "$*" >> "%(log)s"
case "$1" in is-active|is-enabled) exit 3;; esac
echo "System has not been booted with systemd as init system (PID 1). Can't operate." >&2
echo "Failed to connect to bus: Host is down" >&2
exit 1
'''


@pytest.fixture
def host_path(tmp_path, monkeypatch):
    """PATH of a host: an empty folder (no systemctl), or with ``add_systemctl()`` a systemctl that logs its calls;
    ``systemd_booted()`` makes the canary folder that systemd's sd_booted() checks exist (injected, not /run)."""
    from ansible_collections.gpufleet.mig.plugins.module_utils.host import _host_files
    folder = tmp_path / 'bin'
    folder.mkdir()
    log = tmp_path / 'systemctl.log'
    monkeypatch.setenv('PATH', str(folder))
    monkeypatch.setattr(_host_files, 'SYSTEMD_CANARIES', (str(tmp_path / 'run' / 'systemd' / 'system') + '/',))
    monkeypatch.setattr(_host_files, 'PID1_COMM', str(tmp_path / 'proc-1-comm'))
    # What a decision reads instead of asking systemctl: this test's folders only, never the machine's own units.
    monkeypatch.setattr(_host_files, 'UNIT_FOLDERS', ())
    monkeypatch.setattr(_host_files, 'RUNNING_UNITS', str(tmp_path / 'run' / 'systemd' / 'units'))

    class HostPath(object):
        running_units = tmp_path / 'run' / 'systemd' / 'units'

        @staticmethod
        def add_systemctl(failing=False):
            script = folder / 'systemctl'
            script.write_text((FAILING_SYSTEMCTL if failing else FAKE_SYSTEMCTL) % {'log': log})
            script.chmod(0o755)

        @staticmethod
        def systemd_booted():
            (tmp_path / 'run' / 'systemd' / 'system').mkdir(parents=True)

        @staticmethod
        def pid1(name):
            (tmp_path / 'proc-1-comm').write_text(name + '\n')

        @staticmethod
        def calls():
            return log.read_text().splitlines() if log.exists() else []
    return HostPath()


def unset_systemd(host_paths, config, **extra):
    args = layout_args(host_paths, config, **extra)
    del args['systemd']
    return args


@pytest.mark.parametrize('args, check_mode', [({'apply': False}, False), ({}, True), ({}, False)],
                         ids=['decision', 'check mode', 'apply'])
def test_a_host_without_systemctl_decides_checks_and_applies_without_systemd(
        simulated_host, run_module, host_paths, host_path, args, check_mode):
    """A container host (the real H200 host was one): no systemctl on PATH and the option unset. Nothing needs
    systemctl; the unit files are still written by an apply."""
    simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED)}])
    result, failed = run_module(nvidia_mig_layout.main, unset_systemd(host_paths, NIGHT, **args), check_mode=check_mode)
    assert not failed, result
    assert result['systemd'] is False
    assert result['in_layout'] is (not check_mode and args.get('apply', True))


def test_systemctl_without_systemd_running_is_no_systemd_host(simulated_host, run_module, host_paths, host_path):
    """systemctl installed (as in many containers) but systemd not managing the host: detected as no systemd."""
    simulated_host([{'model': 'H100-SXM5-80GB'}])
    host_path.add_systemctl()
    result, failed = run_module(nvidia_mig_layout.main, unset_systemd(host_paths, NIGHT))
    assert not failed and result['systemd'] is False and host_path.calls() == []


@pytest.mark.parametrize('booted', ['canary', 'pid1'])
def test_a_systemd_host_is_detected_and_its_units_enabled(simulated_host, run_module, host_paths, host_path, booted):
    simulated_host([{'model': 'H100-SXM5-80GB'}])
    host_path.add_systemctl()
    if booted == 'canary':
        host_path.systemd_booted()
    else:
        host_path.pid1('systemd')
    result, failed = run_module(nvidia_mig_layout.main, unset_systemd(host_paths, NIGHT))
    assert not failed and result['systemd'] is True, result
    calls = host_path.calls()
    assert 'is-enabled --quiet nvidia-mig-manager.service' in calls and 'enable gpufleet-mig-layout.service' in calls
    assert 'enable --now gpufleet-mig-metrics.timer' in calls


def test_an_init_that_is_not_systemd_is_no_systemd_host(simulated_host, run_module, host_paths, host_path):
    simulated_host([{'model': 'H100-SXM5-80GB'}])
    host_path.add_systemctl()
    host_path.pid1('tini')
    result, failed = run_module(nvidia_mig_layout.main, unset_systemd(host_paths, NIGHT))
    assert not failed and result['systemd'] is False and host_path.calls() == []


def test_systemd_true_without_systemctl_fails_an_apply_in_one_line_but_not_a_decision_or_check_mode(
        simulated_host, run_module, host_paths, host_path):
    host = simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED)}])
    forced = layout_args(host_paths, NIGHT, systemd=True)
    result, failed = run_module(nvidia_mig_layout.main, forced)
    assert failed and result['msg'] == (
        "systemd=true but systemctl is not on this host's PATH: an apply stops the GPU clients and enables the boot "
        "unit with it; on a host without systemd set systemd=false (the mig_layout role: mig_layout_systemd: false), "
        "or leave it unset to detect systemd")
    assert mutating_calls(host) == [] and not os.path.exists(host_paths['config_dir'])
    for args, check_mode in ((dict(forced, apply=False), False), (forced, True)):
        result, failed = run_module(nvidia_mig_layout.main, args, check_mode=check_mode)
        assert not failed and not result['in_layout'] and result['systemd'] is True, result


def test_a_renamed_resource_keeps_its_instance_and_is_named_when_it_goes(simulated_host, run_module, host_paths, kubelet_with):
    # Issue 27: the device_plugin role's rename (nvidia.com/small-gpu) holds a MIG UUID as surely as nvidia.com/mig-1g.10gb.
    host = seven_small(simulated_host)
    socket = kubelet_with(pods_on(mig_uuids(run_module), [3], resource='nvidia.com/small-gpu'))
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, pod_resources_socket=socket))
    assert failed and 'allocated to pod(s) team/p3' in result['msg'] and mutating_calls(host) == []
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, pod_resources_socket=socket,
                                                                    apply=False, evict=True))
    assert not failed and result['pods_to_evict'] == ['team/p3'] and result['pod_resources']['pods'] == ['team/p3']


def test_drain_names_every_pod_that_holds_a_device_of_the_gpus(simulated_host, run_module, host_paths, kubelet_with):
    # A drain decides from the same allocations as in place: a kept instance's pod goes too, a renamed one included.
    host = seven_small(simulated_host)
    uuids = mig_uuids(run_module)
    socket = kubelet_with(pods_on(uuids, [0]) + pods_on(uuids, [1], resource='nvidia.com/small-gpu'))
    keep = {'keep': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 3, '3g.40gb': 1}}]}
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, keep, pod_resources_socket=socket,
                                                                    apply=False, evict=True))
    assert not failed and result['pods_to_evict'] == []
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, keep, pod_resources_socket=socket,
                                                                    apply=False, evict=True, drain=True))
    assert not failed and result['pods_to_evict'] == ['team/p0', 'team/p1'], result
    assert 'drain' in result['eviction_reasons']['team/p1']
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, keep, drain=True, apply=False))
    assert failed and 'set evict=true' in result['msg'] and mutating_calls(host) == []


def test_defer_pending_leaves_nothing_pending_and_declares_nothing_until_the_drain(simulated_host, run_module, host_paths):
    # Issue 27: on the reboot path the new layout and the pending mode are declared only after the drain succeeded.
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'clients': ['nvidia-persistenced']}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, allow_reset=False, defer_pending=True))
    assert not failed, result
    assert result['reboot_required'] and not result['in_layout'] and result['files'] == []
    assert [a['action'] for a in result['actions']] == ['set_mig_mode', 'revert_mig_mode']
    assert host.read()['gpus'][0]['mig'] == {'current': 'disabled', 'pending': 'disabled'}
    assert not os.path.exists(os.path.join(host_paths['config_dir'], 'layout.json'))
    # After the drain: the same apply without defer_pending leaves the mode pending and declares the layout.
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, allow_reset=False))
    assert not failed and result['reboot_required'] and result['files']
    assert host.read()['gpus'][0]['mig'] == {'current': 'disabled', 'pending': 'enabled'}


# ---- create_only: the demand fast path's guard ----------------------------------------------------------------

TWO_SMALL = [{'profile': '1g.10gb', 'start': s, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]} for s in (0, 1)]
WITH_20GB = {'demand-x': [{'devices': [0], 'mig-enabled': True, 'mig-devices': {'1g.10gb': 2, '1g.20gb': 1}}]}


def test_create_only_applies_exactly_the_expected_creates_and_declares_the_layout(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [dict(gi) for gi in TWO_SMALL]}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, WITH_20GB, create_only={'0': {'1g.20gb': 1}}))
    assert not failed, result
    assert [a['action'] for a in result['actions']] == ['create_gpu_instance', 'create_compute_instance']
    assert [p for p, s in profiles(host.read())] == ['1g.10gb', '1g.10gb', '1g.20gb']
    declared = json.loads(read(os.path.join(host_paths['config_dir'], 'layout.json')))
    assert declared['name'] == 'demand-x'
    # Already there: nothing to create, nothing refused.
    again, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, WITH_20GB, create_only={'0': {'1g.20gb': 1}}))
    assert not failed and again['actions'] == [] and again['in_layout']


@pytest.mark.parametrize('instances, expected, message', [
    # An instance created since the decision: the layout would destroy it.
    (TWO_SMALL + [{'profile': '1g.10gb', 'start': 2, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]}],
     {'0': {'1g.20gb': 1}}, 'GPU 0 would need destroy compute instance (1g.10gb)'),
    # An instance destroyed since the decision: the layout would create it too.
    (TWO_SMALL[:1], {'0': {'1g.20gb': 1}}, 'the GPUs would get {"0": {"1g.10gb": 1, "1g.20gb": 1}}'),
    # Creates that the caller did not expect on that GPU.
    (TWO_SMALL, {'0': {'1g.20gb': 2}}, 'not the creates expected'),
])
def test_create_only_refuses_anything_else_before_any_change(simulated_host, run_module, host_paths, instances, expected, message):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [dict(gi) for gi in instances]}])
    before = host.read()['gpus']
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, WITH_20GB, create_only=expected))
    assert failed and 'is not a create-only change here' in result['msg'] and message in result['msg'], result['msg']
    assert result['gpus_changed'] is False
    assert host.read()['gpus'] == before and mutating_calls(host) == []
    assert not os.path.exists(os.path.join(host_paths['config_dir'], 'layout.json'))


def test_create_only_refuses_a_mode_change(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB'}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, WITH_20GB, create_only={'0': {'1g.20gb': 1}}))
    assert failed and 'GPU 0 waits for a MIG mode change' in result['msg'], result['msg']
    assert mutating_calls(host) == []


# ---- destroy_idle: the gated queue's reshape and release rule --------------------------------------------------

ONE_20GB = {'demand-y': [{'devices': [0], 'mig-enabled': True, 'mig-devices': {'1g.10gb': 1, '1g.20gb': 1}}]}


def test_destroy_idle_destroys_exactly_the_expected_idle_instances_then_creates(simulated_host, run_module, host_paths):
    """A reshape: one idle 1g.10gb destroyed, a 1g.20gb created in its slices, nothing else."""
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [dict(gi) for gi in TWO_SMALL]}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, ONE_20GB, create_only={'0': {'1g.20gb': 1}},
                                                                    destroy_idle={'0': {'1g.10gb': 1}}))
    assert not failed, result
    assert sorted(p for p, s in profiles(host.read())) == ['1g.10gb', '1g.20gb']
    assert [a['action'] for a in result['actions']][:2] == ['destroy_compute_instance', 'destroy_gpu_instance']


@pytest.mark.parametrize('destroy_idle, message', [
    # Not told to destroy: the create-only guard as before.
    (None, 'is not a create-only change here: GPU 0 would need destroy compute instance (1g.10gb)'),
    # Told another profile: its instances changed since the decision.
    ({'0': {'1g.20gb': 1}}, 'the GPUs would lose {"0": {"1g.10gb": 1}}, not the idle instances expected'),
])
def test_destroy_idle_refuses_a_destroy_it_was_not_told(simulated_host, run_module, host_paths, destroy_idle, message):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [dict(gi) for gi in TWO_SMALL]}])
    before = host.read()['gpus']
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, ONE_20GB, create_only={'0': {'1g.20gb': 1}},
                                                                    destroy_idle=destroy_idle))
    assert failed and message in result['msg'], result['msg']
    assert result['gpus_changed'] is False and host.read()['gpus'] == before and mutating_calls(host) == []


def test_destroy_idle_never_destroys_an_instance_a_pod_holds(simulated_host, run_module, host_paths, kubelet_with):
    """pod-resources name the holders by device id: with one of the two 1g.10gb held, the idle one goes; with both
    held, the expected idle destroy finds none, and the run is refused before any change."""
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': dict(ENABLED), 'gpu_instances': [dict(gi) for gi in TWO_SMALL]}])
    uuids = mig_uuids(run_module)
    before = host.read()['gpus']
    both = kubelet_with(pods_on(uuids, [0, 1]))
    result, failed = run_module(nvidia_mig_layout.main, layout_args(
        host_paths, ONE_20GB, create_only={'0': {'1g.20gb': 1}}, destroy_idle={'0': {'1g.10gb': 1}}, pod_resources_socket=both))
    assert failed and result['gpus_changed'] is False and 'busy instances are never destroyed' in result['msg'], result
    assert host.read()['gpus'] == before and mutating_calls(host) == []
    one = kubelet_with(pods_on(uuids, [1]))
    result, failed = run_module(nvidia_mig_layout.main, layout_args(
        host_paths, ONE_20GB, create_only={'0': {'1g.20gb': 1}}, destroy_idle={'0': {'1g.10gb': 1}}, pod_resources_socket=one))
    assert not failed, result
    assert [s for p, s in profiles(host.read()) if p == '1g.10gb'] == [1]


# ---- issue 39: a decision never calls systemctl; a failed boot persistence is not a failed apply -------------------

UNITS = ['gpufleet-mig-layout.service', 'gpufleet-mig-metrics.timer']


def metric_lines(host_paths, name):
    return [line for line in read(os.path.join(host_paths['metrics_dir'], 'gpufleet_mig.prom')).splitlines()
            if line.startswith(name + '{')]


def test_gpus_changed_then_systemctl_failing_is_applied_with_a_persistence_warning(
        simulated_host, run_module, host_paths, host_path, monkeypatch):
    """systemd=true on a host whose systemctl exists but which systemd did not boot: the GPUs reach the layout, then
    systemctl daemon-reload fails. The outcome is applied with a warning, not failed; last_apply says success (the
    GPUs), the boot persistence its own failure, and its metric says so apart from last_apply_success."""
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, 'warn', lambda self, text: warnings.append(text))
    host = simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED)}])
    host_path.add_systemctl(failing=True)
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, systemd=True))
    assert not failed, result
    assert result['changed'] and result['in_layout'] and mutating_calls(host)
    error = result['persistence']['error']
    assert error.startswith("systemctl daemon-reload failed (rc=1): System has not been booted with systemd") and '\n' not in error
    assert [w for w in warnings if 'boot persistence' in w] == ['MIG layout nighttime applied, boot persistence failed: ' + error]
    assert json.loads(read(os.path.join(host_paths['config_dir'], 'last_apply.json')))['result'] == 'success'
    kept = json.loads(read(os.path.join(host_paths['config_dir'], 'boot_persistence.json')))
    assert kept['result'] == 'failed' and kept['message'] == error and kept['layout'] == 'nighttime'
    assert [line.split()[-1] for line in metric_lines(host_paths, 'gpufleet_mig_layout_last_apply_success')] == ['1']
    assert metric_lines(host_paths, 'gpufleet_mig_boot_persistence_success') == [
        'gpufleet_mig_boot_persistence_success{layout="nighttime"} 0']

    # The next decision calls no systemctl and tells the apply what is left: the units (their files are written).
    calls = len(host_path.calls())
    decided, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, systemd=True, apply=False))
    assert not failed and decided['in_layout'] and decided['persistence'] == {'pending': UNITS, 'error': None}
    assert len(host_path.calls()) == calls

    # Once systemctl works, the role's persistence_only apply of the same layout changes no GPU and installs it.
    host_path.add_systemctl()
    before = len(mutating_calls(host))
    again, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, systemd=True, persistence_only=True))
    assert not failed and again['persistence'] == {'pending': [], 'error': None}, again
    assert len(mutating_calls(host)) == before
    assert 'enable gpufleet-mig-layout.service' in host_path.calls()
    assert json.loads(read(os.path.join(host_paths['config_dir'], 'boot_persistence.json')))['result'] == 'success'
    assert metric_lines(host_paths, 'gpufleet_mig_boot_persistence_success') == [
        'gpufleet_mig_boot_persistence_success{layout="nighttime"} 1']


def test_persistence_only_refuses_a_host_whose_gpus_changed_since_the_decision(simulated_host, run_module, host_paths, host_path):
    """The role installs a pending boot persistence with persistence_only: where the GPUs no longer hold the layout
    (another run changed them after the decision), nothing changes (no GPU, no file, no systemctl), so no GPU ever
    changes outside the role's Kubernetes hand-over."""
    host = simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED)}])
    assert not run_module(nvidia_mig_layout.main, layout_args(host_paths, DAY))[1]
    host_path.add_systemctl()
    calls, mutating = len(host_path.calls()), len(mutating_calls(host))
    files = sorted(os.listdir(host_paths['config_dir']))
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, systemd=True, persistence_only=True))
    assert failed and result['gpus_changed'] is False, result
    assert result['msg'] == ('MIG layout nighttime: only its boot persistence was to be installed, but the GPUs no longer '
                             'hold it (they changed since the decision); nothing was changed')
    # systemctl only asked (another MIG owner's units), never told to change anything.
    assert len(mutating_calls(host)) == mutating
    assert all(call.startswith(('is-active ', 'is-enabled ')) for call in host_path.calls()[calls:]), host_path.calls()
    assert sorted(os.listdir(host_paths['config_dir'])) == files
    for extra in ({'apply': False}, {'create_only': {'0': {'1g.10gb': 1}}}):
        result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, persistence_only=True, **extra))
        assert failed and result['msg'] == ('persistence_only installs the boot persistence of a host in the layout: set '
                                            'apply=true and no create_only with it'), result
    assert len(mutating_calls(host)) == mutating


@pytest.mark.parametrize('failing', [False, True], ids=['systemctl works', 'systemctl fails'])
def test_a_decision_and_check_mode_never_call_systemctl_whatever_systemd_says(
        simulated_host, run_module, host_paths, host_path, failing):
    """A host in its layout, systemd=true, systemctl present: the decision keeps layout.json, writes no unit file
    (a unit file changed without systemctl would need a reload), and tells the units pending; check mode the same."""
    simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED)}])
    assert not run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))[1]
    shutil.rmtree(host_paths['systemd_dir'])
    host_path.add_systemctl(failing=failing)
    for extra, check_mode in (({'apply': False}, False), ({}, True), ({'apply': False}, True)):
        result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, systemd=True, **extra),
                                    check_mode=check_mode)
        assert not failed and result['in_layout'], result
        # The unit files missing (the metrics timer's service too) and the units not enabled.
        assert result['persistence'] == {'pending': sorted(UNITS + ['gpufleet-mig-metrics.service']), 'error': None}
    assert host_path.calls() == []
    assert not os.path.exists(os.path.join(host_paths['systemd_dir'], 'gpufleet-mig-layout.service'))
    # Enabled (the links systemctl enable makes) and current, nothing is pending.
    if not failing:
        assert not run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, systemd=True))[1]
        for unit, target in zip(UNITS, ('multi-user.target', 'timers.target')):
            wants = os.path.join(host_paths['systemd_dir'], target + '.wants')
            if not os.path.isdir(wants):
                os.makedirs(wants)
            os.symlink(os.path.join(host_paths['systemd_dir'], unit), os.path.join(wants, unit))
        calls = len(host_path.calls())
        result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, systemd=True, apply=False))
        assert not failed and result['persistence'] == {'pending': [], 'error': None}
        assert len(host_path.calls()) == calls


@pytest.mark.parametrize('how', ['enabled', 'running'])
def test_a_decision_refuses_another_owner_from_the_disk_without_systemctl(
        simulated_host, run_module, host_paths, host_path, how):
    host = simulated_host([{'model': 'A30'}])
    host_path.add_systemctl()
    unit = 'nvidia-mig-manager.service'
    if how == 'enabled':
        wants = os.path.join(host_paths['systemd_dir'], 'multi-user.target.wants')
        os.makedirs(wants)
        os.symlink('/lib/systemd/system/' + unit, os.path.join(wants, unit))
    else:
        host_path.running_units.mkdir(parents=True)
        (host_path.running_units / ('invocation:' + unit)).symlink_to('0123456789abcdef')
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, OFF, systemd=True, apply=False))
    assert failed and unit in result['msg'] and result['other_owners'] == [unit]
    assert host_path.calls() == [] and mutating_calls(host) == []
