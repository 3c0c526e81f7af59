# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The mig_layout role's eviction block (roles/mig_layout/tasks/k8s_pre.yml) wired to mig_pod_eviction: its
conditions and loops rendered by Ansible's templating against what the module returns (a pass stopped part way, a
dry run refused, a check-mode skip), so a broken line of the block fails here, not only on the real cluster."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._eviction_pass import Answer
from ansible_collections.gpufleet.mig.plugins.modules import mig_pod_eviction
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.eviction_api import FakeEvictionApi, pdb, pod, target

TASKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'roles', 'mig_layout', 'tasks', 'k8s_pre.yml')
BLOCK = 'Evict the pods on instances that go, all or none'
DRY_RUN = 'Try every eviction as a dry run (the Eviction API, PodDisruptionBudgets honoured)'
REFUSE = 'Refuse when any budget or eviction would refuse (nobody is evicted)'
EVICT = 'Evict them'
EVICTED_STORY = "Tell each evicted pod's story"
REFUSED_STORY = "Tell the refused pod's story"
NODE_STORY = "Tell the node's story (pods evicted)"
STOP = 'Stop before any GPU change when not every pod was evicted'
WAIT = 'Wait until the evicted pods are gone'


@pytest.fixture(scope='module')
def block():
    with open(TASKS) as handle:
        tasks = yaml.safe_load(handle)
    found = [task for task in tasks if task.get('name') == BLOCK]
    assert len(found) == 1
    return dict((task['name'], task) for task in found[0]['block']), [task['name'] for task in found[0]['block']]


def module_result(api, names, dry_run=False):
    """What Ansible registers for a mig_pod_eviction call."""
    result = mig_pod_eviction.outcome(api, [target(n) for n in names], dry_run, 0, clock=lambda: 0.0, sleep=None)
    return result


def render(expression, **variables):
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))


def holds(condition, **variables):
    return Templar(loader=DataLoader(), variables=variables).evaluate_conditional(trust_as_template(condition))


def when(task):
    conditions = task['when'] if isinstance(task['when'], list) else [task['when']]
    return ' and '.join('(%s)' % c for c in conditions)


PODS = [pod('a'), pod('b'), pod('c')]


def stopped_at_b():
    return module_result(FakeEvictionApi(PODS, [], script={'b': [Answer(403, 'denied by webhook')]}), ['a', 'b', 'c'])


def test_the_dry_run_comes_first_then_the_real_pass_then_the_stories_then_the_stop(block):
    tasks, order = block
    assert order.index(DRY_RUN) < order.index(REFUSE) < order.index(EVICT) < order.index(EVICTED_STORY) \
        < order.index(REFUSED_STORY) < order.index(STOP) < order.index(WAIT)
    assert order.index(NODE_STORY) < order.index(STOP)
    dry = tasks[DRY_RUN]['gpufleet.mig.mig_pod_eviction']
    assert dry == {'pods': '{{ mig_layout__evictions.evict }}', 'dry_run': True}
    real = tasks[EVICT]
    assert real['gpufleet.mig.mig_pod_eviction'] == {'pods': '{{ mig_layout__evictions.evict }}',
                                                     'timeout': '{{ mig_layout_k8s_eviction_timeout }}'}
    # Failed part way, the result is kept for the stories; the stop comes after them.
    assert real['ignore_errors'] is True and real['register'] == 'mig_layout__evicted'
    assert 'not ansible_check_mode' in real['when']


def test_the_dry_run_is_tried_again_until_no_problem_and_then_refuses_with_the_modules_words(block):
    tasks = block[0]
    until, refuse = tasks[DRY_RUN]['until'], when(tasks[REFUSE])
    web = {'matchLabels': {'app': 'web'}}
    refused = module_result(FakeEvictionApi([pod('w0', {'app': 'web'}), pod('w1', {'app': 'web'})], [pdb('web', web, 1)]),
                            ['w0', 'w1'], dry_run=True)
    allowed = module_result(FakeEvictionApi([pod('a')], []), ['a'], dry_run=True)
    unreadable = module_result(FakeEvictionApi([pod('a')], [], unreadable=['a']), ['a'], dry_run=True)
    assert refused['problem'] and allowed['problem'] is None and 'problem' not in unreadable
    # Tried again while a budget or dry run refuses; a pod or budget the module cannot read fails at once.
    assert [holds(until, mig_layout__eviction_tried=r) for r in (refused, allowed, unreadable)] == [False, True, True]
    assert [holds(refuse, mig_layout__eviction_tried=r) for r in (refused, allowed, unreadable)] == [True, False, True]
    skipped = {'skipped': True, 'changed': False}
    assert not holds(refuse, mig_layout__eviction_tried=skipped)
    variables = dict(mig_layout_k8s_node='node-1')
    message = render(tasks[REFUSE]['ansible.builtin.fail']['msg'], mig_layout__eviction_tried=refused, **variables)
    assert message.startswith('evictions on node node-1: not every pod to evict can be evicted, so none was: '
                              'PodDisruptionBudget ml/web allows 1')
    assert message.endswith('; no GPU was changed')
    message = render(tasks[REFUSE]['ansible.builtin.fail']['msg'], mig_layout__eviction_tried=unreadable, **variables)
    assert 'cannot read pod ml/a: no answer' in message and 'nobody was evicted' in message


def test_a_pass_stopped_part_way_tells_the_evicted_and_the_refused_pod_then_stops(block):
    tasks = block[0]
    result = stopped_at_b()
    result['failed'] = True
    variables = dict(mig_layout__pods={'resources': PODS}, mig_layout__evicted=result, mig_layout_k8s_events=True,
                     mig_layout_k8s_node='node-1', mig_layout__evictions={'evict': [target(n) for n in 'abc']})
    told = render(tasks[EVICTED_STORY]['loop'], **variables)
    assert [p['metadata']['name'] for p in told] == ['a']
    assert holds(when(tasks[EVICTED_STORY]), **variables)
    refused = render(tasks[REFUSED_STORY]['loop'], **variables)
    assert [p['metadata']['name'] for p in refused] == ['b']
    assert holds(when(tasks[REFUSED_STORY]), **variables)
    assert holds(when(tasks[NODE_STORY]), **variables)
    assert holds(when(tasks[STOP]), **variables)
    message = render(tasks[STOP]['ansible.builtin.fail']['msg'], **variables)
    assert message == ('evictions on node node-1: the API server refused the eviction of ml/b: HTTP 403 denied by webhook; '
                       'the evictions stopped there: evicted ml/a; not evicted ml/b, ml/c; no GPU was changed')


def test_a_complete_pass_tells_every_evicted_pod_and_does_not_stop(block):
    tasks = block[0]
    result = module_result(FakeEvictionApi(PODS, []), ['a', 'b', 'c'])
    variables = dict(mig_layout__pods={'resources': PODS}, mig_layout__evicted=result, mig_layout_k8s_events=True)
    assert [p['metadata']['name'] for p in render(tasks[EVICTED_STORY]['loop'], **variables)] == ['a', 'b', 'c']
    assert render(tasks[REFUSED_STORY]['loop'], **variables) == []
    assert not holds(when(tasks[REFUSED_STORY]), **variables)
    assert not holds(when(tasks[STOP]), **variables)


def test_a_skipped_pass_renders_no_story_and_no_stop(block):
    tasks = block[0]
    variables = dict(mig_layout__pods={'resources': PODS}, mig_layout__evicted={'skipped': True, 'changed': False},
                     mig_layout_k8s_events=True)
    assert render(tasks[EVICTED_STORY]['loop'], **variables) == []
    assert render(tasks[REFUSED_STORY]['loop'], **variables) == []
    assert not any(holds(when(tasks[name]), **variables) for name in (EVICTED_STORY, REFUSED_STORY, NODE_STORY, STOP))
