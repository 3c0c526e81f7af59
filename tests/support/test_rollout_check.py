# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""playbooks/mig_layout.yml on a temporary simulated fleet: --check evaluates every host, a refusing one
included, and ends with one fleet plan published with set_stats, changing nothing; the pre-flight play
refuses bad input with one line before any host is touched."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
import os
import re
import shutil
import subprocess

import pytest

from .playbook import BIN, REPO, ansible_environment, run_playbook

INVENTORY = os.path.join('inventories', 'simulated')
HOSTS = ('sim-a100-01', 'sim-a30-01', 'sim-b200-01', 'sim-h100-01', 'sim-h200-01', 'sim-rtxpro-01')
DECISION_TASK = 'Plan the layout on the host without changing a GPU'
FIRST_DECISION_TASK = 'Decide whether the host differs from the layout (a host that is not a Kubernetes node)'
FIRST_DECISION_PLAY = 'Pre-flight - decide first on each host that is not a Kubernetes node'
PREFLIGHT_READ = 'Read the GPUs of the hosts whose GPUs the controller does not know yet (no fact cache)'
PLAN_TASK = 'Tell the fleet plan (per host and GPU, refused hosts, totals)'
PROGRESS_TASK = 'Tell the progress of the rollout'
DRY_RUN_PROGRESS_TASK = 'Tell the progress of the dry run (where a real run would stop)'
# The GPU instance id is NVML's to choose (only its range per size holds): compared as N.
BUSY_REASON = ('GPU 0: GPU instance N (1g.10gb at slice 3) has running processes [4242] but the layout 2x3g.40gb '
               'does not keep it; busy instances are never destroyed: stop that work first')


def without_ids(text):
    return re.sub(r'GPU instance \d+ ', 'GPU instance N ', text)


def fleet_run(state_dir, playbook='playbooks/mig_layout.yml', args=(), envvars=None, **extravars):
    extravars['gpufleet_sim_state_dir'] = state_dir
    return run_playbook(playbook, inventory=INVENTORY, extravars=extravars, args=list(args), envvars=envvars)


def host_files(state_dir):
    """Bytes of every file of the simulated hosts (GPU state, declared layout, boot unit, ...), locks left out."""
    found = {}
    for root, dummy, names in os.walk(state_dir):
        for name in names:
            if not name.endswith('.lock'):
                path = os.path.join(root, name)
                with open(path, 'rb') as handle:
                    found[os.path.relpath(path, state_dir)] = handle.read()
    return found


def make_busy(state_dir, host, gpu, start, pids):
    """A process on the GPU instance of ``gpu`` that starts at memory slice ``start`` (the simulator's state file)."""
    path = os.path.join(state_dir, host, 'gpus.json')
    with open(path) as handle:
        state = json.load(handle)
    found = [gi for gi in state['gpus'][gpu]['gpu_instances'] if gi['start'] == start]
    assert found, (host, gpu, start)
    found[0]['compute_instances'][0]['pids'] = pids
    with open(path, 'w') as handle:
        json.dump(state, handle, indent=1, sort_keys=True)


@contextlib.contextmanager
def daytime_fleet_state(tmp_path_factory):
    """A simulated fleet seeded and switched to daytime, with the tests' Ansible environment set meanwhile (for a
    module-scoped fixture, which monkeypatch cannot serve); yields its state dir."""
    saved = dict(os.environ)
    os.environ.update(ansible_environment())
    try:
        state_dir = str(tmp_path_factory.mktemp('fleet') / 'state')
        assert fleet_run(state_dir, 'simulator/seed.yml').rc == 0
        run = fleet_run(state_dir, mig_layout_name='daytime', mig_layout_serial='100%')
        assert run.rc == 0 and run.changed == sorted(HOSTS), run.describe()
        yield state_dir
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope='module')
def daytime_fleet(tmp_path_factory):
    """The simulated fleet in daytime, GPU 0 of sim-a100-01 busy where nighttime puts a 3g.40gb; yields its state dir."""
    with daytime_fleet_state(tmp_path_factory) as state_dir:
        make_busy(state_dir, 'sim-a100-01', 0, 3, [4242])
        yield state_dir


def stats_data(run):
    """What set_stats published (ansible-runner's artifact_data, what AWX keeps as the job's artifacts)."""
    stats = [e for e in run.events if e.get('event') == 'playbook_on_stats']
    return stats[-1]['event_data'].get('artifact_data') or {}


def test_check_mode_evaluates_every_host_and_ends_with_one_fleet_plan(ansible_env, daytime_fleet):
    before = host_files(daytime_fleet)
    run = fleet_run(daytime_fleet, args=['--check'], mig_layout_name='nighttime', mig_layout_serial=2,
                    mig_layout_max_fail_percentage='25%')
    # Nothing changed anywhere: GPUs, declared layouts, boot units.
    assert host_files(daytime_fleet) == before
    # Every host was evaluated by its first decision, one module call each; only the refusing host's decision failed,
    # so only there the role decides again (in check mode) and says why. The others are changed, as a dry run says.
    assert sorted(run.task_results(FIRST_DECISION_TASK)) == sorted(HOSTS), run.describe()
    assert list(run.task_results(DECISION_TASK)) == ['sim-a100-01'], run.describe()
    assert run.failed == ['sim-a100-01'], run.describe()
    assert run.changed == sorted(set(HOSTS) - {'sim-a100-01'}), run.describe()
    assert without_ids(run.messages['sim-a100-01'][-1]).startswith('MIG layout nighttime was not applied on sim-a100-01: ' + BUSY_REASON)

    plans = run.task_results(PLAN_TASK)
    assert len(plans) == 1
    lines = [without_ids(line) for line in list(plans.values())[0]['msg']]
    for line in ('sim-a30-01 GPU 0: 4x1g.6gb -> 2x2g.12gb (4 instance(s) destroyed)',
                 'sim-a30-01 GPU 1: 4x1g.6gb -> 2x2g.12gb (4 instance(s) destroyed)',
                 'sim-h100-01 GPU 0: 7x1g.10gb -> 2x3g.40gb (7 instance(s) destroyed)',
                 'sim-h200-01 GPU 0: 7x1g.18gb -> 2x3g.71gb (7 instance(s) destroyed)',
                 'sim-b200-01 GPU 1: 7x1g.23gb -> 2x3g.90gb (7 instance(s) destroyed)',
                 'sim-rtxpro-01 GPU 0: 4x1g.24gb -> 2x2g.48gb (4 instance(s) destroyed)',
                 'sim-a100-01: refused: ' + BUSY_REASON):
        assert line in lines, lines
    assert lines[-1] == ('plan of layout nighttime: 6 of 6 host(s) evaluated, 5 to change, 0 in layout, 1 refused, '
                         '0 failed, 0 not reached; 8 GPU(s) to change, 47 instance(s) destroyed, 16 created, 0 pod(s) to evict')

    published = stats_data(run)['mig_layout_rollout']
    assert published['layout'] == 'nighttime' and published['check_mode'] is True
    assert dict((k, without_ids(v)) for k, v in published['refused'].items()) == {'sim-a100-01': BUSY_REASON}
    assert published['not_reached'] == []
    assert published['totals'] == {
        'hosts': 6, 'hosts_evaluated': 6, 'hosts_to_change': 5, 'hosts_in_layout': 0, 'hosts_refused': 1,
        'hosts_failed': 0, 'hosts_not_reached': 0, 'hosts_persistence_failed': 0, 'gpus_to_change': 8, 'instances_destroyed': 47, 'instances_created': 16,
        'pods_to_evict': 0}

    # A dry run is one batch of every host, whatever mig_layout_serial, told once; 25% of 6 hosts lets one fail.
    assert progress_lines(run) == [
        'batch 1 of 1: 6 of 6 host(s) done, 1 failed (sim-a100-01); failure budget left: 0 more host(s) may fail '
        '(mig_layout_max_fail_percentage=25)',
    ]


def test_a_no_op_rollout_is_the_first_decision_alone(daytime_fleet):
    """The fleet already in daytime: each host's first decision, made in the pre-flight on every host at once (one
    batch of 6, though mig_layout_serial is 2), finds it in its layout, so the rollout play takes no host and the role
    is not entered (its decision, its argument check); the plan and the totals are those of a no-op. Where that decision
    does not settle the host (nighttime in check mode, above), the role decides again."""
    before = host_files(daytime_fleet)
    run = fleet_run(daytime_fleet, mig_layout_name='daytime', mig_layout_serial=2)
    assert run.rc == 0 and run.changed == [] and run.failed == [], run.describe()
    first = run.task_results(FIRST_DECISION_TASK)
    assert sorted(first) == sorted(HOSTS) and all(result['in_layout'] for result in first.values()), run.describe()
    assert run.task_results(DECISION_TASK) == {}
    # Past the first play's catalog check, the one task of the role any host ran is the first decision.
    role_tasks = dict((data.get('task'), data.get('play')) for data in (e.get('event_data') or {} for e in run.events)
                      if data.get('role') and data.get('host') and not data.get('play', '').startswith('Pre-flight - check'))
    assert role_tasks == {FIRST_DECISION_TASK: FIRST_DECISION_PLAY}, role_tasks
    assert run.task_results(PREFLIGHT_READ) == {}, 'no host to read: every decision told its GPUs'
    # Every first decision in one batch: the task starts once (three times at serial 2 if it were in the batches).
    assert len([e for e in run.events if e.get('event') == 'playbook_on_task_start'
                and e['event_data'].get('task') == FIRST_DECISION_TASK]) == 1
    assert [without_ids(line) for line in list(run.task_results(PLAN_TASK).values())[0]['msg']][-1] == (
        'layout daytime: 6 of 6 host(s) evaluated, 0 to change, 6 in layout, 0 refused, 0 failed, 0 not reached; '
        '0 GPU(s) to change, 0 instance(s) destroyed, 0 created, 0 pod(s) to evict')
    assert stats_data(run)['mig_layout_rollout']['totals']['hosts_in_layout'] == 6
    # No host left to change: the rollout play takes none, so it has no batch and no progress line.
    assert progress_lines(run) == [] and run.task_results('Mark the hosts of the batch as reached by the rollout') == {}
    # The decision rewrites a file only where its content differs: the metrics (and the stranded-capacity counter
    # behind them) move, the GPUs, the declared layouts and the boot files do not.
    after = host_files(daytime_fleet)
    changed = [path for path in after if after[path] != before.get(path)]
    assert changed and all(path.endswith(('.prom', 'stranded_slice_seconds.json')) for path in changed), changed


def test_the_failure_budget_counts_the_failed_hosts_of_every_batch_so_far(ansible_env, daytime_fleet):
    """Serial 1, a budget of 20% of 6 hosts (one may fail): sim-a100-01 (batch 1) and sim-a30-01 (batch 2) refuse to
    switch (a process holds an instance the switch destroys), so the rollout stops before batch 3 and the other hosts
    are not reached. The failures so far are added up on the controller batch by batch, not read from every host."""
    make_busy(daytime_fleet, 'sim-a30-01', 0, 1, [4343])
    try:
        run = fleet_run(daytime_fleet, mig_layout_name='nighttime', mig_layout_serial=1, mig_layout_max_fail_percentage=20)
    finally:
        make_busy(daytime_fleet, 'sim-a30-01', 0, 1, [])
    # The pre-flight decides first on every host (changing none); the role decides again on the hosts it reached only.
    assert sorted(run.task_results(FIRST_DECISION_TASK)) == sorted(HOSTS), run.describe()
    assert sorted(run.task_results(DECISION_TASK)) == ['sim-a100-01', 'sim-a30-01'], run.describe()
    assert run.changed == [] and sorted(run.failed) == sorted(HOSTS), run.describe()
    assert [line.split(';')[0] for line in progress_lines(run)] == [
        'batch 1 of 6: 1 of 6 host(s) done, 1 failed (sim-a100-01)',
        'batch 2 of 6: 2 of 6 host(s) done, 2 failed (sim-a100-01, sim-a30-01)']
    assert sorted(stats_data(run)['mig_layout_rollout']['not_reached']) == ['sim-b200-01', 'sim-h100-01', 'sim-h200-01', 'sim-rtxpro-01']


LEASE_PLAY = 'Take or release the fleet lease'
LEASE_END_TASK = 'End the play where no fleet lease is wanted (no Kubernetes cluster configured)'
LEASE_TASK = 'Take the fleet lease (a run that finds it held waits, then stops naming the holder)'
TASK_ENDS = ('runner_on_ok', 'runner_on_failed', 'runner_on_skipped', 'runner_on_unreachable')


@pytest.mark.parametrize('extravars, wanted', [
    ({}, False),
    ({'gpufleet_k8s_host': 'https://127.0.0.1:9'}, True),
    ({'gpufleet_k8s_host': 'https://127.0.0.1:9', 'gpufleet_fleet_lease': False}, False),
    ({'gpufleet_fleet_lease': 'true'}, True),
])
def test_the_fleet_lease_play_runs_a_task_only_where_the_lease_is_wanted(ansible_env, extravars, wanted):
    """Without a cluster (or with gpufleet_fleet_lease false) the lease play ends at its first task, which the controller
    runs itself: no task forks a worker there, so a no-op rollout pays nothing for the lease. Where the lease is wanted,
    the run names itself and tries to take it (here no API server answers, or no kubeconfig is found: the try fails)."""
    run = run_playbook('playbooks/mig_fleet_lease.yml', inventory=INVENTORY, extravars=dict(extravars, gpufleet_fleet_lease_wait=0))
    ran = [data['task'] for data in (e['event_data'] for e in run.events if e.get('event') in TASK_ENDS)
           if data.get('play') == LEASE_PLAY and data.get('task') != LEASE_END_TASK]
    if wanted:
        assert ran == ['Name this run once for all its plays (the AWX job, or a new id)', LEASE_TASK], run.describe()
        assert run.failed == ['localhost'], run.describe()
        assert run.task_results(LEASE_TASK)['localhost']['msg'].startswith(
            ('cannot connect to the Kubernetes API', 'cannot reach the API server')), run.describe()
    else:
        assert ran == [] and run.rc == 0, run.describe()


def progress_lines(run):
    return [res['msg'] for res in (e['event_data']['res'] for e in run.events if e.get('event') == 'runner_on_ok'
                                   and e['event_data'].get('task') in (PROGRESS_TASK, DRY_RUN_PROGRESS_TASK))]


def test_check_mode_goes_on_past_a_spent_budget(ansible_env, daytime_fleet):
    """Budget 0 at serial 1: a real run stops after the refusing first host; the dry run evaluates the rest."""
    before = host_files(daytime_fleet)
    run = fleet_run(daytime_fleet, args=['--check'], mig_layout_name='nighttime', mig_layout_serial=1)
    assert host_files(daytime_fleet) == before
    assert sorted(run.task_results(FIRST_DECISION_TASK)) == sorted(HOSTS), run.describe()
    assert list(run.task_results(DECISION_TASK)) == ['sim-a100-01'], run.describe()
    assert stats_data(run)['mig_layout_rollout']['totals']['hosts_evaluated'] == 6
    assert run.failed == ['sim-a100-01'], run.describe()
    # One batch, and where the real run would have stopped.
    [line] = progress_lines(run)
    # sim-a100-01 is the first host of the inventory: the real run's batch 1 of its 6.
    assert line == ('batch 1 of 1: 6 of 6 host(s) done, 1 failed (sim-a100-01); failure budget spent (check mode: '
                    'a real run with mig_layout_serial=1 would stop after batch 1 of 6)'), line


@pytest.mark.parametrize('extravars, message', [
    ({'mig_layout_serial': 0}, "mig_layout_serial must be a whole number of hosts per batch (1 or more), a percentage "
                               "of the play's hosts from 1% to 100% such as 25%, or a list of them; got 0"),
    ({'mig_layout_serial': -2}, 'mig_layout_serial must be a whole number of hosts per batch'),
    ({'mig_layout_serial': 'two'}, "got 'two'"),
    ({'mig_layout_max_fail_percentage': 'abc'},
     "mig_layout_max_fail_percentage must be a percentage of the play's hosts from 0 to 100 (25 and 25% are the same), "
     "got 'abc'"),
    ({'mig_layout_name': 'nightime'},
     "layout 'nightime' is not defined; did you mean nighttime? (defined: all-balanced, all-disabled, all-enabled, "
     "daytime, nighttime) [every host of the play]"),
    ({'mig_layout_name': 'n', 'mig_layout_configs': {'n': [{'devices': 'all', 'mig-enabled': True,
                                                           'mig-devices': {'3g': 3}}]}},
     'layout n entry 0: mig-devices 3g x3 need 9 compute slices, more than any MIG GPU has (7): no GPU of any model '
     'fits it [every host of the play]'),
    ({'mig_layout_name': 'n', 'mig_layout_configs': {'n': [{'devices': 'all', 'mig-enabled': True,
                                                           'mig-devices': {'3g.40bg': 2}}]}},
     "layout n entry 0: mig-devices key 3g.40bg is not a MIG profile: invalid format for '3g.40bg'"),
    ({'mig_layout_config_file': 'BAD_YAML'},
     "BAD_YAML line 6, column 6: not valid YAML: expected <block end>, but found '<block mapping start>' "
     "[every host of the play]"),
    ({'mig_layout_config_file': 'site/no-such-catalog.yml'},
     'the MIG layout catalog site/no-such-catalog.yml cannot be read on the controller (no such file, or not '
     'readable); mig_layout_config_file is a path on the controller, absolute or relative to the playbook '
     '[every host of the play]'),
    # An old variable name and its new name set to different values (issue 39's renames): one line for the fleet.
    ({'mig_layout_pod_resources_socket': '/x.sock', 'mig_layout_k8s_pod_resources_socket': '/y.sock'},
     "mig_layout role: mig_layout_pod_resources_socket (deprecated) is '/x.sock' and mig_layout_k8s_pod_resources_socket "
     "is '/y.sock'; set only mig_layout_k8s_pod_resources_socket [every host of the play]"),
])
def test_preflight_refuses_bad_input_with_one_line_before_any_host_is_touched(ansible_env, tmp_path, extravars, message):
    bad_yaml = tmp_path / 'site-layouts.yaml'
    # Line 6 is indented one column short.
    bad_yaml.write_text('version: v1\nmig-configs:\n  n:\n    - devices: all\n      mig-enabled: true\n'
                        '     mig-devices: {3g: 2}\n')
    extravars = dict((k, str(bad_yaml) if v == 'BAD_YAML' else v) for k, v in extravars.items())
    message = message.replace('BAD_YAML', str(bad_yaml))
    run = fleet_run(str(tmp_path / 'never-created'), **extravars)
    assert run.rc != 0
    failures = [r for r in run.results if r['status'] == 'failed']
    assert len(failures) == 1, run.describe()
    text = failures[0]['msg']
    assert text.startswith('Nothing was changed: ') and message in text and '\n' not in text, text
    # Nothing ran on a host: every result is a controller-side task of the pre-flight play.
    assert set(r['play'] for r in run.results) == {'Pre-flight - check the settings and the layout catalog before any host is touched'}
    assert not [r for r in run.results if (r['action'] or '').startswith('gpufleet.mig.nvidia_mig')]
    assert not os.path.exists(str(tmp_path / 'never-created'))


def ansible_playbook(state_dir, cache_dir, *args):
    """ansible-playbook itself, with a jsonfile fact cache kept between runs (ansible-runner would put its cache in
    each job's own artifacts folder; AWX copies its fact storage there)."""
    env = ansible_environment(ANSIBLE_CACHE_PLUGIN='jsonfile', ANSIBLE_CACHE_PLUGIN_CONNECTION=cache_dir)
    argv = [os.path.join(BIN, 'ansible-playbook'), '-i', INVENTORY, 'playbooks/mig_layout.yml',
            '-e', json.dumps({'gpufleet_sim_state_dir': state_dir})] + list(args)
    return subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=600, check=False)


def cached_facts(path):
    """A host's facts in the jsonfile cache (ansible-core 2.19 keeps them as a JSON document in "__payload__")."""
    with open(path) as handle:
        stored = json.load(handle)
    return json.loads(stored['__payload__']) if isinstance(stored.get('__payload__'), str) else stored


def test_preflight_refuses_a_layout_that_matches_no_gpu_of_any_host(daytime_fleet, tmp_path):
    """Without a fact cache the pre-flight's first decisions tell each host's GPUs (a decision refuses a layout that
    matches none of its host's GPUs, naming them) and the fleet check refuses a layout that would be declared everywhere
    and apply nowhere; the GPUs of Kubernetes nodes (no first decision there) are read with nvidia_mig_facts' summary.
    With a fact cache, the GPUs each host's last decision told are a cached fact and nothing runs on a host at all."""
    cache = str(tmp_path / 'facts')
    nowhere = json.dumps({'mig_layout_name': 'n', 'mig_layout_configs': {'n': [
        {'devices': 'all', 'device-filter': '0x12345678', 'mig-enabled': True, 'mig-devices': {'1g': 1}}]}})
    a30_only = json.dumps({'mig_layout_name': 'n', 'mig_layout_configs': {'n': [
        {'devices': 'all', 'device-filter': '0x20B710DE', 'mig-enabled': True, 'mig-devices': {'2g': 2}}]}})
    before = host_files(daytime_fleet)
    message = 'Nothing was changed: layout n (device-filters: entry 0 0x12345678) matches no GPU of any host of the play'
    # No cache: the first decisions tell the GPUs, then the refusal; no host reaches the rollout, even in a dry run.
    uncached = ansible_playbook(daytime_fleet, str(tmp_path / 'no-cache'), '--check', '-e', nowhere)
    assert uncached.returncode == 2 and message in uncached.stdout, uncached.stdout[-3000:]
    assert FIRST_DECISION_TASK in uncached.stdout and PREFLIGHT_READ not in uncached.stdout, uncached.stdout[-3000:]
    assert 'PLAY [Roll out the MIG layout]' not in uncached.stdout
    assert 'NVIDIA H200 0x233510DE' in uncached.stdout, uncached.stdout[-3000:]
    # Told once: the first decisions' refusals are quiet (no error block per host), the fleet's refusal is one line.
    assert '...ignoring' not in uncached.stdout and uncached.stdout.count('fatal: [') == 1, uncached.stdout[-3000:]
    # Every host a Kubernetes node: no first decision, the summary read tells the GPUs, the same refusal.
    nodes = ansible_playbook(daytime_fleet, str(tmp_path / 'no-cache-nodes'), '--check', '-e', nowhere,
                             '-e', json.dumps({'mig_layout_k8s_node': '{{ inventory_hostname }}'}))
    assert nodes.returncode == 2 and message in nodes.stdout, nodes.stdout[-3000:]
    assert PREFLIGHT_READ in nodes.stdout and 'NVIDIA H200 0x233510DE' in nodes.stdout, nodes.stdout[-3000:]
    assert 'PLAY [Roll out the MIG layout]' not in nodes.stdout
    # A layout that matches one host's GPUs (the A30s) goes on; each other host is refused by its own decision, in
    # one line naming its GPUs. The GPUs the decisions told, the refused hosts' included, stay in the cache.
    matching = ansible_playbook(daytime_fleet, cache, '--check', '-e', a30_only, '-e', 'mig_layout_serial=100%')
    assert 'PLAY [Roll out the MIG layout]' in matching.stdout and matching.returncode == 2, matching.stdout[-3000:]
    assert 'plan of layout n: 6 of 6 host(s) evaluated, 1 to change, 0 in layout, 5 refused' in matching.stdout, matching.stdout[-3000:]
    assert ('sim-h200-01: refused: layout n matches none of the MIG-capable GPUs of this host (NVIDIA H200 0x233510DE'
            in ' '.join(matching.stdout.split())), matching.stdout[-3000:]
    # One file per host (ansible-core 2.19 prefixes the names with the cache's schema, s1_).
    files = dict((name.split('_', 1)[-1], name) for name in os.listdir(cache))
    assert sorted(files) == sorted(HOSTS)
    # The cache keeps the GPUs the refusal named, not the host's facts: the cache hands a host's facts to each later
    # variable lookup of it.
    refused_host = cached_facts(os.path.join(cache, files['sim-h200-01']))
    assert '0x233510DE' in json.dumps(refused_host['mig_layout_host_gpus']), sorted(refused_host)
    assert 'nvidia_mig' not in refused_host and 'nvidia_mig_summary' not in refused_host, sorted(refused_host)
    # The rollout kept the GPUs its decision told on the host it matched (its next pre-flight needs no read there).
    assert '0x20B710DE' in json.dumps(cached_facts(os.path.join(cache, files['sim-a30-01']))['mig_layout_host_gpus'])
    # With the cache: refused by the first check, before any module runs on a host.
    refused = ansible_playbook(daytime_fleet, cache, '-e', nowhere)
    assert refused.returncode == 2 and message in refused.stdout, refused.stdout[-3000:]
    assert FIRST_DECISION_TASK not in refused.stdout and PREFLIGHT_READ not in refused.stdout, refused.stdout[-3000:]
    assert 'PLAY [Roll out the MIG layout]' not in refused.stdout
    assert host_files(daytime_fleet) == before


def test_a_dry_run_and_the_report_with_systemd_unset_never_need_systemctl(ansible_env, daytime_fleet, tmp_path):
    """mig_layout_systemd unset (null, the role's default): each host's module detects systemd itself; a dry run and
    the report plan without calling systemctl whatever the machine (a container has systemctl and no systemd)."""
    before = host_files(daytime_fleet)
    with open('/proc/1/comm') as handle:
        booted = os.path.exists('/run/systemd/system/') or handle.read().strip() == 'systemd'
    run = fleet_run(daytime_fleet, args=['--check', '-e', '{"mig_layout_systemd": null}'], mig_layout_name='nighttime',
                    mig_layout_serial='100%', mig_layout_max_fail_percentage=100)
    assert host_files(daytime_fleet) == before
    assert sorted(run.task_results(FIRST_DECISION_TASK)) == sorted(HOSTS), run.describe()
    assert run.failed == ['sim-a100-01'] and 'systemctl' not in run.describe(), run.describe()
    decided = [e['event_data']['res'] for e in run.events
               if e.get('event') == 'runner_on_ok' and e['event_data'].get('task') == FIRST_DECISION_TASK
               and 'in_layout' in e['event_data']['res']]
    assert len(decided) == 5 and set(res['systemd'] for res in decided) == {booted and bool(shutil.which('systemctl'))}
    report = fleet_run(daytime_fleet, 'playbooks/mig_report.yml', mig_report_layout='nighttime',
                       mig_report_map_path=str(tmp_path / 'map.html'))
    assert 'systemctl' not in report.describe() and os.path.exists(str(tmp_path / 'map.html')), report.describe()
    assert host_files(daytime_fleet) == before


FAILING_SYSTEMCTL = '''#!/bin/sh
echo "$*" >> "%s"
case "$1" in is-active|is-enabled) exit 3;; esac
echo "System has not been booted with systemd as init system (PID 1). Can't operate." >&2
exit 1
'''


def test_gpus_applied_with_systemctl_failing_is_changed_with_a_warning_never_failed(ansible_env, tmp_path_factory, tmp_path):
    """Issue 39: mig_layout_systemd: true on hosts whose systemctl exists but which systemd did not boot. The switch
    changes the GPUs, then systemctl daemon-reload fails: every host is changed with a warning (the plan says so, the
    run succeeds), last_apply.json says success and boot_persistence.json the failure. The dry run and the decisions
    after it call no systemctl and tell the boot persistence left to install."""
    folder = tmp_path / 'bin'
    folder.mkdir()
    log = tmp_path / 'systemctl.log'
    (folder / 'systemctl').write_text(FAILING_SYSTEMCTL % log)
    (folder / 'systemctl').chmod(0o755)
    envvars = {'PATH': '%s:%s' % (folder, os.environ['PATH'])}
    state_dir = str(tmp_path_factory.mktemp('fleet') / 'state')
    assert fleet_run(state_dir, 'simulator/seed.yml').rc == 0
    systemd = ['-e', '{"mig_layout_systemd": true}']

    dry = fleet_run(state_dir, args=['--check'] + systemd, envvars=envvars, mig_layout_name='daytime',
                    mig_layout_serial='100%')
    assert dry.rc == 0 and not log.exists(), dry.describe()

    run = fleet_run(state_dir, args=systemd, envvars=envvars, mig_layout_name='daytime', mig_layout_serial='100%')
    assert run.rc == 0 and run.failed == [] and run.changed == sorted(HOSTS), run.describe()
    lines = list(run.task_results(PLAN_TASK).values())[0]['msg']
    for host in HOSTS:
        assert ('%s: applied, boot persistence failed: systemctl daemon-reload failed (rc=1): System has not been booted '
                'with systemd as init system (PID 1). Can\'t operate.' % host) in lines, lines
        config = os.path.join(state_dir, host, 'etc', 'gpufleet-mig')
        with open(os.path.join(config, 'last_apply.json')) as handle:
            assert json.load(handle)['result'] == 'success'
        with open(os.path.join(config, 'boot_persistence.json')) as handle:
            assert json.load(handle)['result'] == 'failed'
    assert lines[-1].startswith('layout daytime: 6 of 6 host(s) evaluated, 6 to change, 0 in layout, 0 refused, 0 failed, '
                                '0 not reached;') and lines[-1].endswith('; 6 applied with a warning (boot persistence failed)')
    published = stats_data(run)['mig_layout_rollout']
    assert published['totals']['hosts_persistence_failed'] == 6 and sorted(published['warnings']) == sorted(HOSTS)

    calls = log.read_text().splitlines()
    again = fleet_run(state_dir, args=['--check'] + systemd, envvars=envvars, mig_layout_name='daytime',
                      mig_layout_serial='100%')
    assert again.rc == 0 and log.read_text().splitlines() == calls, again.describe()
    lines = list(again.task_results(PLAN_TASK).values())[0]['msg']
    assert ('sim-h100-01: boot persistence to install (through systemctl, no GPU changes): gpufleet-mig-layout.service, '
            'gpufleet-mig-metrics.timer') in lines, lines


def test_the_report_plans_what_the_rollout_refuses(ansible_env, daytime_fleet, tmp_path):
    """Issue 39: the report's planned view decides with the rollout's options (lookup mig_layout_module_options): with
    mig_layout_unmatched=fail and a layout for GPU 0 only, the hosts with another GPU are refused by both, and the hosts
    the dry run plans are planned by the report."""
    before = host_files(daytime_fleet)
    layout = json.dumps({'mig_layout_unmatched': 'fail', 'mig_layout_configs': {'gpu0': [
        {'devices': [0], 'mig-enabled': True, 'mig-devices': {'1g': 'max'}}]}})
    dry = fleet_run(daytime_fleet, args=['--check', '-e', layout], mig_layout_name='gpu0', mig_layout_serial='100%',
                    mig_layout_max_fail_percentage=100)
    report = fleet_run(daytime_fleet, 'playbooks/mig_report.yml', args=['-e', layout], mig_report_layout='gpu0',
                       mig_report_map_path=str(tmp_path / 'map.html'))
    assert host_files(daytime_fleet) == before
    # The hosts with a second GPU (sim-a100-01 too: it is also busy) are refused; the one-GPU hosts are planned.
    refused = ['sim-a100-01', 'sim-a30-01', 'sim-b200-01', 'sim-h100-01']
    assert sorted(dry.failed) == refused and sorted(dry.changed) == ['sim-h200-01', 'sim-rtxpro-01'], dry.describe()
    assert sorted(report.failed) == refused, report.describe()
    for host in refused:
        assert 'GPU 1' in report.messages[host][-1] and 'is matched by no entry' in report.messages[host][-1], report.messages[host]


def test_the_dry_run_plans_host_by_host_what_the_real_run_then_does(ansible_env, daytime_fleet, tmp_path):
    """Issue 39: the dry run's plan is the rollout's first decision; the real run decides again right before each change.
    On the same fleet (a copy, so the module's fleet stays in daytime) both plans say the same per host and GPU: the same
    lines, the same refusal and the same totals, the real run having done what the dry run said."""
    fleet = str(tmp_path / 'state')
    shutil.copytree(daytime_fleet, fleet)
    settings = dict(mig_layout_name='nighttime', mig_layout_serial='100%', mig_layout_max_fail_percentage=100)
    dry = fleet_run(fleet, args=['--check'], **settings)
    real = fleet_run(fleet, **settings)
    plans = [[without_ids(line) for line in list(run.task_results(PLAN_TASK).values())[0]['msg']] for run in (dry, real)]
    assert plans[0][-1].startswith('plan of layout nighttime: ') and plans[1][-1].startswith('layout nighttime: ')
    assert plans[0][:-1] == plans[1][:-1] and plans[0][-1][len('plan of '):] == plans[1][-1], plans
    published = [stats_data(run)['mig_layout_rollout'] for run in (dry, real)]
    assert published[0]['totals'] == published[1]['totals'] and published[0]['totals']['hosts_to_change'] == 5
    assert published[0]['refused'].keys() == published[1]['refused'].keys() == {'sim-a100-01'}
    assert dry.changed == real.changed == sorted(set(HOSTS) - {'sim-a100-01'}), (dry.describe(), real.describe())
