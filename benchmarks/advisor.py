# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Layout advisor benchmark: the advised catalog and schedule against the shipped catalog, replayed.

For each seed, a week of benchmarks/demand.py's request stream (its fleet: one node per model, ``--gpus`` GPUs
each) is recorded as the advisor reads it (offered devices, hourly averages), advised with
planning/_layout_advisor against the shipped ``all-balanced`` (the layout every GPU keeps in demand.py's static
policy), written as the mig-parted v1 catalog playbooks/mig_advise.yml writes, read back as the role reads it
(match_gpus, concrete_instances), and replayed with demand.py's Replay: the advised layouts at their hours through
the same in-place switch as demand.py's day/night policy (held instances kept, a node whose change destroys
instances cordoned for ``--run-seconds``). Printed per seed: requests placed by (a) static all-balanced, (b) the
shipped day/night schedule and the advice, on the week advised from (in sample) and on the next week (a new seed:
out of sample), then min/median/max over the seeds.

Run: PYTHONPATH=build/collections:simulator .venv/bin/python benchmarks/advisor.py [--seeds N] [--days D]
"""

from __future__ import absolute_import, division, print_function

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import demand  # noqa: E402  benchmarks/demand.py: the fair replay, imported, not forked

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_demand import demand_from_requests  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_advisor import ModelFleet, advise  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import validate_document  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_keys import concrete_instances  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import match_gpus  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog  # noqa: E402
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import model_gpu  # noqa: E402

import dataclasses  # noqa: E402
import yaml  # noqa: E402

SHIPPED_SCHEDULE = ((0, 'all-balanced'),)


def week(seed, days, gpus, load, burst):
    """demand.py's request stream of ``days`` days on its fleet with ``gpus`` GPUs a node."""
    shapes = demand.shape_profiles()
    fleet_slices = sum(Catalog.from_data(model_gpu(m).profiles).total_slices for m in demand.MODELS) * gpus
    return demand.request_stream(seed, days * 24.0, load, burst, shapes, fleet_slices)


def recorded(requests, days):
    """The requests as a recorded demand file ({days, requests}) of playbooks/mig_advise.yml."""
    return {'days': days, 'requests': [{'arrival': round(r.arrival, 3), 'hold': round(r.hold, 3),
                                        'resource': 'nvidia.com/mig-' + r.profile} for r in requests]}


def fleets(gpus):
    return [ModelFleet(m, model_gpu(m), 1, gpus) for m in demand.MODELS]


def shipped_configs():
    with open(demand.CATALOG_FILE) as handle:
        return validate_document(yaml.safe_load(handle))


def targets(document, gpus):
    """{layout name: {(model, index): {profile: count}}}: the advised catalog read back as the role reads it."""
    configs = validate_document(document)
    result = {}
    for name, entries in configs.items():
        result[name] = {}
        for model in demand.MODELS:
            gpu_list = [dataclasses.replace(model_gpu(model), index=i) for i in range(gpus)]
            for record in match_gpus(entries, gpu_list)['gpus']:
                result[name][(model, record['index'])] = concrete_instances(record['mig_devices'] or {}, model_gpu(model))
    return result


class AdvisedSchedule(demand.Replay):
    """The advised catalog: its layout ``advised-HH00`` from HH:00 every day, through the in-place switch (the one
    demand.py's DayNight runs: cordon where the change destroys instances, slices after ``run_seconds``)."""
    label = 'advised'

    def __init__(self, requests, options, seed, layouts, hours):
        super(AdvisedSchedule, self).__init__(requests, options, seed)
        self.layouts = layouts
        self.hours = hours

    def name_at(self, hour):
        earlier = [h for h in self.hours if h <= hour]
        return 'advised-%02d00' % (earlier[-1] if earlier else self.hours[-1])

    def start(self):
        for gpu in self.gpus:
            gpu.converge(self.layouts[self.name_at(0)][(gpu.model, gpu.index)])
        if len(self.hours) < 2:
            return
        for day in range(int(self.options.hours // 24) + 1):
            for hour in self.hours:
                self.at((day * 24 + hour) * 3600.0, demand.POLICY, self.switch, self.name_at(hour))

    def switch(self, name):
        self.runs += 1
        for node in self.nodes:
            trial = []
            for gpu in [g for g in self.gpus if g.node == node]:
                copy = demand.Gpu(gpu.node, gpu.index, gpu.model)
                copy.instances = [list(i) for i in gpu.instances]
                copy.next_id = gpu.next_id
                trial.append(copy)
            if any(a['action'] == 'destroy_gpu_instance' for c in trial for a in c.converge(self.layouts[name][(c.model, c.index)])):
                self.cordons += 1
                self.cordoned[node] = self.now + self.options.run_seconds
        self.at(self.now + self.options.run_seconds, demand.POLICY, self.apply, name)

    def apply(self, name):
        for gpu in self.gpus:
            self.reconfigured(gpu.converge(self.layouts[name][(gpu.model, gpu.index)]))
        self.schedule_waiting()


def replay_options(options, days):
    return argparse.Namespace(hours=days * 24.0, gpus=options.gpus, patience=options.patience, run_seconds=options.run_seconds,
                              dra_seconds=demand.DRA_SECONDS, nos_seconds=demand.NOS_SECONDS)


def score(requests, options, seed, advised):
    """Requests placed by (a) static all-balanced, (b) day/night and each advice ({label: (layouts, hours)})."""
    shipped = demand.shipped_layouts()
    replay = replay_options(options, options.days)
    result = {'static': demand.figures(demand.StaticLayout(requests, replay, seed, shipped['all-balanced']).run())['placed'],
              'daynight': demand.figures(demand.DayNight(requests, replay, seed, shipped).run())['placed'],
              'requests': len(requests)}
    for label, (layouts, hours) in advised.items():
        result[label] = demand.figures(AdvisedSchedule(requests, replay, seed, layouts, hours).run())['placed']
    return result


def advise_week(requests, options, max_switches):
    """(the advised catalog read back, switch hours) for a recorded week."""
    document = recorded(requests, options.days)
    advice = advise(demand_from_requests(document['requests'], options.days), fleets(options.gpus), shipped_configs(),
                    SHIPPED_SCHEDULE, max_switches, options.switch_seconds)
    return targets(advice.document(), options.gpus), advice.switch_hours()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--seeds', type=int, default=4, help='weeks advised (default %(default)s)')
    parser.add_argument('--seed', default='gpufleet-advisor', help='seed prefix, -1 .. -N appended (default %(default)s)')
    parser.add_argument('--days', type=int, default=7, help='days a week (default %(default)s)')
    parser.add_argument('--gpus', type=int, default=4, help='GPUs per node, one node per model (default %(default)s)')
    parser.add_argument('--load', type=float, default=0.9, help='offered load (default %(default)s)')
    parser.add_argument('--burst', type=int, default=24, help='small requests in each burst (default %(default)s)')
    parser.add_argument('--patience', type=float, default=30.0, help='minutes before a pod gives up (default %(default)s)')
    parser.add_argument('--run-seconds', type=float, default=demand.RUN_SECONDS, help='a switch (default %(default)s)')
    parser.add_argument('--max-switches', type=int, default=2, help='switches a day at most (default %(default)s)')
    parser.add_argument('--switch-seconds', type=float, default=demand.RUN_SECONDS,
                        help="a switch's cost the advisor charges (default %(default)s: a run)")
    parser.add_argument('--write-demand', metavar='PATH', help='write the first seed\'s week as a recorded demand file and stop')
    options = parser.parse_args(argv)
    if options.seeds < 1 or options.days < 1 or options.gpus < 1:
        parser.error('--seeds, --days and --gpus must be positive')
    if options.write_demand:
        with open(options.write_demand, 'w') as handle:
            yaml.safe_dump(recorded(week('%s-1' % options.seed, options.days, options.gpus, options.load, options.burst), options.days), handle)
        return 0
    started = time.perf_counter()
    print('Layout advisor benchmark: %d weeks of %d days, %d GPUs on each of %s, load %.2f, bursts of %d, patience %g min, '
          'switch %g s, at most %d switches a day; advised against static all-balanced'
          % (options.seeds, options.days, options.gpus, ', '.join(demand.MODELS), options.load, options.burst, options.patience,
             options.run_seconds, options.max_switches))
    labels = ['advised, 0 switches', 'advised, <= %d switches' % options.max_switches]
    rows = []
    for number in range(1, options.seeds + 1):
        seed = '%s-%d' % (options.seed, number)
        requests = week(seed, options.days, options.gpus, options.load, options.burst)
        advised = {labels[0]: advise_week(requests, options, 0), labels[1]: advise_week(requests, options, options.max_switches)}
        following = week('%s-next' % seed, options.days, options.gpus, options.load, options.burst)
        rows.append((score(requests, options, seed, advised), score(following, options, seed + '-next', advised)))
        print('  %s: %s; requests placed in sample / next week: static %d / %d, day/night %d / %d, %s'
              % (seed, '; '.join('%s at %s' % (label, ', '.join('%02d:00' % h for h in advised[label][1])) for label in labels),
                 rows[-1][0]['static'], rows[-1][1]['static'], rows[-1][0]['daynight'], rows[-1][1]['daynight'],
                 ', '.join('%s %d / %d' % (label, rows[-1][0][label], rows[-1][1][label]) for label in labels)))
    header = '%-36s %15s %15s %15s %15s' % ('min/median/max over weeks', 'placed', 'vs static', 'vs day/night', 'requests')
    for title, position in (('in sample (the week advised from)', 0), ('out of sample (the next week)', 1)):
        print(title)
        print(header)
        for label in ['static', 'daynight'] + labels:
            figures = [row[position] for row in rows]
            print('%-36s %15s %15s %15s %15s' % (
                {'static': '(a) static all-balanced', 'daynight': '(b) day/night'}.get(label, label),
                demand.spread([f[label] for f in figures]), demand.spread([float(f[label]) / f['static'] for f in figures], '%.3f'),
                demand.spread([float(f[label]) / f['daynight'] for f in figures], '%.3f'), demand.spread([f['requests'] for f in figures])))
    print('run time %.1f s' % (time.perf_counter() - started))
    return 0


if __name__ == '__main__':
    sys.exit(main())
