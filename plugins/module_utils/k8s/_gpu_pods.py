# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Which pods of a node use its GPUs: the Kubernetes objects the mig_layout role reads with kubernetes.core.

Pure Python (no Ansible, no Kubernetes client); the filter gpufleet.mig.mig_layout_gpu_pods hands the pods in.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import is_gpu_resource


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
        spec = pod.get('spec') or {}
        if (pod.get('status') or {}).get('phase') in ('Succeeded', 'Failed'):
            continue
        if any(owner.get('kind') == 'DaemonSet' for owner in metadata.get('ownerReferences') or []):
            continue
        known_as = set(['%s/%s' % (metadata.get('namespace', 'default'), metadata.get('name')), 'uid:%s' % metadata.get('uid')])
        if wanted is not None:
            if wanted & known_as:
                found.append({'namespace': metadata.get('namespace', 'default'), 'name': metadata.get('name')})
            continue
        containers = list(spec.get('containers') or []) + list(spec.get('initContainers') or [])
        requested = set()
        for container in containers:
            resources = container.get('resources') or {}
            for section in ('requests', 'limits'):
                requested.update(resources.get(section) or {})
        if any(is_gpu_resource(n) for n in requested):
            found.append({'namespace': metadata.get('namespace', 'default'), 'name': metadata.get('name')})
    return sorted(found, key=lambda p: (p['namespace'], p['name']))
