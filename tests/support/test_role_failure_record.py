# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The mig_layout role's rescue records a failed change through gpufleet.mig.nvidia_mig_layout_failure.

The record task has ``failed_when: false`` (the host fails with the reason anyway), so nothing else would
notice a record call that no longer works. Here the module's apply succeeds but leaves the MIG mode pending
(another client holds the GPU, no GPU reset allowed), and the role then refuses to reboot: a failure outside
nvidia_mig_layout, so only the failure module can have written it to the host's last apply record and metrics.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from .playbook import run_playbook
from .simulator import simulated_environment

RECORD_TASK = 'Record the failed change for the metrics'


def test_a_failed_change_is_recorded_by_the_failure_module(tmp_path):
    state = tmp_path / 'gpus.json'
    state.write_text(json.dumps({'driver_version': '580.95.05', 'gpus': [{'model': 'A100-SXM4-80GB', 'clients': ['nvidia-persistenced']}]}))
    host = tmp_path / 'host'
    playbook = tmp_path / 'play.yml'
    playbook.write_text(json.dumps([{
        'hosts': 'localhost', 'connection': 'local', 'gather_facts': False,
        'vars': {
            'ansible_python_interpreter': '{{ ansible_playbook_python }}',
            'mig_layout_name': 'nighttime', 'mig_layout_install_dependencies': False, 'mig_layout_systemd': False,
            'mig_layout_allow_reset': False, 'mig_layout_allow_reboot': False,
            'mig_layout_boot_environment': simulated_environment(state),
            'mig_layout_config_dir': str(host / 'etc'), 'mig_layout_lib_dir': str(host / 'lib'),
            'mig_layout_bin_dir': str(host / 'bin'), 'mig_layout_systemd_dir': str(host / 'systemd'),
            'mig_layout_metrics_dir': str(host / 'metrics'),
        },
        'roles': ['gpufleet.mig.mig_layout'],
    }]))
    run = run_playbook(str(playbook), inventory='localhost,')
    assert run.rc != 0 and run.failed == ['localhost'], run.to_dict()
    records = [r for r in run.results if r['task'] == RECORD_TASK]
    assert [(r['action'], r['status']) for r in records] == [('gpufleet.mig.nvidia_mig_layout_failure', 'ok')], records
    with open(str(host / 'etc' / 'last_apply.json')) as handle:
        record = json.load(handle)
    assert record['result'] == 'failed' and record['layout'] == 'nighttime'
    assert 'rebooting is not allowed' in record['message'], record
    with open(str(host / 'metrics' / 'gpufleet_mig.prom')) as handle:
        assert 'gpufleet_mig_layout_last_apply_success{layout="nighttime",source="ansible"} 0' in handle.read()
