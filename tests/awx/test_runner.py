# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layout switch and the report run through ansible-runner the way AWX runs a job.

AWX hands ansible-runner a private data directory: ``project/`` (the project checkout),
``inventory/``, ``env/extravars`` (the job template's extra vars), ``env/envvars`` and
``env/settings``; the collection comes from the execution environment's collections path. The same
layout is built here around a copy of the repository and of the simulated fleet inventory, with
the simulator state in a temporary folder (nothing is written into the repository's .state/).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest
import yaml

from .conftest import BIN, REPO, awx_vars, copy_project

ansible_runner = pytest.importorskip('ansible_runner')

SIM_HOSTS = ('sim-a100-01', 'sim-a30-01', 'sim-h100-01', 'sim-h200-01')
# GPU instance profiles per model after each layout (roles/mig_layout/files/catalog.yml); L40S has no MIG.
EXPECTED = {
    'nighttime': {'A100-SXM4-80GB': ['3g.40gb'] * 2, 'A30': ['2g.12gb'] * 2, 'H100-SXM5-80GB': ['3g.40gb'] * 2,
                  'H200': ['3g.71gb'] * 2, 'L40S': []},
    'daytime': {'A100-SXM4-80GB': ['1g.10gb'] * 7, 'A30': ['1g.6gb'] * 4, 'H100-SXM5-80GB': ['1g.10gb'] * 7,
                'H200': ['1g.18gb'] * 7, 'L40S': []},
}


def write_yaml(path, data):
    with open(path, 'w') as handle:
        yaml.safe_dump(data, handle, default_flow_style=False)


def read_state(state_dir):
    """{host: [(model, MIG mode, sorted GI profiles), ...]} from the simulator state files."""
    hosts = {}
    for host in SIM_HOSTS:
        with open(os.path.join(state_dir, host, 'gpus.json')) as handle:
            state = json.load(handle)
        hosts[host] = [(gpu['model'], gpu.get('mig', {}).get('current', 'disabled'),
                        sorted(gi['profile'] for gi in gpu.get('gpu_instances', []))) for gpu in state['gpus']]
    return hosts


def snapshot(state_dir):
    """Bytes of every simulator state file."""
    found = {}
    for host in SIM_HOSTS:
        with open(os.path.join(state_dir, host, 'gpus.json'), 'rb') as handle:
            found[host] = handle.read()
    return found


def declared(state_dir, host):
    with open(os.path.join(state_dir, host, 'etc', 'gpufleet-mig', 'layout.json')) as handle:
        return json.load(handle)['name']


@pytest.fixture
def private_data_dir(tmp_path, monkeypatch):
    """AWX's private data dir for a job on the simulated fleet; yields (path, state dir)."""
    # The job sees only what AWX would give it, not the Makefile's settings for this checkout.
    for name in ('ANSIBLE_CONFIG', 'ANSIBLE_ROLES_PATH', 'ANSIBLE_COLLECTIONS_PATH', 'PYTHONPATH'):
        monkeypatch.delenv(name, raising=False)
    pdd = tmp_path / 'job'
    project = copy_project(str(pdd / 'project'))
    # The execution environment's collections path: the collection of the same revision.
    ee_collections = tmp_path / 'ee' / 'collections'
    (ee_collections / 'ansible_collections' / 'gpufleet').mkdir(parents=True)
    os.symlink(project, str(ee_collections / 'ansible_collections' / 'gpufleet' / 'mig'))
    # The inventory: the simulated fleet (AWX writes the synced inventory here).
    inventory = pdd / 'inventory'
    (inventory / 'group_vars').mkdir(parents=True)
    for name in ('hosts.yml', os.path.join('group_vars', 'all.yml')):
        with open(os.path.join(REPO, 'inventories', 'simulated', name)) as src:
            (inventory / name).write_text(src.read())
    (pdd / 'env').mkdir()
    write_yaml(str(pdd / 'env' / 'envvars'), {
        'ANSIBLE_COLLECTIONS_PATH': str(ee_collections),
        'ANSIBLE_NOCOLOR': '1',
        'PATH': BIN + os.pathsep + os.environ.get('PATH', ''),
    })
    write_yaml(str(pdd / 'env' / 'settings'), {'job_timeout': 240})
    state_dir = str(tmp_path / 'state')
    return pdd, state_dir


def run_job(pdd, playbook, extravars):
    """One job as AWX launches it: extra vars in env/extravars, then ansible_runner.run()."""
    write_yaml(str(pdd / 'env' / 'extravars'), extravars)
    runner = ansible_runner.run(private_data_dir=str(pdd), playbook=playbook, quiet=True)
    output = runner.stdout.read()
    assert (runner.rc, runner.status) == (0, 'successful'), output[-6000:]
    return runner, output


def layout_extravars(layout, state_dir):
    """The extra vars of job template "MIG layout - <layout>" (awx_configure.yml), plus the test's state dir."""
    defaults = awx_vars()
    return {
        'mig_layout_name': layout,
        'mig_layout_serial': defaults['awx_mig_layout_serial'],
        'mig_layout_max_fail_percentage': defaults['awx_mig_layout_max_fail_percentage'],
        'gpufleet_sim_state_dir': state_dir,
    }


def assert_layout(state_dir, layout):
    for host, gpus in read_state(state_dir).items():
        for model, mode, profiles in gpus:
            assert profiles == EXPECTED[layout][model], (host, model, profiles)
            assert mode == ('disabled' if model == 'L40S' else 'enabled'), (host, model, mode)
        assert declared(state_dir, host) == layout


def test_layout_switch_jobs_and_report_as_awx_runs_them(private_data_dir):
    pdd, state_dir = private_data_dir

    # 20:00: nighttime on a fresh fleet (MIG off everywhere, simulator state created by the job).
    runner, _output = run_job(pdd, 'playbooks/mig_layout.yml', layout_extravars('nighttime', state_dir))
    assert sorted(runner.stats['changed']) == sorted(SIM_HOSTS)
    assert not runner.stats['failures'] and not runner.stats['dark']
    assert_layout(state_dir, 'nighttime')
    night = read_state(state_dir)

    # 08:00: back to daytime; every host changes again.
    runner, _output = run_job(pdd, 'playbooks/mig_layout.yml', layout_extravars('daytime', state_dir))
    assert sorted(runner.stats['changed']) == sorted(SIM_HOSTS)
    assert not runner.stats['failures'] and not runner.stats['dark']
    assert_layout(state_dir, 'daytime')
    assert read_state(state_dir) != night

    # The report job: reads only, reports every host.
    before = snapshot(state_dir)
    runner, output = run_job(pdd, 'playbooks/mig_report.yml', {'gpufleet_sim_state_dir': state_dir})
    assert not runner.stats['changed']
    assert snapshot(state_dir) == before
    assert sorted(runner.stats['ok']) == sorted(SIM_HOSTS + ('localhost',))
    for line in ('GPU 0 A100-SXM4-80GB: MIG enabled, 7x1g.10gb;', 'GPU 1 A30: MIG enabled, 4x1g.6gb; 0 free slice(s)',
                 'GPU 0 H200: MIG enabled, 7x1g.18gb;', 'GPU 1 L40S: no MIG', "'declared layout: daytime'",
                 '4 host(s), 8 GPU(s), 7 with MIG enabled, 43 GPU instance(s)', 'layouts: daytime'):
        assert line in output, line
    assert output.count("'declared layout: daytime'") == len(SIM_HOSTS)
    # Nothing was written into the repository's own simulator state or project copy's.
    assert not os.path.exists(os.path.join(str(pdd), 'project', '.state'))
