# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""MIG geometry of one GPU: its profiles as NVML reports them, and free-space analysis.

Pure Python: no NVML, no Ansible imports. The catalog is built from the profiles the NVML
backend reads (``_host_model.Gpu.profiles``, plain data), so the same code serves real GPUs
and the simulator.

Definitions (documented for users in docs/fragmentation.md):

- *free slices*: memory slices not covered by any GPU instance.
- *placeable[p]*: how many more GPU instances of profile ``p`` alone still fit, honouring
  its placements, its max count and the one-``+me``-per-GPU rule.
- *largest placeable*: the placeable profile with the most memory slices (then compute
  slices, then memory).
- *unusable slices*: free slices that no placement of any still-placeable profile covers.
- *a rearrangement*: the same GPU instances (same profiles) at other valid placements. The
  best one is searched exhaustively (a GPU has at most 8 memory slices).
- *stranded slices*: unusable slices now minus the fewest unusable slices of any
  rearrangement: free memory the current placement wastes and a repack would give back.
  A slice no profile can use in any arrangement (7x1g on an A100: the 7 compute slices, or
  the 1g count limit, are all taken, and no 1g starts at slice 7) is not stranded.
- *fragmentation*: ``1 - largest_placeable_slices / repacked_largest_placeable_slices``,
  the share of the largest request that a rearrangement would fit and the current placement
  does not; 0.0 when no rearrangement fits anything (a full GPU, 7x1g) or the current
  placement already fits the largest. An optimally placed GPU scores 0 stranded and 0.0.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import MigProfile, compute_instance_name


class GeometryError(ValueError):
    """Profile data that cannot describe a real GPU."""


class ComputeInstanceProfile(object):
    """A compute instance profile inside one GPU instance profile."""

    __slots__ = ('name', 'id', 'compute_slices', 'max_count', 'starts', 'size')

    def __init__(self, name, profile_id, compute_slices, max_count, starts, size):
        self.name = name
        self.id = profile_id
        self.compute_slices = compute_slices
        self.max_count = max_count
        self.starts = tuple(starts)
        self.size = size

    @classmethod
    def from_data(cls, data):
        placements = data.get('placements') or []
        sizes = set(p['size'] for p in placements)
        size = sizes.pop() if len(sizes) == 1 else data['compute_slices']
        return cls(data['name'], data['id'], data['compute_slices'], data['max_count'],
                   sorted(p['start'] for p in placements), size)


class GpuInstanceProfile(object):
    """A GPU instance profile with its placements (in memory slices)."""

    __slots__ = ('name', 'id', 'compute_slices', 'memory_slices', 'memory_mib', 'max_count',
                 'starts', 'media_extensions', 'all_media_engines', 'no_media_engines', 'plain', 'compute_profiles')

    def __init__(self, name, profile_id, compute_slices, memory_slices, memory_mib, max_count, starts,
                 compute_profiles):
        self.name = name
        self.id = profile_id
        self.compute_slices = compute_slices
        self.memory_slices = memory_slices
        self.memory_mib = memory_mib
        self.max_count = max_count
        self.starts = tuple(sorted(starts))
        parsed = MigProfile.parse(name)
        self.media_extensions = parsed.media_extensions
        self.all_media_engines = parsed.all_media_engines
        self.no_media_engines = parsed.no_media_engines
        self.plain = not parsed.suffix
        # name -> ComputeInstanceProfile, the full-size one included
        self.compute_profiles = compute_profiles

    @classmethod
    def from_data(cls, data):
        placements = data.get('placements') or []
        sizes = set(p['size'] for p in placements)
        if len(sizes) > 1:
            raise GeometryError('profile %s reports placements of different sizes %s' % (data['name'], sorted(sizes)))
        memory_slices = sizes.pop() if sizes else data['memory_slices']
        compute_profiles = {}
        for ci in data.get('compute_profiles') or []:
            compute_profiles[ci['name']] = ComputeInstanceProfile.from_data(ci)
        return cls(data['name'], data['id'], data['compute_slices'], memory_slices, data.get('memory_mib', 0),
                   data['max_count'], [p['start'] for p in placements], compute_profiles)

    @property
    def full_compute_profile(self):
        """The compute instance that spans the whole GPU instance (same name as the GI)."""
        for ci in self.compute_profiles.values():
            if ci.compute_slices == self.compute_slices:
                return ci
        return None

    def rank(self):
        """Sort key: bigger instances first; between equal ones the plain profile (no +me/+gfx/-me suffix)."""
        return (self.memory_slices, self.compute_slices, self.memory_mib, self.plain, self.name)


class Catalog(object):
    """All GPU instance profiles of one GPU, by short name."""

    def __init__(self, profiles):
        self.profiles = dict((p.name, p) for p in profiles)
        self.total_slices = max([s + p.memory_slices for p in profiles for s in p.starts] or [0])
        self._key = None

    @classmethod
    def from_data(cls, profiles_data):
        return cls([GpuInstanceProfile.from_data(p) for p in profiles_data])

    def get(self, name):
        return self.profiles.get(name)

    def names(self):
        return sorted(self.profiles, key=lambda n: self.profiles[n].rank())

    def __contains__(self, name):
        return name in self.profiles

    def key(self):
        """What identifies this GPU's geometry (profiles, placements, counts, media rules), for caches."""
        if self._key is None:
            self._key = tuple(sorted((p.name, p.memory_slices, p.compute_slices, p.memory_mib, p.max_count, p.starts,
                                      p.media_extensions, p.all_media_engines, p.no_media_engines)
                                     for p in self.profiles.values()))
        return self._key


class Occupancy(object):
    """Which memory slices are taken, how many instances per profile, and who holds media engines.

    Media rules (nvml.h, mig-geometry reference): one ``+me`` instance per GPU; a ``+me.all``
    instance takes every media engine, so only ``-me`` instances may sit beside it.
    """

    __slots__ = ('mask', 'counts', 'media_used', 'all_media', 'media_holders')

    def __init__(self, mask=0, counts=None, media_used=False, all_media=False, media_holders=0):
        self.mask = mask
        self.counts = dict(counts or {})
        self.media_used = media_used
        self.all_media = all_media
        self.media_holders = media_holders

    @classmethod
    def of(cls, catalog, instances):
        """``instances``: iterable of (profile_name, start)."""
        occupancy = cls()
        for name, start in instances:
            profile = catalog.get(name)
            if profile is None:
                raise GeometryError('GPU instance profile %s is not offered by this GPU' % name)
            occupancy = occupancy.with_instance(profile, start)
        return occupancy

    def copy(self):
        return Occupancy(self.mask, self.counts, self.media_used, self.all_media, self.media_holders)

    def media_allows(self, profile):
        if profile.media_extensions and self.media_used:
            return False
        if profile.all_media_engines and self.media_holders:
            return False
        return profile.no_media_engines or not self.all_media

    def can_place(self, profile, start):
        if self.counts.get(profile.name, 0) >= profile.max_count or not self.media_allows(profile):
            return False
        return not self.mask & slice_mask(start, profile.memory_slices)

    def with_instance(self, profile, start):
        counts = dict(self.counts)
        counts[profile.name] = counts.get(profile.name, 0) + 1
        return Occupancy(self.mask | slice_mask(start, profile.memory_slices), counts,
                         self.media_used or profile.media_extensions, self.all_media or profile.all_media_engines,
                         self.media_holders + (0 if profile.no_media_engines else 1))


def slice_mask(start, size):
    return ((1 << size) - 1) << start


def _bit_count(value):
    return bin(value).count('1')


def placeable_count(catalog, occupancy, profile):
    """How many more instances of ``profile`` alone fit (greedy is optimal for equal-size intervals)."""
    room = profile.max_count - occupancy.counts.get(profile.name, 0)
    if not occupancy.media_allows(profile):
        room = 0
    elif profile.media_extensions or profile.all_media_engines:
        room = min(room, 1)
    count = 0
    mask = occupancy.mask
    for start in profile.starts:
        if count >= room:
            break
        bits = slice_mask(start, profile.memory_slices)
        if not mask & bits:
            mask |= bits
            count += 1
    return count


def _current_figures(catalog, occupancy):
    """Figures of the current placement: (free mask, placeable, largest profile, usable mask)."""
    full = (1 << catalog.total_slices) - 1
    free_mask = full & ~occupancy.mask
    placeable = {}
    usable_mask = 0
    largest = None
    for name in catalog.names():
        profile = catalog.profiles[name]
        count = placeable_count(catalog, occupancy, profile)
        placeable[name] = count
        if count:
            for start in profile.starts:
                bits = slice_mask(start, profile.memory_slices)
                if not occupancy.mask & bits:
                    usable_mask |= bits
            if largest is None or profile.rank() > largest.rank():
                largest = profile
    return free_mask, placeable, largest, usable_mask & free_mask


_BEST_CACHE = {}
_BEST_CACHE_LIMIT = 4096


def best_rearrangement(catalog, profile_names):
    """The best any placement of these GPU instances can do: (largest profile or None, fewest unusable slices).

    ``profile_names``: the profiles of every GPU instance of the GPU. The two figures are
    optimised separately (each is the best of all valid placements: overlaps, max counts and
    media rules honoured); None when the instances fit no placement at all. Results are
    cached per GPU model and multiset of profiles: a fleet repeats a few of them.
    """
    names = tuple(sorted(profile_names))
    key = (catalog.key(), names)
    if key not in _BEST_CACHE:
        if len(_BEST_CACHE) >= _BEST_CACHE_LIMIT:
            _BEST_CACHE.clear()
        _BEST_CACHE[key] = _search_best(catalog, names)
    best = _BEST_CACHE[key]
    # the cache keeps names: the profiles returned are this catalog's own
    return None if best is None else (catalog.get(best[0]) if best[0] else None, best[1])


def _search_best(catalog, names):
    profiles = sorted((catalog.get(name) for name in names), key=lambda p: (p.rank(), p.name), reverse=True)
    best = {}

    def place(position, occupancy, lowest):
        if position == len(profiles):
            free_mask, _placeable, largest, usable = _current_figures(catalog, occupancy)
            unusable = _bit_count(free_mask & ~usable)
            if not best or _largest_rank(largest) > _largest_rank(best['largest']):
                best['largest'] = largest
            best['unusable'] = min(best.get('unusable', unusable), unusable)
            return
        profile = profiles[position]
        for start in profile.starts:
            if start < lowest or not occupancy.can_place(profile, start):
                continue
            following = profiles[position + 1] if position + 1 < len(profiles) else None
            # identical profiles take increasing starts: no permutation is tried twice
            place(position + 1, occupancy.with_instance(profile, start),
                  start + 1 if following is not None and following.name == profile.name else 0)

    place(0, Occupancy(), 0)
    if not best:
        return None
    return (best['largest'].name if best['largest'] else None, best['unusable'])


def _largest_rank(profile):
    return profile.rank() if profile is not None else ()


def _stranded_and_repacked(catalog, occupancy, largest, unusable_now):
    """(stranded slices, repacked largest profile) of the current placement against the best rearrangement."""
    names = []
    for name, count in occupancy.counts.items():
        names.extend([name] * count)
    best = best_rearrangement(catalog, names)
    if best is None:   # a placement NVML would not make: judge it as it is
        return 0, largest
    repacked, fewest_unusable = best
    if _largest_rank(largest) > _largest_rank(repacked):
        repacked = largest
    return max(0, unusable_now - fewest_unusable), repacked


def analyze(catalog, occupancy):
    """Free-space figures of one GPU, as reported by nvidia_mig_facts, the metrics, the map and the repack.

    ``unusable_slices`` and the placement-only figures describe the GPU as it is;
    ``stranded_slices``, ``repacked_largest_placeable`` and ``fragmentation`` compare it with the
    best rearrangement of its instances (module docstring).
    """
    free_mask, placeable, largest, usable = _current_figures(catalog, occupancy)
    unusable = _bit_count(free_mask & ~usable)
    stranded, repacked = _stranded_and_repacked(catalog, occupancy, largest, unusable)
    largest_slices = largest.memory_slices if largest else 0
    repacked_slices = repacked.memory_slices if repacked else 0
    fragmentation = round(1.0 - float(largest_slices) / repacked_slices, 4) if repacked_slices else 0.0
    return {
        'total_slices': catalog.total_slices,
        'free_slices': _bit_count(free_mask),
        'placeable': placeable,
        'largest_placeable': largest.name if largest else None,
        'largest_placeable_slices': largest_slices,
        'unusable_slices': unusable,
        'stranded_slices': stranded,
        'repacked_largest_placeable': repacked.name if repacked else None,
        'repacked_largest_placeable_slices': repacked_slices,
        'fragmentation': fragmentation,
    }


def pack_compute_instances(gi_profile, ci_names):
    """Place compute instances inside one GPU instance.

    Returns a list of (ci_name, start) in the order given, or None when they do not fit.
    Backtracking over the NVML placements, so the result never depends on input order
    beyond tie-breaking.
    """
    profiles = []
    for name in ci_names:
        ci = gi_profile.compute_profiles.get(name)
        if ci is None:
            return None
        profiles.append(ci)
    order = sorted(range(len(profiles)), key=lambda i: (-profiles[i].size, profiles[i].name, i))
    starts = [None] * len(profiles)

    def place(position, mask, counts):
        if position == len(order):
            return True
        index = order[position]
        ci = profiles[index]
        if counts.get(ci.name, 0) >= ci.max_count:
            return False
        # identical CIs are placed in increasing start order: no symmetric retries
        previous = order[position - 1] if position else None
        lowest = starts[previous] + 1 if previous is not None and profiles[previous].name == ci.name else 0
        for start in ci.starts:
            if start < lowest:
                continue
            bits = slice_mask(start, ci.size)
            if start + ci.size > gi_profile.compute_slices or mask & bits:
                continue
            starts[index] = start
            counts[ci.name] = counts.get(ci.name, 0) + 1
            if place(position + 1, mask | bits, counts):
                return True
            counts[ci.name] -= 1
        starts[index] = None
        return False

    if not place(0, 0, {}):
        return None
    return [(profiles[i].name, starts[i]) for i in range(len(profiles))]


def slice_states(catalog, instances):
    """State of every memory slice of one GPU, for drawing it (docs/fragmentation.md).

    ``instances``: list of (profile_name, start). Returns a list of ``catalog.total_slices``
    entries: the position in ``instances`` of the GPU instance covering that slice, or
    ``'free'`` (a still-placeable profile can use it), ``'stranded'`` or ``'unusable'``. The
    free slices no placeable profile covers are :func:`analyze`'s ``unusable_slices``; the
    first ``stranded_slices`` of them, from slice 0 up, are ``'stranded'`` (a rearrangement
    would make them usable) and the rest, the highest slices, ``'unusable'`` (no arrangement of
    these instances can use them: on 8-slice GPUs slice 7 after 7x1g). So the entries add up
    to analyze's figures. Overlapping instances or a start that is not one of the profile's
    placements raise :class:`GeometryError`.
    """
    states = ['free'] * catalog.total_slices
    placed = []
    for position, (name, start) in enumerate(instances):
        profile = catalog.get(name)
        if profile is None:
            raise GeometryError('GPU instance profile %s is not offered by this GPU' % name)
        if start not in profile.starts:
            raise GeometryError('%s cannot start at memory slice %r (placements start at %s)'
                                % (name, start, ', '.join(str(s) for s in profile.starts)))
        for index in range(start, start + profile.memory_slices):
            if states[index] != 'free':
                raise GeometryError('%s at %d overlaps %s at %d on memory slice %d'
                                    % (name, start, instances[states[index]][0], instances[states[index]][1], index))
            states[index] = position
        placed.append((name, start))
    occupancy = Occupancy.of(catalog, placed)
    free_mask, _placeable, largest, usable = _current_figures(catalog, occupancy)
    unusable = [index for index in range(catalog.total_slices) if free_mask & ~usable & slice_mask(index, 1)]
    stranded, _repacked = _stranded_and_repacked(catalog, occupancy, largest, len(unusable))
    for rank, index in enumerate(unusable):
        states[index] = 'stranded' if rank < stranded else 'unusable'
    return states


def derived_compute_profiles(gi_name, gi_compute_slices):
    """Compute instance profiles of a GPU instance profile that has no instance yet.

    NVML only describes compute profiles through an existing GPU instance, so until one
    exists the planner uses this rule (sizes 1, 2, 3, 4, 7 that fit; starts aligned to
    the size, 3c aligned to 4). The apply re-reads the real profiles from NVML once the
    GPU instance exists and places its compute instances from those.
    """
    profiles = []
    enum_by_size = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
    for size in sorted(enum_by_size):
        if size > gi_compute_slices or (size != gi_compute_slices and size in (6, 7, 8)):
            continue
        if size == 3 and gi_compute_slices not in (3, 7):
            continue
        step = 4 if size == 3 else size
        starts = [s for s in range(0, gi_compute_slices, step) if s + size <= gi_compute_slices]
        profiles.append({
            'name': compute_instance_name(size, gi_name),
            'id': enum_by_size[size],
            'compute_slices': size,
            'max_count': len(starts),
            'placements': [{'start': s, 'size': size} for s in starts],
        })
    return profiles


def free_space(gpu):
    """Free-space figures of a MIG-enabled GPU (_host_model.Gpu, its profiles known)."""
    catalog = Catalog.from_data(gpu.profiles)
    occupancy = Occupancy.of(catalog, [(gi.profile, gi.start) for gi in gpu.gpu_instances])
    return analyze(catalog, occupancy)
