# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The demand benchmark's fleet and workload (benchmarks/demand.py): the seeded request stream every policy replays.

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
"""

from __future__ import absolute_import, division, print_function

import os
import random
import re

from ansible_collections.gpufleet.mig.tests.support.simulator import simulator_on_path

simulator_on_path()

import yaml  # noqa: E402

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import validate_document  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_keys import concrete_instances  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import match_gpus  # noqa: E402
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog  # noqa: E402
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
MINUTE = 60.0


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


def fleet_slices(gpus):
    """The memory slices of the fleet: ``gpus`` GPUs of each model."""
    return sum(Catalog.from_data(model_gpu(m).profiles).total_slices for m in MODELS) * gpus


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
