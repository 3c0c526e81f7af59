# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rollout benchmark: what a fleet run of playbooks/mig_layout.yml costs, beside `ansible -m ping`.

For simulated fleets of 4 and 32 hosts (local connection, forks 10 from the repository's ansible.cfg, the no-op
at serial 100% unless --serial says otherwise), measured side by side in one run on this machine: the wall time of
`ansible -m ping` and of a no-op playbooks/mig_layout.yml (the fleet already in its layout), their
ratio, and the module executions per host of the no-op, of the dry run (--check) of a daytime -> nighttime switch and of
that switch without Kubernetes. The dry run is timed again, once, on a fleet of 1000 freshly seeded hosts
(--preview-hosts) beside its ping: what previewing a large fleet costs. The no-op runs twice: without a fact cache (the
pre-flight's first decisions tell each host's GPUs, so that a layout matching no GPU of the fleet is refused before the
batches) and with one (a jsonfile cache, as AWX's fact storage that playbooks/awx_configure.yml turns on: the GPUs the
last run's decisions reported are known before any module runs). Module executions are counted where they happen:
every host's Python interpreter is a wrapper that logs each start.

Then where the time of a cached no-op goes (one more run, with the task timer of ansible.posix.profile_tasks):
the decision task (the one module execution per host), the other tasks (controller-side, most once per host)
and the rest (start-up, plays, lease), and the decision task's time beside the ping's: the floor of a
no-op that keeps one module execution per host is the decision task plus the start-up.

With ``--baseline REV`` the no-op of git revision REV (its playbooks and role, as a collection of its own) runs on
the same fleet in the same invocation, after the same pings, side by side; each tree has a fact cache of its own,
filled by its own first rollout (what a revision's pre-flight read keeps in the cache is part of what it costs), and
folders of its own for the host code and the boot units that name it (a decision keeps the host code its module
carries).

Run: make benchmark   (or: .venv/bin/python benchmarks/rollout.py --hosts 4 32 [--baseline REV] [--serial 1])
"""

from __future__ import absolute_import, division, print_function

import argparse
import collections
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPOSITORY)

from tests.support.playbook import BIN, ansible_environment  # noqa: E402  (the environment the tests run Ansible in)
from tests.support.simulator import simulated_environment  # noqa: E402
MODELS = ['A100-SXM4-80GB', 'H100-SXM5-80GB', 'A30', 'H200']

_WRAPPER = """#!/bin/sh
# The interpreter of host %(host)s: logs one line per module execution, then runs Python as Ansible asked.
echo "%(host)s" >> "%(log)s"
exec "%(python)s" "$@"
"""


def write_fleet(directory, hosts):
    """An inventory of ``hosts`` simulated hosts (two GPUs each, models in turn) under ``directory``."""
    inventory = os.path.join(directory, 'inventory')
    os.makedirs(os.path.join(inventory, 'group_vars'))
    members = {}
    for number in range(hosts):
        model = MODELS[number % len(MODELS)]
        name = 'bench-%03d' % number
        wrapper = os.path.join(directory, 'python-' + name)
        with open(wrapper, 'w') as handle:
            handle.write(_WRAPPER % {'host': name, 'log': os.path.join(directory, 'executions.log'), 'python': sys.executable})
        os.chmod(wrapper, 0o755)
        members[name] = {'gpufleet_sim_gpus': [{'model': model}, {'model': model}]}
    with open(os.path.join(inventory, 'hosts.yml'), 'w') as handle:
        json.dump({'all': {'children': {'gpu_hosts': {'hosts': members}, 'gpufleet_simulated': {'children': {'gpu_hosts': {}}}}}}, handle)
    state = os.path.join(directory, 'state')
    group_vars = {
        'ansible_connection': 'local',
        'ansible_python_interpreter': '%s/python-{{ inventory_hostname }}' % directory,
        'gpufleet_sim_host_dir': '%s/{{ inventory_hostname }}' % state,
        'gpufleet_sim_state_file': '{{ gpufleet_sim_host_dir }}/gpus.json',
        'mig_layout_install_dependencies': False,
        'mig_layout_systemd': False,
        'mig_layout_python': sys.executable,
        'mig_layout_boot_environment': simulated_environment('{{ gpufleet_sim_state_file }}'),
        'mig_layout_systemd_dir': '{{ gpufleet_sim_host_dir }}/etc/systemd/system',
        'mig_layout_config_dir': '{{ gpufleet_sim_host_dir }}/etc/gpufleet-mig',
        'mig_layout_lib_dir': '{{ gpufleet_sim_host_dir }}/usr/local/lib/gpufleet-mig',
        'mig_layout_bin_dir': '{{ gpufleet_sim_host_dir }}/usr/local/sbin',
        'mig_layout_metrics_dir': '{{ gpufleet_sim_host_dir }}/metrics',
    }
    with open(os.path.join(inventory, 'group_vars', 'all.yml'), 'w') as handle:
        json.dump(group_vars, handle)
    return inventory


def timed(argv, env, cwd=REPOSITORY):
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit('%s failed (rc=%d):\n%s' % (' '.join(argv), done.returncode, done.stdout[-4000:]))
    return elapsed, done.stdout


def executions(directory):
    """Module executions per host since the last call (the log is emptied)."""
    log = os.path.join(directory, 'executions.log')
    if not os.path.exists(log):
        return collections.Counter()
    with open(log) as handle:
        counted = collections.Counter(line.strip() for line in handle if line.strip())
    os.remove(log)
    return counted


# The one module execution of a no-op: the rollout's first decision (roles/mig_layout/tasks/rollout_decide.yml), or, in a
# revision from before it (--baseline), the role's own.
DECISION_TASKS = ('gpufleet.mig.mig_layout : Decide whether the host differs from the layout (a host that is not a Kubernetes node)',
                  'gpufleet.mig.mig_layout : Plan the layout on the host without changing a GPU')
_TIMED_TASK = re.compile(r'^(.*?) -+ (\d+\.\d+)s$', re.M)


def where_the_time_goes(argv, env, cwd=REPOSITORY):
    """(wall s, decision task s, other tasks s, number of other tasks) of one run timed task by task, or None where the
    task timer (ansible.posix, in the tests' requirements) is missing."""
    env = dict(env, ANSIBLE_CALLBACKS_ENABLED='ansible.posix.profile_tasks', PROFILE_TASKS_TASK_OUTPUT_LIMIT='all',
               PROFILE_TASKS_SORT_ORDER='none')
    seconds, output = timed(argv, env, cwd)
    tasks = [(name, float(value)) for name, value in _TIMED_TASK.findall(output)]
    decision = [value for name, value in tasks if name in DECISION_TASKS]
    if len(decision) != 1:
        return None
    others = [value for name, value in tasks if name not in DECISION_TASKS]
    return seconds, decision[0], sum(others), len(others)


def per_host(counted, hosts):
    values = [counted.get('bench-%03d' % n, 0) for n in range(hosts)]
    return min(values), max(values)


def checkout_of(revision, directory):
    """The files of git revision ``revision`` under ``directory``/src, linked as the collection gpufleet.mig, and the
    settings that make ansible-playbook use it (ansible_settings of tests/support/playbook.py, for that tree)."""
    source = os.path.join(directory, 'src')
    os.makedirs(source)
    archive = subprocess.Popen(['git', 'archive', revision], cwd=REPOSITORY, stdout=subprocess.PIPE)
    subprocess.check_call(['tar', '-x', '-C', source], stdin=archive.stdout)
    if archive.wait() != 0:
        raise SystemExit('git archive %s failed' % revision)
    namespace = os.path.join(directory, 'collections', 'ansible_collections', 'gpufleet')
    os.makedirs(namespace)
    os.symlink(source, os.path.join(namespace, 'mig'))
    return source, {'ANSIBLE_COLLECTIONS_PATH': os.path.join(directory, 'collections'),
                    'ANSIBLE_ROLES_PATH': os.path.join(source, 'roles'), 'ANSIBLE_CONFIG': os.path.join(source, 'ansible.cfg')}


def bench_fleet(hosts, repeats, baseline=None, serial='100%'):
    """{label: figures} of this checkout and, with ``baseline`` (a git revision), of that revision, run in turn on the
    same simulated fleet, each repeat after one ping of it; the no-op runs at mig_layout_serial ``serial``."""
    directory = tempfile.mkdtemp(prefix='gpufleet-rollout-')
    try:
        inventory = write_fleet(directory, hosts)
        trees = [('this checkout', REPOSITORY, {}, [])]
        if baseline:
            # The baseline keeps its host code (the module's payload, which a decision keeps current) and the boot
            # units that name it in folders of its own: in shared ones each tree's decision would rewrite the other's,
            # and no no-op would be one.
            own = json.dumps(dict((variable, '{{ gpufleet_sim_host_dir }}/baseline/' + variable) for variable in
                                  ('mig_layout_lib_dir', 'mig_layout_bin_dir', 'mig_layout_systemd_dir')))
            trees.append((baseline[:10],) + checkout_of(baseline, os.path.join(directory, 'baseline')) + (['-e', own],))
        env = ansible_environment()
        playbook = [os.path.join(BIN, 'ansible-playbook'), '-i', inventory]
        rollout = playbook + [os.path.join('playbooks', 'mig_layout.yml'), '-e', 'mig_layout_serial=100%']
        noop_rollout = playbook + [os.path.join('playbooks', 'mig_layout.yml'), '-e', 'mig_layout_serial=%s' % serial]
        timed(playbook + [os.path.join('simulator', 'seed.yml')], env)
        # A fact cache per tree, filled by that tree's own first rollout (what its pre-flight read and its decisions keep),
        # as an operator's cache is by the version they run: the first changes the seeded hosts, the next finds them done.
        caches = {}
        for label, tree, settings, own in trees:
            caches[label] = {'ANSIBLE_CACHE_PLUGIN': 'jsonfile',
                             'ANSIBLE_CACHE_PLUGIN_CONNECTION': os.path.join(directory, 'facts-%d' % len(caches))}
            timed(rollout + own + ['-e', 'mig_layout_name=daytime'], ansible_environment(**dict(settings, **caches[label])), tree)
        executions(directory)
        ping = []
        noop = dict((label, {'uncached': [], 'cached': []}) for label, dummy, dummy, dummy in trees)
        noop_executions = dict((label, {}) for label, dummy, dummy, dummy in trees)
        dry = dict((label, []) for label, dummy, dummy, dummy in trees)
        dry_executions = {}
        for dummy in range(repeats):
            ping.append(timed([os.path.join(BIN, 'ansible'), '-i', inventory, 'gpu_hosts', '-m', 'ansible.builtin.ping'], env)[0])
            executions(directory)
            for label, tree, settings, own in trees:
                for kind, run_env in (('uncached', ansible_environment(**settings)),
                                      ('cached', ansible_environment(**dict(settings, **caches[label])))):
                    seconds, output = timed(noop_rollout + own + ['-e', 'mig_layout_name=daytime'], run_env, tree)
                    changed = re.findall(r'^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)', output, re.M)
                    if not changed or any(count != '0' for dummy_host, count in changed):
                        raise SystemExit('the no-op run changed something:\n%s' % output[-4000:])
                    noop[label][kind].append(seconds)
                    noop_executions[label][kind] = per_host(executions(directory), hosts)
                # The dry run of the switch (every host differs), as an operator previews it: no fact cache.
                dry[label].append(timed(noop_rollout + own + ['-e', 'mig_layout_name=nighttime', '--check'],
                                        ansible_environment(**settings), tree)[0])
                dry_executions[label] = per_host(executions(directory), hosts)
        figures = {}
        for label, tree, settings, own in trees:
            profile = where_the_time_goes(noop_rollout + own + ['-e', 'mig_layout_name=daytime'],
                                          ansible_environment(**dict(settings, **caches[label])), tree)
            executions(directory)
            figures[label] = {
                'hosts': hosts,
                'ping': statistics.median(ping),
                'noop': noop[label]['uncached'],
                'noop_executions': noop_executions[label]['uncached'],
                'noop_cached': noop[label]['cached'],
                'noop_cached_executions': noop_executions[label]['cached'],
                'dry_run': dry[label],
                'dry_run_executions': dry_executions[label],
                'profile': profile,
            }
        # the switch, once, from this checkout
        switch_seconds, dummy = timed(rollout + ['-e', 'mig_layout_name=nighttime'], env)
        figures['this checkout'].update(switch=switch_seconds, switch_executions=per_host(executions(directory), hosts))
        return figures
    finally:
        shutil.rmtree(directory)


def bench_preview(hosts):
    """(ping s, dry run s, (min, max) executions per host) of the dry run of a switch to nighttime on ``hosts`` freshly
    seeded hosts, each host differing from the layout: what previewing a large fleet costs, timed once beside a ping."""
    directory = tempfile.mkdtemp(prefix='gpufleet-preview-')
    try:
        inventory = write_fleet(directory, hosts)
        env = ansible_environment()
        playbook = [os.path.join(BIN, 'ansible-playbook'), '-i', inventory]
        timed(playbook + [os.path.join('simulator', 'seed.yml')], env)
        ping = timed([os.path.join(BIN, 'ansible'), '-i', inventory, 'gpu_hosts', '-m', 'ansible.builtin.ping'], env)[0]
        executions(directory)
        seconds, output = timed(playbook + [os.path.join('playbooks', 'mig_layout.yml'), '-e', 'mig_layout_name=nighttime',
                                            '--check'], env)
        plan = re.findall(r'plan of layout nighttime: (\d+) of (\d+) host\(s\) evaluated, (\d+) to change', output)
        if not plan or plan[-1][2] != str(hosts):
            raise SystemExit('the dry run did not plan a change on every host:\n%s' % output[-4000:])
        return ping, seconds, per_host(executions(directory), hosts)
    finally:
        shutil.rmtree(directory)


def spread(values):
    return '%.2f (%.2f-%.2f)' % (statistics.median(values), min(values), max(values))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--hosts', type=int, nargs='+', default=[4, 32])
    parser.add_argument('--repeats', type=int, default=3, help='runs of ping and of the no-op per fleet (median)')
    parser.add_argument('--baseline', metavar='REV', help='also run the no-op of this git revision, side by side')
    parser.add_argument('--preview-hosts', type=int, nargs='*', default=[1000],
                        help='also time the dry run of a switch on fleets this large, once beside a ping (none: skip)')
    parser.add_argument('--serial', default='100%',
                        help="the no-op's mig_layout_serial (default 100%%: one batch; the playbook's own default is 1, a batch per host)")
    args = parser.parse_args(argv)
    print('playbooks/mig_layout.yml on simulated fleets (local connection, no-op at serial %s, forks 10 from ansible.cfg), '
          'median of %d:' % (args.serial, args.repeats))
    print('%6s %-14s %9s | %-32s | %-32s | %10s %11s' % ('', '', '', 'no-op, no fact cache', 'no-op, fact cache', '', 'switch'))
    print('%6s %-14s %9s | %9s %7s %14s | %9s %7s %14s | %10s %11s' % (
        'hosts', 'tree', 'ping s', 'wall s', 'ratio', 'executions/host', 'wall s', 'ratio', 'executions/host', 'switch s',
        'executions'))
    results = []
    for hosts in args.hosts:
        for label, figures in bench_fleet(hosts, args.repeats, args.baseline, args.serial).items():
            results.append((label, figures))
            switch = ('%10.2f %11s' % (figures['switch'], '%d-%d' % figures['switch_executions'])) if 'switch' in figures else ''
            print('%6d %-14s %9.2f | %9.2f %6.2fx %14s | %9.2f %6.2fx %14s | %s' % (
                hosts, label, figures['ping'], statistics.median(figures['noop']), statistics.median(figures['noop']) / figures['ping'],
                '%d-%d' % figures['noop_executions'], statistics.median(figures['noop_cached']),
                statistics.median(figures['noop_cached']) / figures['ping'], '%d-%d' % figures['noop_cached_executions'], switch))
            sys.stdout.flush()
    print('dry run of the switch daytime -> nighttime (--check, no fact cache, every host differs), median of %d:'
          % args.repeats)
    print('%6s %-14s %9s %9s %7s %16s   %s' % (
        'hosts', 'tree', 'ping s', 'wall s', 'ratio', 'executions/host', 'ratio per run, median (min-max)'))
    for label, figures in results:
        print('%6d %-14s %9.2f %9.2f %6.2fx %16s   %s' % (
            figures['hosts'], label, figures['ping'], statistics.median(figures['dry_run']),
            statistics.median(figures['dry_run']) / figures['ping'], '%d-%d' % figures['dry_run_executions'],
            spread([value / figures['ping'] for value in figures['dry_run']])))
    for hosts in args.preview_hosts:
        ping, seconds, counted = bench_preview(hosts)
        print('%6d %-14s %9.2f %9.2f %6.2fx %16s   (a fleet freshly seeded, once: the preview of a large fleet)' % (
            hosts, 'this checkout', ping, seconds, seconds / ping, '%d-%d' % counted))
        sys.stdout.flush()
    print('no-op with the fact cache / ping, median (min-max) of the runs, each beside the median ping:')
    for label, figures in results:
        print('%6d %-14s %s' % (figures['hosts'], label, spread([value / figures['ping'] for value in figures['noop_cached']])))
    print('where the time of a no-op with the fact cache goes (one more run each):')
    for label, figures in results:
        profile = figures['profile']
        if profile is None:
            print('%6d %-14s no task timer (ansible.posix.profile_tasks) here' % (figures['hosts'], label))
            continue
        wall, decision, others, count = profile
        print('%6d %-14s wall %.2f s = decision task %.2f s + %d other tasks %.2f s + start-up and plays %.2f s; '
              'decision task / ping %.2fx, decision task and start-up / ping %.2fx' % (
                  figures['hosts'], label, wall, decision, count, others, wall - decision - others, decision / figures['ping'],
                  (wall - others) / figures['ping']))
    return 0


if __name__ == '__main__':
    sys.exit(main())
