# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""k8s/_pending_demand.PendingDemand: one event per burst of the event source mig_pending_pods, and the release
trigger (moved from the source's tests; which pod counts: test_pending_pods.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_demand import PendingDemand
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.pods import pod, running


# ---- one event per burst ----------------------------------------------------------------------------------

def demand():
    return PendingDemand(quiet_period=10, max_delay=60)


def test_a_burst_gives_one_event_after_the_quiet_period_with_every_pod():
    d = demand()
    d.update(pod('a'), 0)
    d.update(pod('b'), 4)
    assert d.take_event(13.9) is None
    assert d.seconds_until_due(4) == 10
    event = d.take_event(14)
    assert [r['pod'] for r in event['mig_pending_pods']['requests']] == ['team-a/a', 'team-a/b']
    assert event['mig_pending_pods']['new'] == ['team-a/a', 'team-a/b']
    assert event['mig_pending_pods']['burst_seconds'] == 14
    assert d.take_event(100) is None and d.seconds_until_due(100) is None


def test_pods_that_keep_coming_are_told_at_max_delay():
    d = demand()
    for second in range(0, 70, 5):
        d.update(pod('p%d' % second), second)
        event = d.take_event(second)
        if event:
            break
    assert second == 60 and len(event['mig_pending_pods']['requests']) == 13


def test_updates_of_pods_already_told_open_no_burst_and_a_new_pod_tells_all_still_pending():
    d = demand()
    d.update(pod('a'), 0)
    d.take_event(10)
    d.update(pod('a', resource_version='2'), 20)
    assert d.seconds_until_due(20) is None
    d.update(pod('b'), 30)
    event = d.take_event(40)
    assert [r['pod'] for r in event['mig_pending_pods']['requests']] == ['team-a/a', 'team-a/b']
    assert event['mig_pending_pods']['new'] == ['team-a/b']


def test_a_pod_that_got_scheduled_leaves_and_a_burst_of_only_gone_pods_tells_nothing():
    d = demand()
    d.update(pod('a'), 0)
    d.update(pod('a', phase='Running', node_name='gpu-1'), 3)
    assert d.seconds_until_due(3) is None and d.take_event(20) is None
    d.update(pod('b'), 30)
    d.update(pod('b'), 31, deleted=True)
    assert d.take_event(50) is None


def test_a_pod_that_leaves_and_comes_back_is_new_again():
    d = demand()
    d.update(pod('a'), 0)
    d.take_event(10)
    d.update(pod('a'), 11, deleted=True)
    d.update(pod('a'), 12)
    assert d.take_event(22)['mig_pending_pods']['new'] == ['team-a/a']


def test_a_relist_drops_pods_that_are_gone_and_keeps_told_ones_quiet():
    d = demand()
    d.update(pod('a'), 0)
    d.update(pod('b'), 0)
    d.take_event(10)
    d.replace_all([pod('b'), pod('other', resources={'cpu': '1'})], 20)
    assert sorted(d.pending) == ['team-a/b'] and d.seconds_until_due(20) is None
    d.replace_all([pod('b'), pod('c')], 30)
    assert d.take_event(40)['mig_pending_pods']['new'] == ['team-a/c']


def test_the_same_pod_name_in_two_namespaces_is_two_requests():
    d = demand()
    d.update(pod('p', namespace='a'), 0)
    d.update(pod('p', namespace='b'), 0)
    assert len(d.take_event(10)['mig_pending_pods']['requests']) == 2


# ---- the release trigger -----------------------------------------------------------------------------------

def test_a_holder_that_ends_while_a_told_pod_waits_tells_again_after_the_quiet_period():
    d = demand()
    d.update(running('done'), 0)
    d.update(pod('a'), 0)
    d.take_event(10)
    d.update(running('done', phase='Succeeded'), 20, deleted=True)
    assert d.seconds_until_due(20) == 10
    event = d.take_event(30)['mig_pending_pods']
    assert [r['pod'] for r in event['requests']] == ['team-a/a']
    assert event['new'] == [] and event['released'] == ['team-a/done']


def test_releases_are_debounced_into_one_event():
    d = demand()
    for name in ('w0', 'w1', 'w2'):
        d.update(running(name), 0)
    d.update(pod('a'), 0)
    d.take_event(10)
    d.update(running('w0'), 20, deleted=True)
    d.update(running('w1', phase='Failed'), 25)
    d.update(running('w2'), 27, deleted=True)
    assert d.take_event(36) is None
    assert d.take_event(37)['mig_pending_pods']['released'] == ['team-a/w0', 'team-a/w1', 'team-a/w2']
    assert d.take_event(100) is None


def test_a_release_while_nothing_waits_tells_nothing_so_a_run_that_served_everyone_ends_the_loop():
    d = demand()
    d.update(running('done'), 0)
    d.update(running('done'), 5, deleted=True)
    assert d.seconds_until_due(5) is None and d.take_event(100) is None
    # A release whose waiting pods were all placed before it was due tells nothing either.
    d.update(running('other'), 10)
    d.update(pod('a'), 10)
    d.take_event(20)
    d.update(running('other'), 30, deleted=True)
    d.update(pod('a', phase='Running', node_name='gpu-1', scheduled=('True', '')), 32)
    assert d.seconds_until_due(32) is None and d.take_event(50) is None


def test_a_pod_that_never_held_mig_devices_releases_nothing():
    d = demand()
    d.update(pod('a'), 0)
    d.take_event(10)
    d.update(running('cpu', resources={'cpu': '1'}), 11)
    d.update(running('cpu', resources={'cpu': '1'}), 12, deleted=True)
    d.update(pod('gone-before-bound'), 13, deleted=True)
    assert d.seconds_until_due(13) is None


def test_a_relist_that_misses_a_holder_is_a_release():
    d = demand()
    d.replace_all([running('done'), pod('a')], 0)
    d.take_event(10)
    d.replace_all([pod('a')], 20)
    assert d.take_event(30)['mig_pending_pods']['released'] == ['team-a/done']
