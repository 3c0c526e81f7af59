# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""A node's pods as the hand-over reads them (Kubernetes objects, read with kubernetes.core): their names,
whether they still run, who owns them, and which use the GPUs.

Pure Python (no Ansible, no Kubernetes client); the filter gpufleet.mig.mig_layout_gpu_pods hands the pods in.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import is_gpu_resource

FINISHED_PHASES = ('Succeeded', 'Failed')
# The kubelet marks the API's copy of a static pod (its "mirror pod") with this annotation.
MIRROR_ANNOTATION = 'kubernetes.io/config.mirror'


def pod_key(pod):
    """'namespace/name' of a Pod object."""
    metadata = pod.get('metadata') or {}
    return '%s/%s' % (metadata.get('namespace') or 'default', metadata.get('name'))


def _running(pod):
    return (pod.get('status') or {}).get('phase') not in FINISHED_PHASES


def _requests_gpu(pod):
    spec = pod.get('spec') or {}
    for container in list(spec.get('containers') or []) + list(spec.get('initContainers') or []):
        resources = container.get('resources') or {}
        for section in ('requests', 'limits'):
            if any(is_gpu_resource(name) for name in resources.get(section) or {}):
                return True
    return False


def _selector_keys(pod):
    """The node label keys a pod's scheduling requires (nodeSelector and required node affinity)."""
    spec = pod.get('spec') or {}
    keys = set(spec.get('nodeSelector') or {})
    required = (((spec.get('affinity') or {}).get('nodeAffinity') or {})
                .get('requiredDuringSchedulingIgnoredDuringExecution') or {})
    for term in required.get('nodeSelectorTerms') or []:
        keys.update(expr.get('key') for expr in term.get('matchExpressions') or [])
    return keys


def _owner_kinds(pod):
    return [owner.get('kind') for owner in (pod.get('metadata') or {}).get('ownerReferences') or []]


def _controller(pod):
    for owner in (pod.get('metadata') or {}).get('ownerReferences') or []:
        if owner.get('controller'):
            return owner
    return None


def gpu_pods(pods, names=None):
    """Pods (Kubernetes objects) that request a GPU resource (_gpu_resources: nvidia.com/gpu,
    nvidia.com/mig-<profile>, either shared) and still run.

    With ``names`` the running pods named there instead, as 'namespace/name' or 'uid:<pod uid>'
    (how nvidia_mig_layout's pods_to_evict names them), whatever they request: the host saw them
    on a GPU or instance that goes (a privileged pod's process requests nothing). DaemonSet pods
    are left out: the GPU DaemonSets are paused through their node labels instead.
    """
    wanted = None if names is None else set(names)
    found = []
    for pod in pods or []:
        metadata = pod.get('metadata') or {}
        if not _running(pod) or 'DaemonSet' in _owner_kinds(pod):
            continue
        known_as = set(['%s/%s' % (metadata.get('namespace', 'default'), metadata.get('name')), 'uid:%s' % metadata.get('uid')])
        if wanted is not None:
            if wanted & known_as:
                found.append({'namespace': metadata.get('namespace', 'default'), 'name': metadata.get('name')})
            continue
        if _requests_gpu(pod):
            found.append({'namespace': metadata.get('namespace', 'default'), 'name': metadata.get('name')})
    return sorted(found, key=lambda p: (p['namespace'], p['name']))
