# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Which pods a MIG change on a node evicts, and what is left of them, decided as values.

Pure Python (no Ansible, no Kubernetes client): the mig_layout role evicts through the Eviction API with
kubernetes.core and hands the pods and the results to these functions through the
gpufleet.mig.mig_handover_* filters.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._gpu_pods import (
    MIRROR_ANNOTATION,
    _controller,
    _owner_kinds,
    _requests_gpu,
    _running,
    _selector_keys,
    pod_key,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._node_handover import HandoverError


class EvictionPlan(object):
    """The pods to evict before the change, and those refused, from the node's pods as listed.

    ``pods`` are the node's Pod objects (after the cordon). In place, the pods the host's decision
    names (``namespace/name`` or ``uid:<uid>``: pods on instances that go); drain, every running pod
    that requests a GPU resource and every pod the host's decision names (nvidia_mig_layout with ``drain``:
    every pod that holds a device of the GPUs by id, renamed resources and DRA claims included, the same
    allocations as in place); where the host could not read pod-resources (``pod_resources_read`` false) a
    drain refuses, by name, a pod with a DRA claim or an extended resource that is no GPU resource, since
    whether it holds a GPU is unknown (_pod_allocations: refuse rather than guess); repack and create_only,
    nobody; reboot, every running pod but the DaemonSets' and static pods (what
    ``kubectl drain --ignore-daemonsets`` moves: a reboot ends them all, and those two come back with
    the node). A pod that a paused component's label schedules goes with the pause.
    A pod is refused, by name, before anything is evicted, when an eviction cannot move it as
    ``kubectl drain`` would not: a static (mirror) pod, a DaemonSet pod (its DaemonSet places it again
    at once), a pod with no controller (unless ``force``: ``kubectl drain --force``) or with emptyDir
    data (unless ``delete_emptydir_data``: ``--delete-emptydir-data``). A pod the host names that the
    API server does not list on the node cannot be evicted either: refused.
    """

    def __init__(self, pods, mode, pods_to_evict=(), force=False, delete_emptydir_data=False, paused_labels=(), node='',
                 pod_resources_read=True):
        if mode not in ('in_place', 'drain', 'repack', 'create_only', 'reboot'):
            raise HandoverError('no switch mode to plan evictions with: %r' % (mode,))
        self.mode = mode
        self.node = node
        paused = set(paused_labels or ())
        running = [pod for pod in pods or [] if _running(pod)]
        stays_paused = set(pod_key(pod) for pod in running if paused & _selector_keys(pod))
        self.gpu_pods = sorted(pod_key(pod) for pod in running if _requests_gpu(pod) and pod_key(pod) not in stays_paused)
        unseen = []
        if mode in ('repack', 'create_only'):
            chosen, unknown = [], []
        elif mode == 'reboot':
            stays = set(pods_in_the_way_of_reboot(running)) - stays_paused
            chosen, unknown = [pod for pod in running if pod_key(pod) in stays], []
        else:
            named = set(pods_to_evict or ())
            chosen, found = [], set()
            for pod in running:
                aliases = set([pod_key(pod), 'uid:%s' % (pod.get('metadata') or {}).get('uid')])
                if aliases & named:
                    found |= aliases
                    if pod_key(pod) not in stays_paused:
                        chosen.append(pod)
                elif mode == 'drain' and pod_key(pod) in self.gpu_pods:
                    chosen.append(pod)
                elif mode == 'drain' and not pod_resources_read and pod_key(pod) not in stays_paused and _may_hold_unseen(pod):
                    unseen.append(pod_key(pod))
            unknown = sorted(named - found)
            # A pod the host names holds a GPU however it asked for it (a DRA claim, a renamed resource): it is on the
            # GPUs as surely as one whose spec requests nvidia.com/mig-<profile>.
            self.gpu_pods = sorted(set(self.gpu_pods) | set(pod_key(pod) for pod in chosen))
        self.evict = []
        self.refused = [{'pod': name, 'reason': 'the host sees it on an instance that goes, but the API server lists no such '
                                                'running pod on the node: it cannot be evicted'} for name in unknown]
        self.refused.extend({'pod': name, 'reason': "it has a DRA claim or a device plugin resource that is no GPU's name, and the "
                                                    "kubelet's pod-resources were not read: whether it holds a GPU is unknown"}
                            for name in sorted(unseen))
        for pod in sorted(chosen, key=pod_key):
            reason = self._refusal(pod, force, delete_emptydir_data)
            if reason:
                self.refused.append({'pod': pod_key(pod), 'reason': reason})
            else:
                metadata = pod.get('metadata') or {}
                self.evict.append({'namespace': metadata.get('namespace') or 'default', 'name': metadata.get('name'),
                                   'uid': metadata.get('uid')})

    @staticmethod
    def _refusal(pod, force, delete_emptydir_data):
        metadata = pod.get('metadata') or {}
        kinds = _owner_kinds(pod)
        if MIRROR_ANNOTATION in (metadata.get('annotations') or {}) or 'Node' in kinds:
            return "a static pod (the kubelet's manifest): the API cannot evict it; remove its manifest from the node first"
        if 'DaemonSet' in kinds:
            return ('a DaemonSet pod: its DaemonSet would place it again at once; keep it off the node or add its component '
                    'to mig_layout_k8s_paused_components')
        if _controller(pod) is None and not force:
            return ('no controller would start it again: set mig_layout_k8s_evict_bare_pods=true to delete it anyway '
                    '(kubectl drain --force)')
        volumes = (pod.get('spec') or {}).get('volumes') or []
        if any('emptyDir' in volume for volume in volumes) and not delete_emptydir_data:
            return ('its emptyDir data would be lost: set mig_layout_k8s_delete_emptydir_data=true to evict it anyway '
                    '(kubectl drain --delete-emptydir-data)')
        return None

    def problem(self):
        """Why nobody may be evicted, naming every refused pod, or None."""
        if not self.refused:
            return None
        refused = '; '.join('%s: %s' % (r['pod'], r['reason']) for r in self.refused)
        if self.mode == 'reboot':
            return ('pod(s) the reboot would end cannot be moved from node %s, so nobody was evicted and the host was not '
                    'rebooted: %s' % (self.node, refused))
        return ('pod(s) on instances that go cannot be moved from node %s, so nobody was evicted and no GPU was changed: %s'
                % (self.node, refused))

    def as_dict(self):
        return {'mode': self.mode, 'gpu_pods': self.gpu_pods, 'evict': self.evict, 'refused': self.refused,
                'problem': self.problem()}


def _may_hold_unseen(pod):
    """A pod that may hold a GPU only pod-resources could tell: a DRA claim, or an extended resource (a name with a
    '/') that is no GPU resource's name (a renamed one: the device_plugin role's rename)."""
    spec = pod.get('spec') or {}
    if spec.get('resourceClaims'):
        return True
    for container in list(spec.get('containers') or []) + list(spec.get('initContainers') or []):
        resources = container.get('resources') or {}
        if (resources.get('claims') or
                any('/' in name for section in ('requests', 'limits') for name in resources.get(section) or {})):
            return True
    return False


def eviction_problem(results, node='', dry_run=True):
    """Why the evictions (as gpufleet.mig.mig_pod_eviction reports them) were refused, or None.

    Each result has ``pod``, ``status`` (HTTP status; 0 when the request failed before an answer),
    ``allowed``, ``message`` and ``causes`` (the Status's details.causes). A PodDisruptionBudget refusal
    is HTTP 429 with the message "Cannot evict pod as it would violate the pod's disruption budget."
    and a cause of reason DisruptionBudget naming the budget ("The disruption budget <name> needs <n> healthy pods and has
    <m> currently"): k8s.io/kubernetes pkg/registry/core/pod/storage/eviction.go.
    """
    refused = [r for r in results or [] if not r.get('allowed')]
    if not refused:
        return None
    parts = []
    for result in refused:
        # metav1.StatusCause serialises its Type as "reason".
        budgets = [c.get('message') for c in result.get('causes') or [] if c.get('reason') == 'DisruptionBudget' and c.get('message')]
        why = result.get('message') or 'no answer'
        if budgets:
            why = '%s (%s)' % (why.rstrip('.'), '; '.join(budgets))
        parts.append('%s: HTTP %s %s' % (result.get('pod'), result.get('status'), why))
    if dry_run:
        head = 'the API server refused the eviction (tried as a dry run first) of'
        tail = 'nobody was evicted and no GPU was changed'
    else:
        head = 'the API server refused the eviction of'
        tail = 'the pods before it were evicted; no GPU was changed'
    return '%s %s on node %s: %s; %s' % (head, 'a pod' if len(refused) == 1 else '%d pods' % len(refused), node,
                                         '; '.join(parts), tail)


def pods_left(pods, evicted):
    """The evicted pods (namespace/name) still listed and not finished: those the change must not outrun."""
    uids = set(pod.get('uid') for pod in evicted or [])
    return sorted(pod_key(pod) for pod in pods or [] if _running(pod) and (pod.get('metadata') or {}).get('uid') in uids)


def pods_in_the_way_of_reboot(pods):
    """Running pods a drain before a reboot must have moved (DaemonSet and static pods stay, as with kubectl drain)."""
    left = []
    for pod in pods or []:
        kinds = _owner_kinds(pod)
        mirror = MIRROR_ANNOTATION in ((pod.get('metadata') or {}).get('annotations') or {})
        if _running(pod) and 'DaemonSet' not in kinds and 'Node' not in kinds and not mirror:
            left.append(pod_key(pod))
    return sorted(left)
