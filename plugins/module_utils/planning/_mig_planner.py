# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Planning core: current GPU state + desired layout -> an ordered, explicit plan.

Pure Python: no NVML, no Ansible imports. The input is one GPU of the host model
(_host_model.Gpu: its profiles and GPU instances); the output is a :class:`Plan` whose
actions the backend applies one by one, always with explicit placements.

Layout rule (mig-parted ``mig-devices`` semantics):

- a GPU instance key (``3g.40gb: 2``) asks for that many GPU instances, each holding one
  full-size compute instance;
- compute instance keys (``1c.3g.40gb: 4``) of one GPU instance profile are packed,
  largest first, first fit, into as few GPU instances of that profile as they fit in
  (``1c.3g.40gb: 4`` on an A100-80GB: one 3g.40gb with three 1c, one with one 1c).

Decisions:

1. Validate the whole request before anything else (unknown profile, compute instance
   not valid in its GPU instance, counts beyond max, more than one +me, a layout that
   does not fit an empty GPU).
2. Keep current GPU instances that match a wanted one exactly (profile and compute
   instances). Busy ones (any process on a compute instance) are always kept; one that
   the layout does not want is an error, never destroyed.
3. Destroy the smallest set of idle instances that makes the rest placeable; among
   equally small sets, and among placements, prefer the one that leaves the largest
   placeable free space (then fewest stranded slices, then lowest starts).
4. With ``repack``, free-space quality comes first and idle instances may be moved.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import NOBODY
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import (
    Catalog,
    Occupancy,
    analyze,
    pack_compute_instances,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import MigProfile, ProfileError


# A GPU whose MIG is still off cannot be planned: NVML hides its profiles until MIG is enabled.
DEFERRED_NOTE = 'instances planned after MIG is enabled (NVML describes the profiles only then)'


class PlanningError(GpufleetError, ValueError):
    """A request that cannot be planned; the message names the GPU and the cause."""


class InstanceSpec(object):
    """One wanted GPU instance: its profile and the compute instances inside it."""

    __slots__ = ('profile', 'compute_instances')

    def __init__(self, profile, compute_instances):
        self.profile = profile
        self.compute_instances = tuple(sorted(compute_instances))

    @property
    def signature(self):
        return (self.profile, self.compute_instances)


class CurrentInstance(object):
    """One existing GPU instance (_host_model.GpuInstance) and the pods that hold it."""

    __slots__ = ('id', 'profile', 'start', 'compute_instances', 'pids', 'pods', 'instance')

    def __init__(self, instance, pods=None):
        self.instance = instance
        self.id = instance.id
        self.profile = instance.profile
        self.start = instance.start
        self.compute_instances = instance.compute_profiles()
        self.pids = instance.pids()
        self.pods = sorted(pods or [])

    @property
    def busy(self):
        """Running processes, or a pod that holds the instance (it may be idle between requests)."""
        return bool(self.pids or self.pods)

    def users(self):
        """Who keeps this instance busy, for messages."""
        users = []
        if self.pids:
            users.append('has running processes %s' % self.pids)
        if self.pods:
            users.append('is allocated to pod(s) %s' % ', '.join(self.pods))
        return ' and '.join(users)

    @property
    def signature(self):
        return (self.profile, self.compute_instances)


class Plan(object):
    """The outcome of planning one GPU: before/after layouts and the ordered actions."""

    def __init__(self, gpu, before, after, actions, analysis):
        self.gpu = gpu
        self.before = before
        self.after = after
        self.actions = actions
        self.analysis = analysis

    @property
    def changed(self):
        return bool(self.actions)

    def as_dict(self):
        return {
            'gpu': self.gpu,
            'changed': self.changed,
            'before': self.before,
            'after': self.after,
            'actions': self.actions,
            'free_space_after': self.analysis,
        }


def expand_layout(catalog, instances, gpu_label='GPU'):
    """Turn ``{profile: count}`` into the wanted :class:`InstanceSpec` list, validating it."""
    if not isinstance(instances, dict):
        raise PlanningError('%s: instances must be a mapping of MIG profile to count' % gpu_label)
    whole = []
    packed = {}
    for key in sorted(instances):
        count = instances[key]
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise PlanningError('%s: count for %s must be a non-negative integer, got %r' % (gpu_label, key, count))
        try:
            parsed = MigProfile.parse(key)
        except ProfileError as exc:
            raise PlanningError('%s: %s' % (gpu_label, exc))
        gi_name = parsed.gpu_instance_name
        gi_profile = catalog.get(gi_name)
        if gi_profile is None:
            raise PlanningError('%s: profile %s is not offered by this GPU (available: %s)'
                                % (gpu_label, key, ', '.join(catalog.names())))
        if count == 0:
            continue
        if parsed.is_compute_instance_profile:
            if parsed.name not in gi_profile.compute_profiles:
                raise PlanningError('%s: compute instance %s is not valid inside a %s GPU instance (valid: %s)'
                                    % (gpu_label, key, gi_name, ', '.join(sorted(gi_profile.compute_profiles))))
            packed.setdefault(gi_name, []).extend([parsed.name] * count)
        else:
            full = gi_profile.full_compute_profile
            if full is None:
                raise PlanningError('%s: %s offers no full-size compute instance' % (gpu_label, gi_name))
            whole.extend([InstanceSpec(gi_name, [full.name]) for dummy in range(count)])
    specs = list(whole)
    for gi_name in sorted(packed):
        specs.extend(_pack_into_gpu_instances(catalog.get(gi_name), packed[gi_name], gpu_label))
    _validate_counts(catalog, specs, gpu_label)
    return specs


def _pack_into_gpu_instances(gi_profile, ci_names, gpu_label):
    """First fit, largest compute instance first, into as few GPU instances as needed."""
    ordered = sorted(ci_names, key=lambda n: (-gi_profile.compute_profiles[n].size, n))
    bins = []
    for name in ordered:
        for members in bins:
            if pack_compute_instances(gi_profile, members + [name]) is not None:
                members.append(name)
                break
        else:
            if pack_compute_instances(gi_profile, [name]) is None:
                raise PlanningError('%s: compute instance %s does not fit a %s GPU instance' % (gpu_label, name, gi_profile.name))
            bins.append([name])
    return [InstanceSpec(gi_profile.name, members) for members in bins]


def _validate_counts(catalog, specs, gpu_label):
    counts = {}
    for spec in specs:
        counts[spec.profile] = counts.get(spec.profile, 0) + 1
    for name, count in sorted(counts.items()):
        profile = catalog.get(name)
        if count > profile.max_count:
            raise PlanningError('%s: %d x %s requested but the GPU allows at most %d' % (gpu_label, count, name, profile.max_count))
    media = [name for name in counts if catalog.get(name).media_extensions]
    media_total = sum(counts[name] for name in media)
    if media_total > 1:
        raise PlanningError('%s: %d +me instances requested (%s) but a GPU has only one set of media engines'
                            % (gpu_label, media_total, ', '.join(sorted(media))))
    if _best_placement(catalog, Occupancy(), specs) is None:
        demand = sum(catalog.get(s.profile).memory_slices for s in specs)
        raise PlanningError('%s: layout %s does not fit on an empty GPU (%d of %d memory slices, placements overlap)'
                            % (gpu_label, describe_specs(specs), demand, catalog.total_slices))


def describe_specs(specs):
    counts = {}
    for spec in specs:
        label = spec.profile if spec.compute_instances == (spec.profile,) else '%s[%s]' % (spec.profile, ','.join(spec.compute_instances))
        counts[label] = counts.get(label, 0) + 1
    return ', '.join('%dx%s' % (counts[k], k) for k in sorted(counts))


def _score(catalog, occupancy):
    """Free-space quality after a placement: bigger is better."""
    figures = analyze(catalog, occupancy)
    return (figures['largest_placeable_slices'], -figures['stranded_slices'])


def _best_placement(catalog, occupancy, specs):
    """Best explicit placement of ``specs`` around ``occupancy``: (score, starts) or None.

    Exhaustive backtracking over NVML placements, biggest instances first; identical
    specs take increasing starts so permutations are not retried.
    """
    order = sorted(range(len(specs)), key=lambda i: (catalog.get(specs[i].profile).rank(), specs[i].signature), reverse=True)
    starts = [None] * len(specs)
    best = [None]

    def place(position, occ):
        if position == len(order):
            # Ties go to the lowest starts, compared in ``order`` (not the caller's order of specs), so that
            # the same instances land in the same places however they were listed.
            candidate = (_score(catalog, occ), [-starts[i] for i in order])
            if best[0] is None or candidate > best[0][0]:
                best[0] = (candidate, list(starts))
            return
        index = order[position]
        profile = catalog.get(specs[index].profile)
        previous = order[position - 1] if position else None
        lowest = -1
        if previous is not None and specs[previous].signature == specs[index].signature:
            lowest = starts[previous]
        for start in profile.starts:
            if start <= lowest or not occ.can_place(profile, start):
                continue
            starts[index] = start
            place(position + 1, occ.with_instance(profile, start))
        starts[index] = None

    place(0, occupancy)
    if best[0] is None:
        return None
    return best[0][0][0], best[0][1]


def plan_gpu(gpu, instances, repack=False, holders=NOBODY, evict=False):
    """Plan one GPU. ``gpu`` is a _host_model.Gpu (its profiles and GPU instances);
    ``instances`` the wanted ``{profile: count}`` (mig-parted semantics, see :func:`expand_layout`).

    ``holders``: the pods that hold the GPU's instances (_host_model.GpuHolders): such an instance is
    busy like one with processes, whether or not a process runs on it right now.
    With ``evict`` (a Kubernetes node whose pods can be evicted first) an allocated instance
    may go, but as few as possible: the plan keeps the most allocated instances, then the most
    instances; the destroy actions of allocated ones name their pods (``allocated_to``), and
    processes on an allocated instance count as its pod's. Processes outside any pod stay untouchable.
    """
    label = 'GPU %s' % gpu.index
    catalog = Catalog.from_data(gpu.profiles)
    return _plan(gpu, catalog, expand_layout(catalog, instances, label), label, repack, holders, evict)


def current_specs(gpu):
    """One InstanceSpec per current GPU instance, as it is: its profile and its compute instances."""
    return [InstanceSpec(gi.profile, gi.compute_profiles()) for gi in gpu.gpu_instances]


def plan_gpu_specs(gpu, specs, repack=False, holders=NOBODY):
    """Plan one GPU to hold exactly ``specs`` (InstanceSpec, each GPU instance as given: no packing
    of compute instances into fewer GPU instances). With :func:`current_specs` and ``repack`` it
    only moves idle, unallocated GPU instances, each recreated with the same compute instances.
    ``holders`` as for :func:`plan_gpu`."""
    label = 'GPU %s' % gpu.index
    catalog = Catalog.from_data(gpu.profiles)
    specs = list(specs)
    for spec in specs:
        profile = catalog.get(spec.profile)
        if profile is None:
            raise PlanningError('%s: profile %s is not offered by this GPU (available: %s)'
                                % (label, spec.profile, ', '.join(catalog.names())))
        if pack_compute_instances(profile, list(spec.compute_instances)) is None:
            raise PlanningError('%s: compute instances %s do not fit a %s GPU instance as NVML describes it'
                                % (label, list(spec.compute_instances), spec.profile))
    _validate_counts(catalog, specs, label)
    return _plan(gpu, catalog, specs, label, repack, holders, False)


def _plan(gpu, catalog, specs, label, repack, holders, evict):
    current = [CurrentInstance(gi, holders.of_instance(gi.id)) for gi in gpu.gpu_instances]

    wanted = {}
    for spec in specs:
        wanted[spec.signature] = wanted.get(spec.signature, 0) + 1
    soft = [gi for gi in current if gi.pods and evict]
    busy = [gi for gi in current if gi.busy and gi not in soft]
    busy_by_signature = {}
    for gi in busy:
        busy_by_signature.setdefault(gi.signature, []).append(gi)
    for signature, group in sorted(busy_by_signature.items()):
        if len(group) > wanted.get(signature, 0):
            victim = group[wanted.get(signature, 0)]
            raise PlanningError(
                '%s: GPU instance %s (%s at slice %d) %s but the layout %s does not keep it; '
                'busy instances are never destroyed: stop that work first' % (
                    label, victim.id, _describe_current(victim), victim.start, victim.users(), describe_specs(specs) or 'empty'))

    idle_candidates = [gi for gi in current if (not gi.busy or gi in soft) and gi.signature in wanted]
    choice = _choose_kept(catalog, specs, busy, idle_candidates, repack, soft)
    if choice is None:
        blockers = '; '.join('GPU instance %s (%s at slice %d) %s' % (gi.id, _describe_current(gi), gi.start, gi.users()) for gi in busy)
        raise PlanningError('%s: layout %s cannot be placed around busy instances: %s' % (label, describe_specs(specs), blockers))
    kept, new_specs, new_starts, occupancy = choice
    return _build_plan(gpu, catalog, current, kept, new_specs, new_starts, occupancy)


def _describe_current(gi):
    if gi.compute_instances == (gi.profile,):
        return gi.profile
    return '%s[%s]' % (gi.profile, ','.join(gi.compute_instances) or 'no compute instances')


def _remaining_specs(specs, kept):
    remaining = list(specs)
    for gi in kept:
        for position, spec in enumerate(remaining):
            if spec.signature == gi.signature:
                del remaining[position]
                break
    return remaining


def _choose_kept(catalog, specs, busy, idle_candidates, repack, soft=()):
    """Pick which current instances survive, then where the new ones go.

    Allocated instances that may be evicted (``soft``) are kept first. Then, without repack:
    the most instances kept, then the best free space; with repack: the best free space, then
    the most kept. Ties keep lower instance ids.
    """
    wanted = {}
    for spec in specs:
        wanted[spec.signature] = wanted.get(spec.signature, 0) + 1
    best = None
    for size in range(len(idle_candidates), -1, -1):
        for subset in itertools.combinations(idle_candidates, size):
            kept = list(busy) + list(subset)
            kept_counts = {}
            for gi in kept:
                kept_counts[gi.signature] = kept_counts.get(gi.signature, 0) + 1
            if any(count > wanted.get(sig, 0) for sig, count in kept_counts.items()):
                continue
            try:
                occupancy = Occupancy.of(catalog, [(gi.profile, gi.start) for gi in kept])
            except ValueError:
                continue
            remaining = _remaining_specs(specs, kept)
            placed = _best_placement(catalog, occupancy, remaining)
            if placed is None:
                continue
            score, starts = placed[0], placed[1]
            soft_kept = sum(1 for gi in subset if gi in soft)
            key = (soft_kept, score, len(kept)) if repack else (soft_kept, len(kept), score)
            if best is None or key > best[0]:
                best = (key, kept, remaining, starts, occupancy)
        # Bigger subsets come first: without instances whose pods may be evicted the first size that fits is the most kept.
        if best is not None and not repack and not soft:
            break
    if best is None:
        return None
    return best[1], best[2], best[3], best[4]


def _layout_entry(profile, start, size, compute_instances, gi_id=None, busy=False, pids=None):
    return {
        'id': gi_id,
        'profile': profile,
        'placement': {'start': start, 'size': size},
        'compute_instances': compute_instances,
        'busy': busy,
        'pids': pids or [],
    }


def layout_of(gpu):
    """Plain, placement-sorted layout of a GPU's current instances (for before/after)."""
    entries = []
    for gi in gpu.gpu_instances:
        cis = [{'id': ci.id, 'profile': ci.profile, 'placement': ci.placement.as_dict()}
               for ci in sorted(gi.compute_instances, key=lambda c: c.placement.start)]
        pids = gi.pids()
        entries.append(_layout_entry(gi.profile, gi.placement.start, gi.placement.size, cis, gi.id, bool(pids), pids))
    return sorted(entries, key=lambda e: e['placement']['start'])


def destroyed_instances(gpu, plan, holders=NOBODY):
    """The GPU instances ``plan`` (None: no plan) destroys on ``gpu``, with the MIG device UUIDs workloads know them
    by and the pods that hold them (``holders`` as for :func:`plan_gpu`)."""
    ids = set(a['gpu_instance_id'] for a in (plan.actions if plan else []) if a['action'] == 'destroy_gpu_instance')
    return [{'id': gi.id, 'profile': gi.profile, 'placement': gi.placement.as_dict(), 'mig_uuids': gi.mig_uuids(),
             'allocated_to': list(holders.of_instance(gi.id))}
            for gi in gpu.gpu_instances if gi.id in ids]


def _build_plan(gpu, catalog, current, kept, new_specs, new_starts, occupancy):
    kept_ids = set(gi.id for gi in kept)
    actions = []
    for gi in sorted(current, key=lambda g: g.start):
        if gi.id in kept_ids:
            continue
        for ci in sorted(gi.instance.compute_instances, key=lambda c: c.placement.start):
            actions.append({'action': 'destroy_compute_instance', 'gpu_instance_id': gi.id, 'compute_instance_id': ci.id,
                            'profile': ci.profile, 'placement': ci.placement.as_dict()})
        destroy = {'action': 'destroy_gpu_instance', 'gpu_instance_id': gi.id, 'profile': gi.profile,
                   'placement': gi.instance.placement.as_dict()}
        if gi.pods:
            destroy['allocated_to'] = list(gi.pods)
        actions.append(destroy)

    after = [entry for entry in layout_of(gpu) if entry['id'] in kept_ids]
    created = sorted(zip(new_starts, new_specs), key=lambda pair: pair[0])
    for ref, (start, spec) in enumerate(created):
        profile = catalog.get(spec.profile)
        new_ref = 'new-%d' % ref
        actions.append({'action': 'create_gpu_instance', 'ref': new_ref, 'profile': profile.name, 'profile_id': profile.id,
                        'placement': {'start': start, 'size': profile.memory_slices}})
        cis = []
        for ci_name, ci_start in pack_compute_instances(profile, list(spec.compute_instances)):
            ci_profile = profile.compute_profiles[ci_name]
            placement = {'start': ci_start, 'size': ci_profile.size}
            actions.append({'action': 'create_compute_instance', 'gpu_instance_ref': new_ref, 'gpu_instance_profile': profile.name,
                            'profile': ci_name, 'profile_id': ci_profile.id, 'placement': placement})
            cis.append({'id': None, 'profile': ci_name, 'placement': dict(placement)})
        after.append(_layout_entry(profile.name, start, profile.memory_slices, sorted(cis, key=lambda c: c['placement']['start'])))
    after.sort(key=lambda e: e['placement']['start'])
    final = occupancy
    for start, spec in created:
        final = final.with_instance(catalog.get(spec.profile), start)
    return Plan(gpu.index, layout_of(gpu), after, actions, analyze(catalog, final))
