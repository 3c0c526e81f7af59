# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_eviction_budgets: the pods to evict grouped by PodDisruptionBudget as the Eviction API selects them, and one
budget that cannot allow its whole group refusing every eviction."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._eviction_budgets import (
    MAX_DISRUPTED_PODS,
    Budget,
    PodToEvict,
    budgets_of,
    requirements_match,
    selector_requirements,
)
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.eviction_api import pdb, pod

WEB = {'matchLabels': {'app': 'web'}}


def matches(selector, labels):
    return requirements_match(selector_requirements(selector), labels)


@pytest.mark.parametrize('selector, labels, expected', [
    ({'matchLabels': {'app': 'web'}}, {'app': 'web', 'x': '1'}, True),
    ({'matchLabels': {'app': 'web'}}, {'app': 'db'}, False),
    ({'matchLabels': {'app': 'web'}}, {}, False),
    ({'matchLabels': {'app': 'web', 'tier': 'a'}}, {'app': 'web'}, False),
    ({'matchExpressions': [{'key': 'app', 'operator': 'In', 'values': ['web', 'api']}]}, {'app': 'api'}, True),
    ({'matchExpressions': [{'key': 'app', 'operator': 'In', 'values': ['web']}]}, {'app': 'db'}, False),
    ({'matchExpressions': [{'key': 'app', 'operator': 'In', 'values': ['web']}]}, {}, False),
    # NotIn selects a pod without the key (pkg/labels Requirement.Matches).
    ({'matchExpressions': [{'key': 'app', 'operator': 'NotIn', 'values': ['web']}]}, {}, True),
    ({'matchExpressions': [{'key': 'app', 'operator': 'NotIn', 'values': ['web']}]}, {'app': 'db'}, True),
    ({'matchExpressions': [{'key': 'app', 'operator': 'NotIn', 'values': ['web']}]}, {'app': 'web'}, False),
    ({'matchExpressions': [{'key': 'gpu', 'operator': 'Exists'}]}, {'gpu': ''}, True),
    ({'matchExpressions': [{'key': 'gpu', 'operator': 'Exists'}]}, {}, False),
    ({'matchExpressions': [{'key': 'gpu', 'operator': 'DoesNotExist'}]}, {}, True),
    ({'matchExpressions': [{'key': 'gpu', 'operator': 'DoesNotExist'}]}, {'gpu': 'a'}, False),
    # Every requirement must hold: matchLabels and matchExpressions together.
    ({'matchLabels': {'app': 'web'}, 'matchExpressions': [{'key': 'gpu', 'operator': 'Exists'}]}, {'app': 'web'}, False),
    ({'matchLabels': {'app': 'web'}, 'matchExpressions': [{'key': 'gpu', 'operator': 'Exists'}]}, {'app': 'web', 'gpu': '1'}, True),
    # An empty or missing selector guards nothing in the Eviction API ("it should match nothing, not everything").
    ({}, {'app': 'web'}, False),
    (None, {'app': 'web'}, False),
    ({'matchLabels': {}, 'matchExpressions': []}, {'app': 'web'}, False),
    # An invalid selector guards nothing either (getPodDisruptionBudgets skips it).
    ({'matchLabels': {'app': 'web'}, 'matchExpressions': [{'key': 'app', 'operator': 'Equals', 'values': ['web']}]},
     {'app': 'web'}, False),
    ({'matchExpressions': [{'key': 'app', 'operator': 'In', 'values': []}]}, {'app': 'web'}, False),
    ({'matchExpressions': [{'key': 'app', 'operator': 'NotIn'}]}, {'app': 'web'}, False),
    ({'matchExpressions': [{'key': 'app', 'operator': 'Exists', 'values': ['web']}]}, {'app': 'web'}, False),
    ({'matchExpressions': [{'key': 'app', 'operator': 'DoesNotExist', 'values': ['x']}]}, {}, False),
])
def test_selector_as_the_api_server_matches_it(selector, labels, expected):
    assert matches(selector, labels) is expected


def test_a_budget_selects_only_pods_of_its_namespace():
    budget = Budget.from_object(pdb('web', WEB, 1))
    assert budget.selects(PodToEvict.from_object(pod('a', {'app': 'web'})))
    assert not budget.selects(PodToEvict.from_object(pod('a', {'app': 'web'}, namespace='other')))


def test_budget_read_from_its_object():
    budget = Budget.from_object(pdb('web', WEB, 3, generation=4, observed=3, current=5, desired=2, policy='AlwaysAllow',
                                    disrupted=2, sync_failed='found no controllers'))
    assert (budget.key, budget.disruptions_allowed, budget.generation, budget.observed_generation, budget.current_healthy,
            budget.desired_healthy, budget.always_allow_unhealthy, budget.disrupted_pods, budget.sync_failed) == (
        'ml/web', 3, 4, 3, 5, 2, True, 2, 'found no controllers')
    plain = Budget.from_object({'metadata': {'name': 'b'}, 'spec': {'selector': WEB}})
    assert (plain.namespace, plain.disruptions_allowed, plain.always_allow_unhealthy, plain.sync_failed) == ('default', 0, False, None)


@pytest.mark.parametrize('phase, deleting, asks', [
    ('Running', False, True), ('Unknown', False, True), ('', False, True),
    ('Pending', False, False), ('Succeeded', False, False), ('Failed', False, False), ('Running', True, False)])
def test_which_pods_the_eviction_api_asks_a_budget_for(phase, deleting, asks):
    assert PodToEvict.from_object(pod('a', phase=phase, deleting=deleting)).asks_budgets() is asks


def test_readiness_is_the_ready_condition():
    assert PodToEvict.from_object(pod('a', ready=True)).ready
    assert not PodToEvict.from_object(pod('a', ready=False)).ready
    assert not PodToEvict.from_object({'metadata': {'name': 'a'}, 'status': {'phase': 'Running'}}).ready


def test_two_replicas_under_max_unavailable_one_are_refused_together_naming_the_budget():
    decision = budgets_of([pod('web-0', {'app': 'web'}), pod('web-1', {'app': 'web'}), pod('other')], [pdb('web', WEB, 1)])
    assert decision.refused() == dict.fromkeys(['ml/web-0', 'ml/web-1'], decision.groups[0].refusal())
    problem = decision.problem()
    assert problem.startswith('not every pod to evict can be evicted, so none was: PodDisruptionBudget ml/web allows 1 '
                              'disruption(s) now (status.disruptionsAllowed), fewer than the 2 pod(s) to evict (ml/web-0, ml/web-1)')
    assert decision.free == ('ml/other',)


def test_a_budget_that_allows_the_whole_group_refuses_nothing():
    decision = budgets_of([pod('web-0', {'app': 'web'}), pod('web-1', {'app': 'web'})], [pdb('web', WEB, 2)])
    assert decision.problem() is None and decision.refused() == {}
    assert decision.groups[0].pods == ('ml/web-0', 'ml/web-1')


def test_a_budget_of_zero_refuses_its_only_pod_and_says_when_its_controller_failed():
    decision = budgets_of([pod('web-0', {'app': 'web'})], [pdb('web', WEB, 0, sync_failed='found no controllers for pod "web-0"')])
    assert 'allows 0 disruption(s) now (status.disruptionsAllowed (its controller cannot compute it: condition ' \
           'DisruptionAllowed=False, reason SyncFailed: found no controllers for pod "web-0"))' in decision.problem()


def test_a_pod_under_two_budgets_is_refused_as_the_api_refuses_it():
    decision = budgets_of([pod('web-0', {'app': 'web', 'tier': 'a'})],
                          [pdb('web', WEB, 5), pdb('tier', {'matchLabels': {'tier': 'a'}}, 5)])
    assert decision.overlapping == (('ml/web-0', ('ml/tier', 'ml/web')),)
    assert decision.groups == ()
    assert decision.refused()['ml/web-0'] == (
        'ml/web-0 is selected by PodDisruptionBudgets ml/tier and ml/web; the Eviction API refuses it (HTTP 500: '
        '"This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.")')
    assert decision.refused()['ml/web-0'] in decision.problem()
    assert decision.order() == ('ml/web-0',)


def test_budgets_of_other_namespaces_and_pods_that_ask_no_budget_are_free():
    decision = budgets_of([pod('a', {'app': 'web'}, namespace='x'), pod('b', {'app': 'web'}, phase='Pending'),
                           pod('c', {'app': 'web'}, deleting=True)], [pdb('web', WEB, 0)])
    assert decision.free == ('x/a', 'ml/b', 'ml/c') and decision.problem() is None


@pytest.mark.parametrize('budget, takes', [
    (pdb('web', WEB, 0, policy='AlwaysAllow', current=0, desired=3), False),
    (pdb('web', WEB, 0, current=2, desired=2), False),
    (pdb('web', WEB, 0, current=1, desired=2), True),
    # desiredHealthy 0 (maxUnavailable 100%...): the unhealthy rule does not apply, the eviction takes a disruption.
    (pdb('web', WEB, 0, current=0, desired=0), True),
])
def test_an_unhealthy_pod_takes_no_disruption_when_its_budget_lets_it_go(budget, takes):
    decision = budgets_of([pod('web-0', {'app': 'web'}, ready=False)], [budget])
    assert decision.groups[0].unhealthy == (() if takes else ('ml/web-0',))
    assert (decision.problem() is not None) is takes


def test_a_healthy_pod_takes_a_disruption_even_when_the_budget_lets_unhealthy_ones_go():
    decision = budgets_of([pod('web-0', {'app': 'web'}), pod('web-1', {'app': 'web'}, ready=False)],
                          [pdb('web', WEB, 1, policy='AlwaysAllow')])
    assert (decision.groups[0].pods, decision.groups[0].unhealthy) == (('ml/web-0',), ('ml/web-1',))
    assert decision.problem() is None


@pytest.mark.parametrize('budget, reason', [
    (pdb('web', WEB, 5, generation=3, observed=2),
     'PodDisruptionBudget ml/web guards 1 pod(s) to evict (ml/web-0) but its controller has not processed its latest spec '
     'yet (status.observedGeneration 2 < metadata.generation 3; the API answers 429)'),
    (pdb('web', WEB, -1),
     'PodDisruptionBudget ml/web guards 1 pod(s) to evict (ml/web-0) and its status.disruptionsAllowed is negative (-1; '
     'the API answers 403)'),
    (pdb('web', WEB, 5, disrupted=MAX_DISRUPTED_PODS + 1),
     'PodDisruptionBudget ml/web guards 1 pod(s) to evict (ml/web-0) and lists more than 2000 status.disruptedPods its '
     'controller has not confirmed (the API answers 403)'),
])
def test_a_budget_the_api_would_refuse_outright(budget, reason):
    decision = budgets_of([pod('web-0', {'app': 'web'})], [budget])
    assert decision.groups[0].refusal() == reason


def test_a_budget_at_the_edges_allows():
    pods = [pod('web-0', {'app': 'web'})]
    assert budgets_of(pods, [pdb('web', WEB, 1, generation=3, observed=3, disrupted=MAX_DISRUPTED_PODS)]).problem() is None


def test_order_free_first_then_unhealthy_then_those_taking_a_disruption():
    decision = budgets_of([pod('web-0', {'app': 'web'}), pod('web-1', {'app': 'web'}, ready=False), pod('free'),
                           pod('db-0', {'app': 'db'})], [pdb('web', WEB, 1, current=1, desired=1), pdb('db', {'matchLabels': {'app': 'db'}}, 1)])
    assert decision.order() == ('ml/free', 'ml/web-1', 'ml/db-0', 'ml/web-0')
    assert decision.as_dict() == {
        'groups': [{'budget': 'ml/db', 'disruptions_allowed': 1, 'pods': ['ml/db-0'], 'unhealthy': [], 'refusal': None},
                   {'budget': 'ml/web', 'disruptions_allowed': 1, 'pods': ['ml/web-0'], 'unhealthy': ['ml/web-1'], 'refusal': None}],
        'overlapping': [], 'free': ['ml/free'], 'problem': None}
