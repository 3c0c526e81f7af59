# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Named MIG layouts in NVIDIA mig-parted's v1 format, read and matched as mig-parted does.

Pure Python: no NVML, no Ansible imports. docs/mig_layout.md lists every rule with the
mig-parted source file it comes from. In short:

- :func:`validate_document` / :func:`validate_configs`: a whole file is refused only for what
  mig-parted refuses when it loads one (api/spec/v1/spec.go); the result is normalised.
- :func:`check_layout`: the layout being applied, strictly (profile names no GPU can have);
  :func:`layout_problems` reports the same for the other layouts without failing.
- :func:`match_gpus`: the entries matching each GPU, every one in order, the last winning.
- :func:`choose_entry`: the end of that choice for entries that depend on the GPU's memory
  slices (gpufleet extension), once MIG is enabled and NVML reports the profiles.
- :func:`concrete_instances`: a winning entry's ``mig-devices`` as the profiles of one GPU.

gpufleet extensions (a file without them is read exactly as mig-parted reads it): model-agnostic
``mig-devices`` keys (``1g``, ``1g.2mem``, ``1c.3g``, ``2g+gfx``, see _mig_profile), the count
``max``, and the entry key ``gpufleet-memory-slices``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import re

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError, expand_layout
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import (
    MigProfile,
    MigShape,
    ProfileError,
    check_format,
    compute_instance_name,
    parse_key,
)

VERSION = 'v1'
DOCUMENT_KEYS = ('version', 'mig-configs')
MEMORY_SLICES_KEY = 'gpufleet-memory-slices'
ENTRY_KEYS = ('device-filter', 'devices', 'mig-enabled', 'mig-devices', MEMORY_SLICES_KEY)
MAX_COUNT = 'max'
UNMATCHED = ('ignore', 'fail')
_UINT32_MAX = 0xFFFFFFFF
# The most compute slices a GPU of any MIG model has (7 on the 8-memory-slice GPUs, A100 to B300,
# 4 on A30 and RTX PRO 6000: /work reference mig-geometry.md, NVIDIA's MIG User Guide, supported profiles).
MAX_COMPUTE_SLICES = 7
_PROFILE_HINT = 'a MIG profile such as 1g.10gb or 1c.3g.40gb, or a model-agnostic shape such as 1g or 1c.3g'


class LayoutConfigError(GpufleetError, ValueError):
    """A mig-parted config that cannot be used; the message says where and why."""


# ---- loading a file: mig-parted's rules (api/spec/v1/spec.go) ------------------------------

def _key_text(key):
    """A YAML mapping key as mig-parted sees it: sigs.k8s.io/yaml turns every key into a string."""
    if isinstance(key, bool):
        return 'true' if key else 'false'
    if isinstance(key, int):
        return str(key)
    if isinstance(key, float):
        return repr(key)
    if isinstance(key, str):
        return key
    raise LayoutConfigError('unsupported mapping key %r (%s)' % (key, type(key).__name__))


def _text_keys(where, mapping):
    result = {}
    for key, value in mapping.items():
        text = _key_text(key)
        if text in result:
            raise LayoutConfigError('%s: key %r appears twice (once as %r)' % (where, text, key))
        result[text] = value
    return result


def _whole_number(value):
    """An integer as encoding/json accepts it after sigs.k8s.io/yaml (2.0 is 2); None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def validate_document(document):
    """A whole mig-parted file (``version: v1`` + ``mig-configs``) -> the normalised configs.

    An empty file is valid and defines no layout (as for mig-parted, which then fails to select one).
    """
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise LayoutConfigError('a mig-parted config file must be a mapping with version and mig-configs, got %s'
                                % type(document).__name__)
    document = _text_keys('the mig-parted config', document)
    if 'version' not in document and document:
        raise LayoutConfigError("the mig-parted config has no 'version' field (version: v1)")
    version = document.get('version')
    if version is not None and not isinstance(version, str):
        raise LayoutConfigError('the mig-parted config version must be a string, got %r' % (version,))
    if version != VERSION:
        raise LayoutConfigError('unsupported mig-parted config version %r: only v1 is supported' % (version or '',))
    unknown = sorted(set(document) - set(DOCUMENT_KEYS))
    if unknown:
        raise LayoutConfigError('unknown top-level key(s) %s in the mig-parted config (allowed: %s)'
                                % (', '.join(unknown), ', '.join(DOCUMENT_KEYS)))
    if 'mig-configs' not in document:
        return {}
    return validate_configs(document['mig-configs'])


def validate_configs(configs):
    """The ``mig-configs`` mapping -> a normalised copy; raises LayoutConfigError on the first problem.

    Only what mig-parted refuses when it loads a file is an error here (and malformed gpufleet
    extensions). Profile names that no GPU can have pass: :func:`check_layout` refuses them in the
    layout being applied, :func:`layout_problems` reports them in the others.
    """
    if configs is None or (isinstance(configs, dict) and not configs):
        raise LayoutConfigError("at least one entry in 'mig-configs' is required")
    if not isinstance(configs, dict):
        raise LayoutConfigError('mig-configs must be a mapping of layout name to a list of entries, got %s'
                                % type(configs).__name__)
    result = {}
    for name, entries in sorted(_text_keys('mig-configs', configs).items()):
        if entries is None or entries == []:
            raise LayoutConfigError("layout %s: at least one entry in '%s' is required" % (name, name))
        if not isinstance(entries, list):
            raise LayoutConfigError('layout %s: must be a list of entries, got %s' % (name, type(entries).__name__))
        result[name] = [_validate_entry('layout %s entry %d' % (name, position), entry)
                        for position, entry in enumerate(entries)]
    return result


def _validate_entry(where, entry):
    if entry is None:
        raise LayoutConfigError('%s: missing required field: devices' % where)
    if not isinstance(entry, dict):
        raise LayoutConfigError('%s: must be a mapping, got %s' % (where, type(entry).__name__))
    entry = _text_keys(where, entry)
    for key in ('devices', 'mig-enabled'):
        if key not in entry:
            raise LayoutConfigError('%s: missing required field: %s' % (where, key))
    unknown = sorted(set(entry) - set(ENTRY_KEYS))
    if unknown:
        raise LayoutConfigError('%s: unknown key(s) %s (mig-parted allows device-filter, devices, mig-enabled, '
                                'mig-devices; gpufleet adds %s)' % (where, ', '.join(unknown), MEMORY_SLICES_KEY))
    result = {
        'devices': _devices(where, entry['devices']),
        'device-filter': _device_filter(where, entry.get('device-filter')),
        'mig-enabled': _mig_enabled(where, entry['mig-enabled']),
    }
    present = 'mig-devices' in entry and entry['mig-devices'] is not None
    mig_devices = _mig_devices(where, entry['mig-devices']) if present else {}
    if result['mig-enabled'] and not present:
        raise LayoutConfigError("%s: missing required field 'mig-devices' when 'mig-enabled' is true "
                                "(write mig-devices: {} for MIG on without instances)" % where)
    if not result['mig-enabled'] and present and entry['mig-devices']:
        raise LayoutConfigError("%s: MIG devices included when 'mig-enabled' is false" % where)
    # Zero counts change nothing (mig-parted skips them when it creates instances).
    result['mig-devices'] = dict((k, v) for k, v in mig_devices.items() if v)
    if MEMORY_SLICES_KEY in entry:
        result[MEMORY_SLICES_KEY] = _memory_slices(where, entry[MEMORY_SLICES_KEY])
        if not result['mig-enabled']:
            raise LayoutConfigError('%s: %s needs mig-enabled: true (a GPU reports its memory slices only once MIG '
                                    'is enabled, so MIG off cannot depend on them)' % (where, MEMORY_SLICES_KEY))
    return result


def _devices(where, value):
    if value == 'all':
        return 'all'
    if isinstance(value, list):
        numbers = [_whole_number(item) for item in value]
        if all(number is not None for number in numbers):
            return numbers
    if isinstance(value, str) or value is None:
        raise LayoutConfigError("%s: invalid string input for 'devices': %r (\"all\" or a list of GPU indices)"
                                % (where, value if value is not None else ''))
    raise LayoutConfigError('%s: devices must be "all" or a list of GPU indices, got %r' % (where, value))


def _device_filter(where, value):
    """A string (``""`` and null match every GPU) or a list of strings."""
    if value is None or value == '':
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) or item is None for item in value):
        # encoding/json leaves a null list element as ""
        return ['' if item is None else item for item in value]
    numbers = [v for v in (value if isinstance(value, list) else [value]) if _whole_number(v) is not None]
    hint = ''
    if numbers:
        hint = (': YAML reads an unquoted 0x... as a number (%s is 0x%08X); quote each id, e.g. "0x%08X"'
                % (numbers[0], numbers[0] & _UINT32_MAX, numbers[0] & _UINT32_MAX))
    raise LayoutConfigError('%s: device-filter must be a string or a list of strings, got %r%s' % (where, value, hint))


def _mig_enabled(where, value):
    if value is None:
        return False  # encoding/json leaves a bool untouched for null
    if not isinstance(value, bool):
        raise LayoutConfigError('%s: mig-enabled must be true or false, got %r' % (where, value))
    return value


def _mig_devices(where, value):
    if not isinstance(value, dict):
        raise LayoutConfigError('%s: mig-devices must be a mapping of MIG profile to count, got %r' % (where, value))
    result = {}
    fill = []
    for key, count in sorted(_text_keys(where + ' mig-devices', value).items()):
        if not MigShape.looks_like(key):
            try:
                check_format(key)
            except ProfileError as exc:
                raise LayoutConfigError(profile_typo(where, key, 'invalid format for %r: %s' % (key, exc)))
        result[key] = _count(where, key, count)
        if result[key] == MAX_COUNT:
            fill.append(key)
    if len(fill) > 1:
        raise LayoutConfigError('%s: count max may be given to one key only, got %s' % (where, ', '.join(fill)))
    if result and not fill and not any(result.values()):
        raise LayoutConfigError("%s: error validating values in 'mig-devices' field: all counts for all "
                                "MigProfiles are 0" % where)
    return result


def _count(where, key, count):
    if count is None:
        return 0  # encoding/json leaves an int untouched for null
    if count == MAX_COUNT:
        return MAX_COUNT
    number = _whole_number(count)
    if number is None:
        raise LayoutConfigError('%s: count for %s must be a whole number or max, got %r' % (where, key, count))
    if number < 0:
        raise LayoutConfigError("%s: error validating values in 'mig-devices' field: invalid count for %r: %d"
                                % (where, key, number))
    return number


def _memory_slices(where, value):
    values = value if isinstance(value, list) else [value]
    numbers = [_whole_number(v) for v in values]
    if not values or any(n is None or n < 1 for n in numbers):
        raise LayoutConfigError('%s: %s must be a number of memory slices (such as 8) or a list of them, got %r'
                                % (where, MEMORY_SLICES_KEY, value))
    return sorted(set(numbers))


# ---- the layout being applied: strictly ------------------------------------------------------

def profile_typo(where, key, reason):
    """The one message of a ``mig-devices`` key that is not a profile name, whoever reads it (role, module, file load)."""
    return "%s: mig-devices key %s is not a MIG profile: %s (%s)" % (where, key, reason, _PROFILE_HINT)


def _key_problem(key):
    """Why a ``mig-devices`` key can match no GPU's profile, or None."""
    try:
        parse_key(key)
    except ProfileError as exc:
        return str(exc)
    return None


def _compute_slices_problem(where, mig_devices):
    """Why the GPU instances of one entry fit no GPU of any model (more compute slices than any has), or None.

    Compute-instance keys (``1c.3g``) and the count ``max`` are left out: a necessary condition only.
    """
    asked = []
    for key in sorted(mig_devices):
        count = mig_devices[key]
        try:
            parsed = parse_key(key)
        except ProfileError:
            continue
        if count == MAX_COUNT or parsed.is_compute_instance_profile:
            continue
        asked.append((key, count, parsed.gpu_slices * count))
    total = sum(slices for dummy, dummy, slices in asked)
    if total <= MAX_COMPUTE_SLICES:
        return None
    return ('%s: mig-devices %s need %d compute slices, more than any MIG GPU has (%d): no GPU of any model fits it'
            % (where, ' + '.join('%s x%d' % (key, count) for key, count, dummy in asked), total, MAX_COMPUTE_SLICES))


def _problems_of(name, entries):
    problems = []
    for position, entry in enumerate(entries):
        where = 'layout %s entry %d' % (name, position)
        for key in sorted(entry['mig-devices']):
            problem = _key_problem(key)
            if problem:
                problems.append(profile_typo(where, key, problem))
        slices = _compute_slices_problem(where, entry['mig-devices'])
        if slices:
            problems.append(slices)
    return problems


def unknown_layout(name, names):
    """The one-line message of a layout name that is not defined: the closest defined name first."""
    names = sorted(names)
    close = difflib.get_close_matches(str(name), names, n=1, cutoff=0.6)
    return 'layout %r is not defined%s (defined: %s)' % (
        name, '; did you mean %s?' % close[0] if close else '', ', '.join(names) or 'none')


def check_layout(configs, name):
    """The entries of layout ``name``, checked strictly; an unknown name names the closest defined one.

    Refused here, though mig-parted loads them: ``mig-devices`` keys that no GPU can offer
    (``0g.0gb``, ``2c.1g.10gb``, ``1g.5gb+foo``), which mig-parted refuses only on the GPUs the
    entry matches, after it changed the MIG mode, and GPU instances that need more compute slices
    than a GPU of any model has (``3g: 3``).
    """
    if name not in configs:
        raise LayoutConfigError(unknown_layout(name, configs))
    problems = _problems_of(name, configs[name])
    if problems:
        raise LayoutConfigError('; '.join(problems))
    return configs[name]


def layout_problems(configs, skip=None):
    """{layout name: [problem, ...]} for every layout but ``skip`` that :func:`check_layout` would refuse."""
    result = {}
    for name in sorted(configs):
        if name == skip:
            continue
        problems = _problems_of(name, configs[name])
        if problems:
            result[name] = problems
    return result


def select(configs, name):
    """Alias of :func:`check_layout`."""
    return check_layout(configs, name)


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


def _filter_matches(entry, gpu):
    if not entry['device-filter']:
        return True
    device = _hex_id(gpu.get('pci_device_id'))
    subsystem = _hex_id(gpu.get('pci_subsystem_id'))
    for text in entry['device-filter']:
        parsed = parse_device_id(text)
        if parsed is None or parsed[0] != device:
            continue
        if parsed[1] is None or parsed[1] == subsystem:
            return True
    return False


def _devices_match(entry, gpu):
    return entry['devices'] == 'all' or gpu['index'] in entry['devices']


# ---- matching entries to GPUs: cmd/nvidia-mig-parted/{assert,apply} ---------------------------

def memory_slices_of(gpu):
    """The GPU's memory slices, from the profiles NVML reports (None while they are unknown)."""
    ends = [p['start'] + p['size'] for profile in gpu.get('profiles') or [] for p in profile.get('placements') or []]
    ends.extend(profile.get('memory_slices') or 0 for profile in gpu.get('profiles') or [])
    return max(ends) if ends and max(ends) else None


def _profiles_known(gpu):
    return bool(gpu.get('profiles_known', bool(gpu.get('profiles')))) and bool(gpu.get('profiles'))


def _label(gpu):
    ids = gpu.get('pci_device_id')
    if gpu.get('pci_subsystem_id'):
        ids = '%s:%s' % (ids, gpu['pci_subsystem_id'])
    return 'GPU %s (%s, %s)' % (gpu.get('index'), gpu.get('name'), ids)


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
        if not _filter_matches(entry, gpu):
            by_filter.append(position)
        elif not _devices_match(entry, gpu):
            by_devices.append(position)
        else:
            by_slices.append(position)
    reasons = []
    if by_filter:
        reasons.append('the device-filter of %s %s%s' % (
            _entries(by_filter, 'does not name', 'do not name'), gpu.get('pci_device_id'),
            ' (subsystem %s)' % gpu['pci_subsystem_id'] if gpu.get('pci_subsystem_id') else ''))
    if by_devices:
        reasons.append('the devices of %s index %s' % (
            _entries(by_devices, 'do not include', 'do not include'), gpu['index']))
    if by_slices:
        wanted = sorted(set(n for p in by_slices for n in entries[p][MEMORY_SLICES_KEY]))
        reasons.append('%s to GPUs with %s memory slices and this one %s' % (
            _entries(by_slices, 'applies', 'apply'), ' or '.join(str(n) for n in wanted),
            'has %d' % memory_slices if memory_slices else 'has no MIG'))
    return '; '.join(reasons) or 'the layout has no entry'


def known_gpus(decision):
    """The MIG-capable GPUs of a host as its decision (nvidia_mig_layout, any layout) reported them, for
    :func:`may_match_any`: {'index', 'pci_device_id', 'pci_subsystem_id', 'memory_slices'}; what the decision
    does not tell (the subsystem id, the memory slices of a GPU whose MIG is off) is None."""
    found = []
    for gpu in (decision or {}).get('gpus') or []:
        slices = (gpu.get('free_space_after') or {}).get('total_slices') or gpu.get('memory_slices')
        found.append({'index': gpu.get('index'), 'pci_device_id': gpu.get('pci_device_id'),
                      'pci_subsystem_id': gpu.get('pci_subsystem_id'), 'memory_slices': slices})
    for gpu in (decision or {}).get('unmatched_gpus') or []:
        found.append({'index': gpu.get('index'), 'pci_device_id': gpu.get('pci_device_id'),
                      'pci_subsystem_id': gpu.get('pci_subsystem_id'), 'memory_slices': None})
    return sorted(found, key=lambda gpu: gpu['index'])


def may_match_any(entries, gpus):
    """Whether an entry of a layout may match one of ``gpus`` (:func:`known_gpus`).

    Only a sure "no" counts: a device-filter with a subsystem id the record lacks, or memory slices not
    known yet, may match.
    """
    for gpu in gpus:
        for entry in entries:
            if not _devices_match(entry, gpu):
                continue
            if gpu.get('pci_subsystem_id') is None and any(
                    (parse_device_id(text) or (None, None))[1] is not None for text in entry['device-filter']):
                return True
            if not _filter_matches(entry, gpu):
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
        'index': gpu['index'],
        'uuid': gpu.get('uuid'),
        'name': gpu.get('name'),
        'pci_device_id': gpu.get('pci_device_id'),
        'pci_subsystem_id': gpu.get('pci_subsystem_id'),
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

    ``entries``: the normalised entries (:func:`check_layout`); ``gpus``: the NVML backend's GPUs.
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
    for gpu in sorted(gpus, key=lambda g: g['index']):
        label = _label(gpu)
        capable = bool(gpu.get('mig_capable'))
        known = capable and _profiles_known(gpu)
        memory_slices = memory_slices_of(gpu) if known else None
        sure, maybe = [], []
        for position, entry in enumerate(entries):
            if not (_filter_matches(entry, gpu) and _devices_match(entry, gpu)):
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
            result['unmatched'].append({'index': gpu['index'], 'uuid': gpu.get('uuid'), 'name': gpu.get('name'),
                                        'pci_device_id': gpu.get('pci_device_id'), 'reason': reason})
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
    return {'index': gpu['index'], 'name': gpu.get('name'), 'reason': reason}


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
    if not (gpu.get('mig_capable') and _profiles_known(gpu)):
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


# ---- one GPU's instances -----------------------------------------------------------------------

def _profile_slices(profile):
    sizes = set(p['size'] for p in profile.get('placements') or [])
    return sizes.pop() if len(sizes) == 1 else profile.get('memory_slices')


def _gpu_instance_profiles(gpu):
    """[(MigProfile, profile data)] of the GPU instance profiles in the mig-parted grammar."""
    result = []
    for profile in gpu.get('profiles') or []:
        try:
            parsed = MigProfile.parse(profile['name'])
        except ProfileError:
            continue
        if not parsed.is_compute_instance_profile:
            result.append((parsed, profile))
    return result


def shape_name(profile, gpu):
    """The model-agnostic name of one of ``gpu``'s GPU instance profiles (``1g.20gb`` -> ``1g.2mem``)."""
    parsed = MigProfile.parse(profile['name'])
    siblings = [_profile_slices(p) for q, p in _gpu_instance_profiles(gpu)
                if q.gpu_slices == parsed.gpu_slices and q.suffix == parsed.suffix]
    slices = _profile_slices(profile)
    memory = '' if not siblings or slices == min(siblings) else '.%dmem' % slices
    return '%dg%s%s' % (parsed.gpu_slices, memory, parsed.suffix)


def _offered(gpu):
    return ', '.join('%s (%s)' % (p['name'], shape_name(p, gpu))
                     for dummy, p in sorted(_gpu_instance_profiles(gpu), key=lambda item: (
                         _profile_slices(item[1]) or 0, item[0].gpu_slices, item[1]['name'])))


def _compute_names(profile):
    return sorted(ci['name'] for ci in profile.get('compute_profiles') or [])


# GPU instance profiles that driver branches name differently (the same profile: its memory moved a little), by the
# PCI device ids of the boards concerned. Sources: A100 80GB 3g.39gb on R535 and R545, 3g.40gb before and after
# (mig-parted issue 31); GB200 1g.24gb on an early driver (gpu-operator PR 1303), 1g.23gb later (mig-parted issue 227).
# The B200 (1g 22.00 then 20.50 GiB) and the RTX PRO 6000 (1g 23.12 then 23.62 GiB) kept their names.
DRIVER_RENAMES = (
    (('0x20B210DE', '0x20B510DE', '0x20F310DE', '0x20F510DE'), ('3g.39gb', '3g.40gb')),
    (('0x294110DE',), ('1g.24gb', '1g.23gb')),
    (('0x294110DE',), ('1g.24gb+me', '1g.23gb+me')),
)


def renamed_by_driver(name, gpu, gi_profiles):
    """The GPU's own profile data for a GPU instance profile ``name`` it does not offer, when its driver calls
    that profile by another name (DRIVER_RENAMES); else None. A layout written with either name then works on
    either driver: the name is matched to the one the driver lists, as model-agnostic keys are."""
    device = _hex_id(gpu.get('pci_device_id'))
    for devices, names in DRIVER_RENAMES:
        if name in names and device in [int(d, 16) for d in devices]:
            offered = [p for q, p in gi_profiles if p['name'] in names]
            if len(offered) == 1:
                return offered[0]
    return None


def _resolve_key(key, gpu, label):
    """One mig-devices key -> the profile name NVML reports on this GPU (or its compute-instance key)."""
    try:
        parsed = parse_key(key)
    except ProfileError as exc:
        raise LayoutConfigError('%s: mig-devices key %s: %s' % (label, key, exc))
    gi_profiles = _gpu_instance_profiles(gpu)
    if isinstance(parsed, MigShape):
        same = [(q, p) for q, p in gi_profiles if q.gpu_slices == parsed.gpu_slices and q.suffix == parsed.suffix]
        if parsed.memory_slices is not None:
            same = [(q, p) for q, p in same if _profile_slices(p) == parsed.memory_slices]
        elif same:
            fewest = min(_profile_slices(p) for q, p in same)
            same = [(q, p) for q, p in same if _profile_slices(p) == fewest]
        if len(same) != 1:
            raise LayoutConfigError('%s: %s %s: the GPU offers %s' % (
                label, key, 'matches no profile' if not same else 'matches %s' % ', '.join(p['name'] for q, p in same),
                _offered(gpu)))
        gi_name = same[0][1]['name']
        profile = same[0][1]
    else:
        matches = [p for q, p in gi_profiles if q.name == parsed.gpu_instance_name]
        if not matches:
            renamed = renamed_by_driver(parsed.gpu_instance_name, gpu, gi_profiles)
            if renamed is None:
                raise LayoutConfigError('%s: %s is not offered: the GPU offers %s' % (label, key, _offered(gpu)))
            matches = [renamed]
        profile = matches[0]
        gi_name = profile['name']
    if not parsed.is_compute_instance_profile:
        return gi_name
    name = compute_instance_name(parsed.compute_slices, gi_name)
    if name not in _compute_names(profile):
        raise LayoutConfigError('%s: %s (%s) is not a compute instance of %s, which offers %s' % (
            label, key, name, gi_name, ', '.join(_compute_names(profile)) or 'none'))
    return name


def _fill_count(gpu, instances, name, label):
    """How many more of ``name`` fit with ``instances`` on the empty GPU (count ``max``)."""
    catalog = Catalog.from_data(gpu['profiles'])
    gi = catalog.get(MigProfile.parse(name).gpu_instance_name)
    upper = gi.max_count
    if name != gi.name:
        upper *= gi.compute_profiles[name].max_count
    for count in range(upper, 0, -1):
        trial = dict(instances)
        trial[name] = trial.get(name, 0) + count
        try:
            expand_layout(catalog, trial, label)
        except PlanningError:
            continue
        return count
    return 0


def concrete_instances(mig_devices, gpu):
    """A winning entry's ``mig-devices`` -> {profile name as NVML reports it: count} for this GPU.

    Memory-sized keys are kept as their canonical name (``1c.1g.10gb`` is ``1g.10gb``), model-agnostic
    ones are resolved against the GPU's profiles, counts of keys naming the same profile add up,
    and a count ``max`` becomes the most that fit on the empty GPU with the rest of the entry.
    Compute-instance keys come out as ``1c.3g.40gb``: exactly what _mig_planner.expand_layout takes.
    Raises LayoutConfigError naming the GPU, the key and the profiles it offers.
    """
    label = _label(gpu)
    if mig_devices == {}:
        return {}
    if mig_devices is None:
        raise LayoutConfigError('%s: no entry chosen yet (pending: call choose_entry once MIG is enabled)' % label)
    if not gpu.get('profiles'):
        raise LayoutConfigError('%s: its MIG profiles are unknown: NVML reports them only while MIG is enabled' % label)
    instances = {}
    fill = None
    for key in sorted(mig_devices):
        count = mig_devices[key]
        name = _resolve_key(key, gpu, label)
        if count == MAX_COUNT:
            fill = name
        elif count:
            instances[name] = instances.get(name, 0) + count
    if fill is not None:
        extra = _fill_count(gpu, instances, fill, label)
        if extra:
            instances[fill] = instances.get(fill, 0) + extra
    return instances
