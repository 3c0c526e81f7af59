# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/support/playbook.py: the summary of ansible-runner's events, and real runs from Python and the CLI."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys

import pytest

from .playbook import BIN, REPO, PlaybookError, ansible_environment, run_playbook, summarize


PLAYBOOK = """\
- name: Three hosts
  hosts: all
  gather_facts: false
  tasks:
    - name: Change something
      ansible.builtin.command: "true"
      changed_when: true

    - name: Fail on b
      ansible.builtin.fail:
        msg: b fails on purpose
      when: inventory_hostname == 'b'

    - name: Skipped everywhere
      ansible.builtin.debug:
        msg: never
      when: false

    - name: Say what the extra vars and the environment are
      ansible.builtin.debug:
        msg: "{{ greeting }} {{ lookup('ansible.builtin.env', 'GPUFLEET_PLAYBOOK_TEST') }}"
"""


def event(counter, name, created, **data):
    return {'counter': counter, 'event': name, 'created': created, 'event_data': data}


def test_summarize_counts_hosts_messages_and_play_time():
    events = [
        event(1, 'playbook_on_start', '2026-01-01T10:00:00+00:00'),
        event(3, 'runner_on_ok', '2026-01-01T10:00:02+00:00', play='p', task='t1', host='a', role='r',
              resolved_action='ansible.builtin.command', res={'changed': True}),
        event(2, 'playbook_on_play_start', '2026-01-01T10:00:01.500000+00:00', play='p'),
        event(4, 'runner_on_failed', '2026-01-01T10:00:03+00:00', play='p', task='t2', host='b',
              task_action='fail', res={'msg': 'no'}),
        event(5, 'runner_on_unreachable', '2026-01-01T10:00:04+00:00', play='p', task='t2', host='c',
              res={'msg': 'gone', 'unreachable': True}),
        event(6, 'runner_on_skipped', '2026-01-01T10:00:05+00:00', play='p', task='t3', host='a'),
        event(7, 'runner_on_failed', '2026-01-01T10:00:06+00:00', play='p', task='t4', host='b',
              res={'msg': 'One or more items failed', 'results': [{'msg': 'fine'}, {'failed': True, 'msg': 'item 2 broke'}]}),
        event(8, 'playbook_on_stats', '2026-01-01T10:00:13.600000+00:00', changed={'a': 1}, dark={'c': 1},
              failures={'b': 1}, ok={'a': 1, 'b': 2}, processed={'a': 1, 'b': 1, 'c': 1, 'd': 1}, skipped={'a': 1},
              rescued={}, ignored={'b': 1}),
    ]
    run = summarize(events, 2, 'failed', 15.04, 'output')
    assert (run.rc, run.status, run.seconds, run.wall) == (2, 'failed', 12.1, 15.0)
    assert (run.changed, run.failed, run.unreachable) == (['a'], ['b'], ['c'])
    assert run.messages == {'b': ['no', 'One or more items failed', 'item 2 broke'], 'c': ['gone']}
    assert run.stats['d'] == dict(ok=0, changed=0, failures=0, unreachable=0, skipped=0, rescued=0, ignored=0)
    assert run.stats['b'] == dict(ok=2, changed=0, failures=1, unreachable=0, skipped=0, rescued=0, ignored=1)
    assert [(r['task'], r['host'], r['status'], r['changed']) for r in run.results] == [
        ('t1', 'a', 'ok', True), ('t2', 'b', 'failed', False), ('t2', 'c', 'unreachable', False),
        ('t3', 'a', 'skipped', False), ('t4', 'b', 'failed', False)]
    assert run.results[0]['role'] == 'r' and run.results[0]['action'] == 'ansible.builtin.command'
    assert run.results[1]['action'] == 'fail' and 'msg' not in run.results[0]
    assert run.changed_tasks('a') == ['t1']
    assert run.error is None
    summary = run.to_dict()
    assert summary['changed_tasks'] == {'a': ['t1'], 'b': [], 'c': [], 'd': []}
    assert 'events' not in summary and 'stdout' not in summary
    assert json.loads(json.dumps(summary)) == summary
    assert run.to_dict(raw=True)['events'][0]['counter'] == 1


def test_summarize_a_run_that_never_started_a_play():
    run = summarize([event(1, 'verbose', '2026-01-01T10:00:00+00:00')], 1, 'failed', 0.4,
                    '\x1b[0;31m[ERROR]: the playbook: x.yml could not be found\x1b[0m\n')
    assert run.seconds is None and run.stats == {} and run.changed == [] and run.results == []
    assert run.error == '[ERROR]: the playbook: x.yml could not be found\n'


@pytest.fixture
def three_hosts(tmp_path):
    """A playbook and an inventory: a and b run locally, c is a closed port."""
    (tmp_path / 'play.yml').write_text(PLAYBOOK)
    local = 'ansible_connection=local ansible_python_interpreter=%s' % sys.executable
    (tmp_path / 'hosts').write_text('a %s\nb %s\nc ansible_host=127.0.0.1 ansible_port=9 ansible_user=nobody\n' % (local, local))
    return tmp_path


def test_run_playbook_from_python(three_hosts, monkeypatch):
    assert shutil.which('ssh'), 'host c is reached over SSH: this test needs the OpenSSH client (Debian: openssh-client)'
    for name, value in ansible_environment().items():
        monkeypatch.setenv(name, value)
    run = run_playbook(str(three_hosts / 'play.yml'), inventory=str(three_hosts / 'hosts'),
                       extravars={'greeting': 'hello'}, envvars={'GPUFLEET_PLAYBOOK_TEST': 'from-env'},
                       args=['--forks', '3'])
    # ansible-playbook exits 4 when a host was unreachable (before 2 for a failed one).
    assert (run.rc, run.status) == (4, 'failed'), run.describe()
    assert (run.changed, run.failed, run.unreachable) == (['a', 'b'], ['b'], ['c']), run.describe()
    assert run.messages['b'] == ['b fails on purpose']
    assert 'Connection refused' in run.messages['c'][0], run.messages
    assert run.changed_tasks('a') == ['Change something']
    assert [r['status'] for r in run.results if r['host'] == 'a'] == ['ok', 'skipped', 'skipped', 'ok']
    assert 'hello from-env' in run.stdout
    assert 0 <= run.seconds <= run.wall


def test_cli_prints_one_json_summary(three_hosts, tmp_path):
    argv = [sys.executable, 'tests/support/playbook.py', str(three_hosts / 'play.yml'), '-i', str(three_hosts / 'hosts'),
            '-e', '{"greeting": "hi"}', '--env', 'GPUFLEET_PLAYBOOK_TEST=there', '--raw', '--', '--limit', 'a']
    done = subprocess.run(argv, cwd=REPO, env=ansible_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary['rc'], summary['changed'], summary['failed'], summary['unreachable']) == (0, ['a'], [], [])
    assert sorted(summary['stats']) == ['a']
    assert 'hi there' in summary['stdout']
    assert any(e['event'] == 'playbook_on_stats' for e in summary['events'])


def test_cli_refuses_a_missing_inventory(tmp_path):
    done = subprocess.run([sys.executable, 'tests/support/playbook.py', 'play.yml', '-i', str(tmp_path / 'none')],
                          cwd=REPO, env=ansible_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60, check=False)
    assert (done.returncode, done.stdout) == (2, '')
    assert 'inventory %s does not exist' % (tmp_path / 'none') in done.stderr
    with pytest.raises(PlaybookError, match='does not exist'):
        run_playbook('play.yml', inventory=str(tmp_path / 'none'))


def test_collect_run_tasks_read_the_cli_summary_into_run_result(three_hosts):
    """tests/support/tasks/collect_run.yml, which the Molecule scenarios include after running the CLI under
    ansible-playbook: run_result is the summary, without --raw's events and output."""
    outer = three_hosts / 'outer.yml'
    outer.write_text(json.dumps([{
        'name': 'Run the CLI as a scenario does', 'hosts': 'localhost', 'connection': 'local', 'gather_facts': False,
        'vars': {'ansible_python_interpreter': sys.executable},
        'tasks': [
            {'name': 'Run the helper', 'register': 'run_raw', 'changed_when': False, 'ansible.builtin.command': {'argv': [
                sys.executable, '%s/tests/support/playbook.py' % REPO, str(three_hosts / 'play.yml'),
                '-i', str(three_hosts / 'hosts'), '-e', '{"greeting": "hi"}', '--env', 'GPUFLEET_PLAYBOOK_TEST=there',
                '--raw', '--', '--limit', 'a,b']}},
            {'name': 'Collect', 'ansible.builtin.include_tasks': '%s/tests/support/tasks/collect_run.yml' % REPO,
             'vars': {'run_label': 'a and b'}},
            {'name': 'Keep run_result', 'ansible.builtin.copy': {
                'content': '{{ run_result | to_json }}', 'dest': str(three_hosts / 'run_result.json'), 'mode': '0644'}},
        ]}]))
    done = subprocess.run([os.path.join(BIN, 'ansible-playbook'), str(outer), '-i', 'localhost,'], cwd=str(three_hosts),
                          env=ansible_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout
    result = json.loads((three_hosts / 'run_result.json').read_text())
    assert (result['rc'], result['changed'], result['failed']) == (2, ['a', 'b'], ['b']), result
    assert result['changed_tasks'] == {'a': ['Change something'], 'b': ['Change something']}
    assert result['messages'] == {'b': ['b fails on purpose']}
    assert 'events' not in result and 'stdout' not in result
    assert 'changed: a, b, failed: b. b: b fails on purpose' in done.stdout, done.stdout
