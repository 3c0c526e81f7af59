# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Planner against brute force, on every model's profiles as the backend reads them from the simulator."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import itertools
import random
from dataclasses import replace

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import GpuHolders, Placement
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import (
    InstanceSpec,
    PlanningError,
    current_specs,
    plan_gpu,
    plan_gpu_specs,
)
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import MIG_MODELS, model_gpu
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.oracle import (
    all_placements,
    brute_force_min_destroyed,
    counts_of,
    profiles_by_name,
    slices_of,
    with_instances,
)


def assert_valid_after(gpu, plan, target):
    profiles = profiles_by_name(gpu)
    used = set()
    for entry in plan.after:
        profile = profiles[entry['profile']]
        assert entry['placement']['start'] in [p['start'] for p in profile['placements']]
        taken = slices_of(profile, entry['placement']['start'])
        assert not used & taken, 'overlapping placements in %s' % plan.after
        used |= taken
        assert [ci['profile'] for ci in entry['compute_instances']] == [entry['profile']]
    assert counts_of([(e['profile'], 0) for e in plan.after]) == dict((k, v) for k, v in target.items() if v)
    for action in plan.actions:
        if action['action'] == 'create_gpu_instance':
            assert action['placement']['start'] is not None  # always an explicit placement


# ---- exhaustive oracle: every layout that fits an empty GPU is placed, in any key order ----

@pytest.mark.parametrize('model', MIG_MODELS)
def test_every_fitting_layout_is_placed_in_every_key_order(model):
    gpu = model_gpu(model)
    layouts = set()
    for placement in all_placements(gpu):
        if placement:
            layouts.add(tuple(sorted(counts_of(placement).items())))
    assert len(layouts) > 10
    for layout in sorted(layouts):
        orders = list(itertools.permutations(layout))
        if len(orders) > 6:
            orders = random.Random(str(layout)).sample(orders, 6)
        reference = None
        for order in orders:
            target = dict(order)
            plan = plan_gpu(gpu, target)
            assert_valid_after(gpu, plan, target)
            placed = [(e['profile'], e['placement']['start']) for e in plan.after]
            # plan_gpu sorts the keys; the instances in any order must land in the same places as well.
            specs = [InstanceSpec(name, [name]) for name, count in order for dummy in range(count)]
            random.Random(str(order)).shuffle(specs)
            shuffled = [(e['profile'], e['placement']['start']) for e in plan_gpu_specs(gpu, specs).after]
            assert reference is None or placed == reference, 'placement depends on key order'
            assert shuffled == placed, 'placement depends on the order of the instances'
            reference = placed


@pytest.mark.parametrize('model', MIG_MODELS)
def test_layouts_that_do_not_fit_are_rejected_before_planning(model):
    gpu = model_gpu(model)
    fitting = set(tuple(sorted(counts_of(p).items())) for p in all_placements(gpu))
    names = sorted(profiles_by_name(gpu))
    rng = random.Random(model)
    rejected = 0
    for dummy in range(300):
        target = dict((name, rng.randint(0, 2)) for name in rng.sample(names, 3))
        key = tuple(sorted((k, v) for k, v in target.items() if v))
        if key in fitting:
            continue
        with pytest.raises(PlanningError):
            plan_gpu(gpu, target)
        rejected += 1
    assert rejected > 20


# ---- transitions with busy instances ------------------------------------------------

def test_busy_3g_is_kept_and_2g_fill_the_other_half():
    gpu = with_instances(model_gpu('A100-SXM4-80GB'), [('3g.40gb', 4, [4242])])
    plan = plan_gpu(gpu, {'2g.20gb': 2, '3g.40gb': 1})
    assert [a['action'] for a in plan.actions] == ['create_gpu_instance', 'create_compute_instance'] * 2
    assert sorted(a['placement']['start'] for a in plan.actions if a['action'] == 'create_gpu_instance') == [0, 2]
    assert [(e['profile'], e['placement']['start'], e['id']) for e in plan.after] == [
        ('2g.20gb', 0, None), ('2g.20gb', 2, None), ('3g.40gb', 4, 1)]


def test_seed_sequence_2g_2g_3g_succeeds_on_an_empty_gpu():
    gpu = model_gpu('A100-SXM4-80GB')
    plan = plan_gpu(gpu, {'2g.20gb': 2, '3g.40gb': 1})
    assert sorted((e['profile'], e['placement']['start']) for e in plan.after) == [
        ('2g.20gb', 0), ('2g.20gb', 2), ('3g.40gb', 4)]


def test_compute_instance_keys_are_packed_into_few_gpu_instances():
    gpu = model_gpu('A100-SXM4-80GB')
    plan = plan_gpu(gpu, {'1c.3g.40gb': 4})
    assert [(e['profile'], len(e['compute_instances'])) for e in plan.after] == [('3g.40gb', 3), ('3g.40gb', 1)]
    starts = [ci['placement']['start'] for ci in plan.after[0]['compute_instances']]
    assert starts == [0, 1, 2]


def test_busy_instance_the_layout_drops_is_an_error_naming_it():
    gpu = with_instances(model_gpu('A100-SXM4-80GB'), [('3g.40gb', 4, [4242])])
    with pytest.raises(PlanningError) as error:
        plan_gpu(gpu, {'1g.10gb': 7})
    message = str(error.value)
    assert 'GPU 0' in message and 'GPU instance 1' in message and '3g.40gb' in message and '4242' in message


def test_busy_instance_in_the_way_is_an_error_not_a_destroy():
    # busy 1g at slice 0 blocks the only 7g placement
    gpu = with_instances(model_gpu('A100-SXM4-80GB'), [('1g.10gb', 0, [77])])
    with pytest.raises(PlanningError) as error:
        plan_gpu(gpu, {'1g.10gb': 1, '4g.40gb': 1})
    assert 'busy' in str(error.value) and '77' in str(error.value)


def test_idempotent_when_profiles_match_even_if_placement_differs():
    gpu = with_instances(model_gpu('A100-SXM4-80GB'), [('1g.10gb', 6, []), ('1g.10gb', 3, [])])
    assert not plan_gpu(gpu, {'1g.10gb': 2}).changed


def test_repack_moves_idle_instances_to_free_the_largest_profile():
    gpu = with_instances(model_gpu('A100-SXM4-80GB'), [('1g.10gb', 1, []), ('1g.10gb', 5, [])])
    assert not plan_gpu(gpu, {'1g.10gb': 2}).changed
    plan = plan_gpu(gpu, {'1g.10gb': 2}, repack=True)
    assert plan.changed
    assert plan.analysis['largest_placeable'] in ('3g.40gb', '4g.40gb')


def test_repack_never_moves_busy_instances():
    gpu = with_instances(model_gpu('A100-SXM4-80GB'), [('1g.10gb', 1, [5]), ('1g.10gb', 5, [])])
    plan = plan_gpu(gpu, {'1g.10gb': 2}, repack=True)
    destroyed = [a['gpu_instance_id'] for a in plan.actions if a['action'] == 'destroy_gpu_instance']
    assert 1 not in destroyed


def _split(gpu, instances):
    """``gpu`` with GPU instances ``(profile, start, [compute instance profiles], pids)``."""
    gpu = with_instances(gpu, [(profile, start, pids) for profile, start, dummy, pids in instances])
    split = []
    for gi, (dummy, dummy2, cis, dummy3) in zip(gpu.gpu_instances, instances):
        split.append(replace(gi, compute_instances=tuple(replace(gi.compute_instances[0], id=n, profile=ci, placement=Placement(n, 1))
                                                         for n, ci in enumerate(cis))))
    return replace(gpu, gpu_instances=tuple(split))


def test_current_specs_keep_each_gpu_instance_with_its_own_compute_instances():
    gpu = _split(model_gpu('A100-SXM4-80GB'), [('2g.20gb', 2, ['1c.2g.20gb'], []), ('2g.20gb', 4, ['1c.2g.20gb'], [])])
    assert [spec.signature for spec in current_specs(gpu)] == [('2g.20gb', ('1c.2g.20gb',))] * 2
    # The count grammar would pack both 1c into one 2g: the specs never do.
    assert [(e['profile'], len(e['compute_instances'])) for e in plan_gpu(gpu, {'1c.2g.20gb': 2}).after] == [('2g.20gb', 2)]
    plan = plan_gpu_specs(gpu, current_specs(gpu), repack=True)
    assert [(e['profile'], e['placement']['start'], [c['profile'] for c in e['compute_instances']]) for e in plan.after] == [
        ('2g.20gb', 0, ['1c.2g.20gb']), ('2g.20gb', 2, ['1c.2g.20gb'])]
    assert [a['gpu_instance_id'] for a in plan.actions if a['action'] == 'destroy_gpu_instance'] == [
        gpu.gpu_instances[1].id]
    assert not plan_gpu_specs(gpu, current_specs(gpu)).changed


def test_an_instance_is_matched_whatever_the_order_of_its_compute_instances():
    # NVML lists compute instances by placement: a 2c before a 1c is the instance the layout asks for all the same.
    gpu = _split(model_gpu('A100-SXM4-80GB'), [('3g.40gb', 4, ['2c.3g.40gb', '1c.3g.40gb'], [])])
    assert not plan_gpu(gpu, {'1c.3g.40gb': 1, '2c.3g.40gb': 1}).changed
    assert not plan_gpu_specs(gpu, current_specs(gpu)).changed


def test_specs_a_gpu_cannot_hold_are_refused():
    gpu = model_gpu('A100-SXM4-80GB')
    with pytest.raises(PlanningError, match='profile 5g.50gb is not offered'):
        plan_gpu_specs(gpu, [InstanceSpec('5g.50gb', ['5g.50gb'])])
    with pytest.raises(PlanningError, match='do not fit a 1g.10gb GPU instance'):
        plan_gpu_specs(gpu, [InstanceSpec('1g.10gb', ['1g.10gb', '1g.10gb'])])
    with pytest.raises(PlanningError, match='at most 1'):
        plan_gpu_specs(gpu, [InstanceSpec('7g.80gb', ['7g.80gb'])] * 2)


@pytest.mark.parametrize('model', MIG_MODELS)
def test_minimal_destroy_matches_brute_force_on_a_seeded_corpus(model):
    gpu = model_gpu(model)
    names = sorted(p['name'] for p in gpu.profiles)
    placements = sorted(all_placements(gpu))
    rng = random.Random('minimal-destroy-' + model)
    checked = unreachable = 0
    for dummy in range(40):
        current = rng.choice(placements)
        busy = [[1000 + i] if rng.random() < 0.3 else [] for i in range(len(current))]
        state = with_instances(gpu, [(name, start, pids) for (name, start), pids in zip(current, busy)])
        target = counts_of(rng.choice(placements)) if rng.random() < 0.7 else dict(
            (name, rng.randint(0, 2)) for name in rng.sample(names, 2))
        if not any(target.values()):
            continue
        expected = brute_force_min_destroyed(state, dict((k, v) for k, v in target.items() if v))
        try:
            plan = plan_gpu(state, target)
        except PlanningError:
            assert expected is None, 'planner failed where brute force reaches %s with %s destroyed' % (target, expected)
            unreachable += 1
            continue
        assert expected is not None
        destroyed = [a for a in plan.actions if a['action'] == 'destroy_gpu_instance']
        assert len(destroyed) == expected
        busy_ids = [gi.id for gi in state.gpu_instances if gi.busy]
        assert not [a for a in destroyed if a['gpu_instance_id'] in busy_ids]
        assert_valid_after(state, plan, target)
        checked += 1
    assert checked >= 10


def test_an_evictable_plan_keeps_the_instance_a_pod_holds_rather_than_an_unallocated_one():
    # 1g at 0 (unallocated) and 1g at 4 (a pod holds it, idle) -> 1x1g + 1x3g: one of them must go. Free space
    # alone would keep the one at 0 (the plan without pods does); the pod's instance is kept and nobody is evicted.
    gpu = with_instances(model_gpu('A100-SXM4-80GB'), [('1g.10gb', 0, []), ('1g.10gb', 4, [])])
    held = [gi.id for gi in gpu.gpu_instances if gi.start == 4][0]
    target = {'1g.10gb': 1, '3g.40gb': 1}
    plan = plan_gpu(gpu, target, holders=GpuHolders(instances={held: ('team/p',)}), evict=True)
    destroyed = [a for a in plan.actions if a['action'] == 'destroy_gpu_instance']
    assert [(a['placement']['start'], a.get('allocated_to')) for a in destroyed] == [(0, None)]
    without_pods = plan_gpu(gpu, target)
    assert [a['placement']['start'] for a in without_pods.actions if a['action'] == 'destroy_gpu_instance'] == [4]


def test_among_placements_equally_large_the_fewest_stranded_slices_win():
    # Repack of 1g at 1, 3, 6 into 4x1g + 1g+me: leaving them and adding around them keeps a 2g placeable but
    # strands a slice; moving the 1g at 6 keeps the same 2g and strands none.
    gpu = with_instances(model_gpu('A100-SXM4-80GB'), [('1g.10gb', 1, []), ('1g.10gb', 3, []), ('1g.10gb', 6, [])])
    plan = plan_gpu(gpu, {'1g.10gb': 4, '1g.10gb+me': 1}, repack=True)
    assert (plan.analysis['largest_placeable_slices'], plan.analysis['stranded_slices']) == (2, 0)
    assert [(e['profile'], e['placement']['start']) for e in plan.after] == [
        ('1g.10gb', 0), ('1g.10gb', 1), ('1g.10gb', 2), ('1g.10gb', 3), ('1g.10gb+me', 4)]
