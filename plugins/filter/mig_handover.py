# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filters of the mig_layout role's Kubernetes hand-over: the decisions of _node_handover, as plain data."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _node_advertisement as node_advertisement
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _node_events as node_events
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _node_evictions as node_evictions
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _node_handover as handover


def _call(function, *args, **kwargs):
    try:
        return function(*args, **kwargs)
    except handover.HandoverError as exc:
        raise AnsibleFilterError(str(exc))


def mig_handover_scope(decision):
    """Whether the host's change only creates instances in free slices (no cordon, no eviction needed), with the reason."""
    return handover.ChangeScope(decision).as_dict()


def mig_handover_switch(pod_resources, switch, drain_fallback=False, repack=False, create_only=False):
    """The switch mode (in_place, drain, repack, create_only) with its reason and whether it cordons, or its problem."""
    return _call(handover.SwitchMode, switch, pod_resources, drain_fallback, repack, create_only).as_dict()


def mig_handover_pod_resources(k8s, switch, drain_fallback=False, decision=None, applied=None, repack=False, requested='auto'):
    """How the host reads pod-resources through a change (decide, apply) and whether the hand-back compares device ids."""
    return _call(handover.pod_resources_use, k8s, switch, drain_fallback, decision, applied, repack, requested)


def mig_handover_other_owners(node, resource_slices=()):
    """Who else manages MIG on the node (the GPU operator's MIG manager, NVIDIA's DRA driver with dynamic MIG), in words."""
    return handover.other_owners(node, resource_slices)


def mig_handover_decision_retry(message, k8s, install_dependencies, drain_fallback):
    """Whether a failed decision call may be retried after installing packages, or as a drain."""
    return handover.decision_retry(message, k8s, install_dependencies, drain_fallback)


def mig_handover_node(node, layout, components=handover.DEFAULT_COMPONENTS, cordon=True, pause_timeout=300):
    """The node's start, rebooting and success patches and its components, from the node as found."""
    return _call(handover.NodeHandover, node, layout, components, cordon, pause_timeout).as_dict()


def mig_handover_failure(node_handover, reason, gpu_changed, applied=None):
    """The failed-change patch and whether to uncordon, from mig_handover_node's value."""
    return handover.failure(node_handover, reason, gpu_changed, applied)


def mig_handover_failure_outcome(failed, node, write_error=None, uncordon_error=None):
    """What the node shows after a failed change (the end of the role's failure message)."""
    return handover.failure_outcome(failed, node, write_error, uncordon_error)


def mig_handover_evictions(pods, mode, pods_to_evict=(), force=False, delete_emptydir_data=False, paused_labels=(), node='',
                           pod_resources_read=True):
    """The pods to evict and those refused (with the problem), from the node's pods after the cordon."""
    return _call(node_evictions.EvictionPlan, pods, mode, pods_to_evict, force, delete_emptydir_data, paused_labels, node,
                 pod_resources_read).as_dict()


def mig_handover_eviction_problem(results, node='', dry_run=True):
    """Why the Eviction API refused (gpufleet.mig.mig_pod_eviction results), or None."""
    return node_evictions.eviction_problem(results, node, dry_run)


def mig_handover_paused_left(pods, paused_labels):
    """The pods of paused components still on the node."""
    return handover.paused_pods_left(pods, paused_labels)


def mig_handover_paused_wait(listed, paused_labels, node='', timeout=0):
    """Where the wait for the paused components' pods stands (done, left, problem), from the k8s_info result."""
    return handover.paused_wait(listed, paused_labels, node, timeout)


def mig_handover_pods_left(pods, evicted=None):
    """The evicted pods still running; without ``evicted``, the pods a drain before a reboot must have moved."""
    if evicted is None:
        return node_evictions.pods_in_the_way_of_reboot(pods)
    return node_evictions.pods_left(pods, evicted)


def mig_handover_advertised(expected, advertised, strategy='uuid'):
    """Whether the kubelet advertises exactly the expected device ids (missing, stale, problem)."""
    return _call(node_advertisement.Advertisement, expected, advertised, strategy).as_dict()


def mig_handover_allocatable_short(expected_counts, allocatable):
    """The GPU resources the node's allocatable advertises fewer of than the GPUs hold."""
    return node_advertisement.allocatable_short(expected_counts, allocatable)


def mig_handover_layout(labels, configured, follow_label, layouts):
    """The layout this run applies (the role's, or the node label's when followed), with its reason or problem."""
    return handover.LayoutRequest(labels, configured, follow_label, layouts).as_dict()


def mig_handover_recovery(node, layout, components=handover.DEFAULT_COMPONENTS):
    """What the node of a host already in the layout needs (patch, uncordon), or None."""
    return _call(handover.recovery, node, layout, components)


def mig_handover_event(regarding, reason, note, stamp, sequence=0, warning=False):
    """An events.k8s.io/v1 Event about a Node or Pod."""
    return node_events.event(regarding, reason, note, stamp, sequence, warning)


class FilterModule(object):
    """gpufleet.mig hand-over filters."""

    def filters(self):
        return {
            'mig_handover_scope': mig_handover_scope,
            'mig_handover_switch': mig_handover_switch,
            'mig_handover_node': mig_handover_node,
            'mig_handover_other_owners': mig_handover_other_owners,
            'mig_handover_pod_resources': mig_handover_pod_resources,
            'mig_handover_decision_retry': mig_handover_decision_retry,
            'mig_handover_failure': mig_handover_failure,
            'mig_handover_failure_outcome': mig_handover_failure_outcome,
            'mig_handover_evictions': mig_handover_evictions,
            'mig_handover_eviction_problem': mig_handover_eviction_problem,
            'mig_handover_paused_left': mig_handover_paused_left,
            'mig_handover_paused_wait': mig_handover_paused_wait,
            'mig_handover_pods_left': mig_handover_pods_left,
            'mig_handover_advertised': mig_handover_advertised,
            'mig_handover_allocatable_short': mig_handover_allocatable_short,
            'mig_handover_layout': mig_handover_layout,
            'mig_handover_recovery': mig_handover_recovery,
            'mig_handover_event': mig_handover_event,
        }
