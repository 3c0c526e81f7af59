# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a playbook as a user or AWX would and summarize what it did: the one way the tests do it.

Every run is its own ansible-playbook process, started by ansible-runner (what AWX runs its jobs
with), in a private data directory: a temporary one by default (removed afterwards; the playbook
then runs from the current directory with the caller's environment), or an AWX-style one the caller
prepared (``project/``, ``inventory/``, ``env/extravars``, ``env/envvars``, ``env/settings``). The
summary is computed from ansible-runner's job events.

Python::

    from tests.support.playbook import run_playbook
    run = run_playbook('playbooks/mig_layout.yml', inventory='inventories/simulated',
                       extravars={'mig_layout_name': 'nighttime'})
    run.rc, run.changed, run.messages, run.to_dict()

Command line (for Molecule: ``ansible.builtin.command``, then tests/support/tasks/collect_run.yml reads its
output into ``run_result``; it also runs under ``async``)::

    python tests/support/playbook.py PLAYBOOK [-i INVENTORY]... [-e VARS]... [--env NAME=VALUE]...
        [--private-data-dir DIR] [--timeout SECONDS] [--raw] [-- MORE ANSIBLE-PLAYBOOK ARGUMENTS]

prints the summary as one JSON document on stdout. Exit status 0 whenever the playbook ran, whatever
its own rc (which is in the summary); 2 when it could not be started (the reason on stderr).

The summary (``PlaybookRun.to_dict()``):

    rc, status      ansible-playbook's exit status; ansible-runner's status (successful, failed, timeout, ...)
    seconds         from the start of the first play to the end of the last one; null when no play started
    wall            the whole process, start-up included, in seconds
    changed         sorted hosts whose stats count a change; failed: a failure; unreachable: an unreachable
                    result (ignore_unreachable results are not counted by Ansible)
    changed_tasks   {host: [names of the tasks that changed it, in order]} for every host of the run
    messages        {host: [msg of each failed or unreachable result (a loop's: then those of its failed
                    items), in the order they came]}
    stats           {host: {ok, changed, failures, unreachable, skipped, rescued, ignored}}
    results         one entry per task result, in order: {play, task, role, action, host, status (ok,
                    failed, unreachable or skipped), changed, and for failed and unreachable results
                    msg and item_msgs (those of a loop's failed items)}
    error           the end of the output when the run has no stats (it stopped before its plays ran)
    events, stdout  ansible-runner's job events and the human output (CLI: only with --raw)

PlaybookRun also answers changed_tasks(host) (names of the tasks that changed it), task_results(task)
({host: module result}) and describe() (one line for assertion messages).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(REPO, 'build', 'collections')
BIN = os.path.dirname(os.path.abspath(sys.executable))

# ansible-runner's events of one task result on one host, and the status the summary gives it.
RESULT_EVENTS = {
    'runner_on_ok': 'ok',
    'runner_on_failed': 'failed',
    'runner_on_unreachable': 'unreachable',
    'runner_on_skipped': 'skipped',
}
# The per-host counters of the summary, and the name of each in Ansible's stats.
STATS = (('ok', 'ok'), ('changed', 'changed'), ('failures', 'failures'), ('unreachable', 'dark'),
         ('skipped', 'skipped'), ('rescued', 'rescued'), ('ignored', 'ignored'))
ERROR_TAIL = 6000
_ANSI_ESCAPE = re.compile(r'\x1b\[[0-9;]*m')


class PlaybookError(Exception):
    """The playbook could not be started (bad arguments, ansible-runner refused its configuration)."""


class PlaybookRun:
    """What one run did; see the module docstring for each field."""

    SUMMARY = ('rc', 'status', 'seconds', 'wall', 'changed', 'failed', 'unreachable', 'messages', 'stats', 'results',
               'error')

    def __init__(self, rc, status, seconds, wall, stats, results, events, stdout):
        self.rc = rc
        self.status = status
        self.seconds = seconds
        self.wall = wall
        self.stats = stats
        self.results = results
        self.events = events
        self.stdout = stdout

    def _hosts_counting(self, counter):
        return sorted(host for host, counts in self.stats.items() if counts[counter] > 0)

    @property
    def changed(self):
        return self._hosts_counting('changed')

    @property
    def failed(self):
        return self._hosts_counting('failures')

    @property
    def unreachable(self):
        return self._hosts_counting('unreachable')

    @property
    def messages(self):
        found = {}
        for result in self.results:
            if result['status'] in ('failed', 'unreachable'):
                found.setdefault(result['host'], []).extend([result['msg']] + result['item_msgs'])
        return found

    @property
    def error(self):
        """The end of the output of a run that has no stats (it stopped before its plays ran), else None."""
        if any(event.get('event') == 'playbook_on_stats' for event in self.events):
            return None
        return _ANSI_ESCAPE.sub('', self.stdout)[-ERROR_TAIL:]

    def changed_tasks(self, host):
        """Names of the tasks that changed something on ``host``, in order."""
        return [result['task'] for result in self.results if result['host'] == host and result['changed']]

    def task_results(self, task):
        """{host: the module result (res) of each host's last result of the task named ``task``} from the events."""
        found = {}
        for event in self.events:
            data = event.get('event_data') or {}
            if event.get('event') in RESULT_EVENTS and data.get('task') == task:
                found[data.get('host')] = data.get('res') or {}
        return found

    def to_dict(self, raw=False):
        summary = dict((name, getattr(self, name)) for name in self.SUMMARY)
        hosts = set(self.stats) | set(result['host'] for result in self.results)
        summary['changed_tasks'] = dict((host, self.changed_tasks(host)) for host in hosts)
        if raw:
            summary.update(events=self.events, stdout=self.stdout)
        return summary

    def describe(self):
        """One line for test failure messages: rc, seconds, changed and failed hosts, messages."""
        messages = '; '.join('%s: %s' % (host, ' | '.join(msgs)) for host, msgs in sorted(self.messages.items()))
        return 'rc=%s (%s) in %s s (process %.1f s), changed: %s, failed: %s, unreachable: %s %s%s' % (
            self.rc, self.status, self.seconds, self.wall, ', '.join(self.changed) or 'none',
            ', '.join(self.failed) or 'none', ', '.join(self.unreachable) or 'none', messages,
            ('\n' + self.error) if self.error else '')


def _created(event):
    return datetime.datetime.fromisoformat(event['created'])


def summarize(events, rc, status, wall, stdout=''):
    """The PlaybookRun of ansible-runner's job ``events`` (dicts as ansible-runner writes them)."""
    events = sorted(events, key=lambda event: event.get('counter', 0))
    results = []
    stats = {}
    first_play = last = None
    for event in events:
        name = event.get('event')
        data = event.get('event_data') or {}
        if name == 'playbook_on_play_start' and first_play is None:
            first_play = event
        elif name == 'playbook_on_stats':
            last = event
            hosts = set()
            for key in dict(STATS).values():
                hosts.update(data.get(key) or {})
            hosts.update(data.get('processed') or {})
            stats = dict((host, dict((counter, int((data.get(key) or {}).get(host, 0))) for counter, key in STATS))
                         for host in hosts)
        elif name in RESULT_EVENTS:
            res = data.get('res') or {}
            result = {
                'play': data.get('play'),
                'task': data.get('task'),
                'role': data.get('role') or None,
                'action': data.get('resolved_action') or data.get('task_action'),
                'host': data.get('host'),
                'status': RESULT_EVENTS[name],
                'changed': bool(res.get('changed', False)),
            }
            if result['status'] in ('failed', 'unreachable'):
                result['msg'] = str(res.get('msg', ''))
                # A loop's result says "One or more items failed": the items say what.
                result['item_msgs'] = [str(item.get('msg', '')) for item in res.get('results') or []
                                       if isinstance(item, dict) and (item.get('failed') or item.get('unreachable'))]
            results.append(result)
    if first_play is not None:
        end = last if last is not None else events[-1]
        seconds = round((_created(end) - _created(first_play)).total_seconds(), 1)
    else:
        seconds = None
    return PlaybookRun(rc, status, seconds, round(wall, 1), stats, results, events, stdout)


def ansible_settings(bin_dir=BIN):
    """The settings of an Ansible run from this checkout, the one definition (the Makefile's ANSIBLE_ENV applies them
    through tests/support/ansible_env.py): the collection through build/collections (where the Makefile links this
    checkout as gpufleet.mig), the roles, ansible.cfg, and ``bin_dir`` (ansible-playbook, molecule, ...) first on PATH."""
    return {
        'ANSIBLE_COLLECTIONS_PATH': COLLECTIONS,
        'ANSIBLE_ROLES_PATH': os.path.join(REPO, 'roles'),
        'ANSIBLE_CONFIG': os.path.join(REPO, 'ansible.cfg'),
        'PATH': bin_dir + os.pathsep + os.environ.get('PATH', ''),
    }


def ansible_environment(**extra):
    """Environment of an Ansible run the tests start: this process's, with ansible_settings(), no colour, no proxies
    (the tests' servers are on loopback) and no PYTHONPATH; then ``extra``."""
    env = dict((k, v) for k, v in os.environ.items() if not k.lower().endswith('_proxy'))
    env.update(ansible_settings(), ANSIBLE_NOCOLOR='1', ANSIBLE_FORCE_COLOR='0')
    env.pop('PYTHONPATH', None)
    env.update(extra)
    return env


def run_playbook(playbook, inventory=None, extravars=None, args=(), envvars=None, private_data_dir=None,
                 project_dir=None, timeout=None, fact_cache=None):
    """Run ``playbook`` in its own ansible-playbook process through ansible-runner; returns a PlaybookRun.

    playbook          path (relative to the project directory, or absolute)
    inventory         a path or host list ("a,b,"), or a list of them (default: the private data directory's
                      inventory/, if any)
    extravars         a dict, passed as one -e (an AWX-style private data directory may also hold env/extravars)
    args              more ansible-playbook arguments, e.g. ['--check', '--tags', 'x', '-e', '@vars.yml']
    envvars           environment variables on top of this process's (and of env/envvars)
    private_data_dir  an AWX-style private data directory, kept with its artifacts; default: a temporary
                      one, removed afterwards
    project_dir       where the playbook runs from; default: the private data directory's project/, or the
                      current directory with a temporary private data directory
    timeout           seconds before ansible-runner ends the job (status "timeout")
    fact_cache        a folder for the jsonfile fact cache, kept from run to run (ansible-runner sets the cache
                      itself, as AWX does: environment variables cannot); default: one in the run's artifacts
    """
    import ansible_runner  # the tests' requirement, imported only by those that run playbooks

    if inventory is not None and not isinstance(inventory, (list, tuple)):
        inventory = [inventory]
    # An inventory is a path, or (with a comma) a host list such as "localhost,".
    inventory = [source if ',' in source else os.path.abspath(source) for source in inventory or ()] or None
    for source in inventory or ():
        if ',' not in source and not os.path.exists(source):
            raise PlaybookError('inventory %s does not exist' % source)
    command_args = list(args)
    if extravars:
        command_args += ['-e', json.dumps(extravars)]
    temporary = private_data_dir is None
    if temporary:
        private_data_dir = tempfile.mkdtemp(prefix='gpufleet-playbook-')
        project_dir = project_dir or os.getcwd()
    events = []

    def keep_event(event):
        events.append(event)
        return True

    options = dict(private_data_dir=os.path.abspath(private_data_dir), playbook=playbook, quiet=True,
                   event_handler=keep_event)
    if inventory is not None:
        options['inventory'] = inventory
    if command_args:
        options['cmdline'] = ' '.join(shlex.quote(arg) for arg in command_args)
    if envvars:
        options['envvars'] = dict((str(k), str(v)) for k, v in envvars.items())
    if project_dir is not None:
        options['project_dir'] = os.path.abspath(project_dir)
    if timeout:
        options['timeout'] = int(timeout)
    if fact_cache is not None:
        # ansible-runner joins it to the artifacts folder: an absolute path stays as it is.
        options['fact_cache'] = os.path.abspath(fact_cache)
    started = time.monotonic()
    try:
        try:
            runner = ansible_runner.run(**options)
        except ansible_runner.exceptions.AnsibleRunnerException as exc:
            raise PlaybookError('ansible-runner could not run %s: %s' % (playbook, exc))
        wall = time.monotonic() - started
        with runner.stdout as handle:
            stdout = handle.read()
        return summarize(events, runner.rc, runner.status, wall, stdout)
    finally:
        if temporary:
            shutil.rmtree(private_data_dir, ignore_errors=True)


def _environment_pair(text):
    name, sep, value = text.partition('=')
    if not sep or not name:
        raise argparse.ArgumentTypeError('expected NAME=VALUE, got %r' % text)
    return name, value


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    more = []
    if '--' in argv:
        at = argv.index('--')
        argv, more = argv[:at], argv[at + 1:]
    parser = argparse.ArgumentParser(
        prog='tests/support/playbook.py',
        description='Run a playbook in its own ansible-playbook process (ansible-runner) and print its summary as JSON.')
    parser.add_argument('playbook')
    parser.add_argument('-i', '--inventory', action='append', help='inventory path or host list (repeatable)')
    parser.add_argument('-e', '--extra-vars', action='append', default=[], metavar='VARS',
                        help='as ansible-playbook -e: JSON, key=value or @file (repeatable, in order)')
    parser.add_argument('--env', action='append', default=[], type=_environment_pair, metavar='NAME=VALUE',
                        help='an environment variable of the run (repeatable)')
    parser.add_argument('--private-data-dir', help='an AWX-style private data directory (default: a temporary one)')
    parser.add_argument('--timeout', type=int, help='seconds before the job is ended')
    parser.add_argument('--raw', action='store_true', help="add ansible-runner's events and the human output")
    options = parser.parse_args(argv)
    args = []
    for value in options.extra_vars:
        args += ['-e', value]
    try:
        run = run_playbook(options.playbook, inventory=options.inventory, args=args + more,
                           envvars=dict(options.env), private_data_dir=options.private_data_dir,
                           timeout=options.timeout)
    except PlaybookError as exc:
        print('tests/support/playbook.py: %s' % exc, file=sys.stderr)
        return 2
    json.dump(run.to_dict(raw=options.raw), sys.stdout, sort_keys=True)
    sys.stdout.write('\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
