# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Which entry of a mig-parted v1 layout each GPU takes, as mig-parted chooses it.

Pure Python: no NVML, no Ansible imports. docs/mig_layout.md lists every rule with the mig-parted source
file it comes from.

- :func:`match_gpus`: the entries matching each GPU (``devices``, ``device-filter`` by PCI id), every one
  in order, the last winning.
- :func:`choose_entry`: the end of that choice for entries that depend on the GPU's memory slices
  (gpufleet extension), once MIG is enabled and NVML reports the profiles.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import LayoutConfigError, MEMORY_SLICES_KEY, UNMATCHED, _UINT32_MAX


# ---- PCI ids: pkg/types/device.go ------------------------------------------------------------

def _underscores_ok(text):
    """Go's rule for ``_`` in a base-0 integer literal: only between digits (or after the prefix)."""
    seen = '^'
    index = 0
    hexadecimal = False
    if len(text) >= 2 and text[0] == '0' and text[1].lower() in 'box':
        index = 2
        seen = '0'
        hexadecimal = text[1].lower() == 'x'
    for char in text[index:]:
        if char in '0123456789' or (hexadecimal and char.lower() in 'abcdef'):
            seen = '0'
        elif char == '_':
            if seen != '0':
                return False
            seen = '_'
        elif seen == '_':
            return False
        else:
            seen = '!'
    return seen != '_'


def _go_parse_uint32(text):
    """strconv.ParseUint(text, 0, 32): 0x/0o/0b prefixes, a leading 0 means octal, ``_`` separators."""
    if not text:
        return None
    digits = text
    base = 10
    if digits[0] == '0':
        prefix = digits[1:2].lower()
        if len(digits) >= 3 and prefix in ('b', 'o', 'x'):
            base = {'b': 2, 'o': 8, 'x': 16}[prefix]
            digits = digits[2:]
        else:
            base = 8
            digits = digits[1:]
    value = 0
    underscores = False
    for char in digits:
        if char == '_':
            underscores = True
            continue
        digit = '0123456789abcdef'.find(char.lower())
        if not 0 <= digit < base:
            return None
        value = value * base + digit
        if value > _UINT32_MAX:
            return None
    if underscores and not _underscores_ok(text):
        return None
    return value


def parse_device_id(text):
    """A device-filter string -> (device id, subsystem id or None) as 32-bit integers, or None.

    mig-parted ignores the parse error of a filter it cannot read: such a filter matches no GPU.
    """
    if not isinstance(text, str):
        return None
    parts = text.split(':')
    if len(parts) > 2:
        return None
    primary = _go_parse_uint32(parts[0])
    if primary is None:
        return None
    if len(parts) == 1:
        return primary, None
    subsystem = _go_parse_uint32(parts[1])
    if subsystem is None:
        return None
    return primary, subsystem


def _hex_id(value):
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and re.match(r'(0[xX])?[0-9a-fA-F]{1,8}\Z', value):
        return int(value, 16)
    return None


def _filter_matches(entry, pci_device_id, pci_subsystem_id):
    if not entry['device-filter']:
        return True
    device = _hex_id(pci_device_id)
    subsystem = _hex_id(pci_subsystem_id)
    for text in entry['device-filter']:
        parsed = parse_device_id(text)
        if parsed is None or parsed[0] != device:
            continue
        if parsed[1] is None or parsed[1] == subsystem:
            return True
    return False


def _devices_match(entry, index):
    return entry['devices'] == 'all' or index in entry['devices']


# ---- matching entries to GPUs: cmd/nvidia-mig-parted/{assert,apply} ---------------------------

def memory_slices_of(gpu):
    """The GPU's (_host_model.Gpu) memory slices, from the profiles NVML reports (None while they are unknown)."""
    ends = [p['start'] + p['size'] for profile in gpu.profiles for p in profile.get('placements') or []]
    ends.extend(profile.get('memory_slices') or 0 for profile in gpu.profiles)
    return max(ends) if ends and max(ends) else None


def _profiles_known(gpu):
    return gpu.profiles_known and bool(gpu.profiles)


def _label(gpu):
    ids = gpu.pci_device_id
    if gpu.pci_subsystem_id:
        ids = '%s:%s' % (ids, gpu.pci_subsystem_id)
    return 'GPU %s (%s, %s)' % (gpu.index, gpu.name, ids)


def _where(layout):
    return 'layout %s: ' % layout if layout is not None else ''


def _positions(positions):
    return ', '.join(str(p) for p in positions)


def _entries(positions, singular, plural):
    """'entry 0 passes' / 'entries 0, 2 pass': the positions with the verb that fits."""
    positions = list(positions)
    if len(positions) == 1:
        return 'entry %d %s' % (positions[0], singular)
    return 'entries %s %s' % (_positions(positions), plural)


def _no_match_reason(entries, gpu, memory_slices):
    """Why no entry matches a GPU, entry by entry (grouped)."""
    by_filter, by_devices, by_slices = [], [], []
    for position, entry in enumerate(entries):
        if not _filter_matches(entry, gpu.pci_device_id, gpu.pci_subsystem_id):
            by_filter.append(position)
        elif not _devices_match(entry, gpu.index):
            by_devices.append(position)
        else:
            by_slices.append(position)
    reasons = []
    if by_filter:
        reasons.append('the device-filter of %s %s%s' % (
            _entries(by_filter, 'does not name', 'do not name'), gpu.pci_device_id,
            ' (subsystem %s)' % gpu.pci_subsystem_id if gpu.pci_subsystem_id else ''))
    if by_devices:
        reasons.append('the devices of %s index %s' % (
            _entries(by_devices, 'do not include', 'do not include'), gpu.index))
    if by_slices:
        wanted = sorted(set(n for p in by_slices for n in entries[p][MEMORY_SLICES_KEY]))
        reasons.append('%s to GPUs with %s memory slices and this one %s' % (
            _entries(by_slices, 'applies', 'apply'), ' or '.join(str(n) for n in wanted),
            'has %d' % memory_slices if memory_slices else 'has no MIG'))
    return '; '.join(reasons) or 'the layout has no entry'


def gpu_models_text(gpus):
    """The models of ``gpus`` (match records, facts or :func:`known_gpus`, each with ``name`` and ``pci_device_id``),
    each once with its count: ``NVIDIA A100-SXM4-80GB 0x20B210DE x2, NVIDIA H100 80GB HBM3 0x233010DE``."""
    counts = {}
    for gpu in gpus:
        model = ' '.join(str(part) for part in (gpu.get('name'), gpu.get('pci_device_id')) if part) or 'unknown model'
        counts[model] = counts.get(model, 0) + 1
    return ', '.join('%s%s' % (model, ' x%d' % count if count > 1 else '') for model, count in sorted(counts.items()))


def device_filters_text(entries):
    """Each entry's device-filter (``any`` when it has none), with its devices when they are not ``all``."""
    parts = []
    for position, entry in enumerate(entries):
        text = '/'.join(entry['device-filter']) or 'any'
        if entry['devices'] != 'all':
            text += ' devices %s' % ','.join(str(index) for index in entry['devices'])
        parts.append('entry %d %s' % (position, text))
    return ', '.join(parts) or 'no entry'


class NothingMatchedError(LayoutConfigError):
    """The refusal of a host where the layout matches none of its MIG-capable GPUs (:func:`nothing_matched`'s line).
    ``unmatched_gpus``: those GPUs as :func:`match_gpus` reports them; the module returns them with the refusal, so
    that the rollout's pre-flight knows the GPUs of a host its first decision refused (the no-GPU-matched check)."""

    def __init__(self, message, unmatched_gpus):
        super(NothingMatchedError, self).__init__(message)
        self.unmatched_gpus = unmatched_gpus


def nothing_matched(matched, entries, layout):
    """The one line refusing a host where ``layout`` matches none of its MIG-capable GPUs (:func:`match_gpus`'s
    ``matched``), or None. Declared there it would apply nowhere and still replace the host's declared layout, so
    the host is refused before any change; ``unmatched: ignore`` (mig-parted's meaning) still leaves alone the GPUs
    an entry misses on a host where others match. A host without MIG-capable GPUs is not refused: nothing is
    unmatched there."""
    if matched['gpus'] or not matched['unmatched']:
        return None
    return ('layout %s matches none of the MIG-capable GPUs of this host (%s; device-filters: %s): nothing was '
            'declared or changed; add an entry for these GPUs or give this host another layout'
            % (layout, gpu_models_text(matched['unmatched']), device_filters_text(entries)))


def known_gpus(decision):
    """The MIG-capable GPUs of a host as its decision (nvidia_mig_layout, any layout) or its ``nvidia_mig`` facts
    (nvidia_mig_facts) reported them, for :func:`may_match_any`: {'index', 'name', 'pci_device_id',
    'pci_subsystem_id', 'memory_slices'}; what the source does not tell (the subsystem id, the memory slices of a GPU
    whose MIG is off) is None."""
    found = []
    for gpu in (decision or {}).get('gpus') or []:
        if gpu.get('mig_capable') is False:     # facts list every GPU; a decision only the matched ones
            continue
        slices = (gpu.get('free_space_after') or {}).get('total_slices') or gpu.get('memory_slices')
        found.append({'index': gpu.get('index'), 'name': gpu.get('name'), 'pci_device_id': gpu.get('pci_device_id'),
                      'pci_subsystem_id': gpu.get('pci_subsystem_id'), 'memory_slices': slices})
    for gpu in (decision or {}).get('unmatched_gpus') or []:
        found.append({'index': gpu.get('index'), 'name': gpu.get('name'), 'pci_device_id': gpu.get('pci_device_id'),
                      'pci_subsystem_id': gpu.get('pci_subsystem_id'), 'memory_slices': None})
    return sorted(found, key=lambda gpu: gpu['index'])


def quiet_failure(result):
    """A failed nvidia_mig_layout result kept quiet with ``failed_when: false`` (which clears ``failed``): the
    rollout's first decision. A decision that succeeded always carries ``in_layout``, a failure never."""
    return isinstance(result, dict) and 'failed_when_result' in result and 'in_layout' not in result


def decision_gpus(decision):
    """:func:`known_gpus` of a registered nvidia_mig_layout result, or None where it told no GPUs: a decision that
    succeeded tells them, and so does the refusal of a host where the layout matches none of its MIG-capable GPUs
    (:class:`NothingMatchedError`, whose result carries ``unmatched_gpus``); a skipped or unreachable result, or one
    that failed for another reason, tells nothing."""
    if not isinstance(decision, dict) or decision.get('skipped') or decision.get('unreachable'):
        return None
    if (decision.get('failed') or quiet_failure(decision)) and 'unmatched_gpus' not in decision:
        return None
    return known_gpus(decision)


def may_match_any(entries, gpus):
    """Whether an entry of a layout may match one of ``gpus`` (:func:`known_gpus`).

    Only a sure "no" counts: a device-filter with a subsystem id the record lacks, or memory slices not
    known yet, may match.
    """
    for gpu in gpus:
        for entry in entries:
            if not _devices_match(entry, gpu['index']):
                continue
            if gpu.get('pci_subsystem_id') is None and any(
                    (parse_device_id(text) or (None, None))[1] is not None for text in entry['device-filter']):
                return True
            if not _filter_matches(entry, gpu.get('pci_device_id'), gpu.get('pci_subsystem_id')):
                continue
            wanted = entry.get(MEMORY_SLICES_KEY)
            if wanted is None or gpu.get('memory_slices') is None or gpu['memory_slices'] in wanted:
                return True
    return False


def _candidate(position, entry):
    return {'entry': position, 'memory_slices': entry.get(MEMORY_SLICES_KEY),
            'mig_devices': dict(entry['mig-devices'])}


def _record(gpu, entries, chosen, mig_enabled, memory_slices, candidates=None):
    """One matched GPU. ``chosen``: positions that match it for sure; the last one wins."""
    pending = bool(candidates)
    return {
        'index': gpu.index,
        'uuid': gpu.uuid,
        'name': gpu.name,
        'pci_device_id': gpu.pci_device_id,
        'pci_subsystem_id': gpu.pci_subsystem_id,
        'entries': list(chosen),
        'entry': None if pending else chosen[-1],
        'mig_enabled': mig_enabled,
        'mig_devices': None if pending else dict(entries[chosen[-1]]['mig-devices']),
        'memory_slices': memory_slices,
        'pending': pending,
        'candidates': candidates or [],
    }


def match_gpus(entries, gpus, unmatched='ignore', layout=None):
    """Match the entries of one layout to the GPUs of one host, as mig-parted does.

    ``entries``: the normalised entries (:func:`check_layout`); ``gpus``: the host's GPUs (_host_model.Gpu).
    Every entry whose device-filter and devices match a GPU applies to it, in order: they must
    agree on mig-enabled and the last one's mig-devices win. Returns::

        {'gpus': [{'index', 'uuid', 'name', 'pci_device_id', 'pci_subsystem_id',
                   'entries': [positions that match],
                   'entry': the winning position (None while pending),
                   'mig_enabled': bool,
                   'mig_devices': the winning entry's {key: count or 'max'} (None while pending),
                   'memory_slices': the GPU's memory slices (None while its profiles are unknown),
                   'pending': bool, 'candidates': [{'entry', 'memory_slices', 'mig_devices'}, ...]}],
         'unmatched': [{'index', 'uuid', 'name', 'pci_device_id', 'reason'}],
         'skipped': [{'index', 'name', 'reason'}]}

    ``pending`` is true when the winner depends on gpufleet-memory-slices and the GPU's profiles
    are not known yet (MIG disabled): MIG is to be enabled, then :func:`choose_entry` picks the
    winner among ``candidates`` (entries in order; ``memory_slices`` None = any GPU).

    Raises LayoutConfigError when entries matching one GPU disagree on mig-enabled (mig-parted
    changes the mode, then fails), when an entry names a GPU without MIG in ``devices`` with
    mig-enabled true (mig-parted: "cannot set MIG mode on non MIG-capable GPU"), and, with
    ``unmatched='fail'``, when a MIG-capable GPU is matched by no entry. With
    ``unmatched='ignore'`` (mig-parted's behaviour) such a GPU is left as it is and reported.
    GPUs without MIG are skipped: entries with ``devices: all`` or mig-enabled false pass over them.
    """
    if unmatched not in UNMATCHED:
        raise LayoutConfigError('unmatched must be one of %s, got %r' % (', '.join(UNMATCHED), unmatched))
    where = _where(layout)
    result = {'gpus': [], 'unmatched': [], 'skipped': []}
    for gpu in sorted(gpus, key=lambda g: g.index):
        label = _label(gpu)
        capable = gpu.mig_capable
        known = capable and _profiles_known(gpu)
        memory_slices = memory_slices_of(gpu) if known else None
        sure, maybe = [], []
        for position, entry in enumerate(entries):
            if not (_filter_matches(entry, gpu.pci_device_id, gpu.pci_subsystem_id) and _devices_match(entry, gpu.index)):
                continue
            wanted_slices = entry.get(MEMORY_SLICES_KEY)
            if wanted_slices is None:
                sure.append(position)
            elif not capable or (known and memory_slices not in wanted_slices):
                continue
            elif known:
                sure.append(position)
            else:
                maybe.append(position)
        if not capable:
            result['skipped'].append(_skip_non_mig(where, label, gpu, entries, sure))
            continue
        if not sure and not maybe:
            reason = 'matched by no entry: %s' % _no_match_reason(entries, gpu, memory_slices)
            if unmatched == 'fail':
                raise LayoutConfigError('%s%s is %s' % (where, label, reason))
            result['unmatched'].append({'index': gpu.index, 'uuid': gpu.uuid, 'name': gpu.name,
                                        'pci_device_id': gpu.pci_device_id, 'reason': reason})
            continue
        positions = sorted(sure + maybe)
        modes = dict((p, entries[p]['mig-enabled']) for p in positions)
        if len(set(modes.values())) > 1:
            raise LayoutConfigError(_disagreement(where, label, modes, maybe, entries))
        mig_enabled = modes[positions[0]]
        if maybe and positions[-1] in maybe:
            candidates = [_candidate(p, entries[p]) for p in positions]
            result['gpus'].append(_record(gpu, entries, sure, mig_enabled, None, candidates))
        else:
            result['gpus'].append(_record(gpu, entries, sure, mig_enabled, memory_slices))
    return result


def _skip_non_mig(where, label, gpu, entries, positions):
    asks_mig = [p for p in positions if entries[p]['devices'] != 'all' and entries[p]['mig-enabled']]
    if asks_mig:
        raise LayoutConfigError('%sentry %d: %s: cannot set MIG mode on non MIG-capable GPU (the entry names it in '
                                'devices with mig-enabled: true)' % (where, asks_mig[0], label))
    if positions:
        reason = 'not MIG-capable; %s over it (devices: all or mig-enabled: false)' % (
            _entries(positions, 'passes', 'pass'))
    else:
        reason = 'not MIG-capable; no entry matches it'
    return {'index': gpu.index, 'name': gpu.name, 'reason': reason}


def _disagreement(where, label, modes, maybe, entries):
    described = ', '.join('%d (mig-enabled: %s%s)' % (
        p, 'true' if modes[p] else 'false',
        ', if it has %s memory slices' % ' or '.join(str(n) for n in entries[p][MEMORY_SLICES_KEY]) if p in maybe else '')
        for p in sorted(modes))
    message = ('%s%s is matched by entries %s: mig-parted would change the MIG mode entry by entry, then fail; '
               'give each GPU one mig-enabled value' % (where, label, described))
    if maybe:
        message += ' (its memory slices are known only once MIG is enabled, so those entries count as matching)'
    return message


def choose_entry(candidate, gpu, unmatched='ignore', layout=None):
    """Finish the choice of a pending match (:func:`match_gpus`) now that MIG is enabled.

    ``candidate``: one record of ``match_gpus(...)['gpus']``; ``gpu``: the same GPU read again,
    with its profiles. Returns a new record with ``pending`` false: ``entries``, ``entry``,
    ``mig_devices`` and ``memory_slices`` filled in (a record that was not pending comes back as
    it is). When no candidate fits the GPU's memory slices, ``entry`` and ``mig_devices`` stay
    None and ``unmatched`` gives the reason (its instances are to be left as they are), or, with
    ``unmatched='fail'``, LayoutConfigError is raised. Raises LayoutConfigError while the GPU's
    profiles are still unknown.
    """
    if unmatched not in UNMATCHED:
        raise LayoutConfigError('unmatched must be one of %s, got %r' % (', '.join(UNMATCHED), unmatched))
    record = dict(candidate)
    if not candidate.get('pending'):
        return record
    where = _where(layout)
    label = _label(gpu)
    if not (gpu.mig_capable and _profiles_known(gpu)):
        raise LayoutConfigError('%s%s: the entry to apply depends on its memory slices, which NVML reports only once '
                                'MIG is enabled (no profiles read yet)' % (where, label))
    memory_slices = memory_slices_of(gpu)
    fitting = [c for c in candidate['candidates'] if c['memory_slices'] is None or memory_slices in c['memory_slices']]
    record.update({'pending': False, 'candidates': [], 'memory_slices': memory_slices})
    if not fitting:
        wanted = sorted(set(n for c in candidate['candidates'] for n in c['memory_slices']))
        reason = 'matched by no entry: %s to GPUs with %s memory slices and this one has %d' % (
            _entries((c['entry'] for c in candidate['candidates']), 'applies', 'apply'),
            ' or '.join(str(n) for n in wanted), memory_slices)
        if unmatched == 'fail':
            raise LayoutConfigError('%s%s is %s' % (where, label, reason))
        record.update({'entries': [], 'entry': None, 'mig_devices': None, 'unmatched': reason})
        return record
    record.update({'entries': [c['entry'] for c in fitting], 'entry': fitting[-1]['entry'],
                   'mig_devices': dict(fitting[-1]['mig_devices'])})
    return record
