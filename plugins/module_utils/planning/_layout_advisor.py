# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Which layouts to declare and when to switch, from the demand a fleet recorded (:func:`advise`).

Pure Python: no NVML, no Ansible. The demand is hourly: for each GPU resource (``nvidia.com/mig-<profile>``,
``nvidia.com/gpu``) the devices requested by running and pending pods, averaged over each hour of each day of
the window, read and checked by _advice_demand (which also counts what becomes of every request read). A resource
name several models offer is served by all of them (:func:`_residual`). Per GPU model the advisor

- builds the layouts one GPU can hold from the model's own geometry (every fitting, maximal mix of its plain
  profiles with demand, checked by _mig_geometry.best_rearrangement: placements, max counts, media rules), and a
  whole GPU without MIG where ``nvidia.com/gpu`` is asked for (_advice_layouts: the candidates and their fluid model);
- mixes them over the model's GPU slots (one mix per device index, the same on every host of the model) greedily
  for the demand of each hour of the day, and for each period a first pass chose, next to the current catalog's
  own layouts;
- picks, by dynamic programming over the 24 hours of a day (the schedule repeats daily), the layouts and switch
  hours that place the most requests over the window with at most ``max_switches`` switches a day; at equal
  placed requests fewer switches win, then the layout listed first (the current catalog's come first);
- proposes a switch only where the instances busy at that hour are ones the new layout has too
  (:func:`switch_realisable`): the in-place switch keeps held instances and does not come back for the rest.

Placed devices in an hour (the fluid model that builds the candidates): for each resource, min(devices requested,
devices the layout offers). A switch costs the fleet's rollout: during that part of the hour only the instances both
layouts share serve (held instances are kept, nothing new exists yet), the new layout the rest of the hour.

:func:`advise` builds two candidates, the best single layout and the best schedule, and judges them and the current
catalog by replaying the whole requests (_advice_replay): the schedule is advised only where the replay shows that it
pays by more than a threshold.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import statistics
from dataclasses import dataclass
from typing import Tuple

try:
    import zoneinfo
except ImportError:   # Python before 3.9: a schedule in UTC still reads
    zoneinfo = None

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_demand import AdvisorError, tally
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_layouts import (
    _EPSILON,
    HOURS,
    WHOLE_GPU_LAYOUT,
    FleetLayout,
    ModelFleet,
    _greedy_mix,
    _shared,
    _with_whole_gpus,
    check_schedule,
    current_layout,
    gpu_layouts,
    hours_of,
    placed,
    switch_hour_placed,
    switch_realisable,
)
# read here by their callers and tests, as before the candidates had their own file
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_layouts import MIG_DISABLED, _with_index  # noqa: F401  pylint: disable=unused-import
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_output import Advice, Judgement
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._advice_replay import DEFAULT_PATIENCE_MINUTES, Rollout, replay, sample
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import WHOLE_GPU, profile_of_resource
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import Gpu
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog

DEFAULT_MAX_SWITCHES = 2
DEFAULT_FORKS = 10
# A switch is advised only where the replay places this share more than the best single layout.
DEFAULT_MIN_GAIN = 0.01


# ---- the choice --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelAdvice:
    """One model's advice: the layout in force from each switch hour, and what it places against the current one."""
    model: str
    periods: Tuple[Tuple[int, FleetLayout], ...]
    switches: int
    placed_by_day: Tuple[float, ...]
    current_by_day: Tuple[float, ...]
    requested_by_day: Tuple[float, ...]
    reasons: Tuple[str, ...]
    hourly: Tuple[FleetLayout, ...] = ()
    current_hourly: Tuple[FleetLayout, ...] = ()

    def gains(self):
        return [a - c for a, c in zip(self.placed_by_day, self.current_by_day)]

    def as_dict(self):
        gains = self.gains()
        return {'model': self.model, 'switches': self.switches,
                'periods': [{'hour': hour, 'slots': [dict(slot) for slot in layout.slots], 'current': layout.source}
                            for hour, layout in self.periods],
                'placed': round(sum(self.placed_by_day), 1), 'current_placed': round(sum(self.current_by_day), 1),
                'requested': round(sum(self.requested_by_day), 1),
                'gain_by_day': {'min': round(min(gains), 1), 'median': round(statistics.median(gains), 1), 'max': round(max(gains), 1)},
                'reasons': list(self.reasons)}


def _own_demand(demand, fleet):
    """[[{resource: devices} per hour] per day]: all the demand for the resources the model offers (a name several
    models offer, nvidia.com/mig-1g.10gb on the A100-80GB and the H100, is the whole demand for each of them until
    :func:`_residual` takes off what the others serve)."""
    mine = set(fleet.resources())
    days = [[{} for dummy in range(HOURS)] for dummy2 in range(demand.days)]
    for resource in demand.resources():
        if resource in mine:
            for day in range(demand.days):
                for hour in range(HOURS):
                    value = demand.at(resource, day, hour)
                    if value:
                        days[day][hour][resource] = value
    return days


def _residual(own, others_hourly):
    """``own`` less, each hour, what the other models offer of the same names (``others_hourly``: [{resource:
    devices} per hour of the day]): the fewer of requested and offered over all models, min(d, o + m), is
    min(d, o) + min(d - o, m), so the model placing the rest places exactly what it adds to the others."""
    if not others_hourly:
        return own
    result = []
    for day in own:
        rows = []
        for hour, wanted in enumerate(day):
            left = {}
            for resource, devices in wanted.items():
                rest = devices - sum(offers[hour].get(resource, 0) for offers in others_hourly)
                if rest > _EPSILON:
                    left[resource] = rest
            rows.append(left)
        result.append(rows)
    return result


def day_placed(days, hourly_layouts, fleet, switch_fraction, weights=None):
    """Devices placed on each day under the daily schedule ``hourly_layouts`` (the FleetLayout of each hour): the
    hour a layout changes (the day's first hour too, when the previous day ended on another) pays the switch."""
    result = []
    offers = [layout.offered(fleet) for layout in hourly_layouts]
    for hours in days:
        total = 0.0
        for hour in range(HOURS):
            before = hourly_layouts[hour - 1]
            if before.same_as(hourly_layouts[hour]):
                total += placed(hours[hour], offers[hour], weights)
            else:
                total += switch_hour_placed(hours[hour], offers[hour - 1], offers[hour], switch_fraction, weights)
        result.append(total)
    return result


def _best_schedule(candidates, days, fleet, switch_fraction, max_switches, weights=None):
    """Dynamic programming over the hours of a day (cyclic: hour 0 follows hour 23): the layout of each hour with
    at most ``max_switches`` changes a day for the most devices placed over all days; ties: fewer switches, then
    the candidate listed first. Returns (value, switches, [candidate index per hour])."""
    offers = [c.offered(fleet) for c in candidates]
    count = len(candidates)
    # placed over all days at an hour, by resource and devices offered: a lookup, not a sum over the days
    tables = []
    for hour in range(HOURS):
        table = {}
        for resource in set(r for day in days for r in day[hour]):
            values = [day[hour].get(resource, 0.0) for day in days]
            # only the device counts some candidate offers (a switch's shared instances are one of the two)
            counts = set(offer.get(resource, 0) for offer in offers) | {0}
            weight = (weights or {}).get(resource, 1.0)
            table[resource] = dict((devices, sum(min(v, devices) for v in values) * weight) for devices in counts)
        tables.append(table)

    def over_days(hour, offered):
        return sum(column[offered.get(resource, 0)] for resource, column in tables[hour].items())

    stay = [[over_days(hour, offers[k]) for k in range(count)] for hour in range(HOURS)]
    held_cache = {}

    def realisable(hour, before, after):
        key = (hour, before, after)
        if key not in held_cache:
            held_cache[key] = switch_realisable([day[hour - 1] for day in days], offers[before], offers[after])
        return held_cache[key]

    moves = {}

    def moved(hour, before, after):
        key = (hour, before, after)
        if key not in moves:
            moves[key] = (switch_fraction * over_days(hour, _shared(offers[before], offers[after]))
                          + (1.0 - switch_fraction) * stay[hour][after])
        return moves[key]

    best = None
    for first in range(count):
        # state: (layout, switches) -> (value, path)
        states = {(first, 0): (stay[0][first], (first,))}
        for hour in range(1, HOURS):
            following = {}
            for (layout, switches), (value, path) in sorted(states.items()):
                for after in range(count):
                    if after == layout:
                        key, gained = (after, switches), stay[hour][after]
                    elif switches + 1 <= max_switches and realisable(hour, layout, after):
                        key, gained = (after, switches + 1), moved(hour, layout, after)
                    else:
                        continue
                    total = value + gained
                    if key not in following or total > following[key][0] + _EPSILON:
                        following[key] = (total, path + (after,))
            states = following
        for (layout, switches), (value, path) in sorted(states.items()):
            if layout != first:   # the next day starts with a switch back to the first layout
                if not realisable(0, layout, first):
                    continue
                switches += 1
                value += moved(0, layout, first) - stay[0][first]
            if switches > max_switches:
                continue
            if best is None or value > best[0] + _EPSILON or (abs(value - best[0]) <= _EPSILON and switches < best[1]):
                best = (value, switches, list(path))
    return best


def _periods(hourly):
    """[(hour, index)] where the layout changes (hour 0 first when nothing changes)."""
    changes = [(hour, hourly[hour]) for hour in range(HOURS) if hourly[hour] != hourly[hour - 1]]
    return changes or [(0, hourly[0])]


def _describe(layout):
    return ' | '.join('+'.join('%dx%s' % (n, p) for p, n in slot) or 'empty' for slot in layout.slots)


def _reason(hour, layout, end, current_layouts, fleet):
    current_offers = {}
    for current in current_layouts:
        for resource, devices in current.offered(fleet).items():
            current_offers[resource] = max(current_offers.get(resource, 0), devices)
    new = sorted(r for r, n in layout.offered(fleet).items() if n > current_offers.get(r, 0))
    serves = ('more of %s than any current layout offers' % ', '.join(r for r in new)
              if new else 'nothing the current catalog lacks')
    return ('%s %02d:00-%02d:00 %s (per GPU index): %s%s'
            % (fleet.model, hour, end, _describe(layout), serves, ', the current layout %s' % layout.source if layout.source else ''))


def advise_model(fleet, demand_days, configs, current_schedule, max_switches=DEFAULT_MAX_SWITCHES, switch_seconds=0.0,
                 weights=None, whole_gpus=True):
    """One model's :class:`ModelAdvice` for ``demand_days`` ([[{resource: devices} per hour] per day]); ``weights``:
    requests per device-hour of each resource (:attr:`Demand.weights`); ``whole_gpus``: whether the advisor may take
    MIG off GPUs for ``nvidia.com/gpu`` (else only the current catalog's GPUs without MIG serve it)."""
    switch_fraction = min(1.0, max(0.0, float(switch_seconds) / 3600.0))
    catalog = Catalog.from_data(fleet.gpu.profiles)
    wanted = set()
    for day in demand_days:
        for hour in day:
            wanted.update(profile_of_resource(r) for r, n in hour.items() if n and r != WHOLE_GPU)
    layouts = gpu_layouts(catalog, wanted)
    names = []
    for dummy, name in current_schedule:
        if name not in names:
            names.append(name)
    current = dict((name, current_layout(configs, name, fleet)) for name in names)
    whole_gpu_slots = None
    if whole_gpus:
        layouts, whole_gpu_slots = _with_whole_gpus(layouts, demand_days, fleet, current.values())
    current_hourly = [current[name] for name in hours_of(current_schedule)]
    candidates = list(current.values())

    def add(layout):
        if not any(layout.same_as(c) for c in candidates):
            candidates.append(layout)

    if layouts:
        for hour in range(HOURS):
            add(_greedy_mix(fleet, layouts, [day[hour] for day in demand_days], weights, whole_gpu_slots))
    dummy, switches, hourly = _best_schedule(candidates, demand_days, fleet, switch_fraction, max_switches, weights)
    if layouts:
        # a second pass: each chosen period's own mix, for the demand of all its hours
        chosen = _periods(hourly)
        for position, (start, index) in enumerate(chosen):
            end = chosen[(position + 1) % len(chosen)][0] if len(chosen) > 1 else start + HOURS
            span = [(start + h) % HOURS for h in range((end - start) % HOURS or HOURS)]
            add(_greedy_mix(fleet, layouts, [day[h] for day in demand_days for h in span], weights, whole_gpu_slots))
        dummy, switches, hourly = _best_schedule(candidates, demand_days, fleet, switch_fraction, max_switches, weights)
    advised_hourly = [candidates[k] for k in hourly]
    placed_by_day = day_placed(demand_days, advised_hourly, fleet, switch_fraction, weights)
    current_by_day = day_placed(demand_days, current_hourly, fleet, switch_fraction, weights)
    # Everything asked for, each hour of each day: what unlimited instances would place.
    requested_hourly = [[placed(hour, dict((r, float('inf')) for r in hour), weights) for hour in day] for day in demand_days]
    requested_by_day = [sum(day) for day in requested_hourly]
    periods = [(hour, candidates[index]) for hour, index in _periods(hourly)]
    reasons = []
    for position, (hour, layout) in enumerate(periods):
        end = periods[(position + 1) % len(periods)][0] if len(periods) > 1 else hour
        span = [(hour + h) % HOURS for h in range((end - hour) % HOURS or HOURS)]
        reasons.append(_reason(hour, layout, end if len(periods) > 1 else (hour + HOURS) % HOURS or HOURS,
                               list(current.values()), fleet))
    return ModelAdvice(fleet.model, tuple(periods), switches, tuple(placed_by_day), tuple(current_by_day),
                       tuple(requested_by_day), tuple(reasons), tuple(advised_hourly), tuple(current_hourly))


def physical_hosts(fleets):
    """The hosts of the fleet: those named once each where every model names its hosts, else one per model's host."""
    if all(len(f.host_names) == f.hosts for f in fleets):
        return len(set(name for f in fleets for name in f.host_names))
    return sum(f.hosts for f in fleets)


def _advise_models(demand, fleets, offered_by, configs, schedule, max_switches, switch_seconds, whole_gpus=True):
    """{model: ModelAdvice}: a resource name several models offer is served by all of them, each model advised for
    what the others' advised layouts leave of it (:func:`_residual`), model by model, and once more round the models
    so that the first advised sees what the later ones took."""
    own = dict((f.model, _own_demand(demand, f)) for f in fleets)
    shared = any(len(offered_by.get(r, ())) > 1 for r in demand.resources())
    advised = {}
    for dummy in range(2 if shared else 1):
        for fleet in fleets:
            others = [[layout.offered(f) for layout in advised[f.model].hourly] for f in fleets
                      if f is not fleet and f.model in advised]
            advised[fleet.model] = advise_model(fleet, _residual(own[fleet.model], others), configs, schedule, max_switches,
                                                switch_seconds, demand.weights, whole_gpus)
    return tuple(advised[f.model] for f in fleets)


def _takes_mig_off(models):
    """Whether some model's advice has more device indices without MIG, at some hour, than its current catalog."""
    def off(layout):
        return layout.slots.count(WHOLE_GPU_LAYOUT)
    return any(off(advised) > off(current) for m in models for advised, current in zip(m.hourly, m.current_hourly))


def advise(demand, fleets, configs, current_schedule, max_switches=DEFAULT_MAX_SWITCHES, switch_seconds=0.0, serial=1,
           forks=DEFAULT_FORKS, min_gain=DEFAULT_MIN_GAIN, patience_minutes=DEFAULT_PATIENCE_MINUTES):
    """The :class:`Advice` for ``demand`` (:class:`Demand`) on ``fleets`` ([ModelFleet]), against the current catalog
    ``configs`` (validated mig-configs) run on ``current_schedule`` (((hour, layout name), ...), daily).

    Two candidates are built: the best single layout (no switch) and the best schedule of at most ``max_switches``
    switches a day, a switch costing the fleet's rollout (``serial`` hosts at a time, ``forks``, ``switch_seconds`` a
    host: _advice_replay.Rollout). Both, and the current catalog, are judged by replaying the whole requests
    (_advice_replay.replay, ``patience_minutes``): the schedule is advised only where it places more than the best
    single layout by more than ``min_gain`` (a share of what the single layout places); where neither places more
    than the current catalog, the advice is to keep it. Refused when no request read is one the fleet can place."""
    if isinstance(max_switches, bool) or not isinstance(max_switches, int) or max_switches < 0:
        raise AdvisorError('max switches a day must be a whole number of at least 0, got %r' % (max_switches,))
    rollout = Rollout(serial, forks, switch_seconds)
    if rollout.problem():
        raise AdvisorError(rollout.problem())
    if isinstance(min_gain, bool) or not isinstance(min_gain, (int, float)) or not 0 <= min_gain <= 1:
        raise AdvisorError('the least gain a switch must bring is a share 0-1 of the requests placed, got %r' % (min_gain,))
    if isinstance(patience_minutes, bool) or not isinstance(patience_minutes, (int, float)) or not 0 < patience_minutes <= 7 * 24 * 60:
        raise AdvisorError('patience must be more than 0 minutes and at most a week, got %r' % (patience_minutes,))
    if not fleets:
        raise AdvisorError('no GPU model to advise: the inventory lists no MIG-capable GPU')
    for fleet in fleets:
        if fleet.hosts < 1 or fleet.gpus_per_host < 1 or not fleet.gpu.profiles:
            raise AdvisorError('%s: needs at least one host, one GPU a host and its MIG profiles' % fleet.model)
    schedule = check_schedule(current_schedule)
    offered_by = {}
    for fleet in fleets:
        for resource in fleet.resources():
            offered_by.setdefault(resource, []).append(fleet.model)
    counted = tally(demand, offered_by)
    if not counted.served():
        raise AdvisorError('no request read is one the fleet can place, nothing to advise: %s' % '; '.join(counted.lines()))
    hosts = physical_hosts(fleets)
    # the fluid model's switch: for this part of the hour only the instances both layouts share serve
    switch_cost = min(3600.0, rollout.seconds(hosts))
    replayed_fleets, share = sample(fleets)
    stream = demand.whole_requests(set(r for r in demand.resources() if r in offered_by), share)

    def judged(hourly):
        return replay(stream, demand.days, replayed_fleets, hourly, rollout, patience_minutes, share)

    def candidates(whole_gpus):
        single = _advise_models(demand, fleets, offered_by, configs, schedule, 0, switch_cost, whole_gpus)
        switching = (_advise_models(demand, fleets, offered_by, configs, schedule, max_switches, switch_cost, whole_gpus)
                     if max_switches else single)
        outcomes = {'current': judged(dict((m.model, m.current_hourly) for m in single)),
                    'single': judged(dict((m.model, m.hourly) for m in single)),
                    'schedule': judged(dict((m.model, m.hourly) for m in switching))}
        better = any(m.switches for m in switching) and outcomes['schedule'].placed() > outcomes['single'].placed() * (1.0 + min_gain)
        return single, switching, outcomes, 'schedule' if better else 'single'

    single, switching, outcomes, choice = candidates(True)
    chosen = switching if choice == 'schedule' else single
    if _takes_mig_off(chosen):
        # MIG taken off GPUs for nvidia.com/gpu only where the replay shows it pays by the threshold
        kept = candidates(False)
        if outcomes[choice].placed() <= kept[2][kept[3]].placed() * (1.0 + min_gain):
            single, switching, outcomes, choice = kept
            chosen = switching if choice == 'schedule' else single
    switches = any(m.switches for m in switching)
    return Advice(chosen, tuple(fleets), counted, outcomes, choice,
                  Judgement(rollout, hosts, min_gain, patience_minutes, len(stream), share,
                            tuple(sorted(set(h for m in switching for h, dummy in m.periods))) if switches else ()))


# ---- the playbook's inputs -------------------------------------------------------------------------------------------

def fleets_from_facts(hosts):
    """[{'host': name, 'gpus': [nvidia_mig_facts GPU]}] -> ([ModelFleet], [one line per model left out]). A model's
    hosts are those with one of its GPUs, its GPUs a host (and their indices) those of the host with the most (the
    hosts of a model are taken as alike); a GPU whose MIG is off reports
    no profiles, so a model none of whose GPUs does is left out, said why."""
    if not isinstance(hosts, list) or not all(isinstance(h, dict) and isinstance(h.get('gpus'), list) for h in hosts):
        raise AdvisorError('the fleet must be a list of {host, gpus} with the GPUs nvidia_mig_facts reports')
    models = {}
    for host in hosts:
        for data in host['gpus']:
            if not data.get('mig_capable', True):
                continue
            gpu = Gpu.from_dict(data)
            entry = models.setdefault(gpu.name, {'gpu': None, 'per_host': {}})
            entry['per_host'].setdefault(host.get('host'), []).append(gpu.index)
            if entry['gpu'] is None and gpu.profiles:
                entry['gpu'] = gpu
    fleets, left_out = [], []
    for model in sorted(models):
        entry = models[model]
        if entry['gpu'] is None:
            left_out.append('%s: no GPU of this model has MIG enabled, so its profiles are unknown' % model)
            continue
        indices = max(entry['per_host'].values(), key=len)
        fleets.append(ModelFleet(model, entry['gpu'], len(entry['per_host']), len(indices), tuple(sorted(indices)),
                                 tuple(sorted(str(name) for name in entry['per_host']))))
    return fleets, left_out


def schedule_from_switches(switches, timezone='UTC', start=0):
    """awx_layout_switches ([{layout, time: 'HH:MM', timezone}]) or one layout name -> ((hour, layout), ...) in the
    advisor's UTC hours. A switch's time is local time in its ``timezone`` (else ``timezone``: the schedules'
    awx_schedule_timezone, as playbooks/awx_configure.yml reads them), taken at the UTC offset of the window's first
    day (``start``: its first UTC midnight, UNIX time); the advisor works by the hour, so a switch at 08:30 UTC counts
    from 08:00."""
    if isinstance(switches, str):
        return ((0, switches),)
    schedule = []
    for switch in switches or []:
        try:
            hour, minute = [int(part) for part in str(switch['time']).split(':')]
            name = switch['layout']
            zone = switch.get('timezone', timezone)
        except (AttributeError, KeyError, TypeError, ValueError):
            raise AdvisorError('a layout switch must be {layout, time: "HH:MM"}, got %r' % (switch,))
        if not 0 <= hour < HOURS or not 0 <= minute < 60:
            raise AdvisorError('a layout switch must be {layout, time: "HH:MM"}, got %r' % (switch,))
        schedule.append((_utc_hour(hour, minute, zone, start), name))
    return check_schedule(tuple(schedule))


def _utc_hour(hour, minute, zone, start):
    """The UTC hour of ``hour``:``minute`` local time in the IANA ``zone`` on the window's first day."""
    if zone in ('UTC', 'Etc/UTC'):
        return hour
    if zoneinfo is None:
        raise AdvisorError('the current schedule\'s timezone %r needs Python 3.9 or later (module zoneinfo) on the controller' % (zone,))
    try:
        local_zone = zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, OSError, TypeError, ValueError):
        raise AdvisorError('unknown timezone %r in the current schedule: use an IANA name such as Europe/Berlin or UTC' % (zone,))
    try:
        day = datetime.datetime.fromtimestamp(float(start), tz=datetime.timezone.utc).astimezone(local_zone).date()
    except (OverflowError, OSError, TypeError, ValueError):
        raise AdvisorError('the window\'s start must be UNIX time, got %r' % (start,))
    local = datetime.datetime(day.year, day.month, day.day, hour, minute, tzinfo=local_zone)
    return local.astimezone(datetime.timezone.utc).hour
