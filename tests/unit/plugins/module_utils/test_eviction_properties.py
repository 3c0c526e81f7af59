# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Properties of the all-or-none evictions over generated pods and PodDisruptionBudgets (random labels, selectors with
every operator and invalid ones, disruptionsAllowed from -1, stale generations, unhealthy pods, phases), against the
fake API server with the Eviction API's rules (eviction_api.py):

- the evictions never stop part way: every pod is evicted or none is;
- when they go ahead, no budget has more of its pods taking a disruption than its status.disruptionsAllowed;
- the budget check refuses exactly when the API server, asked pod by pod, would refuse one (no false refusal).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._eviction_pass import Target, evict_all_or_none
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.eviction_api import (
    FakeEvictionApi,
    pdb,
    pod,
    selects,
    target,
)

KEYS = ('app', 'tier')
VALUES = ('a', 'b')
NAMESPACES = ('ml', 'x')

labels = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=2)
expression = st.builds(lambda key, operator, values: {'key': key, 'operator': operator, 'values': values},
                       st.sampled_from(KEYS), st.sampled_from(('In', 'NotIn', 'Exists', 'DoesNotExist', 'Equals')),
                       st.lists(st.sampled_from(VALUES), max_size=2))
selector = st.one_of(st.none(), st.builds(lambda match, expressions: {'matchLabels': match, 'matchExpressions': expressions},
                                          labels, st.lists(expression, max_size=2)))


@st.composite
def cluster(draw):
    pods = []
    for index in range(draw(st.integers(0, 6))):
        pods.append(pod('p%d' % index, draw(labels), namespace=draw(st.sampled_from(NAMESPACES)),
                        phase=draw(st.sampled_from(('Running', 'Running', 'Running', 'Pending', 'Succeeded', 'Unknown'))),
                        ready=draw(st.booleans()), deleting=draw(st.integers(0, 5)) == 0))
    budgets = []
    for index in range(draw(st.integers(0, 4))):
        generation = draw(st.integers(1, 3))
        budgets.append(pdb('b%d' % index, draw(selector), draw(st.integers(-1, 3)), namespace=draw(st.sampled_from(NAMESPACES)),
                           generation=generation, observed=generation - draw(st.sampled_from((0, 0, 0, 1))),
                           current=draw(st.integers(0, 3)), desired=draw(st.integers(0, 3)),
                           policy=draw(st.sampled_from((None, 'AlwaysAllow', 'IfHealthyBudget')))))
    return pods, budgets


def targets_of(pods):
    return [Target.from_dict(target(p['metadata']['name'], p['metadata']['namespace'])) for p in pods]


def taking(pods, budget):
    """The pods whose eviction takes one of ``budget``'s disruptions, counted apart from the code under test."""
    spec, status = budget['spec'], budget['status']
    counted = []
    for p in pods:
        metadata = p['metadata']
        if metadata['namespace'] != budget['metadata']['namespace'] or not selects(spec.get('selector'), metadata['labels']):
            continue
        if p['status']['phase'] in ('Pending', 'Succeeded', 'Failed') or metadata.get('deletionTimestamp'):
            continue
        ready = p['status']['conditions'][0]['status'] == 'True'
        let_go = spec.get('unhealthyPodEvictionPolicy') == 'AlwaysAllow' or 0 < status['desiredHealthy'] <= status['currentHealthy']
        if not ready and let_go:
            continue
        counted.append(metadata['name'])
    return counted


def one_by_one(pods, budgets):
    """Whether the API server, asked for each eviction in turn (a real pass, nobody else evicting), accepts them all."""
    api = FakeEvictionApi(pods, budgets)
    return all(api.evict(t, False).status == 201 for t in targets_of(pods))


FAST = settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(cluster())
def test_all_or_none_and_every_budget_fits_and_no_false_refusal(generated):
    pods, budgets = generated
    api = FakeEvictionApi(pods, budgets)
    run = evict_all_or_none(api, targets_of(pods), False, 0, lambda: 0.0, lambda seconds: None)
    evicted = [t.name for t in run.evicted]
    assert evicted == [] or sorted(evicted) == sorted(p['metadata']['name'] for p in pods), run.problem()
    if evicted or not pods:
        assert run.problem() is None
        for budget in budgets:
            assert len(taking(pods, budget)) <= budget['status']['disruptionsAllowed'] or not taking(pods, budget)
    else:
        assert run.problem() is not None and api.requests('evict') == []
    assert (run.problem() is None) == one_by_one(pods, budgets)
