# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fake Eviction API with the API server's rules, written apart from the code under test: the oracle of the
eviction tests. Rules: k8s.io/kubernetes pkg/registry/core/pod/storage/eviction.go (EvictionREST.Create,
checkAndDecrement, getPodDisruptionBudgets) and k8s.io/apimachinery LabelSelectorAsSelector."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._eviction_pass import Answer, EvictionApiError


def pod(name, labels=None, namespace='ml', phase='Running', ready=True, deleting=False, uid=None):
    metadata = {'name': name, 'namespace': namespace, 'uid': uid or 'uid-' + name, 'labels': dict(labels or {})}
    if deleting:
        metadata['deletionTimestamp'] = '2026-12-04T10:00:00Z'
    return {'apiVersion': 'v1', 'kind': 'Pod', 'metadata': metadata,
            'status': {'phase': phase, 'conditions': [{'type': 'Ready', 'status': 'True' if ready else 'False'}]}}


def pdb(name, selector, allowed, namespace='ml', generation=1, observed=1, current=2, desired=1, policy=None,
        disrupted=0, sync_failed=None):
    """A PodDisruptionBudget; ``selector`` is its spec.selector as given (None: none)."""
    spec = {} if selector is None else {'selector': selector}
    if policy:
        spec['unhealthyPodEvictionPolicy'] = policy
    status = {'disruptionsAllowed': allowed, 'observedGeneration': observed, 'currentHealthy': current,
              'desiredHealthy': desired, 'disruptedPods': dict(('p%d' % i, '2026-12-04T10:00:00Z') for i in range(disrupted))}
    if sync_failed:
        status['conditions'] = [{'type': 'DisruptionAllowed', 'status': 'False', 'reason': 'SyncFailed', 'message': sync_failed}]
    return {'apiVersion': 'policy/v1', 'kind': 'PodDisruptionBudget',
            'metadata': {'name': name, 'namespace': namespace, 'generation': generation}, 'spec': spec, 'status': status}


def target(name, namespace='ml', uid=None):
    return {'namespace': namespace, 'name': name, 'uid': uid or 'uid-' + name}


def selects(selector, labels):
    """LabelSelectorAsSelector(selector).Matches(labels), with the Eviction API's "an empty selector matches nothing"."""
    if selector is None:
        return False
    match_labels = selector.get('matchLabels') or {}
    expressions = selector.get('matchExpressions') or []
    if not match_labels and not expressions:
        return False
    for expression in expressions:
        operator, values = expression.get('operator'), expression.get('values') or []
        if operator not in ('In', 'NotIn', 'Exists', 'DoesNotExist') or (operator in ('In', 'NotIn')) != bool(values):
            return False
    if any(labels.get(key) != value for key, value in match_labels.items()):
        return False
    for expression in expressions:
        key, operator, values = expression['key'], expression['operator'], expression.get('values') or []
        satisfied = {'In': key in labels and labels[key] in values, 'NotIn': key not in labels or labels[key] not in values,
                     'Exists': key in labels, 'DoesNotExist': key not in labels}[operator]
        if not satisfied:
            return False
    return True


class FakeEvictionApi(object):
    """The API server for the evictions: pods, budgets, and scripted answers (``script[name]``: Answers given, one per
    real eviction request of that pod, before the rules apply; an (Answer, True) pair also deletes the pod, as a request
    whose answer was lost; ``dry_script`` likewise for dry runs). ``unreadable``: pods whose read gets no answer."""

    def __init__(self, pods, pdbs, script=None, unreadable=(), dry_script=None):
        self.pods = dict(((p['metadata']['namespace'], p['metadata']['name']), copy.deepcopy(p)) for p in pods)
        self.pdbs = [copy.deepcopy(b) for b in pdbs]
        self.script = dict((k, list(v)) for k, v in (script or {}).items())
        self.unreadable = set(unreadable)
        self.dry_script = dict((k, list(v)) for k, v in (dry_script or {}).items())
        self.calls = []

    def read_pod(self, target):
        self.calls.append(('read', target.key))
        if target.name in self.unreadable:
            raise EvictionApiError('cannot read pod %s: no answer (connection refused)' % target.key)
        return copy.deepcopy(self.pods.get((target.namespace, target.name)))

    def read_budgets(self, namespace):
        self.calls.append(('budgets', namespace))
        return [copy.deepcopy(b) for b in self.pdbs if b['metadata']['namespace'] == namespace]

    def evict(self, target, dry_run):
        self.calls.append(('dry-run' if dry_run else 'evict', target.key))
        if dry_run and self.dry_script.get(target.name):
            return self.dry_script[target.name].pop(0)
        if not dry_run and self.script.get(target.name):
            scripted = self.script[target.name].pop(0)
            if isinstance(scripted, tuple):  # (answer, the eviction went through anyway)
                scripted, went_through = scripted
                if went_through:
                    self.pods.pop((target.namespace, target.name), None)
            return scripted
        return self._evict(target, dry_run)

    def _evict(self, target, dry_run):
        current = self.pods.get((target.namespace, target.name))
        if current is None:
            return Answer(404, 'pods "%s" not found' % target.name)
        metadata, status = current['metadata'], current['status']
        if target.uid and metadata['uid'] != target.uid:
            return Answer(409, 'Precondition failed: UID in precondition: %s' % target.uid)
        if status['phase'] in ('Succeeded', 'Failed', 'Pending') or metadata.get('deletionTimestamp'):
            return self._delete(target, dry_run)
        guards = [b for b in self.pdbs if b['metadata']['namespace'] == target.namespace
                  and selects(b['spec'].get('selector'), metadata.get('labels') or {})]
        if len(guards) > 1:
            return Answer(500, 'This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.')
        if not guards:
            return self._delete(target, dry_run)
        budget = guards[0]
        spec, bstatus = budget['spec'], budget['status']
        ready = any(c['type'] == 'Ready' and c['status'] == 'True' for c in status.get('conditions') or [])
        if not ready and (spec.get('unhealthyPodEvictionPolicy') == 'AlwaysAllow'
                          or (bstatus['currentHealthy'] >= bstatus['desiredHealthy'] and bstatus['desiredHealthy'] > 0)):
            return self._delete(target, dry_run)
        if bstatus['observedGeneration'] < budget['metadata']['generation']:
            return Answer(429, "Cannot evict pod as it would violate the pod's disruption budget.",
                          (('DisruptionBudget', 'The disruption budget %s is still being processed by the server.' % budget['metadata']['name']),))
        if bstatus['disruptionsAllowed'] < 0 or len(bstatus['disruptedPods']) > 2000:
            return Answer(403, 'poddisruptionbudget "%s" is forbidden' % budget['metadata']['name'])
        if bstatus['disruptionsAllowed'] == 0:
            return Answer(429, "Cannot evict pod as it would violate the pod's disruption budget.",
                          (('DisruptionBudget', 'The disruption budget %s needs %d healthy pods and has %d currently'
                            % (budget['metadata']['name'], bstatus['desiredHealthy'], bstatus['currentHealthy'])),))
        if not dry_run:
            bstatus['disruptionsAllowed'] -= 1
        return self._delete(target, dry_run)

    def _delete(self, target, dry_run):
        if not dry_run:
            self.pods.pop((target.namespace, target.name))
        return Answer(201)

    def requests(self, kind):
        return [key for what, key in self.calls if what == kind]
