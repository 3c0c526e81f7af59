# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The demand benchmark's shipped policies (benchmarks/demand.py): this collection's event source and playbooks replayed.

The shipped policies, each with its latencies (seconds, printed in demand.py's header):

- (e) this collection as it ships: the event source (extensions/eda, quiet period 10 s, at most 60 s, its
  defaults) opens a burst on each new unschedulable pod; its event runs playbooks/mig_demand.yml, one run at a
  time (ansible-rulebook runs actions in turn); the run reads pods and GPUs ``READ_SECONDS`` after it starts,
  plans with the default policy (no ``release_idle``, no eviction), and the in-place switch realises the generated
  layout (counts per GPU) with plan_gpu as the mig_layout role does: the switch's placements, not the planner's.
  Slices are schedulable ``--run-seconds`` after the run starts; a node whose change destroys instances is cordoned
  from the read to then. (e+r) the same plus the event source's release trigger: a pod that ends while pods wait
  opens a burst too. With ``--release-idle``, (e+r) again with ``release_idle: true`` in mig_demand_policy (not the
  default). (e+f) what the shipped rulebook runs: (e+r) plus the event source's create-only fast path (``fast: true``):
  0.5 s after the latest new waiting pod it decides with _demand_fast.fast_creates which hosts can serve waiting pods
  by creating instances only, and runs playbooks/mig_demand_create.yml on each (in the rulebook's one queue, after
  any run before it); a run whose GPUs changed since the decision is refused and its pods go to the full path, as
  do those still waiting 120 s after their instances were made. Latencies from make cluster-test's check 8.
"""

from __future__ import absolute_import, division, print_function

from demand_replay import POLICY, Debounced

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_fast import fast_creates
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_planner import plan_demand

# From a run's start to the plan's read of pods and GPUs: rulebook to playbook ~1 s, planning ~10 s (docs/eda.md).
READ_SECONDS = 11.0
# A run's remaining wait on the test cluster was hand-over and apply 12-13 s and device plugin 2-3.5 s with a 2 s
# kubelet status period (docs/eda.md); a stock kubelet (10 s) adds ~8 s: 11 + 12.5 + 11.5 = 35 s by default.
RUN_SECONDS = 35.0

# The create-only fast path (docs/eda.md, make cluster-test's check 8 with the kubelet's default status period): the
# event source decides 0.5 s after the latest new waiting pod; in the run, rulebook to playbook ~0.5 s and the lease and
# the create ~1.5 s, the device plugin's SIGHUP ~0.5 s, then the kubelet's next node status (every 10 s); the run reads
# the GPUs again and tells its outcome in ~2 s more. Pods of a created run still waiting 120 s later go to the full path.
FAST_QUIET_SECONDS = 0.5
FAST_CREATE_SECONDS = 2.0
FAST_PLUGIN_SECONDS = 0.5
NODE_STATUS_SECONDS = 10.0
FAST_RUN_SECONDS = 4.0
FAST_TIMEOUT_SECONDS = 120.0


class ShippedDemand(Debounced):
    """(e): the event source's bursts run playbooks/mig_demand.yml one at a time; the plan's generated layout is
    realised by the in-place switch (plan_gpu), the nodes whose change destroys instances cordoned meanwhile."""
    label = '(e) shipped: new pods'
    policy = {}

    def __init__(self, *args):
        super(ShippedDemand, self).__init__(*args)
        self.actions = []   # ansible-rulebook's queue of actions, run one at a time (its sequential strategy)
        self.running = False

    def closed(self):
        self.enqueue(('full',))

    def enqueue(self, action):
        self.actions.append(action)
        if not self.running:
            self.next_run()

    def next_run(self):
        if not self.actions:
            self.running = False
            return
        self.running = True
        self.runs += 1
        self.begin(self.actions.pop(0))

    def begin(self, action):
        """Start one queued run: a full run reads the pods and GPUs ``READ_SECONDS`` after it starts."""
        self.at(self.now + READ_SECONDS, POLICY, self.plan)

    def plan(self):
        if not self.waiting:   # the playbook plans for the pods still waiting (still_waiting)
            self.next_run()
            return
        nodes = {}
        for gpu in self.gpus:
            nodes.setdefault(gpu.node, {'gpus': []})['gpus'].append(gpu.as_facts())
        pending = [pending_entry(r) for r in self.for_the_full_path()]
        if not pending:
            self.next_run()
            return
        plan = plan_demand(nodes, pending, self.policy)
        self.evicted += len(plan['evictions'])
        targets = []
        for node in sorted(plan['nodes']):
            view = plan['nodes'][node]
            if not view['changed']:
                continue
            if view['cordon']:
                self.cordons += 1
                self.cordoned[node] = self.now + self.options.run_seconds - READ_SECONDS
            entries = view['layout']['config'][view['layout']['name']]
            for entry in entries:
                targets.append((node, entry['devices'][0], entry['mig-devices']))
        if not targets:
            self.next_run()
            return
        self.at(self.now + self.options.run_seconds - READ_SECONDS, POLICY, self.apply, targets)

    def for_the_full_path(self):
        """The waiting pods a full run plans for."""
        return self.waiting

    def apply(self, targets):
        gpus = dict(((g.node, g.index), g) for g in self.gpus)
        for node, index, counts in targets:
            self.reconfigured(gpus[(node, index)].converge(counts))
        self.schedule_waiting()
        self.next_run()


class ShippedDemandReleaseTrigger(ShippedDemand):
    label = '(e+r) shipped + release trigger'
    release_trigger = True


class ShippedFastPath(ShippedDemandReleaseTrigger):
    """(e+f): what the shipped rulebook runs (fast: true, the release trigger): the event source decides create-only
    demand itself (_demand_fast.fast_creates over the nodes' GPUs, ``FAST_QUIET_SECONDS`` after the latest new waiting
    pod) and runs playbooks/mig_demand_create.yml on each such host; the rest, and the pods of a refused or late fast
    run, take the full path (e+r). Both kinds of run share ansible-rulebook's one queue (its sequential strategy): a
    fast run queued behind a full run starts after it. A fast run re-decides on the host: where a target GPU changed
    since the decision it is refused (the module's create_only guard) and its pods go to the full path."""
    label = '(e+f) shipped: fast path + release'

    def __init__(self, *args):
        super(ShippedFastPath, self).__init__(*args)
        # Queued beside the full runs: ('fast', change, GPU states at the decision).
        self.last_new = None
        self.in_flight = {}      # request -> (node, deadline, whether its run ended)
        self.busy = set()        # nodes with a fast run not ended
        self.given_up = set()

    def begin(self, action):
        if action[0] == 'fast':
            self.at(self.now + FAST_CREATE_SECONDS, POLICY, self.fast_create, action[1], action[2])
        else:
            super(ShippedFastPath, self).begin(action)

    def for_the_full_path(self):
        return [r for r in self.waiting if r not in self.in_flight]

    def on_unschedulable(self, request):
        super(ShippedFastPath, self).on_unschedulable(request)
        self.last_new = self.now
        self.at(self.now + FAST_QUIET_SECONDS, POLICY, self.fast_decide)

    def fast_decide(self):
        if self.last_new is None or self.now < self.last_new + FAST_QUIET_SECONDS:
            return
        self.last_new = None
        for request in [r for r in self.in_flight if r not in self.waiting]:   # bound since, or gave up
            del self.in_flight[request]
        requests = dict((r.name, r) for r in self.waiting if r not in self.in_flight and r not in self.given_up)
        if not requests:
            return
        hosts, objects, held = {}, {}, {}
        for gpu in self.gpus:
            if gpu.node not in self.busy:
                hosts.setdefault(gpu.node, []).append(gpu.as_facts())
                objects[gpu.node] = {'metadata': {'name': gpu.node, 'labels': {}}, 'spec': {},
                                     'status': {'allocatable': {'cpu': '1000', 'memory': '10000Gi', 'pods': '1000'}}}
        for request, (node, dummy, ended) in self.in_flight.items():
            if ended:   # its instance exists, idle until the kubelet advertises it: not free
                held.setdefault(node, {})[request.profile] = held.get(node, {}).get(request.profile, 0) + 1
        decided = fast_creates(hosts, [pending_entry(r) for r in sorted(requests.values(), key=lambda r: (r.arrival, r.number))],
                               objects, [], self.policy, held)
        for change in decided['creates']:
            self.busy.add(change['host'])
            for name in change['pods']:
                self.in_flight[requests[name]] = (change['host'], float('inf'), False)
            states = dict((g.index, g.state_key()) for g in self.gpus if g.node == change['host'])
            self.enqueue(('fast', change, states))

    def fast_create(self, change, states):
        gpus = dict((g.index, g) for g in self.gpus if g.node == change['host'])
        pods = [r for r, flight in self.in_flight.items() if flight[0] == change['host'] and not flight[2]]
        if any(gpus[int(index)].state_key() != states[int(index)] for index in change['gpus']):
            self.give_back(pods)   # refused before any change: the full path decides again
        else:
            for entry in change['layout']['config'][change['layout']['name']]:
                self.reconfigured(gpus[entry['devices'][0]].converge(entry['mig-devices']))
            for request in pods:
                self.in_flight[request] = (change['host'], self.now + FAST_TIMEOUT_SECONDS, True)
            self.at(self.now + FAST_TIMEOUT_SECONDS, POLICY, self.expire)
            # SIGHUP to the device plugin, then the kubelet's next node status (every 10 s, at a random phase).
            self.at(self.now + FAST_PLUGIN_SECONDS + self.rng.uniform(0.0, NODE_STATUS_SECONDS), POLICY, self.advertised)
        self.at(self.now + FAST_RUN_SECONDS - FAST_CREATE_SECONDS, POLICY, self.fast_ended, change['host'])

    def advertised(self):
        self.schedule_waiting()
        for request in [r for r in self.in_flight if r.placed_at is not None or r not in self.waiting]:
            del self.in_flight[request]

    def expire(self):
        """The pods of a created run still waiting ``FAST_TIMEOUT_SECONDS`` after it go to the full path."""
        self.give_back([r for r, flight in self.in_flight.items() if flight[2] and flight[1] <= self.now and r in self.waiting])

    def fast_ended(self, host):
        self.busy.discard(host)
        self.next_run()

    def give_back(self, requests):
        for request in requests:
            self.in_flight.pop(request, None)
            self.given_up.add(request)
        if any(r in self.waiting for r in requests):
            self.open_burst()


class ReleaseIdleDemand(ShippedDemand):
    label = '(e+r) + release_idle policy'
    release_trigger = True
    policy = {'release_idle': True}


def pending_entry(request):
    """A waiting pod as the event source tells it (the shape plan_demand and fast_creates take)."""
    return {'pod': request.name, 'priority': 0, 'created': '%012.3f' % request.arrival, 'requests': {request.profile: 1}}
