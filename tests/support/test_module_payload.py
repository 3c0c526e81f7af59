# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What gpufleet.mig.nvidia_mig_layout ships to a host: its AnsiballZ payload, as the real ``ansible`` CLI builds it.

The module runs once on localhost against a simulated GPU (the simulator on PYTHONPATH of the controller
and of the module, as on a simulated fleet), with the remote files kept. The payload must carry every
module_utils file the boot unit runs (``_boot_install.BOOT_CODE``: the module copies them from its own
payload to the host) and nothing of the simulator, which is a test double that never ships.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import glob
import io
import json
import os
import re
import subprocess
import sys
import zipfile

from ansible_collections.gpufleet.mig.plugins.module_utils.host._boot_install import BOOT_CODE, PACKAGE

from .playbook import REPO, ansible_environment
from .simulator import simulated_environment

MODULE = 'gpufleet.mig.nvidia_mig_layout'
ZIP_DATA = re.compile(r"^zip_data='([A-Za-z0-9+/=]+)',$", re.MULTILINE)
SIMULATOR_MARKS = (b'_nvml_simulator', b'SimulatedNvml', b'simulate_reboot')
LAYOUT = {'daytime': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 7}}]}


def run_module_keeping_its_payload(tmp_path):
    """One decision run (apply=false) of the module on localhost; returns (its result, the payload file)."""
    state = tmp_path / 'gpus.json'
    # Already in the layout: a decision declares the layout (and installs the boot code) only then.
    small = [{'profile': '1g.10gb', 'start': start, 'compute_instances': [{'profile': '1g.10gb', 'start': 0}]} for start in range(7)]
    state.write_text(json.dumps({'driver_version': '580.95.05', 'gpus': [
        {'model': 'A100-SXM4-80GB', 'mig': {'current': 'enabled', 'pending': 'enabled'}, 'gpu_instances': small}]}))
    host = tmp_path / 'host'
    remote_tmp = tmp_path / 'remote-tmp'
    args = {
        'name': 'daytime', 'config': LAYOUT, 'apply': False, 'systemd': False, 'boot_persistence': True,
        'config_dir': str(host / 'etc'), 'lib_dir': str(host / 'lib'), 'bin_dir': str(host / 'bin'),
        'systemd_dir': str(host / 'systemd'), 'metrics_dir': '', 'python': sys.executable,
    }
    env = ansible_environment(
        ANSIBLE_KEEP_REMOTE_FILES='1', ANSIBLE_PIPELINING='0', ANSIBLE_REMOTE_TMP=str(remote_tmp),
        ANSIBLE_LOAD_CALLBACK_PLUGINS='1', ANSIBLE_STDOUT_CALLBACK='ansible.builtin.json',
        **simulated_environment(state))
    done = subprocess.run(
        ['ansible', 'localhost', '-i', 'localhost,', '-c', 'local', '-e', 'ansible_python_interpreter=%s' % sys.executable,
         '-m', MODULE, '-a', json.dumps(args)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    result = json.loads(done.stdout)['plays'][0]['tasks'][0]['hosts']['localhost']
    payloads = glob.glob(str(remote_tmp / 'ansible-tmp-*' / 'AnsiballZ_nvidia_mig_layout.py'))
    assert len(payloads) == 1, sorted(glob.glob(str(remote_tmp / '**'), recursive=True))
    return result, host, payloads[0]


def payload_files(path):
    """{name: bytes} of the zip the AnsiballZ wrapper carries in zip_data='...' (base64)."""
    with open(path) as handle:
        found = ZIP_DATA.findall(handle.read())
    assert len(found) == 1, 'expected one zip_data line in %s' % path
    with zipfile.ZipFile(io.BytesIO(base64.b64decode(found[0]))) as archive:
        return dict((name, archive.read(name)) for name in archive.namelist())


def test_payload_carries_the_boot_code_and_no_simulator(tmp_path):
    result, host, payload = run_module_keeping_its_payload(tmp_path)
    # It ran on the simulated GPU, which holds the daytime layout already.
    assert (result['layout'], result['in_layout'], result['actions']) == ('daytime', True, []), result
    assert result['gpus'][0]['name'] == 'NVIDIA A100-SXM4-80GB'

    files = payload_files(payload)
    package_dir = PACKAGE.replace('.', '/')
    boot_files = dict(('%s.py' % name, '%s/%s.py' % (package_dir, name)) for name in BOOT_CODE)
    missing = sorted(path for path in boot_files.values() if path not in files)
    assert not missing, 'module_utils the boot code needs are not in the payload: %s' % missing
    assert 'host/_boot_entry' in BOOT_CODE and 'host/_nvml_backend' in BOOT_CODE

    assert not [name for name in files if 'gpufleet_nvml_sim' in name], sorted(files)
    with open(payload, 'rb') as handle:
        wrapper = handle.read()
    for name, content in sorted(files.items()) + [(os.path.basename(payload), wrapper)]:
        for mark in SIMULATOR_MARKS:
            assert mark not in content, '%s of the payload contains %s' % (name, mark.decode())

    # The boot code the module kept on the host is the payload's, byte for byte, and only that.
    lib = host / 'lib' / package_dir
    kept = sorted(os.path.relpath(os.path.join(folder, name), str(lib)) for folder, dummy, names in os.walk(str(lib)) for name in names)
    assert kept == sorted(boot_files)
    for file_name, path in boot_files.items():
        assert (lib / file_name).read_bytes() == files[path], file_name
