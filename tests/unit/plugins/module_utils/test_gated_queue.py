# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""planning/_gated_queue: gated pods decided one at a time in queue order, and the state transitions the event source
drives. The properties run the queue against a small fake cluster that carries its decisions out as the source and
the kubelet would (the runs with their guard, the bindings, the pods ending)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_input import DemandPlanError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._destroy_guard import ANY_NODE, destroy_refusal
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gated_queue import (
    CREATE, DESTROY, RELEASE, RESHAPE, SERVE, SMALLEST_FIRST, Decision, GatedOptions, GatedPod, GatedQueue)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog, Occupancy
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._node_fit import NodeRoom, PodPlacementRules

from .catalogs import model_gpu

A100 = model_gpu('A100-SXM4-80GB')
H100 = model_gpu('H100-SXM5-80GB')


def gpu(index, instances=(), model=A100):
    """A GPU as the annotation holds it: ``instances`` are (id, profile, start, holder or None)."""
    catalog = Catalog.from_data(model.profiles)
    return {'index': index, 'profiles': model.profiles, 'gpu_instances': [
        {'id': i, 'profile': p, 'placement': {'start': s, 'size': catalog.get(p).memory_slices},
         'allocated_to': [h] if h else [], 'compute_instances': []} for i, p, s, h in instances]}


def queue(gpus, pods=(), nodes=None, **options):
    q = GatedQueue(GatedOptions(**options))
    decisions = q.reconcile(nodes or dict((n, NodeRoom(n)) for n in gpus), gpus, list(pods))
    return q, decisions


def pod(key, profile, created, priority=0, **kwargs):
    return GatedPod(key, profile, priority, float(created), 0.0, **kwargs)


def test_an_older_pod_of_another_profile_is_decided_before_a_younger_one_an_idle_instance_would_serve():
    # The queue jump the issue measured: seven idle 1g instances; an older 3g pod and a younger 1g pod.
    ones = [(i + 1, '1g.10gb', i, None) for i in range(7)]
    q, decisions = queue({'n1': [gpu(0, ones)]}, [pod('ns/young', '1g.10gb', 2), pod('ns/old', '3g.40gb', 1)])
    assert [d.pod for d in decisions] == ['ns/old', 'ns/young']
    old, young = decisions
    # the fewest instances destroyed: the three 1g at 4-6 (slice 7 takes no 1g), not the four at 0-3
    assert (old.action, old.start, [d[0] for d in old.destroys]) == (RESHAPE, 4, [5, 6, 7])
    assert (young.action, young.instance) == (SERVE, 1)


def test_an_idle_instance_serves_before_free_slices_and_free_slices_before_a_reshape():
    q, decisions = queue({'n1': [gpu(0, [(1, '1g.10gb', 6, None), (2, '3g.40gb', 4, None)])]},
                         [pod('ns/a', '1g.10gb', 1), pod('ns/b', '2g.20gb', 2), pod('ns/c', '2g.20gb', 3), pod('ns/d', '2g.20gb', 4)])
    assert [(d.pod, d.action, d.start, d.instance, d.destroys) for d in decisions] == [
        ('ns/a', SERVE, 6, 1, ()),
        ('ns/b', CREATE, 0, None, ()),
        ('ns/c', CREATE, 2, None, ()),
        ('ns/d', RESHAPE, 4, None, ((2, '3g.40gb', 4),))]


def test_a_held_or_reserved_instance_is_never_destroyed_and_the_pod_keeps_a_reason():
    q, decisions = queue({'n1': [gpu(0, [(1, '3g.40gb', 0, 'ns/held'), (2, '3g.40gb', 4, None)])]},
                         [pod('ns/a', '3g.40gb', 1), pod('ns/b', '7g.80gb', 2)])
    assert [(d.pod, d.action, d.instance) for d in decisions] == [('ns/a', SERVE, 2)]
    (waiting, reason), = q.waiting()
    assert waiting.key == 'ns/b'
    assert reason == '7g.80gb: no idle instance, no free slices and no idle instances to destroy on the 1 GPU(s) that ' \
        'offer it (their slices are held or reserved)'


def test_a_pod_unserved_for_release_after_is_released_with_its_reason_and_still_helped():
    q, decisions = queue({'n1': [gpu(0, [(1, '7g.80gb', 0, 'ns/held')])]}, [pod('ns/a', '1g.10gb', 1)], release_after=60)
    assert decisions == [] and q.next_deadline() == 60.0
    assert q.decide(59.0) == []
    released, = q.decide(60.0)
    assert (released.action, released.pod) == (RELEASE, 'ns/a')
    assert released.reason.startswith('1g.10gb: no idle instance')
    assert q.decide(61.0) == [] and q.next_deadline() is None   # released once
    # its gate is gone, the queue still makes its instance when the slices free (kube-scheduler binds it)
    reshape, = q.ended('ns/held', 100.0)
    assert (reshape.action, reshape.pod, reshape.start, reshape.destroys) == (RESHAPE, 'ns/a', 0, ((1, '7g.80gb', 0),))


def test_the_node_rules_choose_the_node_and_explain_a_refusal():
    rooms = {'n1': NodeRoom('n1', (('zone', 'a'),)), 'n2': NodeRoom('n2', (('zone', 'b'),), (('gpu', 'x', 'NoSchedule'),))}
    q, decisions = queue({'n1': [gpu(0)], 'n2': [gpu(0)]},
                         [pod('ns/b', '1g.10gb', 1, rules=PodPlacementRules(node_selector=(('zone', 'b'),))),
                          pod('ns/a', '1g.10gb', 2, rules=PodPlacementRules(node_selector=(('zone', 'a'),)))], nodes=rooms)
    assert [(d.pod, d.node) for d in decisions] == [('ns/a', 'n1')]
    assert q.waiting()[0][1] == "0/2 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, " \
        "1 node(s) had untolerated taint {gpu: x}"


def test_the_most_allocated_node_or_with_spread_the_least_then_the_first_gpu_and_start():
    gpus = {'n1': [gpu(0, [(1, '3g.40gb', 0, 'ns/x')])], 'n2': [gpu(0), gpu(1)]}
    q, decisions = queue(gpus, [pod('ns/a', '3g.40gb', 1)])
    assert [(d.node, d.gpu, d.start) for d in decisions] == [('n1', 0, 4)]
    q, decisions = queue(gpus, [pod('ns/a', '3g.40gb', 1)], placement='spread')
    assert [(d.node, d.gpu, d.start) for d in decisions] == [('n2', 0, 0)]


def test_priority_comes_before_creation_time_and_smallest_first_is_an_option():
    pods = [pod('ns/small', '1g.10gb', 1), pod('ns/big', '7g.80gb', 2), pod('ns/urgent', '3g.40gb', 3, priority=10)]
    q, decisions = queue({'n1': [gpu(0)]}, pods)
    assert [d.pod for d in decisions] == ['ns/urgent', 'ns/small']
    q, decisions = queue({'n1': [gpu(0)]}, pods, order=SMALLEST_FIRST)
    assert [d.pod for d in decisions] == ['ns/small', 'ns/urgent']


def test_transitions_created_bound_ended_and_the_release_rules():
    for destroy_after, expected in ((None, []), (2.0, [Decision(DESTROY, None, 'n1', 0, '3g.40gb', 0, 7)])):
        q, (decision,) = queue({'n1': [gpu(0)]}, [pod('ns/a', '3g.40gb', 1)], destroy_after=destroy_after)
        assert q.decided('ns/a') is decision
        q.created('ns/a', 7)
        assert q.bound('ns/a', 'n1', 0, 7, 5.0) == []
        assert q.decided('ns/a') is None and [(s.id, s.holder) for s in q.slots()] == [(7, 'ns/a')]
        assert q.ended('ns/a', 10.0) == [] and q.slots()[0].idle
        assert q.expire(11.0) == []
        assert q.expire(12.0) == expected
        if expected:
            assert q.slots() == []
            q.destroyed('n1', 0, 7)
        else:
            assert q.next_deadline() is None


def test_a_refused_run_puts_the_instances_back_and_decides_again():
    q, (reshape,) = queue({'n1': [gpu(0, [(1, '1g.10gb', 0, None), (2, '1g.10gb', 1, None)])]}, [pod('ns/a', '7g.80gb', 1)])
    assert reshape.action == RESHAPE and [d[0] for d in reshape.destroys] == [1, 2]
    # an ungated pod bound instance 1 before the run: the guard refuses, the 1g comes back held
    assert q.bound('ns/other', 'n1', 0, 1, 3.0) == []
    assert q.failed('ns/a', 4.0) == []
    assert sorted((s.id, s.holder) for s in q.slots()) == [(1, 'ns/other'), (2, None)]
    assert q.waiting()[0][0].key == 'ns/a'


def test_an_ungated_pod_that_takes_a_reserved_instance_pins_the_pod_it_was_given_to():
    q, (serve,) = queue({'n1': [gpu(0, [(1, '1g.10gb', 0, None)])], 'n2': [gpu(0)]}, [pod('ns/a', '1g.10gb', 1)])
    assert (serve.action, serve.node) == (SERVE, 'n1')
    again, = q.bound('ns/thief', 'n1', 0, 1, 2.0)
    assert (again.pod, again.action, again.node) == ('ns/a', CREATE, 'n1')   # pinned: n2 has room but is not its node


def test_a_create_whose_pod_ended_leaves_an_idle_instance():
    q, (create,) = queue({'n1': [gpu(0)]}, [pod('ns/a', '3g.40gb', 1)])
    assert q.ended('ns/a', 1.0) == []
    q.created('ns/a', 9)
    assert [(s.id, s.idle) for s in q.slots()] == [(9, True)]


def test_reconcile_reads_holders_and_pinned_pods_reserve_their_instance():
    gpus = {'n1': [gpu(0, [(1, '1g.10gb', 0, 'ns/running'), (2, '1g.10gb', 1, None)])]}
    q, decisions = queue(gpus, [pod('ns/gated', '1g.10gb', 1)])
    assert [(d.pod, d.instance) for d in decisions] == [('ns/gated', 2)]
    q = GatedQueue()
    decisions = q.reconcile({'n1': NodeRoom('n1')}, gpus, [pod('ns/gated', '1g.10gb', 1)],
                            [pod('ns/pinned', '1g.10gb', 2, pinned='n1', gated=False)])
    assert [(d.pod, d.action, d.start) for d in decisions] == [('ns/gated', CREATE, 2)]
    assert q.decided('ns/pinned').instance == 2


@pytest.mark.parametrize('options, message', [
    (dict(release_after=-1), 'release_after must be a number of seconds, not negative: got -1'),
    (dict(destroy_after='soon'), "destroy_after must be a number of seconds, not negative, or null (keep): got 'soon'"),
    (dict(order='fifo'), "order must be queue or smallest-first: got 'fifo'"),
    (dict(placement='random'), "placement must be pack or spread: got 'random'"),
])
def test_bad_options_are_refused_in_one_line(options, message):
    assert GatedOptions(**options).problem() == message
    with pytest.raises(DemandPlanError, match='^%s$' % message.replace('(', r'\(').replace(')', r'\)')):
        GatedQueue(GatedOptions(**options))


# ---- properties over generated fleets and event sequences -------------------------------------------------------

PROFILES = ('1g.10gb', '1g.20gb', '2g.20gb', '3g.40gb', '4g.40gb', '7g.80gb')


class FakeCluster(object):
    """Carries decisions out as the source, the runs (with their guard) and kube-scheduler would."""

    def __init__(self, gpus):
        self.catalog = Catalog.from_data(A100.profiles)
        self.instances = {}   # (node, GPU index) -> {instance id: [profile, start, holder]}
        for node in gpus:
            for found in gpus[node]:
                self.instances[(node, found['index'])] = dict(
                    (i['id'], [i['profile'], i['placement']['start'], (i['allocated_to'] or [None])[0]]) for i in found['gpu_instances'])
        self.next_id = 100
        self.destroyed_held = []
        self.runs = []   # decisions whose run is to come
        self.bindings = []
        self.pods = {}

    def occupancy_ok(self, key):
        Occupancy.of(self.catalog, [(p, s) for p, s, dummy in self.instances[key].values()])   # raises on a bad profile
        mask = 0
        for profile, start, dummy in self.instances[key].values():
            bits = ((1 << self.catalog.get(profile).memory_slices) - 1) << start
            assert not mask & bits, 'two instances on one slice: %r' % self.instances[key]
            mask |= bits

    def call(self, q, method, *args):
        """``method(*args)`` of the queue, its decisions checked against what held and reserved before, then taken."""
        # reserved for a pod other than the one this call says is bound elsewhere or ended (its reservation goes back)
        freed = args[0] if method in (q.bound, q.ended) else None
        reserved = set((s.node, s.gpu, s.id) for s in q.slots() if s.reserved_for not in (None, freed) and s.id is not None)
        decisions = method(*args)
        served = set((d.node, d.gpu, d.instance) for d in decisions if d.action == SERVE)
        for decision in decisions:
            doomed = [(decision.node, decision.gpu, i) for i, dummy, dummy2 in decision.destroys]
            if decision.action == DESTROY:
                doomed.append((decision.node, decision.gpu, decision.instance))
            for instance in doomed:
                assert not self.instances[instance[:2]][instance[2]][2], 'a held instance decided destroyed: %r' % (decision,)
                profile = self.instances[instance[:2]][instance[2]][0]
                assert destroy_refusal(q.unsafe, instance[0], profile) is None, 'an unsafe instance decided destroyed: %r' % (decision,)
                assert instance not in reserved and instance not in served, 'a reserved instance decided destroyed: %r' % (decision,)
        pods = [d.pod for d in decisions if d.pod]
        assert len(pods) == len(set(pods)), 'one pod decided twice in one call'
        if q.options.order == 'queue':   # one at a time in the queue's order
            keys = [(-self.pods[k].priority, self.pods[k].created, k) for k in pods]
            assert keys == sorted(keys)
        self.take(decisions)
        return decisions

    def take(self, decisions):
        for decision in decisions:
            if decision.action in (CREATE, RESHAPE, DESTROY):
                self.runs.append(decision)
            elif decision.action == SERVE:
                self.bindings.append(decision)

    def run_one(self, q, now):
        decision = self.runs.pop(0)
        key = (decision.node, decision.gpu)
        doomed = [i for i, dummy, dummy2 in decision.destroys] + ([decision.instance] if decision.action == DESTROY else [])
        left = dict((i, v) for i, v in self.instances[key].items() if i not in doomed)
        fits = decision.action == DESTROY or Occupancy.of(self.catalog, [(p, s) for p, s, dummy in left.values()]).can_place(
            self.catalog.get(decision.profile), decision.start)
        if any(self.instances[key][i][2] for i in doomed) or not fits:   # the guard refuses: nothing changes
            if decision.action == DESTROY:
                self.call(q, q.kept, decision.node, decision.gpu, decision.instance, now)
            else:
                self.call(q, q.failed, decision.pod, now)
            return
        self.instances[key] = left
        if decision.action == DESTROY:
            q.destroyed(decision.node, decision.gpu, decision.instance)
            return
        self.next_id += 1
        left[self.next_id] = [decision.profile, decision.start, None]
        q.created(decision.pod, self.next_id)
        if q.decided(decision.pod) is decision:
            self.bindings.append(Decision(SERVE, decision.pod, decision.node, decision.gpu, decision.profile, decision.start, self.next_id))

    def bind_one(self, q, now):
        decision = self.bindings.pop(0)
        instance = self.instances[(decision.node, decision.gpu)].get(decision.instance)
        if q.decided(decision.pod) is None or instance is None or instance[2]:
            return
        instance[2] = decision.pod
        self.call(q, q.bound, decision.pod, decision.node, decision.gpu, decision.instance, now)

    def held(self):
        return dict((i[2], (key, number)) for key, found in self.instances.items() for number, i in found.items() if i[2])


def instances_strategy():
    return st.lists(st.tuples(st.sampled_from(PROFILES), st.integers(0, 6), st.booleans()), max_size=5)


def fleet_of(drawn):
    """Valid GPUs from drawn (profile, start, held): each kept where it fits."""
    catalog = Catalog.from_data(A100.profiles)
    gpus, number = {}, 0
    for node_index, node in enumerate(drawn):
        for gpu_index, instances in enumerate(node):
            occupancy, kept = Occupancy(), []
            for profile, start, held in instances:
                number += 1
                if start in catalog.get(profile).starts and occupancy.can_place(catalog.get(profile), start):
                    occupancy = occupancy.with_instance(catalog.get(profile), start)
                    kept.append((number, profile, start, 'ns/running-%d' % number if held else None))
            gpus.setdefault('n%d' % node_index, []).append(gpu(gpu_index, kept))
    return gpus


STEPS = st.lists(st.tuples(st.sampled_from(('arrive', 'arrive', 'arrive', 'run', 'run', 'bind', 'bind', 'end', 'end', 'expire', 'steal',
                                            'guard')),
                           st.sampled_from(PROFILES), st.integers(0, 3)), min_size=10, max_size=60)


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(st.lists(instances_strategy(), min_size=1, max_size=2), min_size=1, max_size=2), STEPS,
       st.sampled_from((None, 0.0, 5.0)), st.sampled_from(('queue', SMALLEST_FIRST)), st.sampled_from(('pack', 'spread')))
def test_the_queue_never_puts_two_pods_on_one_instance_nor_destroys_a_held_one_and_serves_or_releases_every_pod(
        drawn, steps, destroy_after, order, placement):
    gpus = fleet_of(drawn)
    cluster = FakeCluster(gpus)
    q = GatedQueue(GatedOptions(release_after=30.0, destroy_after=destroy_after, order=order, placement=placement))
    cluster.call(q, q.reconcile, dict((n, NodeRoom(n)) for n in gpus), gpus, [])
    now = 0.0
    for number, (step, profile, priority) in enumerate(steps):
        now += 1.0
        if step == 'arrive':
            key = 'ns/p%02d' % number
            cluster.pods[key] = GatedPod(key, profile, priority, now, now)
            q.add(cluster.pods[key])
            cluster.call(q, q.decide, now)
        elif step == 'run' and cluster.runs:
            cluster.run_one(q, now)
        elif step == 'bind' and cluster.bindings:
            cluster.bind_one(q, now)
        elif step == 'end' and cluster.held():
            ended = sorted(cluster.held())[priority % len(cluster.held())]
            key, instance = cluster.held()[ended]
            cluster.instances[key][instance][2] = None
            cluster.call(q, q.ended, ended, now)
        elif step == 'expire':
            cluster.call(q, q.expire, now)
        elif step == 'guard':   # a pod that the kubelet could give an idle instance appears, or the last one is gone
            where = (None, 'n0', 'n1')[priority % 3] if priority else None
            q.guard({} if priority == 3 else {(where, profile): 'a pod on its way'})
        elif step == 'steal':   # an ungated pod bound by kube-scheduler to any idle device, reserved or not
            idle = sorted((k, i) for k, found in cluster.instances.items() for i, v in found.items() if v[2] is None)
            if idle:
                key, instance = idle[priority % len(idle)]
                cluster.instances[key][instance][2] = 'ns/ungated-%d' % number
                cluster.call(q, q.bound, 'ns/ungated-%d' % number, key[0], key[1], instance, now)
        for key in cluster.instances:
            cluster.occupancy_ok(key)
        holders = [v[2] for found in cluster.instances.values() for v in found.values() if v[2]]
        assert len(holders) == len(set(holders)), 'one pod on two instances'
        reserved = [s.reserved_for for s in q.slots() if s.reserved_for]
        assert len(reserved) == len(set(reserved)), 'one pod given two instances'
        assert not [s for s in q.slots() if s.holder and s.reserved_for], 'an instance both held and reserved'
    # every gated pod is served or released once release_after has passed
    cluster.call(q, q.decide, now + 30.0)
    assert not [p for p, dummy in q.waiting() if p.gated]
    assert all(p.key in cluster.pods for p, dummy in q.waiting())


def test_a_pod_bound_to_another_instance_than_its_own_gives_its_own_back():
    # Found by the property above: a pinned pod (its reservation taken by an ungated pod, then given a create on the
    # other GPU) bound by kube-scheduler to an idle instance of its node: the created one is idle, a reshape may take it.
    held = [(n, '1g.10gb', n, 'ns/h%d' % n) for n in (4, 5, 6)]
    q, (first,) = queue({'n1': [gpu(0, [(1, '1g.10gb', 0, None), (2, '1g.10gb', 1, 'ns/x')] + held)]}, [pod('ns/a', '1g.10gb', 1)])
    again, = q.bound('ns/thief', 'n1', 0, 1, 1.0)
    assert (again.pod, again.action, again.start) == ('ns/a', CREATE, 2)
    q.created('ns/a', 9)
    assert q.ended('ns/x', 2.0) == []
    q.add(pod('ns/b', '2g.20gb', 3))
    reshape, = q.bound('ns/a', 'n1', 0, 2, 3.0)
    assert (reshape.pod, reshape.action, reshape.start, reshape.destroys) == ('ns/b', RESHAPE, 2, ((9, '1g.10gb', 2),))


def test_a_pinned_pod_bound_to_an_instance_decided_destroyed_gives_its_own_create_back():
    # Found by the property above: a pod whose reservation an ungated pod took is pinned and gets a create; the thief
    # ends, its idle instance is decided destroyed, and kube-scheduler binds the pinned pod to it before the destroy ran.
    q, (first, second) = queue({'n1': [gpu(0)]}, [pod('ns/a', '1g.10gb', 1), pod('ns/b', '1g.10gb', 2)], destroy_after=0.0)
    q.created('ns/a', 101)
    q.created('ns/b', 102)
    again, = q.bound('ns/thief', 'n1', 0, 101, 1.0)
    assert (again.pod, again.action, again.node, again.start) == ('ns/a', CREATE, 'n1', 2)
    assert q.ended('ns/thief', 2.0) == []
    destroy, = q.expire(2.0)
    assert (destroy.action, destroy.instance) == (DESTROY, 101)
    assert q.bound('ns/a', 'n1', 0, 101, 3.0) == []
    assert q.kept('n1', 0, 101, 4.0) == []   # the destroy's guard refused: 101 is back, held by ns/a
    q.created('ns/a', 103)   # the create decided for it ran anyway: an idle instance
    assert sorted((s.id, s.holder, s.reserved_for) for s in q.slots()) == [(101, 'ns/a', None), (102, None, 'ns/b'), (103, None, None)]


def test_the_release_rule_leaves_alone_an_instance_idle_since_before_the_queue_watched():
    q, decisions = queue({'n1': [gpu(0, [(1, '3g.40gb', 0, None), (2, '3g.40gb', 4, 'ns/x')])]}, [], destroy_after=0.0)
    assert decisions == [] and q.next_deadline() is None and q.expire(100.0) == []
    assert q.ended('ns/x', 100.0) == []
    assert q.next_deadline() == 100.0
    assert [(d.action, d.instance) for d in q.expire(100.0)] == [(DESTROY, 2)]


def test_an_idle_instance_a_pod_could_be_given_is_neither_reshaped_nor_expired():
    """The destroy guard's verdict (planning/_destroy_guard): the pod waits and its reason names why; the release rule
    waits too; once the guard lifts, both happen."""
    ones = [(1, '1g.10gb', 0, None), (2, '1g.10gb', 1, 'ns/x')]
    q, decisions = queue({'n1': [gpu(0, ones + [(3, '3g.40gb', 4, 'ns/y')])]}, [], destroy_after=0.0)
    q.guard({(ANY_NODE, '1g.10gb'): 'pod ns/free waits for kube-scheduler without the slice gate'})
    assert q.ended('ns/x', 1.0) == [] and q.expire(1.0) == [] and q.next_deadline() is None
    q.add(pod('ns/big', '4g.40gb', 2))
    assert q.decide(2.0) == []
    assert q.waiting()[0][1].endswith('(their slices are held or reserved; an idle instance is kept: pod ns/free waits '
                                      'for kube-scheduler without the slice gate)')
    q.guard({})
    reshape, = q.decide(3.0)
    assert (reshape.action, reshape.start, [d[0] for d in reshape.destroys]) == (RESHAPE, 0, [1, 2])


def test_a_node_with_a_run_under_way_serves_only_profiles_the_run_leaves_alone():
    """While a run destroys 1g.10gb on n1: a 3g.40gb pod is served from the idle 3g.40gb there, a 1g.10gb pod is not
    (the kubelet could give it the instance being destroyed), and nothing is created there; after the run, both."""
    gpus = {'n1': [gpu(0, [(1, '1g.10gb', 0, None), (2, '3g.40gb', 4, None)])]}
    q, decisions = queue(gpus, [])
    q.guard({}, {'n1': ['1g.10gb']})
    q.add(pod('ns/small', '1g.10gb', 1))
    q.add(pod('ns/big', '3g.40gb', 2))
    q.add(pod('ns/two', '2g.20gb', 3))
    served, = q.decide(1.0)
    assert (served.pod, served.action, served.instance) == ('ns/big', SERVE, 2)
    assert dict((p.key, r) for p, r in q.waiting()) == {
        'ns/small': '0/1 nodes are available: 1 a run under way there destroys 1g.10gb',
        'ns/two': '2g.20gb: no idle instance, and a run is under way on every node it may use that offers it'}
    assert q.expire(100.0) == []
    q.guard({}, {})
    assert sorted((d.pod, d.action) for d in q.decide(2.0)) == [('ns/small', SERVE), ('ns/two', CREATE)]
