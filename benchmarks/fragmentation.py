# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fragmentation benchmark: stranded memory under first-fit, planned placement and scheduled repacking.

Replays one seeded stream of MIG requests per GPU model against a node of ``--gpus`` GPUs
with five strategies and prints what each leaves stranded. docs/fragmentation.md explains
the model and the figures.

Workload model (the same request stream and the same rules for every strategy):

- Requests arrive as a Poisson process sized so that the offered load is ``--load`` of the
  node's memory slices; each asks for one GPU instance of one shape (8-slice GPUs: 1g 40 %,
  1g with double memory 10 %, 2g 20 %, 3g 17 %, 4g 5 %, 7g 8 %; A30: 1g 50 %, 2g 35 %,
  4g 15 %) and holds it for an exponential time (mean ``--mean-hold`` minutes).
- Each request carries a random order of the node's GPUs, drawn with the stream: the GPU
  it lands on is the first in that order where it fits. This is the spread reported against
  NVIDIA's DRA driver (dynamic MIG puts a deployment's instances on GPUs seemingly at random,
  kubernetes-sigs/dra-driver-nvidia-gpu issue 932); ``--gpu-order packed`` uses GPU 0 first.
  Holding times are independent, so instances leave out of placement order (issue 933).
- Elastic pool (HAMi's dynamic-MIG design: reuse idle instances, reclaim them on TTL or
  placement pressure): a departing pod leaves its instance idle. A request first reuses an
  idle instance of its profile (first GPU in its order, lowest start). Otherwise a new
  instance is created where it fits around every existing one, allocated or idle. If it fits
  nowhere, idle instances are destroyed on the first GPU (in its order) where that makes it
  fit: the fewest that do, the longest idle first. An idle instance unused for ``--idle-ttl``
  minutes is destroyed. A request that still does not fit is not placed (no queue).
- Allocated instances (a pod holds them, its processes run on them) never move. Only idle,
  unallocated instances may.

Strategies (they differ only in where a new instance goes and in repacking):

- (a) first-fit: the driver's choice, as ``nvmlDeviceCreateGpuInstance`` without a placement
  does it (order observed on recent drivers, the simulator's AUTO_PLACEMENT tables: 1g at
  6, 4, 5, 0, 1, 2, 3; the first 2g and 3g at 4).
- (a') lowest-start first-fit: the lowest free placement in NVML's order (what a scheduler taking
  NVML's placements in order does, as NVIDIA's DRA driver's dynamic MIG does).
- (b) planner: ``plan_gpu`` of _mig_planner with the current instances kept and one more of
  the profile wanted; it places it where the largest placeable space is left.
- (c) planner + repack: (b), and every ``--repack-every`` minutes ``plan_gpu(repack=True)``
  on each GPU that has idle instances and stranded slices or fragmentation of at least
  ``--fragmentation-threshold``; the idle instances it moves are counted as moves (an idle
  instance keeps its idle time across a move).
- (d) demand placement: where the fleet demand planner (_demand_placement.room) puts a new
  instance: the start that takes the least room from bigger instances (per instance size,
  largest first, how many still fit), then the lowest.

Stranded slices and fragmentation are those of _mig_geometry.analyze (docs/fragmentation.md):
stranded slices integrated over time on every GPU of the node, fragmentation averaged over
GPU time ("mean frag"). A second run with ``--idle-ttl 0`` semantics (purely dynamic:
instances are destroyed when their pod leaves, so there is never an idle instance) is
printed below the main table: there (c) has nothing it may move.

Run: PYTHONPATH=build/collections .venv/bin/python benchmarks/fragmentation.py [--seed S] [--hours H] [--gpus N]
"""

from __future__ import absolute_import, division, print_function

import argparse
import dataclasses
import heapq
import itertools
import random
import re
import sys
import time

from ansible_collections.gpufleet.mig.tests.support.simulator import simulator_on_path

simulator_on_path()

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import (  # noqa: E402
    ComputeInstance,
    GpuInstance,
    Placement,
    Process,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import (  # noqa: E402
    Catalog,
    Occupancy,
    analyze,
    placeable_count,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import plan_gpu  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_placement import room  # noqa: E402
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import model_gpu  # noqa: E402
from gpufleet_nvml_sim.models import get_model  # noqa: E402

MODELS = ['A100-SXM4-80GB', 'H100-SXM5-80GB', 'H200', 'A30']
# (compute slices, memory slices) -> share of requests
MIX_8_SLICES = ((1, 1, 0.40), (1, 2, 0.10), (2, 2, 0.20), (3, 4, 0.17), (4, 4, 0.05), (7, 8, 0.08))
MIX_4_SLICES = ((1, 1, 0.50), (2, 2, 0.35), (4, 4, 0.15))
PLAIN_PROFILE = re.compile(r'^[0-9]+g\.[0-9]+gb$')
STRATEGIES = ('first-fit', 'lowest-start', 'planner', 'planner+repack', 'demand')
LABELS = {'first-fit': '(a) first-fit', 'lowest-start': "(a') lowest-start", 'planner': '(b) planner',
          'planner+repack': '(c) planner+repack', 'demand': '(d) demand placement'}


class Request(object):
    __slots__ = ('number', 'arrival', 'hold', 'profile', 'gpu_order')

    def __init__(self, number, arrival, hold, profile, gpu_order):
        self.number = number
        self.arrival = arrival
        self.hold = hold
        self.profile = profile
        self.gpu_order = gpu_order


class Instance(object):
    __slots__ = ('id', 'profile', 'start', 'allocated', 'idle_since')

    def __init__(self, instance_id, profile, start, allocated, idle_since=None):
        self.id = instance_id
        self.profile = profile
        self.start = start
        self.allocated = allocated
        self.idle_since = idle_since


class Gpu(object):
    """One simulated GPU: its instances and cached free-space figures."""

    def __init__(self, index, model_data, catalog):
        self.index = index
        self.model_data = model_data
        self.catalog = catalog
        self.instances = []
        self.next_id = 1
        self.refresh()

    def occupancy(self, leaving=()):
        return Occupancy.of(self.catalog, [(gi.profile, gi.start) for gi in self.instances if gi not in leaving])

    def refresh(self):
        self.figures = analyze(self.catalog, self.occupancy())

    def fits(self, profile, leaving=()):
        return placeable_count(self.catalog, self.occupancy(leaving), self.catalog.get(profile)) > 0

    def add(self, profile, start, allocated, idle_since=None):
        instance = Instance(self.next_id, profile, start, allocated, idle_since)
        self.next_id += 1
        self.instances.append(instance)
        self.refresh()
        return instance

    def remove(self, instance):
        self.instances.remove(instance)
        self.refresh()

    def plain(self):
        """The host model's GPU (_host_model.Gpu) for plan_gpu; an allocated instance runs its pod's process, so it is busy."""
        gpu_instances = []
        for gi in self.instances:
            profile = self.catalog.get(gi.profile)
            processes = (Process(100000 + gi.id, 1),) if gi.allocated else ()
            gpu_instances.append(GpuInstance(gi.id, gi.profile, Placement(gi.start, profile.memory_slices), compute_instances=(
                ComputeInstance(0, gi.profile, Placement(0, profile.compute_slices), processes=processes),)))
        return dataclasses.replace(self.model_data, index=self.index, gpu_instances=tuple(gpu_instances))

    def counts(self, extra=None):
        counts = {}
        for gi in self.instances:
            counts[gi.profile] = counts.get(gi.profile, 0) + 1
        if extra:
            counts[extra] = counts.get(extra, 0) + 1
        return counts


def request_profiles(catalog):
    """Profile name and share of each requested shape on this model (no +me or other suffixed profile)."""
    mix = MIX_8_SLICES if catalog.total_slices == 8 else MIX_4_SLICES
    shapes = []
    for compute, memory, share in mix:
        names = [p.name for p in catalog.profiles.values()
                 if p.compute_slices == compute and p.memory_slices == memory and PLAIN_PROFILE.match(p.name)]
        if len(names) != 1:
            raise SystemExit('model has %d non-+me profiles of %dg with %d memory slices' % (len(names), compute, memory))
        shapes.append((names[0], share))
    return shapes


def request_stream(catalog, options, seed):
    """The seeded requests of one model: the same list for every strategy."""
    rng = random.Random(seed)
    shapes = request_profiles(catalog)
    mean_slices = sum(catalog.get(name).memory_slices * share for name, share in shapes)
    rate = options.load * options.gpus * catalog.total_slices / (options.mean_hold * mean_slices)  # per minute
    names = [name for name, share in shapes]
    weights = [share for name, share in shapes]
    requests = []
    now = 0.0
    end = options.hours * 60.0
    while True:
        now += rng.expovariate(rate)
        if now >= end:
            return requests
        order = list(range(options.gpus))
        if options.gpu_order == 'spread':
            rng.shuffle(order)
        profile = rng.choices(names, weights)[0]
        requests.append(Request(len(requests), now, rng.expovariate(1.0 / options.mean_hold), profile, order))


def auto_start(gpu, profile_name, auto_order):
    """Where nvmlDeviceCreateGpuInstance without a placement puts it (the simulator's driver order)."""
    profile = gpu.catalog.get(profile_name)
    occupancy = gpu.occupancy()
    preferred = [s for s in auto_order.get(profile.memory_slices, ()) if s in profile.starts]
    for start in preferred + [s for s in profile.starts if s not in preferred]:
        if occupancy.can_place(profile, start):
            return start
    raise AssertionError('auto placement asked for a profile that does not fit')


def lowest_start(gpu, profile_name):
    """The lowest free placement in NVML's order (nvmlDeviceGetGpuInstancePossiblePlacements lists them by
    start): what a scheduler taking NVML's placements in order does, NVIDIA's DRA driver with dynamic MIG included."""
    profile = gpu.catalog.get(profile_name)
    occupancy = gpu.occupancy()
    for start in profile.starts:
        if occupancy.can_place(profile, start):
            return start
    raise AssertionError('lowest-start placement asked for a profile that does not fit')


def demand_start(gpu, profile_name):
    """Where the fleet demand planner (_demand_planner) puts one more instance: the start that takes the least
    room from bigger instances, then the lowest."""
    profile = gpu.catalog.get(profile_name)
    occupancy = gpu.occupancy()
    before = room(gpu.catalog, occupancy)
    best = None
    for start in profile.starts:
        if occupancy.can_place(profile, start):
            after = room(gpu.catalog, occupancy.with_instance(profile, start))
            candidate = (tuple(b - a for b, a in zip(before, after)), start)
            if best is None or candidate < best:
                best = candidate
    if best is None:
        raise AssertionError('demand placement asked for a profile that does not fit')
    return best[1]


_PLANNED = {}


def planner_start(gpu, profile_name):
    """Where plan_gpu puts one more instance, every current one kept.

    plan_gpu is a pure function of the GPU's profiles and instances, so its answer is
    remembered per (model, instances, profile): the same states recur all day long.
    """
    key = (gpu.model_data.name, tuple(sorted((gi.profile, gi.start, gi.allocated) for gi in gpu.instances)), profile_name)
    if key not in _PLANNED:
        plan = plan_gpu(gpu.plain(), gpu.counts(extra=profile_name))
        creates = [a for a in plan.actions if a['action'] == 'create_gpu_instance']
        if len(creates) != 1 or any(a['action'].startswith('destroy') for a in plan.actions):
            raise AssertionError('plan_gpu moved instances while adding one: %s' % plan.actions)
        _PLANNED[key] = creates[0]['placement']['start']
    return _PLANNED[key]


def evictable(gpu, profile_name):
    """The fewest idle instances whose removal lets ``profile_name`` fit (longest idle first), or None."""
    idle = sorted((gi for gi in gpu.instances if not gi.allocated), key=lambda gi: (gi.idle_since, gi.start))
    if not idle or not gpu.fits(profile_name, leaving=idle):
        return None
    for size in range(1, len(idle) + 1):
        for victims in itertools.combinations(idle, size):
            if gpu.fits(profile_name, leaving=victims):
                return list(victims)
    return None


class Run(object):
    """One model, one strategy, one workload: replays the stream and integrates the figures."""

    def __init__(self, model, strategy, requests, options, idle_ttl):
        self.model = model
        self.strategy = strategy
        self.requests = requests
        self.options = options
        self.idle_ttl = idle_ttl
        data = model_gpu(model)
        catalog = Catalog.from_data(data.profiles)
        self.gpus = [Gpu(index, data, catalog) for index in range(options.gpus)]
        self.auto_order = get_model(model)['auto_placement_order']
        self.largest = max((name for name, share in request_profiles(catalog)), key=lambda n: catalog.get(n).rank())
        self.stranded_area = 0.0
        self.fragmentation_area = 0.0
        self.free_area = 0.0
        self.idle_area = 0.0
        self.clock = 0.0
        self.placed = 0
        self.largest_requests = 0
        self.largest_placed = 0
        self.reused = 0
        self.evicted = 0
        self.moves = 0
        self.repacks = 0
        self.events = []
        self.sequence = itertools.count()

    def schedule(self, when, kind, payload):
        heapq.heappush(self.events, (when, next(self.sequence), kind, payload))

    def advance(self, when):
        elapsed = when - self.clock
        if elapsed > 0:
            for gpu in self.gpus:
                self.stranded_area += gpu.figures['stranded_slices'] * elapsed
                self.fragmentation_area += gpu.figures['fragmentation'] * elapsed
                self.free_area += gpu.figures['free_slices'] * elapsed
                self.idle_area += sum(gpu.catalog.get(gi.profile).memory_slices for gi in gpu.instances if not gi.allocated) * elapsed
            self.clock = when

    def run(self):
        for request in self.requests:
            self.schedule(request.arrival, 'arrive', request)
        end = self.options.hours * 60.0
        if self.strategy == 'planner+repack':
            tick = self.options.repack_every
            while tick < end:
                self.schedule(tick, 'repack', None)
                tick += self.options.repack_every
        while self.events and self.events[0][0] < end:
            when, dummy, kind, payload = heapq.heappop(self.events)
            self.advance(when)
            getattr(self, 'on_' + kind)(when, payload)
        self.advance(end)
        return self

    def place_new(self, gpu, profile):
        if self.strategy == 'first-fit':
            start = auto_start(gpu, profile, self.auto_order)
        elif self.strategy == 'lowest-start':
            start = lowest_start(gpu, profile)
        elif self.strategy == 'demand':
            start = demand_start(gpu, profile)
        else:
            start = planner_start(gpu, profile)
        return gpu.add(profile, start, allocated=True)

    def on_arrive(self, when, request):
        is_largest = request.profile == self.largest
        self.largest_requests += is_largest
        instance = gpu = None
        for index in request.gpu_order:
            candidate = self.gpus[index]
            idle = [gi for gi in candidate.instances if not gi.allocated and gi.profile == request.profile]
            if idle:
                gpu, instance = candidate, min(idle, key=lambda gi: gi.start)
                instance.allocated = True
                instance.idle_since = None
                candidate.refresh()
                self.reused += 1
                break
        if instance is None:
            for index in request.gpu_order:
                if self.gpus[index].fits(request.profile):
                    gpu = self.gpus[index]
                    instance = self.place_new(gpu, request.profile)
                    break
        if instance is None:
            for index in request.gpu_order:
                victims = evictable(self.gpus[index], request.profile)
                if victims:
                    gpu = self.gpus[index]
                    for victim in victims:
                        gpu.remove(victim)
                    self.evicted += len(victims)
                    instance = self.place_new(gpu, request.profile)
                    break
        if instance is None:
            return
        self.placed += 1
        self.largest_placed += is_largest
        self.schedule(when + request.hold, 'depart', (gpu, instance))

    def on_depart(self, when, payload):
        gpu, instance = payload
        if self.idle_ttl <= 0:
            gpu.remove(instance)
            return
        instance.allocated = False
        instance.idle_since = when
        gpu.refresh()
        self.schedule(when + self.idle_ttl, 'expire', (gpu, instance, when))

    def on_expire(self, when, payload):
        gpu, instance, idle_since = payload
        if instance in gpu.instances and not instance.allocated and instance.idle_since == idle_since:
            gpu.remove(instance)

    def on_repack(self, when, payload):
        for gpu in self.gpus:
            idle = [gi for gi in gpu.instances if not gi.allocated]
            figures = gpu.figures
            if not idle or (figures['stranded_slices'] == 0 and figures['fragmentation'] < self.options.fragmentation_threshold):
                continue
            plan = plan_gpu(gpu.plain(), gpu.counts(), repack=True)
            if not plan.changed:
                continue
            self.repacks += 1
            by_id = dict((gi.id, gi) for gi in gpu.instances)
            moved = {}
            for action in plan.actions:
                if action['action'] == 'destroy_gpu_instance':
                    victim = by_id[action['gpu_instance_id']]
                    if victim.allocated:
                        raise AssertionError('repack destroyed an allocated instance')
                    moved.setdefault(victim.profile, []).append(victim.idle_since)
                    gpu.instances.remove(victim)
            for action in plan.actions:
                if action['action'] == 'create_gpu_instance':
                    gpu.add(action['profile'], action['placement']['start'], allocated=False,
                            idle_since=moved[action['profile']].pop(0))
                    self.moves += 1
            gpu.refresh()
            # expiry events hold the old instance object: re-arm them for the moved ones
            for gi in gpu.instances:
                if not gi.allocated and gi.id not in by_id:
                    self.schedule(gi.idle_since + self.idle_ttl, 'expire', (gpu, gi, gi.idle_since))


def share(part, whole):
    return 100.0 * part / whole if whole else float('nan')


class Sum(object):
    """Figures of one model and strategy added up over the independent days."""

    FIELDS = ('requests', 'placed', 'largest_requests', 'largest_placed', 'stranded_area', 'fragmentation_area', 'free_area',
              'idle_area',
              'moves', 'repacks', 'evicted', 'reused')

    def __init__(self):
        for field in self.FIELDS:
            setattr(self, field, 0)

    def add(self, run):
        for field in self.FIELDS:
            value = len(run.requests) if field == 'requests' else getattr(run, field)
            setattr(self, field, getattr(self, field) + value)


def simulate(options, idle_ttl):
    """{model: {strategy: Sum}} for one workload, over ``options.days`` independent request streams."""
    results = {}
    for model in MODELS:
        catalog = Catalog.from_data(model_gpu(model).profiles)
        results[model] = dict((strategy, Sum()) for strategy in STRATEGIES)
        for day in range(options.days):
            requests = request_stream(catalog, options, '%s/%s/%d' % (options.seed, model, day))
            for strategy in STRATEGIES:
                results[model][strategy].add(Run(model, strategy, requests, options, idle_ttl).run())
    return results


def print_table(results, options):
    header = '%-16s %-20s %8s %8s %9s %15s %10s %12s %8s' % ('model', 'strategy', 'requests', 'placed', 'largest',
                                                             'stranded slice-h', 'mean frag', 'idle slice-h', 'moves')
    gpu_minutes = options.days * options.hours * 60.0 * options.gpus
    print(header)
    print('-' * len(header))
    totals = dict((s, {'requests': 0, 'placed': 0, 'largest': 0, 'largest_placed': 0, 'stranded': 0.0, 'idle': 0.0,
                       'fragmentation': 0.0, 'moves': 0}) for s in STRATEGIES)
    for model, runs in results.items():
        for strategy in STRATEGIES:
            run = runs[strategy]
            requests = run.requests
            print('%-16s %-20s %8d %7.1f%% %8.1f%% %15.1f %10.3f %12.1f %8s' % (
                model if strategy == STRATEGIES[0] else '', LABELS[strategy], requests, share(run.placed, requests),
                share(run.largest_placed, run.largest_requests), run.stranded_area / 60.0,
                run.fragmentation_area / gpu_minutes, run.idle_area / 60.0,
                run.moves if strategy == 'planner+repack' else '-'))
            total = totals[strategy]
            total['requests'] += requests
            total['placed'] += run.placed
            total['largest'] += run.largest_requests
            total['largest_placed'] += run.largest_placed
            total['stranded'] += run.stranded_area / 60.0
            total['fragmentation'] += run.fragmentation_area / gpu_minutes / len(results)
            total['idle'] += run.idle_area / 60.0
            total['moves'] += run.moves
    for strategy in STRATEGIES:
        total = totals[strategy]
        print('%-16s %-20s %8d %7.1f%% %8.1f%% %15.1f %10.3f %12.1f %8s' % (
            'total' if strategy == STRATEGIES[0] else '', LABELS[strategy], total['requests'],
            share(total['placed'], total['requests']), share(total['largest_placed'], total['largest']), total['stranded'],
            total['fragmentation'], total['idle'], total['moves'] if strategy == 'planner+repack' else '-'))
    return totals


def format_ratio(part, whole):
    return '%.2f' % (part / whole) if whole else 'n/a (none stranded)'


def stranded_ratios(results, totals, numerator, baseline='first-fit'):
    parts = []
    for model, runs in results.items():
        parts.append('%s %s' % (model, format_ratio(runs[numerator].stranded_area, runs[baseline].stranded_area)))
    parts.append('total %s' % format_ratio(totals[numerator]['stranded'], totals[baseline]['stranded']))
    return ', '.join(parts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--seed', default='gpufleet-1', help='seed of the request streams (default %(default)s)')
    parser.add_argument('--hours', type=float, default=24.0, help='simulated hours (default %(default)s)')
    parser.add_argument('--gpus', type=int, default=8, help='GPUs per node, one node per model (default %(default)s)')
    parser.add_argument('--days', type=int, default=10,
                        help='independent request streams of --hours each, added up (default %(default)s)')
    parser.add_argument('--load', type=float, default=0.85, help='offered load, share of memory slices (default %(default)s)')
    parser.add_argument('--mean-hold', type=float, default=90.0, help='mean minutes a pod holds its instance (default %(default)s)')
    parser.add_argument('--idle-ttl', type=float, default=60.0, help='minutes an idle instance is kept (default %(default)s)')
    parser.add_argument('--repack-every', type=float, default=60.0, help='minutes between repacks of (c) (default %(default)s)')
    parser.add_argument('--fragmentation-threshold', type=float, default=0.5,
                        help='repack a GPU with idle instances at this fragmentation, or any stranded slice (default %(default)s)')
    parser.add_argument('--gpu-order', choices=('spread', 'packed'), default='spread',
                        help='GPU a request tries first: random per request (spread) or GPU 0 (packed)')
    options = parser.parse_args(argv)
    if options.days < 1 or options.gpus < 1 or options.hours <= 0 or not 0 < options.load or options.mean_hold <= 0 or options.repack_every <= 0:
        parser.error('--days, --gpus, --hours, --load, --mean-hold and --repack-every must be positive')
    started = time.perf_counter()
    cpu_started = time.process_time()
    print('Fragmentation benchmark: seed %s, %d x %g h, %d GPUs per model, offered load %.2f, mean hold %g min, GPU order %s'
          % (options.seed, options.days, options.hours, options.gpus, options.load, options.mean_hold, options.gpu_order))
    print('Elastic pool: idle instances kept %g min for reuse; (c) repacks every %g min where idle instances exist and '
          'stranded > 0 or fragmentation >= %.2f' % (options.idle_ttl, options.repack_every, options.fragmentation_threshold))
    pool = simulate(options, options.idle_ttl)
    totals = print_table(pool, options)
    print('stranded slice-hours (c)/(a): %s' % stranded_ratios(pool, totals, 'planner+repack'))
    print('stranded slice-hours (b)/(a): %s' % stranded_ratios(pool, totals, 'planner'))
    print("stranded slice-hours (c)/(a'): %s" % stranded_ratios(pool, totals, 'planner+repack', 'lowest-start'))
    print("stranded slice-hours (b)/(a'): %s" % stranded_ratios(pool, totals, 'planner', 'lowest-start'))
    print("stranded slice-hours (d)/(a'): %s" % stranded_ratios(pool, totals, 'demand', 'lowest-start'))
    print()
    print('Purely dynamic (instance destroyed when its pod leaves: nothing idle, so (c) has nothing it may move):')
    dynamic = simulate(options, 0)
    dynamic_totals = print_table(dynamic, options)
    print('stranded slice-hours (c)/(a): %s' % stranded_ratios(dynamic, dynamic_totals, 'planner+repack'))
    print("stranded slice-hours (b)/(a'): %s" % stranded_ratios(dynamic, dynamic_totals, 'planner', 'lowest-start'))
    print("stranded slice-hours (d)/(a'): %s" % stranded_ratios(dynamic, dynamic_totals, 'demand', 'lowest-start'))
    print('run time %.1f s wall, %.1f s CPU (one core)' % (time.perf_counter() - started, time.process_time() - cpu_started))
    return 0


if __name__ == '__main__':
    sys.exit(main())
