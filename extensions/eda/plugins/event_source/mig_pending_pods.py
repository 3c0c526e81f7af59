# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""mig_pending_pods: an ansible-rulebook event source for pods that wait for MIG slices.

It lists and watches the pods of the Kubernetes API server that are not finished and puts one event per burst
on the queue, carrying every pod still waiting for lack of a ``nvidia.com/mig-<profile>`` resource (the demand
playbook plans for all of them, not only the burst's). A burst opens with a new such pod, or with a pod that held
MIG devices on a node and ended or was deleted while others still wait (the release trigger: its instances are
free again).

The event source contract is ansible-rulebook's ("Developing Custom Event Source Plugins", docs/sources.rst
of ansible/ansible-rulebook): a single Python file whose ``async def main(queue, args)`` puts dicts on the
asyncio queue; ansible-rulebook loads it with runpy from ``extensions/eda/plugins/event_source/`` of the
collection (ansible_rulebook/engine.py ``start_source``) and passes the source's arguments as ``args``.

It never ends on its own while the rulebook runs: HTTP 429 (after its Retry-After), 5xx, 401/403, a watch
ERROR, a lost connection or a line too long to read is logged in one line and followed by a new list after a
backoff; an expired resourceVersion (410) by a new list at once.

Arguments:
  kubeconfig: path of a kubeconfig file (default: $KUBECONFIG, then ~/.kube/config), read by the kubernetes
    Python client's loader (tokens, client certificates, exec and auth-provider plugins); without one the
    in-cluster service account is used (/var/run/secrets/kubernetes.io/serviceaccount, $KUBERNETES_SERVICE_HOST)
  context: kubeconfig context (default: its current-context)
  namespace: watch one namespace (default: all namespaces)
  quiet_period: seconds without a new pending MIG pod or a release that end a burst (default 10)
  max_delay: seconds after a burst's start when the event goes out even if pods keep coming (default 60)
  watch_timeout: seconds each watch request asks the API server to keep open (default 300)
  retry_max: the longest backoff between two attempts after a failure, in seconds (default 30)
  fast: also decide create-only demand here (default false; the shipped rulebook sets it): watch the Nodes too, and
    put a mig_demand_create event for each host where waiting pods fit in free slices (below)
  fast_quiet_period: seconds without a new waiting pod before the fast decision (default 0.5, at most quiet_period)
  fast_timeout: seconds after a fast event when its pods, still waiting, go to the full path (default 120)
  policy: the demand playbook's mig_demand_policy (a mapping, or its JSON), which the fast decision honours

The bearer token is sent in the Authorization header only: never logged, never on a command line.

Event:
  mig_pending_pods:
    requests:            # every unschedulable MIG pod still pending (but those of a fast create under way),
                         # sorted by namespace/name; the shape the filter gpufleet.mig.mig_demand_plan takes
      - pod: team-a/train-0         # namespace/name
        priority: 1000              # spec.priority (0 when unset)
        priority_class: training    # spec.priorityClassName ('' when unset)
        requests: {"1g.10gb": 2}    # MIG profile -> instances the pod needs at once (gpufleet's profile names)
        created: "2026-12-03T22:00:00Z"
    new: ["team-a/train-0"]  # the pods of this burst that were not told before
    released: []             # the pods whose end or deletion freed MIG devices during this burst
    burst_seconds: 10.0      # from the burst's start to the event

  mig_demand_create:        # with fast: pods that fit in free slices of one host, as its Node's annotation
    run: fast-1a2b3c4d-1       #   gpufleet.mig/gpus says (written by the playbooks that read its GPUs)
    host: gpu-host-1           # the inventory host, and its Node
    node: gpu-node-1
    layout: {name: demand-0123456789ab, config: {...}}   # the generated layout (the full path's own)
    gpus: {"0": {"1g.20gb": 1}}  # the creates expected on each GPU: anything else is refused on the host
    pods: [team-a/infer-0]
  The run's outcome comes back as the Node's annotation gpufleet.mig/demand-create; until then the source decides
  nothing on that node; a refused or failed run, or pods still waiting fast_timeout seconds after it, go to the full
  path (a mig_pending_pods event) and are never decided here again while they wait.

Examples:
  sources:
    - gpufleet.mig.mig_pending_pods:
        quiet_period: 10
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import asyncio
import email.utils
import json
import logging
import os
import ssl
import sys
import time

try:
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_pods import (
        holds_mig_devices, pending_mig_request, pod_key, pod_mig_resources)
    from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import profile_of_resource
    from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_fast import (
        CREATE_ANNOTATION, GPUS_ANNOTATION, fast_creates, read_gpus_annotation)
    from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_input import DemandPlanError
except ImportError:
    # ansible-rulebook runs this file with runpy, outside Ansible's collection loader: the collection's own
    # module_utils are importable once the folder holding ansible_collections/ is on the path (this file is
    # ansible_collections/gpufleet/mig/extensions/eda/plugins/event_source/mig_pending_pods.py).
    sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 7)))
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_pods import (
        holds_mig_devices, pending_mig_request, pod_key, pod_mig_resources)
    from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import profile_of_resource
    from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_fast import (
        CREATE_ANNOTATION, GPUS_ANNOTATION, fast_creates, read_gpus_annotation)
    from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_input import DemandPlanError

LOG = logging.getLogger(__name__)

EVENT_KEY = 'mig_pending_pods'
FAST_EVENT_KEY = 'mig_demand_create'
DEFAULTS = {'quiet_period': 10.0, 'max_delay': 60.0, 'watch_timeout': 300, 'retry_max': 30.0,
            'fast_quiet_period': 0.5, 'fast_timeout': 120.0}
SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount'
# The pods not finished: waiting ones and those holding devices. A pod that ends (Succeeded, Failed) leaves the
# selection and comes as DELETED, as a deleted one does (the apiserver's cacher, cache_watcher.go).
FIELD_SELECTOR = 'status.phase!=Succeeded,status.phase!=Failed'
# Pages of a list: client-go's pager asks for 500 objects a page (tools/pager/pager.go, defaultPageSize).
PAGE_SIZE = 500
# One watch line is one object and its envelope. The API server refuses request bodies over 3 MiB
# (k8s.io/apiserver pkg/server/config.go, MaxRequestBodyBytes) and etcd values over 1.5 MiB by default
# (--max-request-bytes), so no pod is near 8 MiB; aiohttp's own line limit is 512 KiB (twice its 256 KiB read
# buffer), which a pod with large annotations passes.
MAX_LINE_BYTES = 8 * 1024 * 1024
# The longest Retry-After honoured: a server's answer never stalls the source longer than this.
RETRY_AFTER_MAX = 600.0


class SourceError(Exception):
    """A setting or an answer of the API server this source cannot work with (one line, no secret in it)."""


# ---- one event per burst (pure) ---------------------------------------------------------------------------

class PendingDemand(object):
    """The unschedulable MIG pods of the cluster, the pods holding MIG devices, and when to tell about them.

    A burst opens with the first pod that was not pending before (or was, left and came back), or with a pod that
    held MIG devices and ended or was deleted while told pods still wait (a release: its instances can serve them
    now). It closes ``quiet_period`` seconds after its latest new pod or release, or ``max_delay`` seconds after
    its start when they keep coming; then one event tells every pod still pending. Updates of pods already told
    about, pods that leave and releases while nothing waits open no burst; a burst left with nothing to tell (its
    new pods all left, and no release with a pod still waiting) tells nothing. So a release re-plans only while
    something waits: a run that serves every pod is followed by no event, however many pods end after it.
    Times are any monotonic clock in seconds (the caller's).
    """

    def __init__(self, quiet_period, max_delay, fast=None):
        self.quiet_period = float(quiet_period)
        self.max_delay = float(max_delay)
        self.fast = fast
        self.pending = {}
        self.told = set()
        self.holders = set()
        self.released = set()
        self.burst_start = None
        self.last_change = None

    def _new_keys(self):
        return sorted(key for key in self.pending if key not in self.told)

    def _for_the_full_path(self):
        """The waiting pods the full path plans for: all but those of a fast create under way (their instances are
        being made; a failed or late fast create gives them back, :meth:`_fall_back`)."""
        in_flight = self.fast.in_flight if self.fast is not None else {}
        return sorted(key for key in self.pending if key not in in_flight)

    def _nothing_to_tell(self):
        return not self._new_keys() and not (self.released and self._for_the_full_path())

    def _close_burst(self):
        self.burst_start = self.last_change = None
        self.released = set()

    def _mark_change(self, now):
        self.last_change = now
        if self.burst_start is None:
            self.burst_start = now

    def update(self, pod, now, deleted=False):
        """Take one pod as the API server now has it (``deleted``: it is gone or left the watched set)."""
        key = pod_key(pod)
        if self.fast is not None:
            self.fast.update_pod(pod, deleted)
        if not deleted and holds_mig_devices(pod):
            self.holders.add(key)
        elif key in self.holders:
            # A release; with nothing waiting the burst closes below at once (_nothing_to_tell).
            self.holders.discard(key)
            self.released.add(key)
            self._mark_change(now)
        request = None if deleted else pending_mig_request(pod)
        if request is None:
            self.pending.pop(key, None)
            self.told.discard(key)
            if self.fast is not None:
                self.fast.forget(key)
            if self._nothing_to_tell():
                self._close_burst()
            return
        was_new = key not in self.pending and key not in self.told
        self.pending[key] = request
        if was_new:
            self._mark_change(now)
            if self.fast is not None:
                self.fast.candidate(key, now)

    def update_node(self, node, now, deleted=False):
        """Take one Node as the API server now has it: the fast path's GPUs and rules, and the outcome of its runs."""
        if self.fast is not None:
            self._fall_back(self.fast.update_node(node, deleted), now)

    def replace_nodes(self, nodes, now):
        """A fresh list of every Node: nodes not in it are gone."""
        if self.fast is not None:
            self._fall_back(self.fast.replace_nodes(nodes), now)

    def _fall_back(self, keys, now):
        """The pods the fast path gave up on and that still wait go to the full demand playbook: new again."""
        for key in sorted(keys):
            if key in self.pending and key in self.told:
                self.told.discard(key)
                self._mark_change(now)

    def take_fast_events(self, now):
        """The fast path's events due now (create-only changes, one per host), its pods told; the pods whose fast run
        failed or timed out go back to the full path."""
        if self.fast is None:
            return []
        self._fall_back(self.fast.expired(now), now)
        if not self.fast.due(now):
            return []
        events = self.fast.decide(now, dict((key, self.pending[key]) for key in self.pending))
        for event in events:
            self.told.update(event[FAST_EVENT_KEY]['pods'])
        if self._nothing_to_tell():
            self._close_burst()
        return events

    def replace_all(self, pods, now):
        """A fresh list of every pod (after a start or a failure): pods not in it are gone, and a holder among
        them is a release (it ended while the watch was down)."""
        listed = dict((pod_key(pod), pod) for pod in pods)
        for key in sorted((set(self.pending) | self.holders) - set(listed)):
            self.update({'metadata': dict(zip(('namespace', 'name'), key.split('/', 1)))}, now, deleted=True)
        for pod in pods:
            self.update(pod, now)

    def _burst_wait(self, now):
        """Seconds until the open burst's event is due (0: due now), or None when no burst is open."""
        if self.burst_start is None:
            return None
        return max(0.0, min(self.last_change + self.quiet_period, self.burst_start + self.max_delay) - now)

    def seconds_until_due(self, now):
        """Seconds until the next event is due (0: due now), the open burst's or the fast path's, or None when neither
        waits."""
        waits = [wait for wait in (self._burst_wait(now), self.fast.seconds_until_due(now) if self.fast is not None else None)
                 if wait is not None]
        return min(waits) if waits else None

    def take_event(self, now):
        """The event of the burst when it is due (and the burst closed), else None."""
        wait = self._burst_wait(now)
        if wait is None or wait > 0:
            return None
        if self._nothing_to_tell():
            self._close_burst()
            return None
        new = self._new_keys()
        event = {EVENT_KEY: {
            'requests': [self.pending[key] for key in self._for_the_full_path()],
            'new': new,
            'released': sorted(self.released),
            'burst_seconds': round(now - self.burst_start, 3),
        }}
        self.told.update(new)
        self._close_burst()
        return event


# ---- the create-only fast path (pure) ------------------------------------------------------------------------

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
        outcome = {}
        if not deleted and annotations.get(CREATE_ANNOTATION):
            try:
                outcome = json.loads(annotations[CREATE_ANNOTATION])
            except ValueError:
                outcome = {}
        run = outcome.get('run') if isinstance(outcome, dict) else None
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
        held = {}
        for key in sorted(self.pods):
            spec = self.pods[key]['spec']
            if not spec.get('nodeName') or self.pods[key]['status'].get('phase') in ('Succeeded', 'Failed'):
                continue
            counts = held.setdefault(spec['nodeName'], {})
            for resource, count in pod_mig_resources(spec).items():
                profile = profile_of_resource(resource)
                counts[profile] = counts.get(profile, 0) + count
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


# ---- failures and when to try again (pure) ----------------------------------------------------------------

class Expired(Exception):
    """The resourceVersion is too old (HTTP 410 Gone, or a watch ERROR with code 410): list again at once."""


class ApiRefusal(Exception):
    """An answer of the API server to try again after a backoff: ``status``, ``retry_after`` (seconds or None),
    and the one-line message (no secret in it)."""

    def __init__(self, status, message, retry_after=None):
        super(ApiRefusal, self).__init__(message)
        self.status = status
        self.retry_after = retry_after


class OversizedLine(Exception):
    """A watch line longer than MAX_LINE_BYTES: the event is lost, so the source lists again."""


def retry_after_seconds(value, now_epoch):
    """Seconds a Retry-After header asks to wait (RFC 9110 10.2.3: delay-seconds or an HTTP-date), None when absent
    or unreadable. The API server's priority and fairness sends seconds with its 429 (k8s.io/apiserver
    pkg/server/filters/priority-and-fairness.go)."""
    text = (value or '').strip()
    if not text:
        return None
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now_epoch)


def refusal(status, path, retry_after=None):
    """What an HTTP answer other than 200 means: Expired for 410, else an ApiRefusal whose message says what
    the operator can do."""
    if status == 410:
        raise Expired()
    if status == 401:
        message = ('the API server refused the credentials (HTTP 401 Unauthorized on %s): the token or certificate '
                   'expired or was revoked; reloading the kubeconfig and trying again' % path)
    elif status == 403:
        message = ('the API server refused access (HTTP 403 Forbidden on %s): the account needs get, list and watch '
                   'on pods; trying again' % path)
    elif status == 429:
        message = 'the API server is throttling (HTTP 429 Too Many Requests on %s)' % path
    elif status >= 500:
        message = 'the API server failed (HTTP %d on %s)' % (status, path)
    else:
        message = 'the API server answered HTTP %d to %s' % (status, path)
    return ApiRefusal(status, message, retry_after)


def watch_error(status):
    """What a watch ERROR event means (its object is a Status): Expired for code 410, else an ApiRefusal."""
    code = status.get('code') or 0
    if code == 410:
        raise Expired()
    return ApiRefusal(code, 'the watch ended with an error from the API server (code %s, %s): %s' % (
        code, status.get('reason') or 'no reason', status.get('message') or 'no message'))


class Retry(object):
    """How long to wait before the next list after a failure. client-go's reflector backs off between its
    ListAndWatch attempts, doubling from 800 ms to 30 s and starting over after 2 minutes without a failure
    (tools/cache/reflector.go, NewReflectorWithOptions: wait.NewExponentialBackoffManager); here from 1 s
    doubling to ``retry_max``, starting over once ``reset_after`` seconds passed without a failure, and never
    shorter than the server's Retry-After (capped at RETRY_AFTER_MAX). No jitter: one source per cluster."""

    def __init__(self, retry_max, first=1.0, reset_after=120.0):
        self.retry_max = float(retry_max)
        self.first = min(float(first), self.retry_max)
        self.reset_after = float(reset_after)
        self.failures = 0
        self.retrying_since = None

    def delay(self, now, retry_after=None):
        """Seconds to wait after a failure at ``now`` (a monotonic clock)."""
        if self.retrying_since is not None and now - self.retrying_since >= self.reset_after:
            self.failures = 0
        self.failures += 1
        wait = min(self.retry_max, self.first * 2 ** (self.failures - 1))
        if retry_after is not None:
            wait = max(wait, min(float(retry_after), RETRY_AFTER_MAX))
        self.retrying_since = now + wait
        return wait


class WatchLines(object):
    """A watch stream's bytes cut into its lines (one JSON object each), none longer than ``max_bytes``."""

    def __init__(self, max_bytes=None):
        self.max_bytes = max_bytes or MAX_LINE_BYTES
        self.partial = bytearray()

    def feed(self, data):
        """The complete, non-blank lines ``data`` ends; OversizedLine when the unfinished one is over the limit."""
        self.partial.extend(data)
        lines = []
        start = 0
        while True:
            end = self.partial.find(b'\n', start)
            if end < 0:
                break
            if end - start > self.max_bytes:
                self.partial = bytearray()
                raise OversizedLine('a watch line of %d bytes, over the %d the source reads' % (end - start, self.max_bytes))
            line = bytes(self.partial[start:end]).strip()
            if line:
                lines.append(line)
            start = end + 1
        del self.partial[:start]
        if len(self.partial) > self.max_bytes:
            size = len(self.partial)
            self.partial = bytearray()
            raise OversizedLine('a watch line of more than %d bytes, over the %d the source reads' % (size, self.max_bytes))
        return lines


def settings(args):
    """The source's settings from the rulebook's arguments; SourceError names a bad one."""
    result = dict(DEFAULTS)
    for name in DEFAULTS:
        if args.get(name) is None or args.get(name) == '':
            continue
        try:
            result[name] = float(args[name])
        except (TypeError, ValueError):
            raise SourceError('%s must be a number of seconds, got %r' % (name, args[name]))
        if result[name] <= 0:
            raise SourceError('%s must be more than 0 seconds, got %r' % (name, args[name]))
    if result['max_delay'] < result['quiet_period']:
        raise SourceError('max_delay (%s) must be at least quiet_period (%s)' % (result['max_delay'], result['quiet_period']))
    result['watch_timeout'] = int(result['watch_timeout'])
    result['namespace'] = args.get('namespace') or None
    fast = args.get('fast', False)
    if isinstance(fast, str):
        if fast.strip().lower() not in ('true', 'false', 'yes', 'no', ''):
            raise SourceError('fast must be true or false, got %r' % fast)
        fast = fast.strip().lower() in ('true', 'yes')
    result['fast'] = bool(fast)
    if result['fast'] and result['fast_quiet_period'] > result['quiet_period']:
        raise SourceError('fast_quiet_period (%s) must be at most quiet_period (%s): the fast path decides before the full '
                          'path is told' % (result['fast_quiet_period'], result['quiet_period']))
    policy = args.get('policy') or {}
    if isinstance(policy, str):
        try:
            # JSON, or the Python form a rulebook's Jinja renders a mapping in.
            policy = json.loads(policy) if policy.strip()[:1] != '{' or '"' in policy else ast.literal_eval(policy)
        except (ValueError, SyntaxError):
            raise SourceError('policy must be a mapping (the demand playbook\'s mig_demand_policy), got %r' % policy[:80])
    if not isinstance(policy, dict):
        raise SourceError('policy must be a mapping (the demand playbook\'s mig_demand_policy), got %r' % (policy,))
    result['policy'] = policy
    return result


def pods_path(namespace):
    """The pod collection's path (Kubernetes API reference, Pod v1 "list" and "list all namespaces")."""
    return '/api/v1/namespaces/%s/pods' % namespace if namespace else '/api/v1/pods'


NODES_PATH = '/api/v1/nodes'


# ---- where the API server is --------------------------------------------------------------------------------

class Connection(object):
    """The API server's address, its TLS settings, and the Authorization header of the next request.

    ``authorization`` is called before each request: a kubeconfig's exec or auth-provider credential is
    refreshed there when it expired (the kubernetes client's refresh hook), a service account token re-read."""

    def __init__(self, server, authorization=None, ca_file=None, cert_file=None, key_file=None, insecure=False,
                 tls_server_name=None, proxy=None):
        self.server = server.rstrip('/')
        self.authorization = authorization or (lambda: None)
        self.ca_file = ca_file
        self.cert_file = cert_file
        self.key_file = key_file
        self.insecure = insecure
        self.tls_server_name = tls_server_name
        self.proxy = proxy
        self._ssl = None

    def headers(self):
        value = self.authorization()
        return {'Authorization': value} if value else {}

    def ssl_context(self):
        """The TLS context of https servers (built once), None for plain http."""
        if not self.server.startswith('https:'):
            return None
        if self._ssl is None:
            context = ssl.create_default_context(cafile=self.ca_file)
            if self.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if self.cert_file:
                context.load_cert_chain(self.cert_file, self.key_file)
            self._ssl = context
        return self._ssl

    def request_options(self):
        """aiohttp's per-request options beyond the URL: TLS context, the name to verify, the proxy."""
        options = {'ssl': self.ssl_context()}
        if self.tls_server_name:
            options['server_hostname'] = self.tls_server_name
        if self.proxy:
            options['proxy'] = self.proxy
        return options


def connection_from_kubeconfig(path, context_name=None):
    """A Connection from a kubeconfig file as the kubernetes Python client reads it (kubernetes-client/python
    kubernetes/config/kube_config.py, KubeConfigLoader: auth-provider (gcp, oidc), token and tokenFile, exec
    plugins (client.authentication.k8s.io ExecCredential: token or client certificate, re-run once its
    expirationTimestamp passed), username/password; certificate data written to private temporary files). The
    kubeconfig is not written back (persist_config=False)."""
    try:
        from kubernetes import client as k8s_client
        from kubernetes import config as k8s_config
    except ImportError:
        raise SourceError('reading kubeconfig %s needs the Python package kubernetes in the environment of '
                          'ansible-rulebook (pip install kubernetes); without a kubeconfig the source uses the pod\'s '
                          'service account' % path)
    configuration = k8s_client.Configuration()
    configuration.host = ''  # not the client's default (http://localhost): a kubeconfig without a server is refused
    try:
        k8s_config.load_kube_config(config_file=path, context=context_name, client_configuration=configuration,
                                    persist_config=False)
    except (k8s_config.ConfigException, EnvironmentError, ValueError, KeyError, TypeError) as exc:
        raise SourceError('kubeconfig %s: %s' % (path, str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
    if not configuration.host:
        raise SourceError('kubeconfig %s names no server for context %s' % (path, context_name or 'current-context'))

    def authorization():
        # The loader keeps "Bearer <token>" (or "Basic ...") under BearerToken; asking for it runs its refresh hook.
        # It keeps a tokenFile's final newline, which kubectl strips (client-go rest.Config's BearerTokenFile).
        value = configuration.get_api_key_with_prefix('BearerToken', alias='authorization')
        return value.strip() if value else None

    return Connection(configuration.host, authorization, ca_file=configuration.ssl_ca_cert,
                      cert_file=configuration.cert_file, key_file=configuration.key_file,
                      insecure=not configuration.verify_ssl, tls_server_name=getattr(configuration, 'tls_server_name', None),
                      proxy=configuration.proxy)


def connection_in_cluster(environ, account_dir=SERVICE_ACCOUNT_DIR):
    """The in-cluster connection (Kubernetes docs "Accessing the Kubernetes API from a Pod"), or None outside."""
    host, port = environ.get('KUBERNETES_SERVICE_HOST'), environ.get('KUBERNETES_SERVICE_PORT', '443')
    token_file = os.path.join(account_dir, 'token')
    if not host or not os.path.exists(token_file):
        return None
    host = '[%s]' % host if ':' in host else host

    def authorization():
        # Re-read on every request: projected service account tokens are rotated by the kubelet.
        with open(token_file) as handle:
            return 'Bearer ' + handle.read().strip()

    return Connection('https://%s:%s' % (host, port), authorization, ca_file=os.path.join(account_dir, 'ca.crt'))


def find_connection(args, environ):
    """The connection the arguments name: a kubeconfig (argument, $KUBECONFIG, ~/.kube/config), else in-cluster."""
    explicit = args.get('kubeconfig') or (environ.get('KUBECONFIG') or '').split(os.pathsep)[0]
    candidate = explicit or os.path.join(os.path.expanduser('~'), '.kube', 'config')
    if os.path.exists(candidate):
        return connection_from_kubeconfig(candidate, args.get('context') or None)
    if explicit:
        raise SourceError('kubeconfig %s does not exist' % explicit)
    conn = connection_in_cluster(environ)
    if conn is None:
        raise SourceError('no kubeconfig (argument kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a pod')
    return conn


# ---- the list and the watch (I/O) --------------------------------------------------------------------------

async def _headers(conn):
    # An exec plugin may take a second or more (a cloud CLI): off the event loop.
    return await asyncio.get_event_loop().run_in_executor(None, conn.headers)


def _check(response, now_epoch):
    """Nothing for 200; else Expired or the ApiRefusal the answer means."""
    if response.status != 200:
        raise refusal(response.status, response.url.path,
                      retry_after_seconds(response.headers.get('Retry-After'), now_epoch))


async def _list(session, conn, config, path=None, field_selector=FIELD_SELECTOR):
    """Every pod not finished (or every object of ``path``), page by page (Kubernetes docs "API Concepts" >
    "Retrieving large results sets in chunks": limit and continue; an expired continue token is 410), and the
    list's resourceVersion to watch from."""
    url = conn.server + (path or pods_path(config['namespace']))
    items, token = [], None
    while True:
        params = {'limit': str(PAGE_SIZE)}
        if field_selector:
            params['fieldSelector'] = field_selector
        if token:
            params['continue'] = token
        async with session.get(url, params=params, headers=await _headers(conn), **conn.request_options()) as response:
            _check(response, time.time())
            body = await response.json(content_type=None)
        items.extend(body.get('items') or [])
        metadata = body.get('metadata') or {}
        token = metadata.get('continue')
        if not token:
            return items, metadata.get('resourceVersion', '')


async def _watch(session, conn, config, demand, wake, resource_version, path=None, field_selector=FIELD_SELECTOR, nodes=False):
    """Stream the watch from ``resource_version`` into ``demand`` until the server ends it; the last
    resourceVersion seen. Kubernetes docs "API Concepts" > "Efficient detection of changes": a watch sends
    one JSON object per line, {type: ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, object}; an expired version is
    HTTP 410 or an ERROR event whose Status has code 410."""
    loop = asyncio.get_event_loop()
    params = {'watch': '1', 'resourceVersion': resource_version, 'allowWatchBookmarks': 'true',
              'timeoutSeconds': str(config['watch_timeout'])}
    if field_selector:
        params['fieldSelector'] = field_selector
    url = conn.server + (path or pods_path(config['namespace']))
    lines = WatchLines()
    async with session.get(url, params=params, headers=await _headers(conn), **conn.request_options()) as response:
        _check(response, time.time())
        async for data in response.content.iter_any():
            for line in lines.feed(data):
                event = json.loads(line)
                kind, obj = event.get('type'), event.get('object') or {}
                if kind == 'ERROR':
                    raise watch_error(obj)
                resource_version = (obj.get('metadata') or {}).get('resourceVersion', resource_version)
                if kind in ('ADDED', 'MODIFIED', 'DELETED'):
                    if nodes:
                        demand.update_node(obj, loop.time(), deleted=kind == 'DELETED')
                    else:
                        demand.update(obj, loop.time(), deleted=kind == 'DELETED')
                    wake.set()
    return resource_version


async def _tell(queue, demand, wake):
    """Put each burst's event on the queue when it is due."""
    loop = asyncio.get_event_loop()
    while True:
        wait = demand.seconds_until_due(loop.time())
        try:
            await asyncio.wait_for(wake.wait(), timeout=wait)
        except asyncio.TimeoutError:
            pass
        wake.clear()
        for fast in demand.take_fast_events(loop.time()):
            change = fast[FAST_EVENT_KEY]
            LOG.info('mig_pending_pods: fast create %s on host %s (node %s): %s for %s', change['run'], change['host'],
                     change['node'], json.dumps(change['gpus'], sort_keys=True), ', '.join(change['pods']))
            await queue.put(fast)
        event = demand.take_event(loop.time())
        if event is not None:
            told = event[EVENT_KEY]
            LOG.info('mig_pending_pods: %d pod(s) wait for MIG slices, %d new, %d released', len(told['requests']),
                     len(told['new']), len(told['released']))
            await queue.put(event)


def _reconnect(conn, args):
    """The connection read again (a refused credential may have been renewed: client-go's exec authenticator
    also refreshes on a 401, plugin/pkg/client/auth/exec/exec.go); the old one where it cannot be read now."""
    try:
        return find_connection(args, os.environ)
    except SourceError as exc:
        LOG.warning('mig_pending_pods: cannot read the credentials again (%s); keeping the previous ones', exc)
        return conn


async def _list_and_watch(session, conn, args, config, demand, wake, nodes=False):
    """List, then watch, the pods (or, ``nodes``, the Nodes) into ``demand`` until cancelled, through every failure."""
    import aiohttp  # a dependency of ansible-rulebook, where this source runs

    what = 'nodes' if nodes else 'pods'
    path, selector = (NODES_PATH, None) if nodes else (None, FIELD_SELECTOR)
    retry = Retry(config['retry_max'])
    loop = asyncio.get_event_loop()
    resource_version = None
    while True:
        problem, retry_after = None, None
        try:
            if resource_version is None:
                items, resource_version = await _list(session, conn, config, path, selector)
                if nodes:
                    demand.replace_nodes(items, loop.time())
                else:
                    demand.replace_all(items, loop.time())
                wake.set()
            resource_version = await _watch(session, conn, config, demand, wake, resource_version, path, selector, nodes)
        except Expired:
            LOG.info('mig_pending_pods: the resourceVersion expired (410 Gone), listing the %s again', what)
            resource_version = None
        except ApiRefusal as exc:
            problem, retry_after = str(exc), exc.retry_after
            if exc.status in (401, 403):
                conn = _reconnect(conn, args)
        except OversizedLine as exc:
            problem = str(exc)
        except (aiohttp.ClientError, aiohttp.http_exceptions.HttpProcessingError, asyncio.TimeoutError,
                EnvironmentError, ValueError) as exc:
            problem = 'the API server is unreachable or its answer unreadable (%s: %s)' % (
                type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else '')
        except Exception as exc:  # pylint: disable=broad-except
            # Never end while the rulebook runs: anything unforeseen is logged and retried like a failure.
            problem = 'unexpected %s: %s' % (type(exc).__name__, str(exc)[:200])
        if problem is not None:
            wait = retry.delay(loop.time(), retry_after)
            if nodes:
                problem = problem.replace('on pods', 'on nodes')
            LOG.warning('mig_pending_pods: %s; listing the %s again in %.1fs', problem, what, wait)
            resource_version = None
            await asyncio.sleep(wait)


async def main(queue, args):
    """ansible-rulebook's entry point: list and watch until cancelled, through every failure. With ``fast``, the
    Nodes are watched too (their GPU annotations), in a task of their own: a failure of one watch leaves the other."""
    import aiohttp  # a dependency of ansible-rulebook, where this source runs

    config = settings(args)
    conn = find_connection(args, os.environ)
    fast = FastPath(config['fast_quiet_period'], config['fast_timeout'], config['policy']) if config['fast'] else None
    demand = PendingDemand(config['quiet_period'], config['max_delay'], fast)
    wake = asyncio.Event()
    tasks = [asyncio.ensure_future(_tell(queue, demand, wake))]
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_read=config['watch_timeout'] + 30)) as session:
            tasks.append(asyncio.ensure_future(_list_and_watch(session, conn, args, config, demand, wake)))
            if fast is not None:
                tasks.append(asyncio.ensure_future(_list_and_watch(session, conn, args, config, demand, wake, nodes=True)))
            done, dummy = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
    finally:
        for task in tasks:
            task.cancel()


if __name__ == '__main__':
    class _PrintQueue(object):
        async def put(self, event):
            print(json.dumps(event))

    logging.basicConfig(level=logging.INFO)
    asyncio.run(main(_PrintQueue(), {'kubeconfig': os.environ.get('KUBECONFIG'), 'quiet_period': 5}))
