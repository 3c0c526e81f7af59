# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""k8s/_fast_path.FastPath: the create-only fast path of the event source mig_pending_pods, through PendingDemand
(moved from the source's tests)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import logging

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._fast_path import FastPath
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_demand import PendingDemand
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.pods import pod


# ---- the create-only fast path --------------------------------------------------------------------------------

def gpu_node(name='node-1', host='h1', instances=(('1g.10gb', 0, ['team-a/held']),), outcome=None, taints=()):
    from ansible_collections.gpufleet.mig.plugins.module_utils.planning._demand_fast import gpus_annotation
    from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.test_demand_planner import gpu
    annotations = {'gpufleet.mig/gpus': gpus_annotation(host, {'gpus': [gpu(0, instances)]})}
    if outcome:
        annotations['gpufleet.mig/demand-create'] = json.dumps(outcome)
    return {'metadata': {'name': name, 'labels': {'kubernetes.io/hostname': name}, 'annotations': annotations},
            'spec': {'taints': [dict(zip(('key', 'value', 'effect'), t)) for t in taints]},
            'status': {'allocatable': {'cpu': '8', 'memory': '32Gi'}}}


def fast_demand(**extra):
    fast = FastPath(quiet_period=1, timeout=60, token='t', **extra)
    return PendingDemand(quiet_period=10, max_delay=60, fast=fast)


def small(name='small', **extra):
    return pod(name, {'nvidia.com/mig-1g.20gb': '1'}, **extra)


def test_a_pod_that_fits_in_free_slices_is_one_fast_event_after_the_short_quiet_period_and_no_full_event():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small(), 100)
    assert state.seconds_until_due(100) == 1.0
    assert state.take_fast_events(100.5) == []
    [event] = state.take_fast_events(101)
    change = event['mig_demand_create']
    assert change['run'] == 'fast-t-1' and change['host'] == 'h1' and change['node'] == 'node-1'
    assert change['pods'] == ['team-a/small'] and change['gpus'] == {'0': {'1g.20gb': 1}}
    assert list(change['layout']['config']) == [change['layout']['name']]
    # Told: the full path's burst has nothing left to tell.
    assert state.take_event(110) is None and state.seconds_until_due(110) == 51.0   # the deadline: 101 + 60


def test_a_burst_splits_the_pod_that_fits_goes_fast_the_other_to_the_full_path():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small(), 100)
    state.update(pod('whole', {'nvidia.com/mig-7g.80gb': '1'}), 100.2)
    [fast] = state.take_fast_events(101.2)
    assert fast['mig_demand_create']['pods'] == ['team-a/small']
    assert state.take_event(105) is None
    event = state.take_event(110.2)['mig_pending_pods']
    assert event['new'] == ['team-a/whole']
    # The fast pod is not planned again by the full path while its create is under way (its instance is being made).
    assert [r['pod'] for r in event['requests']] == ['team-a/whole']


def test_a_refused_fast_run_gives_its_pods_to_the_full_path_at_once_and_never_fast_again():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small(), 100)
    run = state.take_fast_events(101)[0]['mig_demand_create']['run']
    # Another run's outcome changes nothing.
    state.update_node(gpu_node(outcome={'run': 'fast-other-1', 'result': 'refused'}), 102)
    assert state.take_event(200) is None
    state.update_node(gpu_node(outcome={'run': run, 'result': 'refused', 'reason': 'the free slices changed'}), 202)
    assert state.take_fast_events(203) == []
    event = state.take_event(212)['mig_pending_pods']
    assert event['new'] == ['team-a/small'] and [r['pod'] for r in event['requests']] == ['team-a/small']
    # Still waiting and updated: not a candidate of the fast path again.
    state.update(small(resource_version='2'), 213)
    assert state.take_fast_events(300) == [] and state.fast.candidates == set()


def test_a_created_run_leaves_its_pods_to_the_scheduler_until_the_timeout():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small(), 100)
    run = state.take_fast_events(101)[0]['mig_demand_create']['run']
    state.update_node(gpu_node(instances=(('1g.10gb', 0, ['team-a/held']), ('1g.20gb', 2, [])),
                               outcome={'run': run, 'result': 'created'}), 105)
    assert state.take_fast_events(150) == [] and state.take_event(150) is None
    assert state.seconds_until_due(150) == 11.0   # the pod's deadline: 101 + 60
    assert state.take_fast_events(161) == []
    assert state.take_event(171)['mig_pending_pods']['new'] == ['team-a/small']


def test_a_pod_bound_meanwhile_is_forgotten():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small(), 100)
    state.take_fast_events(101)
    state.update(small(phase='Running', scheduled=('True', ''), node_name='node-1'), 110)
    assert state.fast.in_flight == {} and state.seconds_until_due(500) is None


def test_a_host_with_a_run_under_way_is_not_decided_on_until_the_run_tells_its_outcome():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small(), 100)
    run = state.take_fast_events(101)[0]['mig_demand_create']['run']
    state.update(small('second'), 102)
    assert state.take_fast_events(103) == []          # the host is busy: the pod is left to the full path
    assert state.take_event(112)['mig_pending_pods']['new'] == ['team-a/second']
    state.update_node(gpu_node(instances=(('1g.10gb', 0, ['team-a/held']), ('1g.20gb', 2, [])),
                               outcome={'run': run, 'result': 'created'}), 113)
    state.update(small('third'), 114)
    [event] = state.take_fast_events(115)
    # The second pod, given up on by nobody but told to the full path already, may still be served here: both fit.
    assert event['mig_demand_create']['run'] == 'fast-t-2'
    assert 'team-a/third' in event['mig_demand_create']['pods']


def test_a_pod_the_node_does_not_admit_is_not_fast():
    state = fast_demand()
    state.update_node(gpu_node(taints=[('dedicated', 'gpu', 'NoSchedule')]), 0)
    state.update(small(), 100)
    assert state.take_fast_events(101) == []
    assert state.take_event(110)['mig_pending_pods']['new'] == ['team-a/small']


def test_a_deleted_node_or_a_relist_without_it_gives_its_run_back():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small(), 100)
    state.take_fast_events(101)
    state.replace_nodes([], 102)
    assert state.fast.hosts == {} and state.fast.runs == {}
    assert state.take_event(112)['mig_pending_pods']['new'] == ['team-a/small']


def test_a_node_whose_annotation_this_version_cannot_read_has_no_fast_path(caplog):
    node = gpu_node()
    node['metadata']['annotations']['gpufleet.mig/gpus'] = '{"version": 7}'
    state = fast_demand()
    with caplog.at_level(logging.WARNING):
        state.update_node(node, 0)
    assert state.fast.hosts == {} and 'node node-1: gpufleet.mig/gpus: version 7' in caplog.text
    state.update(small(), 100)
    assert state.take_fast_events(101) == []


def test_the_instance_a_fast_pod_got_is_not_free_for_the_next_one_though_the_annotation_says_so():
    state = fast_demand()
    state.update_node(gpu_node(), 0)
    state.update(small('first'), 100)
    run = state.take_fast_events(101)[0]['mig_demand_create']['run']
    # The run's annotation: the new 1g.20gb at 2, which nobody held when the GPUs were read.
    state.update_node(gpu_node(instances=(('1g.10gb', 0, ['team-a/held']), ('1g.20gb', 2, [])),
                               outcome={'run': run, 'result': 'created'}), 105)
    state.update(small('second'), 106)        # first not bound yet: on its way to the instance
    [event] = state.take_fast_events(107)
    assert event['mig_demand_create']['gpus'] == {'0': {'1g.20gb': 1}} and event['mig_demand_create']['pods'] == ['team-a/second']
    state.update(small('first', phase='Running', scheduled=('True', ''), node_name='node-1'), 108)
    assert state.fast.held_by_node(state.pending) == {'node-1': {'1g.20gb': 1}}
