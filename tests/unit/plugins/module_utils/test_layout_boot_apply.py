# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Boot-time apply and metrics of the mig_layout role, on the simulator."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpufleet.mig.plugins.module_utils import _boot_apply
from gpufleet_nvml_sim import library as _nvml_simulator
from ansible_collections.gpufleet.mig.plugins.module_utils._layout_metrics import METRICS_FILE, write_atomically


def declare(tmp_path, host, layout_instances, mig_enabled=True, name='daytime'):
    gpus = [{'index': i, 'uuid': g['uuid'], 'pci_device_id': '', 'mig_enabled': mig_enabled, 'instances': layout_instances[i]}
            for i, g in enumerate(_nvml_simulator.load_state(host.path)['gpus'])]
    path = str(tmp_path / 'etc' / 'layout.json')
    os.makedirs(os.path.dirname(path))
    with open(path, 'w') as handle:
        json.dump({'name': name, 'gpus': gpus}, handle)
    return path


def test_reboot_then_boot_apply_restores_layout_and_writes_metrics(simulated_host, tmp_path, capsys):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': {'current': 'enabled'}}, {'model': 'H100-SXM5-80GB', 'mig': {'current': 'enabled'}}])
    layout = declare(tmp_path, host, [{'1g.10gb': 7}, {'3g.40gb': 2}])
    metrics = str(tmp_path / 'metrics')
    assert _boot_apply.main(['apply', '--layout', layout, '--metrics-dir', metrics]) == 0
    _nvml_simulator.simulate_reboot(host.path)
    state = host.read()
    assert state['gpus'][1]['mig']['current'] == 'disabled' and not state['gpus'][0]['gpu_instances']
    assert _boot_apply.main(['apply', '--layout', layout, '--metrics-dir', metrics]) == 0
    out = capsys.readouterr().out
    assert 'GPU 1: MIG mode set to enabled' in out and 'layout daytime applied' in out
    state = host.read()
    assert sorted(gi['profile'] for gi in state['gpus'][0]['gpu_instances']) == ['1g.10gb'] * 7
    assert sorted(gi['profile'] for gi in state['gpus'][1]['gpu_instances']) == ['3g.40gb'] * 2
    with open(os.path.join(metrics, METRICS_FILE)) as handle:
        text = handle.read()
    assert 'gpufleet_mig_layout_info{layout="daytime"} 1' in text
    assert 'gpufleet_mig_layout_last_apply_success{layout="daytime",source="boot"} 1' in text
    assert 'profile="1g.10gb",uuid="%s"} 7' % state['gpus'][0]['uuid'] in text
    assert 'gpufleet_mig_free_slices{gpu="0",model="NVIDIA A100-SXM4-80GB",uuid="%s"} 1' % state['gpus'][0]['uuid'] in text
    assert 'gpufleet_mig_fragmentation_ratio{gpu="1"' in text
    assert text.count('gpufleet_mig_gpu_in_layout{') == 2 and 'gpufleet_mig_gpu_in_layout{gpu="1",model="NVIDIA H100 80GB HBM3",' in text
    assert [line[-2:] for line in text.splitlines() if line.startswith('gpufleet_mig_gpu_in_layout')] == [' 1', ' 1']


def test_busy_instance_blocks_boot_apply_and_is_recorded(simulated_host, tmp_path):
    host = simulated_host([{'model': 'A100-SXM4-80GB', 'mig': {'current': 'enabled'}, 'gpu_instances': [
        {'profile': '7g.80gb', 'start': 0, 'compute_instances': [{'profile': '7g.80gb', 'start': 0, 'pids': [77]}]}]}])
    layout = declare(tmp_path, host, [{'1g.10gb': 7}])
    metrics = str(tmp_path / 'metrics')
    before = host.read()['gpus']
    assert _boot_apply.main(['apply', '--layout', layout, '--metrics-dir', metrics]) == 1
    assert host.read()['gpus'] == before
    with open(os.path.join(metrics, METRICS_FILE)) as handle:
        text = handle.read()
    assert 'gpufleet_mig_layout_last_apply_success{layout="daytime",source="boot"} 0' in text
    assert 'gpufleet_mig_busy_instances{gpu="0"' in text and 'gpufleet_mig_gpu_in_layout{gpu="0",' in text
    record = json.load(open(os.path.join(os.path.dirname(layout), 'last_apply.json')))
    assert record['result'] == 'failed' and '[77]' in record['message']


def test_record_and_bad_layout_file(simulated_host, tmp_path, capsys):
    host = simulated_host([{'model': 'A30'}])
    layout = declare(tmp_path, host, [{}], mig_enabled=False, name='all-disabled')
    assert _boot_apply.main(['record', '--layout', layout, '--result', 'success']) == 0
    assert json.load(open(os.path.join(os.path.dirname(layout), 'last_apply.json')))['source'] == 'ansible'
    assert _boot_apply.main(['record', '--layout', layout]) == 2
    bad = tmp_path / 'bad.json'
    bad.write_text('{"gpus": 1}')
    assert _boot_apply.main(['apply', '--layout', str(bad)]) == 2
    assert 'needs "name" and a "gpus" list' in capsys.readouterr().err


def test_write_atomically_replaces_and_leaves_no_temp(tmp_path):
    target = str(tmp_path / 'm' / 'x.prom')
    write_atomically(target, 'a\n')
    write_atomically(target, 'b\n')
    assert open(target).read() == 'b\n'
    assert os.listdir(str(tmp_path / 'm')) == ['x.prom']
