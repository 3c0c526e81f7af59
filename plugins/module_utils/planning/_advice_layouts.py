# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The layout advisor's candidates (_layout_advisor builds its schedules from them and judges them).

Pure Python: no NVML, no Ansible. For one GPU model (:class:`ModelFleet`):

- the layouts one GPU can hold (:func:`gpu_layouts`): every fitting, maximal mix of the model's plain profiles with
  demand, checked by _mig_geometry.best_rearrangement (placements, max counts, media rules), and a whole GPU without
  MIG where ``nvidia.com/gpu`` is asked for, on no more device indices than the whole GPUs asked for need
  (:func:`_with_whole_gpus`);
- their mix over the model's GPU slots (:class:`FleetLayout`: one mix per device index, the same on every host of the
  model), chosen greedily for some hours' demand (:func:`_greedy_mix`);
- the current catalog's layouts and schedule read as the same (:func:`current_layout`, :func:`hours_of`);
- the fluid model that values them: per resource, the fewer of the devices requested and offered in an hour
  (:func:`placed`), a switch's hour served by the instances both layouts share (:func:`switch_hour_placed`), and
  whether a switch keeps the instances busy at its hour (:func:`switch_realisable`).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import dataclasses
import math
from dataclasses import dataclass
from typing import Tuple

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_demand import AdvisorError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_output import MIG_DISABLED
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import WHOLE_GPU, resource_of_profile
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import LayoutConfigError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_keys import concrete_instances
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import match_gpus
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog, best_rearrangement

HOURS = 24
_EPSILON = 1e-6
# one GPU without MIG: the layout that serves nvidia.com/gpu
WHOLE_GPU_LAYOUT = ((MIG_DISABLED, 1),)


# ---- one model's GPUs and layouts ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelFleet:
    """The GPUs of one model: one GPU's host model (its profiles), how many hosts have it and how many each, and
    their device indices on a host (mig-parted's ``devices`` count over every GPU of the host, of any model);
    ``host_names``: the hosts, where known (a host with GPUs of two models is one host of the rollout)."""
    model: str
    gpu: object
    hosts: int
    gpus_per_host: int
    indices: Tuple[int, ...] = ()
    host_names: Tuple[str, ...] = ()

    def device_indices(self):
        return self.indices or tuple(range(self.gpus_per_host))

    def resource_of(self, profile):
        return WHOLE_GPU if profile == MIG_DISABLED else resource_of_profile(profile)

    def resources(self):
        catalog = Catalog.from_data(self.gpu.profiles)
        return [self.resource_of(name) for name in catalog.names()] + [WHOLE_GPU]


def _plain_profiles(catalog, wanted):
    return sorted((p for p in catalog.profiles.values() if p.plain and p.name in wanted),
                  key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))


def gpu_layouts(catalog, wanted):
    """Every maximal layout one GPU of ``catalog`` holds from the plain profiles in ``wanted`` (names), as sorted
    ((profile, count), ...) tuples; a layout fits when some placement of all its instances exists (placements, max
    counts, media rules: _mig_geometry.best_rearrangement)."""
    profiles = _plain_profiles(catalog, wanted)
    found = []

    def fits(names):
        return best_rearrangement(catalog, names) is not None

    def grow(position, names):
        if position == len(profiles):
            if names and not any(fits(names + [p.name]) for p in profiles):
                found.append(tuple(sorted((n, names.count(n)) for n in set(names))))
            return
        profile = profiles[position]
        count = 0
        trial = list(names)
        while True:
            grow(position + 1, trial)
            count += 1
            trial = trial + [profile.name]
            if not fits(trial):   # best_rearrangement honours max counts too
                break

    grow(0, [])
    return sorted(set(found))


@dataclass(frozen=True)
class FleetLayout:
    """One model's layout: the GPU layout of each device index ((profile, count), ...) on every host of the model;
    ``source``: the current catalog's layout name it is, or '' for a layout the advisor built."""
    slots: Tuple[Tuple[Tuple[str, int], ...], ...]
    source: str = ''

    def offered(self, fleet):
        """{resource: devices} the model's GPUs offer under this layout."""
        offered = {}
        for slot in self.slots:
            for profile, count in slot:
                resource = fleet.resource_of(profile)
                offered[resource] = offered.get(resource, 0) + count * fleet.hosts
        return offered

    def same_as(self, other):
        return self.slots == other.slots


def placed(requested, offered, weights=None):
    """Requests placed in one hour: per resource, the fewer of the devices requested and those offered, times the
    resource's requests per device-hour (``weights``; none: device-hours are counted)."""
    weights = weights or {}
    return sum(min(devices, offered.get(resource, 0)) * weights.get(resource, 1.0) for resource, devices in requested.items())


def _shared(first, second):
    return dict((r, min(n, second.get(r, 0))) for r, n in first.items())


def switch_hour_placed(requested, before, after, switch_fraction, weights=None):
    """Devices placed in an hour that starts with a switch from ``before`` to ``after`` ({resource: devices}):
    for ``switch_fraction`` of the hour only the instances both share serve, then ``after``."""
    return (switch_fraction * placed(requested, _shared(before, after), weights)
            + (1.0 - switch_fraction) * placed(requested, after, weights))


def switch_realisable(before_hours, before, after):
    """Whether a switch from ``before`` to ``after`` ({resource: devices}) can be made at the end of the hours
    ``before_hours`` ([{resource: devices}], that hour on each day): the in-place switch keeps every instance a pod
    holds and the layout it then builds does not change until the next switch, so the switch is proposed only where
    the instances busy then (per resource, the fewer of those offered and the devices requested on average) are
    ones the new layout has too."""
    for resource, offered in before.items():
        busy = min(offered, sum(hour.get(resource, 0.0) for hour in before_hours) / max(1, len(before_hours)))
        if busy > after.get(resource, 0) + _EPSILON:
            return False
    return True


def _greedy_mix(fleet, layouts, demands, weights, whole_gpu_slots=None):
    """The GPU layout of each device index, chosen one index at a time for the most devices placed over ``demands``
    ([{resource: devices}]); at equal gain the layout listed first; at most ``whole_gpu_slots`` indices without MIG
    (None: no bound)."""
    slots = []
    offered = {}
    for dummy in range(fleet.gpus_per_host):
        best, best_gain = None, None
        for layout in layouts:
            if layout == WHOLE_GPU_LAYOUT and whole_gpu_slots is not None \
                    and slots.count(WHOLE_GPU_LAYOUT) >= whole_gpu_slots:
                continue
            trial = dict(offered)
            for profile, count in layout:
                resource = fleet.resource_of(profile)
                trial[resource] = trial.get(resource, 0) + count * fleet.hosts
            gain = sum(placed(d, trial, weights) for d in demands)
            if best_gain is None or gain > best_gain + _EPSILON:
                best, best_gain = (layout, trial), gain
        slots.append(best[0])
        offered = best[1]
    return FleetLayout(tuple(sorted(slots)))


# ---- the current catalog ----------------------------------------------------------------------------------------

def current_layout(configs, name, fleet):
    """The current catalog's layout ``name`` on the model's GPUs as a :class:`FleetLayout` (the entry each device
    index takes, mig-parted's last-match rule, model-agnostic keys and ``max`` resolved)."""
    if name not in configs:
        raise AdvisorError('the current schedule names layout %s, which the catalog lacks (it has %s)' % (name, ', '.join(sorted(configs))))
    gpus = [_with_index(fleet.gpu, index) for index in fleet.device_indices()]
    slots = []
    for record in match_gpus(configs[name], gpus)['gpus']:
        if record.get('mig_enabled') is False:
            slots.append(WHOLE_GPU_LAYOUT)
            continue
        try:
            counts = concrete_instances(record.get('mig_devices') or {}, fleet.gpu)
        except LayoutConfigError as exc:
            raise AdvisorError('layout %s on %s: %s' % (name, fleet.model, exc))
        slots.append(tuple(sorted((p, n) for p, n in counts.items() if n)))
    return FleetLayout(tuple(sorted(slots)), name)


def _with_index(gpu, index):
    return dataclasses.replace(gpu, index=index)


def check_schedule(schedule, max_hours=HOURS):
    """((hour, layout name), ...) sorted by hour, hours 0-23 distinct: else an AdvisorError."""
    hours = [hour for hour, dummy in schedule]
    if not schedule or any(not isinstance(h, int) or isinstance(h, bool) or not 0 <= h < max_hours for h in hours) \
            or len(set(hours)) != len(hours):
        raise AdvisorError('the current schedule must list distinct whole hours 0-23, each with a layout name: got %r' % (schedule,))
    return tuple(sorted(schedule))


def hours_of(schedule):
    """The layout name in force at each hour of the day under a daily ((hour, name), ...) schedule."""
    schedule = sorted(schedule)
    names = []
    for hour in range(HOURS):
        earlier = [name for start, name in schedule if start <= hour]
        names.append(earlier[-1] if earlier else schedule[-1][1])
    return names


def _with_whole_gpus(layouts, demand_days, fleet, current_layouts):
    """(GPU layouts to mix, the most device indices without MIG) where ``nvidia.com/gpu`` is asked for: a layout is
    the same on every host, so an index without MIG takes MIG off ``fleet.hosts`` GPUs, and no more indices go than
    the most whole GPUs asked for at once need. Where the model has no MIG demand of its own, its other indices keep
    the current catalog's MIG layouts (a single whole-GPU pod once took MIG off every GPU of the model)."""
    most = max([hour.get(WHOLE_GPU, 0.0) for day in demand_days for hour in day] + [0.0])
    if most <= _EPSILON:
        return layouts, None
    kept = list(layouts)
    if not kept:
        for current in current_layouts:
            for slot in current.slots:
                if slot != WHOLE_GPU_LAYOUT and slot not in kept:
                    kept.append(slot)
    if not kept:   # the current catalog has MIG off everywhere already
        return [WHOLE_GPU_LAYOUT], None
    return kept + [WHOLE_GPU_LAYOUT], int(math.ceil(most / fleet.hosts - _EPSILON))
