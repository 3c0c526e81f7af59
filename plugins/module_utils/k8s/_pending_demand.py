# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Which pods the event source gpufleet.mig.mig_pending_pods tells about, and when: one event per burst of new
unschedulable MIG pods or releases (docs/eda.md). The source (extensions/eda) feeds it the pods it lists and
watches and puts the events it gives on ansible-rulebook's queue; the decisions are all here, on any monotonic
clock the caller passes.

Pure Python, no Ansible imports, no I/O.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._fast_path import FAST_EVENT_KEY
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pending_pods import holds_mig_devices, pending_mig_request, pod_key

EVENT_KEY = 'mig_pending_pods'


class PendingDemand(object):
    """The unschedulable MIG pods of the cluster, the pods holding MIG devices, and when to tell about them.

    A burst opens with the first pod that was not pending before (or was, left and came back), or with a pod that
    held MIG devices and ended or was deleted while told pods still wait (a release: its instances can serve them
    now). It closes ``quiet_period`` seconds after its latest new pod or release, or ``max_delay`` seconds after
    its start when they keep coming; then one event tells every pod still pending. Updates of pods already told
    about, pods that leave and releases while nothing waits open no burst; a burst left with nothing to tell (its
    new pods all left, and no release with a pod still waiting) tells nothing. So a release re-plans only while
    something waits: a run that serves every pod is followed by no event, however many pods end after it.
    Times are any monotonic clock in seconds (the caller's).
    """

    def __init__(self, quiet_period, max_delay, fast=None):
        self.quiet_period = float(quiet_period)
        self.max_delay = float(max_delay)
        self.fast = fast
        self.pending = {}
        self.told = set()
        self.holders = set()
        self.released = set()
        self.burst_start = None
        self.last_change = None

    def _new_keys(self):
        return sorted(key for key in self.pending if key not in self.told)

    def _for_the_full_path(self):
        """The waiting pods the full path plans for: all but those of a fast create under way (their instances are
        being made; a failed or late fast create gives them back, :meth:`_fall_back`)."""
        in_flight = self.fast.in_flight if self.fast is not None else {}
        return sorted(key for key in self.pending if key not in in_flight)

    def _nothing_to_tell(self):
        return not self._new_keys() and not (self.released and self._for_the_full_path())

    def _close_burst(self):
        self.burst_start = self.last_change = None
        self.released = set()

    def _mark_change(self, now):
        self.last_change = now
        if self.burst_start is None:
            self.burst_start = now

    def update(self, pod, now, deleted=False):
        """Take one pod as the API server now has it (``deleted``: it is gone or left the watched set)."""
        key = pod_key(pod)
        if self.fast is not None:
            self.fast.update_pod(pod, deleted)
        if not deleted and holds_mig_devices(pod):
            self.holders.add(key)
        elif key in self.holders:
            # A release; with nothing waiting the burst closes below at once (_nothing_to_tell).
            self.holders.discard(key)
            self.released.add(key)
            self._mark_change(now)
        request = None if deleted else pending_mig_request(pod)
        if request is None:
            self.pending.pop(key, None)
            self.told.discard(key)
            if self.fast is not None:
                self.fast.forget(key)
            if self._nothing_to_tell():
                self._close_burst()
            return
        was_new = key not in self.pending and key not in self.told
        self.pending[key] = request
        if was_new:
            self._mark_change(now)
            if self.fast is not None:
                self.fast.candidate(key, now)

    def update_node(self, node, now, deleted=False):
        """Take one Node as the API server now has it: the fast path's GPUs and rules, and the outcome of its runs."""
        if self.fast is not None:
            self._fall_back(self.fast.update_node(node, deleted), now)

    def replace_nodes(self, nodes, now):
        """A fresh list of every Node: nodes not in it are gone."""
        if self.fast is not None:
            self._fall_back(self.fast.replace_nodes(nodes), now)

    def _fall_back(self, keys, now):
        """The pods the fast path gave up on and that still wait go to the full demand playbook: new again."""
        for key in sorted(keys):
            if key in self.pending and key in self.told:
                self.told.discard(key)
                self._mark_change(now)

    def take_fast_events(self, now):
        """The fast path's events due now (create-only changes, one per host), its pods told; the pods whose fast run
        failed or timed out go back to the full path."""
        if self.fast is None:
            return []
        self._fall_back(self.fast.expired(now), now)
        if not self.fast.due(now):
            return []
        events = self.fast.decide(now, dict((key, self.pending[key]) for key in self.pending))
        for event in events:
            self.told.update(event[FAST_EVENT_KEY]['pods'])
        if self._nothing_to_tell():
            self._close_burst()
        return events

    def replace_all(self, pods, now):
        """A fresh list of every pod (after a start or a failure): pods not in it are gone, and a holder among
        them is a release (it ended while the watch was down)."""
        listed = dict((pod_key(pod), pod) for pod in pods)
        for key in sorted((set(self.pending) | self.holders) - set(listed)):
            self.update({'metadata': dict(zip(('namespace', 'name'), key.split('/', 1)))}, now, deleted=True)
        for pod in pods:
            self.update(pod, now)

    def _burst_wait(self, now):
        """Seconds until the open burst's event is due (0: due now), or None when no burst is open."""
        if self.burst_start is None:
            return None
        return max(0.0, min(self.last_change + self.quiet_period, self.burst_start + self.max_delay) - now)

    def seconds_until_due(self, now):
        """Seconds until the next event is due (0: due now), the open burst's or the fast path's, or None when neither
        waits."""
        waits = [wait for wait in (self._burst_wait(now), self.fast.seconds_until_due(now) if self.fast is not None else None)
                 if wait is not None]
        return min(waits) if waits else None

    def take_event(self, now):
        """The event of the burst when it is due (and the burst closed), else None."""
        wait = self._burst_wait(now)
        if wait is None or wait > 0:
            return None
        if self._nothing_to_tell():
            self._close_burst()
            return None
        new = self._new_keys()
        event = {EVENT_KEY: {
            'requests': [self.pending[key] for key in self._for_the_full_path()],
            'new': new,
            'released': sorted(self.released),
            'burst_seconds': round(now - self.burst_start, 3),
        }}
        self.told.update(new)
        self._close_burst()
        return event
