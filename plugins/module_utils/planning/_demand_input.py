# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The fleet demand planner's input, checked: the pods that wait (Kubernetes Pod objects or
``{pod, priority, requests}``), their MIG requests, and the policy.

Pure Python: no NVML, no Ansible imports. Bad input is refused with one line naming what and where
(:class:`DemandPlanError`); docs/demand.md explains each policy key.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import profile_of_resource
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import MigProfile, ProfileError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._node_fit import NodeFitError, NodeRoom, PodPlacementRules

DISRUPTION_ORDER = ('none', 'create-only', 'destroy-idle', 'evict')
POLICY_KEYS = ('reshape_nodes', 'floor', 'max_gpus_per_run', 'evict_below_priority', 'running_priorities', 'release_idle')


class DemandPlanError(GpufleetError, ValueError):
    """Input the demand planner cannot use; the message is one line naming what and where."""


# ---- input ----------------------------------------------------------------------------------

def _int(value, what):
    if isinstance(value, bool) or not isinstance(value, int):
        raise DemandPlanError('%s must be an integer, got %r' % (what, value))
    return value


def pod_requests(pod):
    """``{profile: count}`` of the MIG devices a Kubernetes pod object asks for.

    Extended resources are requested through limits (requests, when given, must equal them:
    Kubernetes docs, "Manage resources for containers", extended resources). The pod needs the
    sum over its containers, or the most any one init container asks, whichever is larger
    (Kubernetes docs, "Init containers", resources).
    """
    spec = pod.get('spec') or {}

    def container_requests(container):
        resources = container.get('resources') or {}
        merged = dict(resources.get('requests') or {})
        merged.update(resources.get('limits') or {})
        counts = {}
        for resource in sorted(merged):
            profile = profile_of_resource(resource)
            if profile is not None:
                counts[profile] = counts.get(profile, 0) + int(merged[resource])
        return counts

    total = {}
    for container in spec.get('containers') or []:
        for profile, count in container_requests(container).items():
            total[profile] = total.get(profile, 0) + count
    for container in spec.get('initContainers') or []:
        for profile, count in container_requests(container).items():
            total[profile] = max(total.get(profile, 0), count)
    return dict((profile, count) for profile, count in total.items() if count)


def _rules(pod, where, name):
    try:
        return PodPlacementRules.of_pod(pod)
    except (NodeFitError, AttributeError, TypeError) as exc:
        raise DemandPlanError('%s (%s): %s' % (where, name, exc))


def _pending_pod(entry, position, objects=None):
    """One waiting pod in plain form: {pod, priority, priority_class, created, requests, rules}.

    ``rules`` (:class:`PodPlacementRules`, or None when unknown or not asked for) come from the Pod object: the
    entry itself, or the object of the same ``namespace/name`` in ``objects`` for an entry in plain form; only
    with ``objects`` (None: no node rule is checked, so nothing is read for them)."""
    where = 'pending[%d]' % position
    if not isinstance(entry, dict):
        raise DemandPlanError('%s must be a mapping (a pod or {pod, priority, requests}), got %s' % (where, type(entry).__name__))
    if 'metadata' in entry or 'spec' in entry:   # a Kubernetes Pod object
        metadata = entry.get('metadata') or {}
        spec = entry.get('spec') or {}
        if not metadata.get('name'):
            raise DemandPlanError('%s: the pod has no metadata.name' % where)
        name = '%s/%s' % (metadata.get('namespace') or 'default', metadata['name'])
        try:
            requests = pod_requests(entry)
        except (TypeError, ValueError):
            raise DemandPlanError('%s (%s): a MIG resource count is not a whole number' % (where, name))
        priority = spec.get('priority') or 0
        priority_class = spec.get('priorityClassName') or ''
        created = metadata.get('creationTimestamp') or ''
        rules = _rules(entry, where, name) if objects is not None else None
    else:
        name = entry.get('pod')
        if not isinstance(name, str) or name.count('/') != 1 or not all(name.split('/')):
            raise DemandPlanError("%s: 'pod' must be 'namespace/name', got %r" % (where, name))
        raw = entry.get('requests')
        if not isinstance(raw, dict):
            raise DemandPlanError("%s (%s): 'requests' must map nvidia.com/mig-<profile> (or a profile) to a count" % (where, name))
        requests = {}
        for key in sorted(raw):
            profile = profile_of_resource(key) if str(key).startswith('nvidia.com/') else key
            try:
                parsed = MigProfile.parse(profile) if profile is not None else None
            except ProfileError as exc:
                raise DemandPlanError('%s (%s): %s' % (where, name, exc))
            if parsed is None or parsed.is_compute_instance_profile:
                raise DemandPlanError('%s (%s): %r is not a MIG device resource (nvidia.com/mig-<profile>)' % (where, name, key))
            count = _int(raw[key], '%s (%s) count of %s' % (where, name, key))
            if count < 0:
                raise DemandPlanError('%s (%s): count of %s must not be negative' % (where, name, key))
            if count:
                requests[parsed.name] = requests.get(parsed.name, 0) + count
        priority = entry.get('priority', 0)
        priority_class = entry.get('priority_class') or ''
        created = entry.get('created') or ''
        known = (objects or {}).get(name)
        rules = _rules(known, where, name) if known is not None else None
    return {'pod': name, 'priority': _int(priority, '%s (%s) priority' % (where, name)),
            'priority_class': str(priority_class), 'created': str(created), 'requests': requests, 'rules': rules}


def _object_key(pod):
    metadata = pod.get('metadata') or {}
    return '%s/%s' % (metadata.get('namespace') or 'default', metadata.get('name') or '')


def _cluster(cluster, node_names):
    """(room of each plan node, or None for a host with no Node object; Pod objects by namespace/name), or
    (None, None) without ``cluster``: then no node rule is checked.

    ``cluster``: ``{'nodes': {plan node: Kubernetes Node object}, 'pods': [Pod objects]}``; the pods bound to a
    node take from its allocatable CPU and memory, and the waiting pods' objects give the rules of entries in
    plain form."""
    if cluster is None:
        return None, None
    if not isinstance(cluster, dict) or not isinstance(cluster.get('nodes', {}), dict) \
            or not isinstance(cluster.get('pods', []), list):
        raise DemandPlanError("cluster must be {'nodes': {node: Node object}, 'pods': [Pod objects]}")
    objects = cluster.get('nodes') or {}
    pods = cluster.get('pods') or []
    if not all(isinstance(p, dict) for p in pods) or not all(isinstance(n, dict) for n in objects.values()):
        raise DemandPlanError('cluster: every Node and Pod must be an object (a mapping)')
    rooms = {}
    for node in node_names:
        try:
            rooms[node] = NodeRoom.of_node(objects[node], pods) if objects.get(node) else None
        except (NodeFitError, AttributeError, TypeError) as exc:
            raise DemandPlanError('cluster.nodes[%s]: %s' % (node, exc))
    return rooms, dict((_object_key(p), p) for p in pods)


def _policy(policy, node_names):
    policy = dict(policy or {})
    unknown = sorted(set(policy) - set(POLICY_KEYS))
    if unknown:
        raise DemandPlanError('policy: unknown key(s) %s (known: %s)' % (', '.join(unknown), ', '.join(POLICY_KEYS)))
    reshape = policy.get('reshape_nodes')
    if reshape is None:
        reshape = list(node_names)
    if not isinstance(reshape, list) or not all(isinstance(n, str) for n in reshape):
        raise DemandPlanError('policy.reshape_nodes must be a list of node names')
    max_gpus = policy.get('max_gpus_per_run')
    if max_gpus is not None and _int(max_gpus, 'policy.max_gpus_per_run') < 0:
        raise DemandPlanError('policy.max_gpus_per_run must not be negative')
    evict_below = policy.get('evict_below_priority')
    if evict_below is not None:
        _int(evict_below, 'policy.evict_below_priority')
    floor = policy.get('floor') or {}
    if not isinstance(floor, dict):
        raise DemandPlanError('policy.floor must map a node to {profile: count} or {GPU index: {profile: count}}')
    release_idle = policy.get('release_idle', False)
    if not isinstance(release_idle, bool):
        raise DemandPlanError('policy.release_idle must be true or false, got %r' % (release_idle,))
    running = policy.get('running_priorities') or {}
    if not isinstance(running, dict):
        raise DemandPlanError("policy.running_priorities must map 'namespace/name' to a priority")
    for pod in sorted(running):
        _int(running[pod], 'policy.running_priorities[%s]' % pod)
    return {'reshape_nodes': sorted(set(reshape)), 'floor': floor, 'max_gpus_per_run': max_gpus,
            'evict_below_priority': evict_below, 'running_priorities': running, 'release_idle': release_idle}


def _floor_of(floor, node, index):
    """The floor of one GPU: ``floor[node]`` is {profile: count} for every GPU or {GPU index: {profile: count}}."""
    node_floor = floor.get(node) or {}
    if not isinstance(node_floor, dict):
        raise DemandPlanError('policy.floor[%s] must be a mapping' % node)
    per_gpu = [k for k in node_floor if isinstance(k, int) or (isinstance(k, str) and k.isdigit())]
    if per_gpu:
        node_floor = node_floor.get(index, node_floor.get(str(index))) or {}
    result = {}
    for profile in sorted(node_floor):
        result[profile] = _int(node_floor[profile], 'policy.floor[%s] count of %s' % (node, profile))
    return result
