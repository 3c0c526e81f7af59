# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""_eviction_pass: budgets before any request, a dry run of each, then the real pass that retries a 429 as kubectl drain
does and, stopped, names exactly the pods it evicted; against a fake API server with the Eviction API's rules."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._eviction_pass import (
    RETRY_DELAY,
    Answer,
    EvictionApiError,
    Target,
    evict_all_or_none,
)
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.eviction_api import FakeEvictionApi, pdb, pod, target

WEB = {'matchLabels': {'app': 'web'}}
REFUSED_429 = Answer(429, "Cannot evict pod as it would violate the pod's disruption budget.",
                     (('DisruptionBudget', 'The disruption budget web needs 1 healthy pods and has 1 currently'),))


class Clock(object):
    """time.monotonic and time.sleep for the tests: sleeping moves the clock."""

    def __init__(self):
        self.now = 100.0
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def run(api, names, dry_run=False, timeout=60, clock=None):
    clock = clock or Clock()
    return evict_all_or_none(api, [Target.from_dict(target(n)) for n in names], dry_run, timeout, clock, clock.sleep)


def keys(targets):
    return [t['name'] for t in targets]


def test_two_replicas_under_max_unavailable_one_both_pass_the_dry_run_but_neither_is_evicted():
    """The issue's case: the API server does not decrement a budget on a dry run."""
    api = FakeEvictionApi([pod('web-0', {'app': 'web'}), pod('web-1', {'app': 'web'})], [pdb('web', WEB, 1)])
    result = run(api, ['web-0', 'web-1'])
    assert api.requests('dry-run') == ['ml/web-0', 'ml/web-1'] and api.requests('evict') == []
    assert result.stage == 'budgets' and result.evicted == ()
    assert result.problem().startswith('not every pod to evict can be evicted, so none was: PodDisruptionBudget ml/web '
                                       'allows 1 disruption(s) now')
    assert result.problem().endswith('; each passed its dry run, but a dry run uses up no disruption')
    as_dict = result.as_dict()
    assert [(r['pod'], r['allowed'], r['status'], r['from_api'], r['evicted']) for r in as_dict['results']] == [
        ('ml/web-0', False, 429, False, False), ('ml/web-1', False, 429, False, False)]
    assert [r['pod'] for r in as_dict['refused']] == ['ml/web-0', 'ml/web-1']
    assert as_dict['budgets']['groups'][0]['pods'] == ['ml/web-0', 'ml/web-1']
    assert keys(as_dict['not_evicted']) == ['web-0', 'web-1']


def test_a_budget_refusal_keeps_the_other_pods_dry_run_answers():
    # The API server's dry run refuses a pod under two budgets itself (HTTP 500); the check after it does too.
    api = FakeEvictionApi([pod('a'), pod('web-0', {'app': 'web', 't': '1'})],
                          [pdb('web', WEB, 5), pdb('t', {'matchLabels': {'t': '1'}}, 5)], dry_script={'web-0': [Answer(201)]})
    result = run(api, ['a', 'web-0']).as_dict()
    assert result['stage'] == 'budgets'
    assert [(r['pod'], r['allowed'], r['status'], r['from_api']) for r in result['results']] == [
        ('ml/a', True, 201, True), ('ml/web-0', False, 500, False)]
    assert [r['pod'] for r in result['refused']] == ['ml/web-0']


def test_a_dry_run_refusal_comes_first_in_the_api_servers_words():
    api = FakeEvictionApi([pod('web-0', {'app': 'web'})], [pdb('web', WEB, 0, current=1, desired=1)])
    result = run(api, ['web-0'])
    assert result.stage == 'dry_run' and api.requests('evict') == []
    assert result.problem() == (
        "the API server refused the eviction (tried as a dry run first) of a pod: ml/web-0: HTTP 429 Cannot evict pod as "
        "it would violate the pod's disruption budget (The disruption budget web needs 1 healthy pods and has 1 currently); "
        'nobody was evicted')


def test_every_pod_is_tried_as_a_dry_run_first_and_one_refusal_evicts_nobody():
    api = FakeEvictionApi([pod('a'), pod('b'), pod('c')], [], dry_script={'b': [Answer(403, 'denied by webhook')]})
    result = run(api, ['a', 'b', 'c'])
    assert api.requests('dry-run') == ['ml/a', 'ml/b', 'ml/c'] and api.requests('evict') == []
    assert result.stage == 'dry_run'
    assert result.problem() == ('the API server refused the eviction (tried as a dry run first) of a pod: ml/b: HTTP 403 '
                                'denied by webhook; nobody was evicted')
    assert keys(result.as_dict()['not_evicted']) == ['a', 'b', 'c']


def test_a_dry_run_without_answer_is_a_refusal_too():
    api = FakeEvictionApi([pod('a'), pod('b')], [], dry_script={'a': [Answer(0, 'connection reset')]})
    result = run(api, ['a', 'b'])
    assert api.requests('evict') == []
    assert 'ml/a: no answer (connection reset)' in result.problem()


def test_a_dry_run_asks_and_evicts_nothing():
    api = FakeEvictionApi([pod('a'), pod('web-0', {'app': 'web'})], [pdb('web', WEB, 1)])
    result = run(api, ['a', 'web-0'], dry_run=True)
    assert api.requests('dry-run') == ['ml/a', 'ml/web-0'] and api.requests('evict') == []
    assert result.problem() is None and result.as_dict()['not_evicted'] == [] and result.as_dict()['evicted'] == []


def test_all_evicted_in_the_budgets_order_when_everything_allows():
    pods = [pod('web-0', {'app': 'web'}), pod('web-1', {'app': 'web'}, ready=False), pod('free')]
    api = FakeEvictionApi(pods, [pdb('web', WEB, 1, current=1, desired=1)])
    result = run(api, ['web-0', 'web-1', 'free'])
    # The unhealthy replica goes first, while the budget's healthy count still lets it go without a disruption.
    assert api.requests('evict') == ['ml/free', 'ml/web-1', 'ml/web-0']
    assert result.problem() is None
    as_dict = result.as_dict()
    assert keys(as_dict['evicted']) == ['free', 'web-1', 'web-0'] and as_dict['not_evicted'] == []
    assert all(r['evicted'] and r['status'] == 201 for r in as_dict['results'])


def test_a_429_race_in_the_real_pass_is_tried_again_every_5_seconds():
    api = FakeEvictionApi([pod('a'), pod('b')], [], script={'b': [REFUSED_429, REFUSED_429]})
    clock = Clock()
    result = run(api, ['a', 'b'], clock=clock)
    assert api.requests('evict') == ['ml/a', 'ml/b', 'ml/b', 'ml/b']
    assert clock.slept == [RETRY_DELAY, RETRY_DELAY] and RETRY_DELAY == 5
    assert result.problem() is None and keys(result.as_dict()['evicted']) == ['a', 'b']


def test_a_429_past_the_timeout_stops_the_pass_and_names_who_was_evicted():
    api = FakeEvictionApi([pod('a'), pod('b'), pod('c')], [], script={'b': [REFUSED_429] * 10})
    clock = Clock()
    result = run(api, ['a', 'b', 'c'], timeout=12, clock=clock)
    # Tried at 0, 5 and 10 s; 15 s would be past the 12 s timeout.
    assert api.requests('evict') == ['ml/a', 'ml/b', 'ml/b', 'ml/b'] and clock.slept == [5, 5]
    assert result.problem() == (
        "the API server refused the eviction of ml/b: HTTP 429 Cannot evict pod as it would violate the pod's disruption "
        'budget (The disruption budget web needs 1 healthy pods and has 1 currently) (tried every 5 s for 10 s); the '
        'evictions stopped there: evicted ml/a; not evicted ml/b, ml/c')
    as_dict = result.as_dict()
    assert keys(as_dict['evicted']) == ['a'] and keys(as_dict['not_evicted']) == ['b', 'c']
    assert [r['pod'] for r in as_dict['refused']] == ['ml/b']
    assert [(r['pod'], r['evicted'], r['status']) for r in as_dict['results']] == [
        ('ml/a', True, 201), ('ml/b', False, 429), ('ml/c', False, 201)]


def test_a_retry_that_ends_exactly_at_the_timeout_is_made():
    api = FakeEvictionApi([pod('a')], [], script={'a': [REFUSED_429] * 3})
    run(api, ['a'], timeout=10)
    assert api.requests('evict') == ['ml/a'] * 3


def test_a_timeout_of_zero_tries_once():
    api = FakeEvictionApi([pod('a')], [], script={'a': [REFUSED_429]})
    clock = Clock()
    result = run(api, ['a'], timeout=0, clock=clock)
    assert api.requests('evict') == ['ml/a'] and clock.slept == []
    assert 'evicted none; not evicted ml/a' in result.problem()


def test_any_other_refusal_is_not_tried_again():
    api = FakeEvictionApi([pod('a'), pod('b')], [], script={'a': [Answer(500, 'This pod has more than one PodDisruptionBudget')]})
    clock = Clock()
    result = run(api, ['a', 'b'], clock=clock)
    assert api.requests('evict') == ['ml/a'] and clock.slept == []
    assert result.problem() == ('the API server refused the eviction of ml/a: HTTP 500 This pod has more than one '
                                'PodDisruptionBudget; the evictions stopped there: evicted none; not evicted ml/a, ml/b')


def test_no_answer_mid_pass_reads_the_pod_back_and_finds_it_evicted():
    api = FakeEvictionApi([pod('a'), pod('b'), pod('c')], [], script={'b': [(Answer(0, 'connection reset by peer'), True)]})
    result = run(api, ['a', 'b', 'c'])
    assert api.requests('evict') == ['ml/a', 'ml/b'] and api.calls[-1] == ('read', 'ml/b')
    assert result.problem() == ('the API server did not answer the eviction of ml/b: connection reset by peer; read back, '
                                'it is evicted (gone, or being deleted); the evictions stopped there: evicted ml/a, ml/b; '
                                'not evicted ml/c')
    assert result.as_dict()['in_doubt'] == []


def test_no_answer_mid_pass_reads_the_pod_back_still_running():
    api = FakeEvictionApi([pod('a'), pod('b')], [], script={'b': [(Answer(0, 'timed out'), False)]})
    result = run(api, ['a', 'b'])
    assert 'read back, it still runs: not evicted; the evictions stopped there: evicted ml/a; not evicted ml/b' in result.problem()


def test_a_pod_being_deleted_or_replaced_reads_back_as_evicted():
    replaced = FakeEvictionApi([pod('a')], [], script={'a': [(Answer(0, 'timed out'), True)]})
    original = replaced.read_pod
    # A StatefulSet's new pod of the same name, elsewhere: not the one that was to be evicted.
    replaced.read_pod = lambda t: pod('a', uid='uid-new') if replaced.requests('evict') else original(t)
    assert keys(run(replaced, ['a']).as_dict()['evicted']) == ['a']
    deleting = FakeEvictionApi([pod('a')], [], script={'a': [(Answer(0, 'timed out'), False)]})
    deleting.pods[('ml', 'a')]['metadata']['deletionTimestamp'] = '2026-12-04T10:00:00Z'
    assert keys(run(deleting, ['a']).as_dict()['evicted']) == ['a']


def test_no_answer_and_no_read_back_until_the_timeout_leaves_the_pod_in_doubt():
    api = FakeEvictionApi([pod('a'), pod('b'), pod('c')], [], script={'b': [(Answer(0, 'connection refused'), False)]})
    clock = Clock()
    # b's own read before the pass works; the read back does not.
    original = api.read_pod

    def read_pod(t):
        if t.name == 'b' and api.requests('evict'):
            raise EvictionApiError('cannot read pod ml/b: no answer (connection refused)')
        return original(t)
    api.read_pod = read_pod
    result = run(api, ['a', 'b', 'c'], timeout=11, clock=clock)
    assert clock.slept == [5, 5]
    assert result.problem() == (
        'the API server did not answer the eviction of ml/b: connection refused; read back, it could not be read either '
        '(cannot read pod ml/b: no answer (connection refused)); the evictions stopped there: evicted ml/a; not evicted '
        'ml/c; evicted or not, unknown: ml/b')
    assert keys(result.as_dict()['in_doubt']) == ['b']


def test_pods_gone_before_are_neither_evicted_nor_left():
    api = FakeEvictionApi([pod('a'), pod('b', uid='uid-other')], [])
    result = run(api, ['a', 'b', 'gone']).as_dict()
    assert api.requests('evict') == ['ml/a']
    assert [(r['pod'], r['status'], r['from_api'], r['allowed']) for r in result['results']] == [
        ('ml/a', 201, True, True), ('ml/b', 404, False, True), ('ml/gone', 404, False, True)]
    assert keys(result['evicted']) == ['a'] and result['not_evicted'] == [] and result['problem'] is None


def test_the_budgets_of_each_namespace_are_read_once_before_anything_is_asked():
    api = FakeEvictionApi([pod('a'), pod('b', namespace='x')], [])
    evict_all_or_none(api, [Target.from_dict(target('a')), Target.from_dict(target('b', 'x'))], True, 0, Clock(), None)
    assert api.calls[:4] == [('read', 'ml/a'), ('read', 'x/b'), ('budgets', 'ml'), ('budgets', 'x')]


def test_a_read_without_answer_before_any_eviction_propagates():
    api = FakeEvictionApi([pod('a')], [], unreadable=['a'])
    with pytest.raises(EvictionApiError, match='no answer'):
        run(api, ['a'])
    assert api.requests('evict') == [] and api.requests('dry-run') == []
