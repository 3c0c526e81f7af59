# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Demand benchmark: seeded streams of MIG pod requests on a mixed fleet, replayed against each policy as its real system runs.

docs/demand.md explains the model and the figures it printed. The replay's core is reusable (a layout advisor builds
on it): :func:`request_stream` generates the demand, :class:`Replay` simulates one policy over time (subclass it, or
give :class:`StaticLayout` any catalog layout), :func:`figures` counts what it placed.

Fleet: ``--gpus`` GPUs on each of four nodes, one node per model (A100-SXM4-80GB, H100-SXM5-80GB, H200, B200); the
profiles and placements are the simulator's (the NVML geometry of each model).

Workload (the same stream for every policy of a seed):

- A pod asks for one MIG device, ``nvidia.com/mig-<profile>``, named as its model names it: the request picks a
  model (equal shares) and a shape, so a 1g.10gb pod can land on an A100-80GB or an H100 (they share the name), a
  1g.18gb one only on the H200.
- Shape mix by time of day. Day (08:00-20:00, inference): 1g 45 %, 1g with double memory 10 %, 2g 20 %, 3g 15 %,
  4g 4 %, 7g 6 %. Night (training): 1g 20 %, 1g double memory 5 %, 2g 15 %, 3g 30 %, 4g 10 %, 7g 20 %. Holding time
  exponential, mean 40 min (1g), 60 min (2g), 120 min (3g, 4g), 180 min (7g), counted from the pod's start.
- Poisson arrivals sized to an offered load of ``--load`` of the fleet's memory slices, 1.3x by day and 0.7x by
  night, and a burst at 09:00 and 14:00: ``--burst`` small requests (1g, 2g) within 5 minutes.
- A pod not bound ``--patience`` minutes after it arrived gives up (a batch system's timeout): not placed. At equal
  times a give-up goes first: nothing is planned for a pod that has given up.

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

Policies, each with its reconfiguration latency (seconds, printed in the header):

- (a) static: every GPU keeps the shipped layout ``all-balanced`` (roles/mig_layout/files/catalog.yml).
- (b) day/night: the shipped ``daytime`` layout at 08:00 and ``nighttime`` at 20:00 (the AWX schedules), through
  the in-place switch (plan_gpu of _mig_planner, the held instances kept): one run of ``--run-seconds``; a node whose
  change destroys instances is cordoned meanwhile.
- (c) NVIDIA's DRA driver with dynamic MIG (kubernetes-sigs/dra-driver-nvidia-gpu v0.4, alpha): every possible
  placement is a device ``gpu-<N>-mig-<profile>-<id>-<start>``, allocated in name order, so on the node the
  scheduler picked, the lowest start on the first GPU that fits; the instance is created when the kubelet prepares
  the claim and destroyed when it unprepares it. ``--dra-seconds`` from binding to the pod running (the driver's
  CI asserts a pod Ready on a dynamically created 1g slice within 10 s on GB200: docs/eda.md).
- (d) nos-inspired (nebuly-ai/nos, archived): pending pods are batched (a batch closes 10 s after its last pod or
  60 s after its first, as nos does); then, per pod, the first GPU whose free instances, destroyed, leave room gets
  the pod's profile at its lowest start and the destroyed ones back where they still fit; ``--nos-seconds`` for the
  agent's change, the device plugin's restart and the node status. Not nos: no per-model geometry lists, no NVML
  auto-placement retries, no scheduler simulation before choosing; instances stay when pods leave. Never cordons.
- (e) this collection as it ships: the event source (extensions/eda, quiet period 10 s, at most 60 s, its
  defaults) opens a burst on each new unschedulable pod; its event runs playbooks/mig_demand.yml, one run at a
  time (ansible-rulebook runs actions in turn); the run reads pods and GPUs ``READ_SECONDS`` after it starts,
  plans with the default policy (no ``release_idle``, no eviction), and the in-place switch realises the generated
  layout (counts per GPU) with plan_gpu as the mig_layout role does: the switch's placements, not the planner's.
  Slices are schedulable ``--run-seconds`` after the run starts; a node whose change destroys instances is cordoned
  from the read to then. (e+r) the same plus the event source's release trigger: a pod that ends while pods wait
  opens a burst too. With ``--release-idle``, (e+r) again with ``release_idle: true`` in mig_demand_policy (not the
  default). (e+f) what the shipped rulebook runs: (e+r) plus the event source's create-only fast path (``fast: true``):
  0.5 s after the latest new waiting pod it decides with _demand_fast.fast_creates which hosts can serve waiting pods
  by creating instances only, and runs playbooks/mig_demand_create.yml on each (in the rulebook's one queue, after
  any run before it); a run whose GPUs changed since the decision is refused and its pods go to the full path, as
  do those still waiting 120 s after their instances were made. Latencies from make cluster-test's check 8.

(g) the gated rows, benchmarks/demand_gated.py: MIG pods held back by a scheduling gate and decided one at a time in
queue order by the collection's planning/_gated_queue (serve an idle instance, else create, else destroy idle ones),
at the fast path's latencies, with the release rule, the release wait and the source's reconciliation; as shipped
and with one option changed each (see that file).

Figures per policy: requests placed, minutes pending (to running: latency included), reconfigurations (one per GPU
whose instances change at one moment, the same for every policy: a DRA create or destroy is one), cordons (node
cordoned for a change), pods evicted, stranded slice-hours (_mig_geometry.analyze's stranded slices over time), and
the pods lost with room (gave up while some GPU had room for them, idle instances counted as free).

Run: PYTHONPATH=build/collections:simulator .venv/bin/python benchmarks/demand.py [--seeds N] [--hours H]
"""

from __future__ import absolute_import, division, print_function

import argparse
import dataclasses
import heapq
import os
import random
import re
import statistics
import sys
import time

from ansible_collections.gpufleet.mig.tests.support.simulator import simulator_on_path

simulator_on_path()

import yaml  # noqa: E402

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import (  # noqa: E402
    ComputeInstance,
    GpuHolders,
    GpuInstance,
    Placement,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_fast import fast_creates  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_planner import plan_demand  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import validate_document  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_keys import concrete_instances  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import match_gpus  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog, Occupancy, analyze  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError, plan_gpu  # noqa: E402
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import model_gpu  # noqa: E402

# benchmarks/demand_gated.py (the gated rows) imports this script as ``demand``: run as a script, it is that module.
sys.modules.setdefault('demand', sys.modules[__name__])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CATALOG_FILE = os.path.join(ROOT, 'roles', 'mig_layout', 'files', 'catalog.yml')
MODELS = ('A100-SXM4-80GB', 'H100-SXM5-80GB', 'H200', 'B200')
# (compute slices, memory slices) -> share, by day and by night
DAY_MIX = ((1, 1, 0.45), (1, 2, 0.10), (2, 2, 0.20), (3, 4, 0.15), (4, 4, 0.04), (7, 8, 0.06))
NIGHT_MIX = ((1, 1, 0.20), (1, 2, 0.05), (2, 2, 0.15), (3, 4, 0.30), (4, 4, 0.10), (7, 8, 0.20))
MEAN_HOLD = {1: 40.0, 2: 60.0, 3: 120.0, 4: 120.0, 7: 180.0}   # by compute slices, minutes
BURST_HOURS = (9, 14)
PLAIN_PROFILE = re.compile(r'^[0-9]+g\.[0-9]+gb$')
MINUTE = 60.0

# The event source's defaults (docs/eda.md: quiet_period 10, max_delay 60) and nos's batch (10 s quiet, 60 s at most).
QUIET_SECONDS, MAX_DELAY_SECONDS = 10.0, 60.0
# From a run's start to the plan's read of pods and GPUs: rulebook to playbook ~1 s, planning ~10 s (docs/eda.md).
READ_SECONDS = 11.0
# A run's remaining wait on the test cluster was hand-over and apply 12-13 s and device plugin 2-3.5 s with a 2 s
# kubelet status period (docs/eda.md); a stock kubelet (10 s) adds ~8 s: 11 + 12.5 + 11.5 = 35 s by default.
RUN_SECONDS = 35.0
DRA_SECONDS = 10.0
# Assumed for nos: its agent's NVML changes, the device plugin's restart and a stock kubelet's status period.
NOS_SECONDS = 20.0

# The create-only fast path (docs/eda.md, make cluster-test's check 8 with the kubelet's default status period): the
# event source decides 0.5 s after the latest new waiting pod; in the run, rulebook to playbook ~0.5 s and the lease and
# the create ~1.5 s, the device plugin's SIGHUP ~0.5 s, then the kubelet's next node status (every 10 s); the run reads
# the GPUs again and tells its outcome in ~2 s more. Pods of a created run still waiting 120 s later go to the full path.
FAST_QUIET_SECONDS = 0.5
FAST_CREATE_SECONDS = 2.0
FAST_PLUGIN_SECONDS = 0.5
NODE_STATUS_SECONDS = 10.0
FAST_RUN_SECONDS = 4.0
FAST_TIMEOUT_SECONDS = 120.0

# Event kinds, in the order they are handled at equal times: a pod gives up before anything else happens.
GIVE_UP, RELEASE, ARRIVE, POLICY = 0, 1, 2, 3


def daytime(seconds):
    """Whether ``seconds`` into the replay (which starts at 00:00) is in the day mix (08:00-20:00)."""
    return 8 <= int(seconds // 3600) % 24 < 20


class Request(object):
    """One pod asking for one MIG device: its arrival and holding time (seconds), profile, and what became of it."""
    __slots__ = ('number', 'arrival', 'hold', 'profile', 'placed_at', 'running_at', 'gpu', 'instance')

    def __init__(self, number, arrival, hold, profile):
        self.number = number
        self.arrival = arrival
        self.hold = hold
        self.profile = profile
        self.placed_at = None
        self.running_at = None
        self.gpu = None
        self.instance = None

    @property
    def name(self):
        return 'bench/pod-%d' % self.number

    def fresh(self):
        return Request(self.number, self.arrival, self.hold, self.profile)


def shape_profiles():
    """{model: {(compute, memory slices): profile name}}: the plain profile of each shape on each model."""
    shapes = {}
    for model in MODELS:
        catalog = Catalog.from_data(model_gpu(model).profiles)
        shapes[model] = {}
        for compute, memory, dummy in DAY_MIX:
            names = [p.name for p in catalog.profiles.values()
                     if p.compute_slices == compute and p.memory_slices == memory and PLAIN_PROFILE.match(p.name)]
            if len(names) != 1:
                raise SystemExit('%s has %d plain profiles of %dg with %d memory slices' % (model, len(names), compute, memory))
            shapes[model][(compute, memory)] = names[0]
    return shapes


def request_stream(seed, hours, load, burst, shapes, fleet_slices):
    """The seeded requests of one replay, in arrival order (seconds from 00:00)."""
    rng = random.Random(seed)
    mean_slices = sum(memory * share for dummy, memory, share in DAY_MIX)
    mean_hold = sum(MEAN_HOLD[compute] * share for compute, dummy, share in DAY_MIX)
    base_rate = load * fleet_slices / (mean_slices * mean_hold)   # per minute
    requests = []
    end = hours * 60.0

    def add(arrival, mix):
        compute, memory = rng.choices([(c, m) for c, m, dummy in mix], [s for dummy, dummy2, s in mix])[0]
        model = rng.choice(MODELS)
        requests.append(Request(0, arrival * MINUTE, rng.expovariate(1.0 / MEAN_HOLD[compute]) * MINUTE, shapes[model][(compute, memory)]))

    now = 0.0
    while True:
        now += rng.expovariate(base_rate * (1.3 if daytime(now * MINUTE) else 0.7))
        if now >= end:
            break
        add(now, DAY_MIX if daytime(now * MINUTE) else NIGHT_MIX)
    for day in range(int(hours // 24) + 1):
        for hour in BURST_HOURS:
            start = (day * 24 + hour) * 60.0
            if start < end:
                for dummy in range(burst):
                    add(start + rng.uniform(0, 5), ((1, 1, 0.7), (2, 2, 0.3)))
    requests.sort(key=lambda r: r.arrival)
    for number, request in enumerate(requests):
        request.number = number
    return requests


def shipped_layouts():
    """{layout name: {model: {profile: count}}} of the shipped catalog's all-balanced, daytime and nighttime."""
    with open(CATALOG_FILE) as handle:
        configs = validate_document(yaml.safe_load(handle))
    layouts = {}
    for name in ('all-balanced', 'daytime', 'nighttime'):
        layouts[name] = {}
        for model in MODELS:
            gpu = model_gpu(model)
            chosen = match_gpus(configs[name], [gpu])['gpus'][0]
            layouts[name][model] = concrete_instances(chosen['mig_devices'], gpu)
    return layouts


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

    def __init__(self, requests, options, seed):
        self.options = options
        self.requests = [r.fresh() for r in requests]
        self.gpus = [Gpu('node-%s' % model, index, model) for model in MODELS for index in range(options.gpus)]
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
        stranded_now = sum(stranded(g) for g in self.gpus)
        while self.events and self.events[0][0] <= end:
            when, dummy, dummy2, handler, args = heapq.heappop(self.events)
            self.stranded_seconds += stranded_now * (when - self.now)
            self.now = when
            handler(*args)
            stranded_now = sum(stranded(g) for g in self.gpus)
        self.stranded_seconds += stranded_now * (end - self.now)
        return self

    def arrive(self, request):
        self.waiting.append(request)
        if not self.schedule(request):
            self.on_unschedulable(request)

    def give_up(self, request):
        if request.placed_at is None and request in self.waiting:
            self.waiting.remove(request)
            if any(g.lowest_start(request.profile, g.occupancy(without=[i for i in g.instances if i[3] is None])) is not None
                   for g in self.gpus):
                self.lost_with_room += 1

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


class StaticLayout(Replay):
    """(a): one layout ({model: {profile: count}}) on every GPU, never changed."""
    label = '(a) static all-balanced'

    def __init__(self, requests, options, seed, layout):
        super(StaticLayout, self).__init__(requests, options, seed)
        self.layout = layout

    def start(self):
        for gpu in self.gpus:
            gpu.converge(self.layout[gpu.model])


class DayNight(Replay):
    """(b): daytime at 08:00 and nighttime at 20:00 through the in-place switch (one run, cordon where it destroys)."""
    label = '(b) day/night schedule'

    def __init__(self, requests, options, seed, layouts):
        super(DayNight, self).__init__(requests, options, seed)
        self.layouts = layouts

    def start(self):
        for gpu in self.gpus:
            gpu.converge(self.layouts['nighttime'][gpu.model])
        for day in range(int(self.options.hours // 24) + 1):
            for hour, name in ((8, 'daytime'), (20, 'nighttime')):
                self.at((day * 24 + hour) * 3600.0, POLICY, self.switch, name)

    def switch(self, name):
        self.runs += 1
        for node in self.nodes:
            trial = [Gpu(g.node, g.index, g.model) for g in self.gpus if g.node == node]
            for copy, gpu in zip(trial, [g for g in self.gpus if g.node == node]):
                copy.instances = [list(i) for i in gpu.instances]
                copy.next_id = gpu.next_id
            if any(a['action'] == 'destroy_gpu_instance' for copy in trial for a in copy.converge(self.layouts[name][copy.model])):
                self.cordons += 1
                self.cordoned[node] = self.now + self.options.run_seconds
        self.at(self.now + self.options.run_seconds, POLICY, self.apply, name)

    def apply(self, name):
        for gpu in self.gpus:
            self.reconfigured(gpu.converge(self.layouts[name][gpu.model]))
        self.schedule_waiting()


class DraDynamicMig(Replay):
    """(c): NVIDIA's DRA driver, dynamic MIG: a device per placement, created at prepare, destroyed at unprepare."""
    label = '(c) DRA dynamic MIG'

    @property
    def start_seconds(self):
        return self.options.dra_seconds

    def device_on(self, node, profile):
        for gpu in self.gpus:
            if gpu.node == node and gpu.lowest_start(profile) is not None:
                return gpu, None
        return None

    def prepare(self, gpu, profile):
        self.reconfigurations += 1
        return gpu.create(profile, gpu.lowest_start(profile))

    def released(self, request):
        request.gpu.instances.remove(request.instance)
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


class NosInspired(Debounced):
    """(d): batches of pending pods; per pod, the first GPU whose free instances, destroyed, make room."""
    label = '(d) nos-inspired'

    def closed(self):
        self.at(self.now + self.options.nos_seconds, POLICY, self.partition)

    def partition(self):
        self.runs += 1
        changed = set()
        for request in sorted(self.waiting, key=lambda r: (r.arrival, r.number)):
            if any(g.free_instance(request.profile) is not None for g in self.gpus):
                continue
            for gpu in self.gpus:
                free = [i for i in gpu.instances if i[3] is None]
                start = gpu.lowest_start(request.profile, gpu.occupancy(without=free))
                if start is None:
                    continue
                for instance in free:
                    gpu.instances.remove(instance)
                gpu.create(request.profile, start)
                for instance in sorted(free, key=lambda i: i[2]):
                    again = gpu.lowest_start(instance[1])
                    if again is not None:
                        gpu.create(instance[1], again)
                changed.add((gpu.node, gpu.index))
                break
        self.reconfigurations += len(changed)
        self.schedule_waiting()


class ShippedDemand(Debounced):
    """(e): the event source's bursts run playbooks/mig_demand.yml one at a time; the plan's generated layout is
    realised by the in-place switch (plan_gpu), the nodes whose change destroys instances cordoned meanwhile."""
    label = '(e) shipped: new pods'
    policy = {}

    def __init__(self, *args):
        super(ShippedDemand, self).__init__(*args)
        self.actions = []   # ansible-rulebook's queue of actions, run one at a time (its sequential strategy)
        self.running = False

    def closed(self):
        self.enqueue(('full',))

    def enqueue(self, action):
        self.actions.append(action)
        if not self.running:
            self.next_run()

    def next_run(self):
        if not self.actions:
            self.running = False
            return
        self.running = True
        self.runs += 1
        self.begin(self.actions.pop(0))

    def begin(self, action):
        """Start one queued run: a full run reads the pods and GPUs ``READ_SECONDS`` after it starts."""
        self.at(self.now + READ_SECONDS, POLICY, self.plan)

    def plan(self):
        if not self.waiting:   # the playbook plans for the pods still waiting (still_waiting)
            self.next_run()
            return
        nodes = {}
        for gpu in self.gpus:
            nodes.setdefault(gpu.node, {'gpus': []})['gpus'].append(gpu.as_facts())
        pending = [pending_entry(r) for r in self.for_the_full_path()]
        if not pending:
            self.next_run()
            return
        plan = plan_demand(nodes, pending, self.policy)
        self.evicted += len(plan['evictions'])
        targets = []
        for node in sorted(plan['nodes']):
            view = plan['nodes'][node]
            if not view['changed']:
                continue
            if view['cordon']:
                self.cordons += 1
                self.cordoned[node] = self.now + self.options.run_seconds - READ_SECONDS
            entries = view['layout']['config'][view['layout']['name']]
            for entry in entries:
                targets.append((node, entry['devices'][0], entry['mig-devices']))
        if not targets:
            self.next_run()
            return
        self.at(self.now + self.options.run_seconds - READ_SECONDS, POLICY, self.apply, targets)

    def for_the_full_path(self):
        """The waiting pods a full run plans for."""
        return self.waiting

    def apply(self, targets):
        gpus = dict(((g.node, g.index), g) for g in self.gpus)
        for node, index, counts in targets:
            self.reconfigured(gpus[(node, index)].converge(counts))
        self.schedule_waiting()
        self.next_run()


class ShippedDemandReleaseTrigger(ShippedDemand):
    label = '(e+r) shipped + release trigger'
    release_trigger = True


class ShippedFastPath(ShippedDemandReleaseTrigger):
    """(e+f): what the shipped rulebook runs (fast: true, the release trigger): the event source decides create-only
    demand itself (_demand_fast.fast_creates over the nodes' GPUs, ``FAST_QUIET_SECONDS`` after the latest new waiting
    pod) and runs playbooks/mig_demand_create.yml on each such host; the rest, and the pods of a refused or late fast
    run, take the full path (e+r). Both kinds of run share ansible-rulebook's one queue (its sequential strategy): a
    fast run queued behind a full run starts after it. A fast run re-decides on the host: where a target GPU changed
    since the decision it is refused (the module's create_only guard) and its pods go to the full path."""
    label = '(e+f) shipped: fast path + release'

    def __init__(self, *args):
        super(ShippedFastPath, self).__init__(*args)
        # Queued beside the full runs: ('fast', change, GPU states at the decision).
        self.last_new = None
        self.in_flight = {}      # request -> (node, deadline, whether its run ended)
        self.busy = set()        # nodes with a fast run not ended
        self.given_up = set()

    def begin(self, action):
        if action[0] == 'fast':
            self.at(self.now + FAST_CREATE_SECONDS, POLICY, self.fast_create, action[1], action[2])
        else:
            super(ShippedFastPath, self).begin(action)

    def for_the_full_path(self):
        return [r for r in self.waiting if r not in self.in_flight]

    def on_unschedulable(self, request):
        super(ShippedFastPath, self).on_unschedulable(request)
        self.last_new = self.now
        self.at(self.now + FAST_QUIET_SECONDS, POLICY, self.fast_decide)

    def fast_decide(self):
        if self.last_new is None or self.now < self.last_new + FAST_QUIET_SECONDS:
            return
        self.last_new = None
        for request in [r for r in self.in_flight if r not in self.waiting]:   # bound since, or gave up
            del self.in_flight[request]
        requests = dict((r.name, r) for r in self.waiting if r not in self.in_flight and r not in self.given_up)
        if not requests:
            return
        hosts, objects, held = {}, {}, {}
        for gpu in self.gpus:
            if gpu.node not in self.busy:
                hosts.setdefault(gpu.node, []).append(gpu.as_facts())
                objects[gpu.node] = {'metadata': {'name': gpu.node, 'labels': {}}, 'spec': {},
                                     'status': {'allocatable': {'cpu': '1000', 'memory': '10000Gi', 'pods': '1000'}}}
        for request, (node, dummy, ended) in self.in_flight.items():
            if ended:   # its instance exists, idle until the kubelet advertises it: not free
                held.setdefault(node, {})[request.profile] = held.get(node, {}).get(request.profile, 0) + 1
        decided = fast_creates(hosts, [pending_entry(r) for r in sorted(requests.values(), key=lambda r: (r.arrival, r.number))],
                               objects, [], self.policy, held)
        for change in decided['creates']:
            self.busy.add(change['host'])
            for name in change['pods']:
                self.in_flight[requests[name]] = (change['host'], float('inf'), False)
            states = dict((g.index, g.state_key()) for g in self.gpus if g.node == change['host'])
            self.enqueue(('fast', change, states))

    def fast_create(self, change, states):
        gpus = dict((g.index, g) for g in self.gpus if g.node == change['host'])
        pods = [r for r, flight in self.in_flight.items() if flight[0] == change['host'] and not flight[2]]
        if any(gpus[int(index)].state_key() != states[int(index)] for index in change['gpus']):
            self.give_back(pods)   # refused before any change: the full path decides again
        else:
            for entry in change['layout']['config'][change['layout']['name']]:
                self.reconfigured(gpus[entry['devices'][0]].converge(entry['mig-devices']))
            for request in pods:
                self.in_flight[request] = (change['host'], self.now + FAST_TIMEOUT_SECONDS, True)
            self.at(self.now + FAST_TIMEOUT_SECONDS, POLICY, self.expire)
            # SIGHUP to the device plugin, then the kubelet's next node status (every 10 s, at a random phase).
            self.at(self.now + FAST_PLUGIN_SECONDS + self.rng.uniform(0.0, NODE_STATUS_SECONDS), POLICY, self.advertised)
        self.at(self.now + FAST_RUN_SECONDS - FAST_CREATE_SECONDS, POLICY, self.fast_ended, change['host'])

    def advertised(self):
        self.schedule_waiting()
        for request in [r for r in self.in_flight if r.placed_at is not None or r not in self.waiting]:
            del self.in_flight[request]

    def expire(self):
        """The pods of a created run still waiting ``FAST_TIMEOUT_SECONDS`` after it go to the full path."""
        self.give_back([r for r, flight in self.in_flight.items() if flight[2] and flight[1] <= self.now and r in self.waiting])

    def fast_ended(self, host):
        self.busy.discard(host)
        self.next_run()

    def give_back(self, requests):
        for request in requests:
            self.in_flight.pop(request, None)
            self.given_up.add(request)
        if any(r in self.waiting for r in requests):
            self.open_burst()


class ReleaseIdleDemand(ShippedDemand):
    label = '(e+r) + release_idle policy'
    release_trigger = True
    policy = {'release_idle': True}


def pending_entry(request):
    """A waiting pod as the event source tells it (the shape plan_demand and fast_creates take)."""
    return {'pod': request.name, 'priority': 0, 'created': '%012.3f' % request.arrival, 'requests': {request.profile: 1}}


def percentile(values, share):
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def figures(replay):
    """What one replay achieved: placed requests, minutes pending to running (mean, p95), reconfigurations, cordons,
    runs, evictions, stranded slice-hours, and the pods that gave up while a GPU had room for them (idle instances
    counted as free: lost to the policy's reaction, not to packing)."""
    import demand_gated
    waits = [(r.running_at - r.arrival) / MINUTE for r in replay.requests if r.placed_at is not None]
    return dict(demand_gated.served(replay), **{
        'requests': len(replay.requests), 'placed': len(waits), 'mean_pending': sum(waits) / len(waits) if waits else 0.0,
        'p95_pending': percentile(waits, 0.95), 'reconfigurations': replay.reconfigurations, 'cordons': replay.cordons,
        'runs': replay.runs, 'evicted': replay.evicted, 'stranded_slice_hours': replay.stranded_seconds / 3600.0,
        'lost_with_room': replay.lost_with_room})


def policies(layouts, release_idle=False, options=None):
    """(label, factory(requests, options, seed)) of each policy compared, in print order; the release_idle variant
    (not the shipped policy, and three times the CPU of the others together) only when asked; the gated rows
    (benchmarks/demand_gated.py) when ``options`` are given."""
    import demand_gated
    return [
        (StaticLayout.label, lambda r, o, s: StaticLayout(r, o, s, layouts['all-balanced'])),
        (DayNight.label, lambda r, o, s: DayNight(r, o, s, layouts)),
        (DraDynamicMig.label, DraDynamicMig),
        (NosInspired.label, NosInspired),
        (ShippedDemand.label, ShippedDemand),
        (ShippedDemandReleaseTrigger.label, ShippedDemandReleaseTrigger),
        (ShippedFastPath.label, ShippedFastPath),
    ] + ([(ReleaseIdleDemand.label, ReleaseIdleDemand)] if release_idle else []) + \
        (demand_gated.policies(options) if options is not None else [])


def spread(values, form='%d'):
    return '/'.join(form % v for v in (min(values), statistics.median(values), max(values)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--seeds', type=int, default=4, help='request streams replayed (default %(default)s)')
    parser.add_argument('--seed', default='gpufleet-demand', help='seed prefix, -1 .. -N appended (default %(default)s)')
    parser.add_argument('--hours', type=float, default=24.0, help='replayed hours per seed (default %(default)s)')
    parser.add_argument('--gpus', type=int, default=4, help='GPUs per node, one node per model (default %(default)s)')
    parser.add_argument('--load', type=float, default=0.9, help='offered load, share of memory slices (default %(default)s)')
    parser.add_argument('--burst', type=int, default=24, help='small requests in each 09:00 and 14:00 burst (default %(default)s)')
    parser.add_argument('--patience', type=float, default=30.0, help='minutes a pod waits before it gives up (default %(default)s)')
    parser.add_argument('--run-seconds', type=float, default=RUN_SECONDS,
                        help='a playbook run from its start to the slices schedulable (default %(default)s)')
    parser.add_argument('--dra-seconds', type=float, default=DRA_SECONDS, help='DRA: binding to running (default %(default)s)')
    parser.add_argument('--release-idle', action='store_true', help="also replay (e+r) with mig_demand_policy {release_idle: true}")
    parser.add_argument('--nos-seconds', type=float, default=NOS_SECONDS, help='nos: batch closed to devices schedulable (default %(default)s)')
    import demand_gated
    demand_gated.add_arguments(parser)
    options = parser.parse_args(argv)
    if options.gpus < 1 or options.hours <= 0 or options.load <= 0 or options.patience < 0 or options.burst < 0 or options.seeds < 1:
        parser.error('--seeds, --gpus, --hours and --load must be positive, --patience and --burst not negative')
    if options.release_after < 0 or options.destroy_after < 0 or options.gated_restart < 0:
        parser.error('--release-after, --destroy-after and --gated-restart must not be negative')
    if options.run_seconds < READ_SECONDS:
        parser.error('--run-seconds must be at least the %g s a run takes to read the pods and GPUs' % READ_SECONDS)
    started = time.perf_counter()
    cpu_started = time.process_time()
    shapes = shape_profiles()
    fleet_slices = sum(Catalog.from_data(model_gpu(m).profiles).total_slices for m in MODELS) * options.gpus
    layouts = shipped_layouts()
    seeds = ['%s-%d' % (options.seed, n) for n in range(1, options.seeds + 1)]
    print('Demand benchmark: seeds %s, %g h each, %d GPUs on each of %s (%d memory slices), offered load %.2f, '
          'bursts of %d at %s, patience %g min'
          % (', '.join(seeds), options.hours, options.gpus, ', '.join(MODELS), fleet_slices, options.load, options.burst,
             ' and '.join('%02d:00' % h for h in BURST_HOURS), options.patience))
    print('Latencies (s): playbook run %g (pods and GPUs read at %g; docs/eda.md measured 29-33 pending to running with a '
          '2 s kubelet status, 43-72 under load), event source quiet %g / max %g, DRA bind to running %g (its CI: within 10 on GB200), '
          'nos batch 10 / 60 then %g (assumed); fast path: decided %g after the latest new pod, created %g after its run starts, '
          'then the plugin %g and the kubelet\'s status within %g (default period), the run ends after %g'
          % (options.run_seconds, READ_SECONDS, QUIET_SECONDS, MAX_DELAY_SECONDS, options.dra_seconds, options.nos_seconds,
             FAST_QUIET_SECONDS, FAST_CREATE_SECONDS, FAST_PLUGIN_SECONDS, NODE_STATUS_SECONDS, FAST_RUN_SECONDS))
    print("Gated (s): decided %g after a pod is seen, a serve's gate removed %g later, a create as the fast path's; released "
          "after %g, an idle instance destroyed %s after its pod ended, the source restarted every %g h"
          % (FAST_QUIET_SECONDS, FAST_PLUGIN_SECONDS, options.release_after, '%g' % options.destroy_after,
             options.gated_restart))
    results = dict((label, []) for label, dummy in policies(layouts, options.release_idle, options))
    for seed in seeds:
        requests = request_stream(seed, options.hours, options.load, options.burst, shapes, fleet_slices)
        for label, factory in policies(layouts, options.release_idle, options):
            results[label].append(figures(factory(requests, options, seed).run()))
    static = results[StaticLayout.label]
    dra = results[DraDynamicMig.label]
    print('Per seed, requests placed (requests: %s):' % ', '.join(str(f['requests']) for f in static))
    for label, dummy in policies(layouts, options.release_idle, options):
        print('  %-32s %s' % (label, '  '.join('%5d' % f['placed'] for f in results[label])))
    columns = ('policy (min/median/max over seeds)', 'placed', 'vs static', 'vs DRA', 'p95 pending min', 'reconfig',
               'cordons', 'runs', 'evicted', 'stranded slice-h', 'lost with room')
    header = '%-34s %14s %17s %14s %16s %16s %14s %14s %7s %17s %15s' % columns
    print(header)
    print('-' * len(header))
    for label, dummy in policies(layouts, options.release_idle, options):
        mine = results[label]
        print('%-34s %14s %17s %14s %16s %16s %14s %14s %7d %17s %15s' % (
            label, spread([f['placed'] for f in mine]),
            spread([float(f['placed']) / s['placed'] for f, s in zip(mine, static)], '%.2f'),
            spread([f['placed'] - d['placed'] for f, d in zip(mine, dra)], '%+d'),
            spread([f['p95_pending'] for f in mine], '%.1f'), spread([f['reconfigurations'] for f in mine]),
            spread([f['cordons'] for f in mine]), spread([f['runs'] for f in mine]), max(f['evicted'] for f in mine),
            spread([f['stranded_slice_hours'] for f in mine], '%.0f'), spread([f['lost_with_room'] for f in mine])))
    for label in (ShippedDemand.label, ShippedDemandReleaseTrigger.label, ShippedFastPath.label):
        mine = results[label]
        gain = statistics.median([float(f['placed']) / s['placed'] - 1 for f, s in zip(mine, static)])
        lead = statistics.median([f['placed'] - d['placed'] for f, d in zip(mine, dra)])
        met = gain >= 0.10 and lead >= 0 and not any(f['evicted'] for f in mine)
        print('Goal for %s: >= +10 %% placed over static and >= DRA, seeds\' median, 0 evictions: %+.1f %%, %+g vs DRA, %d evicted: %s'
              % (label, 100 * gain, lead, max(f['evicted'] for f in mine), 'met' if met else 'NOT met'))
    print('Served (slice-hours: memory slices times hours held, to the replay\'s end; per size class: pods placed):')
    gated = [label for label, dummy in demand_gated.policies(options)]
    demand_gated.print_served([StaticLayout.label, DraDynamicMig.label, ShippedFastPath.label] + gated, results, spread)
    for label in gated:
        demand_gated.goal(label, results)
    print('run time %.1f s wall, %.1f s CPU (one core)' % (time.perf_counter() - started, time.process_time() - cpu_started))
    return 0


if __name__ == '__main__':
    sys.exit(main())
