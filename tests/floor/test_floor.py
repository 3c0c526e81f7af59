# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""make floor-test: the lowest ansible-core that meta/runtime.yml's requires_ansible declares runs the collection.

Run by the interpreter of .venv-floor (requirements/floor.txt), after the module unit tests: this venv's
ansible-core is the declared floor, and a module runs through the real ``ansible`` CLI of that version on a
simulated GPU (a layout applied, then read back through the facts).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import subprocess
import sys

import ansible

from ansible_collections.gpufleet.mig.tests.support.playbook import REPO, ansible_environment
from ansible_collections.gpufleet.mig.tests.support.simulator import simulated_environment

NIGHT = {'nighttime': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'3g.40gb': 2}}]}


def declared_floor():
    with open(os.path.join(REPO, 'meta', 'runtime.yml')) as handle:
        match = re.search(r'''^requires_ansible:\s*["']>=(\d+)\.(\d+)\.\d+["']''', handle.read(), re.MULTILINE)
    assert match, 'meta/runtime.yml declares no requires_ansible ">=X.Y.Z"'
    return int(match.group(1)), int(match.group(2))


def test_this_ansible_core_is_the_declared_floor():
    assert tuple(int(part) for part in ansible.__version__.split('.')[:2]) == declared_floor(), ansible.__version__


def run_module(tmp_path, state, module, args):
    """One module run on localhost through this venv's ``ansible``; returns the host's result."""
    env = ansible_environment(
        # ansible-core 2.17 has no builtin json callback (ansible.posix's): minimal prints 'host | STATUS => {json}'.
        ANSIBLE_LOAD_CALLBACK_PLUGINS='1', ANSIBLE_STDOUT_CALLBACK='ansible.builtin.minimal', ANSIBLE_CALLBACK_RESULT_FORMAT='json',
        ANSIBLE_LOCAL_TEMP=str(tmp_path / 'local-tmp'), ANSIBLE_REMOTE_TMP=str(tmp_path / 'remote-tmp'),
        **simulated_environment(state))
    done = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), 'ansible'), 'localhost', '-i', 'localhost,', '-c', 'local',
         '-e', 'ansible_python_interpreter=%s' % sys.executable, '-m', module, '-a', json.dumps(args)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert done.stdout.startswith('localhost | '), done.stdout[-4000:]
    return json.loads(done.stdout.split(' => ', 1)[1])


def test_a_layout_applied_and_read_back_through_ansible(tmp_path):
    state = tmp_path / 'gpus.json'
    state.write_text(json.dumps({'driver_version': '580.95.05', 'gpus': [{'model': 'A100-SXM4-80GB'}]}))
    host = tmp_path / 'host'
    applied = run_module(tmp_path, state, 'gpufleet.mig.nvidia_mig_layout', {
        'name': 'nighttime', 'config': NIGHT, 'systemd': False, 'config_dir': str(host / 'etc'), 'lib_dir': str(host / 'lib'),
        'bin_dir': str(host / 'bin'), 'systemd_dir': str(host / 'systemd'), 'metrics_dir': str(host / 'metrics'),
        'pod_resources': 'off'})
    assert applied['changed'] and applied['in_layout'], applied
    facts = run_module(tmp_path, state, 'gpufleet.mig.nvidia_mig_facts', {'pod_resources': 'off', 'layout_file': str(host / 'etc' / 'layout.json')})
    gpu = facts['ansible_facts']['nvidia_mig']['gpus'][0]
    assert sorted((gi['profile'], gi['placement']['start']) for gi in gpu['gpu_instances']) == [('3g.40gb', 0), ('3g.40gb', 4)]
