# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The fleet lease: one demand, layout or repack run plans at a time (module gpufleet.mig.mig_fleet_lease).

A coordination.k8s.io/v1 Lease names the run that holds it (spec.holderIdentity) for spec.leaseDurationSeconds
after its last renewal. Whether a run may take it follows client-go's leader election
(k8s.io/client-go/tools/leaderelection/leaderelection.go, tryAcquireOrRenew): a lease held by another holder is
taken once its record stayed unchanged for leaseDurationSeconds *as this run observed it* (the local clock from
the moment the record was first seen, so that clocks that disagree cannot cut a holder short); a holder renews
its own lease at any time, keeping acquireTime and leaseTransitions; taking it from another adds one transition.
One departure, because a playbook run is not a process that watches the lease for long: a run that waits less
than the lease's duration would never see a dead holder's lease expire, so a lease whose renewTime lies more than
its duration plus CLOCK_SKEW_SECONDS in the past by this run's wall clock counts as expired too. Releasing
(leaderelection.go, release) leaves the holder empty and the duration 1 s, so that anyone takes it at once.
Writes carry the read resourceVersion: of two runs racing for the same lease, the API server lets one update
through and answers the other 409 Conflict.

Pure Python, no Ansible imports: the decisions below take the Lease as the API server returns it and the clocks.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
from dataclasses import dataclass, field

# How far the holder's clock may be ahead of ours before a renewTime read with our clock could cut it short.
CLOCK_SKEW_SECONDS = 60


def micro_time(epoch_seconds):
    """A MicroTime as the API server writes it (RFC 3339, microseconds, UTC)."""
    moment = datetime.datetime.fromtimestamp(epoch_seconds, tz=datetime.timezone.utc)
    return moment.strftime('%Y-%m-%dT%H:%M:%S.%fZ')


def epoch_of(micro_time_text):
    """Seconds since the epoch of a MicroTime or RFC 3339 time ('...Z', with or without fractions), None if unreadable."""
    for layout in ('%Y-%m-%dT%H:%M:%S.%fZ', '%Y-%m-%dT%H:%M:%SZ'):
        try:
            moment = datetime.datetime.strptime(micro_time_text or '', layout)
        except ValueError:
            continue
        return moment.replace(tzinfo=datetime.timezone.utc).timestamp()
    return None


@dataclass(frozen=True)
class LeaseRecord:
    """What a Lease says about its holder (client-go's LeaderElectionRecord)."""
    holder: str = ''
    duration_seconds: int = 0
    acquire_time: str = ''
    renew_time: str = ''
    transitions: int = 0
    resource_version: str = field(default='', compare=False)

    @classmethod
    def of(cls, lease):
        """The record of a Lease object (a dict as the API returns it), None when there is no Lease."""
        if lease is None:
            return None
        spec = lease.get('spec') or {}
        return cls(holder=spec.get('holderIdentity') or '', duration_seconds=int(spec.get('leaseDurationSeconds') or 0),
                   acquire_time=spec.get('acquireTime') or '', renew_time=spec.get('renewTime') or '',
                   transitions=int(spec.get('leaseTransitions') or 0),
                   resource_version=(lease.get('metadata') or {}).get('resourceVersion') or '')


@dataclass(frozen=True)
class Observation:
    """A record and the local monotonic time this run first saw it unchanged (client-go's observedRecord and
    observedTime)."""
    record: LeaseRecord
    since: float


@dataclass(frozen=True)
class LeaseDecision:
    """What a run does with the lease now: ``create`` it, ``take`` it from a holder that is gone or let it go,
    ``renew`` its own, or ``wait`` for ``holder`` (``seconds_left``: until it counts as expired)."""
    action: str
    holder: str = ''
    seconds_left: float = 0.0
    record: LeaseRecord = None

    def problem(self, namespace, name):
        """One line naming the holder when the lease is held by another run, else None."""
        if self.action != 'wait':
            return None
        record = self.record
        return ('the fleet lease %s/%s is held by %s (acquired %s, renewed %s, for %ds): another demand, layout or '
                'repack run is planning; it is free when that run ends or %ds after its last renewal'
                % (namespace, name, self.holder, record.acquire_time or '?', record.renew_time or '?',
                   record.duration_seconds, record.duration_seconds))


def observe(previous, record, now):
    """The observation after reading ``record`` at local time ``now``: unchanged records keep their first sight."""
    if previous is not None and previous.record == record:
        return previous
    return Observation(record, now)


def decide(record, me, observation, now, wall_now=None):
    """May holder ``me`` take the lease whose record is ``record`` (None: no Lease), given this run's
    ``observation`` of it, the local monotonic time ``now`` and the wall clock ``wall_now`` (epoch seconds)?"""
    if not me:
        raise ValueError('the lease holder identity must not be empty')
    if record is None:
        return LeaseDecision('create')
    if record.holder == me:
        return LeaseDecision('renew', me, record=record)
    if record.holder:
        left = observation.since + record.duration_seconds - now
        renewed = epoch_of(record.renew_time)
        if wall_now is not None and renewed is not None:
            left = min(left, renewed + record.duration_seconds + CLOCK_SKEW_SECONDS - wall_now)
        if left > 0:
            return LeaseDecision('wait', record.holder, left, record)
    return LeaseDecision('take', record.holder, record=record)


def lease_spec(decision, me, duration_seconds, now_epoch):
    """The Lease spec a run writes for ``decision`` (create, take or renew) at wall time ``now_epoch``."""
    if decision.action not in ('create', 'take', 'renew'):
        raise ValueError('no lease to write for %r' % decision.action)
    if int(duration_seconds) < 1:
        raise ValueError('the lease duration must be at least 1 second, got %r' % duration_seconds)
    stamp = micro_time(now_epoch)
    record = decision.record or LeaseRecord()
    renewing = decision.action == 'renew'
    return {
        'holderIdentity': me,
        'leaseDurationSeconds': int(duration_seconds),
        'acquireTime': record.acquire_time if renewing and record.acquire_time else stamp,
        'renewTime': stamp,
        # client-go counts a transition whenever a run that did not hold the lease takes it.
        'leaseTransitions': record.transitions + (1 if decision.action == 'take' else 0),
    }


def release_spec(record, me, now_epoch):
    """The Lease spec that lets the lease go, or None when ``me`` does not hold it (nothing to release)."""
    if record is None or record.holder != me:
        return None
    stamp = micro_time(now_epoch)
    return {'holderIdentity': '', 'leaseDurationSeconds': 1, 'acquireTime': stamp, 'renewTime': stamp,
            'leaseTransitions': record.transitions}
