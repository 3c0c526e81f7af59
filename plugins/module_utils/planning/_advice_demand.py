# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The layout advisor's input: the demand a fleet recorded, checked, and what became of every request read.

Pure Python: no NVML, no Ansible. :func:`demand_from_requests` reads a recorded request list (the format
benchmarks/advisor.py writes), :func:`demand_from_samples` a Prometheus ``query_range`` matrix of hourly averages.
Both refuse bad input in one line (:class:`AdvisorError`): an empty list, a number that is negative, NaN or infinite,
a request or sample of the wrong shape. Nothing read is dropped: a request outside the window is counted as such, and
every resource is kept under its name, so that :func:`tally` can say, once the fleet is known, which requests the
fleet's GPUs can host (a name served by every model that offers it), which are whole-GPU pods, which name a MIG
profile no GPU of the fleet has, and which name no GPU resource at all.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import re
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import WHOLE_GPU, profile_of_resource

HOURS = 24
_NOT_LABEL = re.compile(r'[^a-zA-Z0-9_]')
# kube-state-metrics' label of a MIG resource: what the advisor's query selects (playbooks/mig_advise.yml).
_MIG_LABEL = re.compile(r'^nvidia_com_mig_')


class AdvisorError(GpufleetError, ValueError):
    """Input the advisor cannot use: the message says which and why, in one line."""


def sanitized(resource):
    """A resource name as kube-state-metrics writes it in its ``resource`` label (its internal/store/pod.go passes
    every resource name through promutil.SanitizeLabelName: each character outside [a-zA-Z0-9_] becomes ``_``)."""
    return _NOT_LABEL.sub('_', resource)


@dataclass(frozen=True)
class Demand:
    """Devices requested per resource, by day of the window and hour of the day: ``hourly[resource][day][hour]``;
    ``weights``: requests per device-hour of each resource (a pod holding a 7g three hours counts as much as one
    holding a 1g forty minutes: placed requests, not device-hours, are what the advice maximises); a resource
    without one counts its device-hours. ``requests``: the requests of each resource that arrived in the window;
    ``outside``: those read that arrived after it (they ask for nothing in it)."""
    days: int
    hourly: Dict[str, Tuple[Tuple[float, ...], ...]]
    weights: Optional[Dict[str, float]] = None
    requests: Optional[Dict[str, int]] = None
    outside: int = 0
    stream: Optional[Tuple[Tuple[float, float, str, int], ...]] = None

    def whole_requests(self, resources, share=1.0):
        """The requests of ``resources`` to replay, [(arrival s, hold s, resource, devices)] in arrival order: the
        recorded ones; from Prometheus' hourly averages, a stream with the same averages: each resource's requests
        held 1 / (requests per device-hour) hours, arriving evenly over each hour as many as Little's law gives
        (averaged devices / hold), a resource without a request count held an hour. ``share``: of those, every one in
        1 / share in arrival order (a large fleet's replay on a sample of its hosts, _advice_replay.sample)."""
        if self.stream is not None:
            chosen = [r for r in self.stream if r[2] in resources]
            return [r for number, r in enumerate(chosen) if int((number + 1) * share) > int(number * share)]
        result = []
        for resource in sorted(resources):
            rows = self.hourly.get(resource)
            if not rows:
                continue
            hold = 1.0 / (self.weights or {}).get(resource, 1.0)
            owed = 0.0
            for day, row in enumerate(rows):
                for hour, devices in enumerate(row):
                    owed += devices / hold * share
                    arrivals = int(owed + 1e-9)
                    owed -= arrivals
                    for number in range(arrivals):
                        result.append(((day * HOURS + hour + (number + 0.5) / arrivals) * 3600.0, hold * 3600.0, resource, 1))
        return sorted(result)

    def at(self, resource, day, hour):
        rows = self.hourly.get(resource)
        return rows[day][hour] if rows else 0.0

    def resources(self):
        return sorted(r for r in self.hourly if any(any(row) for row in self.hourly[r]))

    def read(self):
        """Requests read: those in the window and those after it."""
        return sum((self.requests or {}).values()) + self.outside


def _demand_of(days, table, requests=None, outside=0, stream=None):
    """The Demand; ``requests``: {resource: requests seen in the window}, whence each resource's weight."""
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise AdvisorError('the demand covers no whole day: at least 24 hours are needed to advise a daily schedule')
    weights = {}
    for resource, count in (requests or {}).items():
        device_hours = sum(sum(row) for row in table.get(resource, []))
        if device_hours > 0 and count > 0:
            weights[resource] = float(count) / device_hours
    return Demand(days, dict((r, tuple(tuple(table[r][d]) for d in range(days))) for r in table), weights,
                  dict((r, int(round(n))) for r, n in (requests or {}).items()), outside, stream)


def _number(value, what):
    """``value`` as a finite float, else an AdvisorError naming ``what``."""
    if isinstance(value, bool):
        raise AdvisorError('%s must be a number, got %r' % (what, value))
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise AdvisorError('%s must be a number, got %r' % (what, value))
    if math.isnan(number) or math.isinf(number):
        raise AdvisorError('%s must be a finite number, got %r' % (what, value))
    return number


def demand_from_samples(series, resource_names, start, requests=None):
    """A Prometheus ``query_range`` result (``data.result``: [{'metric': {'resource': ...}, 'values': [[t, 'v']]}])
    of hourly averages, each stamped at the end of its hour -> :class:`Demand`. ``resource_names``: the resources the fleet serves (their sanitised
    label is matched back to them; another label is kept as it is, for :func:`tally` to name); ``start``: the window's
    first second (UTC midnight); ``requests``: the ``query`` result counting the requests of each resource in the
    window (weights), if read. A value that is not a finite number of at least 0 is an error; so is an empty result."""
    if not isinstance(series, list) or not series:
        raise AdvisorError('Prometheus returned no demand series for the window: nothing to advise from')
    by_label = dict((sanitized(name), name) for name in resource_names)
    table = {}
    last = start
    for item in series:
        if not isinstance(item, dict) or not isinstance(item.get('metric', {}), dict) or not isinstance(item.get('values'), list):
            raise AdvisorError('a Prometheus query_range series is {metric: {resource}, values: [[time, value]]}, got %r' % (item,))
        label = (item.get('metric') or {}).get('resource')
        if not isinstance(label, str) or not label:
            raise AdvisorError('a Prometheus demand series has no resource label: %r' % (item.get('metric'),))
        resource = by_label.get(label, label)
        for sample in item['values']:
            if not isinstance(sample, (list, tuple)) or len(sample) != 2:
                raise AdvisorError('Prometheus sample %r of resource %s is not [time, value]' % (sample, label))
            stamp = _number(sample[0], 'the time of Prometheus sample %r of resource %s' % (list(sample), label))
            value = _number(sample[1], 'Prometheus sample %r of resource %s' % (list(sample), label))
            if value < 0:
                raise AdvisorError('Prometheus sample %r of resource %s is negative' % (list(sample), label))
            if stamp - 3600 < start:
                continue
            # each value is the average over the hour that ends at its stamp (avg_over_time(...[1h:5m]))
            offset = int((stamp - 3600 - start) // 3600)
            last = max(last, stamp)
            day, hour = divmod(offset, HOURS)
            table.setdefault(resource, {}).setdefault(day, [0.0] * HOURS)[hour] += value
    days = int((last - 3600 - start) // (HOURS * 3600)) + (1 if table else 0)
    counts = {}
    if requests is not None and not isinstance(requests, list):
        raise AdvisorError('the Prometheus request count must be a query result (data.result), got %r' % (requests,))
    for item in requests or []:
        if not isinstance(item, dict) or not isinstance(item.get('value'), (list, tuple)) or len(item['value']) != 2:
            raise AdvisorError('a Prometheus request count is {metric: {resource}, value: [time, count]}, got %r' % (item,))
        label = (item.get('metric') or {}).get('resource')
        count = _number(item['value'][1], 'Prometheus request count %r of resource %s' % (item['value'], label))
        if count < 0:
            raise AdvisorError('Prometheus request count %r of resource %s is negative' % (item['value'], label))
        resource = by_label.get(label, label)
        counts[resource] = counts.get(resource, 0.0) + count
    return _demand_of(days, dict((r, [rows.get(d, [0.0] * HOURS) for d in range(days)]) for r, rows in table.items()), counts)


def demand_from_requests(requests, days):
    """Recorded requests [{'arrival': s, 'hold': s, 'resource': name, 'devices': n}] (seconds from the window's
    first midnight; the format benchmarks/advisor.py writes from benchmarks/demand.py's request stream) -> the
    devices requested, averaged over each hour, as Prometheus' hourly averages would show them. A request arriving
    after the window is counted in :attr:`Demand.outside`; one of any name is kept under it."""
    if not isinstance(requests, list) or not requests:
        raise AdvisorError('the recorded demand lists no request: nothing to advise from')
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise AdvisorError('the demand covers no whole day: at least 24 hours are needed to advise a daily schedule')
    table = {}
    counts = {}
    outside = 0
    stream = []
    end = days * HOURS * 3600.0
    for number, request in enumerate(requests):
        if not isinstance(request, dict):
            raise AdvisorError('recorded request %d must be {arrival, hold, resource, devices}, got %r' % (number, request))
        missing = [key for key in ('arrival', 'hold', 'resource') if key not in request]
        if missing:
            raise AdvisorError('recorded request %d lacks %s' % (number, ', '.join(missing)))
        arrival = _number(request['arrival'], 'the arrival of recorded request %d' % number)
        hold = _number(request['hold'], 'the hold of recorded request %d' % number)
        devices = _number(request.get('devices', 1), 'the devices of recorded request %d' % number)
        resource = request['resource']
        if hold < 0 or arrival < 0:
            raise AdvisorError('recorded request %d has a negative arrival or hold' % number)
        if devices < 1 or devices != int(devices):
            raise AdvisorError('recorded request %d must ask for a whole number of devices, at least 1, got %r' % (number, request.get('devices')))
        if not isinstance(resource, str) or not resource:
            raise AdvisorError('recorded request %d must name its resource, got %r' % (number, resource))
        if arrival >= end:
            outside += 1
            continue
        rows = table.setdefault(resource, [[0.0] * HOURS for dummy in range(days)])
        counts[resource] = counts.get(resource, 0) + 1
        stream.append((arrival, hold, resource, int(devices)))
        begin, finish = arrival, min(arrival + hold, end)
        while begin < finish:
            slot = int(begin // 3600)
            upto = min(finish, (slot + 1) * 3600.0)
            rows[slot // HOURS][slot % HOURS] += devices * (upto - begin) / 3600.0
            begin = upto
    return _demand_of(days, table, counts, outside, tuple(sorted(stream)))


def demand_from_document(document):
    """A recorded demand file ({'days': N, 'requests': [...]}, see :func:`demand_from_requests`) -> Demand."""
    if not isinstance(document, dict) or not isinstance(document.get('requests'), list):
        raise AdvisorError('a recorded demand file holds {days: N, requests: [{arrival, hold, resource}]}, got %s'
                           % type(document).__name__)
    days = document.get('days')
    if isinstance(days, bool) or not isinstance(days, int):
        raise AdvisorError('a recorded demand file must say how many days it covers (days: N), got %r' % (days,))
    return demand_from_requests(document['requests'], days)


# ---- what became of every request ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Tally:
    """The requests read, each in one class: ``hostable`` {resource: requests} the fleet's MIG profiles serve,
    ``whole_gpu`` nvidia.com/gpu pods (served only by a GPU without MIG), ``unhostable`` {name: requests} of MIG
    resources no GPU of the fleet offers, ``unknown`` {name: requests} of names that are no GPU resource (a
    kube-state-metrics label that matches no resource of the fleet counts as unhostable), ``outside`` those that
    arrived after the window."""
    read: int
    hostable: Dict[str, int]
    whole_gpu: int
    unhostable: Dict[str, int]
    unknown: Dict[str, int]
    outside: int

    def served(self):
        """Requests the advice can place: the hostable ones and the whole-GPU pods."""
        return sum(self.hostable.values()) + self.whole_gpu

    def lines(self):
        """One line per class with a request in it, the first the total that the others add up to."""
        lines = ['requests read: %d = %d a MIG profile of the fleet serves + %d whole-GPU + %d unhostable + %d unknown '
                 'name + %d outside the window' % (self.read, sum(self.hostable.values()), self.whole_gpu,
                                                   sum(self.unhostable.values()), sum(self.unknown.values()), self.outside)]
        if self.whole_gpu:
            lines.append('whole-GPU pods (%s): %d, served only by a GPU whose MIG is off' % (WHOLE_GPU, self.whole_gpu))
        if self.unhostable:
            lines.append('unhostable, no GPU of the fleet offers the profile: %s' % _named(self.unhostable))
        if self.unknown:
            lines.append('unknown names, no GPU resource: %s' % _named(self.unknown))
        if self.outside:
            lines.append('outside the window (arrived after its end): %d' % self.outside)
        return lines

    def as_dict(self):
        return {'read': self.read, 'hostable': dict(self.hostable), 'whole_gpu': self.whole_gpu,
                'unhostable': dict(self.unhostable), 'unknown': dict(self.unknown), 'outside': self.outside}


def _named(counts):
    return ', '.join('%s %d' % (name, counts[name]) for name in sorted(counts))


def tally(demand, offered):
    """The :class:`Tally` of ``demand`` on a fleet whose GPUs offer the resources ``offered``. A resource with device
    demand but no request count (Prometheus' count not read) counts its device-hours, rounded up."""
    classes = {'hostable': {}, 'unhostable': {}, 'unknown': {}}
    whole = 0
    counts = dict(demand.requests or {})
    for resource in demand.hourly:
        if resource not in counts:
            device_hours = sum(sum(row) for row in demand.hourly[resource])
            if device_hours > 0:
                counts[resource] = int(math.ceil(device_hours))
    for resource, count in counts.items():
        if not count:
            continue
        if resource == WHOLE_GPU:
            whole += count
        elif resource in offered:
            classes['hostable'][resource] = count
        elif profile_of_resource(resource) is not None or _MIG_LABEL.match(resource):
            classes['unhostable'][resource] = count
        else:
            classes['unknown'][resource] = count
    return Tally(sum(counts.values()) + demand.outside, classes['hostable'], whole, classes['unhostable'],
                 classes['unknown'], demand.outside)
