# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Prometheus textfile-collector output for the MIG layout of one host.

Pure Python: no NVML, no Ansible imports. Input is the backend's ``read_host()`` (_host_model.Host), whether
each GPU holds the declared layout, which pods hold its instances, the last apply record and the
stranded slice-seconds so far. Written atomically (temp + rename). The metrics and alert rules
are documented in docs/metrics.md.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_files import write_atomically
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import ENABLED, HostHolders
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import free_space


_HELP = (
    ('gpufleet_mig_mode_enabled', 'gauge', 'MIG mode currently enabled (1) or not (0).'),
    ('gpufleet_mig_mode_pending_enabled', 'gauge', 'MIG mode pending after the next GPU reset or reboot.'),
    ('gpufleet_mig_gpu_instances', 'gauge', 'GPU instances by profile.'),
    ('gpufleet_mig_busy_instances', 'gauge', 'GPU instances with running processes.'),
    ('gpufleet_mig_free_slices', 'gauge', 'Memory slices no GPU instance covers.'),
    ('gpufleet_mig_stranded_slices', 'gauge',
     'Free memory slices unusable as the instances are placed that the best rearrangement of them would make usable.'),
    ('gpufleet_mig_largest_placeable_slices', 'gauge', 'Memory slices of the largest profile that still fits (0: none).'),
    ('gpufleet_mig_largest_placeable_info', 'gauge', 'The largest profile that still fits, as a label.'),
    ('gpufleet_mig_placeable_instances', 'gauge',
     'How many more GPU instances of the profile alone still fit, honouring the placements (one sample per profile).'),
    ('gpufleet_mig_fragmentation_ratio', 'gauge',
     '1 - largest placeable slices / largest placeable slices after the best rearrangement of the instances.'),
    ('gpufleet_mig_stranded_slice_seconds_total', 'counter',
     'Stranded memory slices integrated over time (slice-seconds), for stranded capacity summed over a day.'),
    ('gpufleet_mig_instance_info', 'gauge',
     'One sample per GPU instance: profile, placement (start, size in memory slices), busy, and the pods holding it.'),
    ('gpufleet_mig_gpu_in_layout', 'gauge', 'The GPU matches the declared layout (1) or not (0).'),
    ('gpufleet_mig_gpu_unmatched', 'gauge', 'No entry of the declared layout matches the GPU: it is left as it is.'),
    ('gpufleet_mig_layout_info', 'gauge', 'The declared layout of this host, as a label.'),
    ('gpufleet_mig_layout_last_apply_success', 'gauge', 'Whether the last apply of the layout succeeded.'),
    ('gpufleet_mig_layout_last_apply_timestamp_seconds', 'gauge', 'Unix time of the last apply of the layout.'),
    ('gpufleet_mig_boot_persistence_success', 'gauge',
     'Whether the last apply that enabled the boot unit through systemctl succeeded at it (the GPUs: last_apply_success).'),
)


def _escape(value):
    return str(value).replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def _labels(**labels):
    return '{%s}' % ','.join('%s="%s"' % (key, _escape(labels[key])) for key in sorted(labels))


def stranded_figures(host):
    """{GPU uuid: stranded slices now}, for the GPUs whose profiles are known (MIG enabled)."""
    return dict((gpu.uuid, free_space(gpu)['stranded_slices']) for gpu in host.gpus if gpu.mig_capable and gpu.profiles)


def accumulate_stranded(path, stranded, now):
    """Add the stranded slice-seconds since the last refresh to the totals kept in ``path``; returns the totals.

    Each GPU's previous stranded count is taken to have lasted until ``now`` (the refreshes come every
    minute from the timer, and at every module run). A GPU seen for the first time starts at 0.
    """
    try:
        with open(path) as handle:
            kept = json.load(handle)
    except (IOError, OSError, ValueError):
        kept = {}
    totals = {}
    for uuid, slices in stranded.items():
        previous = kept.get(uuid) or {}
        total = float(previous.get('total', 0.0))
        if 'at' in previous and now > previous['at']:
            total += previous.get('stranded', 0) * (now - previous['at'])
        kept[uuid] = {'total': total, 'stranded': slices, 'at': now}
        totals[uuid] = total
    write_atomically(path, json.dumps(kept, sort_keys=True) + '\n')
    return totals


def render(host, layout_name, in_layout_by_uuid, last_apply, holders=None, stranded_totals=None, persistence=None):
    """The textfile content: one block per metric, one sample per GPU (and profile, or instance).

    ``in_layout_by_uuid``: {GPU uuid: whether it holds the declared layout, None when no entry
    matches it} (from _layout_converge). ``holders``: the pods that hold each GPU (_host_model.HostHolders,
    from _pod_allocations.allocations_of). ``stranded_totals``: {GPU uuid: slice-seconds} (accumulate_stranded).
    ``persistence``: the record of the boot persistence (_host_record.read_persistence), apart from ``last_apply``.
    Free-space figures need the profiles, which NVML describes only while MIG is enabled.
    """
    holders = holders or HostHolders()
    stranded_totals = stranded_totals or {}
    samples = dict((name, []) for name, dummy, dummy2 in _HELP)
    for gpu in host.gpus:
        if not gpu.mig_capable:
            continue
        base = dict(gpu=gpu.index, uuid=gpu.uuid, model=gpu.name)
        samples['gpufleet_mig_mode_enabled'].append((base, int(gpu.mig_mode.current == ENABLED)))
        samples['gpufleet_mig_mode_pending_enabled'].append((base, int(gpu.mig_mode.pending == ENABLED)))
        if in_layout_by_uuid.get(gpu.uuid) is not None:
            samples['gpufleet_mig_gpu_in_layout'].append((base, int(in_layout_by_uuid[gpu.uuid])))
        elif gpu.uuid in in_layout_by_uuid:
            samples['gpufleet_mig_gpu_unmatched'].append((base, 1))
        gpu_holders = holders.of(gpu.uuid)
        for gi in gpu.gpu_instances:
            samples['gpufleet_mig_instance_info'].append((dict(
                base, gpu_instance=gi.id, profile=gi.profile, start=gi.placement.start, size=gi.placement.size,
                busy=str(gi.busy).lower(), pods=','.join(gpu_holders.of_instance(gi.id))), 1))
        if gpu.uuid in stranded_totals:
            samples['gpufleet_mig_stranded_slice_seconds_total'].append((base, round(stranded_totals[gpu.uuid], 3)))
        if not gpu.profiles:
            continue
        figures = free_space(gpu)
        by_profile = dict((p['name'], 0) for p in gpu.profiles)
        for gi in gpu.gpu_instances:
            by_profile[gi.profile] = by_profile.get(gi.profile, 0) + 1
        for profile in sorted(by_profile):
            samples['gpufleet_mig_gpu_instances'].append((dict(base, profile=profile), by_profile[profile]))
        samples['gpufleet_mig_busy_instances'].append((base, sum(1 for gi in gpu.gpu_instances if gi.busy)))
        samples['gpufleet_mig_free_slices'].append((base, figures['free_slices']))
        samples['gpufleet_mig_stranded_slices'].append((base, figures['stranded_slices']))
        samples['gpufleet_mig_largest_placeable_slices'].append((base, figures['largest_placeable_slices']))
        samples['gpufleet_mig_largest_placeable_info'].append(
            (dict(base, profile=figures['largest_placeable'] or 'none'), 1))
        for profile in sorted(figures['placeable']):
            samples['gpufleet_mig_placeable_instances'].append((dict(base, profile=profile), figures['placeable'][profile]))
        samples['gpufleet_mig_fragmentation_ratio'].append((base, figures['fragmentation']))
    if layout_name:
        samples['gpufleet_mig_layout_info'].append(({'layout': layout_name}, 1))
    if last_apply:
        labels = {'layout': last_apply.get('layout', ''), 'source': last_apply.get('source', '')}
        samples['gpufleet_mig_layout_last_apply_success'].append((labels, int(last_apply.get('result') == 'success')))
        samples['gpufleet_mig_layout_last_apply_timestamp_seconds'].append((labels, int(last_apply.get('timestamp', 0))))
    if persistence:
        samples['gpufleet_mig_boot_persistence_success'].append(
            ({'layout': persistence.get('layout', '')}, int(persistence.get('result') == 'success')))
    lines = []
    for name, kind, text in _HELP:
        if not samples[name]:
            continue
        lines.append('# HELP %s %s' % (name, text))
        lines.append('# TYPE %s %s' % (name, kind))
        for labels, value in samples[name]:
            lines.append('%s%s %s' % (name, _labels(**labels), value))
    return '\n'.join(lines) + '\n'
