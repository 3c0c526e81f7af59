# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Layout advisor benchmark: the advice on demand shapes where switching matters, judged by two replays.

For each shape and seed, ``--days`` days of requests on benchmarks/demand.py's fleet (one node per model, ``--gpus``
GPUs each) are recorded as playbooks/mig_advise.yml reads a demand file and advised with planning/_layout_advisor
against the shipped ``all-balanced``, a switch being a rollout of every node at once (``--run-seconds``, as demand.py
switches). Shapes:

- ``mix``: demand.py's own stream (its day and night mixes, bursts at 09:00 and 14:00);
- ``daynight``: 1g pods 08:00-19:00, 7g pods 20:00-07:00, each gone by the end of its block (a strong pattern);
- ``overlap``: 1g pods 07:00-21:00 and 7g pods 17:00-11:00 held four hours on average: no idle gap to switch in;
- ``flat``: demand.py's day mix at one rate all day (nothing to switch for);
- ``shared``: demand.py's day mix on the A100-80GB and H100 only, whose 1g is the same name (nvidia.com/mig-1g.10gb);
- ``unhostable``: demand.py's mix with one request in six asking for a GH200's 1g.12gb, which no GPU here has.

Printed per seed: the requests placed by the current catalog, the best single layout and the advised schedule in
the advisor's own replay (planning/_advice_replay, the figures mig_advise.yml prints) and in demand.py's replay
(kube-scheduler, placements, cordons) of the written catalogs read back as the role reads them; then per shape
min/median/max over the seeds of advised / best single in both. Goal: advised never below best single.
With ``--scale``, the time one advice takes for 1000 hosts x 8 GPUs over 28 days of flat demand.

Run: PYTHONPATH=build/collections:simulator .venv/bin/python benchmarks/advisor.py [--seeds N] [--days D] [--scale]
"""

from __future__ import absolute_import, division, print_function

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# benchmarks/demand.py's fair replay, imported, not forked
from demand_baselines import DRA_SECONDS, NOS_SECONDS, StaticLayout  # noqa: E402
from demand_replay import POLICY, Gpu, Replay, figures, spread  # noqa: E402
from demand_shipped import RUN_SECONDS  # noqa: E402
from demand_workload import (  # noqa: E402
    CATALOG_FILE, DAY_MIX, MEAN_HOLD, MODELS, Request, fleet_slices, request_stream, shape_profiles, shipped_layouts)

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_demand import demand_from_requests  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_advisor import ModelFleet, advise  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import validate_document  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_keys import concrete_instances  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import match_gpus  # noqa: E402
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import model_gpu  # noqa: E402

import dataclasses  # noqa: E402
import yaml  # noqa: E402

SHIPPED_SCHEDULE = ((0, 'all-balanced'),)


def week(seed, days, gpus, load, burst):
    """demand.py's request stream of ``days`` days on its fleet with ``gpus`` GPUs a node."""
    return request_stream(seed, days * 24.0, load, burst, shape_profiles(), fleet_slices(gpus))


def recorded(requests, days):
    """The requests as a recorded demand file ({days, requests}) of playbooks/mig_advise.yml."""
    return {'days': days, 'requests': [{'arrival': round(r.arrival, 3), 'hold': round(r.hold, 3),
                                        'resource': 'nvidia.com/mig-' + r.profile} for r in requests]}


def fleets(gpus):
    return [ModelFleet(m, model_gpu(m), 1, gpus) for m in MODELS]


def shipped_configs():
    with open(CATALOG_FILE) as handle:
        return validate_document(yaml.safe_load(handle))


def targets(document, gpus):
    """{layout name: {(model, index): {profile: count}}}: the advised catalog read back as the role reads it."""
    configs = validate_document(document)
    result = {}
    for name, entries in configs.items():
        result[name] = {}
        for model in MODELS:
            gpu_list = [dataclasses.replace(model_gpu(model), index=i) for i in range(gpus)]
            for record in match_gpus(entries, gpu_list)['gpus']:
                result[name][(model, record['index'])] = concrete_instances(record['mig_devices'] or {}, model_gpu(model))
    return result


class AdvisedSchedule(Replay):
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
                self.at((day * 24 + hour) * 3600.0, POLICY, self.switch, self.name_at(hour))

    def switch(self, name):
        self.runs += 1
        for node in self.nodes:
            trial = []
            for gpu in [g for g in self.gpus if g.node == node]:
                copy = Gpu(gpu.node, gpu.index, gpu.model)
                copy.instances = [list(i) for i in gpu.instances]
                copy.next_id = gpu.next_id
                trial.append(copy)
            if any(a['action'] == 'destroy_gpu_instance' for c in trial for a in c.converge(self.layouts[name][(c.model, c.index)])):
                self.cordons += 1
                self.cordoned[node] = self.now + self.options.run_seconds
        self.at(self.now + self.options.run_seconds, POLICY, self.apply, name)

    def apply(self, name):
        for gpu in self.gpus:
            self.reconfigured(gpu.converge(self.layouts[name][(gpu.model, gpu.index)]))
        self.schedule_waiting()


def replay_options(options, days):
    return argparse.Namespace(hours=days * 24.0, gpus=options.gpus, patience=options.patience, run_seconds=options.run_seconds,
                              dra_seconds=DRA_SECONDS, nos_seconds=NOS_SECONDS)


SHAPES = ('mix', 'daynight', 'overlap', 'flat', 'shared', 'unhostable')
UNHOSTABLE = '1g.12gb'   # a GH200's 1g: no model of demand.py's fleet has it


def poisson(rng, days, load, slices, mix_at, models=MODELS, hold=None):
    """Request objects: Poisson arrivals sized to ``load`` of the fleet's ``slices`` memory slices, the shape mix of each
    hour ``mix_at(hour)`` (((compute, memory), share), ...) or None for a quiet hour; ``hold(rng, shape, arrival)``
    seconds (default: demand.py's mean holds, exponential)."""
    shapes = shape_profiles()
    busy_hours = [h for h in range(24) if mix_at(h)]
    mean = [sum(m * share for (c, m), share in mix_at(h)) * sum(MEAN_HOLD[c] * share for (c, m), share in mix_at(h))
            for h in busy_hours]
    rate = load * slices / (sum(mean) / len(mean)) * 24.0 / len(busy_hours)   # per minute, while busy
    requests, now, end = [], 0.0, days * 24 * 60.0
    while True:
        now += rng.expovariate(rate)
        if now >= end:
            break
        mix = mix_at(int(now // 60) % 24)
        if not mix:
            continue
        compute, memory = rng.choices([shape for shape, share in mix], [share for shape, share in mix])[0]
        model = rng.choice(models)
        seconds = hold(rng, (compute, memory), now * 60.0) if hold else rng.expovariate(1.0 / MEAN_HOLD[compute]) * 60.0
        requests.append(Request(len(requests), now * 60.0, seconds, shapes[model][(compute, memory)]))
    return requests


def shape_stream(shape, seed, options):
    """The requests of ``shape`` (SHAPES) for one seed."""
    if shape == 'mix':
        return week(seed, options.days, options.gpus, options.load, options.burst)
    rng = random.Random('%s/%s' % (seed, shape))
    slices = fleet_slices(options.gpus)
    day_mix = tuple(((c, m), share) for c, m, share in DAY_MIX)
    if shape == 'daynight':
        def block_end(arrival):
            hour = int(arrival // 3600)
            return (hour - hour % 24 + (19 if 8 <= hour % 24 < 19 else 7 + (24 if hour % 24 >= 20 else 0))) * 3600.0

        return poisson(rng, options.days, options.load, slices,
                       lambda h: (((1, 1), 1.0),) if 8 <= h < 19 else (((7, 8), 1.0),) if h >= 20 or h < 7 else None,
                       hold=lambda r, s, arrival: min(r.expovariate(1.0 / MEAN_HOLD[s[0]]) * 60.0, block_end(arrival) - arrival))
    if shape == 'overlap':
        return poisson(rng, options.days, options.load, slices,
                       lambda h: (((1, 1), 0.5), ((7, 8), 0.5)) if 17 <= h < 21 or 7 <= h < 11 else
                       (((1, 1), 1.0),) if 11 <= h < 17 else (((7, 8), 1.0),),
                       hold=lambda r, s, arrival: r.expovariate(1.0 / (40.0 if s[0] == 1 else 240.0)) * 60.0)
    if shape == 'flat':
        return poisson(rng, options.days, options.load, slices, lambda h: day_mix)
    if shape == 'shared':
        return poisson(rng, options.days, options.load, slices / 2, lambda h: day_mix, models=('A100-SXM4-80GB', 'H100-SXM5-80GB'))
    if shape == 'unhostable':
        requests = week(seed, options.days, options.gpus, options.load, options.burst)
        for request in requests[::6]:
            request.profile = UNHOSTABLE
        return requests
    raise SystemExit('unknown shape %s' % shape)


def judged(requests, options, seed):
    """The advice on ``requests``: (its replay's placed requests {current, single, schedule}, its choice, and demand.py's
    replay of static all-balanced, of the best single layout's catalog and of the advised catalog)."""
    document = recorded(requests, options.days)
    wanted = demand_from_requests(document['requests'], options.days)
    common = dict(switch_seconds=options.run_seconds, serial=len(MODELS), forks=len(MODELS),
                  patience_minutes=options.patience)
    single = advise(wanted, fleets(options.gpus), shipped_configs(), SHIPPED_SCHEDULE, 0, **common)
    advice = advise(wanted, fleets(options.gpus), shipped_configs(), SHIPPED_SCHEDULE, options.max_switches, **common)
    replay = replay_options(options, options.days)
    others = {}
    for label, chosen in (('single', single), ('advised', advice)):
        others[label] = figures(AdvisedSchedule(requests, replay, seed, targets(chosen.document(), options.gpus),
                                                chosen.switch_hours()).run())['placed']
    others['current'] = figures(StaticLayout(requests, replay, seed, shipped_layouts()['all-balanced']).run())['placed']
    own = dict((label, advice.outcomes[label].placed()) for label in ('current', 'single', 'schedule'))
    own['advised'] = advice.outcomes[advice.choice].placed()
    return own, advice, others


def scale(options):
    """Seconds one advice takes for 1000 hosts x 8 GPUs (500 A100-80GB hosts, 500 H100) over 28 days of flat demand."""
    fleet = [ModelFleet(m, model_gpu(m), 500, 8) for m in ('A100-SXM4-80GB', 'H100-SXM5-80GB')]
    shapes = shape_profiles()
    rng = random.Random('scale')
    hourly = {}
    for model in ('A100-SXM4-80GB', 'H100-SXM5-80GB'):
        for compute, memory, share in DAY_MIX:
            resource = 'nvidia.com/mig-' + shapes[model][(compute, memory)]
            rows = hourly.setdefault(resource, [[0.0] * 24 for dummy in range(28)])
            for day in range(28):
                for hour in range(24):
                    rows[day][hour] += 500 * 8 * 7 * 0.9 * share / memory / 2 * rng.uniform(0.8, 1.2)
    from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_demand import Demand  # noqa: E402
    wanted = Demand(28, dict((r, tuple(tuple(row) for row in rows)) for r, rows in hourly.items()),
                    dict((r, 1.0) for r in hourly))
    started, cpu = time.perf_counter(), time.process_time()
    advice = advise(wanted, fleet, shipped_configs(), SHIPPED_SCHEDULE, options.max_switches, options.run_seconds, 10, 10)
    return time.perf_counter() - started, time.process_time() - cpu, advice


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--seeds', type=int, default=3, help='seeds per shape (default %(default)s)')
    parser.add_argument('--seed', default='gpufleet-advisor', help='seed prefix, -1 .. -N appended (default %(default)s)')
    parser.add_argument('--days', type=int, default=7, help='days recorded (default %(default)s)')
    parser.add_argument('--gpus', type=int, default=4, help='GPUs per node, one node per model (default %(default)s)')
    parser.add_argument('--load', type=float, default=0.9, help='offered load (default %(default)s)')
    parser.add_argument('--burst', type=int, default=24, help='small requests in each burst of the mix (default %(default)s)')
    parser.add_argument('--patience', type=float, default=30.0, help='minutes before a pod gives up (default %(default)s)')
    parser.add_argument('--run-seconds', type=float, default=RUN_SECONDS, help='a switch (default %(default)s)')
    parser.add_argument('--max-switches', type=int, default=2, help='switches a day at most (default %(default)s)')
    parser.add_argument('--shapes', default=','.join(SHAPES), help='shapes, comma-separated (default %(default)s)')
    parser.add_argument('--scale', action='store_true', help='time one advice for 1000 hosts x 8 GPUs x 28 days and stop')
    parser.add_argument('--write-demand', metavar='PATH', help='write the first seed\'s mix as a recorded demand file and stop')
    options = parser.parse_args(argv)
    if options.seeds < 1 or options.days < 1 or options.gpus < 1:
        parser.error('--seeds, --days and --gpus must be positive')
    if options.write_demand:
        with open(options.write_demand, 'w') as handle:
            yaml.safe_dump(recorded(week('%s-1' % options.seed, options.days, options.gpus, options.load, options.burst), options.days), handle)
        return 0
    if options.scale:
        seconds, cpu, advice = scale(options)
        print('1000 hosts x 8 GPUs x 28 days: advised in %.1f s (%.1f s CPU; %d requests, a %.1f %% sample, replayed three '
              'times); %s' % (seconds, cpu, advice.judgement.replayed, advice.judgement.host_share * 100, advice.summary()[-1]))
        return 0
    started = time.perf_counter()
    print('Layout advisor benchmark: %d seeds of %d days per shape, %d GPUs on each of %s, load %.2f, patience %g min, '
          'switch %g s, at most %d switches a day; current catalog: static all-balanced'
          % (options.seeds, options.days, options.gpus, ', '.join(MODELS), options.load, options.patience,
             options.run_seconds, options.max_switches))
    summary = []
    for shape in options.shapes.split(','):
        rows = []
        for number in range(1, options.seeds + 1):
            seed = '%s-%d' % (options.seed, number)
            requests = shape_stream(shape, seed, options)
            own, advice, others = judged(requests, options, seed)
            rows.append((own, others))
            print('  %-10s %s: %d requests; advisor\'s replay current/single/schedule %d/%d/%d, advised %s (%s); '
                  'demand.py replay current/single/advised %d/%d/%d'
                  % (shape, seed, len(requests), own['current'], own['single'], own['schedule'], advice.choice,
                     ', '.join('%02d:00' % h for h in advice.switch_hours()), others['current'], others['single'], others['advised']))
            if advice.tally.served() < advice.tally.read:
                print('    %s' % '; '.join(advice.tally.lines()))
        summary.append((shape, rows))
    print('%-11s %24s %24s %24s %24s' % ('shape', 'advisor: advised/single', 'advisor: advised/current',
                                         'demand.py: advised/single', 'demand.py: advised/current'))
    for shape, rows in summary:
        print('%-11s %24s %24s %24s %24s' % (
            shape, spread([float(o['advised']) / o['single'] for o, d in rows], '%.3f'),
            spread([float(o['advised']) / max(1, o['current']) for o, d in rows], '%.3f'),
            spread([float(d['advised']) / d['single'] for o, d in rows], '%.3f'),
            spread([float(d['advised']) / max(1, d['current']) for o, d in rows], '%.3f')))
    print('run time %.1f s' % (time.perf_counter() - started))
    return 0


if __name__ == '__main__':
    sys.exit(main())
