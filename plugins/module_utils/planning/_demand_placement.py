# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The fleet's GPUs as the demand planner sees them, and where one requested MIG device goes.

Pure Python: no NVML, no Ansible imports. Each GPU is read from nvidia_mig_facts' data (instances with
placements, the pods that hold each one); a device is placed in stages, least disruptive first: an idle
instance that exists, a new one in free slices, one in slices that idle instances free, then (by policy)
one that evicts lower-priority pods. Never an instance a pod holds beyond what the policy allows.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import itertools

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_input import DemandPlanError, _floor_of
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import Gpu
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog, GeometryError, Occupancy, placeable_count, slice_states
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import MigProfile

# Stages of decision 2, in the order they are tried.
_EXISTING, _CREATE, _DESTROY_IDLE, _EVICT = 0, 1, 2, 3
_STAGE_DISRUPTION = {_EXISTING: 'none', _CREATE: 'create-only', _DESTROY_IDLE: 'destroy-idle', _EVICT: 'evict'}


# ---- fleet state ----------------------------------------------------------------------------

class _Instance(object):
    __slots__ = ('id', 'profile', 'start', 'compute_instances', 'holders', 'pids', 'new', 'gone', 'serves', 'released')

    def __init__(self, instance_id, profile, start, compute_instances=(), holders=(), pids=(), new=False):
        self.id = instance_id
        self.profile = profile
        self.start = start
        self.compute_instances = tuple(compute_instances)
        self.holders = sorted(holders)
        self.pids = sorted(pids)
        self.new = new
        self.gone = False
        self.serves = []
        self.released = False

    def copy(self):
        twin = _Instance(self.id, self.profile, self.start, self.compute_instances, self.holders, self.pids, self.new)
        twin.gone = self.gone
        twin.serves = list(self.serves)
        twin.released = self.released
        return twin

    @property
    def free(self):
        """Exists, nobody holds it, nothing runs on it, no waiting pod was given it."""
        return not (self.gone or self.holders or self.pids or self.serves)


# (profiles as given, their Catalog): a fleet has a few models, and a plan reads every GPU's profiles (a benchmark
# plans thousands of times). Compared by value, kept as copies: a caller's list may change after the call.
_CATALOGS = []
_CATALOGS_KEPT = 16


def _catalog(profiles):
    for known, catalog in _CATALOGS:
        if known == profiles:
            return catalog
    catalog = Catalog.from_data(profiles)
    _CATALOGS.insert(0, (copy.deepcopy(profiles), catalog))
    del _CATALOGS[_CATALOGS_KEPT:]
    return catalog


class _Gpu(object):
    def __init__(self, node, data, reshape, floor):
        """``data``: one GPU of the node's nvidia_mig facts (the host model's data and each instance's ``allocated_to``)."""
        gpu = Gpu.from_dict(data)
        holders = dict((gi['id'], gi.get('allocated_to') or []) for gi in data.get('gpu_instances') or [])
        self.node = node
        self.index = gpu.index
        self.uuid = gpu.uuid
        self.name = gpu.name
        self.catalog = _catalog(gpu.profiles)
        self.reshape = reshape
        self.floor = floor
        self.instances = []
        for gi in gpu.gpu_instances:
            self.instances.append(_Instance(gi.id, gi.profile, gi.start, [ci.profile for ci in gi.compute_instances],
                                            holders[gi.id], gi.pids()))
        self.instances.sort(key=lambda i: i.start)
        self.changed = False
        try:
            # the facts' instances must be a placement NVML could make: valid starts, no overlap
            slice_states(self.catalog, [(i.profile, i.start) for i in self.instances])
            self.occupancy()
        except GeometryError as exc:
            raise DemandPlanError('node %s GPU %s: %s' % (node, self.index, exc))

    def copy(self):
        twin = _Gpu.__new__(_Gpu)
        twin.__dict__.update(self.__dict__)
        twin.instances = [i.copy() for i in self.instances]
        return twin

    def live(self):
        return [i for i in self.instances if not i.gone]

    def occupancy(self, without=()):
        return Occupancy.of(self.catalog, [(i.profile, i.start) for i in self.live() if i not in without])

    def label(self):
        return 'node %s GPU %s' % (self.node, self.index)


# The most memory slices a GPU has (8 on A100 to B300): room is counted per instance size up to it, so the
# room of GPUs of different models compares position by position.
_MAX_SLICES = 8


def room(catalog, occupancy):
    """What a placement should spare, per instance size (memory slices), largest first: the most instances of
    one plain profile of that size that alone still fit. Same length for every model, so GPUs of different
    models compare position by position. (Adding up the profiles of a size, 4g and 3g, instead of taking
    the best, placed fewer requests in benchmarks/demand.py: docs/demand.md.)"""
    room = [0] * _MAX_SLICES
    for profile in catalog.profiles.values():
        if profile.plain and 0 < profile.memory_slices <= _MAX_SLICES:
            position = _MAX_SLICES - profile.memory_slices
            room[position] = max(room[position], placeable_count(catalog, occupancy, profile))
    return tuple(room)


def _gpus_of(nodes, policy):
    if not isinstance(nodes, dict):
        raise DemandPlanError('nodes must map each node name to its nvidia_mig facts (or their gpus list)')
    gpus = []
    for node in sorted(nodes):
        facts = nodes[node]
        data = facts.get('gpus') if isinstance(facts, dict) else facts
        if not isinstance(data, list):
            raise DemandPlanError('nodes[%s]: expected the nvidia_mig facts (with gpus) or a list of GPUs' % node)
        for gpu in sorted(data, key=lambda g: g.get('index', 0)):
            if not isinstance(gpu, dict) or 'index' not in gpu:
                raise DemandPlanError('nodes[%s]: every GPU needs its index (as nvidia_mig_facts returns it)' % node)
            if not gpu.get('profiles') or gpu.get('allocated_to'):
                # No MIG (or its profiles unknown until MIG is on), or a pod holds the whole GPU.
                continue
            try:
                gpus.append(_Gpu(node, gpu, node in policy['reshape_nodes'], _floor_of(policy['floor'], node, gpu['index'])))
            except (KeyError, TypeError) as exc:
                raise DemandPlanError('nodes[%s] GPU %s: not nvidia_mig facts (missing %s)' % (node, gpu.get('index'), exc))
    return gpus


# ---- placing one device ---------------------------------------------------------------------

def _destroyable(gpu, stage, pod, policy, evicted):
    """The instances that pass ``stage`` may destroy on ``gpu`` for ``pod``, floor kept."""
    if not gpu.reshape or stage < _DESTROY_IDLE:
        return []
    found = []
    for inst in gpu.live():
        if inst.serves or (inst.pids and not inst.holders):
            # given to a waiting pod in this plan, or processes that no pod owns: never touched
            continue
        if inst.holders:
            if stage < _EVICT:
                continue
            threshold = policy['evict_below_priority']
            priorities = [policy['running_priorities'].get(h) for h in inst.holders if h not in evicted]
            if any(p is None or p >= threshold or p >= pod['priority'] for p in priorities):
                continue
        found.append(inst)
    return found


def _floor_allows(gpu, destroyed):
    """Whether destroying ``destroyed`` leaves at least the floor of each profile it takes from."""
    counts = {}
    for inst in gpu.live():
        if inst not in destroyed:
            counts[inst.profile] = counts.get(inst.profile, 0) + 1
    return all(counts.get(inst.profile, 0) >= gpu.floor.get(inst.profile, 0) for inst in destroyed)


def _best_start(gpu, profile, occupancy):
    """(loss, start) of the placement of ``profile`` that takes the least room, or None. Between equal
    losses, where an instance of that profile released by this plan sits (it is kept), then the lowest start."""
    before = room(gpu.catalog, occupancy)
    released = [i.start for i in gpu.instances if i.released and i.gone and i.profile == profile.name]
    best = None
    for start in profile.starts:
        if occupancy.can_place(profile, start):
            after = room(gpu.catalog, occupancy.with_instance(profile, start))
            candidate = (tuple(b - a for b, a in zip(before, after)), start not in released, start)
            if best is None or candidate < best:
                best = candidate
    return None if best is None else (best[0], best[2])


def _option(gpu, profile_name, stage, pod, policy, budget_left, evicted):
    """The cheapest way to give ``pod`` one ``profile_name`` on ``gpu`` within ``stage``: (key, apply) or None."""
    for inst in gpu.live():
        if inst.profile == profile_name and inst.free:
            return (_EXISTING, 0, 0, 0, (), inst.start), ('existing', inst)
    profile = gpu.catalog.get(profile_name)
    if profile is None or stage < _CREATE or not gpu.reshape or (not gpu.changed and budget_left == 0):
        return None
    changed_rank = 0 if gpu.changed else 1
    placed = _best_start(gpu, profile, gpu.occupancy())
    if placed is not None:
        return (_CREATE, 0, 0, 0, placed[0], changed_rank, placed[1]), ('create', [], placed[1])
    candidates = _destroyable(gpu, stage, pod, policy, evicted)
    for size in range(1, len(candidates) + 1):
        best = None
        for subset in itertools.combinations(candidates, size):
            if not _floor_allows(gpu, subset):
                continue
            placed = _best_start(gpu, profile, gpu.occupancy(without=subset))
            if placed is None:
                continue
            pods = sorted(set(h for inst in subset for h in inst.holders if h not in evicted))
            slices = sum(gpu.catalog.get(inst.profile).memory_slices for inst in subset)
            key = (_EVICT if pods else _DESTROY_IDLE, size, len(pods), slices, placed[0], changed_rank, placed[1])
            if best is None or key < best[0]:
                best = (key, ('create', list(subset), placed[1]))
        if best is not None:
            return best
    return None


def _apply(gpu, profile_name, choice, pod, evicted):
    kind = choice[0]
    gpu_evictions = []
    if kind == 'existing':
        choice[1].serves.append(pod['pod'])
        return gpu_evictions
    dummy, destroyed, start = choice
    for inst in gpu.instances:
        if inst.released and inst.gone and inst.profile == profile_name and inst.start == start:
            # an idle instance released by this plan where the new one would go: kept, nothing changes
            inst.gone = False
            inst.serves.append(pod['pod'])
            return gpu_evictions
    for inst in destroyed:
        inst.gone = True
        for holder in inst.holders:
            if holder not in evicted:
                evicted[holder] = pod['pod']
                gpu_evictions.append(holder)
    created = _Instance(None, profile_name, start, new=True)
    created.serves.append(pod['pod'])
    gpu.instances.append(created)
    gpu.instances.sort(key=lambda i: (i.start, i.gone))
    gpu.changed = True
    return gpu_evictions


def _try_node(node_gpus, pod, stage, policy, budget_left, evicted):
    """Serve every device of ``pod`` on one node: (cost, new GPU states, evictions) or None."""
    gpus = [g.copy() for g in node_gpus]
    evicted = dict(evicted)
    cost = []
    order = []
    for profile_name in sorted(pod['requests'], key=lambda n: (-MigProfile.parse(n).gpu_slices, n)):
        order.extend([profile_name] * pod['requests'][profile_name])
    for profile_name in order:
        best = None
        left = None
        if budget_left is not None:
            left = budget_left - sum(1 for mine, was in zip(gpus, node_gpus) if mine.changed and not was.changed)
        for position, gpu in enumerate(gpus):
            option = _option(gpu, profile_name, stage, pod, policy, left, evicted)
            if option is not None and (best is None or (option[0], position) < best[0]):
                best = ((option[0], position), option[1])
        if best is None:
            return None
        _apply(gpus[best[0][1]], profile_name, best[1], pod, evicted)
        cost.append(best[0][0])
    worst = max(c[0] for c in cost)
    return (worst, sum(1 for c in cost if c[0] != _EXISTING), sorted(c[1:] for c in cost)), gpus, evicted
