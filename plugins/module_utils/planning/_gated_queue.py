# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Gated MIG pods decided one at a time, in kube-scheduler's queue order, each given its own instance.

Pure Python: no NVML, no Ansible imports. A pod held back by the scheduling gate ``gpufleet.mig/slice``
(k8s/_slice_gate.SLICE_GATE) is not seen by kube-scheduler; :class:`GatedQueue` decides for it, against the fleet as it is plus its own decisions
still under way, in the order kube-scheduler's PrioritySort queue would take the pods (priority descending,
then creation time, then namespace/name). Per pod, the first of these that a node the pod may use offers
(_node_fit's filters; among equals the most allocated node, as NodeResourcesFit's MostAllocated scores it, or the
least allocated with ``placement: spread``, then the lowest GPU index and the lowest start, as NVIDIA's DRA driver
takes "the first match"):

1. ``serve``: an idle instance of the pod's profile, as it is;
2. ``create``: a new instance in free slices;
3. ``reshape``: idle instances of other profiles destroyed (the fewest memory slices), then the create.

Never an instance a pod holds (by device id) or one reserved for a pod the queue pinned and that is on its way:
those are not idle; nor an idle one a pod could be given before the destroy runs (``unsafe``,
planning/_destroy_guard). A pod nobody can serve keeps its one-line reason and is released (gate removed, the
scheduler takes it as any pod) once it waited ``release_after`` seconds.

The event source drives the state transitions, each a method: :meth:`GatedQueue.reconcile` (every gated pod and
the GPUs at start), :meth:`~GatedQueue.add` (a pod gated), :meth:`~GatedQueue.decide` (take decisions),
:meth:`~GatedQueue.created` / :meth:`~GatedQueue.failed` (the run of a create or reshape), :meth:`~GatedQueue.bound`
(a pod holds an instance), :meth:`~GatedQueue.ended` (a pod ended or was deleted), :meth:`~GatedQueue.expire` (idle
instances given back under the release rule) and :meth:`~GatedQueue.destroyed` / :meth:`~GatedQueue.kept` (that
destroy's run). Decisions are :class:`Decision` values; :meth:`~GatedQueue.next_deadline` says when to call
:meth:`~GatedQueue.decide` and :meth:`~GatedQueue.expire` again.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
from dataclasses import dataclass, field, replace
from typing import Optional, Tuple

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_input import DemandPlanError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._destroy_guard import destroy_refusal
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gated_slots import PROCESS_HOLDER, Slot, read_gpus
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import MigProfile, ProfileError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._node_fit import NodeRoom, PodPlacementRules, refusal

SERVE, CREATE, RESHAPE, RELEASE, DESTROY = 'serve', 'create', 'reshape', 'release', 'destroy'
QUEUE, SMALLEST_FIRST = 'queue', 'smallest-first'
PACK, SPREAD = 'pack', 'spread'


@dataclass(frozen=True)
class GatedOptions:
    """``release_after``: seconds a gated pod may wait before it is released to the scheduler with its reason (a
    released pod is bound by kube-scheduler to any device of its profile, ahead of the queue: too short a wait costs
    placements, docs/demand.md). ``destroy_after``: seconds an instance stays idle after its pod ended before it is
    destroyed; None keeps it until another profile needs its slices (a reshape). ``order``: ``queue``
    (kube-scheduler's) or ``smallest-first`` (fewest slices first, then the queue's order). ``placement``: the node
    among those that can serve, ``pack`` (the most allocated first, as kube-scheduler's MostAllocated scores) or
    ``spread`` (the least allocated first, its default LeastAllocated). ``reshape``: False never decides a reshape (a
    pod that needs idle instances destroyed waits with that reason, and is released after ``release_after``)."""

    release_after: float = 1800.0
    destroy_after: Optional[float] = 2.0
    order: str = QUEUE
    placement: str = PACK
    reshape: bool = True

    def problem(self):
        """Why these options cannot run, in one line; None when they can."""
        if isinstance(self.release_after, bool) or not isinstance(self.release_after, (int, float)) or self.release_after < 0:
            return 'release_after must be a number of seconds, not negative: got %r' % (self.release_after,)
        if self.destroy_after is not None and (isinstance(self.destroy_after, bool) or not isinstance(self.destroy_after, (int, float))
                                               or self.destroy_after < 0):
            return 'destroy_after must be a number of seconds, not negative, or null (keep): got %r' % (self.destroy_after,)
        if self.order not in (QUEUE, SMALLEST_FIRST):
            return 'order must be %s or %s: got %r' % (QUEUE, SMALLEST_FIRST, self.order)
        if self.placement not in (PACK, SPREAD):
            return 'placement must be %s or %s: got %r' % (PACK, SPREAD, self.placement)
        if not isinstance(self.reshape, bool):
            return 'reshape must be true or false: got %r' % (self.reshape,)
        return None


@dataclass(frozen=True)
class GatedPod:
    """A pod asking for one MIG device: ``key`` namespace/name, ``profile``, its ``priority`` and ``created`` time
    (seconds; the queue's order), when the source saw it gated, its node rules (_node_fit), ``pinned``: the node its
    affinity was narrowed to (a pod whose instance another pod took), and ``gated``: False once its gate is gone
    (released, or pinned). The queue still makes instances for a pod without the gate; kube-scheduler binds it."""

    key: str
    profile: str
    priority: int = 0
    created: float = 0.0
    gated_since: float = 0.0
    rules: PodPlacementRules = field(default_factory=PodPlacementRules)
    pinned: Optional[str] = None
    gated: bool = True

    def slices(self):
        try:
            return MigProfile.parse(self.profile).gpu_slices
        except ProfileError:
            return 0


@dataclass(frozen=True)
class Decision:
    """What to do for one pod (or, for ``destroy``, one idle instance) and where: ``action`` is serve, create,
    reshape (``destroys`` first: (instance id, profile, start) of idle instances), release (gate removed, the pod
    unserved, ``reason`` says why) or destroy (an idle instance given back under the release rule)."""

    action: str
    pod: Optional[str] = None
    node: Optional[str] = None
    gpu: Optional[int] = None
    profile: Optional[str] = None
    start: Optional[int] = None
    instance: Optional[int] = None
    destroys: Tuple[Tuple[int, str, int], ...] = ()
    reason: Optional[str] = None

    def as_dict(self):
        return {'action': self.action, 'pod': self.pod, 'node': self.node, 'gpu': self.gpu, 'profile': self.profile,
                'start': self.start, 'instance': self.instance, 'reason': self.reason,
                'destroys': [{'id': i, 'profile': p, 'start': s} for i, p, s in self.destroys]}


def destroys_of(decisions):
    """(GPU index, profile, start) of the instances ``decisions`` destroy: a reshape's, and a destroy's own."""
    return [(d.gpu, profile, start) for d in decisions for dummy, profile, start in d.destroys] + \
        [(d.gpu, d.profile, d.start) for d in decisions if d.action == DESTROY]


class GatedQueue(object):
    """The gated pods, the fleet's instances and the decisions under way (see the module's docstring)."""

    def __init__(self, options=None):
        self.options = options or GatedOptions()
        problem = self.options.problem()
        if problem:
            raise DemandPlanError(problem)
        self.rooms = {}      # node -> NodeRoom
        self.gpus = []       # _Gpu, by node then index
        self.pods = {}       # key -> GatedPod not decided yet (gated, or pinned and waiting)
        self.reasons = {}    # key -> why nobody serves it now
        self.under_way = {}  # key -> (Decision, GatedPod, the slot given, the slots destroyed)
        self.holds = {}      # key -> (slot, rules) of a pod bound to an instance
        self.orphans = {}    # key -> (slot, destroyed) of a create whose pod ended before its run did
        self.doomed = {}     # (node, GPU, id) -> Slot decided destroyed, its run not done (an ungated pod may bind it)
        self.unsafe = {}     # (node or None, profile) -> why its idle instances are not destroyed now (_destroy_guard)
        self.busy = {}       # node -> the profiles its run under way destroys (see guard)

    # -- the fleet and the pods ------------------------------------------------------------------

    def reconcile(self, nodes, gpus, gated, pinned=(), now=0.0, unsafe=None, idle_since=None, busy=()):
        """Start (or start again) from what the cluster shows: ``nodes`` {node: NodeRoom}, ``gpus`` {node: its GPUs
        (annotation or facts, instances with ``allocated_to``)}, ``gated`` the GatedPods with the gate, ``pinned`` those
        whose gate is gone and whose affinity names a node, not bound yet (each reserves an idle instance of its profile
        on its node if one is there), ``unsafe`` and ``busy`` as for :meth:`guard`, ``idle_since`` {(node, profile):
        [times]} when pods left idle instances (_destroy_guard.FreedInstances; given to the idle ones by placement,
        oldest first). Decisions under way before are forgotten: the fleet says what they did. Returns :meth:`decide`'s
        decisions."""
        self.rooms = dict(nodes)
        self.gpus = [g for node in sorted(gpus) for g in read_gpus(node, gpus[node])]
        self.pods, self.reasons, self.under_way, self.holds, self.orphans, self.doomed = {}, {}, {}, {}, {}, {}
        self.guard(unsafe or {}, busy)
        times = dict((key, list(value)) for key, value in (idle_since or {}).items())
        for gpu in self.gpus:
            for slot in sorted(gpu.slots, key=lambda s: s.start):
                if slot.holder and slot.holder != PROCESS_HOLDER:
                    self.holds[slot.holder] = (slot, PodPlacementRules())
                elif slot.idle and slot.id is not None and times.get((slot.node, slot.profile)):
                    self._replace(slot, idle_since=times[(slot.node, slot.profile)].pop(0))
        for pod in pinned:
            slot = self._idle(pod, [pod.pinned], pod.profile)
            if slot is None:
                self.pods[pod.key] = pod
            else:
                self._replace(slot, reserved_for=pod.key)
                self.under_way[pod.key] = (Decision(SERVE, pod.key, slot.node, slot.gpu, slot.profile, slot.start, slot.id),
                                           pod, self._slot_at(slot.node, slot.gpu, slot.start), ())
        for pod in gated:
            self.add(pod)
        return self.decide(now)

    def add(self, pod):
        """A gated pod seen; a pod already known (waiting, under way or bound) is left as it is."""
        if pod.key not in self.pods and pod.key not in self.under_way and pod.key not in self.holds:
            self.pods[pod.key] = pod

    def waiting(self):
        """(GatedPod, reason or None) of the pods not decided yet, in the order they are decided."""
        return [(p, self.reasons.get(p.key)) for p in sorted(self.pods.values(), key=self._order)]

    def slots(self):
        """Every instance the queue knows, as :class:`Slot` values."""
        return [s for g in self.gpus for s in g.slots]

    def guard(self, unsafe, busy=()):
        """``unsafe`` {(node or None for any node, profile): why}: idle instances no run may destroy now (a pod could be
        given one before the destroy: _destroy_guard.unsafe_destroys), which a reshape and the release rule leave
        alone; ``busy`` {node: the profiles its run destroys}: the nodes where a run is under way, where until it told
        its outcome nothing is created or destroyed and no pod of a profile it destroys is served (an idle instance of
        another profile still serves: the run leaves it alone)."""
        self.unsafe = dict(unsafe)
        self.busy = dict((node, frozenset(profiles)) for node, profiles in dict(busy).items())

    def _destroyable(self, slot):
        return slot.idle and slot.id is not None and slot.node not in self.busy and \
            destroy_refusal(self.unsafe, slot.node, slot.profile) is None

    def next_deadline(self):
        """The earliest time a release or an idle instance's destroy is due (None: none is), for the source's timer."""
        times = [p.gated_since + self.options.release_after for p in self.pods.values() if p.gated]
        if self.options.destroy_after is not None:
            times.extend(s.idle_since + self.options.destroy_after for s in self.slots()
                         if self._destroyable(s) and s.idle_since is not None)
        return min(times) if times else None

    # -- deciding --------------------------------------------------------------------------------

    def _order(self, pod):
        queue = (-pod.priority, pod.created, pod.key)
        return (pod.slices(),) + queue if self.options.order == SMALLEST_FIRST else queue

    def decide(self, now):
        """Decide every waiting pod, one at a time in queue order: serve, create or reshape decisions (each under way
        until :meth:`bound`), and releases of gated pods unserved for ``release_after`` (the gate goes; the queue keeps
        deciding for them, kube-scheduler binds them); the others keep their reason (:meth:`waiting`)."""
        decisions = []
        for pod in sorted(self.pods.values(), key=self._order):
            decision, reason = self._decide_one(pod)
            if decision is not None:
                del self.pods[pod.key]
                self.reasons.pop(pod.key, None)
                decisions.append(decision)
            elif pod.gated and now - pod.gated_since >= self.options.release_after:
                self.pods[pod.key] = replace(pod, gated=False)
                self.reasons[pod.key] = reason
                decisions.append(Decision(RELEASE, pod.key, profile=pod.profile, reason=reason))
            else:
                self.reasons[pod.key] = reason
        return decisions

    def _nodes_for(self, pod):
        """(nodes the pod may use, {refusal: count} of the others)."""
        allowed, refused = [], {}
        for node in sorted(set(g.node for g in self.gpus)):
            why = 'not the node its affinity names' if pod.pinned and node != pod.pinned else \
                'a run under way there destroys %s' % pod.profile if pod.profile in self.busy.get(node, ()) else \
                refusal(pod.rules, self.rooms.get(node))
            if why:
                refused[why] = refused.get(why, 0) + 1
            else:
                allowed.append(node)
        return allowed, refused

    def _share(self, node):
        """The node's rank among those that can serve: its share of memory slices held or reserved, the most first
        when packing, the least first when spreading."""
        gpus = [g for g in self.gpus if g.node == node]
        total = sum(g.catalog.total_slices for g in gpus)
        share = float(sum(g.taken_slices() for g in gpus)) / total if total else 1.0
        return -share if self.options.placement == PACK else share

    def _idle(self, pod, nodes, profile):
        found = [(self._share(g.node), g.node, g.index, s.start, s) for g in self.gpus if g.node in nodes
                 for s in g.slots if s.profile == profile and s.idle and s.id is not None]
        return min(found, key=lambda f: f[:4])[4] if found else None

    def _decide_one(self, pod):
        """(Decision, None) for a pod that can be served now, else (None, its reason)."""
        allowed, refused = self._nodes_for(pod)
        if not allowed:
            return None, '0/%d nodes are available: %s' % (sum(refused.values()), ', '.join(
                '%d %s' % (n, why) for why, n in sorted(refused.items())))
        slot = self._idle(pod, allowed, pod.profile)
        if slot is not None:
            decision = Decision(SERVE, pod.key, slot.node, slot.gpu, slot.profile, slot.start, slot.id)
            return self._take(decision, pod, slot, ()), None
        offering = [g for g in self.gpus if g.node in allowed and g.catalog.get(pod.profile) is not None]
        if not offering:
            return None, 'no GPU of the %d node(s) it may use offers %s' % (len(allowed), pod.profile)
        offering = [g for g in offering if g.node not in self.busy]
        if not offering:
            return None, '%s: no idle instance, and a run is under way on every node it may use that offers it' % pod.profile
        shares = dict((node, self._share(node)) for node in allowed)
        best = None
        for gpu in offering:   # free slices first: a create anywhere before a reshape anywhere
            start = gpu.first_start(gpu.catalog.get(pod.profile), gpu.occupancy())
            key = (0, shares[gpu.node], gpu.node, gpu.index, start)
            if start is not None and (best is None or key < best[0]):
                best = (key, gpu, start, ())
        if best is None and not self.options.reshape:
            return None, '%s: no idle instance and no free slices on the %d GPU(s) that offer it (a reshape, which ' \
                'would destroy idle instances of other profiles, is off)' % (pod.profile, len(offering))
        for gpu in offering if best is None else ():
            idle = [s for s in gpu.slots if self._destroyable(s)]
            for size in range(1, len(idle) + 1):   # the fewest instances, then the fewest slices destroyed
                found = None
                for subset in itertools.combinations(idle, size):
                    start = gpu.first_start(gpu.catalog.get(pod.profile), gpu.occupancy(without=subset))
                    if start is not None:
                        slices = sum(gpu.catalog.get(s.profile).memory_slices for s in subset)
                        key = (1, size, slices, shares[gpu.node], gpu.node, gpu.index, start)
                        if found is None or key < found[0]:
                            found = (key, gpu, start, subset)
                if found is not None:
                    if best is None or found[0] < best[0]:
                        best = found
                    break
        if best is None:
            kept = sorted(set(destroy_refusal(self.unsafe, s.node, s.profile) for g in offering for s in g.slots
                              if s.idle and s.id is not None and not self._destroyable(s)))
            return None, '%s: no idle instance, no free slices and no idle instances to destroy on the %d GPU(s) ' \
                'that offer it (their slices are held or reserved%s)' % (pod.profile, len(offering), ''.join(
                    '; an idle instance is kept: ' + why for why in kept[:1]))
        dummy, gpu, start, destroyed = best
        for slot in destroyed:
            gpu.slots.remove(slot)
            self.doomed[(slot.node, slot.gpu, slot.id)] = slot
        planned = Slot(gpu.node, gpu.index, pod.profile, start)
        gpu.slots.append(planned)
        decision = Decision(RESHAPE if destroyed else CREATE, pod.key, gpu.node, gpu.index, pod.profile, start,
                            destroys=tuple((s.id, s.profile, s.start) for s in sorted(destroyed, key=lambda s: s.start)))
        return self._take(decision, pod, planned, destroyed), None

    def _take(self, decision, pod, slot, destroyed):
        slot = self._replace(slot, reserved_for=pod.key)
        self.under_way[pod.key] = (decision, pod, slot, tuple(destroyed))
        if decision.node in self.rooms:
            self.rooms[decision.node] = self.rooms[decision.node].taken(pod.rules)
        return decision

    # -- what happened -------------------------------------------------------------------------

    def _gpu(self, node, index):
        for gpu in self.gpus:
            if gpu.node == node and gpu.index == index:
                return gpu
        raise DemandPlanError('node %s has no GPU %s the queue knows' % (node, index))

    def _slot_at(self, node, index, start):
        for slot in self._gpu(node, index).slots:
            if slot.start == start:
                return slot
        return None

    def _replace(self, slot, **changes):
        gpu = self._gpu(slot.node, slot.gpu)
        fresh = replace(slot, **changes)
        gpu.slots[gpu.slots.index(slot)] = fresh
        return fresh

    def update_node(self, node, room):
        """A node's room changed (its Node object, or the pods bound to it): ``room`` is its NodeRoom now."""
        self.rooms[node] = room

    def created(self, pod, instance_id):
        """The create (or reshape) decided for ``pod`` ran: its instance exists with ``instance_id`` (idle when the pod
        ended meanwhile)."""
        if pod in self.orphans:
            slot, destroyed = self.orphans.pop(pod)
            self._replace(slot, id=instance_id)
        else:
            decision, gated, slot, destroyed = self.under_way[pod]
            self.under_way[pod] = (decision, gated, self._replace(slot, id=instance_id), destroyed)
        for gone in destroyed:
            self.doomed.pop((gone.node, gone.gpu, gone.id), None)

    def failed(self, pod, now):
        """The run for ``pod``'s create or reshape refused (its guard found the GPU changed): nothing changed, so the
        planned instance goes and the idle ones it meant to destroy are back; the pod is decided again (unless it
        ended meanwhile). Returns :meth:`decide`'s decisions."""
        if pod in self.orphans:
            slot, destroyed = self.orphans.pop(pod)
            gated = None
        else:
            dummy, gated, slot, destroyed = self.under_way.pop(pod)
        gpu = self._gpu(slot.node, slot.gpu)
        gpu.slots = [s for s in gpu.slots if s.start != slot.start or s.id is not None]
        gpu.slots.extend(self.doomed.pop((s.node, s.gpu, s.id), s) for s in destroyed)
        if gated is not None:
            self._give_back_room(slot.node, gated.rules)
            self.pods[pod] = gated
        return self.decide(now)

    def decided(self, pod):
        """The Decision under way for ``pod`` (taken, its pod not bound yet), or None."""
        return self.under_way[pod][0] if pod in self.under_way else None

    def bound(self, pod, node, gpu, instance_id, now=0.0):
        """``pod`` holds GPU instance ``instance_id`` of GPU ``gpu`` on ``node`` (its device id in the kubelet's
        allocation, as nvidia_mig_facts' ``allocated_to`` reads it). When that
        instance was reserved for another pod (an ungated pod took it first), that pod waits again, pinned to the
        node its affinity names. Returns :meth:`decide`'s decisions."""
        slot = next((s for s in self._gpu(node, gpu).slots if s.id == instance_id), None)
        doomed = (node, gpu, instance_id) in self.doomed
        if slot is None and not doomed:
            raise DemandPlanError('pod %s: node %s GPU %s has no instance %s the queue knows' % (pod, node, gpu, instance_id))
        mine = self.under_way.pop(pod, None)
        if mine is not None and (slot is None or mine[2].id != instance_id):   # it took another instance than its own
            given = self._replace(self._slot_at(mine[2].node, mine[2].gpu, mine[2].start), reserved_for=None, idle_since=now)
            if given.id is None:   # its create still to run: created() or failed() says
                self.orphans[pod] = (given, mine[3])
        self.pods.pop(pod, None)
        rules = mine[1].rules if mine else PodPlacementRules()
        if doomed:
            # decided destroyed, its run not done: the run's guard refuses (kept, failed) and the slot comes back held
            self.doomed[(node, gpu, instance_id)] = replace(self.doomed[(node, gpu, instance_id)], holder=pod)
            self.holds[pod] = (self.doomed[(node, gpu, instance_id)], rules)
            return self.decide(now)
        if slot.reserved_for not in (None, pod):
            dummy, other, dummy2, dummy3 = self.under_way.pop(slot.reserved_for)
            self.pods[other.key] = replace(other, pinned=node if other.gated else other.pinned, gated=False)
        self.holds[pod] = (self._replace(slot, holder=pod, reserved_for=None), rules)
        return self.decide(now)

    def _give_back_room(self, node, rules):
        room = self.rooms.get(node)
        if room is not None:
            self.rooms[node] = NodeRoom(room.name, room.labels, room.taints,
                                        None if room.cpu_millis_free is None else room.cpu_millis_free + rules.cpu_millis,
                                        None if room.memory_bytes_free is None else room.memory_bytes_free + rules.memory_bytes)

    def ended(self, pod, now):
        """``pod`` ended or was deleted: the instance it held, or was given, is idle from ``now`` (the release rule
        decides its fate, :meth:`expire`); a waiting pod is forgotten. Returns :meth:`decide`'s decisions."""
        self.pods.pop(pod, None)
        self.reasons.pop(pod, None)
        held = self.holds.pop(pod, None)
        destroyed = None
        if held is None and pod in self.under_way:
            dummy, gated, slot, destroyed = self.under_way.pop(pod)
            held = (slot, gated.rules)
        if held is not None:
            slot = self._slot_at(held[0].node, held[0].gpu, held[0].start)
            key = (held[0].node, held[0].gpu, held[0].id)
            if key in self.doomed:
                self.doomed[key] = replace(self.doomed[key], holder=None, idle_since=now)
            elif slot is not None:
                slot = self._replace(slot, holder=None, reserved_for=None, idle_since=now)
                if slot.id is None and destroyed is not None:   # its run has not created it yet: created() or failed() says
                    self.orphans[pod] = (slot, destroyed)
            self._give_back_room(held[0].node, held[1])
        return self.decide(now)

    def expire(self, now):
        """The destroys the release rule asks for now: instances idle ``destroy_after`` seconds after their pod left
        them (none when the rule keeps them; never one idle since before the queue watched). Each is gone from the
        queue's view at once: its run goes before any create decided later on that node."""
        if self.options.destroy_after is None:
            return []
        decisions = []
        for gpu in self.gpus:
            for slot in sorted(gpu.slots, key=lambda s: s.start):
                if self._destroyable(slot) and slot.idle_since is not None and now - slot.idle_since >= self.options.destroy_after:
                    gpu.slots.remove(slot)
                    self.doomed[(slot.node, slot.gpu, slot.id)] = slot
                    decisions.append(Decision(DESTROY, None, gpu.node, gpu.index, slot.profile, slot.start, slot.id))
        return decisions

    def destroyed(self, node, gpu, instance_id):
        """The run of a ``destroy`` decision destroyed the instance."""
        self.doomed.pop((node, gpu, instance_id), None)

    def kept(self, node, gpu, instance_id, now):
        """The run of a ``destroy`` decision refused (a pod bound the instance since): it stays, held or idle.
        Returns :meth:`decide`'s decisions."""
        slot = self.doomed.pop((node, gpu, instance_id), None)
        if slot is not None:
            self._gpu(node, gpu).slots.append(slot)
        return self.decide(now)
