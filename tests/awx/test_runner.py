# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The layout switch and the report run through ansible-runner the way AWX runs a job
(tests/support/playbook.py), checked against tests/support/expected_layouts.yml.

AWX hands ansible-runner a private data directory: ``project/`` (the project checkout),
``inventory/``, ``env/extravars`` (the job template's extra vars), ``env/envvars`` and
``env/settings``; the collection comes from the execution environment's collections path. The same
layout is built here around a copy of the repository and of the simulated fleet inventory, with
the simulator state in a temporary folder (nothing is written into the repository's .state/),
created by a first job of simulator/seed.yml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest
import yaml

from ..support.layouts import expected_instances, layout_errors, nvml_name, simulated_gpus
from ..support.playbook import BIN, REPO, run_playbook
from .conftest import awx_vars, copy_project

SIM_HOSTS = ('sim-a100-01', 'sim-a30-01', 'sim-h100-01', 'sim-h200-01', 'sim-b200-01', 'sim-rtxpro-01')


def write_yaml(path, data):
    with open(path, 'w') as handle:
        yaml.safe_dump(data, handle, default_flow_style=False)


def read_state(state_dir):
    """{host: GPUs as tests/support/layouts.py's layout_errors takes them} from the simulator state files."""
    return dict((host, simulated_gpus(os.path.join(state_dir, host, 'gpus.json'))) for host in SIM_HOSTS)


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
        with open(os.path.join(os.path.join(REPO, 'inventories', 'simulated'), name)) as src:
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


def run_job(pdd, playbook, extravars, limit=None):
    """One job as AWX launches it: extra vars in env/extravars, then ansible-runner (tests/support/playbook.py)."""
    write_yaml(str(pdd / 'env' / 'extravars'), extravars)
    run = run_playbook(playbook, private_data_dir=str(pdd), args=['--limit', ','.join(limit)] if limit else [])
    assert (run.rc, run.status) == (0, 'successful'), run.describe() + '\n' + run.stdout[-6000:]
    return run


def simulator_extravars(pdd, state_dir):
    """Where the simulated fleet lives: its state in the test's folder, its simulator package in the project
    checkout (inventories/simulated finds the repository from the inventory's folder, which AWX replaces)."""
    return {'gpufleet_sim_state_dir': state_dir, 'gpufleet_sim_repository': str(pdd / 'project')}


def layout_extravars(layout, pdd, state_dir):
    """The extra vars of job template "MIG layout - <layout>" (awx_configure.yml), plus the simulated fleet's."""
    defaults = awx_vars()
    extravars = {
        'mig_layout_name': layout,
        'mig_layout_serial': defaults['awx_mig_layout_serial'],
        'mig_layout_max_fail_percentage': defaults['awx_mig_layout_max_fail_percentage'],
    }
    extravars.update(simulator_extravars(pdd, state_dir))
    return extravars


def assert_layout(state_dir, layout):
    """Every GPU as tests/support/expected_layouts.yml says for ``layout``, which every host declares."""
    for host, gpus in read_state(state_dir).items():
        assert layout_errors(layout, gpus) == [], (host, layout)
        assert declared(state_dir, host) == layout


def test_layout_switch_jobs_and_report_as_awx_runs_them(private_data_dir):
    pdd, state_dir = private_data_dir

    # The simulated fleet's GPUs (MIG off everywhere), as `make demo` creates them.
    run = run_job(pdd, 'simulator/seed.yml', simulator_extravars(pdd, state_dir))
    assert run.changed == sorted(SIM_HOSTS)

    # 20:00: nighttime on the fresh fleet.
    run = run_job(pdd, 'playbooks/mig_layout.yml', layout_extravars('nighttime', pdd, state_dir))
    assert run.changed == sorted(SIM_HOSTS)
    assert not run.failed and not run.unreachable
    assert_layout(state_dir, 'nighttime')
    night = read_state(state_dir)

    # 08:00: back to daytime; every host changes again.
    run = run_job(pdd, 'playbooks/mig_layout.yml', layout_extravars('daytime', pdd, state_dir))
    assert run.changed == sorted(SIM_HOSTS)
    assert not run.failed and not run.unreachable
    assert_layout(state_dir, 'daytime')
    assert read_state(state_dir) != night

    # The report job: reads the hosts only, reports every host; on the controller it writes the fleet map.
    before = snapshot(state_dir)
    fleet_map = os.path.join(os.path.dirname(state_dir), 'mig-fleet-map.html')
    run = run_job(pdd, 'playbooks/mig_report.yml', dict(simulator_extravars(pdd, state_dir), mig_report_map_path=fleet_map))
    assert run.changed == ['localhost'] and os.path.isfile(fleet_map)
    assert snapshot(state_dir) == before
    assert sorted(host for host, counts in run.stats.items() if counts['ok']) == sorted(SIM_HOSTS + ('localhost',))
    # One task on the controller reports every host's GPUs (no task per host: each host computed its lines).
    report = run.task_results('Report the layout and fragmentation of each GPU')['localhost']['msg']
    assert sorted(report) == sorted(SIM_HOSTS)
    assert all(lines[0] == 'declared layout: daytime' for lines in report.values()), report
    for host, line in (('sim-a100-01', report_line(0, 'A100-SXM4-80GB') + ';'),
                       ('sim-a30-01', report_line(1, 'A30') + '; 0 free slice(s)'),
                       ('sim-h200-01', report_line(0, 'H200') + ';'),
                       ('sim-h200-01', 'GPU 1 L40S: no MIG'),
                       ('sim-b200-01', report_line(1, 'B200') + ';'),
                       ('sim-rtxpro-01', report_line(0, 'RTX-PRO-6000-SERVER') + '; 0 free slice(s)')):
        assert any(shown.startswith(line) for shown in report[host]), (line, report[host])
    instances = sum(len(expected_instances('daytime', gpu[0])) for gpus in read_state(state_dir).values() for gpu in gpus)
    summary = run.task_results('Summarise the hosts of this job')['localhost']['msg']
    assert summary.startswith('6 host(s), 11 GPU(s), 10 with MIG enabled, 0 not in their declared layout, %d GPU instance(s)'
                              % instances), summary
    assert summary.endswith('layouts: daytime'), summary
    # Nothing was written into the repository's own simulator state or project copy's.
    assert not os.path.exists(os.path.join(str(pdd), 'project', '.state'))

    # The same report sliced in two, as the workflow of awx_configure.yml runs it: each slice publishes its hosts
    # (set_stats), AWX merges the slices' artifacts key by key into the next node's extra vars, and that node
    # (mig_report_merge) writes one map of all of them without reading any host.
    # (AWX gives each slice an inventory of its hosts; here a limit to them and the controller's implicit localhost.)
    artifacts = {}
    for job_id, hosts in ((41, SIM_HOSTS[:3]), (42, SIM_HOSTS[3:])):
        sliced = run_job(pdd, 'playbooks/mig_report.yml', dict(
            simulator_extravars(pdd, state_dir), mig_report_publish=True, awx_job_id=job_id,
            mig_report_map_path=os.path.join(os.path.dirname(state_dir), 'slice-%d.html' % job_id)), limit=hosts + ('localhost',))
        published = artifacts_of(sliced)
        assert list(published) == ['mig_report_part_%d' % job_id]
        assert sorted(record['host'] for record in published['mig_report_part_%d' % job_id]) == sorted(hosts)
        artifacts.update(published)
    merged_map = os.path.join(os.path.dirname(state_dir), 'merged.html')
    merged = run_job(pdd, 'playbooks/mig_report.yml', dict(simulator_extravars(pdd, state_dir), mig_report_merge=True,
                                                           awx_job_id=43, mig_report_map_path=merged_map, **artifacts))
    assert sorted(merged.stats) == ['localhost'], merged.describe()
    assert merged.task_results('Summarise the hosts of this job')['localhost']['msg'] == summary
    assert fleet_data(merged_map) == fleet_data(fleet_map)
    assert snapshot(state_dir) == before


def artifacts_of(run):
    """What set_stats published (ansible-runner's artifact_data: what AWX keeps as the job's artifacts)."""
    stats = [e for e in run.events if e.get('event') == 'playbook_on_stats']
    return stats[-1]['event_data'].get('artifact_data') or {}


def fleet_data(path):
    """The hosts and GPUs a fleet map draws (its JSON payload)."""
    with open(path) as handle:
        page = handle.read()
    start = page.index('<script type="application/json" id="fleet-data">') + len('<script type="application/json" id="fleet-data">')
    return json.loads(page[start:page.index('</script>', start)])


def report_line(index, model):
    """How mig_report.yml shows a daytime GPU of simulator model ``model``: "GPU 0 A30: MIG enabled, 4x1g.6gb"."""
    name = nvml_name(model)
    instances = expected_instances('daytime', name)
    return 'GPU %d %s: MIG enabled, %dx%s' % (index, name.replace('NVIDIA ', ''), len(instances), instances[0][0])
