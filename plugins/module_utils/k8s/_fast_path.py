# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The create-only fast path of the event source gpufleet.mig.mig_pending_pods (docs/eda.md, "The create-only fast
path"): from the pods and the GPU nodes the source watches, which waiting pods fit in free slices of one host, as
one mig_demand_create event per host, and what becomes of the pods of each run (the node's annotation
gpufleet.mig/demand-create, or a timeout, gives them back to the full path).

Pure Python, no Ansible imports, no I/O: the source feeds it what it watches and emits its events.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import logging
import os

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_pods import pod_key, pod_mig_resources
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_fast import (
    CREATE_ANNOTATION, GPUS_ANNOTATION, fast_creates, read_gpus_annotation)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_input import DemandPlanError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import profile_of_resource

# The source's logger: its lines read as the source's wherever they are written.
LOG = logging.getLogger('mig_pending_pods')

FAST_EVENT_KEY = 'mig_demand_create'


def slim_pod(pod):
    """What the fast path keeps of a pod: its name, node, phase and what kube-scheduler's filters read (node
    selector, affinity, tolerations, the containers' resources, the overhead; _node_fit)."""
    metadata = pod.get('metadata') or {}
    spec = pod.get('spec') or {}

    def containers(entries):
        return [dict((k, c[k]) for k in ('name', 'resources', 'restartPolicy') if k in c) for c in entries or []]
    slim_spec = dict((k, spec[k]) for k in ('nodeName', 'nodeSelector', 'affinity', 'tolerations', 'overhead', 'priority',
                                            'priorityClassName') if spec.get(k) is not None)
    slim_spec['containers'] = containers(spec.get('containers'))
    slim_spec['initContainers'] = containers(spec.get('initContainers'))
    return {'metadata': dict((k, metadata[k]) for k in ('namespace', 'name', 'creationTimestamp') if k in metadata),
            'spec': slim_spec, 'status': {'phase': (pod.get('status') or {}).get('phase')}}


def slim_node(node):
    """What the fast path keeps of a GPU node: its name, labels, taints and allocatable (_node_fit.NodeRoom)."""
    metadata = node.get('metadata') or {}
    return {'metadata': {'name': metadata.get('name'), 'labels': dict(metadata.get('labels') or {})},
            'spec': {'taints': list((node.get('spec') or {}).get('taints') or [])},
            'status': {'allocatable': dict((node.get('status') or {}).get('allocatable') or {})}}


def run_outcome(node):
    """The outcome a create run wrote on ``node`` (its annotation gpufleet.mig/demand-create: run, result, reason), {}
    when it has none or not one this version reads."""
    text = ((node.get('metadata') or {}).get('annotations') or {}).get(CREATE_ANNOTATION)
    try:
        outcome = json.loads(text) if text else {}
    except ValueError:
        return {}
    return outcome if isinstance(outcome, dict) else {}


def bound_profiles(pods):
    """{node: {profile: count}} of the MIG devices the ``pods`` (slim pods, :func:`slim_pod`) bound to each node hold."""
    held = {}
    for pod in pods:
        spec = pod['spec']
        if not spec.get('nodeName') or pod['status'].get('phase') in ('Succeeded', 'Failed'):
            continue
        counts = held.setdefault(spec['nodeName'], {})
        for resource, count in pod_mig_resources(spec).items():
            profile = profile_of_resource(resource)
            counts[profile] = counts.get(profile, 0) + count
    return held


class FastPath(object):
    """Create-only demand decided here, from the pods and the GPU nodes this source watches (docs/eda.md).

    Each GPU node's annotation gpufleet.mig/gpus holds its host's GPUs (_demand_fast). ``quiet_period`` seconds after
    the latest new waiting pod, the fleet demand planner runs over every pod still waiting (but those in a fast run
    or given up on) and the annotated nodes (but those with a fast run under way: their annotation is about to
    change); each host whose change only creates instances in free slices becomes one event (run id, host, node,
    generated layout, expected creates, pods). Its pods are then in flight until the node's annotation
    gpufleet.mig/demand-create names the run: ``refused`` (or ``failed``) gives them back to the full path at once,
    ``created`` leaves them to the scheduler; any still waiting ``timeout`` seconds after the event goes back too.
    A pod given back is never decided here again while it waits.
    """

    def __init__(self, quiet_period, timeout, policy=None, token=None):
        self.quiet_period = float(quiet_period)
        self.timeout = float(timeout)
        self.policy = dict(policy or {})
        self.token = token or os.urandom(4).hex()
        self.pods = {}          # namespace/name -> slim pod (every pod not finished)
        self.nodes = {}         # node name -> slim node, for the nodes with a GPU annotation
        self.hosts = {}         # node name -> (inventory host, GPUs)
        self.candidates = set()  # new waiting pods not decided yet
        self.last_new = None
        self.in_flight = {}     # pod -> (run id, deadline, node name)
        self.runs = {}          # run id -> node name, while the run has not told its outcome
        self.given_up = set()
        self.sequence = 0

    # -- what is watched --
    def update_pod(self, pod, deleted):
        key = pod_key(pod)
        if deleted:
            self.pods.pop(key, None)
        else:
            self.pods[key] = slim_pod(pod)

    def forget(self, key):
        """The pod no longer waits (bound, ended or deleted)."""
        self.candidates.discard(key)
        self.in_flight.pop(key, None)
        self.given_up.discard(key)

    def candidate(self, key, now):
        if key not in self.given_up and key not in self.in_flight:
            self.candidates.add(key)
            self.last_new = now

    def update_node(self, node, deleted):
        """Take one Node; the pods to give back to the full path (a run that told ``refused`` or ``failed``)."""
        metadata = node.get('metadata') or {}
        name = metadata.get('name') or ''
        annotations = metadata.get('annotations') or {}
        text = None if deleted else annotations.get(GPUS_ANNOTATION)
        self.nodes.pop(name, None)
        self.hosts.pop(name, None)
        if text is not None:
            try:
                self.hosts[name] = read_gpus_annotation(text)
                self.nodes[name] = slim_node(node)
            except DemandPlanError as exc:
                LOG.warning('mig_pending_pods: node %s: %s; no fast path there', name, exc)
        outcome = {} if deleted else run_outcome(node)
        run = outcome.get('run')
        if deleted:
            ended = [r for r, n in self.runs.items() if n == name]
        else:
            ended = [run] if run in self.runs else []
        back = set()
        for run_id in ended:
            del self.runs[run_id]
            pods = sorted(k for k, flight in self.in_flight.items() if flight[0] == run_id)
            if deleted or outcome.get('result') != 'created':
                LOG.info('mig_pending_pods: fast run %s on node %s: %s; %s to the full demand playbook', run_id, name,
                         'node deleted' if deleted else '%s (%s)' % (outcome.get('result'), outcome.get('reason') or 'no reason'),
                         ', '.join(pods) or 'no pod')
                back.update(self._give_up(pods))
        return back

    def replace_nodes(self, nodes):
        listed = set((n.get('metadata') or {}).get('name') for n in nodes)
        back = set()
        for name in sorted((set(self.nodes) | set(self.runs.values())) - listed):
            back.update(self.update_node({'metadata': {'name': name}}, True))
        for node in nodes:
            back.update(self.update_node(node, False))
        return back

    def _give_up(self, keys):
        for key in keys:
            self.in_flight.pop(key, None)
            self.candidates.discard(key)
            self.given_up.add(key)
        return set(keys)

    # -- when and what --
    def seconds_until_due(self, now):
        times = [flight[1] for flight in self.in_flight.values()]
        if self.candidates and self.last_new is not None:
            times.append(self.last_new + self.quiet_period)
        return max(0.0, min(times) - now) if times else None

    def due(self, now):
        return bool(self.candidates) and self.last_new is not None and now >= self.last_new + self.quiet_period

    def expired(self, now):
        """The pods in flight still waiting ``timeout`` seconds after their event: back to the full path."""
        late = sorted(k for k, flight in self.in_flight.items() if flight[1] <= now)
        if late:
            LOG.info('mig_pending_pods: %s still wait(s) %.0fs after the fast create; to the full demand playbook',
                     ', '.join(late), self.timeout)
        return self._give_up(late)

    def held_by_node(self, pending):
        """{node: {profile: count}} the pods bound to each node hold, and the pods of this path's created runs on
        their way there (their instances exist, not yet allocated): none of these instances is free."""
        held = bound_profiles(self.pods[key] for key in sorted(self.pods))
        for key in sorted(self.in_flight):
            if key in pending and self.in_flight[key][0] not in self.runs:
                counts = held.setdefault(self.in_flight[key][2], {})
                for profile, count in pending[key].get('requests', {}).items():
                    counts[profile] = counts.get(profile, 0) + count
        return held

    def decide(self, now, pending):
        """The fast events for the waiting ``pending`` pods ({key: request}); the candidates are decided."""
        self.candidates = set()
        busy = set(self.runs.values())
        hosts, objects, held = {}, {}, {}
        needs = self.held_by_node(pending)
        for name in sorted(self.hosts):
            if name in busy:
                continue
            host, gpus = self.hosts[name]
            hosts[host], objects[host], held[host] = gpus, self.nodes[name], needs.get(name, {})
        requests = [pending[k] for k in sorted(pending) if k not in self.in_flight and k not in self.given_up]
        if not hosts or not requests:
            return []
        decided = fast_creates(hosts, requests, objects, [self.pods[k] for k in sorted(self.pods)], self.policy, held)
        events = []
        for change in decided['creates']:
            self.sequence += 1
            run = 'fast-%s-%d' % (self.token, self.sequence)
            self.runs[run] = change['node']
            for key in change['pods']:
                self.in_flight[key] = (run, now + self.timeout, change['node'])
            events.append({FAST_EVENT_KEY: dict(change, run=run)})
        return events
