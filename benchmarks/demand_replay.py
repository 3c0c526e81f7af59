# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The demand benchmark's replay engine (benchmarks/demand.py): one policy over one request stream, event by event.

:class:`Replay` simulates one policy over time (subclass it, or give demand_baselines.StaticLayout any catalog layout),
:class:`Debounced` is the base of the policies that act on bursts of unschedulable pods, :func:`figures` counts what a
replay achieved (:func:`served`: slice-hours and pods per size class) and :func:`spread` writes a figure's
min/median/max over seeds.

What every policy gets, as kube-scheduler does it (the pods are scheduled by it in every system compared):

- The scheduling queue is priority then arrival (PrioritySort). A pod is tried when it arrives and again at once
  whenever a pod ends or devices appear (the scheduler requeues unschedulable pods on such cluster events,
  pkg/scheduler/framework/types.go ClusterEvent, not on a timer).
- Filter: nodes not cordoned with a device for the pod. Score: NodeResourcesFit with its default strategy,
  LeastAllocated (pkg/scheduler/apis/config/v1/default_plugins.go; cpu and memory, weight 1 each). The pods'
  CPU and memory are taken as proportional to their MIG memory slices, so the least allocated node is the one
  with the smallest share of its slices held; ties are broken at random (seeded), as selectHost does.
- Device plugin designs (a, b, d, e): the kubelet gives the pod a free MIG device of its profile on the node
  (lowest GPU, then start). DRA (c): the driver's allocator on the chosen node (below).

Figures per policy: requests placed, minutes pending (to running: latency included), reconfigurations (one per GPU
whose instances change at one moment, the same for every policy: a DRA create or destroy is one), cordons (node
cordoned for a change), pods evicted, stranded slice-hours (_mig_geometry.analyze's stranded slices over time), and
the pods lost with room (gave up while some GPU had room for them, idle instances counted as free).
"""

from __future__ import absolute_import, division, print_function

import dataclasses
import heapq
import random
import statistics

from demand_workload import MINUTE, MODELS

from ansible_collections.gpufleet.mig.tests.support.simulator import simulator_on_path

simulator_on_path()

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import (  # noqa: E402
    ComputeInstance,
    GpuHolders,
    GpuInstance,
    Placement,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog, Occupancy, analyze  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError, plan_gpu  # noqa: E402
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import model_gpu  # noqa: E402

# The event source's defaults (docs/eda.md: quiet_period 10, max_delay 60) and nos's batch (10 s quiet, 60 s at most).
QUIET_SECONDS, MAX_DELAY_SECONDS = 10.0, 60.0

# Event kinds, in the order they are handled at equal times: a pod gives up before anything else happens.
GIVE_UP, RELEASE, ARRIVE, POLICY = 0, 1, 2, 3

SIZE_CLASSES = (1, 2, 3, 4, 7)   # compute slices of the requests (1g, 2g, 3g, 4g, 7g)


class Gpu(object):
    """One simulated GPU: instances [id, profile, start, request or None]."""

    def __init__(self, node, index, model):
        self.node = node
        self.index = index
        self.model = model
        self.data = model_gpu(model)
        self.catalog = Catalog.from_data(self.data.profiles)
        self.instances = []
        self.next_id = 1

    def occupancy(self, without=()):
        return Occupancy.of(self.catalog, [(i[1], i[2]) for i in self.instances if i not in without])

    def create(self, profile, start):
        instance = [self.next_id, profile, start, None]
        self.next_id += 1
        self.instances.append(instance)
        return instance

    def free_instance(self, profile):
        for instance in sorted(self.instances, key=lambda i: i[2]):
            if instance[1] == profile and instance[3] is None:
                return instance
        return None

    def lowest_start(self, profile_name, occupancy=None):
        profile = self.catalog.get(profile_name)
        if profile is None:
            return None
        occupancy = occupancy or self.occupancy()
        for start in profile.starts:
            if occupancy.can_place(profile, start):
                return start
        return None

    def held_slices(self):
        return sum(self.catalog.get(i[1]).memory_slices for i in self.instances if i[3] is not None)

    def state_key(self):
        return (self.model, tuple(sorted((i[1], i[2]) for i in self.instances)))

    def as_facts(self):
        """The GPU as nvidia_mig_facts returns it (with the pods that hold each instance), for the demand planner."""
        instances = [{'id': i[0], 'profile': i[1], 'placement': {'start': i[2], 'size': self.catalog.get(i[1]).memory_slices},
                      'allocated_to': [i[3].name] if i[3] is not None else [], 'compute_instances': []} for i in self.instances]
        return {'index': self.index, 'uuid': None, 'profiles': self.data.profiles, 'gpu_instances': instances, 'allocated_to': []}

    def converge(self, target):
        """The in-place switch to ``target`` ({profile: count}) through plan_gpu (_mig_planner), as the mig_layout role
        runs it: instances pods hold stay (added to the target when the layout lacks them) and, where the whole layout
        no longer fits around them, the layout's most numerous profile gives up one instance at a time until it does.
        Returns the plan's actions applied (empty: nothing changed)."""
        holders = GpuHolders(instances=dict((i[0], (i[3].name,)) for i in self.instances if i[3] is not None))
        wanted = dict(target)
        held = {}
        for instance in self.instances:
            if instance[3] is not None:
                held[instance[1]] = held.get(instance[1], 0) + 1
        for profile, number in held.items():
            wanted[profile] = max(wanted.get(profile, 0), number)
        data = dataclasses.replace(self.data, index=self.index, gpu_instances=tuple(
            GpuInstance(i[0], i[1], Placement(i[2], self.catalog.get(i[1]).memory_slices),
                        compute_instances=(ComputeInstance(0, i[1], Placement(0, 1)),)) for i in self.instances))
        while True:
            try:
                plan = plan_gpu(data, wanted, holders=holders)
                break
            except PlanningError:
                spare = sorted((n for n in wanted if wanted[n] > held.get(n, 0)), key=lambda n: (-(wanted[n] - held.get(n, 0)), n))
                if not spare:
                    return []
                wanted[spare[0]] -= 1
        by_id = dict((i[0], i) for i in self.instances)
        for action in plan.actions:
            if action['action'] == 'destroy_gpu_instance':
                self.instances.remove(by_id[action['gpu_instance_id']])
            elif action['action'] == 'create_gpu_instance':
                self.create(action['profile'], action['placement']['start'])
        return plan.actions


_STRANDED = {}


def stranded(gpu):
    """The GPU's stranded memory slices now (_mig_geometry.analyze), cached by its state."""
    key = gpu.state_key()
    if key not in _STRANDED:
        _STRANDED[key] = analyze(gpu.catalog, gpu.occupancy())['stranded_slices']
    return _STRANDED[key]


class Replay(object):
    """One policy replaying one request stream, event by event, with kube-scheduler binding the pods.

    Subclasses are the policies: they set the GPUs up (:meth:`start`), say how a node serves a pod
    (:meth:`device_on`), and react to unschedulable pods and ended pods (:meth:`on_unschedulable`,
    :meth:`on_pod_ended`); :meth:`at` queues their own events."""

    label = 'replay'
    start_seconds = 0.0   # from binding to running (the pod's hold starts then)
    gpu_class = Gpu

    def __init__(self, requests, options, seed):
        self.options = options
        self.requests = [r.fresh() for r in requests]
        self.gpus = [self.gpu_class('node-%s' % model, index, model) for model in MODELS for index in range(options.gpus)]
        self.nodes = sorted(set(g.node for g in self.gpus))
        self.node_slices = dict((n, sum(g.catalog.total_slices for g in self.gpus if g.node == n)) for n in self.nodes)
        self.rng = random.Random('%s/%s' % (seed, self.label))
        self.events = []
        self.sequence = 0
        self.now = 0.0
        self.waiting = []
        self.cordoned = {}    # node -> until when
        self.reconfigurations = 0
        self.cordons = 0
        self.evicted = 0
        self.runs = 0
        self.lost_with_room = 0   # pods that gave up while some GPU had room for them, idle instances counted as free
        self.stranded_seconds = 0.0

    # -- the event loop ----------------------------------------------------------------------

    def at(self, when, kind, handler, *args):
        """Queue ``handler(*args)`` at ``when`` (seconds); at equal times by ``kind``, then in order queued."""
        self.sequence += 1
        heapq.heappush(self.events, (when, kind, self.sequence, handler, args))

    def run(self):
        """Replay every request to the end of the stream's hours; returns self (see :func:`figures`)."""
        for request in self.requests:
            self.at(request.arrival, ARRIVE, self.arrive, request)
            self.at(request.arrival + self.options.patience * MINUTE, GIVE_UP, self.give_up, request)
        self.start()
        end = self.options.hours * 3600.0
        stranded_now = self.stranded_slices()
        while self.events and self.events[0][0] <= end:
            when, dummy, dummy2, handler, args = heapq.heappop(self.events)
            self.stranded_seconds += stranded_now * (when - self.now)
            self.now = when
            handler(*args)
            stranded_now = self.stranded_slices()
        self.stranded_seconds += stranded_now * (end - self.now)
        return self

    def stranded_slices(self):
        """The fleet's stranded memory slices now."""
        return sum(stranded(g) for g in self.gpus)

    def arrive(self, request):
        self.waiting.append(request)
        if not self.schedule(request):
            self.on_unschedulable(request)

    def give_up(self, request):
        if request.placed_at is None and request in self.waiting:
            self.waiting.remove(request)
            if self.had_room(request):
                self.lost_with_room += 1

    def had_room(self, request):
        """Whether some GPU has room for ``request`` now, its idle instances counted as free."""
        return any(g.lowest_start(request.profile, g.occupancy(without=[i for i in g.instances if i[3] is None])) is not None
                   for g in self.gpus)

    def release(self, request):
        request.instance[3] = None
        self.released(request)
        self.schedule_waiting()
        if self.waiting:
            self.on_pod_ended()

    # -- kube-scheduler ----------------------------------------------------------------------

    def schedule(self, request):
        """Bind ``request`` as kube-scheduler would (filter, LeastAllocated score, random among the best): bool."""
        best = []
        best_share = None
        for node in self.nodes:
            if self.cordoned.get(node, -1.0) > self.now:
                continue
            found = self.device_on(node, request.profile)
            if found is None:
                continue
            share = float(sum(g.held_slices() for g in self.gpus if g.node == node)) / self.node_slices[node]
            if best_share is None or share < best_share - 1e-9:
                best, best_share = [found], share
            elif abs(share - best_share) <= 1e-9:
                best.append(found)
        if not best:
            return False
        gpu, instance = best[0] if len(best) == 1 else self.rng.choice(best)
        if instance is None:
            instance = self.prepare(gpu, request.profile)
        instance[3] = request
        request.placed_at = self.now
        request.running_at = self.now + self.start_seconds
        request.gpu = gpu
        request.instance = instance
        self.waiting.remove(request)
        self.at(request.running_at + request.hold, RELEASE, self.release, request)
        return True

    def schedule_waiting(self):
        """The scheduler's retry of every waiting pod, in queue order, after a cluster event."""
        for request in sorted(self.waiting, key=lambda r: (r.arrival, r.number)):
            self.schedule(request)

    # -- what a policy says --------------------------------------------------------------------

    def start(self):
        """Set the GPUs up before the first request."""

    def device_on(self, node, profile):
        """(gpu, instance) of a free device of ``profile`` on ``node`` (the kubelet's pick: lowest GPU, then start), or
        (gpu, None) where :meth:`prepare` creates one, or None."""
        for gpu in self.gpus:
            if gpu.node == node:
                instance = gpu.free_instance(profile)
                if instance is not None:
                    return gpu, instance
        return None

    def prepare(self, gpu, profile):
        raise NotImplementedError

    def released(self, request):
        """A pod's device is free again."""

    def on_unschedulable(self, request):
        """A new pod found no device."""

    def on_pod_ended(self):
        """A pod ended while others wait (after the scheduler's retry)."""

    def reconfigured(self, actions):
        if actions:
            self.reconfigurations += 1


class Debounced(Replay):
    """A policy that acts on bursts of unschedulable pods: a burst closes ``QUIET_SECONDS`` after its latest pod or
    ``MAX_DELAY_SECONDS`` after its first (the event source's defaults; nos's batch has the same figures)."""
    release_trigger = False

    def __init__(self, *args):
        super(Debounced, self).__init__(*args)
        self.burst = None   # [first, latest, closing event sequence]

    def on_unschedulable(self, request):
        self.open_burst()

    def on_pod_ended(self):
        if self.release_trigger:
            self.open_burst()

    def open_burst(self):
        if self.burst is None:
            self.burst = [self.now, self.now]
        self.burst[1] = self.now
        close = min(self.burst[1] + QUIET_SECONDS, self.burst[0] + MAX_DELAY_SECONDS)
        self.at(close, POLICY, self.maybe_close, close)

    def maybe_close(self, close):
        if self.burst is None or close < min(self.burst[1] + QUIET_SECONDS, self.burst[0] + MAX_DELAY_SECONDS):
            return
        self.burst = None
        if self.waiting:   # a burst whose pods were all scheduled meanwhile tells nothing
            self.closed()

    def closed(self):
        raise NotImplementedError


def percentile(values, share):
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def served(replay):
    """Slice-hours served (memory slices times the hours held, to the replay's end) and pods placed per size class."""
    end = replay.options.hours * 3600.0
    hours = 0.0
    classes = dict((size, 0) for size in SIZE_CLASSES)
    for request in replay.requests:
        if request.placed_at is not None:
            hours += request.gpu.catalog.get(request.profile).memory_slices * (min(end, request.running_at + request.hold) - request.running_at) / 3600.0
            size = int(request.profile.split('g.', 1)[0])
            classes[size] = classes.get(size, 0) + 1
    return {'slice_hours': hours, 'classes': classes, 'requested': dict(
        (size, sum(1 for r in replay.requests if int(r.profile.split('g.', 1)[0]) == size)) for size in SIZE_CLASSES)}


def figures(replay):
    """What one replay achieved: placed requests (their count, and which), minutes pending to running (mean, p95),
    reconfigurations, cordons, runs, evictions, stranded slice-hours, and the pods that gave up while a GPU had room for
    them (idle instances counted as free: lost to the policy's reaction, not to packing)."""
    waits = [(r.running_at - r.arrival) / MINUTE for r in replay.requests if r.placed_at is not None]
    return dict(served(replay), **{
        'requests': len(replay.requests), 'placed': len(waits), 'mean_pending': sum(waits) / len(waits) if waits else 0.0,
        'p95_pending': percentile(waits, 0.95), 'reconfigurations': replay.reconfigurations, 'cordons': replay.cordons,
        'runs': replay.runs, 'evicted': replay.evicted, 'stranded_slice_hours': replay.stranded_seconds / 3600.0,
        'lost_with_room': replay.lost_with_room,
        'placed_requests': frozenset(r.name for r in replay.requests if r.placed_at is not None)})


def spread(values, form='%d'):
    return '/'.join(form % v for v in (min(values), statistics.median(values), max(values)))
