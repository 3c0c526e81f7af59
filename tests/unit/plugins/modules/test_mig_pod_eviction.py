# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_pod_eviction: dry run through the Eviction subresource, a budget's 429 as a per-pod refusal, the UID as precondition."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from kubernetes.client.exceptions import ApiException

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._node_evictions import eviction_problem
from ansible_collections.gpufleet.mig.plugins.modules import mig_pod_eviction

# What kube-apiserver answers when a PodDisruptionBudget refuses (pkg/registry/core/pod/storage/eviction.go).
PDB_BODY = {'kind': 'Status', 'apiVersion': 'v1', 'status': 'Failure', 'code': 429, 'reason': 'TooManyRequests',
            'message': "Cannot evict pod as it would violate the pod's disruption budget.",
            'details': {'causes': [{'reason': 'DisruptionBudget',
                                    'message': 'The disruption budget guarded-d needs 1 healthy pods and has 1 currently'}]}}


class FakeApi(object):
    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def create_namespaced_pod_eviction(self, name, namespace, body, **kwargs):
        self.calls.append((namespace, name, body, kwargs))
        answer = self.answers.get(name)
        if answer:
            exc = ApiException(status=answer[0], reason='refused')
            exc.body = json.dumps(answer[1]) if answer[1] is not None else None
            raise exc


def test_dry_run_reports_each_refusal_and_passes_dry_run_and_uid():
    api = FakeApi({'guarded-d': (429, PDB_BODY), 'gone': (404, {'message': 'pods "gone" not found'})})
    targets = [{'namespace': 'ml', 'name': 'a', 'uid': 'u-a'}, {'namespace': 'ml', 'name': 'guarded-d', 'uid': 'u-d'},
               {'namespace': 'ml', 'name': 'gone', 'uid': None}]
    results = [mig_pod_eviction.evict(api, t, dry_run=True) for t in targets]
    assert [(r['pod'], r['allowed'], r['status']) for r in results] == [
        ('ml/a', True, 201), ('ml/guarded-d', False, 429), ('ml/gone', True, 404)]
    assert [c[3] for c in api.calls] == [{'dry_run': 'All'}] * 3
    body = api.calls[0][2]
    assert (body.metadata.name, body.metadata.namespace, body.delete_options.preconditions.uid) == ('a', 'ml', 'u-a')
    assert api.calls[2][2].delete_options.preconditions is None
    assert 'The disruption budget guarded-d needs 1 healthy pods' in eviction_problem(results, 'n')


def test_real_eviction_has_no_dry_run_and_any_other_answer_is_a_refusal():
    api = FakeApi({'b': (500, None)})
    results = [mig_pod_eviction.evict(api, {'namespace': 'ml', 'name': n, 'uid': 'u'}, dry_run=False) for n in ('a', 'b')]
    assert api.calls[0][3] == {}
    assert (results[1]['allowed'], results[1]['status'], results[1]['message']) == (False, 500, 'refused')


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
