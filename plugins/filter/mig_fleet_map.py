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
  - Opens with an attention list (GPUs out of layout, unmatched, fragmented, busy where a switch is pending, hosts
    whose facts could not be read, and hosts whose cached facts are stale) that can be sorted and filtered by host, model and state; then fleet totals,
    and every GPU of every host with its memory slices to scale, each GPU instance as a block spanning the slices of
    its placement, and free, stranded and unusable slices marked (see C(docs/fragmentation.md) for the definitions).
  - With a planned change per host (the C(gpus) of M(gpufleet.mig.nvidia_mig_layout) with O(gpufleet.mig.nvidia_mig_layout#module:apply=false)),
    each GPU is drawn as it is and as it will be, the instances that go are marked and the pods that move named.
  - The page has no external script, style, font or image and loads nothing (a Content-Security-Policy allows only
    its own inline style and its one inline script, by hash), so it can be archived as a job artifact and opened from
    disk. The GPUs are carried as compact JSON and drawn by the inline script, which keeps a 1000-host, 8000-GPU fleet
    under 5 MB.
  - Free, stranded and unusable slices, largest placeable profile and fragmentation are computed from the profiles and
    GPU instances of each GPU with the same code as M(gpufleet.mig.nvidia_mig_facts), so the drawing and the figures
    always agree.
  - The HTML comes from a Jinja2 template with autoescape; every record is validated first, and a malformed one fails
    with the host, the GPU and what is wrong.
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
      - Instead of C(layout) and C(gpus), a record may carry C(summary), the
        RV(gpufleet.mig.nvidia_mig_facts#module:ansible_facts.nvidia_mig_summary) the host computed
        (O(gpufleet.mig.nvidia_mig_facts#module:summary=true)); its GPUs are drawn as they are, without recomputing
        them, so a fleet's whole facts need not reach the controller (C(playbooks/mig_report.yml) does so).
      - A record may carry C(failed), a reason, instead of C(gpus) for a host whose facts could not be read.
      - A record may carry C(stale), a reason (facts drawn from a fact cache that are too old); the host is listed
        among those that need attention (V(stale)), its GPUs drawn as the cache has them.
      - A record may carry C(plan), a dict with C(layout) (the planned layout name) and C(gpus) (the C(gpus) of
        M(gpufleet.mig.nvidia_mig_layout) run with O(gpufleet.mig.nvidia_mig_layout#module:apply=false)).
    type: list
    elements: dict
    required: true
  title:
    description: Heading and C(<title>) of the page.
    type: str
    default: MIG fleet map
  generated:
    description:
      - Free text shown under the heading, for example when (with its time zone) and by which job the map was made.
    type: str
  fragmentation_above:
    description: A GPU whose fragmentation is above this is listed as fragmented (the scheduled repack's default).
    type: float
    default: 0.25
  stranded_above:
    description: A GPU with more stranded memory slices than this is listed as fragmented (the scheduled repack's default).
    type: int
    default: 0
author:
  - gpufleet.mig developers (@gpufleet)
'''

EXAMPLES = r'''
- name: Write the fleet MIG map on the controller
  ansible.builtin.copy:
    dest: "{{ lookup('ansible.builtin.env', 'PWD') }}/mig-fleet-map.html"
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
    - An HTML5 document. Stable hooks for tests and scripts, every value HTML-escaped.
    - C(section#attention) with C(table#attention-table), one C(tr.attention[data-host][data-gpu][data-model][data-states])
      per GPU (or failed or stale host) that needs attention, C(data-states) listing V(failed), V(stale), V(out-of-layout),
      V(unmatched), V(fragmented) and V(busy-switch-pending); the filters C(#filter-host), C(#filter-model), C(#filter-state) and
      C(button[data-sort]) column sorting.
    - C(section#fleet-totals) with C([data-total=NAME]) entries (C(hosts), C(failed_hosts), C(gpus), C(mig_enabled),
      C(mig_disabled), C(no_mig), C(gpu_instances), C(busy_instances), C(allocated_instances), C(free_slices),
      C(stranded_slices), C(in_layout), C(out_of_layout), C(layout_unknown), C(attention)), C(tr[data-layout]) rows and
      C(tr[data-model]) rows with C(li[data-profile][data-count]) for the largest placeable profile per GPU model.
    - C(script#fleet-data), the GPUs as JSON, from which the inline script draws, once loaded (C(body[data-rendered=true]),
      the drawing time in C(body[data-render-ms])), one C(section.host[data-host]) per host and one
      C(article.gpu[data-host][data-gpu]) per GPU with C(data-uuid), C(data-model), C(data-mig) (V(enabled),
      V(disabled) or V(unsupported)), C(data-mig-pending), C(data-in-layout) (V(true), V(false) or V(unknown)),
      C(data-total-slices), C(data-free-slices), C(data-stranded-slices), C(data-largest-placeable) and
      C(data-fragmentation).
    - In it, C(ol.slices) holds one C(li.block) per GPU instance (C(data-state=instance), C(data-start), C(data-size),
      C(data-profile), C(data-gi-id), C(data-busy), C(data-allocated), C(data-goes) when a planned change destroys it)
      and per free memory slice (C(data-state=free), C(data-state=stranded) or C(data-state=unusable), C(data-size=1));
      a GPU without MIG or with MIG disabled has one block with C(data-state=no-mig) or C(data-state=mig-disabled) and
      C(data-allocated). A planned change adds C(ol.slices.planned) (C(data-state=instance) blocks with C(data-kept))
      and C(p.moves) naming the pods to evict.
  type: str
'''

import base64
import datetime
import hashlib
import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.six import string_types

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_summary import (
    MODES,
    MapInputError,
    age_text,
    cached_record,
    gpu_view,
    is_int,
    require,
    summary_gpus,
    view_of_summary,
)

try:
    import jinja2
except ImportError:  # pragma: no cover - jinja2 comes with ansible-core on every controller
    jinja2 = None

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
section.host { content-visibility: auto; contain-intrinsic-size: auto 40rem; }
.block.goes { outline: 3px dashed #b42318; outline-offset: -3px; }
.block.goes .status.goes, .moves strong { color: #b42318; }
.instance.new, .swatch.new { background: #def7ec; }
.plan-head { margin: .5rem 0 .2rem; font-size: .85rem; color: var(--muted); }
.moves { margin: .3rem 0 0; font-size: .85rem; }
#attention .filters { display: flex; flex-wrap: wrap; gap: .4rem 1rem; margin-bottom: .5rem; align-items: center; }
#attention th button { font: inherit; font-weight: 600; background: none; border: 0; padding: 0; cursor: pointer; }
#attention th button::after { content: " \\2195"; color: var(--muted); }
#attention .state { display: inline-block; border-radius: 3px; padding: 0 .35rem; margin: 0 .2rem .1rem 0; font-size: .8rem;
  font-weight: 600; background: #fde8e8; color: #9b1c1c; }
#attention .state.fragmented { background: #fdf6b2; color: #723b13; }
#attention .state.busy-switch-pending { background: #ffd591; color: #713f12; }
#attention tr[hidden] { display: none; }
footer { color: var(--muted); font-size: .85rem; padding-bottom: 2rem; }
footer dt { font-weight: 600; color: var(--ink); }
footer dd { margin: 0 0 .4rem 1rem; }
'''

# The inline script: draws the hosts from #fleet-data (same markup a server-side drawing would have, every value
# escaped), then wires the attention list's filters and sorting. Allowed by the page's Content-Security-Policy
# through its SHA-256 hash, so no other script can run.
SCRIPT = r'''
(function () {
  'use strict';
  var started = performance.now();
  var data = JSON.parse(document.getElementById('fleet-data').textContent);
  var P = data.p, M = data.m;
  var MODE = {e: 'enabled', d: 'disabled', u: 'unsupported'};
  var SLICE = {f: 'free', s: 'stranded', u: 'unusable'};
  var SLICE_TITLE = {
    f: 'free',
    s: 'stranded (free, but no profile that still fits can use it; a repack of the same instances would)',
    u: 'unusable (free, but the GPU\'s compute slices or profile counts are all taken: no arrangement uses it)'
  };
  var ESC = {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'};
  function esc(value) { return String(value).replace(/[&<>"']/g, function (c) { return ESC[c]; }); }
  function label(pod) { return typeof pod === 'string' ? pod : pod[0]; }
  function detail(pod) { return typeof pod === 'string' ? pod : pod[0] + ' (container ' + pod[1] + ')'; }
  function describe(gi) {
    var last = gi[1] + gi[2] - 1;
    var where = gi[2] === 1 ? 'memory slice ' + gi[1] : 'memory slices ' + gi[1] + '-' + last;
    var parts = [P[gi[0]] + ' at ' + where + ' (GPU instance ' + gi[3] + ')'];
    if (gi[4]) { parts.push('busy, pids ' + (gi[5].join(', ') || 'unknown')); }
    if (gi[6].length) { parts.push('allocated to ' + gi[6].map(detail).join(', ')); }
    if (!gi[4] && !gi[6].length) { parts.push('idle'); }
    return parts.join('; ');
  }
  function instanceBlock(gi, goes) {
    var state = gi[4] ? 'busy' : (gi[6].length ? 'allocated' : 'idle');
    var lines = '<span class="profile">' + esc(P[gi[0]]) + '</span><span class="placement">@' + gi[1] + ' &middot; GI ' + gi[3] + '</span>';
    if (gi[6].length) {
      lines += '<span class="status">allocated</span><span class="pod">' + esc(gi[6].map(label).join(', ')) + '</span>';
    }
    if (gi[4]) { lines += '<span class="status">busy</span><span class="pids">pid ' + esc(gi[5].join(', ') || '?') + '</span>'; }
    if (!gi[4] && !gi[6].length) { lines += '<span class="status">idle</span>'; }
    if (goes) { lines += '<span class="status goes">goes</span>'; }
    return '<li class="block instance ' + state + (goes ? ' goes' : '') + '" data-state="instance" data-start="' + gi[1] +
      '" data-size="' + gi[2] + '" data-profile="' + esc(P[gi[0]]) + '" data-gi-id="' + gi[3] + '" data-busy="' +
      (gi[4] ? 'true' : 'false') + '" data-allocated="' + (gi[6].length ? 'true' : 'false') + '"' +
      (goes ? ' data-goes="true"' : '') + ' style="grid-column: ' + (gi[1] + 1) + ' / span ' + gi[2] + '" title="' +
      esc(describe(gi) + (goes ? '; the planned change destroys it' : '')) + '">' + lines + '</li>';
  }
  function columns(total) { return 'grid-template-columns: repeat(' + total + ', 1fr)'; }
  function usage(g) {
    var text = '';
    if (g[10].length) { text += ' \u00b7 busy, pid ' + g[10].join(', '); }
    if (g[11].length) { text += ' \u00b7 allocated to ' + g[11].map(detail).join(', '); }
    return text;
  }
  function bar(g) {
    var mig = MODE[g[3]], allocated = g[11].length ? 'true' : 'false', use = usage(g);
    if (mig === 'unsupported') {
      return '<ol class="slices" data-total-slices="0" aria-label="GPU ' + g[0] + ': no MIG"><li class="block no-mig" ' +
        'data-state="no-mig" data-allocated="' + allocated + '" title="' + esc('This GPU does not support MIG: it is used whole' + use) +
        '"><span class="profile">No MIG</span><span>whole GPU' + esc(use) + '</span></li></ol>';
    }
    if (mig === 'disabled') {
      var pending = MODE[g[4]] === 'enabled' ? '; MIG will be enabled at the next GPU reset' : '';
      return '<ol class="slices" data-total-slices="0" aria-label="GPU ' + g[0] + ': MIG disabled"><li class="block mig-disabled" ' +
        'data-state="mig-disabled" data-allocated="' + allocated + '" title="' + esc('MIG is disabled: the GPU is used whole' + use + pending) +
        '"><span class="profile">MIG disabled</span><span>whole GPU' + esc(use) + esc(pending) + '</span></li></ol>';
    }
    var goes = g[12] ? g[12][1] : [];
    var cells = '', axis = '';
    for (var i = 0; i < g[6]; i++) {
      var state = g[7].charAt(i);
      if (SLICE[state]) {
        cells += '<li class="block ' + SLICE[state] + '" data-state="' + SLICE[state] + '" data-start="' + i + '" data-size="1" ' +
          'style="grid-column: ' + (i + 1) + ' / span 1" title="memory slice ' + i + ': ' + esc(SLICE_TITLE[state]) + '"><span>' +
          SLICE[state] + '</span></li>';
      } else {
        var gi = g[9][state.charCodeAt(0) - 48];
        if (gi[1] === i) { cells += instanceBlock(gi, goes.indexOf(gi[3]) >= 0); }
      }
      axis += '<span>' + i + '</span>';
    }
    return '<ol class="slices" data-total-slices="' + g[6] + '" style="' + columns(g[6]) + '" aria-label="GPU ' + g[0] +
      ' memory, ' + g[6] + ' slices">' + cells + '</ol><div class="axis" style="' + columns(g[6]) + '" aria-hidden="true">' +
      axis + '</div>';
  }
  function planned(h, g) {
    var plan = g[12];
    if (!plan) { return ''; }
    var head = '<p class="plan-head">Planned (' + esc(h[4] || '') + '): ';
    var out;
    if (plan[3]) {
      out = head + 'no change</p>';
    } else if (plan[0] === null) {
      out = head + esc(plan[5] || 'MIG mode changes first; instances are planned once it is enabled') + '</p>';
    } else if (plan[4] === 'd') {
      out = head + 'MIG disabled, the GPU used whole</p>';
    } else {
      var cells = '';
      plan[0].forEach(function (gi) {
        cells += '<li class="block instance ' + (gi[3] ? 'idle' : 'new') + '" data-state="instance" data-start="' + gi[1] +
          '" data-size="' + gi[2] + '" data-profile="' + esc(P[gi[0]]) + '" data-kept="' + (gi[3] ? 'true' : 'false') +
          '" style="grid-column: ' + (gi[1] + 1) + ' / span ' + gi[2] + '" title="' + esc(P[gi[0]] + ' at ' + gi[1] +
          (gi[3] ? ', kept' : ', created')) + '"><span class="profile">' + esc(P[gi[0]]) + '</span><span class="status">' +
          (gi[3] ? 'kept' : 'new') + '</span></li>';
      });
      out = head + plan[1].length + ' instance(s) go</p><ol class="slices planned" data-total-slices="' + g[6] + '" style="' +
        columns(g[6]) + '" aria-label="GPU ' + g[0] + ' as planned">' + cells + '</ol>';
    }
    if (plan[2].length) {
      out += '<p class="moves"><strong>Pods to evict:</strong> ' + esc(plan[2].join(', ')) + '</p>';
    }
    return out;
  }
  function card(h, g) {
    var mig = MODE[g[3]], pending = MODE[g[4]], model = M[g[2]];
    var inLayout = g[5] === 1 ? 'true' : (g[5] === 0 ? 'false' : 'unknown');
    var badge = {'true': ['yes', 'in layout'], 'false': ['no', 'out of layout'], 'unknown': ['unknown', 'layout unknown']}[inLayout];
    var facts = '<div><dt>MIG</dt><dd>' + esc(mig === 'unsupported' ? 'not supported' : mig) +
      (mig !== 'unsupported' && pending !== mig ? ' <span class="badge pending">pending ' + esc(pending) + '</span>' : '') + '</dd></div>';
    var attrs = '';
    var f = g[8];
    if (f) {
      facts += '<div><dt>Largest placeable</dt><dd>' + esc(f[2] >= 0 ? P[f[2]] : 'nothing fits') + '</dd></div>' +
        '<div><dt>Free slices</dt><dd>' + f[0] + ' of ' + g[6] + '</dd></div><div><dt>Stranded</dt><dd>' + f[1] + '</dd></div>' +
        '<div><dt>Fragmentation</dt><dd>' + f[3].toFixed(2) + '</dd></div>';
      if (f[3] > 0) { facts += '<div><dt>After a repack</dt><dd>' + esc(P[f[4]]) + '</dd></div>'; }
      attrs = ' data-free-slices="' + f[0] + '" data-stranded-slices="' + f[1] + '" data-largest-placeable="' +
        esc(f[2] >= 0 ? P[f[2]] : '') + '" data-fragmentation="' + f[3] + '"';
    }
    var details = g[9].length ? '<details data-gpu="' + g[0] + '"><summary>' + g[9].length + ' GPU instance(s)</summary></details>' : '';
    return '<article class="gpu' + (g[5] === 0 ? ' out-of-layout' : '') + '" id="' + h[2] + '-gpu-' + g[0] + '" data-host="' +
      esc(h[0]) + '" data-gpu="' + g[0] + '" data-uuid="' + esc(g[1]) + '" data-model="' + esc(model) + '" data-mig="' + mig +
      '" data-mig-pending="' + pending + '" data-in-layout="' + inLayout + '" data-total-slices="' + g[6] + '"' + attrs +
      ' aria-label="' + esc(h[0]) + ' GPU ' + g[0] + '"><div class="gpu-head"><h3>GPU ' + g[0] + ' &middot; ' + esc(model) +
      '</h3><span class="badge ' + badge[0] + '">' + badge[1] + '</span><span class="uuid">' + esc(g[1]) + '</span></div>' +
      '<dl class="figures">' + facts + '</dl>' + bar(g) + planned(h, g) + details + '</article>';
  }
  function hostSection(h) {
    var gpus = h[5], out = 0, stranded = 0;
    gpus.forEach(function (g) { if (g[5] === 0) { out += 1; } if (g[8]) { stranded += g[8][1]; } });
    var summary = gpus.length + ' GPU(s), declared layout: ' + (h[1] || 'none');
    if (out) { summary += ', ' + out + ' out of layout'; }
    if (stranded) { summary += ', ' + stranded + ' stranded slice(s)'; }
    if (h[4]) { summary += ', planned layout: ' + h[4]; }
    var body = h[3] ? '<p class="note failed">Facts not read: ' + esc(h[3]) + '</p>' :
      (gpus.length ? '' : '<p class="note">No GPU reported.</p>');
    return '<section class="host" id="' + h[2] + '" data-host="' + esc(h[0]) + '" data-layout="' + esc(h[1] || '') +
      '" data-drawn="' + (gpus.length ? 'false' : 'true') + '" aria-labelledby="' + h[2] + '-title"><h2 id="' + h[2] +
      '-title">' + esc(h[0]) + '</h2><p class="host-summary">' + esc(summary) + '</p>' + body + '</section>';
  }
  // A host's GPU cards are drawn when it comes near the viewport (or is linked, printed, or drawAll is called):
  // the page is usable at once whatever the fleet's size.
  function draw(section) {
    if (section.dataset.drawn === 'true') { return; }
    var h = byId[section.id];
    section.insertAdjacentHTML('beforeend', h[5].map(function (g) { return card(h, g); }).join(''));
    section.dataset.drawn = 'true';
  }
  function drawAll() {
    Array.prototype.forEach.call(document.querySelectorAll('section.host[data-drawn="false"]'), draw);
  }
  function drawTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var host = byId[id] ? id : (id.indexOf('-gpu-') > 0 ? id.slice(0, id.lastIndexOf('-gpu-')) : '');
    var section = host && document.getElementById(host);
    if (section) {
      draw(section);
      var target = document.getElementById(id);
      if (target) { target.scrollIntoView(); }
    }
  }
  function detailsTable(h, g) {
    var rows = g[9].map(function (gi) {
      return '<tr><td class="num">' + gi[3] + '</td><td>' + esc(P[gi[0]]) + '</td><td>' + gi[1] + ':' + gi[2] + '</td><td>' +
        esc(gi[7].map(function (c) { return P[c]; }).join(', ') || 'none') + '</td><td>' + esc(gi[5].join(', ') || '-') +
        '</td><td>' + esc(gi[6].map(detail).join(', ') || '-') + '</td></tr>';
    }).join('');
    return '<table><thead><tr><th scope="col" class="num">GI</th><th scope="col">Profile</th><th scope="col">Placement ' +
      'start:size</th><th scope="col">Compute instances</th><th scope="col">Processes</th><th scope="col">Allocated to</th>' +
      '</tr></thead><tbody>' + rows + '</tbody></table>';
  }
  var hosts = document.getElementById('hosts');
  var byId = {};
  data.h.forEach(function (h) { byId[h[2]] = h; });
  hosts.insertAdjacentHTML('beforeend', data.h.map(hostSection).join('') ||
    '<p class="note">No host records.</p>');
  var pending = document.querySelectorAll('section.host[data-drawn="false"]');
  if (window.IntersectionObserver) {
    var observer = new IntersectionObserver(function (entries) {
      entries.forEach(function (entry) {
        if (entry.isIntersecting) { draw(entry.target); observer.unobserve(entry.target); }
      });
    }, {rootMargin: '1500px 0px'});
    Array.prototype.forEach.call(pending, function (section) { observer.observe(section); });
  } else {
    drawAll();
  }
  window.addEventListener('beforeprint', drawAll);
  window.addEventListener('hashchange', drawTarget);
  drawTarget();
  window.gpufleetMigMap = {drawAll: drawAll};
  hosts.addEventListener('toggle', function (event) {
    var node = event.target;
    if (node.tagName !== 'DETAILS' || node.querySelector('table')) { return; }
    var h = byId[node.closest('section.host').id];
    var index = Number(node.dataset.gpu);
    var g = h[5].filter(function (gpu) { return gpu[0] === index; })[0];
    node.insertAdjacentHTML('beforeend', detailsTable(h, g));
  }, true);

  var table = document.getElementById('attention-table');
  if (table) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var host = document.getElementById('filter-host'), model = document.getElementById('filter-model');
    var state = document.getElementById('filter-state'), shown = document.getElementById('attention-shown');
    var filter = function () {
      var text = host.value.trim().toLowerCase(), count = 0;
      rows.forEach(function (row) {
        var visible = (!text || row.dataset.host.toLowerCase().indexOf(text) >= 0) &&
          (!model.value || row.dataset.model === model.value) &&
          (!state.value || (' ' + row.dataset.states + ' ').indexOf(' ' + state.value + ' ') >= 0);
        row.hidden = !visible;
        if (visible) { count += 1; }
      });
      shown.textContent = String(count);
    };
    [host, model, state].forEach(function (input) { input.addEventListener('input', filter); input.addEventListener('change', filter); });
    var order = {};
    Array.prototype.forEach.call(table.querySelectorAll('button[data-sort]'), function (button) {
      button.addEventListener('click', function () {
        var key = button.dataset.sort, ascending = order[key] = !order[key];
        rows.sort(function (a, b) {
          var x = a.dataset['sort' + key], y = b.dataset['sort' + key];
          var result = key === 'Gpu' ? Number(x) - Number(y) : (x < y ? -1 : (x > y ? 1 : 0));
          return ascending ? result : -result;
        });
        rows.forEach(function (row) { body.appendChild(row); });
      });
    });
  }
  document.body.dataset.renderMs = String(Math.round(performance.now() - started));
  document.body.dataset.rendered = 'true';
}());
'''


def _error(message):
    return AnsibleFilterError('mig_fleet_map: %s' % message)


def _host_view(record, position):
    if not isinstance(record, dict):
        raise MapInputError('host record %d must be a dict {host, layout, gpus}, got %r' % (position, record))
    host = record.get('host')
    if not isinstance(host, string_types) or not host.strip():
        raise MapInputError('host record %d: host must be a non-empty inventory name, got %r' % (position, host))
    where = 'host %s' % host
    failed = require(record, 'failed', string_types, where, 'a reason (string) or null', optional=True)
    stale = require(record, 'stale', string_types, where, 'a reason (string) or null', optional=True)
    summary = require(record, 'summary', (dict,), where, 'a dict (nvidia_mig_facts summary)', optional=True)
    if summary is not None:
        # The host computed its GPUs' views (nvidia_mig_facts summary: true): read back, not recomputed.
        layout = require(summary, 'layout', string_types, where + ' summary', 'a layout name or null', optional=True)
        views = [view_of_summary(gpu, host) for gpu in summary_gpus(summary, where)]
    else:
        layout = require(record, 'layout', string_types, where, 'a layout name or null', optional=True)
        gpus = require(record, 'gpus', (list,), where, 'a list (nvidia_mig facts gpus)', optional=failed is not None) or []
        views = [gpu_view(gpu, host) for gpu in gpus]
    views.sort(key=lambda v: v['index'])
    indexes = [v['index'] for v in views]
    if len(set(indexes)) != len(indexes):
        raise MapInputError('host %s: GPU indexes repeat: %s' % (host, indexes))
    plan = require(record, 'plan', (dict,), where, 'a dict {layout, gpus} (nvidia_mig_layout with apply=false)', optional=True)
    if plan is not None:
        _attach_plan(views, plan, where)
    return {'host': host, 'layout': layout, 'failed': failed, 'stale': stale, 'gpus': views,
            'planned_layout': plan.get('layout') if plan else None}


def _attach_plan(views, plan, where):
    """Each GPU's planned change (the gpus of nvidia_mig_layout with apply=false): its instances after, marked new or kept,
    the instances it destroys and the pods that must move. GPUs the plan does not list stay as they are."""
    layout = require(plan, 'layout', string_types, where + ' plan', 'the planned layout name')
    entries = require(plan, 'gpus', (list,), where + ' plan', 'a list (nvidia_mig_layout gpus)')
    by_index = dict((v['index'], v) for v in views)
    for entry in entries:
        if not isinstance(entry, dict):
            raise MapInputError('%s plan: each GPU must be a dict, got %r' % (where, entry))
        index = require(entry, 'index', (int,), where + ' plan GPU', 'an integer')
        gpu = by_index.get(index)
        label = '%s plan GPU %d' % (where, index)
        if gpu is None:
            raise MapInputError('%s: no such GPU in the facts' % label)
        after = require(entry, 'after', (list,), label, 'a list of GPU instances or null', optional=True)
        destroyed = require(entry, 'destroyed_instances', (list,), label, 'a list', optional=True) or []
        pods = require(entry, 'pods_to_evict', (list,), label, 'a list of pods', optional=True) or []
        if not all(isinstance(p, string_types) for p in pods):
            raise MapInputError('%s: pods_to_evict must be a list of strings, got %r' % (label, pods))
        gone = []
        for instance in destroyed:
            if not isinstance(instance, dict) or not is_int(instance.get('id')):
                raise MapInputError('%s: destroyed_instances entries must be dicts with an integer id, got %r' % (label, instance))
            gone.append(instance['id'])
        planned = None
        if after is not None:
            planned = []
            for instance in after:
                if not isinstance(instance, dict):
                    raise MapInputError('%s: after entries must be dicts, got %r' % (label, instance))
                profile = require(instance, 'profile', string_types, label + ' after', 'a profile name')
                placement = require(instance, 'placement', (dict,), label + ' after', 'a dict {start, size}')
                planned.append({'profile': profile,
                                'start': require(placement, 'start', (int,), label + ' after', 'an integer'),
                                'size': require(placement, 'size', (int,), label + ' after', 'an integer'),
                                'kept': is_int(instance.get('id'))})
            planned.sort(key=lambda i: i['start'])
        mode = (entry.get('mode') or {}).get('after') or {}
        gpu['plan'] = {
            'layout': layout,
            'after': planned,
            'destroyed': sorted(gone),
            'pods_to_evict': list(pods),
            'in_layout': entry.get('in_layout') is True,
            'mig_after': mode.get('current') if mode.get('current') in MODES else None,
            'note': entry.get('note') if isinstance(entry.get('note'), string_types) else None,
        }


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
    ('hosts', 'Hosts'), ('failed_hosts', 'Hosts not read'), ('gpus', 'GPUs'), ('mig_enabled', 'MIG enabled'),
    ('mig_disabled', 'MIG disabled'), ('no_mig', 'Without MIG'), ('gpu_instances', 'GPU instances'),
    ('busy_instances', 'Busy instances'), ('allocated_instances', 'Allocated instances'), ('free_slices', 'Free slices'),
    ('stranded_slices', 'Stranded slices'), ('in_layout', 'GPUs in layout'), ('out_of_layout', 'GPUs out of layout'),
    ('layout_unknown', 'Layout unknown'), ('attention', 'Need attention'),
)
_WARN_TOTALS = ('failed_hosts', 'stranded_slices', 'out_of_layout', 'attention')


def _totals(hosts, attention):
    totals = dict((key, 0) for key, dummy in _TOTAL_LABELS)
    layouts = {}
    models = {}
    totals['hosts'] = len(hosts)
    totals['attention'] = len(attention)
    for host in hosts:
        if host['failed'] is not None:
            totals['failed_hosts'] += 1
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
    rows = []
    for name in sorted(layouts, key=lambda n: (n is None, n or '')):
        rows.append(dict(layouts[name], name=name))
    model_rows = []
    for model in sorted(models):
        entry = models[model]
        ranked = sorted(entry['largest'], key=lambda name: entry['ranks'].get(name, ()) if name else (), reverse=True)
        model_rows.append({'model': model, 'gpus': entry['gpus'],
                           'largest': [{'profile': name, 'count': entry['largest'][name]} for name in ranked]})
    return ([{'key': key, 'label': text, 'value': totals[key], 'warn': key in _WARN_TOTALS and bool(totals[key])}
             for key, text in _TOTAL_LABELS], rows, model_rows)


# The states of the attention list, in the order they are listed.
ATTENTION_STATES = (
    ('failed', 'failed'),
    ('stale', 'stale facts'),
    ('out-of-layout', 'out of layout'),
    ('unmatched', 'unmatched'),
    ('fragmented', 'fragmented'),
    ('busy-switch-pending', 'busy, switch pending'),
)


def _busy(gpu):
    return bool(gpu['processes']) or any(gi['busy'] for gi in gpu['instances'])


def gpu_attention(host, gpu, fragmentation_above, stranded_above):
    """[(state, why)] for one GPU: what makes it need an operator's attention (empty: nothing)."""
    found = []
    if gpu['in_layout'] is False:
        found.append(('out-of-layout', 'does not hold the declared layout %s' % host['layout']))
    if gpu['in_layout'] is None and host['layout'] and gpu['mig'] != 'unsupported':
        found.append(('unmatched', 'no entry of the declared layout %s matches it: left as it is' % host['layout']))
    figures = gpu['figures']
    if figures and (figures['fragmentation'] > fragmentation_above or figures['stranded_slices'] > stranded_above):
        found.append(('fragmented', '%d stranded slice(s), fragmentation %.2f: largest placeable %s, %s after a repack'
                      % (figures['stranded_slices'], figures['fragmentation'], figures['largest_placeable'] or 'none',
                         figures['repacked_largest_placeable'] or 'none')))
    switches = []
    if gpu['mig'] != 'unsupported' and gpu['pending'] != gpu['mig']:
        switches.append('MIG mode %s pending' % gpu['pending'])
    if gpu['in_layout'] is False:
        switches.append('out of layout')
    plan = gpu['plan']
    if plan is not None and not plan['in_layout']:
        switches.append('a switch to %s planned' % plan['layout'])
    if switches and _busy(gpu):
        pids = sorted(set(gpu['processes']) | set(p for gi in gpu['instances'] for p in gi['pids']))
        pid_text = ', '.join(str(p) for p in pids) or '?'
        found.append(('busy-switch-pending', 'busy (pid %s) while %s' % (pid_text, ', '.join(switches))))
    return found


def attention_list(hosts, fragmentation_above, stranded_above):
    """The GPUs (and failed hosts) that need attention, by host and GPU index."""
    rows = []
    for host in hosts:
        if host['failed'] is not None:
            rows.append({'host': host['host'], 'gpu': None, 'model': '', 'anchor': host['dom_id'],
                         'states': ['failed'], 'why': ['facts not read: %s' % host['failed']]})
        if host['stale'] is not None:
            rows.append({'host': host['host'], 'gpu': None, 'model': '', 'anchor': host['dom_id'],
                         'states': ['stale'], 'why': [host['stale']]})
        for gpu in host['gpus']:
            found = gpu_attention(host, gpu, fragmentation_above, stranded_above)
            if found:
                rows.append({'host': host['host'], 'gpu': gpu['index'], 'model': gpu['model'],
                             'anchor': '%s-gpu-%d' % (host['dom_id'], gpu['index']),
                             'states': [state for state, dummy in found], 'why': [why for dummy, why in found]})
    return rows


_MODE_CODES = {'enabled': 'e', 'disabled': 'd', 'unsupported': 'u'}
_SLICE_CODES = {'free': 'f', 'stranded': 's', 'unusable': 'u'}


class _Strings(object):
    """A table of repeated strings (profile and model names): the JSON carries their positions."""

    def __init__(self):
        self.items = []
        self.positions = {}

    def __call__(self, text):
        if text not in self.positions:
            self.positions[text] = len(self.items)
            self.items.append(text)
        return self.positions[text]


def _pod(allocation):
    return allocation['label'] if allocation['detail'] == allocation['label'] else [allocation['label'], allocation['container']]


def _gpu_payload(gpu, names, models):
    """One GPU as a JSON array (positions documented in SCRIPT): about 10 times smaller than its drawing."""
    figures = gpu['figures']
    compact_figures = None
    states = ''
    if figures is not None:
        compact_figures = [figures['free_slices'], figures['stranded_slices'],
                           names(figures['largest_placeable']) if figures['largest_placeable'] else -1,
                           figures['fragmentation'],
                           names(figures['repacked_largest_placeable']) if figures['repacked_largest_placeable'] else -1]
        states = ''.join(_SLICE_CODES[s] if s in _SLICE_CODES else chr(48 + s) for s in gpu['states'])
    instances = [[names(gi['profile']), gi['start'], gi['size'], gi['id'], 1 if gi['busy'] else 0, gi['pids'],
                  [_pod(a) for a in gi['allocated_to']], [names(ci) for ci in gi['compute_instances']]]
                 for gi in gpu['instances']]
    plan = gpu['plan']
    compact_plan = None
    if plan is not None:
        after = None if plan['after'] is None else [[names(i['profile']), i['start'], i['size'], 1 if i['kept'] else 0]
                                                    for i in plan['after']]
        compact_plan = [after, plan['destroyed'], plan['pods_to_evict'], 1 if plan['in_layout'] else 0,
                        _MODE_CODES.get(plan['mig_after']), plan['note']]
    return [gpu['index'], gpu['uuid'], models(gpu['model']), _MODE_CODES[gpu['mig']], _MODE_CODES[gpu['pending']],
            {True: 1, False: 0, None: None}[gpu['in_layout']], gpu['total_slices'], states, compact_figures, instances,
            gpu['processes'], [_pod(a) for a in gpu['allocated_to']], compact_plan]


def fleet_payload(hosts):
    """What the inline script draws the hosts from: {p: names, m: models, h: [[host, layout, id, failed, planned, gpus]]}."""
    names = _Strings()
    models = _Strings()
    compact = [[host['host'], host['layout'], host['dom_id'], host['failed'], host['planned_layout'],
                [_gpu_payload(gpu, names, models) for gpu in host['gpus']]] for host in hosts]
    return {'p': names.items, 'm': models.items, 'h': compact}


_LEGEND = (
    ('instance idle', 'GPU instance, idle (no process, no pod)'),
    ('instance allocated', 'GPU instance allocated to a pod'),
    ('instance busy', 'GPU instance busy (processes running)'),
    ('free', 'free slice (a still-placeable profile can use it)'),
    ('stranded', 'stranded slice (free, unusable as placed, usable after a repack of the same instances)'),
    ('unusable', 'unusable slice (free, but no arrangement of these instances leaves a profile that can use it)'),
    ('mig-disabled', 'MIG disabled (whole GPU)'),
    ('no-mig', 'GPU without MIG'),
    ('instance new', 'planned view: an instance the change creates (a dashed red edge marks one it destroys)'),
)

# The page itself: autoescaped Jinja2; only STYLE and SCRIPT (constants above) go in unescaped.
PAGE = '''{#- The fleet MIG map (filter gpufleet.mig.mig_fleet_map). Rendered with autoescape: every value is escaped here;
    only the page's own constant style and script, and the JSON of tojson (HTML-safe), go in unescaped. -#}
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src {{ csp_script }}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }}</title>
<style>{{ style | safe }}</style>
</head>
<body>
<header><h1>{{ title }}</h1>{% if generated %}<p class="generated">{{ generated }}</p>{% endif %}</header>
<main>
<section id="attention" class="panel" aria-labelledby="attention-title">
<h2 id="attention-title">Needs attention: {{ attention | length }} of {{ totals | selectattr('key', 'eq', 'gpus') | map(attribute='value') | first }}
GPU(s)</h2>
{% if attention %}
<div class="filters">
<label>Host <input id="filter-host" type="search" placeholder="part of a host name"></label>
<label>Model <select id="filter-model"><option value="">all</option>
{% for model in attention_models %}<option value="{{ model }}">{{ model }}</option>{% endfor %}
</select></label>
<label>State <select id="filter-state"><option value="">all</option>
{% for state, text in attention_states %}<option value="{{ state }}">{{ text }}</option>{% endfor %}
</select></label>
<span>showing <strong id="attention-shown">{{ attention | length }}</strong></span>
</div>
<table id="attention-table">
<thead><tr><th scope="col"><button type="button" data-sort="Host">Host</button>
</th><th scope="col" class="num"><button type="button" data-sort="Gpu">GPU</button>
</th><th scope="col"><button type="button" data-sort="Model">Model</button>
</th><th scope="col"><button type="button" data-sort="States">State</button>
</th><th scope="col">Why</th></tr></thead>
<tbody>
{% for row in attention %}
<tr class="attention" data-host="{{ row.host }}" data-gpu="{{ row.gpu if row.gpu is not none else '' }}" data-model="{{ row.model }}" data-states="{{
row.states | join(' ') }}" data-sort-host="{{ row.host }}" data-sort-gpu="{{ row.gpu if row.gpu is not none else -1 }}" data-sort-model="{{ row.model
}}" data-sort-states="{{ row.states | join(' ') }}">
<td><a href="#{{ row.anchor }}">{{ row.host }}</a></td><td class="num">{{ row.gpu if row.gpu is not none else '-' }}</td>
<td>{{ row.model or '-' }}</td><td>{% for state in row.states %}<span class="state {{ state }}">{{ dict(attention_states)[state] }}</span>{% endfor %}</td>
<td>{{ row.why | join('; ') }}</td></tr>
{% endfor %}
</tbody>
</table>
<p class="note">Fragmented: fragmentation above {{ '%.2f' | format(fragmentation_above) }} or more than {{ stranded_above }} stranded slice(s), the
scheduled repack's thresholds. Busy, switch pending: processes run on a GPU whose MIG mode change is pending, that is out of its layout or that a
planned change alters.</p>
{% else %}
<p class="note">Nothing needs attention: every GPU holds its declared layout (or has none), none is fragmented, no busy GPU waits for a switch, and
every host was read.</p>
{% endif %}
</section>
<section id="fleet-totals" aria-labelledby="fleet-totals-title">
<h2 id="fleet-totals-title">Fleet totals</h2>
<dl class="totals">
{% for total in totals %}<div data-total="{{ total.key }}"{% if total.warn %} class="warn"{% endif %}>
<dt>{{ total.label }}</dt><dd>{{ total.value }}</dd></div>
{% endfor %}
</dl>
<table id="totals-by-layout"><caption>GPUs by declared layout</caption>
<thead><tr><th scope="col">Declared layout</th><th scope="col" class="num">Hosts</th>
<th scope="col" class="num">GPUs</th><th scope="col" class="num">In layout</th>
<th scope="col" class="num">Out of layout</th><th scope="col" class="num">Unknown</th>
</tr></thead>
<tbody>
{% for row in layouts %}
<tr data-layout="{{ row.name or '' }}" data-hosts="{{ row.hosts }}" data-gpus="{{ row.gpus }}" data-in-layout="{{ row['in'] }}" data-out-of-layout="{{
row.out }}" data-unknown="{{ row.unknown }}">
<th scope="row">{% if row.name %}{{ row.name }}{% else %}<em>none declared</em>{% endif %}</th>
<td class="num">{{ row.hosts }}</td><td class="num">{{ row.gpus }}</td>
<td class="num">{{ row['in'] }}</td><td class="num">{{ row.out }}</td>
<td class="num">{{ row.unknown }}</td></tr>
{% endfor %}
</tbody></table>
<table id="totals-largest-placeable"><caption>Largest placeable profile per GPU model (GPUs with MIG enabled)</caption>
<thead><tr><th scope="col">GPU model</th><th scope="col" class="num">GPUs</th>
<th scope="col">Largest profile that still fits: number of GPUs</th>
</tr></thead>
<tbody>
{% for row in models %}
<tr data-model="{{ row.model }}" data-gpus="{{ row.gpus }}"><th scope="row">{{ row.model }}</th>
<td class="num">{{ row.gpus }}</td><td><ul class="counts">{% for item in row.largest %}<li data-profile="{{ item.profile or 'none' }}" data-count="{{
item.count }}">
<strong>{{ item.profile or 'nothing fits' }}</strong>: {{ item.count }}</li>{% endfor %}</ul>
</td></tr>
{% else %}
<tr><td colspan="3">No GPU with MIG enabled.</td></tr>
{% endfor %}
</tbody></table>
</section>
<section id="legend" class="legend panel" aria-labelledby="legend-title">
<h2 id="legend-title">Legend</h2>
<ul>{% for css, text in legend %}<li><span class="swatch {{ css }}" aria-hidden="true"></span>{{ text }}</li>{% endfor %}</ul>
<p class="note">Each bar is one GPU's memory, drawn to scale: every bar has the same width, so GPUs with the same number of memory slices have slices
of the same width. Numbers under a bar are memory slice indexes; a block's label gives its profile, placement (first slice) and GPU instance id. Hover
a block for details.</p>
</section>
<section id="hosts" aria-label="Hosts"><noscript><p class="note">The GPUs are drawn by the page's inline script: allow it to see them.</p>
</noscript></section>
</main>
<footer><h2>Terms</h2><dl>
<dt>Free slices</dt><dd>memory slices that no GPU instance covers.</dd>
<dt>Largest placeable</dt><dd>the biggest profile of which one more instance still fits, honouring NVML's placements.</dd>
<dt>Stranded slices</dt><dd>free slices that no still-placeable profile can use as the instances are placed, but that the best rearrangement of the
same instances would make usable: memory a repack gives back. A slice that no arrangement can use (7x1g: every compute slice taken) is unusable, not
stranded.</dd>
<dt>Fragmentation</dt><dd>1 - largest placeable slices / largest placeable slices after the best rearrangement: 0.00 when the largest profile that
could fit does fit (or nothing could), 0.50 when a repack would fit an instance twice as big.</dd>
</dl></footer>
<script type="application/json" id="fleet-data">{{ payload | tojson }}</script>
<script>{{ script | safe }}</script>
</body>
</html>
'''

_CSP_SCRIPT = "'sha256-%s'" % base64.b64encode(hashlib.sha256(SCRIPT.encode('utf-8')).digest()).decode('ascii')


def _environment():
    if jinja2 is None:
        raise _error('needs the jinja2 library (it comes with ansible-core)')
    return jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)


def _number(value, name, kinds):
    if isinstance(value, bool) or not isinstance(value, kinds) or value < 0:
        raise _error('%s must be a number of 0 or more, got %r' % (name, value))
    return value


def mig_fleet_map(hosts, title='MIG fleet map', generated=None, fragmentation_above=0.25, stranded_above=0):
    """One self-contained HTML page drawing the MIG state of ``hosts`` (see DOCUMENTATION)."""
    if not isinstance(hosts, list):
        raise _error('input must be a list of host records {host, layout, gpus}, got %s' % type(hosts).__name__)
    if not isinstance(title, string_types):
        raise _error('title must be a string, got %r' % (title,))
    if generated is not None and not isinstance(generated, string_types):
        raise _error('generated must be a string, got %r' % (generated,))
    fragmentation_above = _number(fragmentation_above, 'fragmentation_above', (int, float))
    stranded_above = _number(stranded_above, 'stranded_above', (int,))
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
    attention = attention_list(views, fragmentation_above, stranded_above)
    totals, layouts, models = _totals(views, attention)
    template = _environment().from_string(PAGE)
    return template.render(
        title=title, generated=generated, style=STYLE, script=SCRIPT, csp_script=_CSP_SCRIPT, totals=totals,
        layouts=layouts, models=models, attention=attention, attention_states=ATTENTION_STATES,
        attention_models=sorted(set(row['model'] for row in attention if row['model'])),
        fragmentation_above=fragmentation_above, stranded_above=stranded_above, legend=_LEGEND,
        payload=fleet_payload(views)) + '\n'


# ---- playbooks/mig_report.yml: the records of a job, a slice's part, the parts merged ----------------

# A sliced job's part is published under this prefix and the slice's AWX job id: AWX merges the artifacts of a
# workflow's jobs key by key (awx/main/models/workflow.py, WorkflowJobNode.get_job_kwargs), so one key per slice
# keeps every part.
PART_PREFIX = 'mig_report_part_'


def mig_report_records(hosts, hostvars, plan_layout=None):
    """One map record per host of ``hosts`` that ran the report: {host, summary[, plan]} from the registered
    ``mig_report_host`` (nvidia_mig_facts with summary: true: its fact ``nvidia_mig_summary``), or {host, failed} from
    ``mig_report_failed``. The registered result, not the fact: a fact cache may hold the fact of a host this run did
    not read (another slice, a host left out by --limit)."""
    records = []
    # raw_get: the host's variables as they are. The results read here are plain data the modules returned, and
    # templating each host's (hostvars[host].get) walks every one of them again (ansible/vars/hostvars.py).
    raw = getattr(hostvars, 'raw_get', hostvars.__getitem__)
    for host in hosts:
        facts = raw(host)
        failed = facts.get('mig_report_failed')
        summary = ((facts.get('mig_report_host') or {}).get('ansible_facts') or {}).get('nvidia_mig_summary')
        if failed:
            records.append({'host': host, 'failed': str(failed)})
        elif isinstance(summary, dict):
            record = {'host': host, 'summary': summary}
            plan = facts.get('mig_report_plan')
            if plan_layout is not None and isinstance(plan, dict) and isinstance(plan.get('gpus'), list):
                record['plan'] = {'layout': plan_layout, 'gpus': plan['gpus']}
            records.append(record)
    return records


def _utc(moment):
    """A naive UTC datetime of ``now(utc=true)`` (naive, or aware in any zone)."""
    if not isinstance(moment, datetime.datetime):
        raise _error('now must be a datetime (now(utc=true)), got %r' % (moment,))
    if moment.tzinfo is not None:
        moment = moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return moment


def mig_report_cached_records(hosts, hostvars, now, max_age=86400):
    """One map record per host of ``hosts`` from the fact cache, contacting none: {host, summary, read_at, age[, stale]}
    from its cached ``nvidia_mig_summary`` (stale: older than ``max_age`` seconds at ``now``), or {host, failed} where
    the cache has no usable summary (planning/_gpu_summary.py, cached_record)."""
    now = _utc(now)
    max_age = _number(max_age, 'max_age', (int,))
    raw = getattr(hostvars, 'raw_get', hostvars.__getitem__)
    records = []
    for host in hosts:
        facts = raw(host)
        fact = facts.get('nvidia_mig_summary')
        if fact is None:
            fact = (facts.get('ansible_facts') or {}).get('nvidia_mig_summary')
        records.append(cached_record(host, fact, now, max_age))
    return records


def mig_report_lines(records):
    """{host: ['declared layout: <name or none>', a line per GPU]} (or the reason its facts could not be read)."""
    lines = {}
    for record in records:
        if 'summary' in record:
            summary = record['summary']
            lines[record['host']] = ['declared layout: %s' % (summary.get('layout') or 'none')] + list(summary.get('lines') or [])
            if 'read_at' in record:
                lines[record['host']].insert(0, record.get('stale') or 'facts read %s, %s ago (fact cache)' % (
                    record['read_at'], age_text(max(record.get('age') or 0, 0))))
        else:
            lines[record['host']] = ['facts not read: %s' % record.get('failed')]
    return lines


def mig_report_totals(records):
    """The report's summary line of ``records`` (its own hosts, or a sliced job's merged parts)."""
    totals = dict((key, 0) for key in ('gpus', 'mig_enabled', 'out_of_layout', 'instances', 'free_slices', 'stranded_slices'))
    layouts = set()
    for record in records:
        summary = record.get('summary') or {}
        for key in totals:
            totals[key] += int((summary.get('totals') or {}).get(key) or 0)
        if 'summary' in record:
            layouts.add(summary.get('layout') or 'none')
    line = ('%d host(s), %d GPU(s), %d with MIG enabled, %d not in their declared layout, %d GPU instance(s), %d free and '
            '%d stranded memory slice(s); layouts: %s' % (
                len(records), totals['gpus'], totals['mig_enabled'], totals['out_of_layout'], totals['instances'],
                totals['free_slices'], totals['stranded_slices'], ', '.join(sorted(layouts)) or '-'))
    ages = [record['age'] for record in records if 'read_at' in record]
    if any(record.get('source') == 'cache' for record in records):
        # A report from the fact cache: how old the facts are, how many are stale and how many hosts it lacks.
        line += '; from the fact cache: facts %s to %s old, %d host(s) with stale facts, %d without cached facts' % (
            age_text(max(min(ages), 0)) if ages else '-', age_text(max(ages + [0])) if ages else '-',
            len([record for record in records if record.get('stale')]), len([record for record in records if 'failed' in record]))
    return line


def mig_report_part(records, job_id):
    """What one slice of a sliced report publishes with set_stats: {mig_report_part_<job id>: records}."""
    return {'%s%s' % (PART_PREFIX, job_id): records}


def mig_report_merge(variables):
    """The records of every slice's part (the ``mig_report_part_<job id>`` variables AWX hands the next workflow
    node), in job order; a host reported by two parts (a relaunched slice) counts once, from the later job."""
    parts = []
    for name, records in variables.items():
        if name.startswith(PART_PREFIX) and name[len(PART_PREFIX):].isdigit():
            if not isinstance(records, list):
                raise _error('%s must be the list of host records a slice published, got %s' % (name, type(records).__name__))
            parts.append((int(name[len(PART_PREFIX):]), records))
    merged = {}
    for dummy, records in sorted(parts, key=lambda part: part[0]):
        for record in records:
            merged[record.get('host') if isinstance(record, dict) else None] = record
    return [merged[host] for host in sorted(merged, key=str)]


class FilterModule(object):
    """gpufleet.mig fleet map filters."""

    def filters(self):
        return {
            'mig_fleet_map': mig_fleet_map,
            'mig_report_records': mig_report_records,
            'mig_report_cached_records': mig_report_cached_records,
            'mig_report_lines': mig_report_lines,
            'mig_report_totals': mig_report_totals,
            'mig_report_part': mig_report_part,
            'mig_report_merge': mig_report_merge,
        }
