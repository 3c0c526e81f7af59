#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: mig_pod_eviction
short_description: Evict a set of pods through the Eviction API, all or none, trying each as a dry run first
version_added: 0.2.0
description:
  - Posts a policy/v1 Eviction for each pod of O(pods) to the C(pods/eviction) subresource, honouring
    PodDisruptionBudgets. With O(dry_run) each eviction is only tried (C(dryRun=All)); the API server runs every
    admission and budget check and changes nothing, so a caller can evict nobody when any of them would be refused.
  - M(kubernetes.core.k8s_drain) evicts one pod at a time and stops at the first refusal, leaving the pods before it
    evicted for nothing; the P(gpufleet.mig.mig_layout#role) role runs this module with O(dry_run=true) for every pod
    first, then without it only when every eviction was allowed.
  - A refusal is reported per pod in RV(results), not as a failure; the module fails only when the API cannot be
    reached or answers something else than a refusal for every pod.
  - Runs where the Kubernetes API is reachable (usually the controller), with the C(kubernetes) Python client. The
    connection options are kubernetes.core's (same names, same C(K8S_AUTH_*) environment variables) and are resolved
    the same way - enough for a token with O(host), else O(kubeconfig) or O(context), else the in-cluster
    configuration, then the kubeconfig default.
options:
  pods:
    description: The pods to evict.
    type: list
    elements: dict
    required: true
    suboptions:
      namespace:
        description: Namespace of the pod.
        type: str
        required: true
      name:
        description: Name of the pod.
        type: str
        required: true
      uid:
        description: The pod's UID; the eviction applies only to that pod (a precondition), not to a new pod of the same name.
        type: str
  dry_run:
    description: Only try each eviction (C(dryRun=All)); nothing is evicted.
    type: bool
    default: false
  kubeconfig:
    description: Path to a kubeconfig file, or its content as a dict (E(K8S_AUTH_KUBECONFIG)).
    type: raw
  context:
    description: The kubeconfig context (E(K8S_AUTH_CONTEXT)).
    type: str
  host:
    description: The API server URL (E(K8S_AUTH_HOST)).
    type: str
  api_key:
    description: A bearer token (E(K8S_AUTH_API_KEY)); never logged.
    type: str
  ca_cert:
    description: The API server's CA certificate file (E(K8S_AUTH_SSL_CA_CERT)).
    type: path
    aliases: [ssl_ca_cert]
  validate_certs:
    description: Verify the API server's certificate (E(K8S_AUTH_VERIFY_SSL)).
    type: bool
    aliases: [verify_ssl]
attributes:
  check_mode:
    support: full
    description: Every eviction is tried as a dry run, whatever O(dry_run) says.
  diff_mode:
    support: none
    description: Reports no diff.
author:
  - gpufleet.mig developers (@gpufleet)
requirements:
  - kubernetes >= 24.2.0 (Python client)
seealso:
  - module: kubernetes.core.k8s_drain
  - name: API-initiated eviction
    description: A budget that refuses answers HTTP 429 Too Many Requests.
    link: https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/
'''

EXAMPLES = r'''
- name: Try every eviction first
  gpufleet.mig.mig_pod_eviction:
    pods:
      - {namespace: ml, name: train-0, uid: 4b0c1c9e-0000-4000-8000-000000000001}
      - {namespace: ml, name: infer-7f9, uid: 4b0c1c9e-0000-4000-8000-000000000002}
    dry_run: true
  register: tried

- name: Evict them only when every eviction is allowed
  gpufleet.mig.mig_pod_eviction:
    pods: "{{ tried.results | map(attribute='target') | list }}"
  when: tried.results | rejectattr('allowed') | list | length == 0
'''

RETURN = r'''
results:
  description: One entry per pod, in the order of O(pods).
  returned: always
  type: list
  elements: dict
  contains:
    pod:
      description: C(namespace/name).
      type: str
    target:
      description: The pod as given (C(namespace), C(name), C(uid)).
      type: dict
    allowed:
      description: The API server accepted the eviction (a pod already gone, HTTP 404, counts as allowed).
      type: bool
    status:
      description: HTTP status of the answer (201 accepted, 429 refused by a PodDisruptionBudget, 0 without an answer).
      type: int
    message:
      description: The API server's message.
      type: str
    causes:
      description: The Status's C(details.causes) (a budget's refusal has C(reason) V(DisruptionBudget) and names the budget).
      type: list
      elements: dict
dry_run:
  description: Whether the evictions were only tried.
  returned: always
  type: bool
'''

import json

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._api_client import KUBERNETES_ERROR, configuration

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.client.models import V1DeleteOptions, V1Eviction, V1ObjectMeta, V1Preconditions
except ImportError:
    pass  # KUBERNETES_ERROR says so


def answer_of(exc):
    """(message, causes) of an ApiException's Status body."""
    try:
        body = json.loads(exc.body or '{}')
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    message = body.get('message') or exc.reason or str(exc)
    causes = (body.get('details') or {}).get('causes') or []
    return message, causes


def evict(api, target, dry_run):
    """One eviction: {pod, target, allowed, status, message, causes}."""
    name, namespace = target['name'], target['namespace']
    preconditions = V1Preconditions(uid=target['uid']) if target.get('uid') else None
    body = V1Eviction(metadata=V1ObjectMeta(name=name, namespace=namespace),
                      delete_options=V1DeleteOptions(preconditions=preconditions))
    result = {'pod': '%s/%s' % (namespace, name), 'target': target}
    try:
        kwargs = {'dry_run': 'All'} if dry_run else {}
        api.create_namespaced_pod_eviction(name=name, namespace=namespace, body=body, **kwargs)
        result.update(allowed=True, status=201, message='', causes=[])
    except ApiException as exc:
        message, causes = answer_of(exc)
        # A pod already gone holds nothing (404); a budget refuses with 429; anything else is a refusal too.
        result.update(allowed=exc.status == 404, status=exc.status or 0, message=message, causes=causes)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            pods=dict(type='list', elements='dict', required=True, options=dict(
                namespace=dict(type='str', required=True),
                name=dict(type='str', required=True),
                uid=dict(type='str'),
            )),
            dry_run=dict(type='bool', default=False),
            kubeconfig=dict(type='raw', no_log=True, fallback=(env_fallback, ['K8S_AUTH_KUBECONFIG'])),
            context=dict(type='str', fallback=(env_fallback, ['K8S_AUTH_CONTEXT'])),
            host=dict(type='str', fallback=(env_fallback, ['K8S_AUTH_HOST'])),
            api_key=dict(type='str', no_log=True, fallback=(env_fallback, ['K8S_AUTH_API_KEY'])),
            ca_cert=dict(type='path', aliases=['ssl_ca_cert'], fallback=(env_fallback, ['K8S_AUTH_SSL_CA_CERT'])),
            validate_certs=dict(type='bool', aliases=['verify_ssl'], fallback=(env_fallback, ['K8S_AUTH_VERIFY_SSL'])),
        ),
        supports_check_mode=True,
    )
    if KUBERNETES_ERROR:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=KUBERNETES_ERROR)
    dry_run = module.params['dry_run'] or module.check_mode
    try:
        api = k8s_client.CoreV1Api(k8s_client.ApiClient(configuration(module.params)))
    except (k8s_config.ConfigException, IOError, ValueError) as exc:
        module.fail_json(msg='cannot connect to the Kubernetes API: %s' % exc)
    results = [evict(api, dict(target), dry_run) for target in module.params['pods']]
    changed = not dry_run and any(r['allowed'] and r['status'] == 201 for r in results)
    module.exit_json(changed=changed, results=results, dry_run=dry_run)


if __name__ == '__main__':
    main()
