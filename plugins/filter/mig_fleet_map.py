# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Filter mig_fleet_map: the MIG state of a fleet as one self-contained HTML page."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: mig_fleet_map
version_added: 0.2.0
short_description: The MIG state of a fleet as one self-contained HTML page
description:
  - Draws every GPU of every host with its memory slices to scale, each GPU instance as a block spanning the slices
    of its placement, and free and stranded slices marked, with fleet totals at the top (see C(docs/fragmentation.md)
    for the definitions).
  - The page has no external script, style, font or image and loads nothing (a Content-Security-Policy forbids it),
    so it can be archived as a job artifact and opened from disk.
  - Free slices, stranded slices, largest placeable profile and fragmentation are computed from the profiles and GPU
    instances of each GPU with the same code as M(gpufleet.mig.nvidia_mig_facts), so the drawing and the figures
    always agree.
  - Every record is validated; a malformed one fails with the host, the GPU and what is wrong.
positional: title, generated
options:
  _input:
    description:
      - One record per host, a dict with C(host) (inventory name), C(layout) (the declared layout name, or null when
        none is declared) and C(gpus) (the C(gpus) list of the C(nvidia_mig) facts of M(gpufleet.mig.nvidia_mig_facts)).
      - Each GPU may carry C(in_layout) (true, false, or null when unknown).
      - Each GPU instance, and each GPU used whole, may carry C(allocated_to), the pods that hold it, as a list of dicts
        with C(namespace), C(pod) and optionally C(container), or of strings C(namespace/pod) (or C(uid:<pod uid>)) as
        M(gpufleet.mig.nvidia_mig_facts) writes them.
      - GPUs that are not MIG-capable and GPUs with MIG disabled (whose C(profiles) may be empty) are shown as such.
    type: list
    elements: dict
    required: true
  title:
    description: Heading and C(<title>) of the page.
    type: str
    default: MIG fleet map
  generated:
    description: Free text shown under the heading, for example when and by which job the map was made.
    type: str
author:
  - gpufleet.mig developers (@gpufleet)
'''

EXAMPLES = r'''
- name: Write the fleet MIG map on the controller
  ansible.builtin.copy:
    dest: "{{ playbook_dir }}/mig-fleet-map.html"
    mode: "0644"
    content: "{{ mig_map_hosts | gpufleet.mig.mig_fleet_map('MIG fleet map', 'generated ' ~ now(utc=true).isoformat()) }}"
  vars:
    # one record per host, set by a play that ran gpufleet.mig.nvidia_mig_facts on each host
    mig_map_hosts:
      - host: gpu-node-1
        layout: daytime
        gpus: "{{ hostvars['gpu-node-1'].nvidia_mig.gpus }}"
  delegate_to: localhost
  run_once: true
'''

RETURN = r'''
_value:
  description:
    - An HTML5 document. Stable hooks for tests and scripts, every value HTML-escaped
      (attributes carry the raw value, e.g. the slice numbers as integers).
    - C(section#fleet-totals) with C([data-total=NAME]) entries (C(hosts), C(gpus), C(mig_enabled), C(mig_disabled),
      C(no_mig), C(gpu_instances), C(busy_instances), C(allocated_instances), C(free_slices), C(stranded_slices),
      C(in_layout), C(out_of_layout), C(layout_unknown)), C(tr[data-layout]) rows and C(tr[data-model]) rows with
      C(li[data-profile][data-count]) for the largest placeable profile per GPU model.
    - One C(section.host[data-host]) per host; one C(article.gpu[data-host][data-gpu]) per GPU with C(data-uuid),
      C(data-model), C(data-mig) (V(enabled), V(disabled) or V(unsupported)), C(data-mig-pending), C(data-in-layout)
      (V(true), V(false) or V(unknown)), C(data-total-slices), C(data-free-slices), C(data-stranded-slices),
      C(data-largest-placeable) and C(data-fragmentation).
    - In it, C(ol.slices) holds one C(li.block) per GPU instance (C(data-state=instance), C(data-start), C(data-size),
      C(data-profile), C(data-gi-id), C(data-busy), C(data-allocated)) and per free memory slice
      (C(data-state=free), C(data-state=stranded) or C(data-state=unusable), C(data-size=1)); a GPU without MIG or with MIG disabled has one
      block with C(data-state=no-mig) or C(data-state=mig-disabled) and C(data-allocated).
  type: str
'''

import html
import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.six import string_types

from ansible_collections.gpufleet.mig.plugins.module_utils._mig_geometry import (
    Catalog,
    GeometryError,
    Occupancy,
    analyze,
    slice_states,
)

MODES = ('enabled', 'disabled')
_ID_UNSAFE = re.compile(r'[^A-Za-z0-9_-]+')

STYLE = '''
:root { --ink: #1f2933; --muted: #52606d; --line: #cbd2d9; --bar-width: 56rem; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
  color: var(--ink); background: #f5f7fa; }
header, main, footer { max-width: 64rem; margin: 0 auto; padding: 0 1.25rem; }
header { padding-top: 1.25rem; }
h1 { font-size: 1.6rem; margin: 0 0 .2rem; }
h2 { font-size: 1.25rem; margin: 1.6rem 0 .6rem; }
h3 { font-size: 1.05rem; margin: 0; }
.generated, .note { color: var(--muted); margin: 0; }
.panel { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: .9rem 1rem; margin-bottom: 1rem; }
.panel > h2 { margin-top: 0; }
.legend .note { margin-top: .6rem; }
.totals { display: grid; grid-template-columns: repeat(auto-fill, minmax(10.5rem, 1fr)); gap: .5rem; margin: 0 0 1rem; }
.totals div { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: .45rem .7rem; }
.totals dt { color: var(--muted); font-size: .85rem; }
.totals dd { margin: 0; font-size: 1.35rem; font-weight: 650; }
.totals .warn dd { color: #9b1c1c; }
table { border-collapse: collapse; width: 100%; background: #fff; margin-bottom: 1rem; }
caption { text-align: left; font-weight: 650; padding: .3rem 0; }
th, td { border: 1px solid var(--line); padding: .3rem .55rem; text-align: left; vertical-align: top; }
th { background: #eef2f6; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
ul.counts { list-style: none; margin: 0; padding: 0; display: flex; flex-wrap: wrap; gap: .25rem .9rem; }
.legend ul { list-style: none; margin: 0; padding: 0; display: flex; flex-wrap: wrap; gap: .5rem 1.2rem; }
.legend li { display: flex; align-items: center; gap: .45rem; }
.swatch { display: inline-block; width: 2.4rem; height: 1.3rem; border: 1px solid #7b8794; border-radius: 3px; }
section.host { margin-bottom: 1.6rem; }
section.host > h2 { margin-bottom: .15rem; }
.host-summary { color: var(--muted); margin: 0 0 .6rem; }
article.gpu { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: .75rem 1rem .6rem;
  margin-bottom: .7rem; }
article.gpu.out-of-layout { border-left: 5px solid #c81e1e; }
.gpu-head { display: flex; flex-wrap: wrap; align-items: baseline; gap: .3rem .8rem; margin-bottom: .4rem; }
.uuid { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: .8rem; color: var(--muted);
  overflow-wrap: anywhere; }
.badge { display: inline-block; border-radius: 999px; padding: 0 .55rem; font-size: .8rem; font-weight: 600;
  border: 1px solid currentColor; }
.badge.yes { color: #0b6e3a; } .badge.no { color: #b42318; } .badge.unknown { color: #52606d; }
.badge.pending { color: #8a4b00; }
dl.figures { display: flex; flex-wrap: wrap; gap: .1rem 1.3rem; margin: 0 0 .55rem; font-size: .9rem; }
dl.figures div { display: flex; gap: .3rem; }
dl.figures dt { color: var(--muted); }
dl.figures dd { margin: 0; font-weight: 600; }
ol.slices, .axis { display: grid; width: var(--bar-width); max-width: 100%; margin: 0; padding: 0; list-style: none; }
ol.slices { min-height: 4.9rem; border: 1px solid #3e4c59; border-radius: 4px; overflow: hidden; }
.axis { color: var(--muted); font-size: .72rem; font-variant-numeric: tabular-nums; }
.axis span { text-align: center; border-left: 1px solid var(--line); }
.axis span:first-child { border-left: 0; }
.block { min-width: 0; padding: .3rem .4rem; border-right: 1px solid #3e4c59; display: flex; flex-direction: column;
  justify-content: center; font-size: .78rem; line-height: 1.25; overflow: hidden; }
.block:last-child { border-right: 0; }
.block span { display: block; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.block .profile { font-weight: 700; font-size: .86rem; }
.instance.idle, .swatch.idle { background: #d6e4ff; }
.instance.allocated, .swatch.allocated { background: #e6d8fb; }
.instance.busy, .swatch.busy { background: #ffd591; }
.instance .status { font-weight: 600; }
.free, .swatch.free { background: #f0fbf4; color: #0b6e3a; }
.stranded, .swatch.stranded { background: repeating-linear-gradient(135deg, #fbd5d5 0 6px, #fff 6px 12px);
  color: #9b1c1c; font-weight: 700; }
.unusable, .swatch.unusable { background: #f5f7fa; color: #52606d; }
.block.free, .block.stranded, .block.unusable { align-items: center; text-align: center; }
.no-mig, .swatch.no-mig { background: #e4e7eb; color: #3e4c59; }
.mig-disabled, .swatch.mig-disabled { background: repeating-linear-gradient(90deg, #e4e7eb 0 10px, #f5f7fa 10px 20px);
  color: #3e4c59; }
.block.no-mig, .block.mig-disabled { grid-column: 1 / -1; align-items: flex-start; padding-left: .8rem; }
details { margin-top: .45rem; font-size: .85rem; }
details table { margin: .4rem 0 0; font-size: .82rem; }
@media (max-width: 52rem) {
  .block { padding: .25rem .2rem; font-size: .7rem; }
  .block .profile { font-size: .74rem; }
}
footer { color: var(--muted); font-size: .85rem; padding-bottom: 2rem; }
footer dt { font-weight: 600; color: var(--ink); }
footer dd { margin: 0 0 .4rem 1rem; }
'''


class MapInputError(ValueError):
    """A host record that cannot be drawn."""


def _error(message):
    return AnsibleFilterError('mig_fleet_map: %s' % message)


def _e(value):
    """Text or attribute value, HTML-escaped (quotes included)."""
    return html.escape('%s' % (value,), quote=True)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _require(record, key, kinds, where, kind_name, optional=False):
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


def _model_name(name):
    return name[len('NVIDIA '):] if name.startswith('NVIDIA ') else name


def _pids_of(gi):
    pids = set()
    for ci in gi.get('compute_instances') or []:
        for process in ci.get('processes') or []:
            pids.add(process['pid'])
    return sorted(pids)


def _allocations(record, where):
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
        if isinstance(entry, string_types) and entry.strip():
            result.append({'label': entry, 'detail': entry})
            continue
        if not isinstance(entry, dict):
            raise MapInputError("%s: allocated_to entries must be {namespace, pod, container} or 'namespace/pod', got %r"
                                % (where, entry))
        namespace = _require(entry, 'namespace', string_types, where + ' allocated_to', 'a string')
        pod = _require(entry, 'pod', string_types, where + ' allocated_to', 'a string')
        container = _require(entry, 'container', string_types, where + ' allocated_to', 'a string', optional=True)
        label = '%s/%s' % (namespace, pod)
        result.append({'label': label, 'detail': '%s (container %s)' % (label, container) if container else label})
    return result


def _instance_view(gi, catalog, where):
    if not isinstance(gi, dict):
        raise MapInputError('%s: each GPU instance must be a dict, got %r' % (where, gi))
    gi_id = _require(gi, 'id', (int,), where + ' GPU instance', 'an integer')
    where = '%s GPU instance %d' % (where, gi_id)
    profile = _require(gi, 'profile', string_types, where, 'a profile name')
    placement = _require(gi, 'placement', (dict,), where, 'a dict {start, size}')
    start = _require(placement, 'start', (int,), where + ' placement', 'an integer')
    size = _require(placement, 'size', (int,), where + ' placement', 'an integer')
    known = catalog.get(profile)
    if known is None:
        raise MapInputError('%s: profile %s is not among the GPU profiles (%s)' % (where, profile, ', '.join(catalog.names())))
    if size != known.memory_slices:
        raise MapInputError('%s: placement size %d but %s spans %d memory slices' % (where, size, profile, known.memory_slices))
    cis = _require(gi, 'compute_instances', (list,), where, 'a list', optional=True) or []
    for ci in cis:
        if not isinstance(ci, dict) or not isinstance(ci.get('processes') or [], list):
            raise MapInputError('%s: compute instances must be dicts with a processes list, got %r' % (where, ci))
        for process in ci.get('processes') or []:
            if not isinstance(process, dict) or not _is_int(process.get('pid')):
                raise MapInputError('%s: processes must be dicts with an integer pid, got %r' % (where, process))
    pids = _pids_of(gi)
    return {
        'id': gi_id,
        'profile': profile,
        'start': start,
        'size': size,
        'compute_instances': sorted('%s' % ci.get('profile', '?') for ci in cis),
        'pids': pids,
        'busy': bool(pids) or gi.get('busy') is True,
        'allocated_to': _allocations(gi, where),
    }


def _gpu_view(gpu, host):
    where = 'host %s' % host
    if not isinstance(gpu, dict):
        raise MapInputError('%s: each GPU must be a dict (nvidia_mig_facts gpus entry), got %r' % (where, gpu))
    index = _require(gpu, 'index', (int,), where + ' GPU', 'an integer')
    where = '%s GPU %d' % (where, index)
    view = {
        'index': index,
        'uuid': _require(gpu, 'uuid', string_types, where, 'a string'),
        'name': _require(gpu, 'name', string_types, where, 'a string'),
        'mig_capable': _require(gpu, 'mig_capable', (bool,), where, 'true or false'),
        'in_layout': _require(gpu, 'in_layout', (bool,), where, 'true, false or null', optional=True),
        'processes': [],
        'instances': [],
        'states': [],
        'figures': None,
        'total_slices': 0,
    }
    view['model'] = _model_name(view['name'])
    processes = gpu.get('processes') or []
    if not isinstance(processes, list) or not all(isinstance(p, dict) and _is_int(p.get('pid')) for p in processes):
        raise MapInputError('%s: processes must be a list of dicts with an integer pid, got %r' % (where, processes))
    view['processes'] = sorted(set(p['pid'] for p in processes))
    view['allocated_to'] = _allocations(gpu, where)
    if not view['mig_capable']:
        view['mig'] = 'unsupported'
        view['pending'] = 'unsupported'
        return view
    mode = _require(gpu, 'mig_mode', (dict,), where, 'a dict {current, pending}')
    for key in ('current', 'pending'):
        if mode.get(key) not in MODES:
            raise MapInputError('%s: mig_mode.%s must be enabled or disabled, got %r' % (where, key, mode.get(key)))
    view['mig'] = mode['current']
    view['pending'] = mode['pending']
    profiles = _require(gpu, 'profiles', (list,), where, 'a list', optional=True) or []
    instances = _require(gpu, 'gpu_instances', (list,), where, 'a list', optional=True) or []
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
    views = sorted((_instance_view(gi, catalog, where) for gi in instances), key=lambda v: v['start'])
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


def _host_view(record, position):
    if not isinstance(record, dict):
        raise MapInputError('host record %d must be a dict {host, layout, gpus}, got %r' % (position, record))
    host = record.get('host')
    if not isinstance(host, string_types) or not host.strip():
        raise MapInputError('host record %d: host must be a non-empty inventory name, got %r' % (position, host))
    layout = _require(record, 'layout', string_types, 'host %s' % host, 'a layout name or null', optional=True)
    gpus = _require(record, 'gpus', (list,), 'host %s' % host, 'a list (nvidia_mig facts gpus)')
    views = sorted((_gpu_view(gpu, host) for gpu in gpus), key=lambda v: v['index'])
    indexes = [v['index'] for v in views]
    if len(set(indexes)) != len(indexes):
        raise MapInputError('host %s: GPU indexes repeat: %s' % (host, indexes))
    return {'host': host, 'layout': layout, 'gpus': views}


def _dom_ids(hosts):
    """A unique, attribute-safe element id per host, derived from its name."""
    used = set()
    for host in hosts:
        base = 'host-' + (_ID_UNSAFE.sub('-', host['host']).strip('-') or 'x')
        candidate = base
        number = 2
        while candidate in used:
            candidate = '%s-%d' % (base, number)
            number += 1
        used.add(candidate)
        host['dom_id'] = candidate


_TOTAL_LABELS = (
    ('hosts', 'Hosts'), ('gpus', 'GPUs'), ('mig_enabled', 'MIG enabled'), ('mig_disabled', 'MIG disabled'),
    ('no_mig', 'Without MIG'), ('gpu_instances', 'GPU instances'), ('busy_instances', 'Busy instances'),
    ('allocated_instances', 'Allocated instances'), ('free_slices', 'Free slices'), ('stranded_slices', 'Stranded slices'),
    ('in_layout', 'GPUs in layout'), ('out_of_layout', 'GPUs out of layout'), ('layout_unknown', 'Layout unknown'),
)


def _totals(hosts):
    totals = dict((key, 0) for key, dummy in _TOTAL_LABELS)
    layouts = {}
    models = {}
    totals['hosts'] = len(hosts)
    for host in hosts:
        row = layouts.setdefault(host['layout'], {'hosts': 0, 'gpus': 0, 'in': 0, 'out': 0, 'unknown': 0})
        row['hosts'] += 1
        for gpu in host['gpus']:
            totals['gpus'] += 1
            row['gpus'] += 1
            state = {True: 'in', False: 'out', None: 'unknown'}[gpu['in_layout']]
            row[state] += 1
            totals[{'in': 'in_layout', 'out': 'out_of_layout', 'unknown': 'layout_unknown'}[state]] += 1
            if gpu['mig'] == 'unsupported':
                totals['no_mig'] += 1
                continue
            if gpu['mig'] == 'disabled':
                totals['mig_disabled'] += 1
                continue
            totals['mig_enabled'] += 1
            totals['gpu_instances'] += len(gpu['instances'])
            totals['busy_instances'] += sum(1 for gi in gpu['instances'] if gi['busy'])
            totals['allocated_instances'] += sum(1 for gi in gpu['instances'] if gi['allocated_to'])
            totals['free_slices'] += gpu['figures']['free_slices']
            totals['stranded_slices'] += gpu['figures']['stranded_slices']
            model = models.setdefault(gpu['model'], {'gpus': 0, 'largest': {}, 'ranks': {}})
            model['gpus'] += 1
            model['ranks'].update(gpu['ranks'])
            largest = gpu['figures']['largest_placeable']
            model['largest'][largest] = model['largest'].get(largest, 0) + 1
    return totals, layouts, models


def _render_totals(hosts):
    totals, layouts, models = _totals(hosts)
    out = ['<section id="fleet-totals" aria-labelledby="fleet-totals-title">',
           '<h2 id="fleet-totals-title">Fleet totals</h2>', '<dl class="totals">']
    for key, label in _TOTAL_LABELS:
        warn = key in ('stranded_slices', 'out_of_layout') and totals[key]
        out.append('<div data-total="%s"%s><dt>%s</dt><dd>%d</dd></div>' % (key, ' class="warn"' if warn else '', label, totals[key]))
    out.append('</dl>')
    out.append('<table id="totals-by-layout"><caption>GPUs by declared layout</caption>'
               '<thead><tr><th scope="col">Declared layout</th><th scope="col" class="num">Hosts</th>'
               '<th scope="col" class="num">GPUs</th><th scope="col" class="num">In layout</th>'
               '<th scope="col" class="num">Out of layout</th><th scope="col" class="num">Unknown</th></tr></thead><tbody>')
    for name in sorted(layouts, key=lambda n: (n is None, n or '')):
        row = layouts[name]
        out.append('<tr data-layout="%s" data-hosts="%d" data-gpus="%d" data-in-layout="%d" data-out-of-layout="%d" '
                   'data-unknown="%d"><th scope="row">%s</th><td class="num">%d</td><td class="num">%d</td>'
                   '<td class="num">%d</td><td class="num">%d</td><td class="num">%d</td></tr>'
                   % (_e(name or ''), row['hosts'], row['gpus'], row['in'], row['out'], row['unknown'],
                      _e(name) if name else '<em>none declared</em>', row['hosts'], row['gpus'], row['in'], row['out'],
                      row['unknown']))
    out.append('</tbody></table>')
    out.append('<table id="totals-largest-placeable"><caption>Largest placeable profile per GPU model '
               '(GPUs with MIG enabled)</caption><thead><tr><th scope="col">GPU model</th>'
               '<th scope="col" class="num">GPUs</th><th scope="col">Largest profile that still fits: number of GPUs</th>'
               '</tr></thead><tbody>')
    if not models:
        out.append('<tr><td colspan="3">No GPU with MIG enabled.</td></tr>')
    for model in sorted(models):
        entry = models[model]
        ranked = sorted(entry['largest'], key=lambda name: entry['ranks'].get(name, ()) if name else (), reverse=True)
        items = ''.join('<li data-profile="%s" data-count="%d"><strong>%s</strong>: %d</li>'
                        % (_e(name or 'none'), entry['largest'][name], _e(name) if name else 'nothing fits',
                           entry['largest'][name]) for name in ranked)
        out.append('<tr data-model="%s" data-gpus="%d"><th scope="row">%s</th><td class="num">%d</td>'
                   '<td><ul class="counts">%s</ul></td></tr>' % (_e(model), entry['gpus'], _e(model), entry['gpus'], items))
    out.append('</tbody></table></section>')
    return '\n'.join(out)


_LEGEND = (
    ('instance idle', 'GPU instance, idle (no process, no pod)'),
    ('instance allocated', 'GPU instance allocated to a pod'),
    ('instance busy', 'GPU instance busy (processes running)'),
    ('free', 'free slice (a still-placeable profile can use it)'),
    ('stranded', 'stranded slice (free, unusable as placed, usable after a repack of the same instances)'),
    ('unusable', 'unusable slice (free, but no arrangement of these instances leaves a profile that can use it)'),
    ('mig-disabled', 'MIG disabled (whole GPU)'),
    ('no-mig', 'GPU without MIG'),
)


def _render_legend():
    items = ''.join('<li><span class="swatch %s" aria-hidden="true"></span>%s</li>' % (css, _e(text)) for css, text in _LEGEND)
    return ('<section id="legend" class="legend panel" aria-labelledby="legend-title">'
            '<h2 id="legend-title">Legend</h2><ul>%s</ul><p class="note">Each bar is one GPU\'s memory, drawn to '
            'scale: every bar has the same width, so GPUs with the same number of memory slices have slices of the '
            'same width. Numbers under a bar are memory slice indexes; a block\'s label gives its profile, placement '
            '(first slice) and GPU instance id. Hover a block for details.</p></section>' % items)


def _describe_instance(gi):
    last = gi['start'] + gi['size'] - 1
    where = 'memory slice %d' % gi['start'] if gi['size'] == 1 else 'memory slices %d-%d' % (gi['start'], last)
    parts = ['%s at %s (GPU instance %d)' % (gi['profile'], where, gi['id'])]
    if gi['busy']:
        parts.append('busy, pids %s' % (', '.join(str(p) for p in gi['pids']) or 'unknown'))
    if gi['allocated_to']:
        parts.append('allocated to %s' % ', '.join(_pod_text(a, True) for a in gi['allocated_to']))
    if not gi['busy'] and not gi['allocated_to']:
        parts.append('idle')
    return '; '.join(parts)


def _pod_text(allocation, with_container=False):
    return allocation['detail'] if with_container else allocation['label']


def _instance_state(gi):
    if gi['busy']:
        return 'busy'
    if gi['allocated_to']:
        return 'allocated'
    return 'idle'


def _render_block(gi):
    lines = ['<span class="profile">%s</span>' % _e(gi['profile']),
             '<span class="placement">@%d &middot; GI %d</span>' % (gi['start'], gi['id'])]
    if gi['allocated_to']:
        lines.append('<span class="status">allocated</span>')
        lines.append('<span class="pod">%s</span>' % _e(', '.join(_pod_text(a) for a in gi['allocated_to'])))
    if gi['busy']:
        lines.append('<span class="status">busy</span>')
        lines.append('<span class="pids">pid %s</span>' % _e(', '.join(str(p) for p in gi['pids']) or '?'))
    if not gi['busy'] and not gi['allocated_to']:
        lines.append('<span class="status">idle</span>')
    return ('<li class="block instance %s" data-state="instance" data-start="%d" data-size="%d" data-profile="%s" '
            'data-gi-id="%d" data-busy="%s" data-allocated="%s" style="grid-column: %d / span %d" title="%s">%s</li>'
            % (_instance_state(gi), gi['start'], gi['size'], _e(gi['profile']), gi['id'], str(gi['busy']).lower(),
               str(bool(gi['allocated_to'])).lower(), gi['start'] + 1, gi['size'], _e(_describe_instance(gi)), ''.join(lines)))


def _whole_gpu_usage(gpu):
    """' · busy, pid ...' and ' · allocated to ...' for a GPU used whole (plain text)."""
    text = ''
    if gpu['processes']:
        text += ' \u00b7 busy, pid %s' % ', '.join(str(p) for p in gpu['processes'])
    if gpu['allocated_to']:
        text += ' \u00b7 allocated to %s' % ', '.join(_pod_text(a, True) for a in gpu['allocated_to'])
    return text


_SLICE_TITLES = {
    'free': 'free',
    'stranded': 'stranded (free, but no profile that still fits can use it; a repack of the same instances would)',
    'unusable': 'unusable (free, but the GPU\'s compute slices or profile counts are all taken: no arrangement uses it)',
}


def _render_bar(gpu):
    usage = _whole_gpu_usage(gpu)
    allocated = str(bool(gpu['allocated_to'])).lower()
    if gpu['mig'] == 'unsupported':
        return ('<ol class="slices" data-total-slices="0" aria-label="GPU %d: no MIG"><li class="block no-mig" '
                'data-state="no-mig" data-allocated="%s" title="%s"><span class="profile">No MIG</span>'
                '<span>whole GPU%s</span></li></ol>'
                % (gpu['index'], allocated, _e('This GPU does not support MIG: it is used whole' + usage), _e(usage)))
    if gpu['mig'] == 'disabled':
        pending = ('; MIG will be enabled at the next GPU reset' if gpu['pending'] == 'enabled' else '')
        return ('<ol class="slices" data-total-slices="0" aria-label="GPU %d: MIG disabled"><li class="block mig-disabled" '
                'data-state="mig-disabled" data-allocated="%s" title="%s"><span class="profile">MIG disabled</span>'
                '<span>whole GPU%s%s</span></li></ol>'
                % (gpu['index'], allocated, _e('MIG is disabled: the GPU is used whole' + usage + pending), _e(usage),
                   _e(pending)))
    total = gpu['total_slices']
    cells = []
    for slice_index, state in enumerate(gpu['states']):
        if state in _SLICE_TITLES:
            title = 'memory slice %d: %s' % (slice_index, _SLICE_TITLES[state])
            cells.append('<li class="block %s" data-state="%s" data-start="%d" data-size="1" style="grid-column: %d / span 1" '
                         'title="%s"><span>%s</span></li>' % (state, state, slice_index, slice_index + 1, _e(title), state))
        elif gpu['instances'][state]['start'] == slice_index:
            cells.append(_render_block(gpu['instances'][state]))
    axis = ''.join('<span>%d</span>' % number for number in range(total))
    columns = 'grid-template-columns: repeat(%d, 1fr)' % total
    return ('<ol class="slices" data-total-slices="%d" style="%s" aria-label="GPU %d memory, %d slices">%s</ol>'
            '<div class="axis" style="%s" aria-hidden="true">%s</div>'
            % (total, columns, gpu['index'], total, ''.join(cells), columns, axis))


def _render_details(gpu):
    if not gpu['instances']:
        return ''
    rows = []
    for gi in gpu['instances']:
        allocated = ', '.join(_pod_text(a, True) for a in gi['allocated_to'])
        rows.append('<tr><td class="num">%d</td><td>%s</td><td>%d:%d</td><td>%s</td><td>%s</td><td>%s</td></tr>'
                    % (gi['id'], _e(gi['profile']), gi['start'], gi['size'], _e(', '.join(gi['compute_instances']) or 'none'),
                       _e(', '.join(str(p) for p in gi['pids']) or '-'), _e(allocated or '-')))
    return ('<details><summary>%d GPU instance(s)</summary><table><thead><tr><th scope="col" class="num">GI</th>'
            '<th scope="col">Profile</th><th scope="col">Placement start:size</th><th scope="col">Compute instances</th>'
            '<th scope="col">Processes</th><th scope="col">Allocated to</th></tr></thead><tbody>%s</tbody></table></details>'
            % (len(gpu['instances']), ''.join(rows)))


def _render_gpu(host, gpu):
    in_layout = {True: 'true', False: 'false', None: 'unknown'}[gpu['in_layout']]
    badge = {'true': ('yes', 'in layout'), 'false': ('no', 'out of layout'), 'unknown': ('unknown', 'layout unknown')}[in_layout]
    figures = gpu['figures']
    mode = gpu['mig'] if gpu['mig'] != 'unsupported' else 'not supported'
    mode_badge = ''
    if gpu['mig'] != 'unsupported' and gpu['pending'] != gpu['mig']:
        mode_badge = ' <span class="badge pending">pending %s</span>' % _e(gpu['pending'])
    facts = ['<div><dt>MIG</dt><dd>%s%s</dd></div>' % (_e(mode), mode_badge)]
    attrs = ''
    if figures is not None:
        facts.extend([
            '<div><dt>Largest placeable</dt><dd>%s</dd></div>' % _e(figures['largest_placeable'] or 'nothing fits'),
            '<div><dt>Free slices</dt><dd>%d of %d</dd></div>' % (figures['free_slices'], figures['total_slices']),
            '<div><dt>Stranded</dt><dd>%d</dd></div>' % figures['stranded_slices'],
            '<div><dt>Fragmentation</dt><dd>%.2f</dd></div>' % figures['fragmentation'],
        ])
        attrs = (' data-free-slices="%d" data-stranded-slices="%d" data-largest-placeable="%s" data-fragmentation="%s"'
                 % (figures['free_slices'], figures['stranded_slices'], _e(figures['largest_placeable'] or ''),
                    _e(figures['fragmentation'])))
    classes = 'gpu out-of-layout' if gpu['in_layout'] is False else 'gpu'
    return ('<article class="%s" id="%s-gpu-%d" data-host="%s" data-gpu="%d" data-uuid="%s" data-model="%s" data-mig="%s" '
            'data-mig-pending="%s" data-in-layout="%s" data-total-slices="%d"%s aria-label="%s GPU %d">'
            '<div class="gpu-head"><h3>GPU %d &middot; %s</h3><span class="badge %s">%s</span>'
            '<span class="uuid">%s</span></div><dl class="figures">%s</dl>%s%s</article>'
            % (classes, host['dom_id'], gpu['index'], _e(host['host']), gpu['index'], _e(gpu['uuid']), _e(gpu['model']),
               gpu['mig'], gpu['pending'], in_layout, gpu['total_slices'], attrs, _e(host['host']), gpu['index'],
               gpu['index'], _e(gpu['model']), badge[0], badge[1], _e(gpu['uuid']), ''.join(facts), _render_bar(gpu),
               _render_details(gpu)))


def _render_host(host):
    gpus = host['gpus']
    out_of_layout = sum(1 for g in gpus if g['in_layout'] is False)
    stranded = sum(g['figures']['stranded_slices'] for g in gpus if g['figures'])
    summary = '%d GPU(s), declared layout: %s' % (len(gpus), host['layout'] or 'none')
    if out_of_layout:
        summary += ', %d out of layout' % out_of_layout
    if stranded:
        summary += ', %d stranded slice(s)' % stranded
    body = ''.join(_render_gpu(host, gpu) for gpu in gpus) or '<p class="note">No GPU reported.</p>'
    return ('<section class="host" id="%s" data-host="%s" data-layout="%s" aria-labelledby="%s-title">'
            '<h2 id="%s-title">%s</h2><p class="host-summary">%s</p>%s</section>'
            % (host['dom_id'], _e(host['host']), _e(host['layout'] or ''), host['dom_id'], host['dom_id'], _e(host['host']),
               _e(summary), body))


_FOOTER = '''<footer><h2>Terms</h2><dl>
<dt>Free slices</dt><dd>memory slices that no GPU instance covers.</dd>
<dt>Largest placeable</dt><dd>the biggest profile of which one more instance still fits, honouring NVML's placements.</dd>
<dt>Stranded slices</dt><dd>free slices that no still-placeable profile can use as the instances are placed, but that
the best rearrangement of the same instances would make usable: memory a repack gives back. A slice that no arrangement
can use (7x1g: every compute slice taken) is unusable, not stranded.</dd>
<dt>Fragmentation</dt><dd>1 - largest placeable slices / largest placeable slices after the best rearrangement: 0.00 when
the largest profile that could fit does fit (or nothing could), 0.50 when a repack would fit an instance twice as big.</dd>
</dl></footer>'''


def mig_fleet_map(hosts, title='MIG fleet map', generated=None):
    """One self-contained HTML page drawing the MIG state of ``hosts`` (see DOCUMENTATION)."""
    if not isinstance(hosts, list):
        raise _error('input must be a list of host records {host, layout, gpus}, got %s' % type(hosts).__name__)
    if not isinstance(title, string_types):
        raise _error('title must be a string, got %r' % (title,))
    if generated is not None and not isinstance(generated, string_types):
        raise _error('generated must be a string, got %r' % (generated,))
    try:
        views = [_host_view(record, position) for position, record in enumerate(hosts)]
    except MapInputError as exc:
        raise _error(exc)
    names = [h['host'] for h in views]
    repeated = sorted(set(n for n in names if names.count(n) > 1))
    if repeated:
        raise _error('host names repeat: %s' % ', '.join(repeated))
    views.sort(key=lambda h: h['host'])
    _dom_ids(views)
    parts = [
        '<!DOCTYPE html>',
        '<html lang="en">',
        '<head>',
        '<meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<title>%s</title>' % _e(title),
        '<style>%s</style>' % STYLE,
        '</head>',
        '<body>',
        '<header><h1>%s</h1>%s</header>' % (_e(title), '<p class="generated">%s</p>' % _e(generated) if generated else ''),
        '<main>',
        _render_totals(views),
        _render_legend(),
        '<section id="hosts" aria-label="Hosts">',
    ]
    parts.extend(_render_host(host) for host in views)
    if not views:
        parts.append('<p class="note">No host records.</p>')
    parts.extend(['</section>', '</main>', _FOOTER, '</body>', '</html>', ''])
    return '\n'.join(parts)


class FilterModule(object):
    """gpufleet.mig fleet map filter."""

    def filters(self):
        return {'mig_fleet_map': mig_fleet_map}
