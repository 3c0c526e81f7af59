# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Rollout benchmark: what a fleet run of playbooks/mig_layout.yml costs, beside `ansible -m ping`.

For simulated fleets of 4 and 32 hosts (local connection, serial 100%, forks 10 from the
repository's ansible.cfg), measured side by side in one run on this machine: the wall time of
`ansible -m ping` and of a no-op playbooks/mig_layout.yml (the fleet already in its layout), their
ratio, and the module executions per host of the no-op and of a daytime -> nighttime switch without
Kubernetes. The no-op runs twice: without a fact cache (the pre-flight reads each host's GPUs, so that a
layout matching no GPU of the fleet is refused before any host is touched) and with one (a jsonfile cache,
as AWX's fact storage that playbooks/awx_configure.yml turns on: the GPUs the last run's decisions
reported are known, nothing is read). Module executions are counted where they happen: every host's
Python interpreter is a wrapper that logs each start.

Run: make benchmark   (or: .venv/bin/python benchmarks/rollout.py --hosts 4 32)
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
        'mig_layout_environment': simulated_environment('{{ gpufleet_sim_state_file }}'),
        'mig_layout_systemd_dir': '{{ gpufleet_sim_host_dir }}/etc/systemd/system',
        'mig_layout_config_dir': '{{ gpufleet_sim_host_dir }}/etc/gpufleet-mig',
        'mig_layout_lib_dir': '{{ gpufleet_sim_host_dir }}/usr/local/lib/gpufleet-mig',
        'mig_layout_bin_dir': '{{ gpufleet_sim_host_dir }}/usr/local/sbin',
        'mig_layout_metrics_dir': '{{ gpufleet_sim_host_dir }}/metrics',
    }
    with open(os.path.join(inventory, 'group_vars', 'all.yml'), 'w') as handle:
        json.dump(group_vars, handle)
    return inventory


def timed(argv, env):
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=REPOSITORY, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
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


def per_host(counted, hosts):
    values = [counted.get('bench-%03d' % n, 0) for n in range(hosts)]
    return min(values), max(values)


def bench_fleet(hosts, repeats):
    directory = tempfile.mkdtemp(prefix='gpufleet-rollout-')
    try:
        inventory = write_fleet(directory, hosts)
        env = ansible_environment()
        cached_env = ansible_environment(ANSIBLE_CACHE_PLUGIN='jsonfile',
                                         ANSIBLE_CACHE_PLUGIN_CONNECTION=os.path.join(directory, 'facts'))
        playbook = [os.path.join(BIN, 'ansible-playbook'), '-i', inventory]
        rollout = playbook + [os.path.join('playbooks', 'mig_layout.yml'), '-e', 'mig_layout_serial=100%']
        timed(playbook + [os.path.join('simulator', 'seed.yml')], env)
        # With the cache: this run's decisions leave each host's GPUs in it for the no-op runs after it.
        timed(rollout + ['-e', 'mig_layout_name=daytime'], cached_env)
        executions(directory)
        ping = []
        noop = {'uncached': [], 'cached': []}
        noop_executions = {}
        for dummy in range(repeats):
            ping.append(timed([os.path.join(BIN, 'ansible'), '-i', inventory, 'gpu_hosts', '-m', 'ansible.builtin.ping'], env)[0])
            executions(directory)
            for cache, run_env in (('uncached', env), ('cached', cached_env)):
                seconds, output = timed(rollout + ['-e', 'mig_layout_name=daytime'], run_env)
                changed = re.findall(r'^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)', output, re.M)
                if not changed or any(count != '0' for dummy_host, count in changed):
                    raise SystemExit('the no-op run changed something:\n%s' % output[-4000:])
                noop[cache].append(seconds)
                noop_executions[cache] = per_host(executions(directory), hosts)
        switch_seconds, dummy = timed(rollout + ['-e', 'mig_layout_name=nighttime'], env)
        switch_executions = per_host(executions(directory), hosts)
        return {
            'hosts': hosts,
            'ping': statistics.median(ping),
            'noop': statistics.median(noop['uncached']),
            'noop_executions': noop_executions['uncached'],
            'noop_cached': statistics.median(noop['cached']),
            'noop_cached_executions': noop_executions['cached'],
            'switch': switch_seconds,
            'switch_executions': switch_executions,
        }
    finally:
        shutil.rmtree(directory)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--hosts', type=int, nargs='+', default=[4, 32])
    parser.add_argument('--repeats', type=int, default=3, help='runs of ping and of the no-op per fleet (median)')
    args = parser.parse_args(argv)
    print('playbooks/mig_layout.yml on simulated fleets (local connection, serial 100%%, forks 10 from ansible.cfg), median of %d:' % args.repeats)
    print('%6s %9s | %-32s | %-32s | %10s %11s' % ('', '', 'no-op, no fact cache', 'no-op, fact cache', '', 'switch'))
    print('%6s %9s | %9s %7s %14s | %9s %7s %14s | %10s %11s' % (
        'hosts', 'ping s', 'wall s', 'ratio', 'executions/host', 'wall s', 'ratio', 'executions/host', 'switch s',
        'executions'))
    for hosts in args.hosts:
        figures = bench_fleet(hosts, args.repeats)
        print('%6d %9.2f | %9.2f %6.2fx %14s | %9.2f %6.2fx %14s | %10.2f %11s' % (
            hosts, figures['ping'], figures['noop'], figures['noop'] / figures['ping'], '%d-%d' % figures['noop_executions'],
            figures['noop_cached'], figures['noop_cached'] / figures['ping'], '%d-%d' % figures['noop_cached_executions'],
            figures['switch'], '%d-%d' % figures['switch_executions']))
    return 0


if __name__ == '__main__':
    sys.exit(main())
