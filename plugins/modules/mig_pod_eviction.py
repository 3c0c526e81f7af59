#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: mig_pod_eviction
short_description: Evict a set of pods through the Eviction API, all or none, checking their PodDisruptionBudgets first
version_added: 0.2.0
description:
  - Evicts every pod of O(pods) through the C(pods/eviction) subresource (policy/v1 Eviction), or none of them.
  - First it reads each pod (one not found, or another pod of that name, is gone and skipped) and the
    PodDisruptionBudgets of their namespaces, and tries each eviction as a dry run (C(dryRun=All), which runs
    admission, budgets and webhooks and changes nothing); one refusal and nobody is evicted.
  - A dry-run eviction uses up no disruption, so two replicas under C(maxUnavailable=1) both pass their dry runs and
    a real pass would be refused the second. So the pods are then grouped by the budget that guards each, as the API
    server decides it (same namespace, label selector; a pod that is not Running or is being deleted asks no budget;
    an unhealthy pod its budget lets go takes no disruption), and each group is compared with its budget's
    C(status.disruptionsAllowed); one budget that cannot allow its whole group, or a pod selected by more than one
    budget (the API refuses it with HTTP 500), and nobody is evicted. With O(dry_run) the module stops there.
  - Then the real pass evicts the pods one by one, those that take no disruption first. An HTTP 429 (a budget used
    up meanwhile by someone else) is tried again every 5 seconds until O(timeout), as C(kubectl drain) does; any other
    refusal, a 429 past O(timeout), or a request without an answer stops the pass. A pod whose eviction got no answer
    is read back (until O(timeout)) to learn whether it was evicted. The result then names exactly the pods evicted,
    the pod refused and those left.
  - M(kubernetes.core.k8s_drain) evicts one pod at a time and stops at the first refusal without saying what it
    evicted; the P(gpufleet.mig.mig_layout#role) role runs this module with O(dry_run=true) until every eviction is
    allowed, then without it.
  - With O(dry_run) a refusal is reported in RV(problem) and RV(refused), not as a failure. Without it the module
    fails unless every pod was evicted, and the failed result still holds RV(evicted), RV(refused) and
    RV(not_evicted). It fails before any eviction when the pods or their budgets cannot be read.
  - Runs where the Kubernetes API is reachable (usually the controller), with the C(kubernetes) Python client. The
    connection options are kubernetes.core's (same names, same C(K8S_AUTH_*) environment variables) and are resolved
    the same way - enough for a token with O(host), else O(kubeconfig) or O(context), else the in-cluster
    configuration, then the kubeconfig default. Needs C(get) on pods, C(list) on
    C(poddisruptionbudgets.policy) and C(create) on C(pods/eviction).
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
    description: Only check the budgets and try each eviction (C(dryRun=All)); nothing is evicted.
    type: bool
    default: false
  timeout:
    description:
      - Seconds the real pass may spend trying a refused (HTTP 429) eviction again, every 5 seconds, and reading back a
        pod whose eviction got no answer. V(0) tries each eviction once.
    type: int
    default: 120
extends_documentation_fragment:
  - gpufleet.mig.k8s_auth
attributes:
  check_mode:
    support: full
    description: The budgets are checked and every eviction is tried as a dry run, whatever O(dry_run) says.
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
- name: Check the budgets and try every eviction, until all are allowed
  gpufleet.mig.mig_pod_eviction:
    pods:
      - {namespace: ml, name: train-0, uid: 4b0c1c9e-0000-4000-8000-000000000001}
      - {namespace: ml, name: infer-7f9, uid: 4b0c1c9e-0000-4000-8000-000000000002}
    dry_run: true
  register: tried
  until: tried.problem | default(none) is none
  retries: 30
  delay: 10

- name: Evict them all, or stop and say which were evicted
  gpufleet.mig.mig_pod_eviction:
    pods: "{{ tried.results | map(attribute='target') | list }}"
    timeout: 300
  register: evicted
  ignore_errors: true

- name: Say what happened
  ansible.builtin.debug:
    msg: "{{ evicted.problem or 'all evicted' }}; evicted: {{ evicted.evicted | map(attribute='name') | join(', ') }}"
'''

RETURN = r'''
results:
  description: One entry per pod, in the order of O(pods), with the last answer it got (the dry run's, or the real eviction's).
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
      description:
        - The API server accepted the eviction (or its dry run), or the pod is gone (HTTP 404, or another pod of that name).
      type: bool
    status:
      description:
        - HTTP status of the answer (201 accepted, 404 gone, 429 refused by a PodDisruptionBudget, 0 without an answer).
        - For an answer decided by the module (RV(results[].from_api=false)), what the API server answers in that case - 429
          for a budget that cannot allow its whole group, 500 for a pod under more than one budget, 404 for a pod gone
          before.
      type: int
    message:
      description: The API server's message, or why the pod was refused or skipped.
      type: str
    causes:
      description: The Status's C(details.causes) (a budget's refusal has C(reason) V(DisruptionBudget) and names the budget).
      type: list
      elements: dict
    from_api:
      description: The status and message are the API server's answer, not the module's budget check.
      type: bool
    evicted:
      description: The real pass evicted it (or found it gone).
      type: bool
dry_run:
  description: Whether the evictions were only tried.
  returned: always
  type: bool
stage:
  description:
    - Where the run ended - V(dry_run) (a dry run was refused, or only dry runs were asked), V(budgets) (every dry run
      passed but a budget cannot allow its whole group) or V(evict) (the real pass).
  returned: when the pods and budgets could be read
  type: str
budgets:
  description: The pods grouped by PodDisruptionBudget, each group with C(budget), C(disruptions_allowed), C(pods)
    (those taking a disruption), C(unhealthy) (let go without), C(refusal); C(overlapping) pods and C(free) pods.
  returned: when the pods and budgets could be read
  type: dict
evicted:
  description: The pods (C(namespace), C(name), C(uid)) the real pass evicted or found gone, in order.
  returned: when the pods and budgets could be read
  type: list
  elements: dict
not_evicted:
  description: The pods the real pass was to evict and did not (empty for a dry run).
  returned: when the pods and budgets could be read
  type: list
  elements: dict
in_doubt:
  description: The pod whose eviction got no answer and which could not be read back either.
  returned: when the pods and budgets could be read
  type: list
  elements: dict
refused:
  description: The refused pods, as in RV(results) - every refusal of the budgets or the dry run, or the pod the real pass stopped at.
  returned: when the pods and budgets could be read
  type: list
  elements: dict
problem:
  description: Why not every pod was (or, for a dry run, would be) evicted, naming the budgets and pods; null when all were.
  returned: when the pods and budgets could be read
  type: str
'''

import json
import time

from ansible.module_utils.basic import AnsibleModule, env_fallback, missing_required_lib

# First of the collection's imports: from the module's payload, the others are then compiled once each (_payload_import).
from ansible_collections.gpufleet.mig.plugins.module_utils import _payload_import  # noqa: F401  pylint: disable=unused-import
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._api_client import KUBERNETES_ERROR, configuration, connection_argument_spec
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._eviction_pass import (
    ACCEPTED,
    Answer,
    EvictionApiError,
    Target,
    evict_all_or_none,
)

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.client.models import V1DeleteOptions, V1Eviction, V1ObjectMeta, V1Preconditions
    from urllib3.exceptions import HTTPError as NoAnswerError
except ImportError:
    pass  # KUBERNETES_ERROR says so


def answer_of(exc):
    """An :class:`Answer` from an ApiException and its Status body."""
    try:
        body = json.loads(exc.body or '{}')
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    message = body.get('message') or exc.reason or str(exc)
    causes = tuple((c.get('reason') or '', c.get('message') or '') for c in (body.get('details') or {}).get('causes') or []
                   if isinstance(c, dict))
    return Answer(exc.status or 0, message, causes)


class KubernetesEvictions(object):
    """The three calls of _eviction_pass.evict_all_or_none, through the kubernetes client's CoreV1Api and PolicyV1Api."""

    def __init__(self, core, policy, api_client):
        self.core = core
        self.policy = policy
        self.api_client = api_client

    def _read(self, what, call, *args):
        try:
            return self.api_client.sanitize_for_serialization(call(*args))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise EvictionApiError('cannot read %s: %s' % (what, answer_of(exc).describe()))
        except (NoAnswerError, OSError) as exc:
            raise EvictionApiError('cannot read %s: no answer (%s)' % (what, exc))

    def read_pod(self, target):
        return self._read('pod %s' % target.key, self.core.read_namespaced_pod, target.name, target.namespace)

    def read_budgets(self, namespace):
        listed = self._read('the PodDisruptionBudgets of namespace %s' % namespace,
                            self.policy.list_namespaced_pod_disruption_budget, namespace)
        return (listed or {}).get('items') or []

    def evict(self, target, dry_run):
        preconditions = V1Preconditions(uid=target.uid) if target.uid else None
        body = V1Eviction(metadata=V1ObjectMeta(name=target.name, namespace=target.namespace),
                          delete_options=V1DeleteOptions(preconditions=preconditions))
        kwargs = {'dry_run': 'All'} if dry_run else {}
        try:
            self.core.create_namespaced_pod_eviction(name=target.name, namespace=target.namespace, body=body, **kwargs)
        except ApiException as exc:
            return answer_of(exc)
        except (NoAnswerError, OSError) as exc:
            return Answer(0, str(exc))
        return Answer(201)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            pods=dict(type='list', elements='dict', required=True, options=dict(
                namespace=dict(type='str', required=True),
                name=dict(type='str', required=True),
                uid=dict(type='str'),
            )),
            dry_run=dict(type='bool', default=False),
            timeout=dict(type='int', default=120),
            **connection_argument_spec(env_fallback)
        ),
        supports_check_mode=True,
    )
    if KUBERNETES_ERROR:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=KUBERNETES_ERROR)
    if module.params['timeout'] < 0:
        module.fail_json(msg='timeout must be 0 or more seconds, got %d' % module.params['timeout'])
    dry_run = module.params['dry_run'] or module.check_mode
    try:
        api_client = k8s_client.ApiClient(configuration(module.params))
    except (k8s_config.ConfigException, IOError, ValueError) as exc:
        module.fail_json(msg='cannot connect to the Kubernetes API: %s' % exc)
    client = KubernetesEvictions(k8s_client.CoreV1Api(api_client), k8s_client.PolicyV1Api(api_client), api_client)
    result = outcome(client, module.params['pods'], dry_run, module.params['timeout'])
    if result.pop('failed', False):
        module.fail_json(**result)
    module.exit_json(**result)


def outcome(client, pods, dry_run, timeout, clock=time.monotonic, sleep=time.sleep):
    """The module's result: ``failed`` (with ``msg``) unless every pod was evicted, or, for a dry run, the API could not
    be read."""
    targets = [Target.from_dict(pod) for pod in pods]
    try:
        run = evict_all_or_none(client, targets, dry_run, timeout, clock, sleep)
    except EvictionApiError as exc:
        return {'failed': True, 'changed': False, 'dry_run': dry_run, 'results': [],
                'msg': '%s; nobody was evicted' % exc}
    result = run.as_dict()
    result['changed'] = any(r['evicted'] and r['status'] in ACCEPTED for r in result['results'])
    if result['problem'] and not dry_run:
        result.update(failed=True, msg=result['problem'])
    return result


if __name__ == '__main__':
    main()
