# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The create-only fast path of demand-driven MIG: which waiting pods get new instances in free slices on one
host at once, decided by the event source from what it watches (docs/eda.md).

Pure Python: no NVML, no Ansible imports. Each GPU node carries the annotation ``gpufleet.mig/gpus``: its host's
GPUs as the demand planner reads them (:func:`gpus_annotation`, written by the playbooks that read the GPUs with
nvidia_mig_facts). :func:`fast_creates` runs the fleet demand planner (_demand_planner, the full path's own) on
those GPUs with the pods' node rules (_node_fit) and keeps what only creates instances in free slices: per host
the generated layout to apply and the creates it expects on each GPU. Everything else (existing instances that
would serve, a destroy, an eviction, demand that cannot be met) is left to the full demand playbook.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_input import DemandPlanError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_planner import plan_demand

GPUS_ANNOTATION = 'gpufleet.mig/gpus'
# The outcome of the latest fast create on the node: {"run", "result": created|refused, "reason"}.
CREATE_ANNOTATION = 'gpufleet.mig/demand-create'
ANNOTATION_VERSION = 1
_GPU_KEYS = ('index', 'uuid', 'name', 'mig_mode', 'profiles', 'allocated_to')
_INSTANCE_KEYS = ('id', 'profile', 'profile_id', 'placement', 'allocated_to')
_COMPUTE_KEYS = ('id', 'profile', 'placement')


def _slim_gpu(gpu):
    """What the demand planner reads of one GPU of nvidia_mig facts: the profiles, each instance with its placement,
    holders and compute instances (with the pids of their processes: an instance a process uses is not free)."""
    slim = dict((key, gpu[key]) for key in _GPU_KEYS if key in gpu)
    slim['gpu_instances'] = []
    for gi in gpu.get('gpu_instances') or []:
        entry = dict((key, gi[key]) for key in _INSTANCE_KEYS if key in gi)
        entry['compute_instances'] = []
        for ci in gi.get('compute_instances') or []:
            compute = dict((key, ci[key]) for key in _COMPUTE_KEYS if key in ci)
            compute['processes'] = [{'pid': p['pid']} for p in ci.get('processes') or [] if 'pid' in p]
            entry['compute_instances'].append(compute)
        slim['gpu_instances'].append(entry)
    return slim


def gpus_annotation(host, facts):
    """The annotation text of a node whose GPUs ``facts`` (nvidia_mig facts, or their gpus list) describe, as inventory
    host ``host`` (the host the fast path runs its create on). Compact JSON, keys sorted: the same GPUs, the same text."""
    if not isinstance(host, str) or not host:
        raise DemandPlanError('the annotation needs the inventory host name of the node')
    gpus = facts.get('gpus') if isinstance(facts, dict) else facts
    if not isinstance(gpus, list) or not all(isinstance(g, dict) and 'index' in g for g in gpus):
        raise DemandPlanError('host %s: expected the nvidia_mig facts (with gpus, each with its index)' % host)
    # GPUs without MIG or whose profiles are unknown place nothing: left out (a smaller annotation).
    kept = [_slim_gpu(g) for g in sorted(gpus, key=lambda g: g['index']) if g.get('profiles')]
    return json.dumps({'version': ANNOTATION_VERSION, 'host': host, 'gpus': kept}, sort_keys=True, separators=(',', ':'))


def read_gpus_annotation(text):
    """(host, gpus) of an annotation; DemandPlanError (one line) when it is not one this version writes."""
    try:
        data = json.loads(text)
    except (TypeError, ValueError):
        raise DemandPlanError('%s is not JSON' % GPUS_ANNOTATION)
    if not isinstance(data, dict) or data.get('version') != ANNOTATION_VERSION:
        raise DemandPlanError('%s: version %r, this collection reads version %d'
                              % (GPUS_ANNOTATION, data.get('version') if isinstance(data, dict) else None, ANNOTATION_VERSION))
    host, gpus = data.get('host'), data.get('gpus')
    if not isinstance(host, str) or not host or not isinstance(gpus, list):
        raise DemandPlanError('%s: needs host and gpus' % GPUS_ANNOTATION)
    return host, gpus


# The holder the fast path gives an instance that a pod bound to the node must hold, though the annotation (written
# before the pod was bound) names nobody.
BOUND_HOLDER = '(a pod bound since)'


def with_holders(gpus, held):
    """The annotation's GPUs with at least ``held`` ({profile: count}: what the pods bound to the node, or on their way
    to it, need) instances of each profile held. The annotation is written when a playbook reads the GPUs, before the
    pods they were made for are bound: without this an instance a pod holds since would look free, and the next pod of
    that profile would be planned onto it. Which instance is held does not change a create-only decision (new instances
    go to slices no instance takes): the first free ones are marked, by placement."""
    result = []
    left = dict(held or {})
    for gpu in gpus:
        gpu = dict(gpu)
        instances = []
        for gi in gpu.get('gpu_instances') or []:
            if gi.get('allocated_to') and left.get(gi.get('profile'), 0) > 0:
                left[gi['profile']] -= 1
            instances.append(gi)
        gpu['gpu_instances'] = instances
        result.append(gpu)
    for gpu in result:
        marked = []
        for gi in sorted(gpu['gpu_instances'], key=lambda i: (i.get('placement') or {}).get('start', 0)):
            if not gi.get('allocated_to') and left.get(gi.get('profile'), 0) > 0:
                left[gi['profile']] -= 1
                gi = dict(gi, allocated_to=[BOUND_HOLDER])
            marked.append(gi)
        gpu['gpu_instances'] = marked
    return result


def fast_creates(hosts, pending, node_objects, pods, policy=None, held=None):
    """The create-only changes that serve waiting pods, and the pods left to the full demand playbook.

    ``hosts``: {inventory host: GPUs as the annotation holds them}; ``node_objects``: {inventory host: its Node
    object}; ``pending``: the waiting pods' requests (as the event source tells them); ``pods``: Pod objects (the
    waiting ones give their node rules, the bound ones take from their node's CPU and memory); ``policy``: the
    demand playbook's mig_demand_policy; ``held``: {inventory host: {profile: count}} the pods bound to it (or on their
    way) need (:func:`with_holders`).

    Returns ``{'creates': [{host, node, layout: {name, config}, gpus: {GPU index: {profile: count}}, pods}],
    'rest': [pod keys]}``, sorted. A host's change is fast only when the plan creates instances there and does
    nothing else (disruption ``create-only``: no destroy, no eviction); the pods it serves go with it. Pods the
    plan serves elsewhere or otherwise (an idle instance that exists, a destroy), and those it cannot serve, are
    the rest. A plan that refuses its input (a malformed annotation) leaves every pod to the full path.
    """
    names = sorted(hosts)
    if not pending:
        return {'creates': [], 'rest': []}
    try:
        plan = plan_demand(dict((h, {'gpus': with_holders(hosts[h], (held or {}).get(h))}) for h in names), list(pending), policy or {},
                           {'nodes': dict((h, node_objects[h]) for h in names if node_objects.get(h)), 'pods': list(pods)})
    except DemandPlanError:
        return {'creates': [], 'rest': sorted(p['pod'] for p in pending)}
    served_on = {}
    for entry in plan['served']:
        served_on.setdefault(entry['node'], []).append(entry)
    creates = []
    fast_pods = set()
    for host in names:
        view = plan['nodes'].get(host)
        if view is None or view['disruption'] != 'create-only' or view['cordon']:
            continue
        expected = {}
        for gpu in view['gpus']:
            for action in gpu['actions']:
                if action['action'] != 'create_gpu_instance':   # create-only has no other action; kept strict
                    break
                counts = expected.setdefault(str(gpu['index']), {})
                counts[action['profile']] = counts.get(action['profile'], 0) + 1
        served = sorted(entry['pod'] for entry in served_on.get(host, []))
        if not expected or not served:
            continue
        node = (node_objects.get(host) or {}).get('metadata', {}).get('name', '')
        creates.append({'host': host, 'node': node, 'layout': view['layout'], 'gpus': expected, 'pods': served})
        fast_pods.update(served)
    rest = sorted(p['pod'] for p in pending if p['pod'] not in fast_pods)
    return {'creates': creates, 'rest': rest}


def node_patch(host, facts=None, run=None, result=None, reason=None):
    """The Node patch a playbook writes: the annotation of the GPUs ``facts`` describe (when read), and the outcome of
    fast run ``run`` (``created``, ``refused`` or ``failed``, with its one-line ``reason``), which the event source
    waits for before it decides on this node again."""
    annotations = {}
    if facts is not None:
        annotations[GPUS_ANNOTATION] = gpus_annotation(host, facts)
    if run:
        if result not in ('created', 'refused', 'failed'):
            raise DemandPlanError('the outcome of fast run %s must be created, refused or failed, got %r' % (run, result))
        outcome = {'run': run, 'result': result}
        if reason:
            outcome['reason'] = ' '.join(str(reason).split())[:1024]
        annotations[CREATE_ANNOTATION] = json.dumps(outcome, sort_keys=True)
    return {'metadata': {'annotations': annotations}}
