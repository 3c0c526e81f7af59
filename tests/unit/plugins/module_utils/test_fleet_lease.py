# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet lease's decisions (module_utils/k8s/_fleet_lease): client-go's leader election on a Lease."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _fleet_lease as lease


def lease_object(holder, duration=60, transitions=2, renew='2026-12-04T19:00:00.000000Z', version='7'):
    return {'metadata': {'name': 'gpufleet-mig-fleet', 'namespace': 'default', 'resourceVersion': version},
            'spec': {'holderIdentity': holder, 'leaseDurationSeconds': duration, 'acquireTime': '2026-12-04T18:59:00.000000Z',
                     'renewTime': renew, 'leaseTransitions': transitions}}


def test_a_missing_lease_is_created():
    assert lease.decide(None, 'me', None, 0).action == 'create'


def test_a_run_renews_its_own_lease_whatever_the_clock():
    record = lease.LeaseRecord.of(lease_object('me'))
    assert lease.decide(record, 'me', lease.Observation(record, 0), 10 ** 6).action == 'renew'


def test_a_free_lease_is_taken_at_once():
    record = lease.LeaseRecord.of(lease_object(''))
    assert lease.decide(record, 'me', lease.Observation(record, 100), 100).action == 'take'


def test_another_holder_is_waited_for_until_its_record_stayed_unchanged_for_its_duration_as_observed_here():
    record = lease.LeaseRecord.of(lease_object('awx-job-7', duration=60))
    seen = lease.observe(None, record, 100)
    waiting = lease.decide(record, 'me', seen, 159)
    assert (waiting.action, waiting.holder, waiting.seconds_left) == ('wait', 'awx-job-7', 1)
    assert lease.decide(record, 'me', lease.observe(seen, record, 160), 160).action == 'take'


def test_a_renewal_seen_while_waiting_starts_the_observation_over():
    seen = lease.observe(None, lease.LeaseRecord.of(lease_object('awx-job-7')), 100)
    renewed = lease.LeaseRecord.of(lease_object('awx-job-7', renew='2026-12-04T19:00:50.000000Z', version='8'))
    again = lease.observe(seen, renewed, 150)
    assert again.since == 150
    assert lease.decide(renewed, 'me', again, 205).action == 'wait'


def test_the_resource_version_alone_is_no_change_of_the_record():
    first = lease.LeaseRecord.of(lease_object('x', version='7'))
    assert lease.observe(lease.Observation(first, 1), lease.LeaseRecord.of(lease_object('x', version='9')), 5).since == 1


def test_an_empty_holder_identity_is_refused():
    with pytest.raises(ValueError, match='must not be empty'):
        lease.decide(None, '', None, 0)


def test_the_held_message_names_the_holder_and_when_it_frees_on_one_line():
    record = lease.LeaseRecord.of(lease_object('awx-job-7', duration=900))
    problem = lease.decide(record, 'me', lease.Observation(record, 0), 1).problem('default', 'gpufleet-mig-fleet')
    assert problem == ('the fleet lease default/gpufleet-mig-fleet is held by awx-job-7 (acquired 2026-12-04T18:59:00.000000Z, '
                       'renewed 2026-12-04T19:00:00.000000Z, for 900s): another demand, layout or repack run is planning; '
                       'it is free when that run ends or 900s after its last renewal')
    assert lease.LeaseDecision('take').problem('default', 'x') is None


def test_create_take_and_renew_write_the_holder_duration_times_and_transitions():
    now = 1796410800.5  # 2026-12-04T19:00:00.5Z
    created = lease.lease_spec(lease.LeaseDecision('create'), 'me', 900, now)
    assert created == {'holderIdentity': 'me', 'leaseDurationSeconds': 900, 'acquireTime': '2026-12-04T19:00:00.500000Z',
                       'renewTime': '2026-12-04T19:00:00.500000Z', 'leaseTransitions': 0}
    record = lease.LeaseRecord.of(lease_object('old', transitions=2))
    taken = lease.lease_spec(lease.LeaseDecision('take', 'old', record=record), 'me', 900, now)
    assert (taken['leaseTransitions'], taken['acquireTime']) == (3, '2026-12-04T19:00:00.500000Z')
    mine = lease.LeaseRecord.of(lease_object('me', transitions=3))
    renewed = lease.lease_spec(lease.LeaseDecision('renew', 'me', record=mine), 'me', 900, now)
    assert (renewed['leaseTransitions'], renewed['acquireTime'], renewed['renewTime']) == (
        3, '2026-12-04T18:59:00.000000Z', '2026-12-04T19:00:00.500000Z')


def test_no_lease_is_written_for_a_wait_or_a_duration_under_one_second():
    with pytest.raises(ValueError, match='no lease to write'):
        lease.lease_spec(lease.LeaseDecision('wait', 'x'), 'me', 900, 0)
    with pytest.raises(ValueError, match='at least 1 second'):
        lease.lease_spec(lease.LeaseDecision('create'), 'me', 0, 0)


def test_release_empties_the_holder_with_a_one_second_duration_only_for_the_holder():
    now = 1796410800.0
    mine = lease.LeaseRecord.of(lease_object('me', transitions=4))
    assert lease.release_spec(mine, 'me', now) == {'holderIdentity': '', 'leaseDurationSeconds': 1,
                                                   'acquireTime': '2026-12-04T19:00:00.000000Z',
                                                   'renewTime': '2026-12-04T19:00:00.000000Z', 'leaseTransitions': 4}
    assert lease.release_spec(lease.LeaseRecord.of(lease_object('other')), 'me', now) is None
    assert lease.release_spec(None, 'me', now) is None


RENEWED = 1796410800.0  # 2026-12-04T19:00:00Z, the renewTime of lease_object


def test_a_lease_renewed_longer_ago_than_its_duration_and_the_skew_is_taken_at_first_sight():
    record = lease.LeaseRecord.of(lease_object('crashed-run', duration=60))
    seen = lease.observe(None, record, 100)
    assert lease.decide(record, 'me', seen, 100, RENEWED + 60 + lease.CLOCK_SKEW_SECONDS).action == 'take'
    waiting = lease.decide(record, 'me', seen, 100, RENEWED + 60 + lease.CLOCK_SKEW_SECONDS - 5)
    assert (waiting.action, waiting.seconds_left) == ('wait', 5)


def test_a_holder_whose_clock_is_ahead_is_not_cut_short_by_the_wall_clock():
    # renewTime in our future: the observation decides.
    record = lease.LeaseRecord.of(lease_object('ahead', duration=60))
    assert lease.decide(record, 'me', lease.observe(None, record, 100), 130, RENEWED - 3600).seconds_left == 30


def test_micro_times_are_read_with_or_without_fractions_and_garbage_is_none():
    assert lease.epoch_of('2026-12-04T19:00:00.000000Z') == RENEWED
    assert lease.epoch_of('2026-12-04T19:00:00Z') == RENEWED
    assert lease.epoch_of('') is None and lease.epoch_of('yesterday') is None
    record = lease.LeaseRecord.of(lease_object('x', duration=60, renew='garbage'))
    assert lease.decide(record, 'me', lease.observe(None, record, 0), 10, RENEWED * 2).action == 'wait'
