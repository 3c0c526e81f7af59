# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Demand benchmark: seeded streams of MIG pod requests on a mixed fleet, replayed against each policy as its real system runs.

docs/demand.md explains the model and the figures it printed. This script compares the policies and prints the
tables; the model lives beside it, each part reusable (a layout advisor builds on them):

- benchmarks/demand_workload.py: the fleet (one node per model) and the seeded request stream (:func:`request_stream`),
  the same for every policy of a seed, and the shipped catalog's layouts;
- benchmarks/demand_replay.py: the replay engine, kube-scheduler binding the pods (:class:`Replay`: subclass it, one
  subclass per policy) and the figures of one replay (:func:`figures`);
- benchmarks/demand_baselines.py: (a) a static layout, (b) the day/night schedule, (c) NVIDIA's DRA driver with
  dynamic MIG, (d) a nos-inspired partitioner, and the (z) ceilings: the DRA model with MIG's placement rules lifted,
  what packing alone could add;
- benchmarks/demand_shipped.py: (e) this collection as it ships, the event source's full path, (e+r) with its release
  trigger, (e+f) with its create-only fast path (what the shipped rulebook runs);
- benchmarks/demand_gated.py: (g) the gated rows, MIG pods held back by a scheduling gate and decided one at a time in
  queue order by the collection's planning/_gated_queue (serve an idle instance, else create, else destroy idle ones),
  at the fast path's latencies, with the release rule, the release wait and the source's reconciliation; as shipped
  and with one option changed each (see that file).

Run: PYTHONPATH=build/collections:simulator .venv/bin/python benchmarks/demand.py [--seeds N] [--hours H]
"""

from __future__ import absolute_import, division, print_function

import argparse
import statistics
import sys
import time

import demand_gated
from demand_baselines import (
    DRA_SECONDS,
    NOS_SECONDS,
    DayNight,
    DraDynamicMig,
    GpuPooledCeiling,
    NodePooledCeiling,
    NosInspired,
    StaticLayout,
)
from demand_replay import MAX_DELAY_SECONDS, QUIET_SECONDS, figures, spread
from demand_shipped import (
    FAST_CREATE_SECONDS,
    FAST_PLUGIN_SECONDS,
    FAST_QUIET_SECONDS,
    FAST_RUN_SECONDS,
    NODE_STATUS_SECONDS,
    READ_SECONDS,
    RUN_SECONDS,
    ReleaseIdleDemand,
    ShippedDemand,
    ShippedDemandReleaseTrigger,
    ShippedFastPath,
)
from demand_workload import BURST_HOURS, MODELS, fleet_slices, request_stream, shape_profiles, shipped_layouts


def policies(layouts, release_idle=False, options=None):
    """(label, factory(requests, options, seed)) of each policy compared, in print order; the release_idle variant
    (not the shipped policy, and three times the CPU of the others together) only when asked; the gated rows
    (benchmarks/demand_gated.py) when ``options`` are given; the ceilings last."""
    return [
        (StaticLayout.label, lambda r, o, s: StaticLayout(r, o, s, layouts['all-balanced'])),
        (DayNight.label, lambda r, o, s: DayNight(r, o, s, layouts)),
        (DraDynamicMig.label, DraDynamicMig),
        (NosInspired.label, NosInspired),
        (ShippedDemand.label, ShippedDemand),
        (ShippedDemandReleaseTrigger.label, ShippedDemandReleaseTrigger),
        (ShippedFastPath.label, ShippedFastPath),
    ] + ([(ReleaseIdleDemand.label, ReleaseIdleDemand)] if release_idle else []) + \
        (demand_gated.policies(options) if options is not None else []) + \
        [(GpuPooledCeiling.label, GpuPooledCeiling), (NodePooledCeiling.label, NodePooledCeiling)]


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
    slices = fleet_slices(options.gpus)
    layouts = shipped_layouts()
    seeds = ['%s-%d' % (options.seed, n) for n in range(1, options.seeds + 1)]
    print('Demand benchmark: seeds %s, %g h each, %d GPUs on each of %s (%d memory slices), offered load %.2f, '
          'bursts of %d at %s, patience %g min'
          % (', '.join(seeds), options.hours, options.gpus, ', '.join(MODELS), slices, options.load, options.burst,
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
        requests = request_stream(seed, options.hours, options.load, options.burst, shapes, slices)
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
    demand_gated.print_served([StaticLayout.label, DraDynamicMig.label, ShippedFastPath.label] + gated +
                              [GpuPooledCeiling.label, NodePooledCeiling.label], results, spread)
    for label in gated:
        demand_gated.goal(label, results)
    print('run time %.1f s wall, %.1f s CPU (one core)' % (time.perf_counter() - started, time.process_time() - cpu_started))
    return 0


if __name__ == '__main__':
    sys.exit(main())
