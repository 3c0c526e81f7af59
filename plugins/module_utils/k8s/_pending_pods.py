# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Which pods wait for MIG slices, and which hold them: the one rule of the event source gpufleet.mig.mig_pending_pods
(extensions/eda) and of the filter gpufleet.mig.mig_pending_requests (playbooks/mig_demand.yml reading the
pods with kubernetes.core.k8s_info). A pod counts when the scheduler could not place it for lack of a
``nvidia.com/mig-<profile>`` resource; its request is what the fleet demand planner takes.

Pure Python, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import is_shared_resource, profile_of_resource

_COUNT = re.compile(r'^[0-9]+\Z')


def resource_count(quantity):
    """An extended resource's quantity: a whole number (the API server refuses any other), else None."""
    text = str(quantity).strip()
    return int(text) if _COUNT.match(text) else None


def _container_mig(container):
    """{resource name: count} of one container's MIG resources (not the time-sliced '.shared' ones: a new
    instance would not add replicas in a known number). An extended resource given only as a limit is
    requested at that limit (Kubernetes' "Resource Management for Pods and Containers": requests default
    to limits, and extended resources cannot be overcommitted)."""
    resources = container.get('resources') or {}
    merged = dict(resources.get('limits') or {})
    merged.update(resources.get('requests') or {})
    wanted = {}
    for name, quantity in merged.items():
        if profile_of_resource(name) is None or is_shared_resource(name):
            continue
        count = resource_count(quantity)
        if count:
            wanted[name] = count
    return wanted


def pod_mig_resources(spec):
    """{resource name: count} the pod needs at once: its containers and restartable init containers
    (sidecars) together, or the largest plain init container if that is more (the pod's effective request,
    Kubernetes docs "Init Containers" > "Resource sharing within containers" and "Sidecar containers")."""
    total = {}
    for container in spec.get('containers') or []:
        for name, count in _container_mig(container).items():
            total[name] = total.get(name, 0) + count
    init_peaks = {}
    for container in spec.get('initContainers') or []:
        for name, count in _container_mig(container).items():
            if container.get('restartPolicy') == 'Always':
                total[name] = total.get(name, 0) + count
            else:
                init_peaks[name] = max(init_peaks.get(name, 0), count)
    for name, count in init_peaks.items():
        total[name] = max(total.get(name, 0), count)
    return total


def pod_resource_names(spec):
    """The resource names the pod's containers and init containers ask for a count of, by request or limit, sorted."""
    names = set()
    for container in (spec.get('containers') or []) + (spec.get('initContainers') or []):
        resources = container.get('resources') or {}
        for wanted in (resources.get('limits') or {}, resources.get('requests') or {}):
            names.update(name for name, quantity in wanted.items() if resource_count(quantity))
    return sorted(names)


def _unschedulable_message(status):
    """The PodScheduled condition's message when the scheduler marked the pod Unschedulable, else None."""
    for condition in status.get('conditions') or []:
        if condition.get('type') == 'PodScheduled':
            if condition.get('status') == 'False' and condition.get('reason') == 'Unschedulable':
                return condition.get('message') or ''
            return None
    return None


def pod_key(pod):
    metadata = pod.get('metadata') or {}
    return '%s/%s' % (metadata.get('namespace', ''), metadata.get('name', ''))


def pending_mig_request(pod):
    """The MIG request of a pod that waits for lack of a MIG resource, or None for any other pod.

    Such a pod is Pending, bound to no node, its PodScheduled condition False with reason Unschedulable
    (the scheduler's mark, Kubernetes docs "Pod Lifecycle" > "Pod conditions"), and the scheduler's message
    names one of the pod's MIG resources as insufficient: the NodeResourcesFit plugin writes
    "Insufficient <resource>" (kubernetes pkg/scheduler/framework/plugins/noderesources/fit.go), also when
    no node advertises the resource at all. A pod that waits for another reason (taints, affinity, quota)
    would not be placed by new instances, so it does not count.
    """
    spec = pod.get('spec') or {}
    status = pod.get('status') or {}
    if status.get('phase') != 'Pending' or spec.get('nodeName'):
        return None
    message = _unschedulable_message(status)
    if message is None:
        return None
    resources = pod_mig_resources(spec)
    if not any(('Insufficient ' + name) in message for name in resources):
        return None
    # The shape the fleet demand planner (filter gpufleet.mig.mig_demand_plan) takes for a pending pod.
    return {
        'pod': pod_key(pod),
        'priority': int(spec.get('priority') or 0),
        'priority_class': spec.get('priorityClassName') or '',
        'requests': dict(sorted((profile_of_resource(name), count) for name, count in resources.items())),
        'created': (pod.get('metadata') or {}).get('creationTimestamp', ''),
    }


def holds_mig_devices(pod):
    """Whether the pod holds MIG devices on a node: bound to it, not finished (phase neither Succeeded nor Failed)
    and asking for MIG resources. The kubelet's device manager keeps a pod's devices until the pod is terminal or
    gone (Kubernetes docs "Device Plugins"), so when such a pod ends or is deleted its instances are free again:
    the event source's release trigger. Time-sliced '.shared' replicas do not count, as for a pending request."""
    spec = pod.get('spec') or {}
    phase = (pod.get('status') or {}).get('phase')
    return bool(spec.get('nodeName')) and phase not in ('Succeeded', 'Failed') and bool(pod_mig_resources(spec))


def pending_mig_requests(pods):
    """The requests of the ``pods`` (Pod objects, e.g. every Pending pod of a list) that wait for MIG slices,
    sorted by namespace/name."""
    requests = [pending_mig_request(pod) for pod in pods or []]
    return sorted((request for request in requests if request is not None), key=lambda request: request['pod'])


def still_waiting(told, pods):
    """Of the requests an event told (``told``, as the event source puts them), those whose pod still waits for MIG
    slices among ``pods`` as listed now, each as listed now; sorted by namespace/name.

    ansible-rulebook runs its actions one after the other: a burst told during a run is planned after it, when
    some of its pods may have been placed already (on the instances the earlier run created). Planning for those
    again would create instances nobody waits for.
    """
    now = dict((request['pod'], request) for request in pending_mig_requests(pods))
    return [now[key] for key in sorted(set(request.get('pod') for request in told or [])) if key in now]
