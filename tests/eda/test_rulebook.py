# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shipped rulebook (extensions/eda/rulebooks/mig_demand.yml) under the real ansible-rulebook, its event
source gpufleet.mig.mig_pending_pods watching a fake API server (tests/eda/fake_kube_api.py): one playbook
run per burst of unschedulable MIG pods, with every pod still pending; the watch resumed after 410 Gone;
the token only in the Authorization header. Java 17 (Debian's openjdk-17-jre-headless) is installed when
missing; ansible-rulebook comes from .venv-eda (make eda-test)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from ansible_collections.gpufleet.mig.tests.eda.fake_kube_api import FakeKubeAPI
from ansible_collections.gpufleet.mig.tests.support.debian import install_debian_packages
from ansible_collections.gpufleet.mig.tests.support.playbook import ansible_settings
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.pods import pod

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECORD_PLAYBOOK = os.path.join(ROOT, 'tests', 'eda', 'record_demand.yml')
TOKEN = 'eda-test-token-5f1d'
QUIET = 2
JAVA_PACKAGE = 'openjdk-17-jre-headless'


def java_major():
    """The major version of the java on PATH, or None."""
    if not shutil.which('java'):
        return None
    out = subprocess.run(['java', '-version'], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False).stdout.decode()
    match = re.search(r'version "(\d+)', out)
    return int(match.group(1)) if match else None


@pytest.fixture(scope='session')
def java():
    """A Java 17+ runtime for ansible-rulebook's rule engine (drools through drools-jpy)."""
    if (java_major() or 0) < 17:
        install_debian_packages([JAVA_PACKAGE], 'Java 17')
    assert (java_major() or 0) >= 17, 'no Java 17 runtime on PATH after installing %s' % JAVA_PACKAGE


@pytest.fixture
def api():
    fake = FakeKubeAPI(TOKEN).start()
    yield fake
    fake.stop()


def runs(record_dir):
    """What each playbook run got, in the order they ran."""
    return [json.load(open(path)) for path in sorted(glob.glob(os.path.join(record_dir, 'run-*.json')))]


def wait_for(what, timeout, process):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = what()
        if result:
            return result
        assert process.poll() is None, 'ansible-rulebook exited early (rc %s)' % process.returncode
        time.sleep(0.1)
    raise AssertionError('timed out after %ss' % timeout)


def stop_rulebook(rulebook, log, shown):
    """Stop ansible-rulebook as Ctrl-C would and return its output; on a failing test, print its last ``shown`` characters."""
    rulebook.send_signal(signal.SIGINT)
    try:
        rulebook.wait(30)
    except subprocess.TimeoutExpired:
        rulebook.kill()
        rulebook.wait()
    log.seek(0)
    output = log.read()
    log.close()
    if sys.exc_info()[0] is not None:
        print(output[-shown:])
    return output


EXEC_PLUGIN = """import json
print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',
                  'status': {'token': %r, 'expirationTimestamp': '2000-01-01T00:00:00Z'}}))
"""


def relisted(api, lists_before):
    """A condition: the source listed again (answer 200) after ``lists_before`` lists and watches again."""
    return lambda: api.count(watch=False, status=200) > lists_before and api.answers[-1:] == [200] and \
        bool(api.requests[-1].get('watch'))


def test_one_playbook_run_per_burst_with_every_pending_mig_request_through_every_fault(java, api, tmp_path):
    # The kubeconfig's credential comes from an exec plugin (as EKS, GKE and AKS kubeconfigs do), expired at
    # once, so the kubernetes client's loader runs it again before each request.
    plugin = tmp_path / 'credential.py'
    plugin.write_text(EXEC_PLUGIN % TOKEN)
    kubeconfig = tmp_path / 'kubeconfig'
    kubeconfig.write_text(json.dumps({
        'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'fake',
        'clusters': [{'name': 'fake', 'cluster': {'server': api.url}}],
        'contexts': [{'name': 'fake', 'context': {'cluster': 'fake', 'user': 'eda'}}],
        'users': [{'name': 'eda', 'user': {'exec': {'apiVersion': 'client.authentication.k8s.io/v1', 'command': sys.executable,
                                                    'args': [str(plugin)], 'interactiveMode': 'Never'}}}]}))
    (tmp_path / 'vars.yml').write_text(json.dumps({
        'mig_demand_kubeconfig': str(kubeconfig), 'mig_demand_quiet_period': QUIET, 'mig_demand_max_delay': 30,
        'mig_demand_retry_max': 1, 'mig_demand_playbook': RECORD_PLAYBOOK,
        # The full path against a fake API server that serves pods only; the fast path and the gated queue (which watch
        # the nodes too): the cluster checks (docs/eda.md).
        'mig_demand_fast': False, 'mig_demand_gated': False}))
    (tmp_path / 'inventory.yml').write_text('all:\n  hosts:\n    localhost:\n      ansible_connection: local\n'
                                            '      ansible_python_interpreter: "{{ ansible_playbook_python }}"\n')
    record_dir = tmp_path / 'runs'
    record_dir.mkdir()

    # Before the source starts: one MIG pod waiting, one waiting for another reason, one running on a MIG device.
    api.put(pod('a', {'nvidia.com/mig-1g.10gb': '1'}, priority=100, priority_class='inference'))
    api.put(pod('taint', message='0/3 nodes are available: 3 node(s) had untolerated taint {x: y}.'))
    api.put(pod('run', phase='Running', node_name='gpu-1', scheduled=('True', '')))
    # Its first list is throttled: 429 with Retry-After.
    api.fail_next(1, 429, {'Retry-After': '1'})

    venv_bin = os.path.dirname(sys.executable)
    env = dict(os.environ, EDA_RECORD_DIR=str(record_dir), **ansible_settings(venv_bin))
    env.pop('KUBECONFIG', None)
    log = open(str(tmp_path / 'rulebook.log'), 'w+')
    started = time.monotonic()
    rulebook = subprocess.Popen([os.path.join(venv_bin, 'ansible-rulebook'), '-v', '--rulebook', 'gpufleet.mig.mig_demand',
                                 '-i', str(tmp_path / 'inventory.yml'), '--vars', str(tmp_path / 'vars.yml')],
                                cwd=str(tmp_path), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        # The burst: two more MIG pods while the first still waits, and an update of the first.
        wait_for(lambda: any(q.get('watch') for q in api.requests), 120, rulebook)
        watching = time.monotonic() - started
        assert api.answers[:2] == [429, 200]
        api.put(pod('b', {'nvidia.com/mig-3g.40gb': '1'}))
        api.put(pod('a', {'nvidia.com/mig-1g.10gb': '1'}, priority=100, priority_class='inference'))
        api.put(pod('c', {'nvidia.com/mig-1g.10gb.me': '2'}, namespace='team-b'))
        first = wait_for(lambda: runs(str(record_dir)), 120, rulebook)
        first_latency = time.monotonic() - started - watching
        assert len(first) == 1
        assert first[0]['requests'] == [
            {'pod': 'team-a/a', 'priority': 100, 'priority_class': 'inference',
             'requests': {'1g.10gb': 1}, 'created': '2026-12-03T22:00:00Z'},
            {'pod': 'team-a/b', 'priority': 0, 'priority_class': '',
             'requests': {'3g.40gb': 1}, 'created': '2026-12-03T22:00:00Z'},
            {'pod': 'team-b/c', 'priority': 0, 'priority_class': '',
             'requests': {'1g.10gb+me': 2}, 'created': '2026-12-03T22:00:00Z'}]
        assert first[0]['apply'] is True
        assert first[0]['event']['mig_pending_pods']['new'] == ['team-a/a', 'team-a/b', 'team-b/c']

        # Every fault in turn; after each the source lists again and watches again.
        faults = (
            ('watch ERROR 500', lambda: api.watch_error(500, 'InternalError', 'etcdserver: request timed out')),
            ('lost connection, then 503', lambda: (api.fail_next(1, 503), api.drop_watches())),
            ('410, then 401 and 403', lambda: (api.fail_next(1, 401), api.fail_next(1, 403), api.compact())),
        )
        for name, inject in faults:
            lists_before = api.count(watch=False, status=200)
            inject()
            wait_for(relisted(api, lists_before), 60, rulebook)
        # a is scheduled; a second burst: two pods, one with a 600 KiB annotation (over aiohttp's 512 KiB line
        # limit), one with 9 MiB (over the source's 8 MiB: skipped in the watch, read by the next list).
        api.put(pod('a', phase='Running', node_name='gpu-1', scheduled=('True', '')))
        api.put(pod('d', {'nvidia.com/mig-2g.20gb': '1'}))
        big = pod('e', {'nvidia.com/mig-2g.20gb': '1'})
        big['metadata']['annotations'] = {'big': 'x' * 600 * 1024}
        api.put(big)
        huge = pod('f', {'nvidia.com/mig-2g.20gb': '1'})
        huge['metadata']['annotations'] = {'huge': 'x' * 9 * 1024 * 1024}
        api.put(huge)
        wait_for(lambda: len(runs(str(record_dir))) >= 2, 120, rulebook)
        second = runs(str(record_dir))[1]
        assert [r['pod'] for r in second['requests']] == ['team-a/b', 'team-a/d', 'team-a/e', 'team-a/f', 'team-b/c']
        assert second['event']['mig_pending_pods']['new'] == ['team-a/d', 'team-a/e', 'team-a/f']

        # The release trigger: a pod holding a MIG device ends while pods still wait: one run for those still waiting.
        api.delete('team-a', 'run')
        wait_for(lambda: len(runs(str(record_dir))) >= 3, 120, rulebook)
        third = runs(str(record_dir))[2]
        assert third['event']['mig_pending_pods']['new'] == []
        assert third['event']['mig_pending_pods']['released'] == ['team-a/run']
        assert [r['pod'] for r in third['requests']] == ['team-a/b', 'team-a/d', 'team-a/e', 'team-a/f', 'team-b/c']

        # Quiet: no fourth run.
        time.sleep(3 * QUIET)
        assert rulebook.poll() is None
        assert len(runs(str(record_dir))) == 3
    finally:
        output = stop_rulebook(rulebook, log, shown=6000)
    print('eda-test: rulebook up and watching after %.1fs; first burst to its playbook run %.1fs (quiet period %ds)'
          % (watching, first_latency, QUIET))
    assert TOKEN not in output
    for words in ('HTTP 429 Too Many Requests', 'code 500, InternalError', 'ClientPayloadError', 'HTTP 503',
                  'HTTP 401 Unauthorized', 'HTTP 403 Forbidden', 'over the 8388608 the source reads'):
        assert words in output, words
    assert all(q.get('fieldSelector') == 'status.phase!=Succeeded,status.phase!=Failed' for q in api.requests)
    assert all(q.get('limit') == '500' for q in api.requests if not q.get('watch'))
    assert set(api.paths) == {'/api/v1/pods'}


def simulated_inventory(tmp_path, state_dir):
    """The simulated fleet's inventory with its state under ``state_dir`` (not the checkout's .state of make demo)."""
    folder = tmp_path / 'inventory'
    (folder / 'group_vars').mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, 'inventories', 'simulated', 'hosts.yml'), str(folder / 'hosts.yml'))
    with open(os.path.join(ROOT, 'inventories', 'simulated', 'group_vars', 'all.yml')) as handle:
        group_vars = handle.read()
    (folder / 'group_vars' / 'all.yml').write_text(group_vars + '\ngpufleet_sim_repository: %s\ngpufleet_sim_state_dir: %s\n'
                                                   % (json.dumps(ROOT), json.dumps(state_dir)))
    return str(folder)


def test_the_rulebook_runs_the_demand_playbook_which_creates_the_instance_on_the_simulated_fleet(java, api, tmp_path):
    """The whole path without a cluster: event -> rulebook -> playbooks/mig_demand.yml -> plan -> rollout through
    mig_layout.yml -> a 7g.80gb on a simulated A100 (ansible-playbook of the main virtualenv: kubernetes.core)."""
    ansible_bin = os.environ.get('GPUFLEET_EDA_ANSIBLE_BIN')
    assert ansible_bin, 'make eda-test sets GPUFLEET_EDA_ANSIBLE_BIN to the ansible-playbook folder of .venv'
    state_dir = str(tmp_path / 'state')
    inventory = simulated_inventory(tmp_path, state_dir)
    env = dict(os.environ, **ansible_settings(ansible_bin))
    env.pop('PYTHONPATH', None)
    for playbook, extra in (('simulator/seed.yml', {}), ('playbooks/mig_layout.yml', {'mig_layout_serial': '100%'})):
        done = subprocess.run([os.path.join(ansible_bin, 'ansible-playbook'), '-i', inventory, playbook, '-e', json.dumps(extra)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
        assert done.returncode == 0, done.stdout.decode()[-3000:]
    kubeconfig = tmp_path / 'kubeconfig'
    kubeconfig.write_text(json.dumps({
        'current-context': 'fake', 'clusters': [{'name': 'fake', 'cluster': {'server': api.url}}],
        'contexts': [{'name': 'fake', 'context': {'cluster': 'fake', 'user': 'eda'}}],
        'users': [{'name': 'eda', 'user': {'token': TOKEN}}]}))
    (tmp_path / 'vars.yml').write_text(json.dumps({'mig_demand_kubeconfig': str(kubeconfig), 'mig_demand_quiet_period': 1,
                                                   'mig_demand_fast': False}))
    state_file = os.path.join(state_dir, 'sim-a100-01', 'gpus.json')

    def a100_profiles():
        with open(state_file) as handle:
            return [sorted(gi['profile'] for gi in gpu['gpu_instances']) for gpu in json.load(handle)['gpus']]

    assert a100_profiles() == [['1g.10gb'] * 7] * 2
    log = open(str(tmp_path / 'rulebook.log'), 'w+')
    rulebook = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), 'ansible-rulebook'), '--rulebook',
                                 'gpufleet.mig.mig_demand', '-i', inventory, '--vars', str(tmp_path / 'vars.yml')],
                                cwd=str(tmp_path), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: any(q.get('watch') for q in api.requests), 120, rulebook)
        created = time.monotonic()
        api.put(pod('big', {'nvidia.com/mig-7g.80gb': '1'}))
        wait_for(lambda: ['7g.80gb'] in a100_profiles(), 240, rulebook)
        to_instance = time.monotonic() - created
        wait_for(lambda: 'PLAY RECAP' in open(str(tmp_path / 'rulebook.log')).read(), 60, rulebook)
    finally:
        output = stop_rulebook(rulebook, log, shown=8000)
    print('eda-test: unschedulable pod to its 7g.80gb instance on the simulated fleet %.1fs (quiet period 1s, then '
          'ansible-playbook: facts, plan, rollout)' % to_instance)
    # One GPU reshaped (which one is the planner's choice), the other kept.
    assert sorted(a100_profiles()) == [['1g.10gb'] * 7, ['7g.80gb']]
    assert 'create 7g.80gb at 0 for team-a/big' in output and '1 of 1 waiting pod(s) served' in output, output[-4000:]
    with open(os.path.join(state_dir, 'sim-a100-01', 'etc', 'gpufleet-mig', 'layout.json')) as handle:
        assert json.load(handle)['name'].startswith('demand-')
