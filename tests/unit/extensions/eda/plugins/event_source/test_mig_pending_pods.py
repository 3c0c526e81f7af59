# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The event source mig_pending_pods: one event per burst, settings and connections (which pod counts:
tests/unit/plugins/module_utils/test_pending_pods.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import ssl

import pytest

from ansible_collections.gpufleet.mig.extensions.eda.plugins.event_source import mig_pending_pods as source
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


# ---- settings and where the API server is -----------------------------------------------------------------

def test_settings_defaults_and_bad_values():
    assert source.settings({}) == {'quiet_period': 10.0, 'max_delay': 60.0, 'watch_timeout': 300, 'namespace': None}
    assert source.settings({'quiet_period': '2', 'namespace': 'ml'})['quiet_period'] == 2.0
    for bad, words in (({'quiet_period': 'soon'}, 'quiet_period must be a number'),
                       ({'max_delay': 0}, 'max_delay must be more than 0'),
                       ({'quiet_period': 30, 'max_delay': 10}, 'max_delay (10.0) must be at least quiet_period')):
        with pytest.raises(source.SourceError, match=words.replace('(', r'\(').replace(')', r'\)')):
            source.settings(bad)


def test_pods_path_all_namespaces_or_one():
    assert source.pods_path(None) == '/api/v1/pods'
    assert source.pods_path('ml') == '/api/v1/namespaces/ml/pods'


KUBECONFIG = {
    'current-context': 'ctx',
    'contexts': [{'name': 'ctx', 'context': {'cluster': 'c', 'user': 'u'}},
                 {'name': 'other', 'context': {'cluster': 'c', 'user': 'exec'}}],
    'clusters': [{'name': 'c', 'cluster': {'server': 'https://api:6443/',
                                           'certificate-authority-data': base64.b64encode(b'PEM').decode()}}],
    'users': [{'name': 'u', 'user': {'token': 'secret-token'}},
              {'name': 'exec', 'user': {'exec': {'command': 'aws'}}}],
}


def test_kubeconfig_current_context_gives_server_ca_and_token():
    conn = source.connection_from_kubeconfig(KUBECONFIG)
    assert conn == {'server': 'https://api:6443', 'insecure': False, 'ca_data': 'PEM', 'token': 'secret-token'}
    assert source._auth_headers(conn) == {'Authorization': 'Bearer secret-token'}


def test_kubeconfig_relative_files_are_relative_to_its_folder(tmp_path):
    (tmp_path / 'token').write_text('from-file\n')
    config = {'current-context': 'x', 'contexts': [{'name': 'x', 'context': {'cluster': 'c', 'user': 'u'}}],
              'clusters': [{'name': 'c', 'cluster': {'server': 'http://127.0.0.1:1', 'certificate-authority': 'ca.crt'}}],
              'users': [{'name': 'u', 'user': {'tokenFile': 'token'}}]}
    conn = source.connection_from_kubeconfig(config, base_dir=str(tmp_path))
    assert conn['ca_file'] == str(tmp_path / 'ca.crt')
    assert source._auth_headers(conn) == {'Authorization': 'Bearer from-file'}


@pytest.mark.parametrize('context, words', [
    ('other', 'authenticates through a plugin'),
    ('missing', "no context named 'missing'"),
])
def test_kubeconfig_problems_are_one_line_without_the_token(context, words):
    with pytest.raises(source.SourceError, match=words) as failure:
        source.connection_from_kubeconfig(KUBECONFIG, context)
    assert 'secret-token' not in str(failure.value)


def test_in_cluster_connection_only_inside_a_pod(tmp_path):
    assert source.connection_in_cluster({}, str(tmp_path)) is None
    (tmp_path / 'token').write_text('sa')
    conn = source.connection_in_cluster({'KUBERNETES_SERVICE_HOST': 'fd00::1', 'KUBERNETES_SERVICE_PORT': '443'}, str(tmp_path))
    assert conn['server'] == 'https://[fd00::1]:443' and conn['ca_file'] == str(tmp_path / 'ca.crt')


def test_find_connection_prefers_the_named_kubeconfig_and_refuses_a_missing_one(tmp_path):
    with pytest.raises(source.SourceError, match='does not exist'):
        source.find_connection({'kubeconfig': str(tmp_path / 'nope')}, {})
    path = tmp_path / 'config'
    path.write_text('current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n'
                    'clusters: [{name: c, cluster: {server: "http://127.0.0.1:9"}}]\n')
    assert source.find_connection({}, {'KUBECONFIG': str(path)})['server'] == 'http://127.0.0.1:9'


class Answer(object):
    """What _check reads of an aiohttp response."""

    def __init__(self, status):
        self.status = status
        self.url = type('URL', (), {'path': '/api/v1/pods'})()


def test_answers_410_lists_again_401_and_403_name_the_rights_others_fail_with_the_status():
    source._check(Answer(200))
    with pytest.raises(source._Expired):
        source._check(Answer(410))
    for status in (401, 403):
        with pytest.raises(source.SourceError, match='HTTP %d\\): the source needs get, list and watch on pods' % status):
            source._check(Answer(status))
    with pytest.raises(source.SourceError, match='answered HTTP 500 to /api/v1/pods'):
        source._check(Answer(500))


def test_plain_http_has_no_tls_context_and_https_verifies_unless_told_not_to():
    assert source._ssl_context({'server': 'http://127.0.0.1:1'}) is None
    verified = source._ssl_context({'server': 'https://api:6443'})
    assert verified.check_hostname and verified.verify_mode == ssl.CERT_REQUIRED
    insecure = source._ssl_context({'server': 'https://api:6443', 'insecure': True})
    assert not insecure.check_hostname and insecure.verify_mode == ssl.CERT_NONE
