# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The layout advisor's judge: whole requests replayed, event by event, against a daily layout schedule.

Pure Python: no NVML, no Ansible. The events are benchmarks/demand.py's: a request arrives and binds to a free
instance of its resource on any GPU of any model that offers the name, or waits; it holds its instance ``hold``
seconds from binding; it gives up ``patience`` seconds after it arrived (at equal times a give-up goes first, then
releases, arrivals, switches); whenever an instance is freed or appears, the waiting requests of its resource are
tried again in arrival order (kube-scheduler requeues on cluster events, not on a timer). A switch is the fleet's
rollout (:class:`Rollout`): hosts in batches of ``serial``, each batch as long as its hosts take with the forks
there are; while a host's batch runs only the instances both layouts have serve, and the in-place switch keeps
every instance a pod holds, building what of the new layout fits around them (the layout's most numerous profile
giving up one instance at a time, as _mig_planner.plan_gpu is driven by the role) and never coming back for the
rest. Counted per arrival day: requests placed, and unplaced (gave up, or still waiting at the window's end).

What it does not model, and demand.py does: the node a pod goes to (LeastAllocated, cordons) and the exact
placements of the instances; here any free instance of the name serves and the geometry decides only what fits.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import dataclasses
import heapq
import math
import re
from collections import deque
from dataclasses import dataclass

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_demand import AdvisorError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_output import MIG_DISABLED
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog, best_rearrangement

HOURS = 24
DEFAULT_PATIENCE_MINUTES = 30.0
# A fleet of more hosts is replayed on a sample of them (:func:`sample`).
REPLAY_HOSTS = 32
# Event kinds, in the order they are handled at equal times (benchmarks/demand.py's).
GIVE_UP, RELEASE, ARRIVE, SWITCH = 0, 1, 2, 3
_PERCENT = re.compile(r'^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*$')


@dataclass(frozen=True)
class Rollout:
    """What one switch costs: playbooks/mig_layout.yml changes ``serial`` hosts at a time (a count, or a share of
    the hosts as ``'25%'``), each batch with ``forks`` hosts in parallel, ``host_seconds`` a host (its measured run,
    the kubelet's status period included)."""
    serial: object = 1
    forks: int = 10
    host_seconds: float = 35.0

    def problem(self):
        """Why the settings cannot be used, in one line, or None."""
        if isinstance(self.forks, bool) or not isinstance(self.forks, int) or self.forks < 1:
            return 'forks must be a whole number of at least 1, got %r' % (self.forks,)
        seconds = self.host_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 3600:
            return "a host's measured switch time must be 0-3600 seconds, got %r" % (seconds,)
        if self._serial(1) is None:
            return 'serial must be a whole number of at least 1 or a percentage of the hosts, got %r' % (self.serial,)
        return None

    def _serial(self, hosts):
        if isinstance(self.serial, bool):
            return None
        if isinstance(self.serial, int):
            return self.serial if self.serial >= 1 else None
        match = _PERCENT.match(str(self.serial))
        if match and float(match.group(1)) > 0:
            return max(1, int(hosts * float(match.group(1)) / 100.0))
        return None

    def batches(self, hosts):
        """[(start offset s, seconds)] of each batch of ``hosts`` hosts, in order."""
        size = self._serial(hosts)
        result, start, left = [], 0.0, hosts
        while left > 0:
            batch = min(size, left)
            seconds = math.ceil(float(batch) / self.forks) * float(self.host_seconds)
            result.append((start, seconds, batch))
            start += seconds
            left -= batch
        return result

    def seconds(self, hosts):
        return sum(seconds for dummy, seconds, dummy2 in self.batches(hosts))

    def describe(self, hosts):
        return ('a switch is a rollout of %d hosts, serial %s, forks %d, %g s a host: %g s'
                % (hosts, self.serial, self.forks, self.host_seconds, self.seconds(hosts)))


@dataclass(frozen=True)
class Outcome:
    """What a replay placed: per arrival day, requests placed and unplaced."""
    placed_by_day: tuple
    unplaced_by_day: tuple

    def placed(self):
        return sum(self.placed_by_day)

    def unplaced(self):
        return sum(self.unplaced_by_day)


class _Gpu(object):
    __slots__ = ('number', 'host', 'fleet', 'offered', 'held')

    def __init__(self, number, host, fleet):
        self.number = number
        self.host = host
        self.fleet = fleet
        self.offered = {}   # resource -> instances
        self.held = {}      # resource -> instances pods hold


_FITS = {}


def _fitted(fleet, target, held):
    """The in-place switch of one GPU to ``target`` ((profile, count), ...) around the instances held ({resource:
    count}): {resource: instances} after it."""
    key = (fleet.model, target, tuple(sorted(held.items())))
    if key in _FITS:
        return _FITS[key]
    profile_of = dict((fleet.resource_of(p), p) for p, dummy in target)
    wanted = dict((fleet.resource_of(p), n) for p, n in target)
    for resource, count in held.items():
        wanted[resource] = max(wanted.get(resource, 0), count)
    whole = fleet.resource_of(MIG_DISABLED)
    if held and (whole in wanted) and len([r for r, n in wanted.items() if n]) > 1:
        result = dict(held)   # a GPU cannot be whole and split at once: what is held stays, nothing else
    else:
        catalog = _catalog(fleet)
        known = dict((fleet.resource_of(name), name) for name in catalog.names())
        known.update(profile_of)
        while True:
            names = [known[r] for r, n in wanted.items() for dummy in range(n) if r != whole]
            if whole in wanted or best_rearrangement(catalog, names) is not None:
                break
            spare = sorted((r for r in wanted if wanted[r] > held.get(r, 0)), key=lambda r: (-(wanted[r] - held.get(r, 0)), r))
            if not spare:
                break
            wanted[spare[0]] -= 1
        result = dict((r, n) for r, n in wanted.items() if n)
    _FITS[key] = result
    return result


_CATALOGS = {}


def _catalog(fleet):
    if fleet.model not in _CATALOGS:
        _CATALOGS[fleet.model] = Catalog.from_data(fleet.gpu.profiles)
    return _CATALOGS[fleet.model]


def sample(fleets, most_hosts=REPLAY_HOSTS):
    """(fleets, share): a large fleet is replayed on ``share`` of its hosts (each model's, at least one) with the
    same share of its requests (_advice_demand.Demand.whole_requests): the hosts of a model all have its layout, so a
    sample of them sees what the whole fleet does, its pools a little smaller (a little more conservative)."""
    hosts = sum(f.hosts for f in fleets)
    if hosts <= most_hosts:
        return list(fleets), 1.0
    share = float(most_hosts) / hosts
    return [dataclasses.replace(f, hosts=max(1, int(round(f.hosts * share)))) for f in fleets], share


def replay(requests, days, fleets, hourly_by_model, rollout, patience_minutes=DEFAULT_PATIENCE_MINUTES, host_share=1.0):
    """The :class:`Outcome` of ``requests`` ([(arrival s, hold s, resource, devices)], arrival order, in the window
    of ``days`` days) on ``fleets`` ([ModelFleet]), each model's GPUs under its daily schedule ``hourly_by_model[model]``
    (the FleetLayout of each hour of the day, the first in force at the window's start). ``host_share``: the share
    of the real fleet's hosts ``fleets`` are (:func:`sample`): a switch still takes the whole fleet's rollout, each
    host of the sample in the batch of the real host it stands for."""
    patience = float(patience_minutes) * 60.0
    if not patience > 0:
        raise AdvisorError('patience must be more than 0 minutes, got %r' % (patience_minutes,))
    gpus, hosts_of = [], {}
    for fleet in fleets:
        first = hourly_by_model[fleet.model][0]
        for host in range(fleet.hosts):
            hosts_of.setdefault(fleet.model, []).append([])
            for slot in first.slots:
                gpu = _Gpu(len(gpus), (fleet.model, host), fleet)
                gpu.offered = _fitted(fleet, slot, {})
                gpus.append(gpu)
                hosts_of[fleet.model][host].append(gpu)
    free = {}   # resource -> set of gpu numbers with a free instance

    def refresh(gpu):
        for resource in set(gpu.offered) | set(gpu.held):
            if gpu.offered.get(resource, 0) > gpu.held.get(resource, 0):
                free.setdefault(resource, set()).add(gpu.number)
            elif resource in free:
                free[resource].discard(gpu.number)

    for gpu in gpus:
        refresh(gpu)
    events, counter = [], [0]

    def at(when, kind, *args):
        counter[0] += 1
        heapq.heappush(events, (when, kind, counter[0], args))

    end = days * HOURS * 3600.0
    state = {}      # request number -> 'waiting' | 'placed' | 'gone'
    waiting = {}    # resource -> deque of request numbers
    placed_by_day = [0] * days
    unplaced_by_day = [0] * days
    for when, changes in _switch_times(fleets, hourly_by_model, days):
        for offset, seconds, hosts in _host_batches(changes, hosts_of, rollout, host_share):
            at(when + offset, SWITCH, 'start', hosts)
            at(when + offset + seconds, SWITCH, 'end', hosts)

    def bind(number):
        arrival, hold, resource, devices = requests[number]
        candidates = free.get(resource)
        if not candidates:
            return False
        if devices == 1:
            chosen = [gpus[min(candidates)]]
        else:
            by_host = {}
            for index in sorted(candidates):
                gpu = gpus[index]
                by_host.setdefault(gpu.host, []).append(gpu)
            chosen = None
            for host in sorted(by_host):
                room = sum(g.offered.get(resource, 0) - g.held.get(resource, 0) for g in by_host[host])
                if room >= devices:
                    chosen, left = [], devices
                    for gpu in by_host[host]:
                        take = min(left, gpu.offered.get(resource, 0) - gpu.held.get(resource, 0))
                        chosen.extend([gpu] * take)
                        left -= take
                        if not left:
                            break
                    break
            if chosen is None:
                return False
        for gpu in chosen:
            gpu.held[resource] = gpu.held.get(resource, 0) + 1
            refresh(gpu)
        state[number] = 'placed'
        placed_by_day[min(days - 1, int(arrival // (HOURS * 3600)))] += 1
        at(now[0] + hold, RELEASE, [gpu.number for gpu in chosen], resource)
        return True

    def retry(resource):
        """The waiting requests of ``resource`` tried in arrival order while an instance of it is free; one asking
        for more devices than a host has free lets the later ones try."""
        queue = waiting.get(resource)
        kept = deque()
        while queue and free.get(resource):
            number = queue.popleft()
            if state.get(number) == 'waiting' and not bind(number):
                kept.append(number)
        if kept:
            kept.extend(queue)
            waiting[resource] = kept

    now = [0.0]
    arriving = 0    # the arrivals are in order: merged with the queue of events rather than queued
    while True:
        if arriving < len(requests) and requests[arriving][0] <= end and (
                not events or (requests[arriving][0], ARRIVE) < (events[0][0], events[0][1])):
            when, kind, args = requests[arriving][0], ARRIVE, (arriving,)
            arriving += 1
        elif events and events[0][0] <= end:
            when, kind, dummy, args = heapq.heappop(events)
        else:
            break
        now[0] = when
        if kind == ARRIVE:
            number = args[0]
            resource = requests[number][2]
            state[number] = 'waiting'
            if waiting.get(resource) or not bind(number):
                waiting.setdefault(resource, deque()).append(number)
                at(when + patience, GIVE_UP, number)
                retry(resource)
        elif kind == GIVE_UP:
            number = args[0]
            if state.get(number) == 'waiting':
                state[number] = 'gone'
                unplaced_by_day[min(days - 1, int(requests[number][0] // (HOURS * 3600)))] += 1
        elif kind == RELEASE:
            numbers, resource = args
            for index in numbers:
                gpu = gpus[index]
                gpu.held[resource] -= 1
                if not gpu.held[resource]:
                    del gpu.held[resource]
                refresh(gpu)
            retry(resource)
        else:
            phase, hosts = args
            touched = set()
            for model, host, target in hosts:
                fleet = [f for f in fleets if f.model == model][0]
                for gpu, slot in zip(hosts_of[model][host], target.slots):
                    after = _fitted(fleet, slot, gpu.held)
                    if phase == 'start':
                        after = dict((r, min(n, gpu.offered.get(r, 0))) for r, n in after.items())
                        after = dict((r, max(n, gpu.held.get(r, 0))) for r, n in after.items() if max(n, gpu.held.get(r, 0)))
                    touched.update(gpu.offered)
                    gpu.offered = after
                    touched.update(after)
                    refresh(gpu)
            for resource in sorted(touched):
                retry(resource)
    for number, (arrival, hold, resource, devices) in enumerate(requests):
        if state.get(number) == 'waiting' or number not in state:
            unplaced_by_day[min(days - 1, int(arrival // (HOURS * 3600)))] += 1
    return Outcome(tuple(placed_by_day), tuple(unplaced_by_day))


def _switch_times(fleets, hourly_by_model, days):
    """[(second, [(fleet, new FleetLayout)])]: each moment of the window some model's layout changes."""
    result = []
    for day in range(days):
        for hour in range(HOURS):
            if day == 0 and hour == 0:
                continue
            changes = [(fleet, hourly_by_model[fleet.model][hour]) for fleet in fleets
                       if not hourly_by_model[fleet.model][hour].same_as(hourly_by_model[fleet.model][hour - 1])]
            if changes:
                result.append(((day * HOURS + hour) * 3600.0, changes))
    return result


def _host_batches(changes, hosts_of, rollout, host_share=1.0):
    """[(offset s, seconds, [(model, host, FleetLayout)])]: the rollout's batches over the hosts that change (the real
    fleet's, ``host_share`` of which the replay has: each of its hosts in the batch of the real host it stands for)."""
    machines = {}   # a host with GPUs of several models changes once, all its models together
    for fleet, layout in changes:
        for host in range(len(hosts_of[fleet.model])):
            name = fleet.host_names[host] if len(fleet.host_names) == len(hosts_of[fleet.model]) else (fleet.model, host)
            machines.setdefault(name, []).append((fleet.model, host, layout))
    order = sorted(machines, key=str)
    real = max(len(order), int(round(len(order) / host_share)))
    result, first = [], 0
    for offset, seconds, size in rollout.batches(real):
        members = [h for position, name in enumerate(order) if first <= int(position / host_share) < first + size
                   for h in machines[name]]
        if members:
            result.append((offset, seconds, members))
        first += size
    return result
