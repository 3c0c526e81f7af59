# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia_mig_layout in-process against simulated hosts, and the boot-time apply it installs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import subprocess
import sys

import pytest

from ansible.module_utils import basic

from ansible_collections.gpufleet.mig.plugins.module_utils import _boot_apply, _host_files
from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_layout
from ansible_collections.gpufleet.mig.tests.unit.conftest import SIMULATOR_DIR, mutating_calls
import gpufleet_nvml_sim as simulator

ENABLED = {'current': 'enabled', 'pending': 'enabled'}
NIGHT = {'nighttime': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'3g.40gb': 2}}]}
DAY = {'daytime': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 7}}]}
OFF = {'all-disabled': [{'devices': 'all', 'mig-enabled': False}]}


@pytest.fixture
def host_paths(tmp_path):
    root = tmp_path / 'root'
    return {
        'config_dir': str(root / 'etc' / 'gpufleet-mig'),
        'lib_dir': str(root / 'usr' / 'local' / 'lib' / 'gpufleet-mig'),
        'bin_dir': str(root / 'usr' / 'local' / 'sbin'),
        'systemd_dir': str(root / 'etc' / 'systemd' / 'system'),
        'metrics_dir': str(root / 'metrics'),
        'systemd': False,
    }


def layout_args(host_paths, config, **extra):
    args = dict(host_paths, name=sorted(config)[0], config=config)
    args.update(extra)
    return args


def profiles(state, gpu=0):
    return sorted((gi['profile'], gi['start']) for gi in state['gpus'][gpu]['gpu_instances'])


def read(path):
    with open(path) as handle:
        return handle.read()


def test_decide_only_changes_no_gpu_and_keeps_the_files(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A100-SXM4-80GB'}, {'model': 'H100-SXM5-80GB'}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT, apply=False))
    assert not failed, result
    assert mutating_calls(host) == []
    assert result['in_layout'] is False and result['actions'] == []
    # MIG is off: NVML hides the profiles, so the instances are planned after the mode step.
    for gpu in result['gpus']:
        assert gpu['deferred'] and gpu['instances'] is None and 'after MIG is enabled' in gpu['note']
        assert gpu['actions'] == [{'action': 'set_mig_mode', 'mode': 'enabled'}]
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


def test_disabling_mig_destroys_idle_instances_first(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED), 'gpu_instances': [
        {'profile': '3g.40gb', 'start': 0, 'compute_instances': [{'profile': '3g.40gb', 'start': 0}]}]}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, OFF))
    assert not failed, result
    assert [a['action'] for a in result['actions']] == ['destroy_compute_instance', 'destroy_gpu_instance', 'set_mig_mode']
    state = host.read()
    assert state['gpus'][0]['mig'] == {'current': 'disabled', 'pending': 'disabled'} and not state['gpus'][0]['gpu_instances']


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
    # ... with MIG off, NVML names the profiles only after the mode step: MIG ends enabled, no instance made.
    disabled = simulated_host([{'model': 'A30'}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))
    assert failed and '3g.40gb' in result['msg']
    assert [c['call'] for c in mutating_calls(disabled)] == ['nvmlDeviceSetMigMode']
    assert disabled.read()['gpus'][0]['mig']['current'] == 'enabled' and not disabled.read()['gpus'][0]['gpu_instances']


def test_record_failure_only_records(simulated_host, run_module, host_paths):
    host = simulated_host([{'model': 'A30'}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, OFF, record_failure='eviction refused by a PodDisruptionBudget'))
    assert not failed and not result['changed'] and mutating_calls(host) == []
    record = json.loads(read(os.path.join(host_paths['config_dir'], 'last_apply.json')))
    assert record == dict(record, result='failed', source='ansible', layout='all-disabled', message='eviction refused by a PodDisruptionBudget')
    metrics = read(os.path.join(host_paths['metrics_dir'], 'gpufleet_mig.prom'))
    assert 'gpufleet_mig_layout_last_apply_success{layout="all-disabled",source="ansible"} 0' in metrics


# ---- systemd: units, GPU clients, other owners -------------------------------------------

@pytest.fixture
def fake_systemctl(monkeypatch):
    """systemctl as the module calls it (argument lists through run_command); ``active``/``enabled`` are the state."""
    state = {'active': set(), 'enabled': set(), 'calls': []}

    def get_bin_path(self, name, required=False, opt_dirs=None):
        return '/usr/bin/' + name

    def run_command(self, args, **kwargs):
        assert isinstance(args, list) and args[0] == '/usr/bin/systemctl', args
        state['calls'].append(args[1:])
        verb, unit = args[1], args[-1]
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
    assert sorted(os.listdir(installed)) == sorted(name + '.py' for name in _host_files.BOOT_CODE)
    repository = os.path.join(os.path.dirname(nvidia_mig_layout.__file__), '..', 'module_utils')
    for name in os.listdir(installed):
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
    env = dict(os.environ, PYTHONPATH=SIMULATOR_DIR, GPUFLEET_MIG_SIMULATOR=host.path)
    layout = os.path.join(host_paths['config_dir'], 'layout.json')
    boot = subprocess.run([sys.executable, '-c', poison, script, 'apply', '--layout', layout, '--metrics-dir', host_paths['metrics_dir']],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
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
    first = [gi for gi in host.read()['gpus'][0]['gpu_instances']][0]
    simulator.set_pids(host.path, 0, first['id'], first['compute_instances'][0]['id'], [77])
    layout = os.path.join(host_paths['config_dir'], 'layout.json')
    declared = json.loads(read(layout))
    declared['entries'] = DAY['daytime']
    with open(layout, 'w') as handle:
        json.dump(declared, handle)
    before = host.read()['gpus']
    assert _boot_apply.main(['apply', '--layout', layout, '--metrics-dir', host_paths['metrics_dir']]) == 1
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
    assert _boot_apply.main(['metrics', '--layout', layout, '--metrics-dir', host_paths['metrics_dir']]) == 0
    assert len(host.calls()) == calls
    assert 'gpufleet_mig_layout_info{layout="all-disabled"} 1' in read(os.path.join(host_paths['metrics_dir'], 'gpufleet_mig.prom'))
    from ansible_collections.gpufleet.mig.plugins.module_utils._host_lock import HostLock
    with HostLock(host.path + '.host.lock', 1):
        assert _boot_apply.main(['metrics', '--layout', layout, '--metrics-dir', host_paths['metrics_dir'], '--lock-timeout', '0']) == 0
    assert 'gave up' in capsys.readouterr().err
    assert _boot_apply.main(['metrics', '--layout', layout]) == 2


def test_bad_declared_layout_file(tmp_path, capsys):
    bad = tmp_path / 'layout.json'
    bad.write_text('{"gpus": 1}')
    assert _boot_apply.main(['apply', '--layout', str(bad)]) == 2
    assert 'needs "name" and an "entries" list' in capsys.readouterr().err
