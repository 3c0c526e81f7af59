# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The event source mig_pending_pods: settings, connections, its survival of each fault of the API server, the
patch that releases a gated pod. Its decisions are tested with their modules: which pod counts (test_pending_pods.py),
one event per burst and the release trigger (test_pending_demand.py), the fast path (test_fast_path.py), what the
API server's answers mean (test_api_watch.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import asyncio
import json
import logging
import os
import ssl
import stat
import sys
import time

import pytest

from ansible_collections.gpufleet.mig.extensions.eda.plugins.event_source import mig_pending_pods as source
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _api_connection as api_connection
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _api_watch as api_watch
from ansible_collections.gpufleet.mig.tests.eda.fake_kube_api import FakeKubeAPI
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.pods import pod, running


# ---- settings and where the API server is -----------------------------------------------------------------

def test_settings_defaults_and_bad_values():
    from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gated_queue import GatedOptions
    assert source.settings({}) == {'quiet_period': 10.0, 'max_delay': 60.0, 'watch_timeout': 300, 'retry_max': 30.0,
                                   'namespace': None, 'fast': False, 'fast_quiet_period': 0.5, 'fast_timeout': 120.0, 'policy': {},
                                   'gated': False, 'gated_release_after': 1800.0, 'gated_resources': [],
                                   'gated_options': GatedOptions(release_after=1800.0, destroy_after=2.0, reshape=True)}
    gated = source.settings({'gated': 'yes', 'gated_release_after': '60', 'gated_order': 'smallest-first', 'gated_placement': 'spread'})
    assert gated['gated'] and gated['gated_options'] == GatedOptions(60.0, 2.0, 'smallest-first', 'spread', True)
    assert source.settings({'gated_destroy_after': 'keep'})['gated_options'].destroy_after is None
    assert source.settings({'gated_destroy_after': '12.5'})['gated_options'].destroy_after == 12.5
    # One namespace's watch cannot see every pod the destroy guard must: no destroy there.
    assert source.settings({'gated': True, 'namespace': 'ml'})['gated_options'] == GatedOptions(destroy_after=None, reshape=False)
    assert source.settings({'quiet_period': '2', 'namespace': 'ml', 'retry_max': ''})['quiet_period'] == 2.0
    # The renamed MIG resources: a list, its JSON or the Python form a rulebook's Jinja renders it in; sorted, once each.
    for given in (['nvidia.com/small-gpu', 'example.com/slice', 'nvidia.com/small-gpu'], '["example.com/slice", "nvidia.com/small-gpu"]',
                  "['nvidia.com/small-gpu', 'example.com/slice']"):
        assert source.settings({'gated_resources': given})['gated_resources'] == ['example.com/slice', 'nvidia.com/small-gpu']
    assert source.settings({'gated_resources': ''})['gated_resources'] == [] == source.settings({'gated_resources': '[]'})['gated_resources']
    for bad, words in (({'quiet_period': 'soon'}, 'quiet_period must be a number'),
                       ({'max_delay': 0}, 'max_delay must be more than 0'),
                       ({'retry_max': -1}, 'retry_max must be more than 0'),
                       ({'quiet_period': 30, 'max_delay': 10}, 'max_delay (10.0) must be at least quiet_period'),
                       ({'fast': 'true', 'quiet_period': 2, 'fast_quiet_period': 3}, 'fast_quiet_period (3.0) must be at most quiet_period'),
                       ({'fast': 'maybe'}, 'fast must be true or false'),
                       ({'gated': 'maybe'}, 'gated must be true or false'),
                       ({'gated_release_after': 0}, 'gated_release_after must be more than 0'),
                       ({'gated_order': 'random'}, "gated_order must be queue or smallest-first: got 'random'"),
                       ({'gated_placement': 'far'}, "gated_placement must be pack or spread: got 'far'"),
                       ({'gated_destroy_after': 'soon'}, "gated_destroy_after must be a number of seconds or keep, got 'soon'"),
                       ({'gated_destroy_after': -1}, 'gated_destroy_after must be a number of seconds, not negative'),
                       ({'policy': '[1]'}, 'policy must be a mapping'),
                       ({'gated_resources': 'nvidia.com/small-gpu'}, "gated_resources must be a list of resource names"),
                       ({'gated_resources': [{'name': 'nvidia.com/small-gpu'}]}, "gated_resources must be a list of resource names"),
                       ({'gated_resources': ['small gpu']}, "gated_resources: 'small gpu' is not a resource name")):
        with pytest.raises(source.SourceError, match=words.replace('(', r'\(').replace(')', r'\)')):
            source.settings(bad)


def test_the_renamed_resources_the_guard_reads_are_logged_once_at_start(caplog):
    with caplog.at_level(logging.INFO):
        source.settings({'gated': True, 'gated_resources': ['nvidia.com/small-gpu']})
        source.settings({'gated': False, 'gated_resources': ['nvidia.com/big-gpu']})
    assert [r.getMessage() for r in caplog.records] == [
        'mig_pending_pods: the destroy guard reads nvidia.com/small-gpu as MIG devices of any profile']


def test_pods_path_all_namespaces_or_one():
    assert source.pods_path(None) == '/api/v1/pods'
    assert source.pods_path('ml') == '/api/v1/namespaces/ml/pods'


def kubeconfig(tmp_path, user, server='https://api:6443/', cluster=None, name='config'):
    config = {'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'ctx',
              'contexts': [{'name': 'ctx', 'context': {'cluster': 'c', 'user': 'u'}}],
              'clusters': [{'name': 'c', 'cluster': dict({'server': server}, **(cluster or {}))}],
              'users': [{'name': 'u', 'user': user}]}
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return str(path)


def test_a_token_kubeconfig_gives_server_and_bearer_header(tmp_path):
    conn = api_connection.connection_from_kubeconfig(kubeconfig(tmp_path, {'token': 'secret-token'}))
    assert conn.server == 'https://api:6443'
    assert conn.headers() == {'Authorization': 'Bearer secret-token'}
    assert not conn.insecure


def test_relative_token_files_are_relative_to_the_kubeconfig(tmp_path):
    (tmp_path / 'token').write_text('from-file\n')
    conn = api_connection.connection_from_kubeconfig(kubeconfig(tmp_path, {'tokenFile': 'token'}, server='http://127.0.0.1:1'))
    assert conn.headers() == {'Authorization': 'Bearer from-file'}


EXEC_PLUGIN = """import json, os, sys
count = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'runs')
runs = int(open(count).read()) + 1 if os.path.exists(count) else 1
open(count, 'w').write(str(runs))
status = {'token': 'exec-token-%d' % runs}
if os.environ.get('EXPIRES'):
    status['expirationTimestamp'] = os.environ['EXPIRES']
print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential', 'status': status}))
"""


def exec_user(tmp_path, expires):
    script = tmp_path / 'plugin.py'
    script.write_text(EXEC_PLUGIN)
    return {'exec': {'apiVersion': 'client.authentication.k8s.io/v1', 'command': sys.executable, 'args': [str(script)],
                     'env': [{'name': 'EXPIRES', 'value': expires}], 'interactiveMode': 'Never'}}


def test_an_exec_plugin_kubeconfig_gets_its_token_from_the_plugin_and_runs_it_again_once_expired(tmp_path):
    conn = api_connection.connection_from_kubeconfig(kubeconfig(tmp_path, exec_user(tmp_path, '2000-01-01T00:00:00Z')))
    # Expired: the kubernetes client's refresh hook runs the plugin again before each request (once at load too).
    assert conn.headers() == {'Authorization': 'Bearer exec-token-2'}
    assert conn.headers() == {'Authorization': 'Bearer exec-token-3'}


def test_an_exec_token_still_valid_is_reused(tmp_path):
    conn = api_connection.connection_from_kubeconfig(kubeconfig(tmp_path, exec_user(tmp_path, '2999-01-01T00:00:00Z')))
    assert conn.headers() == conn.headers() == {'Authorization': 'Bearer exec-token-1'}


def test_an_oidc_auth_provider_kubeconfig_sends_its_id_token(tmp_path):
    # A JWT whose exp is far ahead (the loader checks it before using the id-token).
    import base64
    part = base64.urlsafe_b64encode(json.dumps({'exp': 32503680000}).encode()).decode().rstrip('=')
    id_token = 'e30.%s.sig' % part
    user = {'auth-provider': {'name': 'oidc', 'config': {'id-token': id_token, 'idp-issuer-url': 'https://issuer',
                                                         'client-id': 'k8s'}}}
    conn = api_connection.connection_from_kubeconfig(kubeconfig(tmp_path, user))
    assert conn.headers() == {'Authorization': 'Bearer ' + id_token}


def test_client_certificate_data_goes_to_private_files_and_insecure_is_read(tmp_path):
    import base64
    user = {'client-certificate-data': base64.b64encode(b'CERT').decode(), 'client-key-data': base64.b64encode(b'KEY').decode()}
    cluster = {'insecure-skip-tls-verify': True, 'tls-server-name': 'kubernetes'}
    conn = api_connection.connection_from_kubeconfig(kubeconfig(tmp_path, user, cluster=cluster))
    assert open(conn.cert_file, 'rb').read() == b'CERT' and open(conn.key_file, 'rb').read() == b'KEY'
    assert stat.S_IMODE(os.stat(conn.key_file).st_mode) == 0o600
    assert conn.insecure and conn.headers() == {}
    assert conn.tls_server_name == 'kubernetes'


@pytest.mark.parametrize('context, words', [
    ('missing', 'missing'),
])
def test_kubeconfig_problems_are_one_line_without_the_token(tmp_path, context, words):
    with pytest.raises(source.SourceError, match=words) as failure:
        api_connection.connection_from_kubeconfig(kubeconfig(tmp_path, {'token': 'secret-token'}), context)
    assert 'secret-token' not in str(failure.value) and '\n' not in str(failure.value)


def test_a_kubeconfig_without_the_kubernetes_package_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, 'kubernetes', None)
    with pytest.raises(source.SourceError, match='needs the Python package kubernetes'):
        api_connection.connection_from_kubeconfig(kubeconfig(tmp_path, {'token': 't'}))


def test_in_cluster_connection_only_inside_a_pod_and_its_token_read_at_each_request(tmp_path):
    assert api_connection.connection_in_cluster({}, str(tmp_path)) is None
    (tmp_path / 'token').write_text('sa')
    conn = api_connection.connection_in_cluster({'KUBERNETES_SERVICE_HOST': 'fd00::1', 'KUBERNETES_SERVICE_PORT': '443'}, str(tmp_path))
    assert conn.server == 'https://[fd00::1]:443' and conn.ca_file == str(tmp_path / 'ca.crt')
    assert conn.headers() == {'Authorization': 'Bearer sa'}
    (tmp_path / 'token').write_text('rotated')
    assert conn.headers() == {'Authorization': 'Bearer rotated'}


def test_find_connection_prefers_the_named_kubeconfig_and_refuses_a_missing_one(tmp_path):
    with pytest.raises(source.SourceError, match='does not exist'):
        api_connection.find_connection({'kubeconfig': str(tmp_path / 'nope')}, {})
    path = kubeconfig(tmp_path, {'token': 't'}, server='http://127.0.0.1:9')
    assert api_connection.find_connection({}, {'KUBECONFIG': path}).server == 'http://127.0.0.1:9'


def test_request_options_name_the_tls_server_and_the_proxy_only_when_set():
    assert api_connection.Connection('http://a:1').request_options() == {'ssl': None}
    options = api_connection.Connection('http://a:1', tls_server_name='kubernetes', proxy='http://proxy:3128').request_options()
    assert options == {'ssl': None, 'server_hostname': 'kubernetes', 'proxy': 'http://proxy:3128'}


def test_plain_http_has_no_tls_context_and_https_verifies_unless_told_not_to():
    assert api_connection.Connection('http://127.0.0.1:1').ssl_context() is None
    verified = api_connection.Connection('https://api:6443').ssl_context()
    assert verified.check_hostname and verified.verify_mode == ssl.CERT_REQUIRED
    insecure = api_connection.Connection('https://api:6443', insecure=True).ssl_context()
    assert not insecure.check_hostname and insecure.verify_mode == ssl.CERT_NONE


# ---- the source against a fake API server, through every fault ------------------------------------------------

TOKEN = 'unit-test-token-9c2e'


@pytest.fixture
def api():
    fake = FakeKubeAPI(TOKEN).start()
    yield fake
    fake.stop()


class Run(object):
    """The source's main() on an event loop of its own, driven step by step: each step does something to the
    fake API server, then waits until the events put so far satisfy a condition (the source still running)."""

    def __init__(self, api, tmp_path, **args):
        self.api = api
        self.events = []
        self.args = dict({'kubeconfig': kubeconfig(tmp_path, {'token': TOKEN}, server=api.url), 'quiet_period': 0.2,
                          'max_delay': 5, 'retry_max': 0.05, 'watch_timeout': 30}, **args)

    def watching(self):
        return self.api.count(watch=True, status=200) > 0

    def told(self, name):
        return lambda: any('team-a/' + name in event['mig_pending_pods']['new'] for event in self.events)

    def __call__(self, steps, timeout=20):
        run = self

        class Queue(object):
            async def put(self, event):
                run.events.append(event)

        async def drive():
            task = asyncio.ensure_future(source.main(Queue(), self.args))
            try:
                for action, condition in steps:
                    action()
                    deadline = time.monotonic() + timeout
                    while not condition():
                        assert not task.done(), 'the source ended: %r' % (task.exception(),)
                        assert time.monotonic() < deadline, 'timed out waiting in step %r' % (action,)
                        await asyncio.sleep(0.02)
                assert not task.done()
            finally:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass

        asyncio.run(drive())
        return self.events


def nothing():
    pass


def test_the_source_lists_page_by_page_then_watches_from_the_lists_version(api, tmp_path, monkeypatch):
    monkeypatch.setattr(source, 'PAGE_SIZE', 2)
    for name in ('a', 'b', 'c', 'd', 'e'):
        api.put(pod(name))
    run = Run(api, tmp_path)
    events = run([(nothing, lambda: run.events)])
    assert events[0]['mig_pending_pods']['new'] == ['team-a/a', 'team-a/b', 'team-a/c', 'team-a/d', 'team-a/e']
    lists = [q for q in api.requests if not q.get('watch')]
    assert [q.get('continue') for q in lists] == [None, '2', '4'] and {q['limit'] for q in lists} == {'2'}
    watch = [q for q in api.requests if q.get('watch')][0]
    assert watch['resourceVersion'] == '105'
    assert {q['fieldSelector'] for q in api.requests} == {'status.phase!=Succeeded,status.phase!=Failed'}


def test_429_waits_its_retry_after_then_lists_again(api, tmp_path, caplog):
    api.fail_next(1, 429, {'Retry-After': '1'})
    api.put(pod('a'))
    run = Run(api, tmp_path)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        run([(nothing, run.told('a'))])
    assert time.monotonic() - started >= 1
    assert api.answers[:2] == [429, 200]
    assert 'HTTP 429 Too Many Requests on /api/v1/pods); listing the pods again in 1.0s' in caplog.text


@pytest.mark.parametrize('fault, words', [
    (lambda api: (api.fail_next(2, 503), api.compact()), 'HTTP 503 on /api/v1/pods'),
    (lambda api: (api.fail_next(1, 500), api.compact()), 'HTTP 500 on /api/v1/pods'),
    (lambda api: api.watch_error(500, 'InternalError', 'etcdserver: request timed out'), 'code 500, InternalError'),
    (lambda api: api.watch_error(429, 'TooManyRequests', 'storage is (re)initializing'), 'code 429, TooManyRequests'),
    (lambda api: api.drop_watches(), 'unreachable or its answer unreadable (ClientPayloadError'),
    (lambda api: (api.fail_next(2, 401), api.compact()), 'HTTP 401 Unauthorized'),
    (lambda api: (api.fail_next(2, 403), api.compact()), 'HTTP 403 Forbidden'),
])
def test_each_fault_is_logged_backed_off_and_followed_by_a_new_list_and_the_source_keeps_telling(api, tmp_path, caplog, fault, words):
    api.put(pod('a'))
    run = Run(api, tmp_path)
    with caplog.at_level(logging.INFO):
        run([(nothing, run.told('a')),
             (lambda: fault(api), lambda: api.count(watch=False, status=200) >= 2 and run.watching()),
             (lambda: api.put(pod('b')), run.told('b'))])
    assert words in caplog.text and 'listing the pods again in' in caplog.text
    assert TOKEN not in caplog.text
    assert [event['mig_pending_pods']['new'] for event in run.events] == [['team-a/a'], ['team-a/b']]


def test_an_expired_version_lists_again_at_once_without_backoff(api, tmp_path, caplog):
    run = Run(api, tmp_path, retry_max=5)
    with caplog.at_level(logging.INFO):
        run([(nothing, run.watching),
             (api.compact, lambda: api.count(watch=False) >= 2),
             (lambda: api.put(pod('b')), run.told('b'))], timeout=3)
    assert 'expired (410 Gone)' in caplog.text and 'listing the pods again in' not in caplog.text


def test_a_line_too_long_is_skipped_and_the_pod_read_by_the_next_list(api, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(api_watch, 'MAX_LINE_BYTES', 64 * 1024)
    big = pod('big')
    big['metadata']['annotations'] = {'huge': 'x' * 100 * 1024}
    run = Run(api, tmp_path)
    with caplog.at_level(logging.WARNING):
        run([(nothing, run.watching), (lambda: api.put(big), run.told('big'))])
    assert 'over the 65536 the source reads; listing the pods again' in caplog.text


def test_a_401_reads_the_kubeconfig_again_so_a_renewed_token_is_used(api, tmp_path):
    run = Run(api, tmp_path)
    api.token = 'renewed'
    path = run.args['kubeconfig']

    def renew():
        with open(path) as handle:
            config = json.load(handle)
        config['users'][0]['user']['token'] = 'renewed'
        with open(path, 'w') as handle:
            json.dump(config, handle)

    api.put(pod('a'))
    run([(nothing, lambda: api.count(status=401) >= 1), (renew, run.told('a'))])


def test_a_pod_that_ends_on_a_gpu_node_re_plans_for_the_pods_still_waiting(api, tmp_path):
    api.put(running('train'))
    api.put(pod('a'))
    run = Run(api, tmp_path)
    run([(nothing, run.told('a')),
         (lambda: api.put(running('train', phase='Succeeded')), lambda: len(run.events) == 2),
         (lambda: api.put(running('infer')), lambda: True),
         (lambda: api.delete('team-a', 'infer'), lambda: len(run.events) == 3)])
    assert [event['mig_pending_pods']['released'] for event in run.events] == [[], ['team-a/train'], ['team-a/infer']]
    assert [r['pod'] for r in run.events[2]['mig_pending_pods']['requests']] == ['team-a/a']


# ---- the seam for gated pods: releasing one ------------------------------------------------------------------

def release(api, tmp_path, subject, node):
    async def run():
        import aiohttp
        conn = api_connection.find_connection({'kubeconfig': kubeconfig(tmp_path, {'token': TOKEN}, server=api.url)}, {})
        async with aiohttp.ClientSession() as session:
            return await source.release_gated_pod(session, conn, subject, node)
    return asyncio.run(run())


def test_releasing_a_gated_pod_patches_off_only_the_slice_gate_and_pins_it_to_the_node(api, tmp_path):
    gated = pod('gated')
    gated['spec']['schedulingGates'] = [{'name': 'example.com/other'}, {'name': 'gpufleet.mig/slice'}]
    api.put(gated)
    answer = release(api, tmp_path, gated, 'gpu-a')
    path, content_type, body = api.patches[-1]
    assert path == '/api/v1/namespaces/team-a/pods/gated'
    assert content_type == 'application/strategic-merge-patch+json'
    assert body == source.release_patch(gated, 'gpu-a')
    assert answer['spec']['schedulingGates'] == [{'name': 'example.com/other'}]
    assert answer['spec']['affinity']['nodeAffinity']['requiredDuringSchedulingIgnoredDuringExecution'] == {
        'nodeSelectorTerms': [{'matchFields': [{'key': 'metadata.name', 'operator': 'In', 'values': ['gpu-a']}]}]}


def test_releasing_a_pod_that_is_gone_is_a_refusal_naming_the_status(api, tmp_path):
    with pytest.raises(source.ApiRefusal) as info:
        release(api, tmp_path, pod('gone'), None)
    assert info.value.status == 404 and api.patches[-1][2] == source.release_patch(pod('gone'))


# ---- the create-only fast path, through the source --------------------------------------------------------

def small(name='small', **extra):
    return pod(name, {'nvidia.com/mig-1g.20gb': '1'}, **extra)


def test_the_source_watches_the_nodes_with_fast_and_tells_the_fast_event(api, tmp_path):
    api.put(small())
    run = Run(api, tmp_path, fast=True, fast_quiet_period=0.1)
    # The fake lists no Node: nothing is fast; the pods path keeps telling.
    events = run([(nothing, lambda: run.events)])
    assert events[0]['mig_pending_pods']['new'] == ['team-a/small']
    assert '/api/v1/nodes' in api.paths


@pytest.mark.parametrize('given', [{'floor': {'n': {'1g.10gb': 1}}}, '{"floor": {"n": {"1g.10gb": 1}}}',
                                   "{'floor': {'n': {'1g.10gb': 1}}}"], ids=['mapping', 'json', 'python'])
def test_the_policy_as_a_rulebook_renders_it(given):
    assert source.settings({'policy': given, 'fast': 'True'})['policy'] == {'floor': {'n': {'1g.10gb': 1}}}


# ---- the gated queue, through the source -------------------------------------------------------------------

def test_the_source_pins_a_gated_pod_to_the_node_where_an_idle_instance_waits(api, tmp_path, caplog):
    from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.test_fast_path import gpu_node
    from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.test_gated_demand import IDLE_1G, gated
    caplog.set_level(logging.INFO)
    api.put_node(gpu_node(instances=IDLE_1G))
    api.put(gated('a'))
    run = Run(api, tmp_path, gated=True)
    run([(nothing, lambda: api.patches)])
    path, dummy, body = api.patches[0]
    assert path == '/api/v1/namespaces/team-a/pods/a' and body == source.release_patch(gated('a'), 'node-1')
    assert 'pinned team-a/a to node node-1' in caplog.text
    assert len(api.patches) == 1 and run.events == []   # a gated pod is no pending pod of the full path


def test_a_pod_the_gated_queue_pinned_waits_for_it_not_for_the_full_path():
    """Pinned, its gate gone, it is unschedulable until its node advertises the instance made for it: with the gated
    queue it is no pending pod of the full path (which would plan for it again); once bound it is a holder as any."""
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._gated_demand import GatedDemand
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_demand import PendingDemand
    from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.test_gated_demand import gated, patched
    waiting = patched(gated('a'), 'node-1')
    waiting['status'] = pod('a')['status']   # the scheduler's Unschedulable: Insufficient nvidia.com/mig-1g.10gb
    for with_queue, told in ((True, None), (False, ['team-a/a'])):
        demand = PendingDemand(quiet_period=1, max_delay=5)
        watched = source.Watched(demand, GatedDemand(token='t') if with_queue else None, asyncio.Event())
        watched.replace_all([waiting], 0)
        event = demand.take_event(10)
        assert (event['mig_pending_pods']['new'] if event else None) == told
    bound = dict(waiting, spec=dict(waiting['spec'], nodeName='node-1'), status={'phase': 'Running'})
    demand = PendingDemand(quiet_period=1, max_delay=5)
    watched = source.Watched(demand, GatedDemand(token='t'), asyncio.Event())
    watched.update(bound, 0)
    assert demand.holders == {'team-a/a'}


def test_a_failed_pin_is_logged_and_the_pod_decided_again_at_the_next_change(api, tmp_path, caplog, monkeypatch):
    from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.test_fast_path import gpu_node
    from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.test_gated_demand import IDLE_1G, gated
    caplog.set_level(logging.INFO)
    real, calls = source.release_gated_pod, []

    async def refused_once(session, conn, pod, node=None):
        calls.append(pod['metadata']['name'])
        if len(calls) == 1:
            raise RuntimeError('injected')
        return await real(session, conn, pod, node)
    monkeypatch.setattr(source, 'release_gated_pod', refused_once)
    api.put_node(gpu_node(instances=IDLE_1G))
    api.put(gated('a'))
    run = Run(api, tmp_path, gated=True)
    run([(nothing, lambda: calls), (lambda: api.put(pod('other', {'cpu': '1'})), lambda: api.patches)])
    assert 'cannot take the slice gate off team-a/a (RuntimeError: injected)' in caplog.text
    assert calls == ['a', 'a'] and api.patches[0][0] == '/api/v1/namespaces/team-a/pods/a'
