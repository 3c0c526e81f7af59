# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The gated queue of the event source gpufleet.mig.mig_pending_pods (argument ``gated``, docs/eda.md): what the
source does for the pods that carry the slice gate (k8s/_slice_gate), decided by planning/_gated_queue.

Every decision is taken again from what the source watches, so a restart, a missed event or a run that never
answered leaves nothing behind: the GPU nodes (their annotation gpufleet.mig/gpus, the instances each holds as
its pods bound there count them), the gated pods, the pods pinned to a node (their gate gone, their affinity
narrowed, not bound yet: each reserves an idle instance of its profile there), and the create runs under way
(their node is left alone until the run tells its outcome in gpufleet.mig/demand-create, or ``create_timeout``
passes). What comes out are actions for the source:

* ``pin`` (pod, node): an idle instance of its profile waits on that node (``serve``), or a create run made one:
  the source removes the gate and narrows the pod's affinity to the node in one patch; kube-scheduler binds it.
* ``release`` (pod, reason): nobody serves it and it waited ``release_after``: the gate goes, the pod is
  kube-scheduler's, the reason is logged.
* ``create``: a mig_demand_create event (the fast path's run, the same playbook and guard) for the changes decided on
  one host: instances to create, and idle instances to destroy first (a reshape, or the release rule's destroys
  ``destroy_after`` seconds after the pod that held one ended: planning/_destroy_guard.FreedInstances), its pods
  pinned once the run says ``created``. The run destroys only idle instances (nvidia_mig_layout ``destroy_idle``: by
  device id under the host lock), and an idle instance is decided destroyed only while no pod could be given it before
  the run ends (planning/_destroy_guard.unsafe_destroys): meanwhile nothing else is created or destroyed on that node,
  and no pod of a profile the run destroys is pinned there or released.

A pod this queue cannot decide (several MIG devices, a resource that is not a MIG profile) is released at once with
that reason: the demand playbook's full path sees it as any pending pod.

Pure Python, no Ansible imports, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import logging
import os
import time

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._fast_path import (
    FAST_EVENT_KEY, bound_profiles, run_outcome, slim_node, slim_pod)
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_pods import (
    pod_key, pod_mig_resources, pod_resource_names, resource_count)
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._slice_gate import PIN_ANNOTATION, has_gate, pinned_node
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_fast import (
    GPUS_ANNOTATION, read_gpus_annotation, with_holders)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_input import DemandPlanError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_planner import layout_with_creates
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._destroy_guard import (
    FreedInstances, MigPod, guarded_profiles, unsafe_destroys)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gated_queue import (
    CREATE, DESTROY, RELEASE, RESHAPE, SERVE, GatedOptions, GatedPod, GatedQueue, destroys_of)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import profile_of_resource
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._node_fit import NodeFitError, NodeRoom, PodPlacementRules

LOG = logging.getLogger('mig_pending_pods')

PIN, RELEASE_POD = 'pin', 'release'
# The source's gated queue runs GatedOptions' defaults (reshape, destroy after 2 s), the benchmark's shipped row too.
SOURCE_OPTIONS = {}


def creation_seconds(pod):
    """The pod's creationTimestamp in seconds since the epoch (0 when unreadable: first in the queue)."""
    text = (pod.get('metadata') or {}).get('creationTimestamp') or ''
    try:
        return float(calendar.timegm(time.strptime(text, '%Y-%m-%dT%H:%M:%SZ')))
    except ValueError:
        return 0.0


def gated_pod(pod):
    """(GatedPod, None) for a pod the queue can decide (one device of one MIG profile), else (None, why not)."""
    spec = pod.get('spec') or {}
    wanted = pod_mig_resources(spec)
    profiles = [profile_of_resource(name) for name in wanted]
    if len(wanted) != 1 or sum(wanted.values()) != 1 or profiles[0] is None:
        return None, 'asks for %s: the gated queue decides pods of one MIG device' % (
            ', '.join('%s x%d' % (name, count) for name, count in sorted(wanted.items())) or 'no MIG device')
    try:
        rules = PodPlacementRules.of_pod(pod)
    except NodeFitError as exc:
        return None, str(exc)
    created = creation_seconds(pod)
    return GatedPod(pod_key(pod), profiles[0], int(spec.get('priority') or 0), created, created, rules), None


class GatedDemand(object):
    """The gated pods and GPU nodes the source watches, and its create runs under way (see the module's docstring)."""

    def __init__(self, options=None, create_timeout=120.0, token=None, renamed=()):
        self.options = options or GatedOptions(**SOURCE_OPTIONS)
        problem = self.options.problem()
        if problem:
            raise DemandPlanError(problem)
        self.create_timeout = float(create_timeout)
        self.renamed = frozenset(renamed)   # names the device plugin gives MIG devices besides nvidia.com/mig-*
        self.token = token or os.urandom(4).hex()
        self.pods = {}       # key -> slim pod with its scheduling gates, every pod not finished
        self.nodes = {}      # node name -> slim node, for the nodes with a GPU annotation
        self.hosts = {}      # node name -> (inventory host, GPUs)
        self.pinned = {}     # key -> node: pinned or released (None) by this source, until the watch shows it
        self.runs = {}       # run id -> (node, deadline, pods, profiles it destroys)
        self.created = []    # pods of runs that told ``created``, to pin
        self.listed = set()  # 'pods', 'nodes': lists seen (nothing is decided before both)
        self.sequence = 0
        self.next_deadline = None
        self.freed = FreedInstances()
        self.waiting = []    # (GatedPod, why nobody serves it now) of the last decision, in queue order
        self.ended = set()   # keys of pods the watch showed ended or deleted, while an annotation may still name them

    # -- what is watched --
    def update_pod(self, pod, deleted=False):
        key = pod_key(pod)
        if deleted or (pod.get('status') or {}).get('phase') in ('Succeeded', 'Failed'):
            self.pods.pop(key, None)
            self.pinned.pop(key, None)
            self.ended.add(key)
            return
        self.ended.discard(key)
        slim = slim_pod(pod)
        slim['spec']['schedulingGates'] = list((pod.get('spec') or {}).get('schedulingGates') or [])
        node = pinned_node(pod)
        if node:
            slim['metadata']['annotations'] = {PIN_ANNOTATION: node}
        # The kubelet admitted it (its devices allocated) once it wrote the containers' statuses (_destroy_guard).
        status = pod.get('status') or {}
        slim['status']['admitted'] = bool(status.get('containerStatuses') or status.get('initContainerStatuses'))
        self.pods[key] = slim
        if key in self.pinned and not has_gate(slim):
            del self.pinned[key]   # the watch shows the patch: the pod says where it goes

    def owns(self, pod):
        """Whether ``pod`` (a Pod object) is this queue's until it binds: pinned by it (gate gone, not bound yet). The
        full demand path leaves it alone: its instance is made or reserved here."""
        return not has_gate(pod) and pinned_node(pod) is not None and not (pod.get('spec') or {}).get('nodeName')

    def patch_failed(self, key):
        """The patch that pinned or released ``key`` failed: the pod is decided again."""
        self.pinned.pop(key, None)

    def replace_pods(self, pods):
        self.ended.update(self.pods)
        self.pods, self.pinned = {}, {}
        for pod in pods:
            self.update_pod(pod)
        self.listed.add('pods')

    def update_node(self, node, now, deleted=False):
        metadata = node.get('metadata') or {}
        name = metadata.get('name') or ''
        annotations = {} if deleted else metadata.get('annotations') or {}
        self.nodes.pop(name, None)
        self.hosts.pop(name, None)
        if annotations.get(GPUS_ANNOTATION) is not None:
            try:
                self.hosts[name] = read_gpus_annotation(annotations[GPUS_ANNOTATION])
                self.nodes[name] = slim_node(node)
            except DemandPlanError as exc:
                LOG.warning('mig_pending_pods: node %s: %s; the gated queue leaves it alone', name, exc)
        outcome = {} if deleted else run_outcome(node)
        ended = [r for r, run in self.runs.items() if run[0] == name and (deleted or outcome.get('run') == r)]
        for run_id in ended:
            pods = self.runs.pop(run_id)[2]
            result = 'node deleted' if deleted else outcome.get('result')
            if result == 'created':
                self.created.extend((key, name) for key in pods)
            else:
                LOG.info('mig_pending_pods: gated create %s on node %s: %s (%s); its pods are decided again', run_id, name,
                         result, outcome.get('reason') or 'no reason')

    def replace_nodes(self, nodes, now):
        listed = set((n.get('metadata') or {}).get('name') for n in nodes)
        for name in sorted((set(self.nodes) | set(r[0] for r in self.runs.values())) - listed):
            self.update_node({'metadata': {'name': name}}, now, deleted=True)
        for node in nodes:
            self.update_node(node, now)
        self.listed.add('nodes')

    # -- deciding --
    def seconds_until_due(self, now):
        times = [run[1] for run in self.runs.values()]
        if self.next_deadline is not None:
            times.append(self.next_deadline)
        return max(0.0, min(times) - now) if times else None

    def take_actions(self, now):
        """The actions due now (see the module's docstring), in the queue's order; pins of created runs first."""
        if self.listed != {'pods', 'nodes'}:
            return []
        if not (self.created or self.runs or self.pinned or self.freed.since or any((self.freed.held or {}).values())
                or any(has_gate(p) or pinned_node(p) for p in self.pods.values())):
            self.next_deadline = None
            self.ended.clear()   # bounded on a cluster without the gate; an ended holder then counts as held (safe)
            return []   # nothing gated or pinned (a cluster without the slice gate): no decision to take
        actions = []
        for key, node in self.created:
            if key in self.pods and has_gate(self.pods[key]) and key not in self.pinned:
                actions.append({'action': PIN, 'pod': key, 'node': node})
                self.pinned[key] = node
        self.created = []
        for run_id in [r for r, run in self.runs.items() if run[1] <= now]:
            LOG.info('mig_pending_pods: gated create %s on node %s told no outcome in %.0fs; its pods are decided again',
                     run_id, self.runs[run_id][0], self.create_timeout)
            del self.runs[run_id]
        busy = dict((run[0], run[3]) for run in self.runs.values())
        destroying = set(profile for run in self.runs.values() for profile in run[3])
        in_flight = set(key for run in self.runs.values() for key in run[2])
        bound = [p for p in self.pods.values() if p['spec'].get('nodeName')]
        held = bound_profiles(self.pods.values())
        # The release rule's clock: instances the queue's pods (pinned by it) held, by node and profile.
        served = dict(((node, profile), count) for node, counts in bound_profiles(
            p for p in bound if pinned_node(p)).items() for profile, count in counts.items())
        rooms, gpus, idle = {}, {}, {}
        named = set()
        for name in sorted(self.hosts):
            gpus[name] = with_holders(_without(self.hosts[name][1], self.ended, named), held.get(name))
            for gpu in gpus[name]:
                for gi in gpu.get('gpu_instances') or []:
                    if not gi.get('allocated_to'):
                        idle[(name, gi.get('profile'))] = idle.get((name, gi.get('profile')), 0) + 1
        self.ended &= named   # no annotation names the others any more
        idle_since = self.freed.observe(served, idle, now)
        for name in sorted(self.hosts):
            try:
                rooms[name] = NodeRoom.of_node(self.nodes[name], bound)
            except NodeFitError as exc:
                LOG.warning('mig_pending_pods: node %s: %s; the gated queue leaves it alone', name, exc)
                del gpus[name]
        gated, pinned = [], []
        for key in sorted(self.pods):
            pod = self.pods[key]
            if pod['spec'].get('nodeName') or key in in_flight or pod['status'].get('phase') in ('Succeeded', 'Failed'):
                continue
            node = self.pinned[key] if key in self.pinned else (None if has_gate(pod) else pinned_node(pod))
            if not has_gate(pod) and node is None:
                continue   # kube-scheduler's
            if key in self.pinned and node is None:
                continue   # released, the watch has not shown it yet
            entry, why = gated_pod(pod)
            if entry is None:
                if node is None:
                    actions.append({'action': RELEASE_POD, 'pod': key, 'reason': why})
                    self.pinned[key] = None
                continue
            if node is None:
                gated.append(entry)
            else:
                pinned.append(GatedPod(entry.key, entry.profile, entry.priority, entry.created, entry.gated_since,
                                       entry.rules, pinned=node, gated=False))
        queue = GatedQueue(self.options)
        try:
            decisions = queue.reconcile(rooms, gpus, gated, pinned, now, unsafe_destroys(self._mig_pods()), idle_since, busy)
            decisions.extend(queue.expire(now))
        except DemandPlanError as exc:
            LOG.warning('mig_pending_pods: the gated queue cannot read the fleet (%s); nothing decided', exc)
            self.next_deadline = now + self.create_timeout
            return actions
        self.waiting = queue.waiting()
        for slot in queue.doomed.values():   # decided destroyed now: their release-rule times go with them
            if slot.idle_since is not None:
                self.freed.forget((slot.node, slot.profile), slot.idle_since)
        creates, held_back = {}, False
        for decision in decisions:
            if decision.action == SERVE:
                actions.append({'action': PIN, 'pod': decision.pod, 'node': decision.node})
                self.pinned[decision.pod] = decision.node
            elif decision.action == RELEASE and decision.profile in destroying:
                held_back = True   # released once the run that destroys its profile told its outcome
            elif decision.action == RELEASE:
                actions.append({'action': RELEASE_POD, 'pod': decision.pod, 'reason': decision.reason})
                self.pinned[decision.pod] = None
            elif decision.action in (CREATE, RESHAPE, DESTROY):
                creates.setdefault(decision.node, []).append(decision)
        for node in sorted(creates):
            actions.append(self._create_event(node, creates[node], now))
        self.next_deadline = queue.next_deadline()
        if held_back and self.next_deadline is not None and self.next_deadline <= now:
            self.next_deadline = None   # the run's outcome (a Node update) or its timeout wakes the source
        return actions

    def _mig_pods(self):
        """The pods as the destroy guard reads them, with the pins and releases this source sent and the watch has not
        shown yet."""
        pods = []
        for key, pod in self.pods.items():
            profiles, unread = guarded_profiles(pod_resource_names(pod['spec']), self.renamed)
            if not profiles:
                continue
            # A renamed resource says no profile: the pod may land only where it is advertised.
            nodes = tuple(sorted(name for name, node in self.nodes.items() if any(
                resource_count(node['status']['allocatable'].get(r, 0)) for r in unread))) if unread else None
            gated, pinned = has_gate(pod), pinned_node(pod)
            if key in self.pinned:
                gated, pinned = False, self.pinned[key]
            pods.append(MigPod(key, profiles, pod['spec'].get('nodeName'), bool(pod['status'].get('admitted')), gated, pinned,
                               pod['status'].get('phase') in ('Succeeded', 'Failed'), nodes))
        return pods

    def _create_event(self, node, decisions, now):
        """The run of one node's decisions: its creates (a create, a reshape's) and its idle destroys (a reshape's, the
        release rule's), each as {GPU index: {profile: count}} for nvidia_mig_layout's guard."""
        host, gpus = self.hosts[node]
        self.sequence += 1
        run = 'gated-%s-%d' % (self.token, self.sequence)
        creates = [(d.gpu, d.profile, d.start) for d in decisions if d.action != DESTROY]
        destroys = destroys_of(decisions)
        pods = sorted(d.pod for d in decisions if d.pod)
        self.runs[run] = (node, now + self.create_timeout, pods, set(profile for dummy, profile, dummy2 in destroys))
        layout = layout_with_creates(node, gpus, creates, [(index, start) for index, dummy, start in destroys])
        change = {'run': run, 'host': host, 'node': node, 'layout': layout, 'gpus': _counts(creates), 'pods': pods}
        if destroys:
            change['destroys'] = _counts(destroys)
        return {'action': CREATE, 'event': {FAST_EVENT_KEY: change}}


def _without(gpus, ended, named):
    """The annotation's GPUs without the holders that ``ended``: the annotation names the pods that held each instance
    when a run last read the GPUs, and one the watch showed ending holds nothing since (the release rule's clock starts
    then). Every holder named is added to ``named``."""
    result = []
    for gpu in gpus:
        instances = []
        for gi in gpu.get('gpu_instances') or []:
            holders = gi.get('allocated_to') or []
            named.update(holders)
            instances.append(dict(gi, allocated_to=[key for key in holders if key not in ended]))
        result.append(dict(gpu, gpu_instances=instances))
    return result


def _counts(changes):
    """{GPU index as text: {profile: count}} of (GPU index, profile, start) changes."""
    counts = {}
    for index, profile, dummy in changes:
        per_gpu = counts.setdefault(str(index), {})
        per_gpu[profile] = per_gpu.get(profile, 0) + 1
    return counts
