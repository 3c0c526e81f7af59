# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/mig_demand.yml on a temporary simulated fleet (no Kubernetes: the pending requests given as the
rulebook gives them): --check and mig_demand_apply=false print the fleet plan and change nothing; a real run
declares the generated layout on the hosts the plan changes only and rolls it out through playbooks/mig_layout.yml
(its failure budget and fleet plan); run again with the same pods it changes nothing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from .test_rollout_check import HOSTS, daytime_fleet_state, fleet_run, host_files, stats_data

PLAYBOOK = 'playbooks/mig_demand.yml'
PLAN_TASK = 'Tell the fleet plan (per changed GPU, the demand that cannot be met and why, the totals)'
ROLLOUT_PLAN_TASK = 'Tell the fleet plan (per host and GPU, refused hosts, totals)'
FACTS_TASK = 'Read the GPUs of the host'
# As the event source gpufleet.mig.mig_pending_pods puts them in its event (tests/eda checks that).
REQUESTS = [
    {'pod': 'team-a/big', 'priority': 0, 'priority_class': '', 'requests': {'7g.80gb': 1}, 'created': '2026-12-03T22:00:00Z'},
    {'pod': 'team-a/small', 'priority': 0, 'priority_class': '', 'requests': {'1g.10gb': 1}, 'created': '2026-12-03T22:01:00Z'},
]


@pytest.fixture(scope='module')
def daytime_fleet(tmp_path_factory):
    """The simulated fleet in daytime (every A100 GPU 7x1g.10gb); yields its state dir."""
    with daytime_fleet_state(tmp_path_factory) as state_dir:
        yield state_dir


def plan_lines(run, task=PLAN_TASK):
    plans = run.task_results(task)
    assert len(plans) == 1, run.describe()
    return list(plans.values())[0]['msg']


def declared(state_dir, host):
    with open(os.path.join(state_dir, host, 'etc', 'gpufleet-mig', 'layout.json')) as handle:
        return json.load(handle)


def gpu_profiles(state_dir, host, gpu):
    with open(os.path.join(state_dir, host, 'gpus.json')) as handle:
        state = json.load(handle)
    return sorted(gi['profile'] for gi in state['gpus'][gpu]['gpu_instances'])


@pytest.mark.parametrize('how', [['--check'], ['-e', json.dumps({'mig_demand_apply': False})]])
def test_a_dry_run_prints_the_fleet_plan_and_changes_nothing(daytime_fleet, how):
    before = host_files(daytime_fleet)
    run = fleet_run(daytime_fleet, PLAYBOOK, args=how, mig_demand_requests=REQUESTS)
    assert run.rc == 0, run.describe()
    assert host_files(daytime_fleet) == before
    assert run.changed == []
    # One module call per host reads the GPUs; the rollout is not reached.
    assert sorted(run.task_results(FACTS_TASK)) == sorted(HOSTS)
    assert not run.task_results(ROLLOUT_PLAN_TASK)
    lines = plan_lines(run)
    assert lines[-1] == '2 of 2 waiting pod(s) served, 1 GPU(s) changed, 0 pod(s) to evict', lines
    assert lines[0].startswith('sim-a100-01 GPU 1 (destroy-idle): destroy 1g.10gb at 0') and lines[0].endswith(
        'create 7g.80gb at 0 for team-a/big'), lines
    published = stats_data(run)['mig_demand']
    assert published['check_mode'] is True
    assert (published['pending'], published['served'], published['gpus_changed'], published['evictions']) == (2, 2, 1, [])


def test_unmet_demand_is_explained_and_changes_nothing(daytime_fleet):
    before = host_files(daytime_fleet)
    run = fleet_run(daytime_fleet, PLAYBOOK, args=['--check'],
                    mig_demand_requests=[dict(REQUESTS[0], requests={'7g.80gb': 9})])
    assert run.rc == 0, run.describe()
    assert host_files(daytime_fleet) == before
    published = stats_data(run)['mig_demand']
    assert published['served'] == 0 and len(published['unmet']) == 1 and '7g.80gb' in published['unmet'][0]
    assert published['unmet'][0] in plan_lines(run)


def test_the_plan_is_applied_on_the_hosts_it_changes_through_the_rollout_then_nothing_changes(daytime_fleet):
    before = host_files(daytime_fleet)
    run = fleet_run(daytime_fleet, PLAYBOOK, mig_demand_requests=REQUESTS, mig_layout_max_fail_percentage=0)
    assert run.rc == 0, run.describe()
    assert run.changed == ['sim-a100-01'], run.describe()
    # The generated layout is the host's declared layout (boot persistence re-applies it); GPU 0 kept its instances.
    layout = declared(daytime_fleet, 'sim-a100-01')
    assert layout['name'].startswith('demand-')
    assert [entry['mig-devices'] for entry in layout['entries']] == [{'1g.10gb': 7}, {'7g.80gb': 1}]
    assert gpu_profiles(daytime_fleet, 'sim-a100-01', 0) == ['1g.10gb'] * 7
    assert gpu_profiles(daytime_fleet, 'sim-a100-01', 1) == ['7g.80gb']
    after = host_files(daytime_fleet)
    assert dict((k, v) for k, v in after.items() if not k.startswith('sim-a100-01/')) == \
        dict((k, v) for k, v in before.items() if not k.startswith('sim-a100-01/'))
    # Rolled out by playbooks/mig_layout.yml on that host only, its fleet plan at the end.
    rollout = plan_lines(run, ROLLOUT_PLAN_TASK)
    assert rollout[0] == 'sim-a100-01 GPU 1: 7x1g.10gb -> 1x7g.80gb (7 instance(s) destroyed)', rollout
    assert rollout[-1].startswith('layout %s: 1 of 1 host(s) evaluated, 1 to change' % layout['name']), rollout
    assert stats_data(run)['mig_demand']['check_mode'] is False

    # The same pods again (say, not yet bound): the new 7g.80gb serves the big one, nothing changes.
    again = fleet_run(daytime_fleet, PLAYBOOK, mig_demand_requests=REQUESTS)
    assert again.rc == 0 and again.changed == [], again.describe()
    assert host_files(daytime_fleet) == after
    assert plan_lines(again)[-1] == '2 of 2 waiting pod(s) served, 0 GPU(s) changed, 0 pod(s) to evict'
