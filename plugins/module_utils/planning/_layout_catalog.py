# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Named MIG layouts in NVIDIA mig-parted's v1 format: the file read and validated as mig-parted reads it.

Pure Python: no NVML, no Ansible imports. docs/mig_layout.md lists every rule with the
mig-parted source file it comes from. In short:

- :func:`validate_document` / :func:`validate_configs` (either, told apart: :func:`validate_file_or_configs`): a
  whole file is refused only for what mig-parted refuses when it loads one (api/spec/v1/spec.go); the result is
  normalised.
- :func:`check_layout`: the layout being applied, strictly (profile names no GPU can have);
  :func:`layout_problems` reports the same for the other layouts without failing.

Which entry each GPU takes is _layout_matching; an entry's ``mig-devices`` as one GPU's profiles is
_layout_keys. gpufleet extensions (a file without them is read exactly as mig-parted reads it):
model-agnostic ``mig-devices`` keys (``1g``, ``1g.2mem``, ``1c.3g``, ``2g+gfx``, see _mig_profile), the
count ``max``, and the entry key ``gpufleet-memory-slices``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import MigShape, ProfileError, check_format, parse_key

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


def validate_file_or_configs(config):
    """A whole mig-parted file (a mapping with a ``mig-configs`` key, or a string ``version``) or its ``mig-configs``
    mapping -> the normalised configs (nvidia_mig_layout's config option)."""
    if 'mig-configs' in config or isinstance(config.get('version'), str):
        return validate_document(config)
    return validate_configs(config)


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
