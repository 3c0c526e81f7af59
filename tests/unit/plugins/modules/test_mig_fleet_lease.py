# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_fleet_lease: taking, waiting for, renewing and releasing the fleet lease against a fake Lease API."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

import pytest
from kubernetes.client.exceptions import ApiException

from ansible_collections.gpufleet.mig.plugins.modules import mig_fleet_lease as module

PARAMS = {'holder': 'me', 'lease_duration': 900, 'wait': 30, 'poll_interval': 5}


class Leases(object):
    """A Lease store as the API server keeps one: a resourceVersion per write, 409 for a stale one."""
    namespace, name = 'default', 'gpufleet-mig-fleet'

    def __init__(self, spec=None, racing=None):
        self.lease = None if spec is None else {'metadata': {'resourceVersion': '1'}, 'spec': spec}
        self.version = 1
        self.racing = racing  # a spec another run writes just before our first write
        self.writes = []

    def read(self):
        return copy.deepcopy(self.lease)

    def write(self, record, spec):
        if self.racing is not None:
            self._store(self.racing)
            self.racing = None
        current = self.lease and self.lease['metadata']['resourceVersion']
        if (record is None) != (self.lease is None) or (record is not None and record.resource_version != current):
            return False
        self._store(spec)
        self.writes.append(spec)
        return True

    def _store(self, spec):
        self.version += 1
        self.lease = {'metadata': {'resourceVersion': str(self.version)}, 'spec': dict(spec)}


class Clock(object):
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def take(leases, clock, check_mode=False, **params):
    return module.take(leases, dict(PARAMS, **params), check_mode, clock=clock, wall=lambda: 1796410800.0, sleep=clock.sleep)


def test_a_missing_lease_is_created_for_the_holder():
    leases = Leases()
    result, problem = take(leases, Clock())
    assert problem is None and result['acquired'] and leases.lease['spec']['holderIdentity'] == 'me'
    assert leases.lease['spec']['leaseDurationSeconds'] == 900


def test_the_holder_renews_without_acquiring_so_a_nested_playbook_does_not_release():
    leases = Leases({'holderIdentity': 'me', 'leaseDurationSeconds': 900, 'acquireTime': 'T0', 'leaseTransitions': 1})
    result, problem = take(leases, Clock())
    assert problem is None and not result['acquired'] and result['held']
    assert leases.lease['spec']['acquireTime'] == 'T0'


def test_a_lease_held_by_another_run_is_waited_for_then_refused_naming_the_holder():
    leases = Leases({'holderIdentity': 'awx-job-7', 'leaseDurationSeconds': 900, 'renewTime': 'T1'})
    clock = Clock()
    result, problem = take(leases, clock, wait=30)
    assert result is None and 'held by awx-job-7' in problem
    assert 25 <= clock.now - 1000 <= 30 and leases.writes == []


def test_a_lease_its_holder_stopped_renewing_is_taken_after_its_duration_as_observed():
    leases = Leases({'holderIdentity': 'crashed', 'leaseDurationSeconds': 20, 'leaseTransitions': 3})
    clock = Clock()
    result, problem = take(leases, clock, wait=60)
    assert problem is None and result['acquired'] and 20 <= result['waited'] <= 25
    assert leases.lease['spec']['holderIdentity'] == 'me' and leases.lease['spec']['leaseTransitions'] == 4


def test_a_lease_a_dead_run_renewed_long_ago_is_taken_without_waiting_its_duration():
    leases = Leases({'holderIdentity': 'killed-job', 'leaseDurationSeconds': 1800,
                     'renewTime': '2026-12-04T17:00:00.000000Z', 'leaseTransitions': 1})
    clock = Clock()
    result, problem = take(leases, clock, wait=30)
    assert problem is None and result['acquired'] and clock.now == 1000


def test_a_lease_released_while_waiting_is_taken_at_the_next_read():
    leases = Leases({'holderIdentity': 'other', 'leaseDurationSeconds': 900})
    clock = Clock()
    original = clock.sleep

    def sleep_then_release(seconds):
        original(seconds)
        leases._store({'holderIdentity': '', 'leaseDurationSeconds': 1})

    clock.sleep = sleep_then_release
    result, problem = take(leases, clock)
    assert problem is None and result['acquired'] and result['waited'] == 5


def test_of_two_runs_racing_only_the_first_write_wins_and_the_other_sees_the_new_holder():
    leases = Leases({'holderIdentity': '', 'leaseDurationSeconds': 1},
                    racing={'holderIdentity': 'faster', 'leaseDurationSeconds': 900})
    result, problem = take(leases, Clock(), wait=0)
    assert result is None and 'held by faster' in problem


def test_check_mode_writes_nothing_and_reports_the_holder_without_waiting():
    leases = Leases({'holderIdentity': 'awx-job-7', 'leaseDurationSeconds': 900})
    clock = Clock()
    result, problem = take(leases, clock, check_mode=True)
    assert problem is None and not result['held'] and result['holder'] == 'awx-job-7' and 'held by awx-job-7' in result['msg']
    assert clock.now == 1000 and leases.writes == []
    result, problem = take(Leases(), clock, check_mode=True)
    assert result['acquired'] and result['changed']


def test_release_lets_its_own_lease_go_and_leaves_another_runs():
    mine = Leases({'holderIdentity': 'me', 'leaseDurationSeconds': 900, 'leaseTransitions': 2})
    result = module.release(mine, PARAMS, False, wall=lambda: 1796410800.0)
    assert result['changed'] and mine.lease['spec']['holderIdentity'] == '' and mine.lease['spec']['leaseDurationSeconds'] == 1
    other = Leases({'holderIdentity': 'other', 'leaseDurationSeconds': 900})
    result = module.release(other, PARAMS, False)
    assert not result['changed'] and result['holder'] == 'other' and other.writes == []
    assert not module.release(Leases(), PARAMS, False)['changed']
    checked = Leases({'holderIdentity': 'me', 'leaseDurationSeconds': 900})
    assert module.release(checked, PARAMS, True)['changed'] and checked.writes == []


class Response(object):
    def __init__(self, body):
        self.data = json.dumps(body).encode()


class CoordinationApi(object):
    """What LeaseApi calls of kubernetes.client.CoordinationV1Api, answering as the API server does."""

    def __init__(self, lease=None, conflict=False):
        self.lease, self.conflict, self.calls = lease, conflict, []

    def read_namespaced_lease(self, name, namespace, _preload_content=True):
        self.calls.append(('read', namespace, name))
        if self.lease is None:
            raise ApiException(status=404, reason='Not Found')
        return Response(self.lease)

    def create_namespaced_lease(self, namespace, body):
        self.calls.append(('create', namespace, body))
        if self.conflict:
            raise ApiException(status=409, reason='AlreadyExists')

    def replace_namespaced_lease(self, name, namespace, body):
        self.calls.append(('replace', namespace, body))
        if self.conflict:
            raise ApiException(status=409, reason='Conflict')


def test_the_lease_api_reads_none_for_404_and_writes_with_the_read_resource_version():
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._fleet_lease import LeaseRecord
    leases = module.LeaseApi(CoordinationApi(), 'ml', 'gpufleet-mig-fleet')
    assert leases.read() is None
    assert leases.write(None, {'holderIdentity': 'me'})
    created = leases.api.calls[-1]
    assert created[0] == 'create' and created[2]['metadata'] == {'name': 'gpufleet-mig-fleet', 'namespace': 'ml'}
    stored = {'metadata': {'resourceVersion': '12'}, 'spec': {'holderIdentity': 'x'}}
    leases = module.LeaseApi(CoordinationApi(stored), 'ml', 'gpufleet-mig-fleet')
    record = LeaseRecord.of(leases.read())
    assert leases.write(record, {'holderIdentity': 'me'})
    assert leases.api.calls[-1][2]['metadata']['resourceVersion'] == '12'


def test_a_conflict_is_a_lost_race_and_other_refusals_are_raised():
    assert not module.LeaseApi(CoordinationApi(conflict=True), 'ml', 'l').write(None, {})
    api = CoordinationApi()

    def forbidden(namespace, body):
        raise ApiException(status=403, reason='Forbidden')
    api.create_namespaced_lease = forbidden
    with pytest.raises(ApiException):
        module.LeaseApi(api, 'ml', 'l').write(None, {})


class LeaseServer(object):
    """The Lease endpoints of an API server over HTTP (get, create, replace with resourceVersion), for the real
    kubernetes client."""

    def __init__(self):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        store = self
        self.lease, self.version, self.requests = None, 0, []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                store.requests.append(('GET', self.path, self.headers.get('Authorization')))
                if store.lease is None:
                    return self._answer(404, {'kind': 'Status', 'code': 404, 'reason': 'NotFound'})
                self._answer(200, store.lease)

            def _write(self, create):
                body = json.loads(self.rfile.read(int(self.headers['Content-Length'])))
                store.requests.append(('POST' if create else 'PUT', self.path, body))
                current = store.lease and store.lease['metadata']['resourceVersion']
                if (create and store.lease) or (not create and body['metadata'].get('resourceVersion') != current):
                    return self._answer(409, {'kind': 'Status', 'code': 409, 'reason': 'Conflict'})
                store.version += 1
                body['metadata']['resourceVersion'] = str(store.version)
                store.lease = body
                self._answer(201 if create else 200, body)

            def do_POST(self):
                self._write(True)

            def do_PUT(self):
                self._write(False)

        self.server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = 'http://127.0.0.1:%d' % self.server.server_address[1]


def test_take_renew_and_release_through_the_kubernetes_client_over_http():
    from kubernetes import client as k8s_client
    server = LeaseServer()
    try:
        conf = module.configuration({'host': server.url, 'api_key': 'tok'})
        leases = module.LeaseApi(k8s_client.CoordinationV1Api(k8s_client.ApiClient(conf)), 'default', 'gpufleet-mig-fleet')
        params = dict(PARAMS, holder='awx-job-9')
        first, problem = module.take(leases, params, False)
        assert problem is None and first['acquired']
        assert server.lease['spec']['holderIdentity'] == 'awx-job-9' and server.requests[0][2] == 'Bearer tok'
        assert server.requests[1][:2] == ('POST', '/apis/coordination.k8s.io/v1/namespaces/default/leases')
        again, problem = module.take(leases, params, False)
        assert problem is None and not again['acquired'] and server.requests[-1][0] == 'PUT'
        refused, problem = module.take(leases, dict(PARAMS, holder='other', wait=0), False)
        assert refused is None and 'held by awx-job-9' in problem
        assert module.release(leases, params, False)['changed'] and server.lease['spec']['holderIdentity'] == ''
        taken, problem = module.take(leases, dict(PARAMS, holder='other', wait=0), False)
        assert problem is None and taken['acquired'] and server.lease['spec']['leaseTransitions'] == 1
    finally:
        server.server.shutdown()
