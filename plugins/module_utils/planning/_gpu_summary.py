# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""A GPU as the fleet map and the report draw it, and the compact summary that carries it.

Pure Python: no NVML, no Ansible imports.

- :func:`gpu_view`: one GPU of ``nvidia_mig`` facts, validated, with its memory slices' states and free-space
  figures (a malformed entry raises :class:`MapInputError` naming the host, the GPU and what is wrong).
- :func:`gpu_summary`: that view as plain data, only what the map and the report need. ``nvidia_mig_facts``
  computes it on the host (``summary: true``), so a fleet's report carries a few KB per host instead of the whole
  facts (every profile with its placements and compute profiles).
- :func:`view_of_summary`: a summary read back by the map, checked, as :func:`gpu_view` would have made it.
- :func:`report_lines`, :func:`report_totals`: the report's line per GPU and its figures per host.
- :func:`cached_summary`, :func:`cached_record`: the summary as the fact cache keeps it (with the time the host read
  it), and the map record the report builds from it without contacting the host: how old, stale or missing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import json

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import decision_gpus, known_gpus
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import (
    Catalog,
    GeometryError,
    Occupancy,
    analyze,
    slice_states,
)

MODES = ('enabled', 'disabled')


class MapInputError(ValueError):
    """A host record that cannot be drawn."""


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def require(record, key, kinds, where, kind_name, optional=False):
    if key not in record or record[key] is None:
        if optional:
            return None
        raise MapInputError('%s: missing %s (%s)' % (where, key, kind_name))
    value = record[key]
    if isinstance(value, bool) and bool not in kinds:
        raise MapInputError('%s: %s must be %s, got %r' % (where, key, kind_name, value))
    if not isinstance(value, kinds):
        raise MapInputError('%s: %s must be %s, got %s %r' % (where, key, kind_name, type(value).__name__, value))
    return value


def model_name(name):
    return name[len('NVIDIA '):] if name.startswith('NVIDIA ') else name


def pids_of(gi):
    pids = set()
    for ci in gi.get('compute_instances') or []:
        for process in ci.get('processes') or []:
            pids.add(process['pid'])
    return sorted(pids)


def allocations(record, where):
    """The pods holding a GPU instance (or a whole GPU), each {'label', 'detail'} for display.

    An entry is a dict {namespace, pod[, container]} or a string as nvidia_mig_facts writes it:
    'namespace/pod', or 'uid:<pod uid>' where only the process cgroup names the pod.
    """
    allocated = record.get('allocated_to')
    if allocated is None:
        return []
    if not isinstance(allocated, list):
        raise MapInputError('%s: allocated_to must be a list of pods ({namespace, pod, container} or '
                            "'namespace/pod'), got %r" % (where, allocated))
    result = []
    for entry in allocated:
        if isinstance(entry, str) and entry.strip():
            result.append({'label': entry, 'detail': entry, 'container': None})
            continue
        if not isinstance(entry, dict):
            raise MapInputError("%s: allocated_to entries must be {namespace, pod, container} or 'namespace/pod', got %r"
                                % (where, entry))
        namespace = require(entry, 'namespace', (str,), where + ' allocated_to', 'a string')
        pod = require(entry, 'pod', (str,), where + ' allocated_to', 'a string')
        container = require(entry, 'container', (str,), where + ' allocated_to', 'a string', optional=True)
        label = '%s/%s' % (namespace, pod)
        result.append({'label': label, 'detail': '%s (container %s)' % (label, container) if container else label,
                       'container': container})
    return result


def instance_view(gi, catalog, where):
    if not isinstance(gi, dict):
        raise MapInputError('%s: each GPU instance must be a dict, got %r' % (where, gi))
    gi_id = require(gi, 'id', (int,), where + ' GPU instance', 'an integer')
    where = '%s GPU instance %d' % (where, gi_id)
    profile = require(gi, 'profile', (str,), where, 'a profile name')
    placement = require(gi, 'placement', (dict,), where, 'a dict {start, size}')
    start = require(placement, 'start', (int,), where + ' placement', 'an integer')
    size = require(placement, 'size', (int,), where + ' placement', 'an integer')
    known = catalog.get(profile)
    if known is None:
        raise MapInputError('%s: profile %s is not among the GPU profiles (%s)' % (where, profile, ', '.join(catalog.names())))
    if size != known.memory_slices:
        raise MapInputError('%s: placement size %d but %s spans %d memory slices' % (where, size, profile, known.memory_slices))
    cis = require(gi, 'compute_instances', (list,), where, 'a list', optional=True) or []
    for ci in cis:
        if not isinstance(ci, dict) or not isinstance(ci.get('processes') or [], list):
            raise MapInputError('%s: compute instances must be dicts with a processes list, got %r' % (where, ci))
        for process in ci.get('processes') or []:
            if not isinstance(process, dict) or not is_int(process.get('pid')):
                raise MapInputError('%s: processes must be dicts with an integer pid, got %r' % (where, process))
    pids = pids_of(gi)
    return {
        'id': gi_id,
        'profile': profile,
        'start': start,
        'size': size,
        'compute_instances': sorted('%s' % ci.get('profile', '?') for ci in cis),
        'pids': pids,
        'busy': bool(pids) or gi.get('busy') is True,
        'allocated_to': allocations(gi, where),
    }


def gpu_view(gpu, host):
    where = 'host %s' % host
    if not isinstance(gpu, dict):
        raise MapInputError('%s: each GPU must be a dict (nvidia_mig_facts gpus entry), got %r' % (where, gpu))
    index = require(gpu, 'index', (int,), where + ' GPU', 'an integer')
    where = '%s GPU %d' % (where, index)
    view = {
        'index': index,
        'uuid': require(gpu, 'uuid', (str,), where, 'a string'),
        'name': require(gpu, 'name', (str,), where, 'a string'),
        'mig_capable': require(gpu, 'mig_capable', (bool,), where, 'true or false'),
        'in_layout': require(gpu, 'in_layout', (bool,), where, 'true, false or null', optional=True),
        'processes': [],
        'instances': [],
        'states': [],
        'figures': None,
        'total_slices': 0,
        'plan': None,
    }
    view['model'] = model_name(view['name'])
    processes = gpu.get('processes') or []
    if not isinstance(processes, list) or not all(isinstance(p, dict) and is_int(p.get('pid')) for p in processes):
        raise MapInputError('%s: processes must be a list of dicts with an integer pid, got %r' % (where, processes))
    view['processes'] = sorted(set(p['pid'] for p in processes))
    view['allocated_to'] = allocations(gpu, where)
    if not view['mig_capable']:
        view['mig'] = 'unsupported'
        view['pending'] = 'unsupported'
        return view
    mode = require(gpu, 'mig_mode', (dict,), where, 'a dict {current, pending}')
    for key in ('current', 'pending'):
        if mode.get(key) not in MODES:
            raise MapInputError('%s: mig_mode.%s must be enabled or disabled, got %r' % (where, key, mode.get(key)))
    view['mig'] = mode['current']
    view['pending'] = mode['pending']
    profiles = require(gpu, 'profiles', (list,), where, 'a list', optional=True) or []
    instances = require(gpu, 'gpu_instances', (list,), where, 'a list', optional=True) or []
    if view['mig'] == 'disabled':
        if instances:
            raise MapInputError('%s: MIG is disabled but %d GPU instance(s) are listed' % (where, len(instances)))
        return view
    if not profiles:
        raise MapInputError('%s: MIG is enabled but no GPU instance profiles are listed (NVML reports them once MIG is on)' % where)
    try:
        catalog = Catalog.from_data(profiles)
    except (GeometryError, KeyError, TypeError, AttributeError, ValueError) as exc:
        raise MapInputError('%s: unreadable profiles: %s' % (where, exc))
    views = sorted((instance_view(gi, catalog, where) for gi in instances), key=lambda v: v['start'])
    ids = [v['id'] for v in views]
    if len(set(ids)) != len(ids):
        raise MapInputError('%s: GPU instance ids repeat: %s' % (where, sorted(ids)))
    try:
        states = slice_states(catalog, [(v['profile'], v['start']) for v in views])
    except GeometryError as exc:
        raise MapInputError('%s: %s' % (where, exc))
    view['instances'] = views
    view['states'] = states
    view['total_slices'] = catalog.total_slices
    view['figures'] = analyze(catalog, Occupancy.of(catalog, [(v['profile'], v['start']) for v in views]))
    view['ranks'] = dict((name, catalog.get(name).rank()) for name in catalog.names())
    return view


# ---- the compact summary: computed on the host, read back by the map ---------------------------------

# The free-space figures the map and the report read (analyze() has more).
SUMMARY_FIGURES = ('free_slices', 'stranded_slices', 'largest_placeable', 'fragmentation', 'repacked_largest_placeable')
_INSTANCE_KEYS = ('id', 'profile', 'start', 'size', 'compute_instances', 'pids', 'busy')


def _raw_pods(record):
    return list(record.get('allocated_to') or [])


def gpu_summary(gpu, host='localhost'):
    """One GPU of ``nvidia_mig`` facts -> only what the map and the report need, as plain data.

    ``slices``: each memory slice's state, the position of the GPU instance (in ``gpu_instances``) covering it or
    free, stranded, unusable; ``figures``: the free-space figures the map shows; ``ranks``: the order of the profiles
    it names (to sort the largest placeable profiles of a model); the PCI ids, for the rollout's pre-flight to match a
    layout's device-filters (:func:`known_host_gpus`). Not the profiles, their placements, compute profiles nor
    per-process memory: the map computes nothing from them once this is known.
    """
    view = gpu_view(gpu, host)
    figures = view['figures']
    named = [figures[key] for key in ('largest_placeable', 'repacked_largest_placeable')] if figures else []
    return {
        'index': view['index'],
        'uuid': view['uuid'],
        'name': view['name'],
        'pci_device_id': gpu.get('pci_device_id'),
        'pci_subsystem_id': gpu.get('pci_subsystem_id'),
        'mig_capable': view['mig_capable'],
        'mig_mode': {'current': view['mig'], 'pending': view['pending']},
        'in_layout': view['in_layout'],
        'processes': view['processes'],
        'allocated_to': _raw_pods(gpu),
        'total_slices': view['total_slices'],
        'slices': view['states'],
        'figures': dict((key, figures[key]) for key in SUMMARY_FIGURES) if figures else None,
        'ranks': dict((name, list(view['ranks'][name])) for name in named if name),
        'gpu_instances': [dict(dict((key, instance[key]) for key in _INSTANCE_KEYS), allocated_to=_raw_pods(raw))
                          for instance, raw in zip(view['instances'], _by_start(gpu))],
    }


def _by_start(gpu):
    """The facts' GPU instances in the order gpu_view lists them (by placement start)."""
    return sorted(gpu.get('gpu_instances') or [], key=lambda gi: gi['placement']['start'])


def _summary_instance(raw, total, where):
    if not isinstance(raw, dict):
        raise MapInputError('%s: each GPU instance must be a dict, got %r' % (where, raw))
    gi_id = require(raw, 'id', (int,), where + ' GPU instance', 'an integer')
    where = '%s GPU instance %d' % (where, gi_id)
    start = require(raw, 'start', (int,), where, 'an integer')
    size = require(raw, 'size', (int,), where, 'an integer')
    if start < 0 or size < 1 or start + size > total:
        raise MapInputError('%s: slices %d to %d are not on a GPU of %d memory slices' % (where, start, start + size - 1, total))
    pids = require(raw, 'pids', (list,), where, 'a list of pids', optional=True) or []
    if not all(is_int(pid) for pid in pids):
        raise MapInputError('%s: pids must be integers, got %r' % (where, pids))
    return {
        'id': gi_id,
        'profile': require(raw, 'profile', (str,), where, 'a profile name'),
        'start': start,
        'size': size,
        'compute_instances': sorted(str(name) for name in
                                    require(raw, 'compute_instances', (list,), where, 'a list', optional=True) or []),
        'pids': sorted(pids),
        'busy': bool(pids) or raw.get('busy') is True,
        'allocated_to': allocations(raw, where),
    }


def view_of_summary(gpu, host):
    """A GPU summary (:func:`gpu_summary`) read back into the view :func:`gpu_view` makes of the full facts."""
    where = 'host %s' % host
    if not isinstance(gpu, dict):
        raise MapInputError('%s: each GPU summary must be a dict (nvidia_mig_facts summary gpus entry), got %r' % (where, gpu))
    index = require(gpu, 'index', (int,), where + ' GPU', 'an integer')
    where = '%s GPU %d' % (where, index)
    name = require(gpu, 'name', (str,), where, 'a string')
    mode = require(gpu, 'mig_mode', (dict,), where, 'a dict {current, pending}')
    capable = require(gpu, 'mig_capable', (bool,), where, 'true or false')
    for key in ('current', 'pending'):
        if mode.get(key) not in (MODES if capable else ('unsupported',)):
            raise MapInputError('%s: mig_mode.%s must be %s, got %r' % (
                where, key, 'enabled or disabled' if capable else 'unsupported (no MIG)', mode.get(key)))
    processes = require(gpu, 'processes', (list,), where, 'a list of pids', optional=True) or []
    if not all(is_int(pid) for pid in processes):
        raise MapInputError('%s: processes must be a list of pids, got %r' % (where, processes))
    total = require(gpu, 'total_slices', (int,), where, 'an integer')
    raw_instances = require(gpu, 'gpu_instances', (list,), where, 'a list', optional=True) or []
    instances = [_summary_instance(raw, total, where) for raw in raw_instances]
    states = require(gpu, 'slices', (list,), where, 'a list of slice states')
    if len(states) != total or not all(state in ('free', 'stranded', 'unusable') or (is_int(state) and 0 <= state < len(instances))
                                       for state in states):
        raise MapInputError('%s: slices must give each of the %d memory slices free, stranded, unusable or the position of '
                            'its GPU instance, got %r' % (where, total, states))
    figures = require(gpu, 'figures', (dict,), where, 'a dict', optional=True)
    if figures is not None and sorted(figures) != sorted(SUMMARY_FIGURES):
        raise MapInputError('%s: figures must have %s, got %s' % (where, ', '.join(SUMMARY_FIGURES), ', '.join(sorted(figures))))
    ranks = require(gpu, 'ranks', (dict,), where, 'a dict', optional=True) or {}
    return {
        'index': index,
        'uuid': require(gpu, 'uuid', (str,), where, 'a string'),
        'name': name,
        'model': model_name(name),
        'mig_capable': capable,
        'in_layout': require(gpu, 'in_layout', (bool,), where, 'true, false or null', optional=True),
        'processes': sorted(set(processes)),
        'allocated_to': allocations(gpu, where),
        'mig': mode['current'],
        'pending': mode['pending'],
        'instances': instances,
        'states': list(states),
        'figures': figures,
        'total_slices': total,
        'plan': None,
        'ranks': dict((name, tuple(rank)) for name, rank in ranks.items()),
    }


def report_lines(summaries):
    """The report's line per GPU (playbooks/mig_report.yml prints them per host)."""
    lines = []
    layout_text = {True: ', in layout', False: ', NOT in layout', None: ''}
    for gpu in summaries:
        model = model_name(gpu['name'])
        mode = gpu['mig_mode']
        pending = ' (pending %s)' % mode['pending'] if mode['pending'] != mode['current'] else ''
        if not gpu['mig_capable']:
            lines.append('GPU %d %s: no MIG' % (gpu['index'], model))
        elif gpu['figures'] is None:
            lines.append('GPU %d %s: MIG %s%s%s (profiles and free space known once MIG is enabled)' % (
                gpu['index'], model, mode['current'], pending, layout_text[gpu['in_layout']]))
        else:
            profiles = [gi['profile'] for gi in gpu['gpu_instances']]
            counts = ' '.join('%dx%s' % (profiles.count(name), name) for name in sorted(set(profiles)))
            figures = gpu['figures']
            busy = gpu['processes'] or any(gi['busy'] for gi in gpu['gpu_instances'])
            lines.append('GPU %d %s: MIG %s%s, %s; %d free slice(s), largest placeable %s, %d stranded, fragmentation %.2f%s%s' % (
                gpu['index'], model, mode['current'], pending, counts or 'no instances', figures['free_slices'],
                figures['largest_placeable'] or '-', figures['stranded_slices'], figures['fragmentation'],
                ', busy' if busy else '', layout_text[gpu['in_layout']]))
    return lines


def report_totals(summaries):
    """One host's figures for the report's summary line."""
    enabled = [gpu for gpu in summaries if gpu['mig_capable'] and gpu['mig_mode']['current'] == 'enabled']
    return {
        'gpus': len(summaries),
        'mig_enabled': len(enabled),
        'out_of_layout': len([gpu for gpu in summaries if gpu['in_layout'] is False]),
        'instances': sum(len(gpu['gpu_instances']) for gpu in summaries),
        'free_slices': sum(gpu['figures']['free_slices'] for gpu in summaries if gpu['figures']),
        'stranded_slices': sum(gpu['figures']['stranded_slices'] for gpu in summaries if gpu['figures']),
        'busy_gpus': len([gpu for gpu in summaries if gpu['processes'] or any(gi['busy'] for gi in gpu['gpu_instances'])]),
    }


def host_summary(layout, gpus, host='localhost'):
    """What nvidia_mig_facts returns with ``summary: true``: the declared layout, the report's lines and figures, and
    ``map``, the GPUs' summaries as one JSON text.

    One text, not a list of dicts: ansible-core walks every value of every result it receives, several times (the
    callback's native types, strip_internal_keys, the deep copies of ansible/vars/clean.py), and a thousand hosts'
    GPU instances, slices and pods are millions of values; one string per host is one value (benchmarks/report.py).
    """
    summaries = [gpu_summary(gpu, host) for gpu in gpus]
    return {'layout': layout, 'lines': report_lines(summaries), 'totals': report_totals(summaries),
            'map': json.dumps(summaries, separators=(',', ':'), sort_keys=True)}


def summary_gpus(summary, where):
    """The GPU summaries of a host summary: its ``map`` (JSON text), or ``gpus`` (the same, as data)."""
    if isinstance(summary.get('map'), str):
        try:
            gpus = json.loads(summary['map'])
        except ValueError as exc:
            raise MapInputError('%s summary: map is not the JSON of the GPU summaries: %s' % (where, exc))
    else:
        gpus = require(summary, 'gpus', (list,), where + ' summary', 'a list (or map, its JSON text)')
    if not isinstance(gpus, list):
        raise MapInputError('%s summary: map must be the JSON of a list of GPU summaries, got %s' % (where, type(gpus).__name__))
    return gpus


def known_host_gpus(kept=None, facts=None, summary=None, decision=None):
    """A host's MIG-capable GPUs as the controller knows them (_layout_matching.known_gpus), or None where it does not.

    ``decision``: its registered ``mig_layout__decision`` of this run, where it told them (_layout_matching.decision_gpus:
    the rollout's pre-flight decides first on each host that is not a Kubernetes node); else
    ``kept``: the fact ``mig_layout_host_gpus`` (its last decision's; playbooks/mig_layout.yml keeps it); else its
    ``nvidia_mig`` facts (``facts``); else its ``nvidia_mig_summary`` (``summary``), which the rollout's pre-flight
    reads instead of the facts: a fact cache hands a host's facts to every later variable lookup of that host, every
    profile and placement of every GPU decoded again each time, where the summary is a few values. A summary that
    cannot be read, or one made before it carried the PCI ids, tells nothing (a device-filter could not be matched).
    """
    told = decision_gpus(decision)
    if told is not None:
        return told
    if kept is not None:
        return kept
    if facts is not None:
        return known_gpus(facts)
    if not isinstance(summary, dict):
        return None
    try:
        gpus = summary_gpus(summary, 'nvidia_mig_summary')
    except MapInputError:
        return None
    if not all(isinstance(gpu, dict) and 'pci_device_id' in gpu for gpu in gpus):
        return None
    # What the facts it was made from tell, no more (the memory slices of a GPU are not known from facts either).
    return known_gpus({'gpus': gpus})


# The time a summary was read, in UTC to the second: the fact cache keeps it beside the summary.
READ_AT_FORMAT = '%Y-%m-%dT%H:%M:%SZ'


def cached_summary(summary, read_at):
    """The fact ``nvidia_mig_summary`` of nvidia_mig_facts (``summary: true``): the summary and when the host read it
    (``read_at``, a datetime in UTC). A fact cache (AWX fact storage, ansible-core ``fact_caching``) keeps it, so a
    later report can draw the host without contacting it and say how old its facts are."""
    return dict(summary, read_at=read_at.strftime(READ_AT_FORMAT))


def parse_read_at(text, where):
    """The UTC datetime of a ``read_at`` text; :class:`MapInputError` naming ``where`` for anything else."""
    try:
        return datetime.datetime.strptime(text, READ_AT_FORMAT)
    except (TypeError, ValueError):
        raise MapInputError('%s: read_at must be a UTC time such as 2026-12-04T06:00:00Z, got %r' % (where, text))


def age_text(seconds):
    """``3 d 4 h``, ``5 h 2 min``, ``7 min``: an age for a person."""
    minutes = int(seconds) // 60
    days, hours, minutes = minutes // 1440, minutes // 60 % 24, minutes % 60
    if days:
        return '%d d %d h' % (days, hours)
    if hours:
        return '%d h %d min' % (hours, minutes)
    return '%d min' % minutes


def cached_record(host, fact, now, max_age):
    """The map record of ``host`` from its cached fact ``nvidia_mig_summary`` (``fact``, None when the cache has none),
    at ``now`` (UTC datetime): {host, source, summary, read_at, age[, stale]} where ``stale`` says why facts older than
    ``max_age`` seconds need a look, or {host, source, failed} where the cache holds nothing usable: the report then
    lists the host as not read, never as a host without GPUs."""
    record = {'host': host, 'source': 'cache'}
    if fact is None:
        return dict(record, failed='no cached MIG facts: no report with a fact cache has read this host yet, or its '
                                   'cache entry expired; run the report live (mig_report_source=live)')
    if not isinstance(fact, dict) or not isinstance(fact.get('map'), str):
        return dict(record, failed='the cached MIG facts are not a summary of nvidia_mig_facts (summary: true)')
    try:
        read_at = parse_read_at(fact.get('read_at'), 'host %s cached facts' % host)
    except MapInputError as exc:
        return dict(record, failed=str(exc))
    age = int((now - read_at).total_seconds())
    summary = dict((key, value) for key, value in fact.items() if key != 'read_at')
    record.update(summary=summary, read_at=fact['read_at'], age=age)
    if age > max_age:
        record['stale'] = 'facts read %s, %s ago (older than %s)' % (fact['read_at'], age_text(age), age_text(max_age))
    elif age < -300:
        # A host clock ahead of the controller's by more than a few minutes: the age cannot be trusted.
        record['stale'] = 'facts read %s, %s in the future of this controller (clocks differ)' % (
            fact['read_at'], age_text(-age))
    return record
