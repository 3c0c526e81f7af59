# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An independent brute force over placements: plain sets, none of the planner's code.

Used by the planner tests as an oracle and by benchmarks/planner.py as the minimum.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
from dataclasses import replace

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import GpuInstance


def profiles_by_name(gpu):
    return dict((p['name'], p) for p in gpu.profiles)


def slices_of(profile, start):
    return set(range(start, start + profile['memory_slices']))


def _media_valid(names):
    """At most one +me; a +me.all instance only beside -me instances."""
    if sum(1 for n in names if n.endswith('+me')) > 1:
        return False
    takes_all = [n for n in names if n.endswith('+me.all')]
    holders = [n for n in names if not n.endswith('-me')]
    return not takes_all or len(holders) == 1


def all_placements(gpu, fixed=()):
    """Every set of extra (profile, start) that fits around ``fixed``, as sorted tuples."""
    profiles = profiles_by_name(gpu)
    options = sorted((name, p['start']) for name in profiles for p in profiles[name]['placements'])
    found = set()

    def grow(position, chosen):
        found.add(tuple(sorted(chosen)))
        for index in range(position, len(options)):
            candidate = chosen + [options[index]]
            if _valid_set(profiles, list(fixed) + candidate):
                grow(index + 1, candidate)

    grow(0, [])
    return found


def counts_of(placements):
    counts = {}
    for name, dummy in placements:
        counts[name] = counts.get(name, 0) + 1
    return counts


def brute_force_min_destroyed(gpu, target):
    """Fewest idle GPU instances to destroy to reach ``target`` (full-size CIs), or None."""
    current = gpu.gpu_instances
    busy = [gi for gi in current if gi.busy]
    idle = [gi for gi in current if not gi.busy]
    for destroyed in range(len(idle) + 1):
        for victims in itertools.combinations(idle, destroyed):
            kept = busy + [gi for gi in idle if gi not in victims]
            kept_counts = counts_of([(gi.profile, 0) for gi in kept])
            if any(kept_counts[name] > target.get(name, 0) for name in kept_counts):
                continue
            need = dict((name, target[name] - kept_counts.get(name, 0)) for name in target)
            fixed = [(gi.profile, gi.start) for gi in kept]
            for extra in all_placements(gpu, fixed):
                if counts_of(extra) == dict((k, v) for k, v in need.items() if v):
                    return destroyed
    return None


def with_instances(gpu, instances):
    """``gpu`` (_host_model.Gpu) holding instances: [(profile, start, pids)], one full-size compute instance each."""
    gis = []
    for gi_id, (profile, start, pids) in enumerate(instances, start=1):
        size = profiles_by_name(gpu)[profile]['memory_slices']
        processes = [{'pid': pid, 'used_memory_mib': 100} for pid in pids]
        gis.append({'id': gi_id, 'profile': profile, 'profile_id': profiles_by_name(gpu)[profile]['id'],
                    'placement': {'start': start, 'size': size}, 'busy': bool(pids),
                    'compute_instances': [{'id': 0, 'profile': profile, 'profile_id': 0,
                                           'placement': {'start': 0, 'size': profiles_by_name(gpu)[profile]['compute_slices']},
                                           'processes': processes}]})
    return replace(gpu, gpu_instances=tuple(GpuInstance.from_dict(gi) for gi in gis))


def free_space_figures(gpu, placed):
    """Stranded slices and fragmentation of ``placed`` [(profile, start)] with plain sets, none of _mig_geometry.

    An extra instance is possible when ``placed`` plus it is a valid placement set; the unusable slices
    are the free slices no possible extra covers. Every valid placement set with the same profile counts
    is a rearrangement: stranded = unusable now - fewest unusable of any rearrangement, fragmentation =
    1 - largest possible extra now / largest possible extra of any rearrangement (0.0 when that is 0).
    """
    profiles = profiles_by_name(gpu)
    total = max(p['start'] + p['size'] for prof in gpu.profiles for p in prof['placements'])

    def state(chosen):
        key = (gpu.name, tuple(sorted(chosen)))
        if key not in _STATES:
            _STATES[key] = measure(chosen)
        return _STATES[key]

    def measure(chosen):
        used = set()
        for name, start in chosen:
            used |= slices_of(profiles[name], start)
        usable = set()
        largest = 0
        for name, profile in profiles.items():
            for placement in profile['placements']:
                extra = (name, placement['start'])
                if _valid_set(profiles, list(chosen) + [extra]):
                    usable |= slices_of(profile, placement['start'])
                    largest = max(largest, profile['memory_slices'])
        return len(set(range(total)) - used - usable), largest

    unusable, largest = state(placed)
    wanted = counts_of(placed)
    rearranged = [state(other) for other in _placement_sets(gpu) if counts_of(other) == wanted]
    fewest_unusable = min(u for u, dummy in rearranged)
    best_largest = max(l for dummy, l in rearranged)
    return {'unusable_slices': unusable, 'stranded_slices': unusable - fewest_unusable,
            'repacked_largest_placeable_slices': best_largest, 'largest_placeable_slices': largest,
            'fragmentation': round(1.0 - float(largest) / best_largest, 4) if best_largest else 0.0}


def _valid_set(profiles, chosen):
    used = set()
    counts = {}
    for name, start in chosen:
        taken = slices_of(profiles[name], start)
        if used & taken:
            return False
        used |= taken
        counts[name] = counts.get(name, 0) + 1
        if counts[name] > profiles[name]['max_count']:
            return False
    return _media_valid([name for name, dummy in chosen])


_SETS = {}
_STATES = {}


def _placement_sets(gpu):
    key = gpu.name
    if key not in _SETS:
        _SETS[key] = sorted(all_placements(gpu))
    return _SETS[key]


def brute_force_placeable(gpu, fixed=()):
    """{profile: most extra instances of that profile alone that fit around ``fixed``}, by trying every subset of starts."""
    profiles = profiles_by_name(gpu)
    result = {}
    for name in sorted(profiles):
        starts = [p['start'] for p in profiles[name]['placements']]
        result[name] = 0
        for size in range(len(starts), 0, -1):
            if any(_valid_set(profiles, list(fixed) + [(name, s) for s in chosen])
                   for chosen in itertools.combinations(starts, size)):
                result[name] = size
                break
    return result
