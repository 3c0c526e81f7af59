# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_pod_eviction: the kubernetes client's calls (dry run, the UID as precondition, 404, a budget's 429, no answer),
the budgets read per namespace, and the module's result: a real pass fails unless every pod was evicted."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import MaxRetryError

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._eviction_pass import Answer, EvictionApiError, Target
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._node_evictions import eviction_problem
from ansible_collections.gpufleet.mig.plugins.modules import mig_pod_eviction
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.eviction_api import pdb, pod

# What kube-apiserver answers when a PodDisruptionBudget refuses (pkg/registry/core/pod/storage/eviction.go).
PDB_BODY = {'kind': 'Status', 'apiVersion': 'v1', 'status': 'Failure', 'code': 429, 'reason': 'TooManyRequests',
            'message': "Cannot evict pod as it would violate the pod's disruption budget.",
            'details': {'causes': [{'reason': 'DisruptionBudget',
                                    'message': 'The disruption budget web needs 1 healthy pods and has 1 currently'}]}}
AUTH = {'host': 'https://10.0.0.1:6443', 'api_key': 's3cret'}


def api_exception(status, body=None):
    exc = ApiException(status=status, reason='refused')
    exc.body = json.dumps(body) if body is not None else None
    return exc


class FakeCore(object):
    """CoreV1Api: pods as model objects (as the client returns them), evictions answered per name and pass."""

    def __init__(self, pods, answers=None):
        self.pods = dict((p['metadata']['name'], p) for p in pods)
        self.answers = answers or {}
        self.calls = []

    def read_namespaced_pod(self, name, namespace):
        self.calls.append(('read', namespace, name))
        if name not in self.pods:
            raise api_exception(404, {'message': 'pods "%s" not found' % name})
        p = self.pods[name]
        return k8s_client.V1Pod(metadata=k8s_client.V1ObjectMeta(**dict(
            (k, v) for k, v in p['metadata'].items() if k in ('name', 'namespace', 'uid', 'labels'))),
            status=k8s_client.V1PodStatus(phase=p['status']['phase'], conditions=[
                k8s_client.V1PodCondition(type=c['type'], status=c['status']) for c in p['status']['conditions']]))

    def create_namespaced_pod_eviction(self, name, namespace, body, **kwargs):
        self.calls.append(('evict', namespace, name, body, kwargs))
        answers = self.answers.get((name, 'dry' if kwargs.get('dry_run') else 'real')) or []
        if answers:
            raise answers.pop(0)


class FakePolicy(object):
    def __init__(self, budgets):
        self.budgets = budgets
        self.calls = []

    def list_namespaced_pod_disruption_budget(self, namespace):
        self.calls.append(namespace)
        return {'items': [b for b in self.budgets if b['metadata']['namespace'] == namespace]}


def client(pods, budgets=(), answers=None):
    return mig_pod_eviction.KubernetesEvictions(FakeCore(pods, answers), FakePolicy(list(budgets)), k8s_client.ApiClient())


def test_an_eviction_is_posted_with_the_uid_as_precondition_and_dry_run_only_when_asked():
    evictions = client([])
    assert evictions.evict(Target('ml', 'a', 'u-a'), True) == Answer(201)
    assert evictions.evict(Target('ml', 'b'), False) == Answer(201)
    (first, second) = evictions.core.calls
    ns, name, body, kwargs = first[1:]
    body_b, kwargs_b = second[3:]
    assert (ns, name, body.metadata.name, body.metadata.namespace, body.delete_options.preconditions.uid, kwargs) == (
        'ml', 'a', 'a', 'ml', 'u-a', {'dry_run': 'All'})
    assert body_b.delete_options.preconditions is None and kwargs_b == {}


def test_the_api_servers_answers_become_answers():
    evictions = client([], answers={('a', 'real'): [api_exception(429, PDB_BODY)], ('b', 'real'): [api_exception(404)],
                                    ('c', 'real'): [api_exception(500, None)], ('d', 'real'): [MaxRetryError(None, '/x', 'refused')],
                                    ('e', 'real'): [OSError('connection reset')]})
    refused = evictions.evict(Target('ml', 'a'), False)
    assert refused == Answer(429, PDB_BODY['message'],
                             (('DisruptionBudget', 'The disruption budget web needs 1 healthy pods and has 1 currently'),))
    assert not refused.allowed
    gone = evictions.evict(Target('ml', 'b'), False)
    assert (gone.status, gone.allowed) == (404, True)
    assert evictions.evict(Target('ml', 'c'), False) == Answer(500, 'refused')
    no_answer = evictions.evict(Target('ml', 'd'), False)
    assert (no_answer.status, no_answer.allowed, no_answer.from_api) == (0, False, True) and 'refused' in no_answer.message
    assert evictions.evict(Target('ml', 'e'), False) == Answer(0, 'connection reset')


def test_pods_and_budgets_are_read_as_api_dicts_and_a_missing_pod_is_none():
    evictions = client([pod('a', {'app': 'web'})], [pdb('web', {'matchLabels': {'app': 'web'}}, 1), pdb('o', None, 1, namespace='x')])
    read = evictions.read_pod(Target('ml', 'a'))
    assert read['metadata']['labels'] == {'app': 'web'} and read['status']['conditions'] == [{'type': 'Ready', 'status': 'True'}]
    assert evictions.read_pod(Target('ml', 'gone')) is None
    assert [b['metadata']['name'] for b in evictions.read_budgets('ml')] == ['web']


def test_a_read_refused_or_unanswered_is_an_error_naming_what():
    class Failing(object):
        def __init__(self, exc):
            self.exc = exc

        def read_namespaced_pod(self, name, namespace):
            raise self.exc

        def list_namespaced_pod_disruption_budget(self, namespace):
            raise self.exc

    forbidden = mig_pod_eviction.KubernetesEvictions(Failing(api_exception(403, {'message': 'pods is forbidden'})),
                                                     Failing(api_exception(403, {'message': 'forbidden'})), k8s_client.ApiClient())
    for call, what in ((lambda: forbidden.read_pod(Target('ml', 'a'))), 'pod ml/a'), \
                      ((lambda: forbidden.read_budgets('ml')), 'the PodDisruptionBudgets of namespace ml'):
        try:
            call()
        except EvictionApiError as exc:
            assert str(exc).startswith('cannot read %s: HTTP 403' % what)
        else:
            raise AssertionError('no error')
    unanswered = mig_pod_eviction.KubernetesEvictions(Failing(MaxRetryError(None, '/x', 'refused')), None, k8s_client.ApiClient())
    try:
        unanswered.read_pod(Target('ml', 'a'))
    except EvictionApiError as exc:
        assert str(exc).startswith('cannot read pod ml/a: no answer (')
    else:
        raise AssertionError('no error')


def test_two_replicas_under_one_disruption_fail_the_real_call_before_any_real_eviction():
    web = {'matchLabels': {'app': 'web'}}
    evictions = client([pod('web-0', {'app': 'web'}), pod('web-1', {'app': 'web'})], [pdb('web', web, 1)])
    result = mig_pod_eviction.outcome(evictions, [{'namespace': 'ml', 'name': 'web-0'}, {'namespace': 'ml', 'name': 'web-1'}],
                                      False, 60)
    assert result['failed'] and not result['changed'] and result['msg'] == result['problem']
    assert 'PodDisruptionBudget ml/web allows 1 disruption(s) now' in result['msg']
    # Both dry runs pass (the API server takes no disruption for a dry run); no real eviction is asked.
    assert [(c[2], c[4]) for c in evictions.core.calls if c[0] == 'evict'] == [('web-0', {'dry_run': 'All'}), ('web-1', {'dry_run': 'All'})]
    # The reboot path reads the results with gpufleet.mig.mig_handover_eviction_problem: it names the budget there too.
    assert 'PodDisruptionBudget ml/web allows 1' in eviction_problem(result['results'], 'n')


def test_a_dry_run_reports_a_refusal_without_failing():
    evictions = client([pod('a')], answers={('a', 'dry'): [api_exception(429, PDB_BODY)]})
    result = mig_pod_eviction.outcome(evictions, [{'namespace': 'ml', 'name': 'a'}], True, 60)
    assert 'failed' not in result and not result['changed'] and result['dry_run']
    assert 'ml/a: HTTP 429' in result['problem'] and result['results'][0]['allowed'] is False


def test_a_real_pass_stopped_part_way_fails_naming_the_evicted_and_changed():
    evictions = client([pod('a'), pod('b'), pod('c')], answers={('b', 'real'): [api_exception(403, {'message': 'denied'})]})
    targets = [{'namespace': 'ml', 'name': n} for n in 'abc']
    result = mig_pod_eviction.outcome(evictions, targets, False, 0, clock=lambda: 0.0, sleep=None)
    assert result['failed'] and result['changed']
    assert result['msg'] == ('the API server refused the eviction of ml/b: HTTP 403 denied; the evictions stopped there: '
                             'evicted ml/a; not evicted ml/b, ml/c')
    assert [t['name'] for t in result['evicted']] == ['a'] and [t['name'] for t in result['not_evicted']] == ['b', 'c']


def test_a_real_pass_that_evicts_all_succeeds_and_changes():
    evictions = client([pod('a')])
    result = mig_pod_eviction.outcome(evictions, [{'namespace': 'ml', 'name': 'a', 'uid': 'uid-a'}], False, 0)
    assert 'failed' not in result and result['changed'] and result['problem'] is None
    only_gone = mig_pod_eviction.outcome(client([]), [{'namespace': 'ml', 'name': 'a'}], False, 0)
    assert 'failed' not in only_gone and not only_gone['changed']
    # Deleted by someone else between the dry run and the eviction (404): evicted, but not by this run.
    deleted_meanwhile = client([pod('a')], answers={('a', 'real'): [api_exception(404)]})
    result = mig_pod_eviction.outcome(deleted_meanwhile, [{'namespace': 'ml', 'name': 'a'}], False, 0)
    assert 'failed' not in result and not result['changed'] and [t['name'] for t in result['evicted']] == ['a']


def test_a_read_without_answer_fails_saying_nobody_was_evicted():
    class Unanswered(FakeCore):
        def read_namespaced_pod(self, name, namespace):
            raise MaxRetryError(None, '/api/v1/namespaces/ml/pods/a', 'connection refused')

    evictions = mig_pod_eviction.KubernetesEvictions(Unanswered([]), FakePolicy([]), k8s_client.ApiClient())
    result = mig_pod_eviction.outcome(evictions, [{'namespace': 'ml', 'name': 'a'}], False, 60)
    assert result['failed'] and not result['changed'] and result['msg'].endswith('; nobody was evicted')
    assert result['msg'].startswith('cannot read pod ml/a: no answer (')


def test_main_wires_the_client_check_mode_and_the_timeout(run_module, monkeypatch):
    core = FakeCore([pod('a')])
    monkeypatch.setattr(mig_pod_eviction.k8s_client, 'CoreV1Api', lambda api_client: core)
    monkeypatch.setattr(mig_pod_eviction.k8s_client, 'PolicyV1Api', lambda api_client: FakePolicy([]))
    args = dict(AUTH, pods=[{'namespace': 'ml', 'name': 'a'}])
    result, failed = run_module(mig_pod_eviction.main, args, check_mode=True)
    assert not failed and result['dry_run'] and not result['changed']
    assert [c[4] for c in core.calls if c[0] == 'evict'] == [{'dry_run': 'All'}]
    result, failed = run_module(mig_pod_eviction.main, args)
    assert not failed and result['changed'] and [t['name'] for t in result['evicted']] == ['a']
    result, failed = run_module(mig_pod_eviction.main, dict(args, timeout=-1))
    assert failed and result['msg'] == 'timeout must be 0 or more seconds, got -1'


def test_main_fails_with_the_run_when_not_every_pod_was_evicted(run_module, monkeypatch):
    core = FakeCore([pod('a'), pod('b')], answers={('b', 'real'): [api_exception(500, {'message': 'boom'})]})
    monkeypatch.setattr(mig_pod_eviction.k8s_client, 'CoreV1Api', lambda api_client: core)
    monkeypatch.setattr(mig_pod_eviction.k8s_client, 'PolicyV1Api', lambda api_client: FakePolicy([]))
    result, failed = run_module(mig_pod_eviction.main, dict(AUTH, pods=[{'namespace': 'ml', 'name': n} for n in 'ab'], timeout=0))
    assert failed and result['changed'] and 'evicted ml/a; not evicted ml/b' in result['msg']
    assert [r['pod'] for r in result['refused']] == ['ml/b']


def test_connection_options_as_kubernetes_core_resolves_them(tmp_path):
    token = mig_pod_eviction.configuration({'host': 'https://10.0.0.1:6443/', 'api_key': 's3cret', 'ca_cert': '/ca.pem',
                                            'validate_certs': False})
    assert (token.host, token.api_key, token.ssl_ca_cert, token.verify_ssl) == (
        'https://10.0.0.1:6443', {'authorization': 'Bearer s3cret'}, '/ca.pem', False)
    kubeconfig = tmp_path / 'config'
    kubeconfig.write_text(json.dumps({
        'apiVersion': 'v1', 'kind': 'Config', 'current-context': 'a',
        'clusters': [{'name': 'a', 'cluster': {'server': 'https://a:6443'}}, {'name': 'b', 'cluster': {'server': 'https://b:6443'}}],
        'users': [{'name': 'u', 'user': {'token': 't'}}],
        'contexts': [{'name': 'a', 'context': {'cluster': 'a', 'user': 'u'}}, {'name': 'b', 'context': {'cluster': 'b', 'user': 'u'}}]}))
    assert mig_pod_eviction.configuration({'kubeconfig': str(kubeconfig)}).host == 'https://a:6443'
    assert mig_pod_eviction.configuration({'kubeconfig': str(kubeconfig), 'context': 'b'}).host == 'https://b:6443'
