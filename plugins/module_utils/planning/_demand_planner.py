# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Fleet demand planner: pending pods' MIG requests + every node's GPUs -> one readable plan.

Pure Python: no NVML, no Ansible imports. Inputs are plain data: the pods that wait for
``nvidia.com/mig-<profile>`` resources, each node's GPUs as ``gpufleet.mig.nvidia_mig_facts``
returns them (instances with placements, ``allocated_to`` naming the pods that hold each one)
and a policy. The output is plain data: per node and GPU the target instances and the ordered
actions, the requests each change serves, the unmet demand explained, and per changed node a
generated layout in mig-parted's format for the in-place switch. docs/demand.md explains it.

Decisions:

1. A pod is served whole on one node (a pod runs on one node): all its MIG devices or none.
   Pods are served by priority (highest first), then creation time, then ``namespace/name``.
2. Least disruption first, in passes over every pod still waiting: pass 1 uses instances that
   exist and nobody holds (no change) and creates instances in free slices (create only);
   pass 2 may also destroy idle instances nobody holds (destroy and create); pass 3, only with
   ``evict_below_priority``, may destroy instances held by pods whose priority is below both
   that threshold and the waiting pod's, naming them for eviction. An instance a pod holds, or
   where a process runs, is never touched otherwise; neither is a GPU held whole.
3. Only GPUs of nodes the policy lets reshape change (``reshape_nodes``, default every node);
   on the others only existing free instances serve. At most ``max_gpus_per_run`` GPUs change.
4. The floor (``floor``: per node, the instances each GPU keeps whatever the demand) is never
   destroyed below its count: instances of a floor profile go only while more than the floor remain.
5. Where a new instance goes: the placement that takes the least room from bigger profiles
   (the placeable counts of every profile, largest first, lose the least), on the GPU where that
   loss is least; ties: a GPU already changing, then node, GPU index and start. Destroys: the
   fewest instances (then pods evicted, then memory slices) that make the request fit.
6. Destroyed idle instances are not re-created: nobody waits for them (the declared layout's
   next switch re-creates them).
7. Deterministic: every iteration is over sorted keys; no set or dict order decides anything.
8. Unmet demand: one line per profile, with the cause and the nearest GPU (fewest pods in
   the way of any placement of the profile).
9. With ``release_idle`` (off by default), every idle instance nobody holds and the floor does not
   keep counts as free slices before anything is placed, and is destroyed unless a new instance
   of its profile goes exactly where it is (then it is kept and serves). Instances then live only
   while a pod needs them (above the floor), and requests are placed on free slices instead of
   being bound to instances left wherever earlier demand put them. GPUs that change only by
   releasing count toward ``max_gpus_per_run`` and keep their instances beyond it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import itertools
import json

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import profile_of_resource
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import instance_pids
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import (
    Catalog,
    GeometryError,
    Occupancy,
    placeable_count,
    slice_mask,
    slice_states,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import MigProfile, ProfileError

LAYOUT_PREFIX = 'demand-'
DISRUPTION_ORDER = ('none', 'create-only', 'destroy-idle', 'evict')
POLICY_KEYS = ('reshape_nodes', 'floor', 'max_gpus_per_run', 'evict_below_priority', 'running_priorities', 'release_idle')
# Stages of decision 2, in the order they are tried.
_EXISTING, _CREATE, _DESTROY_IDLE, _EVICT = 0, 1, 2, 3
_STAGE_DISRUPTION = {_EXISTING: 'none', _CREATE: 'create-only', _DESTROY_IDLE: 'destroy-idle', _EVICT: 'evict'}


class DemandPlanError(GpufleetError, ValueError):
    """Input the demand planner cannot use; the message is one line naming what and where."""


# ---- input ----------------------------------------------------------------------------------

def _int(value, what):
    if isinstance(value, bool) or not isinstance(value, int):
        raise DemandPlanError('%s must be an integer, got %r' % (what, value))
    return value


def pod_requests(pod):
    """``{profile: count}`` of the MIG devices a Kubernetes pod object asks for.

    Extended resources are requested through limits (requests, when given, must equal them:
    Kubernetes docs, "Manage resources for containers", extended resources). The pod needs the
    sum over its containers, or the most any one init container asks, whichever is larger
    (Kubernetes docs, "Init containers", resources).
    """
    spec = pod.get('spec') or {}

    def container_requests(container):
        resources = container.get('resources') or {}
        merged = dict(resources.get('requests') or {})
        merged.update(resources.get('limits') or {})
        counts = {}
        for resource in sorted(merged):
            profile = profile_of_resource(resource)
            if profile is not None:
                counts[profile] = counts.get(profile, 0) + int(merged[resource])
        return counts

    total = {}
    for container in spec.get('containers') or []:
        for profile, count in container_requests(container).items():
            total[profile] = total.get(profile, 0) + count
    for container in spec.get('initContainers') or []:
        for profile, count in container_requests(container).items():
            total[profile] = max(total.get(profile, 0), count)
    return dict((profile, count) for profile, count in total.items() if count)


def _pending_pod(entry, position):
    """One waiting pod in plain form: {pod, priority, priority_class, created, requests}."""
    where = 'pending[%d]' % position
    if not isinstance(entry, dict):
        raise DemandPlanError('%s must be a mapping (a pod or {pod, priority, requests}), got %s' % (where, type(entry).__name__))
    if 'metadata' in entry or 'spec' in entry:   # a Kubernetes Pod object
        metadata = entry.get('metadata') or {}
        spec = entry.get('spec') or {}
        if not metadata.get('name'):
            raise DemandPlanError('%s: the pod has no metadata.name' % where)
        name = '%s/%s' % (metadata.get('namespace') or 'default', metadata['name'])
        try:
            requests = pod_requests(entry)
        except (TypeError, ValueError):
            raise DemandPlanError('%s (%s): a MIG resource count is not a whole number' % (where, name))
        priority = spec.get('priority') or 0
        priority_class = spec.get('priorityClassName') or ''
        created = metadata.get('creationTimestamp') or ''
    else:
        name = entry.get('pod')
        if not isinstance(name, str) or name.count('/') != 1 or not all(name.split('/')):
            raise DemandPlanError("%s: 'pod' must be 'namespace/name', got %r" % (where, name))
        raw = entry.get('requests')
        if not isinstance(raw, dict):
            raise DemandPlanError("%s (%s): 'requests' must map nvidia.com/mig-<profile> (or a profile) to a count" % (where, name))
        requests = {}
        for key in sorted(raw):
            profile = profile_of_resource(key) if str(key).startswith('nvidia.com/') else key
            try:
                parsed = MigProfile.parse(profile) if profile is not None else None
            except ProfileError as exc:
                raise DemandPlanError('%s (%s): %s' % (where, name, exc))
            if parsed is None or parsed.is_compute_instance_profile:
                raise DemandPlanError('%s (%s): %r is not a MIG device resource (nvidia.com/mig-<profile>)' % (where, name, key))
            count = _int(raw[key], '%s (%s) count of %s' % (where, name, key))
            if count < 0:
                raise DemandPlanError('%s (%s): count of %s must not be negative' % (where, name, key))
            if count:
                requests[parsed.name] = requests.get(parsed.name, 0) + count
        priority = entry.get('priority', 0)
        priority_class = entry.get('priority_class') or ''
        created = entry.get('created') or ''
    return {'pod': name, 'priority': _int(priority, '%s (%s) priority' % (where, name)),
            'priority_class': str(priority_class), 'created': str(created), 'requests': requests}


def _policy(policy, node_names):
    policy = dict(policy or {})
    unknown = sorted(set(policy) - set(POLICY_KEYS))
    if unknown:
        raise DemandPlanError('policy: unknown key(s) %s (known: %s)' % (', '.join(unknown), ', '.join(POLICY_KEYS)))
    reshape = policy.get('reshape_nodes')
    if reshape is None:
        reshape = list(node_names)
    if not isinstance(reshape, list) or not all(isinstance(n, str) for n in reshape):
        raise DemandPlanError('policy.reshape_nodes must be a list of node names')
    max_gpus = policy.get('max_gpus_per_run')
    if max_gpus is not None and _int(max_gpus, 'policy.max_gpus_per_run') < 0:
        raise DemandPlanError('policy.max_gpus_per_run must not be negative')
    evict_below = policy.get('evict_below_priority')
    if evict_below is not None:
        _int(evict_below, 'policy.evict_below_priority')
    floor = policy.get('floor') or {}
    if not isinstance(floor, dict):
        raise DemandPlanError('policy.floor must map a node to {profile: count} or {GPU index: {profile: count}}')
    release_idle = policy.get('release_idle', False)
    if not isinstance(release_idle, bool):
        raise DemandPlanError('policy.release_idle must be true or false, got %r' % (release_idle,))
    running = policy.get('running_priorities') or {}
    if not isinstance(running, dict):
        raise DemandPlanError("policy.running_priorities must map 'namespace/name' to a priority")
    for pod in sorted(running):
        _int(running[pod], 'policy.running_priorities[%s]' % pod)
    return {'reshape_nodes': sorted(set(reshape)), 'floor': floor, 'max_gpus_per_run': max_gpus,
            'evict_below_priority': evict_below, 'running_priorities': running, 'release_idle': release_idle}


def _floor_of(floor, node, index):
    """The floor of one GPU: ``floor[node]`` is {profile: count} for every GPU or {GPU index: {profile: count}}."""
    node_floor = floor.get(node) or {}
    if not isinstance(node_floor, dict):
        raise DemandPlanError('policy.floor[%s] must be a mapping' % node)
    per_gpu = [k for k in node_floor if isinstance(k, int) or (isinstance(k, str) and k.isdigit())]
    if per_gpu:
        node_floor = node_floor.get(index, node_floor.get(str(index))) or {}
    result = {}
    for profile in sorted(node_floor):
        result[profile] = _int(node_floor[profile], 'policy.floor[%s] count of %s' % (node, profile))
    return result


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


class _Gpu(object):
    def __init__(self, node, data, reshape, floor):
        self.node = node
        self.index = data.get('index')
        self.uuid = data.get('uuid')
        self.name = data.get('name')
        self.catalog = Catalog.from_data(data['profiles'])
        self.reshape = reshape
        self.floor = floor
        self.instances = []
        for gi in data.get('gpu_instances') or []:
            cis = [ci['profile'] for ci in gi.get('compute_instances') or []]
            pids = instance_pids(gi)
            self.instances.append(_Instance(gi['id'], gi['profile'], gi['placement']['start'], cis,
                                            gi.get('allocated_to') or [], pids))
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


# ---- the plan -------------------------------------------------------------------------------

def plan_demand(nodes, pending, policy=None):
    """The fleet plan (plain data, see docs/demand.md). Raises DemandPlanError on bad input."""
    if not isinstance(pending, list):
        raise DemandPlanError('pending must be a list of pods')
    pods = [_pending_pod(entry, position) for position, entry in enumerate(pending)]
    names = [p['pod'] for p in pods]
    duplicates = sorted(set(n for n in names if names.count(n) > 1))
    if duplicates:
        raise DemandPlanError('pending: pod %s is listed more than once' % duplicates[0])
    if not isinstance(nodes, dict):
        raise DemandPlanError('nodes must map each node name to its nvidia_mig facts (or their gpus list)')
    settings = _policy(policy, sorted(nodes))
    gpus = _gpus_of(nodes, settings)
    before = dict((id(g), [i.copy() for i in g.instances]) for g in gpus)
    by_node = {}
    for gpu in gpus:
        by_node.setdefault(gpu.node, []).append(gpu)
    waiting = sorted((p for p in pods if p['requests']), key=lambda p: (-p['priority'], p['created'], p['pod']))
    if settings['release_idle']:
        _release_idle(gpus)
    served = {}
    evicted = {}
    stages = [_CREATE, _DESTROY_IDLE] + ([_EVICT] if settings['evict_below_priority'] is not None else [])
    for stage in stages:
        # What failed stays failed until something is served: the state and the budget change only then.
        failed = set()
        for pod in waiting:
            if pod['pod'] in served:
                continue
            signature = (tuple(sorted(pod['requests'].items())), pod['priority'] if stage == _EVICT else None)
            if signature in failed:
                continue
            budget_left = None
            if settings['max_gpus_per_run'] is not None:
                budget_left = settings['max_gpus_per_run'] - sum(1 for g in gpus if g.changed)
            best = None
            for node in sorted(by_node):
                tried = _try_node(by_node[node], pod, stage, settings, budget_left, evicted)
                if tried is not None and (best is None or (tried[0], node) < best[0]):
                    best = ((tried[0], node), tried[1], tried[2])
            if best is None:
                failed.add(signature)
                continue
            failed = set()
            node = best[0][1]
            for mine, theirs in zip(by_node[node], best[1]):
                mine.__dict__.update(theirs.__dict__)
            evicted = best[2]
            served[pod['pod']] = node
    if settings['release_idle']:
        _keep_released_within_budget(gpus, settings['max_gpus_per_run'])
    return _report(gpus, before, pods, waiting, served, evicted, settings)


def _release_idle(gpus):
    """Decision 9: the idle instances nobody holds and the floor does not keep become free slices."""
    for gpu in gpus:
        if not gpu.reshape:
            continue
        for inst in sorted(gpu.live(), key=lambda i: -i.start):
            if inst.free and _floor_allows(gpu, [inst]):
                inst.gone = True
                inst.released = True


def _really_changed(gpu):
    return any(i.new != i.gone for i in gpu.instances)


def _keep_released_within_budget(gpus, budget):
    """GPUs whose only change is releasing idle instances give them back, last first, beyond the GPU budget."""
    if budget is None:
        return
    changed = [g for g in gpus if _really_changed(g)]
    release_only = [g for g in changed if not any(i.new or (i.gone and not i.released) for i in g.instances)]
    for gpu in reversed(release_only):
        if len(changed) <= budget:
            break
        for inst in gpu.instances:
            if inst.released:
                inst.gone = False
                inst.released = False
        changed.remove(gpu)


def _instance_view(gpu, inst):
    profile = gpu.catalog.get(inst.profile)
    view = {'id': inst.id, 'profile': inst.profile, 'placement': {'start': inst.start, 'size': profile.memory_slices},
            'allocated_to': list(inst.holders)}
    if inst.serves:
        view['serves'] = list(inst.serves)
    return view


def _actions(gpu, evicted):
    actions = []
    for inst in sorted((i for i in gpu.instances if i.gone and not i.new), key=lambda i: i.start):
        profile = gpu.catalog.get(inst.profile)
        action = {'action': 'destroy_gpu_instance', 'gpu_instance_id': inst.id, 'profile': inst.profile,
                  'placement': {'start': inst.start, 'size': profile.memory_slices}}
        if inst.holders:
            action['evict'] = [h for h in inst.holders if h in evicted]
        actions.append(action)
    for inst in sorted((i for i in gpu.instances if i.new and not i.gone), key=lambda i: i.start):
        profile = gpu.catalog.get(inst.profile)
        full = profile.full_compute_profile
        actions.append({'action': 'create_gpu_instance', 'profile': inst.profile, 'profile_id': profile.id,
                        'placement': {'start': inst.start, 'size': profile.memory_slices},
                        'compute_instance': full.name if full is not None else inst.profile, 'serves': list(inst.serves)})
    return actions


def _mig_devices(gpu):
    """The GPU's target instances as mig-parted ``mig-devices`` (compute instances kept as they are)."""
    devices = {}
    for inst in gpu.live():
        keys = [inst.profile]
        if inst.compute_instances and inst.compute_instances != (inst.profile,):
            keys = list(inst.compute_instances)
        for key in keys:
            devices[key] = devices.get(key, 0) + 1
    return devices


def generated_layout(node_gpus):
    """{'name', 'config'}: one mig-parted entry per MIG GPU of the node (``devices: [index]``), named
    ``demand-<hash of the entries>``, so the same target always gets the same name."""
    entries = [{'devices': [gpu.index], 'mig-enabled': True, 'mig-devices': _mig_devices(gpu)}
               for gpu in sorted(node_gpus, key=lambda g: g.index)]
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode('utf-8')).hexdigest()[:12]
    name = LAYOUT_PREFIX + digest
    return {'name': name, 'config': {name: entries}}


def _report(gpus, before, pods, waiting, served, evicted, settings):
    nodes = {}
    for node in sorted(set(g.node for g in gpus)):
        node_gpus = [g for g in gpus if g.node == node]
        gpu_views = []
        worst = 'none'
        for gpu in node_gpus:
            actions = _actions(gpu, evicted)
            if any(a['action'] == 'destroy_gpu_instance' and a.get('evict') for a in actions):
                level = 'evict'
            elif any(a['action'] == 'destroy_gpu_instance' for a in actions):
                level = 'destroy-idle'
            elif actions:
                level = 'create-only'
            else:
                level = 'none'
            if DISRUPTION_ORDER.index(level) > DISRUPTION_ORDER.index(worst):
                worst = level
            gpu_views.append({
                'index': gpu.index, 'uuid': gpu.uuid, 'changed': bool(actions), 'disruption': level,
                'before': [_instance_view(gpu, i) for i in before[id(gpu)]],
                'target': [_instance_view(gpu, i) for i in sorted(gpu.live(), key=lambda i: i.start)],
                'actions': actions,
            })
        view = {'disruption': worst, 'changed': worst != 'none', 'cordon': worst in ('destroy-idle', 'evict'),
                'evictions': sorted(p for p, by in evicted.items() if any(p in i.holders for g in node_gpus for i in g.instances if i.gone)),
                'gpus': gpu_views}
        if view['changed']:
            view['layout'] = generated_layout(node_gpus)
        nodes[node] = view
    served_list = []
    for pod in waiting:
        if pod['pod'] in served:
            node = served[pod['pod']]
            devices = []
            for gpu in (g for g in gpus if g.node == node):
                for inst in sorted(gpu.live(), key=lambda i: i.start):
                    if pod['pod'] in inst.serves:
                        devices.append({'gpu': gpu.index, 'profile': inst.profile, 'start': inst.start,
                                        'instance': inst.id if not inst.new else 'new'})
            served_list.append({'pod': pod['pod'], 'node': node, 'devices': devices})
    unmet_pods = [p for p in waiting if p['pod'] not in served]
    why = _explain_unmet(gpus, unmet_pods, settings)
    unmet = [why[profile] for profile in sorted(why)]
    changed = sum(1 for g in gpus if _really_changed(g))
    lines = []
    for node in sorted(nodes):
        if nodes[node]['changed']:
            for gpu in nodes[node]['gpus']:
                if gpu['changed']:
                    lines.append('%s GPU %s (%s): %s' % (node, gpu['index'], gpu['disruption'], '; '.join(_action_text(a) for a in gpu['actions'])))
    lines.extend(unmet)
    lines.append('%d of %d waiting pod(s) served, %d GPU(s) changed, %d pod(s) to evict'
                 % (len(served_list), len(waiting), changed, len(evicted)))
    # Per unmet pod, the lines of the profiles it asks for: the reason told on the pod (an Event).
    unmet_reasons = dict((p['pod'], [why[profile] for profile in sorted(p['requests'])]) for p in unmet_pods)
    return {'nodes': nodes, 'served': served_list, 'unmet': unmet, 'unmet_pods': [p['pod'] for p in unmet_pods],
            'unmet_reasons': unmet_reasons, 'evictions': sorted(evicted), 'gpus_changed': changed, 'lines': lines}


def _action_text(action):
    where = '%s at %d' % (action['profile'], action['placement']['start'])
    if action['action'] == 'create_gpu_instance':
        return 'create %s for %s' % (where, ', '.join(action['serves']))
    text = 'destroy %s (id %s)' % (where, action['gpu_instance_id'])
    if action.get('evict'):
        text += ', evicting %s' % ', '.join(action['evict'])
    return text


def _in_the_way(gpu, profile):
    """(key, pods, instances with processes outside pods) in the way of the nearest placement of ``profile``.

    Nearest: the fewest instances with processes no pod owns (they never move), then the fewest
    pods, then the fewest instances in use."""
    best = None
    for start in profile.starts:
        bits = slice_mask(start, profile.memory_slices)
        blocking = [i for i in gpu.live()
                    if slice_mask(i.start, gpu.catalog.get(i.profile).memory_slices) & bits and (i.holders or i.pids or i.serves)]
        pods = sorted(set(h for i in blocking for h in list(i.holders) + list(i.serves)))
        processes = sum(1 for i in blocking if i.pids and not i.holders)
        key = (processes, len(pods), len(blocking), start)
        if best is None or key < best[0]:
            best = (key, pods, processes)
    return best


def _explain_unmet(gpus, unmet_pods, settings):
    """{profile: the one line that explains its unmet demand}."""
    wanted = {}
    for pod in unmet_pods:
        for profile, count in pod['requests'].items():
            entry = wanted.setdefault(profile, [0, []])
            entry[0] += count
            entry[1].append(pod['pod'])
    lines = {}
    for profile_name in sorted(wanted):
        count, pods = wanted[profile_name]
        head = '%s: %d device(s) for %s unmet' % (profile_name, count, ', '.join(pods))
        offering = [g for g in gpus if g.catalog.get(profile_name) is not None]
        if not offering:
            lines[profile_name] = '%s: no GPU of the fleet offers this profile' % head
            continue
        open_gpus = [g for g in offering if g.reshape]
        if not open_gpus:
            lines[profile_name] = ('%s: only nodes the policy does not let reshape offer it (%s)'
                                   % (head, ', '.join(sorted(set(g.node for g in offering)))))
            continue
        budget = settings['max_gpus_per_run']
        changed = sum(1 for g in gpus if _really_changed(g))
        nearest = None
        for gpu in open_gpus:
            way = _in_the_way(gpu, gpu.catalog.get(profile_name))
            if nearest is None or (way[0], gpu.node, gpu.index) < nearest[0]:
                nearest = ((way[0], gpu.node, gpu.index), gpu, way[1], way[2])
        dummy, gpu, in_way, processes = nearest
        if budget is not None and changed >= budget and not in_way and not processes:
            lines[profile_name] = '%s: max_gpus_per_run (%d) reached; nearest is %s' % (head, budget, gpu.label())
            continue
        whole = gpu.catalog.get(profile_name).memory_slices == gpu.catalog.total_slices
        cause = 'no GPU is free of pods' if whole else 'no GPU has room for it without touching instances pods hold'
        if not in_way and not processes:
            cause = 'the floor or the other waiting pods keep every placement taken'
        detail = '%d pod(s)%s' % (len(in_way), (' (%s)' % ', '.join(in_way)) if in_way else '')
        if processes:
            detail += ', processes outside pods on %d instance(s)' % processes
        lines[profile_name] = '%s: %s; nearest is %s, %s' % (head, cause, gpu.label(), detail)
    return lines
