# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Report benchmark: playbooks/mig_report.yml on a large fleet, inside ansible-playbook, on this controller.

What ships runs as it ships: the playbook, its per-host tasks, the registered results, the filters and the map,
in one ansible-playbook process with the repository's ansible.cfg (forks 10). Only the hosts are canned: a
connection plugin answers each host's module execution with that host's result, computed beforehand by the code
nvidia_mig_facts runs on the host (``host_summary`` of the GPUs' facts). The fleet is ``large_fleet`` of
tests/unit/plugins/filter/fleet_samples.py (1000 hosts x 8 A100-80GB GPUs by default: daytime with a pod on every
instance, one host in ten churned, out of layout or with a MIG mode change pending).

Two reports per repeat, as an operator runs them on a large fleet (with a jsonfile fact cache, as AWX's fact storage):
``live`` reads every host (one nvidia_mig_facts call each, which also leaves each host's summary in the cache), then
``cache`` (``-e mig_report_source=cache``) draws the same map from the cache alone, contacting no host.

Printed per run: the bytes the hosts' results carry to the controller, the wall time of ansible-playbook, the peak
memory (RSS) of its largest process, the size of the map, and beside them the wall time of ``ansible gpu_hosts -m
ping`` on the same canned hosts (the floor of any run that contacts each host once) and the ratio; then the median
and the spread of the runs. With
``--baseline REV`` the playbook of git revision REV (the whole facts per host, ``nvidia_mig_facts`` without
``summary``) runs on the same canned fleet in the same invocation, side by side (live only).

Run: .venv/bin/python benchmarks/report.py [--hosts 1000] [--gpus 8] [--repeats 3] [--baseline REV]
"""

from __future__ import absolute_import, division, print_function

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPOSITORY)
sys.path.insert(0, os.path.join(REPOSITORY, 'build', 'collections'))

from tests.support.playbook import BIN, ansible_environment  # noqa: E402  (the environment the tests run Ansible in)
from tests.support.simulator import simulator_on_path  # noqa: E402

simulator_on_path()

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_summary import cached_summary, host_summary  # noqa: E402
from ansible_collections.gpufleet.mig.tests.unit.plugins.filter.fleet_samples import large_fleet  # noqa: E402

# A connection that runs nothing: each module execution is answered with the host's canned result (pipelined, so
# no temporary files either). Written next to the inventory; ANSIBLE_CONNECTION_PLUGINS finds it.
_CANNED = '''
from __future__ import absolute_import, division, print_function
__metaclass__ = type
import os
from ansible.plugins.connection import ConnectionBase

DOCUMENTATION = """
name: canned
short_description: answers each module execution with the canned result of its host (benchmarks/report.py)
description: [benchmarks/report.py]
author: gpufleet.mig developers (@gpufleet)
options:
  host:
    description: the host
    vars: [{name: inventory_hostname}]
  results:
    description: the folder of the results, one <host>.json each
    vars: [{name: canned_results}]
"""


class Connection(ConnectionBase):
    transport = 'canned'
    has_pipelining = True
    always_pipeline_modules = True

    def _connect(self):
        self._connected = True
        return self

    def exec_command(self, cmd, in_data=None, sudoable=True):
        super(Connection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        with open(os.path.join(self.get_option('results'), self.get_option('host') + '.json'), 'rb') as handle:
            return 0, handle.read(), b''

    def put_file(self, in_path, out_path):
        raise NotImplementedError('canned hosts take no files')

    def fetch_file(self, in_path, out_path):
        raise NotImplementedError('canned hosts give no files')

    def close(self):
        self._connected = False
'''


def write_fleet(directory, hosts, gpus, full_facts):
    """The canned fleet under ``directory``: inventory, connection plugin, one result per host. Returns the bytes of
    all results (what the hosts send the controller)."""
    results = os.path.join(directory, 'results')
    os.makedirs(results)
    os.makedirs(os.path.join(directory, 'connection'))
    with open(os.path.join(directory, 'connection', 'canned.py'), 'w') as handle:
        handle.write(_CANNED)
    total = 0
    names = []
    read_at = datetime.datetime.now(datetime.timezone.utc)
    for record in large_fleet(hosts, gpus):
        names.append(record['host'])
        if full_facts:
            result = {'changed': False, 'ansible_facts': {'nvidia_mig': {
                'driver_version': '580.95.05', 'nvml_version': '13.580.95.05', 'simulated': True,
                'pod_resources': {'read': True}, 'layout': record['layout'], 'gpus': record['gpus']}}}
        else:
            # what nvidia_mig_facts returns with summary: true
            result = {'changed': False, 'ansible_facts': {'nvidia_mig_summary': cached_summary(
                host_summary(record['layout'], record['gpus'], record['host']), read_at)}}
        text = json.dumps(result)
        total += len(text)
        with open(os.path.join(results, record['host'] + '.json'), 'w') as handle:
            handle.write(text)
    inventory = {'all': {'children': {'gpu_hosts': {
        'hosts': dict((name, None) for name in names),
        'vars': {'ansible_connection': 'canned', 'canned_results': results, 'ansible_python_interpreter': sys.executable}}}}}
    with open(os.path.join(directory, 'hosts.json'), 'w') as handle:
        json.dump(inventory, handle)
    return total


def run_report(directory, playbook, source=None):
    """(seconds, peak RSS in MB of ansible-playbook's largest process, map bytes) of one report run: with the fleet's
    jsonfile fact cache, from it alone with ``source`` cache."""
    env = ansible_environment(ANSIBLE_CONNECTION_PLUGINS=os.path.join(directory, 'connection'))
    if source is not None:
        env.update(ANSIBLE_CACHE_PLUGIN='jsonfile', ANSIBLE_CACHE_PLUGIN_CONNECTION=os.path.join(directory, 'facts'))
    map_path = os.path.join(directory, 'map.html')
    argv = [os.path.join(BIN, 'ansible-playbook'), '-i', os.path.join(directory, 'hosts.json'), playbook,
            '-e', 'mig_report_map_path=%s' % map_path] + (['-e', 'mig_report_source=%s' % source] if source else [])
    started = time.perf_counter()
    with open(os.path.join(directory, 'output.txt'), 'w') as output:
        process = subprocess.Popen(argv, cwd=REPOSITORY, env=env, stdout=output, stderr=subprocess.STDOUT)
        # wait4: the rusage of ansible-playbook and the processes it waited for; ru_maxrss is the largest's, in KB.
        dummy, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    with open(os.path.join(directory, 'output.txt')) as output:
        text = output.read()
    if status != 0:
        raise SystemExit('%s failed:\n%s' % (' '.join(argv), text[-4000:]))
    # the summary line, as the yaml callback wraps it
    if source == 'cache' and ', 0 host(s) with stale facts, 0 without cached facts' not in ' '.join(text.split()):
        raise SystemExit('the report from the cache did not find every host fresh in it:\n%s' % text[-4000:])
    return seconds, usage.ru_maxrss / 1024.0, os.path.getsize(map_path)


def run_ping(directory):
    """Seconds of ``ansible gpu_hosts -m ping`` on the same canned hosts: the floor of any one-task run of them."""
    env = ansible_environment(ANSIBLE_CONNECTION_PLUGINS=os.path.join(directory, 'connection'))
    argv = [os.path.join(BIN, 'ansible'), '-i', os.path.join(directory, 'hosts.json'), 'gpu_hosts', '-m', 'ansible.builtin.ping']
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=REPOSITORY, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise SystemExit('%s failed:\n%s' % (' '.join(argv), done.stdout[-4000:]))
    return time.perf_counter() - started


def baseline_playbook(directory, revision):
    """playbooks/mig_report.yml of git revision ``revision``, written into ``directory`` (it needs no file of its own
    folder: the collection's plugins come by their names)."""
    text = subprocess.check_output(['git', 'show', '%s:playbooks/mig_report.yml' % revision], cwd=REPOSITORY,
                                   universal_newlines=True)
    path = os.path.join(directory, 'mig_report-%s.yml' % revision)
    with open(path, 'w') as handle:
        handle.write(text)
    return path


def bench(labels, hosts, gpus, repeats, full_facts, playbook=None, revision=None):
    """{label: [(seconds, peak MB, ratio to ping)]} of each report of ``labels`` ({label: source}) run in turn, each
    repeat after a ping of the same hosts."""
    directory = tempfile.mkdtemp(prefix='gpufleet-report-')
    try:
        carried = write_fleet(directory, hosts, gpus, full_facts)
        playbook = playbook or (baseline_playbook(directory, revision) if revision else
                                os.path.join(REPOSITORY, 'playbooks', 'mig_report.yml'))
        runs = dict((label, []) for label in labels)
        for dummy in range(repeats):
            ping = run_ping(directory)
            for label, source in labels.items():
                seconds, peak, page = run_report(directory, playbook, source)
                runs[label].append((seconds, peak, seconds / ping))
                print('%-28s %6d %9.1f %9.2f %9.0f %9.2f %9.2f %6.2fx' % (
                    label, hosts * gpus, 0 if source == 'cache' else carried / 1e6, seconds, peak, page / 1e6, ping,
                    seconds / ping))
                sys.stdout.flush()
        return runs
    finally:
        shutil.rmtree(directory)


def spread(values):
    return '%.2f (%.2f-%.2f)' % (statistics.median(values), min(values), max(values))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', maxsplit=1)[0])
    parser.add_argument('--hosts', type=int, default=1000)
    parser.add_argument('--gpus', type=int, default=8, help='GPUs per host')
    parser.add_argument('--repeats', type=int, default=3, help='runs of the report (median and spread printed)')
    parser.add_argument('--baseline', metavar='REV', help='also run playbooks/mig_report.yml of this git revision (whole facts)')
    args = parser.parse_args(argv)
    print('playbooks/mig_report.yml, %d canned hosts x %d GPUs, forks from ansible.cfg, %d run(s) each:' % (
        args.hosts, args.gpus, args.repeats))
    columns = ('report', 'GPUs', 'sent MB', 'wall s', 'peak MB', 'map MB', 'ping s', 'ratio')
    print('%-28s %6s %9s %9s %9s %9s %9s %7s' % columns)
    # live first: it fills the fact cache the cached report reads
    runs = bench({'live (this checkout)': 'live', 'cache (this checkout)': 'cache'}, args.hosts, args.gpus, args.repeats, False)
    if args.baseline:
        label = 'whole facts (%s)' % args.baseline[:10]
        runs.update(bench({label: None}, args.hosts, args.gpus, args.repeats, True, revision=args.baseline))
    for label, values in runs.items():
        print('%s: wall %s s, peak %s MB, report / ping %s (median, min-max)' % (
            label, spread([v[0] for v in values]), spread([v[1] for v in values]), spread([v[2] for v in values])))
    return 0


if __name__ == '__main__':
    sys.exit(main())
