# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The event source mig_pending_pods: one event per burst, the release trigger, settings, connections, and its
survival of each fault of the API server (which pod counts: tests/unit/plugins/module_utils/test_pending_pods.py)."""

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
from ansible_collections.gpufleet.mig.tests.eda.fake_kube_api import FakeKubeAPI
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.pods import pod


# ---- one event per burst ----------------------------------------------------------------------------------

def demand():
    return source.PendingDemand(quiet_period=10, max_delay=60)


def test_a_burst_gives_one_event_after_the_quiet_period_with_every_pod():
    d = demand()
    d.update(pod('a'), 0)
    d.update(pod('b'), 4)
    assert d.take_event(13.9) is None
    assert d.seconds_until_due(4) == 10
    event = d.take_event(14)
    assert [r['pod'] for r in event['mig_pending_pods']['requests']] == ['team-a/a', 'team-a/b']
    assert event['mig_pending_pods']['new'] == ['team-a/a', 'team-a/b']
    assert event['mig_pending_pods']['burst_seconds'] == 14
    assert d.take_event(100) is None and d.seconds_until_due(100) is None


def test_pods_that_keep_coming_are_told_at_max_delay():
    d = demand()
    for second in range(0, 70, 5):
        d.update(pod('p%d' % second), second)
        event = d.take_event(second)
        if event:
            break
    assert second == 60 and len(event['mig_pending_pods']['requests']) == 13


def test_updates_of_pods_already_told_open_no_burst_and_a_new_pod_tells_all_still_pending():
    d = demand()
    d.update(pod('a'), 0)
    d.take_event(10)
    d.update(pod('a', resource_version='2'), 20)
    assert d.seconds_until_due(20) is None
    d.update(pod('b'), 30)
    event = d.take_event(40)
    assert [r['pod'] for r in event['mig_pending_pods']['requests']] == ['team-a/a', 'team-a/b']
    assert event['mig_pending_pods']['new'] == ['team-a/b']


def test_a_pod_that_got_scheduled_leaves_and_a_burst_of_only_gone_pods_tells_nothing():
    d = demand()
    d.update(pod('a'), 0)
    d.update(pod('a', phase='Running', node_name='gpu-1'), 3)
    assert d.seconds_until_due(3) is None and d.take_event(20) is None
    d.update(pod('b'), 30)
    d.update(pod('b'), 31, deleted=True)
    assert d.take_event(50) is None


def test_a_pod_that_leaves_and_comes_back_is_new_again():
    d = demand()
    d.update(pod('a'), 0)
    d.take_event(10)
    d.update(pod('a'), 11, deleted=True)
    d.update(pod('a'), 12)
    assert d.take_event(22)['mig_pending_pods']['new'] == ['team-a/a']


def test_a_relist_drops_pods_that_are_gone_and_keeps_told_ones_quiet():
    d = demand()
    d.update(pod('a'), 0)
    d.update(pod('b'), 0)
    d.take_event(10)
    d.replace_all([pod('b'), pod('other', resources={'cpu': '1'})], 20)
    assert sorted(d.pending) == ['team-a/b'] and d.seconds_until_due(20) is None
    d.replace_all([pod('b'), pod('c')], 30)
    assert d.take_event(40)['mig_pending_pods']['new'] == ['team-a/c']


def test_the_same_pod_name_in_two_namespaces_is_two_requests():
    d = demand()
    d.update(pod('p', namespace='a'), 0)
    d.update(pod('p', namespace='b'), 0)
    assert len(d.take_event(10)['mig_pending_pods']['requests']) == 2


# ---- the release trigger -----------------------------------------------------------------------------------

def running(name, phase='Running', **kwargs):
    return pod(name, phase=phase, node_name='gpu-1', scheduled=('True', ''), **kwargs)


def test_a_holder_that_ends_while_a_told_pod_waits_tells_again_after_the_quiet_period():
    d = demand()
    d.update(running('done'), 0)
    d.update(pod('a'), 0)
    d.take_event(10)
    d.update(running('done', phase='Succeeded'), 20, deleted=True)
    assert d.seconds_until_due(20) == 10
    event = d.take_event(30)['mig_pending_pods']
    assert [r['pod'] for r in event['requests']] == ['team-a/a']
    assert event['new'] == [] and event['released'] == ['team-a/done']


def test_releases_are_debounced_into_one_event():
    d = demand()
    for name in ('w0', 'w1', 'w2'):
        d.update(running(name), 0)
    d.update(pod('a'), 0)
    d.take_event(10)
    d.update(running('w0'), 20, deleted=True)
    d.update(running('w1', phase='Failed'), 25)
    d.update(running('w2'), 27, deleted=True)
    assert d.take_event(36) is None
    assert d.take_event(37)['mig_pending_pods']['released'] == ['team-a/w0', 'team-a/w1', 'team-a/w2']
    assert d.take_event(100) is None


def test_a_release_while_nothing_waits_tells_nothing_so_a_run_that_served_everyone_ends_the_loop():
    d = demand()
    d.update(running('done'), 0)
    d.update(running('done'), 5, deleted=True)
    assert d.seconds_until_due(5) is None and d.take_event(100) is None
    # A release whose waiting pods were all placed before it was due tells nothing either.
    d.update(running('other'), 10)
    d.update(pod('a'), 10)
    d.take_event(20)
    d.update(running('other'), 30, deleted=True)
    d.update(pod('a', phase='Running', node_name='gpu-1', scheduled=('True', '')), 32)
    assert d.seconds_until_due(32) is None and d.take_event(50) is None


def test_a_pod_that_never_held_mig_devices_releases_nothing():
    d = demand()
    d.update(pod('a'), 0)
    d.take_event(10)
    d.update(running('cpu', resources={'cpu': '1'}), 11)
    d.update(running('cpu', resources={'cpu': '1'}), 12, deleted=True)
    d.update(pod('gone-before-bound'), 13, deleted=True)
    assert d.seconds_until_due(13) is None


def test_a_relist_that_misses_a_holder_is_a_release():
    d = demand()
    d.replace_all([running('done'), pod('a')], 0)
    d.take_event(10)
    d.replace_all([pod('a')], 20)
    assert d.take_event(30)['mig_pending_pods']['released'] == ['team-a/done']


# ---- failures and when to try again -------------------------------------------------------------------------

def test_backoff_doubles_to_the_cap_and_starts_over_after_two_quiet_minutes():
    retry = source.Retry(retry_max=30)
    assert [retry.delay(now) for now in (0, 1, 3, 7, 15, 31, 61)] == [1, 2, 4, 8, 16, 30, 30]
    # 119 s after the last retry began: still failing, still at the cap; 120 s: a fresh start.
    assert retry.delay(61 + 30 + 119) == 30
    assert retry.delay(210 + 30 + 120) == 1


def test_backoff_never_shorter_than_retry_after_and_retry_after_capped():
    retry = source.Retry(retry_max=30)
    assert retry.delay(0, retry_after=7) == 7
    assert retry.delay(10, retry_after=0) == 2
    assert retry.delay(20, retry_after=86400) == source.RETRY_AFTER_MAX


def test_a_small_retry_max_is_also_the_first_wait():
    assert source.Retry(retry_max=0.05).delay(0) == 0.05


def test_retry_after_in_seconds_or_as_an_http_date():
    assert source.retry_after_seconds('3', 0) == 3
    assert source.retry_after_seconds(' 0 ', 0) == 0
    assert source.retry_after_seconds('Wed, 21 Oct 2015 07:28:10 GMT', 1445412480) == 10
    assert source.retry_after_seconds('Wed, 21 Oct 2015 07:28:00 GMT', 1445412490) == 0
    for unreadable in (None, '', 'soon', '-1', '1.5'):
        assert source.retry_after_seconds(unreadable, 0) is None


@pytest.mark.parametrize('status, words', [
    (401, 'refused the credentials (HTTP 401 Unauthorized on /api/v1/pods): the token or certificate expired or was revoked'),
    (403, 'refused access (HTTP 403 Forbidden on /api/v1/pods): the account needs get, list and watch on pods'),
    (429, 'throttling (HTTP 429 Too Many Requests on /api/v1/pods)'),
    (500, 'failed (HTTP 500 on /api/v1/pods)'),
    (503, 'failed (HTTP 503 on /api/v1/pods)'),
    (404, 'answered HTTP 404 to /api/v1/pods'),
])
def test_every_answer_but_410_is_a_refusal_to_retry_with_its_status_and_retry_after(status, words):
    refusal = source.refusal(status, '/api/v1/pods', retry_after=4)
    assert isinstance(refusal, source.ApiRefusal) and words in str(refusal)
    assert (refusal.status, refusal.retry_after) == (status, 4)


def test_410_and_a_watch_error_410_mean_list_again():
    with pytest.raises(source.Expired):
        source.refusal(410, '/api/v1/pods')
    with pytest.raises(source.Expired):
        source.watch_error({'code': 410, 'reason': 'Expired'})


def test_a_watch_error_other_than_410_is_a_refusal_naming_code_reason_and_message():
    refusal = source.watch_error({'code': 500, 'reason': 'InternalError', 'message': 'etcdserver: request timed out'})
    assert refusal.status == 500
    assert str(refusal) == ('the watch ended with an error from the API server (code 500, InternalError): '
                            'etcdserver: request timed out')
    assert source.watch_error({}).status == 0


def test_watch_lines_are_cut_across_chunks_and_blank_lines_skipped():
    lines = source.WatchLines(max_bytes=100)
    assert lines.feed(b'{"a":') == []
    assert lines.feed(b'1}\n\n{"b"') == [b'{"a":1}']
    assert lines.feed(b':2}\n{"c":3}\n') == [b'{"b":2}', b'{"c":3}']
    assert bytes(lines.partial) == b''


def test_a_line_over_the_limit_is_refused_whether_finished_or_not_and_the_reader_starts_clean():
    lines = source.WatchLines(max_bytes=10)
    with pytest.raises(source.OversizedLine, match='11 bytes, over the 10'):
        lines.feed(b'x' * 11 + b'\n')
    assert lines.feed(b'{"ok":1}\n') == [b'{"ok":1}']
    with pytest.raises(source.OversizedLine, match='more than 11 bytes'):
        lines.feed(b'y' * 11)
    assert lines.feed(b'{"ok":2}\n') == [b'{"ok":2}']
    assert source.WatchLines(max_bytes=10).feed(b'x' * 10 + b'\n') == [b'x' * 10]


def test_the_default_line_limit_reads_a_pod_over_aiohttps_512_kib():
    line = json.dumps({'type': 'ADDED', 'object': pod('big')}).encode()[:-1] + b', "pad": "%s"}' % (b'x' * 600 * 1024)
    assert source.WatchLines().feed(line + b'\n') == [line]


# ---- settings and where the API server is -----------------------------------------------------------------

def test_settings_defaults_and_bad_values():
    assert source.settings({}) == {'quiet_period': 10.0, 'max_delay': 60.0, 'watch_timeout': 300, 'retry_max': 30.0,
                                   'namespace': None, 'fast': False, 'fast_quiet_period': 0.5, 'fast_timeout': 120.0, 'policy': {}}
    assert source.settings({'quiet_period': '2', 'namespace': 'ml', 'retry_max': ''})['quiet_period'] == 2.0
    for bad, words in (({'quiet_period': 'soon'}, 'quiet_period must be a number'),
                       ({'max_delay': 0}, 'max_delay must be more than 0'),
                       ({'retry_max': -1}, 'retry_max must be more than 0'),
                       ({'quiet_period': 30, 'max_delay': 10}, 'max_delay (10.0) must be at least quiet_period'),
                       ({'fast': 'true', 'quiet_period': 2, 'fast_quiet_period': 3}, 'fast_quiet_period (3.0) must be at most quiet_period'),
                       ({'fast': 'maybe'}, 'fast must be true or false'),
                       ({'policy': '[1]'}, 'policy must be a mapping')):
        with pytest.raises(source.SourceError, match=words.replace('(', r'\(').replace(')', r'\)')):
            source.settings(bad)


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
    conn = source.connection_from_kubeconfig(kubeconfig(tmp_path, {'token': 'secret-token'}))
    assert conn.server == 'https://api:6443'
    assert conn.headers() == {'Authorization': 'Bearer secret-token'}
    assert not conn.insecure


def test_relative_token_files_are_relative_to_the_kubeconfig(tmp_path):
    (tmp_path / 'token').write_text('from-file\n')
    conn = source.connection_from_kubeconfig(kubeconfig(tmp_path, {'tokenFile': 'token'}, server='http://127.0.0.1:1'))
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
    conn = source.connection_from_kubeconfig(kubeconfig(tmp_path, exec_user(tmp_path, '2000-01-01T00:00:00Z')))
    # Expired: the kubernetes client's refresh hook runs the plugin again before each request (once at load too).
    assert conn.headers() == {'Authorization': 'Bearer exec-token-2'}
    assert conn.headers() == {'Authorization': 'Bearer exec-token-3'}


def test_an_exec_token_still_valid_is_reused(tmp_path):
    conn = source.connection_from_kubeconfig(kubeconfig(tmp_path, exec_user(tmp_path, '2999-01-01T00:00:00Z')))
    assert conn.headers() == conn.headers() == {'Authorization': 'Bearer exec-token-1'}


def test_an_oidc_auth_provider_kubeconfig_sends_its_id_token(tmp_path):
    # A JWT whose exp is far ahead (the loader checks it before using the id-token).
    import base64
    part = base64.urlsafe_b64encode(json.dumps({'exp': 32503680000}).encode()).decode().rstrip('=')
    id_token = 'e30.%s.sig' % part
    user = {'auth-provider': {'name': 'oidc', 'config': {'id-token': id_token, 'idp-issuer-url': 'https://issuer',
                                                         'client-id': 'k8s'}}}
    conn = source.connection_from_kubeconfig(kubeconfig(tmp_path, user))
    assert conn.headers() == {'Authorization': 'Bearer ' + id_token}


def test_client_certificate_data_goes_to_private_files_and_insecure_is_read(tmp_path):
    import base64
    user = {'client-certificate-data': base64.b64encode(b'CERT').decode(), 'client-key-data': base64.b64encode(b'KEY').decode()}
    conn = source.connection_from_kubeconfig(kubeconfig(tmp_path, user, cluster={'insecure-skip-tls-verify': True,
                                                                                 'tls-server-name': 'kubernetes'}))
    assert open(conn.cert_file, 'rb').read() == b'CERT' and open(conn.key_file, 'rb').read() == b'KEY'
    assert stat.S_IMODE(os.stat(conn.key_file).st_mode) == 0o600
    assert conn.insecure and conn.headers() == {}
    assert conn.tls_server_name == 'kubernetes'


@pytest.mark.parametrize('context, words', [
    ('missing', 'missing'),
])
def test_kubeconfig_problems_are_one_line_without_the_token(tmp_path, context, words):
    with pytest.raises(source.SourceError, match=words) as failure:
        source.connection_from_kubeconfig(kubeconfig(tmp_path, {'token': 'secret-token'}), context)
    assert 'secret-token' not in str(failure.value) and '\n' not in str(failure.value)


def test_a_kubeconfig_without_the_kubernetes_package_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, 'kubernetes', None)
    with pytest.raises(source.SourceError, match='needs the Python package kubernetes'):
        source.connection_from_kubeconfig(kubeconfig(tmp_path, {'token': 't'}))


def test_in_cluster_connection_only_inside_a_pod_and_its_token_read_at_each_request(tmp_path):
    assert source.connection_in_cluster({}, str(tmp_path)) is None
    (tmp_path / 'token').write_text('sa')
    conn = source.connection_in_cluster({'KUBERNETES_SERVICE_HOST': 'fd00::1', 'KUBERNETES_SERVICE_PORT': '443'}, str(tmp_path))
    assert conn.server == 'https://[fd00::1]:443' and conn.ca_file == str(tmp_path / 'ca.crt')
    assert conn.headers() == {'Authorization': 'Bearer sa'}
    (tmp_path / 'token').write_text('rotated')
    assert conn.headers() == {'Authorization': 'Bearer rotated'}


def test_find_connection_prefers_the_named_kubeconfig_and_refuses_a_missing_one(tmp_path):
    with pytest.raises(source.SourceError, match='does not exist'):
        source.find_connection({'kubeconfig': str(tmp_path / 'nope')}, {})
    path = kubeconfig(tmp_path, {'token': 't'}, server='http://127.0.0.1:9')
    assert source.find_connection({}, {'KUBECONFIG': path}).server == 'http://127.0.0.1:9'


def test_request_options_name_the_tls_server_and_the_proxy_only_when_set():
    assert source.Connection('http://a:1').request_options() == {'ssl': None}
    options = source.Connection('http://a:1', tls_server_name='kubernetes', proxy='http://proxy:3128').request_options()
    assert options == {'ssl': None, 'server_hostname': 'kubernetes', 'proxy': 'http://proxy:3128'}


def test_plain_http_has_no_tls_context_and_https_verifies_unless_told_not_to():
    assert source.Connection('http://127.0.0.1:1').ssl_context() is None
    verified = source.Connection('https://api:6443').ssl_context()
    assert verified.check_hostname and verified.verify_mode == ssl.CERT_REQUIRED
    insecure = source.Connection('https://api:6443', insecure=True).ssl_context()
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
    monkeypatch.setattr(source, 'MAX_LINE_BYTES', 64 * 1024)
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


# ---- the create-only fast path --------------------------------------------------------------------------------

def gpu_node(name='node-1', host='h1', instances=(('1g.10gb', 0, ['team-a/held']),), outcome=None, taints=()):
    from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_fast import gpus_annotation
    from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.test_demand_planner import gpu
    annotations = {'gpufleet.mig/gpus': gpus_annotation(host, {'gpus': [gpu(0, instances)]})}
    if outcome:
        annotations['gpufleet.mig/demand-create'] = json.dumps(outcome)
    return {'metadata': {'name': name, 'labels': {'kubernetes.io/hostname': name}, 'annotations': annotations},
            'spec': {'taints': [dict(zip(('key', 'value', 'effect'), t)) for t in taints]},
            'status': {'allocatable': {'cpu': '8', 'memory': '32Gi'}}}


def fast_demand(**extra):
    fast = source.FastPath(quiet_period=1, timeout=60, token='t', **extra)
    return source.PendingDemand(quiet_period=10, max_delay=60, fast=fast)


def small(name='small', **extra):
    return pod(name, {'nvidia.com/mig-1g.20gb': '1'}, **extra)


def test_a_pod_that_fits_in_free_slices_is_one_fast_event_after_the_short_quiet_period_and_no_full_event():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small(), 100)
    assert state.seconds_until_due(100) == 1.0
    assert state.take_fast_events(100.5) == []
    [event] = state.take_fast_events(101)
    change = event['mig_demand_create']
    assert change['run'] == 'fast-t-1' and change['host'] == 'h1' and change['node'] == 'node-1'
    assert change['pods'] == ['team-a/small'] and change['gpus'] == {'0': {'1g.20gb': 1}}
    assert list(change['layout']['config']) == [change['layout']['name']]
    # Told: the full path's burst has nothing left to tell.
    assert state.take_event(110) is None and state.seconds_until_due(110) == 51.0   # the deadline: 101 + 60


def test_a_burst_splits_the_pod_that_fits_goes_fast_the_other_to_the_full_path():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small(), 100)
    state.update(pod('whole', {'nvidia.com/mig-7g.80gb': '1'}), 100.2)
    [fast] = state.take_fast_events(101.2)
    assert fast['mig_demand_create']['pods'] == ['team-a/small']
    assert state.take_event(105) is None
    event = state.take_event(110.2)['mig_pending_pods']
    assert event['new'] == ['team-a/whole']
    # The fast pod is not planned again by the full path while its create is under way (its instance is being made).
    assert [r['pod'] for r in event['requests']] == ['team-a/whole']


def test_a_refused_fast_run_gives_its_pods_to_the_full_path_at_once_and_never_fast_again():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small(), 100)
    run = state.take_fast_events(101)[0]['mig_demand_create']['run']
    # Another run's outcome changes nothing.
    state.update_node(gpu_node(outcome={'run': 'fast-other-1', 'result': 'refused'}), 102)
    assert state.take_event(200) is None
    state.update_node(gpu_node(outcome={'run': run, 'result': 'refused', 'reason': 'the free slices changed'}), 202)
    assert state.take_fast_events(203) == []
    event = state.take_event(212)['mig_pending_pods']
    assert event['new'] == ['team-a/small'] and [r['pod'] for r in event['requests']] == ['team-a/small']
    # Still waiting and updated: not a candidate of the fast path again.
    state.update(small(resource_version='2'), 213)
    assert state.take_fast_events(300) == [] and state.fast.candidates == set()


def test_a_created_run_leaves_its_pods_to_the_scheduler_until_the_timeout():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small(), 100)
    run = state.take_fast_events(101)[0]['mig_demand_create']['run']
    state.update_node(gpu_node(instances=(('1g.10gb', 0, ['team-a/held']), ('1g.20gb', 2, [])),
                               outcome={'run': run, 'result': 'created'}), 105)
    assert state.take_fast_events(150) == [] and state.take_event(150) is None
    assert state.seconds_until_due(150) == 11.0   # the pod's deadline: 101 + 60
    assert state.take_fast_events(161) == []
    assert state.take_event(171)['mig_pending_pods']['new'] == ['team-a/small']


def test_a_pod_bound_meanwhile_is_forgotten():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small(), 100)
    state.take_fast_events(101)
    state.update(small(phase='Running', scheduled=('True', ''), node_name='node-1'), 110)
    assert state.fast.in_flight == {} and state.seconds_until_due(500) is None


def test_a_host_with_a_run_under_way_is_not_decided_on_until_the_run_tells_its_outcome():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small(), 100)
    run = state.take_fast_events(101)[0]['mig_demand_create']['run']
    state.update(small('second'), 102)
    assert state.take_fast_events(103) == []          # the host is busy: the pod is left to the full path
    assert state.take_event(112)['mig_pending_pods']['new'] == ['team-a/second']
    state.update_node(gpu_node(instances=(('1g.10gb', 0, ['team-a/held']), ('1g.20gb', 2, [])),
                               outcome={'run': run, 'result': 'created'}), 113)
    state.update(small('third'), 114)
    [event] = state.take_fast_events(115)
    # The second pod, given up on by nobody but told to the full path already, may still be served here: both fit.
    assert event['mig_demand_create']['run'] == 'fast-t-2'
    assert 'team-a/third' in event['mig_demand_create']['pods']


def test_a_pod_the_node_does_not_admit_is_not_fast():
    state = fast_demand()
    state.update_node(gpu_node(taints=[('dedicated', 'gpu', 'NoSchedule')]), 0)
    state.update(small(), 100)
    assert state.take_fast_events(101) == []
    assert state.take_event(110)['mig_pending_pods']['new'] == ['team-a/small']


def test_a_deleted_node_or_a_relist_without_it_gives_its_run_back():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small(), 100)
    state.take_fast_events(101)
    state.replace_nodes([], 102)
    assert state.fast.hosts == {} and state.fast.runs == {}
    assert state.take_event(112)['mig_pending_pods']['new'] == ['team-a/small']


def test_a_node_whose_annotation_this_version_cannot_read_has_no_fast_path(caplog):
    node = gpu_node()
    node['metadata']['annotations']['gpufleet.mig/gpus'] = '{"version": 7}'
    state = fast_demand()
    with caplog.at_level(logging.WARNING):
        state.update_node(node, 0)
    assert state.fast.hosts == {} and 'node node-1: gpufleet.mig/gpus: version 7' in caplog.text
    state.update(small(), 100)
    assert state.take_fast_events(101) == []


def test_the_source_watches_the_nodes_with_fast_and_tells_the_fast_event(api, tmp_path):
    api.put(small())
    run = Run(api, tmp_path, fast=True, fast_quiet_period=0.1)
    # The fake serves pods only: the node list is refused (404) and retried; the pods path keeps telling.
    events = run([(nothing, lambda: run.events)])
    assert events[0]['mig_pending_pods']['new'] == ['team-a/small']
    assert '/api/v1/nodes' in api.paths


@pytest.mark.parametrize('given', [{'floor': {'n': {'1g.10gb': 1}}}, '{"floor": {"n": {"1g.10gb": 1}}}',
                                   "{'floor': {'n': {'1g.10gb': 1}}}"], ids=['mapping', 'json', 'python'])
def test_the_policy_as_a_rulebook_renders_it(given):
    assert source.settings({'policy': given, 'fast': 'True'})['policy'] == {'floor': {'n': {'1g.10gb': 1}}}


def test_the_instance_a_fast_pod_got_is_not_free_for_the_next_one_though_the_annotation_says_so():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small('first'), 100)
    run = state.take_fast_events(101)[0]['mig_demand_create']['run']
    # The run's annotation: the new 1g.20gb at 2, which nobody held when the GPUs were read.
    state.update_node(gpu_node(instances=(('1g.10gb', 0, ['team-a/held']), ('1g.20gb', 2, [])),
                               outcome={'run': run, 'result': 'created'}), 105)
    state.update(small('second'), 106)        # first not bound yet: on its way to the instance
    [event] = state.take_fast_events(107)
    assert event['mig_demand_create']['gpus'] == {'0': {'1g.20gb': 1}} and event['mig_demand_create']['pods'] == ['team-a/second']
    state.update(small('first', phase='Running', scheduled=('True', ''), node_name='node-1'), 108)
    assert state.fast.held_by_node(state.pending) == {'node-1': {'1g.20gb': 1}}
