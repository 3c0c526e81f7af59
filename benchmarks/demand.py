# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Demand benchmark: one seeded stream of MIG pod requests on a mixed fleet, replayed against five policies.

docs/demand.md explains the model and the figures it printed.

Fleet: ``--gpus`` GPUs on each of four nodes, one node per model (A100-SXM4-80GB, H100-SXM5-80GB, H200,
B200); the profiles and placements are the simulator's (the NVML geometry of each model).

Workload (the same stream for every policy):

- A pod asks for one MIG device, ``nvidia.com/mig-<profile>``, named as its model names it: the request
  picks a model (equal shares) and a shape, so a 1g.10gb pod can land on an A100-80GB or an H100
  (they share the name), a 1g.18gb one only on the H200.
- Shape mix by time of day. Day (08:00-20:00, inference): 1g 45 %, 1g with double memory 10 %, 2g 20 %,
  3g 15 %, 4g 4 %, 7g 6 %. Night (training): 1g 20 %, 1g double memory 5 %, 2g 15 %, 3g 30 %, 4g 10 %,
  7g 20 %. Holding time exponential, mean 40 min (1g), 60 min (2g), 120 min (3g, 4g), 180 min (7g).
- Poisson arrivals sized to an offered load of ``--load`` of the fleet's memory slices, 1.3x by day and
  0.7x by night, and a burst at 09:00 and 14:00: ``--burst`` small requests (1g, 2g) within 5 minutes.
- A pod that is not running ``--patience`` minutes after it arrived gives up (a batch system's timeout):
  it counts as not placed. Placed pods' time pending is measured in replay time.
- The scheduler binds a pod at once to a free instance of its profile if one exists (every policy).

Policies:

- (a) static: every GPU keeps the shipped layout ``all-balanced`` (roles/mig_layout/files/catalog.yml).
- (b) day/night: the shipped ``daytime`` layout at 08:00 and ``nighttime`` at 20:00 (the AWX schedules),
  through the in-place switch (plan_gpu of _mig_planner): instances pods hold stay, idle ones go, as
  much of the layout as fits around the held ones is created.
- (c) model of NVIDIA's DRA driver with dynamic MIG (kubernetes-sigs/dra-driver-nvidia-gpu, feature gate
  DynamicMIG, PR 852 "Introduce dynamic MIG device management"; no MIG device may exist beforehand,
  issue 149): per request, the first GPU in the scheduler's order where the profile fits gets an
  instance at its lowest free placement in NVML's order; the instance is destroyed when the pod leaves.
- (d) model of nos (nebuly-ai/nos, its MIG partitioner as its documentation "Dynamic GPU partitioning"
  describes it: each minute the pending pods' requests go to the first GPU whose new geometry fits them,
  and the agent deletes the GPU's free MIG devices and creates the new geometry): the GPU's free
  instances are destroyed, the wanted one created at its lowest free placement, and the destroyed ones
  re-created where they still fit. Instances stay when their pod leaves.
- (e) this planner: ``plan_demand`` (_demand_planner) on the fleet and the waiting pods with
  ``release_idle`` (no floor, no eviction, no GPU budget), its actions applied: each minute in which a
  pod arrived and found no free instance, and at once when MIG pods end (before the pods of that
  minute arrive), so that released instances go before the scheduler binds a new pod to them.
  Starts from empty GPUs, as (c) and (d).
- (e') the same planner run only for pending pods (each minute in which one arrived or one ended
  while pods wait): released instances stay idle until the next run, and the scheduler binds new
  pods to them wherever earlier demand put them.

Figures per policy: requests placed, mean and p95 minutes pending (placed pods), reconfigurations (a GPU
changing its instances at one moment), pods evicted, stranded slice-hours (_mig_geometry.analyze's
stranded slices, integrated over time on every GPU).

Run: PYTHONPATH=build/collections:simulator .venv/bin/python benchmarks/demand.py [--seed S] [--hours H]
"""

from __future__ import absolute_import, division, print_function

import argparse
import dataclasses
import heapq
import os
import random
import re
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
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_planner import plan_demand  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import validate_document  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_keys import concrete_instances  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import match_gpus  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog, Occupancy, analyze  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError, plan_gpu  # noqa: E402
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import model_gpu  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CATALOG_FILE = os.path.join(ROOT, 'roles', 'mig_layout', 'files', 'catalog.yml')
MODELS = ('A100-SXM4-80GB', 'H100-SXM5-80GB', 'H200', 'B200')
# (compute slices, memory slices) -> share, by day and by night
DAY_MIX = ((1, 1, 0.45), (1, 2, 0.10), (2, 2, 0.20), (3, 4, 0.15), (4, 4, 0.04), (7, 8, 0.06))
NIGHT_MIX = ((1, 1, 0.20), (1, 2, 0.05), (2, 2, 0.15), (3, 4, 0.30), (4, 4, 0.10), (7, 8, 0.20))
MEAN_HOLD = {1: 40.0, 2: 60.0, 3: 120.0, 4: 120.0, 7: 180.0}   # by compute slices, minutes
BURST_HOURS = (9, 14)
PLAIN_PROFILE = re.compile(r'^[0-9]+g\.[0-9]+gb$')
# (e)'s policy: no floor, no eviction, no GPU budget; idle instances released (decision 9 of _demand_planner).
PLANNER_POLICY = {'release_idle': True}
POLICIES = ('static', 'day/night', 'dra', 'nos', 'planner', 'planner-pending')
LABELS = {'static': '(a) static all-balanced', 'day/night': '(b) day/night schedule', 'dra': '(c) DRA dynamic MIG',
          'nos': '(d) nos', 'planner': '(e) demand planner', 'planner-pending': "(e') planner, pending only"}


def daytime(minute):
    return 8 <= (minute // 60) % 24 < 20


class Request(object):
    __slots__ = ('number', 'arrival', 'hold', 'profile', 'placed_at', 'gpu', 'instance')

    def __init__(self, number, arrival, hold, profile):
        self.number = number
        self.arrival = arrival
        self.hold = hold
        self.profile = profile
        self.placed_at = None
        self.gpu = None
        self.instance = None

    @property
    def name(self):
        return 'bench/pod-%d' % self.number


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


def request_stream(options, shapes, fleet_slices):
    """The seeded requests, in arrival order (minutes)."""
    rng = random.Random(options.seed)
    mean_slices = sum(memory * share for dummy, memory, share in DAY_MIX)
    mean_hold = sum(MEAN_HOLD[compute] * share for compute, dummy, share in DAY_MIX)
    base_rate = options.load * fleet_slices / (mean_slices * mean_hold)   # per minute
    requests = []
    end = options.hours * 60.0

    def add(arrival, mix):
        compute, memory = rng.choices([(c, m) for c, m, dummy in mix], [s for dummy, dummy2, s in mix])[0]
        model = rng.choice(MODELS)
        requests.append(Request(0, arrival, rng.expovariate(1.0 / MEAN_HOLD[compute]), shapes[model][(compute, memory)]))

    now = 0.0
    while True:
        now += rng.expovariate(base_rate * (1.3 if daytime(int(now)) else 0.7))
        if now >= end:
            break
        add(now, DAY_MIX if daytime(int(now)) else NIGHT_MIX)
    for day in range(int(options.hours // 24) + 1):
        for hour in BURST_HOURS:
            start = (day * 24 + hour) * 60.0
            if start < end:
                for dummy in range(options.burst):
                    add(start + rng.uniform(0, 5), ((1, 1, 0.7), (2, 2, 0.3)))
    requests.sort(key=lambda r: r.arrival)
    for number, request in enumerate(requests):
        request.number = number
    return requests


def shipped_layouts():
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
    """One simulated GPU: instances [id, profile, start, request or None] and cached figures."""

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

    def state_key(self):
        return (self.model, tuple(sorted((i[1], i[2]) for i in self.instances)))


_STRANDED = {}


def stranded(gpu):
    key = gpu.state_key()
    if key not in _STRANDED:
        _STRANDED[key] = analyze(gpu.catalog, gpu.occupancy())['stranded_slices']
    return _STRANDED[key]


class Replay(object):
    """One policy replaying the stream minute by minute."""

    def __init__(self, policy, requests, options, layouts):
        self.policy = policy
        self.options = options
        self.layouts = layouts
        self.requests = [Request(r.number, r.arrival, r.hold, r.profile) for r in requests]
        self.gpus = [Gpu('node-%s' % model, index, model) for model in MODELS for index in range(options.gpus)]
        self.waiting = []
        self.releases = []
        self.reconfigurations = 0
        self.evicted = 0
        self.stranded_minutes = 0.0
        self.dirty = False
        if policy == 'static':
            for gpu in self.gpus:
                self.converge(gpu, layouts['all-balanced'][gpu.model], count=False)

    # -- shared mechanics ------------------------------------------------------------------

    def bind(self, request, gpu, instance, now):
        instance[3] = request
        request.placed_at = now
        request.gpu = gpu
        request.instance = instance
        heapq.heappush(self.releases, (now + request.hold, request.number, request))

    def bind_free(self, request, now):
        for gpu in self.gpus:
            instance = gpu.free_instance(request.profile)
            if instance is not None:
                self.bind(request, gpu, instance, now)
                return True
        return False

    def converge(self, gpu, target, count=True):
        """The in-place switch to ``target`` ({profile: count}) through plan_gpu (_mig_planner), as the
        mig_layout role runs it: instances pods hold stay (they are added to the target when the layout
        lacks them) and, where the whole layout no longer fits around them, the layout's most numerous
        profile gives up one instance at a time until it does."""
        holders = GpuHolders(instances=dict((i[0], (i[3].name,)) for i in gpu.instances if i[3] is not None))
        wanted = dict(target)
        held = {}
        for instance in gpu.instances:
            if instance[3] is not None:
                held[instance[1]] = held.get(instance[1], 0) + 1
        for profile, number in held.items():
            wanted[profile] = max(wanted.get(profile, 0), number)
        data = dataclasses.replace(gpu.data, index=gpu.index, gpu_instances=tuple(
            GpuInstance(i[0], i[1], Placement(i[2], gpu.catalog.get(i[1]).memory_slices),
                        compute_instances=(ComputeInstance(0, i[1], Placement(0, 1)),)) for i in gpu.instances))
        while True:
            try:
                plan = plan_gpu(data, wanted, holders=holders)
                break
            except PlanningError:
                spare = sorted((n for n in wanted if wanted[n] > held.get(n, 0)), key=lambda n: (-(wanted[n] - held.get(n, 0)), n))
                if not spare:
                    return
                wanted[spare[0]] -= 1
        by_id = dict((i[0], i) for i in gpu.instances)
        for action in plan.actions:
            if action['action'] == 'destroy_gpu_instance':
                gpu.instances.remove(by_id[action['gpu_instance_id']])
            elif action['action'] == 'create_gpu_instance':
                gpu.create(action['profile'], action['placement']['start'])
        if plan.changed and count:
            self.reconfigurations += 1

    # -- the replay ------------------------------------------------------------------------

    def run(self):
        arrivals = list(self.requests)
        position = 0
        end = int(self.options.hours * 60)
        for minute in range(end + 1):
            released = False
            while self.releases and self.releases[0][0] <= minute:
                dummy, dummy2, request = heapq.heappop(self.releases)
                self.release(request, minute)
                released = True
            if released and self.policy == 'planner':
                # (e) also runs when MIG pods end, before new pods arrive: the idle instances go at once
                self.planner_tick(minute)
            while position < len(arrivals) and arrivals[position].arrival < minute + 1:
                request = arrivals[position]
                position += 1
                if not self.arrive(request, minute):
                    self.waiting.append(request)
                    self.dirty = True
            self.waiting = [r for r in self.waiting if r.placed_at is None and minute - r.arrival <= self.options.patience]
            self.tick(minute)
            self.waiting = [r for r in self.waiting if r.placed_at is None]
            self.stranded_minutes += sum(stranded(gpu) for gpu in self.gpus)
        return self

    def arrive(self, request, minute):
        if self.bind_free(request, minute):
            return True
        if self.policy == 'dra':
            return self.dra_create(request, minute)
        return False

    def release(self, request, minute):
        request.instance[3] = None
        if self.policy == 'dra':
            request.gpu.instances.remove(request.instance)
            self.reconfigurations += 1
        self.dirty = True

    def tick(self, minute):
        if self.policy == 'day/night' and minute % (24 * 60) in (8 * 60, 20 * 60) or (self.policy == 'day/night' and minute == 0):
            layout = 'daytime' if daytime(minute) else 'nighttime'
            for gpu in self.gpus:
                self.converge(gpu, self.layouts[layout][gpu.model], count=minute > 0)
        for request in list(self.waiting):
            if self.bind_free(request, minute):
                continue
            if self.policy == 'dra':
                self.dra_create(request, minute)
        if self.policy == 'nos' and self.waiting:
            self.nos_tick(minute)
        if self.dirty and (self.policy == 'planner' or (self.policy == 'planner-pending' and self.waiting)):
            self.planner_tick(minute)
        self.dirty = False

    # -- (c) DRA driver's dynamic MIG --------------------------------------------------------

    def dra_create(self, request, minute):
        for gpu in self.gpus:
            start = gpu.lowest_start(request.profile)
            if start is not None:
                self.bind(request, gpu, gpu.create(request.profile, start), minute)
                self.reconfigurations += 1
                return True
        return False

    # -- (d) nos ---------------------------------------------------------------------------

    def nos_tick(self, minute):
        for request in list(self.waiting):
            if request.placed_at is not None or self.bind_free(request, minute):
                continue
            for gpu in self.gpus:
                free = [i for i in gpu.instances if i[3] is None]
                start = gpu.lowest_start(request.profile, gpu.occupancy(without=free))
                if start is None:
                    continue
                for instance in free:
                    gpu.instances.remove(instance)
                self.bind(request, gpu, gpu.create(request.profile, start), minute)
                for instance in sorted(free, key=lambda i: i[2]):
                    again = gpu.lowest_start(instance[1])
                    if again is not None:
                        gpu.create(instance[1], again)
                self.reconfigurations += 1
                break

    # -- (e) this planner ------------------------------------------------------------------

    def planner_tick(self, minute):
        nodes = {}
        by_key = {}
        for gpu in self.gpus:
            instances = []
            for instance in gpu.instances:
                holder = [instance[3].name] if instance[3] is not None else []
                instances.append({'id': instance[0], 'profile': instance[1],
                                  'placement': {'start': instance[2], 'size': gpu.catalog.get(instance[1]).memory_slices},
                                  'allocated_to': holder, 'compute_instances': []})
                by_key[(gpu.node, gpu.index, instance[0])] = instance
            nodes.setdefault(gpu.node, {'gpus': []})['gpus'].append(
                {'index': gpu.index, 'uuid': None, 'profiles': gpu.data.profiles, 'gpu_instances': instances, 'allocated_to': []})
        pending = [{'pod': r.name, 'priority': 0, 'created': '%09.3f' % r.arrival, 'requests': {r.profile: 1}} for r in self.waiting]
        plan = plan_demand(nodes, pending, PLANNER_POLICY)
        self.evicted += len(plan['evictions'])
        by_name = dict((r.name, r) for r in self.waiting)
        gpus = dict(((gpu.node, gpu.index), gpu) for gpu in self.gpus)
        created = {}
        for node in sorted(plan['nodes']):
            for view in plan['nodes'][node]['gpus']:
                if not view['actions']:
                    continue
                gpu = gpus[(node, view['index'])]
                self.reconfigurations += 1
                for action in view['actions']:
                    if action['action'] == 'destroy_gpu_instance':
                        gpu.instances.remove(by_key[(node, view['index'], action['gpu_instance_id'])])
                    else:
                        created[(node, view['index'], action['profile'], action['placement']['start'])] = \
                            gpu.create(action['profile'], action['placement']['start'])
        for served in plan['served']:
            request = by_name[served['pod']]
            device = served['devices'][0]
            gpu = gpus[(served['node'], device['gpu'])]
            if device['instance'] == 'new':
                instance = created[(served['node'], device['gpu'], device['profile'], device['start'])]
            else:
                instance = by_key[(served['node'], device['gpu'], device['instance'])]
            self.bind(request, gpu, instance, minute)


def percentile(values, share):
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--seed', default='gpufleet-demand-1', help='seed of the request stream (default %(default)s)')
    parser.add_argument('--hours', type=float, default=48.0, help='replayed hours (default %(default)s)')
    parser.add_argument('--gpus', type=int, default=4, help='GPUs per node, one node per model (default %(default)s)')
    parser.add_argument('--load', type=float, default=0.9, help='offered load, share of memory slices (default %(default)s)')
    parser.add_argument('--burst', type=int, default=24, help='small requests in each 09:00 and 14:00 burst (default %(default)s)')
    parser.add_argument('--patience', type=float, default=30.0, help='minutes a pod waits before it gives up (default %(default)s)')
    options = parser.parse_args(argv)
    if options.gpus < 1 or options.hours <= 0 or options.load <= 0 or options.patience < 0 or options.burst < 0:
        parser.error('--gpus, --hours and --load must be positive, --patience and --burst not negative')
    started = time.perf_counter()
    cpu_started = time.process_time()
    shapes = shape_profiles()
    fleet_slices = sum(Catalog.from_data(model_gpu(m).profiles).total_slices for m in MODELS) * options.gpus
    requests = request_stream(options, shapes, fleet_slices)
    layouts = shipped_layouts()
    print('Demand benchmark: seed %s, %g h, %d GPUs on each of %s (%d memory slices), offered load %.2f, '
          'bursts of %d at %s, patience %g min, %d requests'
          % (options.seed, options.hours, options.gpus, ', '.join(MODELS), fleet_slices, options.load, options.burst,
             ' and '.join('%02d:00' % h for h in BURST_HOURS), options.patience, len(requests)))
    columns = ('policy', 'requests', 'placed', 'mean pending', 'p95 pending', 'reconfig', 'evicted', 'stranded slice-h')
    header = '%-26s %8s %8s %13s %12s %9s %8s %17s' % columns
    print(header)
    print('-' * len(header))
    results = {}
    for policy in POLICIES:
        replay = Replay(policy, requests, options, layouts).run()
        waits = [r.placed_at - r.arrival for r in replay.requests if r.placed_at is not None]
        placed = len(waits)
        results[policy] = placed
        print('%-26s %8d %8d %10.1f min %8.1f min %9d %8d %17.1f' % (
            LABELS[policy], len(requests), placed, sum(waits) / placed if placed else 0.0, percentile(waits, 0.95),
            replay.reconfigurations, replay.evicted, replay.stranded_minutes / 60.0))
    best_other = max(results[p] for p in POLICIES if not p.startswith('planner'))
    print('(e)/(a) requests placed: %.2fx; (e) - best other policy: %+d'
          % (float(results['planner']) / results['static'] if results['static'] else float('inf'), results['planner'] - best_other))
    print('run time %.1f s wall, %.1f s CPU (one core)' % (time.perf_counter() - started, time.process_time() - cpu_started))
    return 0


if __name__ == '__main__':
    sys.exit(main())
