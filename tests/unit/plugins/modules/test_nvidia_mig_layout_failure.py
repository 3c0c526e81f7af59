# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia_mig_layout_failure: the role's record of a change that failed outside nvidia_mig_layout."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_layout_failure
from ansible_collections.gpufleet.mig.tests.unit.conftest import mutating_calls

NIGHT = {'nighttime': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'3g.40gb': 2}}]}
REASON = 'eviction refused by a PodDisruptionBudget'


def failure_args(tmp_path, **extra):
    args = {'name': 'nighttime', 'config': NIGHT, 'reason': REASON,
            'config_dir': str(tmp_path / 'etc'), 'metrics_dir': str(tmp_path / 'metrics')}
    args.update(extra)
    return args


def read(path):
    with open(path) as handle:
        return handle.read()


def test_records_the_failure_and_refreshes_the_metrics_without_changing_a_gpu(simulated_host, run_module, tmp_path):
    host = simulated_host([{'model': 'A30'}])
    result, failed = run_module(nvidia_mig_layout_failure.main, failure_args(tmp_path))
    assert not failed, result
    assert result == {'changed': False, 'layout': 'nighttime', 'recorded': REASON}
    assert mutating_calls(host) == []
    record = json.loads(read(str(tmp_path / 'etc' / 'last_apply.json')))
    assert record == dict(record, result='failed', source='ansible', layout='nighttime', message=REASON)
    metrics = read(str(tmp_path / 'metrics' / 'gpufleet_mig.prom'))
    assert 'gpufleet_mig_layout_last_apply_success{layout="nighttime",source="ansible"} 0' in metrics
    # The GPU (MIG off) does not hold the layout the record names.
    assert re.findall(r'(?m)^gpufleet_mig_gpu_in_layout\{.*\} 0$', metrics)


def test_without_a_metrics_folder_it_only_records_and_opens_no_gpu(simulated_host, run_module, tmp_path):
    host = simulated_host([{'model': 'A30'}])
    result, failed = run_module(nvidia_mig_layout_failure.main, failure_args(tmp_path, metrics_dir=''))
    assert not failed, result
    assert json.loads(read(str(tmp_path / 'etc' / 'last_apply.json')))['result'] == 'failed'
    assert host.calls() == [] and not os.path.exists(str(tmp_path / 'metrics'))


def test_check_mode_writes_nothing(simulated_host, run_module, tmp_path):
    host = simulated_host([{'model': 'A30'}])
    result, failed = run_module(nvidia_mig_layout_failure.main, failure_args(tmp_path), check_mode=True)
    assert not failed and result['recorded'] == REASON and not result['changed']
    assert not os.path.exists(str(tmp_path / 'etc')) and not os.path.exists(str(tmp_path / 'metrics'))
    assert host.calls() == []


def test_a_layout_not_in_the_config_is_refused_and_nothing_is_written(simulated_host, run_module, tmp_path):
    simulated_host([{'model': 'A30'}])
    result, failed = run_module(nvidia_mig_layout_failure.main, failure_args(tmp_path, name='weekend'))
    assert failed and 'weekend' in result['msg'] and 'nighttime' in result['msg']
    assert not os.path.exists(str(tmp_path / 'etc'))
