# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gated rows of benchmarks/demand.py: MIG pods held back by the scheduling gate ``gpufleet.mig/slice`` and decided
one at a time, in queue order, by the collection's own planning module (planning/_gated_queue.GatedQueue), as the
event source runs it. Imported by demand.py (run that script; docs/demand.md explains the figures).

What the replay does, as it ships:

- A pod arrives gated: kube-scheduler does not see it. The event source sees it through its watch and decides
  ``FAST_QUIET_SECONDS`` later (GatedQueue.add then decide): every waiting pod, in queue order (priority, then
  creation time), against the fleet plus the decisions under way.
- ``serve`` (an idle instance of the pod's profile): the source narrows the pod's node affinity and removes the gate,
  one API call like the fast path's SIGHUP step (``FAST_PLUGIN_SECONDS``); kube-scheduler binds it at once.
- ``create`` and ``reshape`` (idle instances destroyed first): a run of the shipped fast path's shape in
  ansible-rulebook's one queue (runs one at a time; the decisions one decide takes for one node share a run): the
  instance exists ``FAST_CREATE_SECONDS`` after the run starts (GatedQueue.created), the device plugin re-reads
  (``FAST_PLUGIN_SECONDS``) and the kubelet's next node status (every ``NODE_STATUS_SECONDS``, random phase) advertises
  it; the run tells its outcome ``FAST_RUN_SECONDS`` after its start, the source then removes the gate, and the pod is
  bound once both happened (GatedQueue.bound). From the decision to the outcome the node is busy: nothing is created
  or destroyed there, and no pod of a profile its run destroys is served there (GatedQueue.guard's ``busy``, as
  k8s/_gated_demand passes the nodes of its runs under way).
- The destroy guard (planning/_destroy_guard.unsafe_destroys, GatedQueue.guard): no idle instance of a profile is
  destroyed while a pod of that profile waits without its gate, released (any node) or pinned (its node). A pod is
  admitted when it is bound here, so the guard's "bound, not admitted yet" never applies; the source's hold on releases
  of a profile a run destroys (seconds, against a 30-minute wait) is not modelled.
- A pod unserved for ``release_after`` is released: gate removed, kube-scheduler binds it to any free device of its
  profile (the device plugin's world; it may take one reserved for a pinned pod, which then waits pinned to its node:
  GatedQueue.bound says so). A pod that ends returns its instance (GatedQueue.ended); under the release rule
  ``destroy_after`` an idle instance is destroyed by a run that long after (GatedQueue.expire), else kept until a
  reshape needs its slices. A pod that gives up while gated is deleted (GatedQueue.ended).
- The reconciliation: every ``--gated-restart`` hours the source restarts (when no run is under way) and rebuilds
  its queue from the cluster alone (GatedQueue.reconcile: the GPUs with their holders, the gated pods, the pinned
  ones on their way).
"""

from __future__ import absolute_import, division, print_function

import statistics

import demand_replay
from demand_baselines import DraDynamicMig
from demand_replay import POLICY, SIZE_CLASSES, Replay, spread
from demand_shipped import FAST_CREATE_SECONDS, FAST_PLUGIN_SECONDS, FAST_QUIET_SECONDS, FAST_RUN_SECONDS, NODE_STATUS_SECONDS

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._gated_demand import SOURCE_OPTIONS
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._destroy_guard import MigPod, unsafe_destroys
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gated_queue import (
    DESTROY, RELEASE, SERVE, SMALLEST_FIRST, SPREAD, GatedOptions, GatedPod, GatedQueue, destroys_of)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._node_fit import NodeRoom

RESTART_HOURS = 6.0


class GatedReplay(Replay):
    """(g): the gated pods decided by GatedQueue (see the module's docstring)."""

    label = '(g) gated: as shipped'
    gated_options = GatedOptions(**SOURCE_OPTIONS)

    def __init__(self, requests, options, seed):
        super(GatedReplay, self).__init__(requests, options, seed)
        self.queue = None
        self.ungated = {}        # request -> pinned node or None: the scheduler's (released, or pinned and waiting)
        self.given = {}          # request -> the decision it waits on
        self.actions = []        # ansible-rulebook's one queue: (node, decisions)
        self.running = None      # the node of the run under way
        self.busy = {}           # node -> the profiles its run (queued or under way) destroys
        self.restart_due = False
        self.by_name = dict((r.name, r) for r in self.requests)

    # -- the source ----------------------------------------------------------------------------

    def start(self):
        self.queue = GatedQueue(self.gated_options)
        self.reconcile()
        restart = self.options.gated_restart * 3600.0
        if restart > 0:
            for step in range(1, int(self.options.hours * 3600.0 // restart) + 1):
                self.at(step * restart, POLICY, self.restart)

    def facts(self):
        nodes = {}
        for gpu in self.gpus:
            nodes.setdefault(gpu.node, []).append(gpu.as_facts())
        return nodes

    def reconcile(self):
        gated, pinned = [], []
        for request in self.waiting:
            if request not in self.ungated:
                gated.append(self.gated_pod(request))
            elif self.ungated[request] is not None:
                pinned.append(self.gated_pod(request, self.ungated[request]))
        self.given = {}
        self.handle(self.queue.reconcile(dict((n, NodeRoom(n)) for n in self.nodes), self.facts(), gated, pinned, self.now,
                                         self.unsafe(), busy=self.busy))

    def unsafe(self):
        """The destroy guard's verdict over the pods waiting without their gate."""
        return unsafe_destroys(MigPod(r.name, (r.profile,), pinned=node) for r, node in self.ungated.items() if r in self.waiting)

    def sync(self):
        """What the source tells the queue before it decides: the destroy guard and the busy nodes."""
        self.queue.guard(self.unsafe(), self.busy)

    def restart(self):
        self.restart_due = True
        if self.running is None:
            self.restarted()

    def restarted(self):
        self.restart_due = False
        self.runs += 1
        self.queue = GatedQueue(self.gated_options)
        self.reconcile()

    def gated_pod(self, request, pinned=None):
        return GatedPod(request.name, request.profile, 0, request.arrival, request.arrival, pinned=pinned)

    def arrive(self, request):
        self.waiting.append(request)
        self.queue.add(self.gated_pod(request))
        self.at(self.now + FAST_QUIET_SECONDS, POLICY, self.decide)
        self.at(self.now + self.gated_options.release_after, POLICY, self.decide)

    def decide(self):
        self.sync()
        self.handle(self.queue.decide(self.now))

    def handle(self, decisions):
        runs = {}
        for decision in decisions:
            request = self.by_name.get(decision.pod)
            if decision.action == RELEASE:
                self.ungated[request] = None
                self.scheduler_retry()
            elif decision.action == SERVE:
                if request in self.ungated:   # no gate to remove: kube-scheduler binds it
                    self.scheduler_retry()
                else:
                    self.given[request] = decision
                    self.at(self.now + FAST_PLUGIN_SECONDS, POLICY, self.bind, request, decision)
            else:
                if request is not None and request not in self.ungated:
                    self.given[request] = decision
                runs.setdefault(decision.node, []).append(decision)
        for node in sorted(runs):
            self.actions.append((node, runs[node]))
            self.busy[node] = set(profile for dummy, profile, dummy2 in destroys_of(runs[node]))
        self.next_run()

    def next_run(self):
        if self.running is not None:
            return
        if not self.actions:
            if self.restart_due:
                self.restarted()
            return
        self.runs += 1
        node, decisions = self.actions.pop(0)
        self.running = node
        self.at(self.now + FAST_CREATE_SECONDS, POLICY, self.change, node, decisions)
        self.at(self.now + FAST_RUN_SECONDS, POLICY, self.run_ended)

    def run_ended(self):
        """The run told its outcome: its node is decided on again (the source wakes on the Node's update)."""
        node, self.running = self.running, None
        if not any(queued == node for queued, dummy in self.actions):
            self.busy.pop(node, None)
        self.next_run()
        self.decide()
        self.expire()

    def change(self, node, decisions):
        """The run's NVML changes, each GPU changed at once one reconfiguration. The run's guard reads the holders: a
        destroy of an instance a pod bound since is refused (GatedQueue.kept, or failed for a reshape)."""
        gpus = dict((g.index, g) for g in self.gpus if g.node == node)
        changed = set()
        self.sync()
        for decision in decisions:
            gpu = gpus[decision.gpu]
            doomed = list(decision.destroys) + ([(decision.instance, decision.profile, decision.start)] if decision.action == DESTROY else [])
            doomed = [next(i for i in gpu.instances if i[0] == instance_id) for instance_id, dummy, dummy2 in doomed]
            fits = decision.action == DESTROY or gpu.occupancy(without=doomed).can_place(gpu.catalog.get(decision.profile), decision.start)
            if any(i[3] is not None for i in doomed) or not fits:
                if decision.action == DESTROY:
                    self.handle(self.queue.kept(node, gpu.index, decision.instance, self.now))
                elif self.given.pop(self.by_name[decision.pod], None) is decision:
                    self.handle(self.queue.failed(decision.pod, self.now))
                else:   # its pod ended meanwhile
                    self.queue.failed(decision.pod, self.now)
                continue
            for instance in doomed:
                gpu.instances.remove(instance)
                changed.add(gpu.index)
            if decision.action == DESTROY:
                self.queue.destroyed(node, gpu.index, decision.instance)
                continue
            instance = gpu.create(decision.profile, decision.start)
            changed.add(gpu.index)
            self.queue.created(decision.pod, instance[0])
            request = self.by_name[decision.pod]
            advertised = max(self.now + FAST_PLUGIN_SECONDS + self.rng.uniform(0.0, NODE_STATUS_SECONDS),
                             self.now - FAST_CREATE_SECONDS + FAST_RUN_SECONDS)   # and the gate gone at the outcome
            if self.given.get(request) is decision:
                self.ungated[request] = node   # the gate goes, the affinity names the node
                self.at(advertised, POLICY, self.bind, request, decision)
            else:   # a pod without the gate (kube-scheduler binds it), or one that ended meanwhile
                self.at(advertised, POLICY, self.scheduler_retry)
        self.reconfigurations += len(changed)

    def bind(self, request, decision):
        """kube-scheduler binds a pod the source ungated and pinned (the device advertised)."""
        if self.given.get(request) is not decision or request not in self.waiting:
            return
        gpu = next(g for g in self.gpus if g.node == decision.node and g.index == decision.gpu)
        instance = next((i for i in gpu.instances if i[2] == decision.start and i[1] == decision.profile), None)
        if instance is None or instance[3] is not None:   # an ungated pod took it: the queue pinned this one again
            self.ungated[request] = decision.node
            return
        del self.given[request]
        self.bound_to(request, gpu, instance)

    def bound_to(self, request, gpu, instance):
        instance[3] = request
        request.placed_at = request.running_at = self.now
        request.gpu, request.instance = gpu, instance
        self.waiting.remove(request)
        self.ungated.pop(request, None)
        self.at(request.running_at + request.hold, demand_replay.RELEASE, self.release, request)
        self.sync()
        decisions = self.queue.bound(request.name, gpu.node, gpu.index, instance[0], self.now)
        for victim, decision in list(self.given.items()):   # a reservation an ungated pod took: pinned, waits again
            if self.queue.decided(victim.name) is not decision:
                del self.given[victim]
                self.ungated[victim] = decision.node
        self.handle(decisions)

    # -- kube-scheduler for the pods without a gate ---------------------------------------------

    def scheduler_retry(self):
        for request in sorted(self.ungated, key=lambda r: (r.arrival, r.number)):
            if request in self.given or request not in self.waiting:
                continue
            pinned = self.ungated[request]
            best = []
            for node in self.nodes:
                if pinned is not None and node != pinned:
                    continue
                found = self.device_on(node, request.profile)
                if found is not None:
                    share = float(sum(g.held_slices() for g in self.gpus if g.node == node)) / self.node_slices[node]
                    best.append((share, node, found))
            if best:
                low = min(b[0] for b in best)
                gpu, instance = self.rng.choice([b[2] for b in best if b[0] <= low + 1e-9])
                self.bound_to(request, gpu, instance)

    def schedule_waiting(self):
        self.scheduler_retry()

    def released(self, request):
        self.sync()
        self.handle(self.queue.ended(request.name, self.now))
        if self.gated_options.destroy_after is not None:
            self.at(self.now + self.gated_options.destroy_after, POLICY, self.expire)

    def expire(self):
        self.sync()
        self.handle(self.queue.expire(self.now))

    def give_up(self, request):
        waiting = request.placed_at is None and request in self.waiting
        super(GatedReplay, self).give_up(request)
        if waiting:
            self.given.pop(request, None)
            self.ungated.pop(request, None)
            self.sync()
            self.handle(self.queue.ended(request.name, self.now))


def gated_policy(label, **options):
    """A GatedReplay class with these GatedOptions."""
    return type('GatedReplay', (GatedReplay,), {'label': label, 'gated_options': GatedOptions(**options)})


def policies(options):
    """(label, factory) of the gated rows: as shipped (the event source's options, k8s/_gated_demand.SOURCE_OPTIONS,
    with the release wait and the destroy delay as given), then one change each: the other release rule (idle
    instances kept), the other placement (spread) and the second queue order (smallest first)."""
    shipped = dict(SOURCE_OPTIONS, release_after=options.release_after, destroy_after=options.destroy_after)
    rows = [('(g) gated: as shipped', {}),
            ('(g) gated: keep idle', {'destroy_after': None}),
            ('(g) gated: spread', {'placement': SPREAD}), ('(g) gated: smallest first', {'order': SMALLEST_FIRST})]
    return [(label, gated_policy(label, **dict(shipped, **change))) for label, change in rows]


def add_arguments(parser):
    parser.add_argument('--release-after', type=float, default=GatedOptions().release_after,
                        help='gated: seconds before an unserved pod is released (default %(default)s)')
    parser.add_argument('--destroy-after', type=float, default=GatedOptions().destroy_after,
                        help='gated: seconds an idle instance stays after its pod ended (default %(default)s)')
    parser.add_argument('--gated-restart', type=float, default=RESTART_HOURS,
                        help='gated: hours between the source\'s restarts and reconciliations, 0 never (default %(default)s)')


def mean_and_error(values):
    """'mean±standard error' of per-seed differences ('-' for the error of one seed): how far the mean is from 0 in
    units of its own uncertainty, beside the spread."""
    mean = statistics.mean(values)
    if len(values) < 2:
        return '%+.1f±-' % mean
    return '%+.1f±%.1f' % (mean, statistics.stdev(values) / len(values) ** 0.5)


def print_served(labels, results, spread):
    """The served table: placed, vs DRA (min/median/max and mean±standard error of the per-seed differences),
    slice-hours, per size class, reconfigurations, evictions, p95 wait (min/median/max)."""
    sizes = ' '.join('%13s' % ('%dg placed' % s) for s in SIZE_CLASSES)
    header = '%-36s %14s %14s %12s %17s %16s %8s %15s %s' % (
        'policy (min/median/max over seeds)', 'placed', 'vs DRA', 'mean±error', 'slice-h served', 'reconfig', 'evicted',
        'p95 wait min', sizes)
    print(header)
    print('-' * len(header))
    dra = results[DraDynamicMig.label]
    for label in labels:
        mine = results[label]
        lead = [f['placed'] - d['placed'] for f, d in zip(mine, dra)]
        print('%-36s %14s %14s %12s %17s %16s %8d %15s %s' % (
            label, spread([f['placed'] for f in mine]), spread(lead, '%+d'), mean_and_error(lead),
            spread([f['slice_hours'] for f in mine], '%.0f'), spread([f['reconfigurations'] for f in mine]),
            max(f['evicted'] for f in mine), spread([f['p95_pending'] for f in mine], '%.1f'),
            ' '.join('%13s' % spread([f['classes'][s] for f in mine]) for s in SIZE_CLASSES)))
    print('Requests per size class (median): %s' % ', '.join(
        '%dg %g' % (s, statistics.median(f['requested'][s] for f in dra)) for s in SIZE_CLASSES))


def goal(label, results):
    """The goal line: the gated row's median at or above DRA in pods placed, its slice-hours' median not below DRA's
    lowest seed (within DRA's spread, or above it), no eviction; then which pods each placed that the other did not
    (the same count can hide other pods), and the pods that gave up while a GPU had room."""
    mine, dra = results[label], results[DraDynamicMig.label]
    lead = statistics.median([f['placed'] - d['placed'] for f, d in zip(mine, dra)])
    hours = statistics.median(f['slice_hours'] for f in mine)
    dra_hours = sorted(d['slice_hours'] for d in dra)
    within = hours >= dra_hours[0]
    ahead = sum(1 for f, d in zip(mine, dra) if f['placed'] >= d['placed'])
    evicted = max(f['evicted'] for f in mine)
    met = lead >= 0 and within and not evicted
    print('Goal for %s: placed >= DRA on the median, slice-hours within DRA\'s spread, 0 evictions: %+g vs DRA (at or '
          'ahead on %d of %d seeds), slice-hours %.0f (DRA %.0f/%.0f/%.0f), %d evicted: %s'
          % (label, lead, ahead, len(mine), hours, dra_hours[0], statistics.median(dra_hours), dra_hours[-1],
             evicted, 'met' if met else 'NOT met'))
    print('  pod by pod, per seed (min/median/max): placed here and not by DRA %s, by DRA and not here %s; gave up here '
          'while a GPU had room (idle instances counted free) %s, there %s'
          % (spread([len(f['placed_requests'] - d['placed_requests']) for f, d in zip(mine, dra)]),
             spread([len(d['placed_requests'] - f['placed_requests']) for f, d in zip(mine, dra)]),
             spread([f['lost_with_room'] for f in mine]), spread([d['lost_with_room'] for d in dra])))
