# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""A simulated ``libnvidia-ml`` for the real ``pynvml`` bindings, backed by a JSON state file.

``install(pynvml, path)`` puts a :class:`SimulatedNvml` into ``pynvml.nvmlLib``. Its
attributes are Python callables named like the C symbols; they receive what the pynvml
wrappers pass (``byref`` objects, ints, handle pointers, caller-allocated arrays, None)
and return an NVML status, so the wrappers' struct versions, marshalling and error
mapping run unchanged. A symbol the simulator lacks is a missing attribute, which pynvml
turns into ``NVML_ERROR_FUNCTION_NOT_FOUND``.

The state file is the host: it is read at ``nvmlInit``, and every mutation re-reads it,
applies the change and writes it back atomically under ``flock`` on ``<state>.lock``.
Mutations (and simulated resets and reboots) are appended to ``<state>.calls.jsonl``.
See docs/simulator.md for the schema, faults and the call log.

Pure Python (ctypes, fcntl, json): no Ansible imports, and pynvml is passed in, never imported.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import re
import tempfile

from gpufleet_nvml_sim.models import (
    CI_ENUM_BY_SLICES,
    CI_PROFILE_COUNT,
    GI_PROFILE_COUNT,
    UnknownModel,
    compute_instance_name,
    get_model,
    mode_applies_immediately,
)

SIMULATOR_ENV = 'GPUFLEET_MIG_SIMULATOR'
DEFAULT_DRIVER_VERSION = '580.95.05'

# nvmlReturn_t (nvml.h); kept here so that faults and the call log need no pynvml.
SUCCESS = 0
ERRORS = {
    'NVML_ERROR_UNINITIALIZED': 1, 'NVML_ERROR_INVALID_ARGUMENT': 2, 'NVML_ERROR_NOT_SUPPORTED': 3,
    'NVML_ERROR_NO_PERMISSION': 4, 'NVML_ERROR_ALREADY_INITIALIZED': 5, 'NVML_ERROR_NOT_FOUND': 6,
    'NVML_ERROR_INSUFFICIENT_SIZE': 7, 'NVML_ERROR_INSUFFICIENT_POWER': 8, 'NVML_ERROR_DRIVER_NOT_LOADED': 9,
    'NVML_ERROR_TIMEOUT': 10, 'NVML_ERROR_IRQ_ISSUE': 11, 'NVML_ERROR_LIBRARY_NOT_FOUND': 12,
    'NVML_ERROR_FUNCTION_NOT_FOUND': 13, 'NVML_ERROR_CORRUPTED_INFOROM': 14, 'NVML_ERROR_GPU_IS_LOST': 15,
    'NVML_ERROR_RESET_REQUIRED': 16, 'NVML_ERROR_OPERATING_SYSTEM': 17, 'NVML_ERROR_LIB_RM_VERSION_MISMATCH': 18,
    'NVML_ERROR_IN_USE': 19, 'NVML_ERROR_MEMORY': 20, 'NVML_ERROR_NO_DATA': 21, 'NVML_ERROR_VGPU_ECC_NOT_SUPPORTED': 22,
    'NVML_ERROR_INSUFFICIENT_RESOURCES': 23, 'NVML_ERROR_FREQ_NOT_SUPPORTED': 24, 'NVML_ERROR_ARGUMENT_VERSION_MISMATCH': 25,
    'NVML_ERROR_DEPRECATED': 26, 'NVML_ERROR_NOT_READY': 27, 'NVML_ERROR_GPU_NOT_FOUND': 28, 'NVML_ERROR_INVALID_STATE': 29,
    'NVML_ERROR_RESET_TYPE_NOT_SUPPORTED': 30, 'NVML_ERROR_UNKNOWN': 999,
}
ERROR_NAMES = dict((code, name) for name, code in ERRORS.items())
ERROR_NAMES[SUCCESS] = 'NVML_SUCCESS'
# What nvmlErrorString answers (pynvml asks it for codes missing from its own table).
_ERROR_STRINGS = {
    0: b'Success', 1: b'Uninitialized', 2: b'Invalid Argument', 3: b'Not Supported', 4: b'Insufficient Permissions',
    5: b'Already Initialized', 6: b'Not Found', 7: b'Insufficient Size', 8: b'Insufficient External Power',
    9: b'Driver Not Loaded', 10: b'Timeout', 11: b'Interrupt Request Issue', 12: b'NVML Shared Library Not Found',
    13: b'Function Not Found', 14: b'Corrupted infoROM', 15: b'GPU is lost', 16: b'GPU requires restart',
    17: b'The operating system has blocked the request.', 18: b'RM has detected an NVML/RM version mismatch.',
    19: b'In use by another client', 20: b'Insufficient Memory', 21: b'No data', 22: b'ECC is not supported by the vGPU',
    23: b'Insufficient resources', 24: b'Frequency not supported', 25: b'Argument version mismatch',
    26: b'Deprecated', 27: b'Not ready', 28: b'GPU not found', 29: b'Invalid state', 30: b'Reset type not supported',
    999: b'Unknown Error',
}

GI_PROFILE_INFO_V2 = 0x02000098     # nvmlGpuInstanceProfileInfo_v2
CI_PROFILE_INFO_V2 = 0x02000088     # nvmlComputeInstanceProfileInfo_v2
MEMORY_INFO_V2 = 0x02000028         # nvmlMemory_v2
CI_ENGINE_PROFILE_COUNT = 1         # only NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
_NOT_AVAILABLE_UINT = 0xFFFFFFFF    # gpuInstanceId/computeInstanceId of a process outside MIG
_MIB = 1024 * 1024
_PROCESS_MEMORY = 512 * _MIB        # usedGpuMemory reported for every simulated process

# Handle encoding: (tag << 40) | ((gpu + 1) << 24) | ((gi_id + 1) << 12) | (ci_id + 1). Always nonzero,
# distinct per kind; never dereferenced (pynvml only passes handles back in).
_TAG_DEVICE, _TAG_GI, _TAG_CI, _TAG_MIG = 1, 2, 3, 4
_PARENT = (_TAG_DEVICE,)
_ANY_DEVICE = (_TAG_DEVICE, _TAG_MIG)

MUTATING_CALLS = ('nvmlDeviceSetMigMode', 'nvmlDeviceCreateGpuInstance', 'nvmlDeviceCreateGpuInstanceWithPlacement',
                  'nvmlGpuInstanceDestroy', 'nvmlGpuInstanceCreateComputeInstance',
                  'nvmlGpuInstanceCreateComputeInstanceWithPlacement', 'nvmlComputeInstanceDestroy')
# Host events that are not NVML calls; logged like mutations, and simulate_gpu_reset takes faults.
HOST_EVENTS = ('simulate_gpu_reset', 'simulate_reboot')

_CArgObject = type(ctypes.byref(ctypes.c_uint()))
_PCI_BUS_ID = re.compile(r'^[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$')


class SimulatorError(Exception):
    """A state file that cannot describe a host, a bad helper call, or a refused simulated reset."""


class NvmlFailure(Exception):
    """Internal: ends a simulated call with an NVML status (a code or an ``NVML_ERROR_*`` name)."""

    def __init__(self, error):
        self.code = ERRORS[error] if isinstance(error, str) else int(error)
        super(NvmlFailure, self).__init__(ERROR_NAMES.get(self.code, str(self.code)))


# ---- ctypes marshalling: what pynvml passes in -------------------------------------

def _encode(tag, gpu, gi_id=0, ci_id=0):
    return (tag << 40) | ((gpu + 1) << 24) | ((gi_id + 1) << 12) | (ci_id + 1)


def _decode(handle):
    """(tag, gpu index, gi id, ci id) of a handle the simulator gave out; INVALID_ARGUMENT otherwise."""
    if isinstance(handle, int):
        value = handle
    else:
        try:
            value = ctypes.cast(handle, ctypes.c_void_p).value
        except (TypeError, ctypes.ArgumentError):
            value = None
    if not value or not _TAG_DEVICE <= value >> 40 <= _TAG_MIG or not (value >> 24) & 0xFFFF:
        raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
    return value >> 40, ((value >> 24) & 0xFFFF) - 1, ((value >> 12) & 0xFFF) - 1, (value & 0xFFF) - 1


def _target(argument):
    """The ctypes object an out-argument refers to: ``byref(x)`` -> x, a pointer -> what it points at."""
    if argument is None:
        raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
    if isinstance(argument, _CArgObject):
        return argument._obj
    if hasattr(argument, 'contents'):
        if not argument:
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        return argument.contents
    return argument


def _elements(argument):
    """An indexable caller-allocated array (or None): a ctypes array, ``byref(array)`` or a pointer."""
    if isinstance(argument, _CArgObject):
        return argument._obj
    return argument


def _capacity(elements):
    return len(elements) if isinstance(elements, ctypes.Array) else None


def _uint(value):
    """An input integer as pynvml passes it: int, c_uint, or byref(c_uint) for in/out counts."""
    if isinstance(value, _CArgObject):
        value = value._obj
    return int(value.value if hasattr(value, 'value') else value)


def _set_uint(argument, value):
    _target(argument).value = value


def _store_handle(argument, value):
    """Write a handle into the pointer that ``byref(handle)`` refers to."""
    target = _target(argument)
    ctypes.c_void_p.from_address(ctypes.addressof(target)).value = value


def _as_pointer(value, field_type):
    return ctypes.cast(ctypes.c_void_p(value), field_type)


def _text(value):
    raw = value.value if hasattr(value, 'value') else value
    return raw.decode('utf-8', 'replace') if isinstance(raw, bytes) else raw


def _write_text(buffer, length, text):
    data = text.encode()
    if _uint(length) < len(data) + 1:
        raise NvmlFailure('NVML_ERROR_INSUFFICIENT_SIZE')
    _target(buffer).value = data


def _derived_uuid(*parts):
    digest = hashlib.sha1('-'.join(str(p) for p in parts).encode()).hexdigest()
    return '%s-%s-%s-%s-%s' % (digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32])


# ---- state file --------------------------------------------------------------------

def call_log_path(path):
    return path + '.calls.jsonl'


@contextlib.contextmanager
def _file_lock(path):
    with open(path + '.lock', 'a') as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def load_state(path):
    """Read and validate a state file; fills defaults, uuids and ids (stable once the simulator writes the file)."""
    try:
        with open(path) as handle:
            state = json.load(handle)
    except (IOError, OSError, ValueError) as exc:
        raise SimulatorError('cannot read simulator state %s: %s' % (path, exc))
    _validate_state(path, state)
    return state


def save_state(path, state):
    """Write the state atomically (temporary file + rename), so readers never see half a file."""
    directory = os.path.dirname(os.path.abspath(path))
    descriptor, temporary = tempfile.mkstemp(prefix='.%s.' % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(descriptor, 'w') as handle:
            json.dump(state, handle, indent=1, sort_keys=True)
        os.rename(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def write_state(path, state):
    """Validate ``state`` and write it as the host (test helper); returns the state as the simulator sees it."""
    state = json.loads(json.dumps(state))
    _validate_state(path, state)
    with _file_lock(path):
        save_state(path, state)
    return state


def read_call_log(path):
    """The call log as a list of dicts (empty when nothing was logged)."""
    try:
        with open(call_log_path(path)) as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except (IOError, OSError):
        return []


def _log(path, call, gpu, code, arguments, created=None):
    entry = {'call': call, 'gpu': gpu, 'args': arguments, 'result': ERROR_NAMES.get(code, str(code)), 'pid': os.getpid()}
    if created:
        entry['created'] = created
    with open(call_log_path(path), 'a') as handle:
        handle.write(json.dumps(entry, sort_keys=True) + '\n')


# ---- validation ----------------------------------------------------------------------

def _validate_state(path, state):
    where = 'simulator state %s' % path
    if not isinstance(state, dict) or not isinstance(state.get('gpus'), list):
        raise SimulatorError('%s: needs a "gpus" list' % where)
    state.setdefault('driver_version', DEFAULT_DRIVER_VERSION)
    if not isinstance(state['driver_version'], str):
        raise SimulatorError('%s: driver_version must be a string' % where)
    for index, gpu in enumerate(state['gpus']):
        _validate_gpu('%s: gpus[%d]' % (where, index), index, gpu)
    faults = state.setdefault('faults', [])
    if not isinstance(faults, list):
        raise SimulatorError('%s: faults must be a list' % where)
    for position, fault in enumerate(faults):
        _validate_fault('%s: faults[%d]' % (where, position), fault)


def _check_pids(where, pids):
    if not isinstance(pids, list) or not all(isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in pids):
        raise SimulatorError('%s: pids must be a list of positive integers, got %r' % (where, pids))


def _check_ids(where, entries, what):
    ids = [entry['id'] for entry in entries if 'id' in entry]
    for value in ids:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 0xFFF:
            raise SimulatorError('%s: %s id %r must be an integer from 0 to 4094' % (where, what, value))
    if len(ids) != len(set(ids)):
        raise SimulatorError('%s: duplicate %s ids %s' % (where, what, sorted(ids)))


def _strip_prefix(name):
    return name[4:] if isinstance(name, str) and name.startswith('MIG ') else name


def _validate_gpu(where, index, gpu):
    if not isinstance(gpu, dict):
        raise SimulatorError('%s: must be an object' % where)
    try:
        model = get_model(gpu.get('model'))
    except UnknownModel as exc:
        raise SimulatorError('%s: %s' % (where, exc.args[0]))
    gpu.setdefault('uuid', 'GPU-' + _derived_uuid(index, gpu['model']))
    gpu.setdefault('pci_bus_id', '%08X:%02X:00.0' % (index // 16, 0x07 + 0x10 * (index % 16)))
    if not isinstance(gpu['pci_bus_id'], str) or not _PCI_BUS_ID.match(gpu['pci_bus_id']):
        raise SimulatorError('%s: pci_bus_id %r must look like 00000000:07:00.0' % (where, gpu['pci_bus_id']))
    if not isinstance(gpu['uuid'], str) or not gpu['uuid'].startswith('GPU-'):
        raise SimulatorError('%s: uuid %r must start with GPU-' % (where, gpu['uuid']))
    mig = gpu.setdefault('mig', {})
    if not isinstance(mig, dict):
        raise SimulatorError('%s: mig must be an object with current and pending' % where)
    mig.setdefault('current', 'disabled')
    mig.setdefault('pending', mig['current'])
    for key in ('current', 'pending'):
        if mig[key] not in ('enabled', 'disabled'):
            raise SimulatorError('%s: mig.%s must be enabled or disabled, got %r' % (where, key, mig[key]))
    if not model['mig_capable'] and 'enabled' in (mig['current'], mig['pending']):
        raise SimulatorError('%s: %s is not MIG-capable' % (where, gpu['model']))
    gpu.setdefault('pids', [])
    _check_pids(where, gpu['pids'])
    instances = gpu.setdefault('gpu_instances', [])
    if not isinstance(instances, list) or not all(isinstance(gi, dict) for gi in instances):
        raise SimulatorError('%s: gpu_instances must be a list of objects' % where)
    if instances and mig['current'] != 'enabled':
        raise SimulatorError('%s: GPU instances need mig.current enabled' % where)
    _check_ids(where, instances, 'GPU instance')
    placed = []
    for position, gi in enumerate(instances):
        gi_where = '%s.gpu_instances[%d]' % (where, position)
        gi['profile'] = _strip_prefix(gi.get('profile'))
        profile = _profile_by_name(model, gi['profile'])
        if profile is None:
            raise SimulatorError('%s: unknown GPU instance profile %r for %s (profiles: %s)'
                                 % (gi_where, gi['profile'], gpu['model'], ', '.join(p['name'] for p in model['profiles'])))
        if 'start' not in gi:
            gi['start'] = _auto_gi_start(model, placed, profile)
            if gi['start'] is None:
                raise SimulatorError('%s: no free placement for %s' % (gi_where, profile['name']))
        problem = _gi_problem(model, placed, profile, gi['start'])
        if problem:
            raise SimulatorError('%s: %s' % (gi_where, problem[1]))
        placed.append(gi)
        if 'id' not in gi:
            gi['id'] = _lowest_free(1, instances)
        _validate_compute_instances(gi_where, profile, gi)


def _validate_compute_instances(where, gi_profile, gi):
    cis = gi.setdefault('compute_instances', [])
    if not isinstance(cis, list) or not all(isinstance(ci, dict) for ci in cis):
        raise SimulatorError('%s: compute_instances must be a list of objects' % where)
    _check_ids(where, cis, 'compute instance')
    placed = []
    for position, ci in enumerate(cis):
        ci_where = '%s.compute_instances[%d]' % (where, position)
        ci['profile'] = _strip_prefix(ci.get('profile'))
        slices = _ci_slices_by_name(gi_profile, ci['profile'])
        if slices is None:
            raise SimulatorError('%s: compute instance profile %r is not valid in %s (valid: %s)'
                                 % (ci_where, ci['profile'], gi_profile['name'],
                                    ', '.join(compute_instance_name(gi_profile, s) for s in sorted(gi_profile['compute_placements']))))
        if 'start' not in ci:
            ci['start'] = _auto_ci_start(gi_profile, placed, slices)
            if ci['start'] is None:
                raise SimulatorError('%s: no free placement for %s' % (ci_where, ci['profile']))
        problem = _ci_problem(gi_profile, placed, slices, ci['start'])
        if problem:
            raise SimulatorError('%s: %s' % (ci_where, problem[1]))
        placed.append(ci)
        ci.setdefault('pids', [])
        _check_pids(ci_where, ci['pids'])
        if 'id' not in ci:
            ci['id'] = _lowest_free(0, cis)


def _validate_fault(where, fault):
    if not isinstance(fault, dict):
        raise SimulatorError('%s: must be an object' % where)
    if fault.get('call') not in SYMBOLS and fault.get('call') not in HOST_EVENTS:
        raise SimulatorError('%s: unknown call %r (a simulated NVML symbol or %s)' % (where, fault.get('call'), ', '.join(HOST_EVENTS)))
    gpu = fault.get('gpu')
    if gpu is not None and (not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0):
        raise SimulatorError('%s: gpu must be a GPU index or absent (any GPU)' % where)
    nth = fault.setdefault('nth', 1)
    if not isinstance(nth, int) or isinstance(nth, bool) or nth < 1:
        raise SimulatorError('%s: nth must be an integer >= 1' % where)
    error = fault.setdefault('error', 'NVML_ERROR_UNKNOWN')
    if isinstance(error, str) and not error.startswith('NVML_ERROR_'):
        error = fault['error'] = 'NVML_ERROR_' + error
    if not (error in ERRORS or (isinstance(error, int) and not isinstance(error, bool) and error > 0)):
        raise SimulatorError('%s: unknown error %r (an NVML_ERROR_* name or a nonzero code)' % (where, error))
    fault.setdefault('seen', 0)
    fault.setdefault('fired', False)


def _lowest_free(first, entries):
    taken = set(entry['id'] for entry in entries if 'id' in entry)
    candidate = first
    while candidate in taken:
        candidate += 1
    return candidate


# ---- geometry ------------------------------------------------------------------------

def _profile_by_name(model, name):
    for profile in model['profiles']:
        if profile['name'] == name:
            return profile
    return None


def _profile_by_id(model, profile_id):
    for profile in model['profiles']:
        if profile['id'] == profile_id:
            return profile
    raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')


def _ci_slices_by_name(gi_profile, name):
    for slices in gi_profile['compute_placements']:
        if compute_instance_name(gi_profile, slices) == name:
            return slices
    return None


def _ci_slices_by_id(gi_profile, profile_id):
    for slices in gi_profile['compute_placements']:
        if CI_ENUM_BY_SLICES[slices] == profile_id:
            return slices
    raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')


def _mask(start, size):
    return ((1 << size) - 1) << start


def _gi_problem(model, instances, profile, start):
    """None when a GI of ``profile`` fits at ``start`` beside ``instances``; else (NVML error name, reason)."""
    if start not in profile['starts']:
        return ('NVML_ERROR_INVALID_ARGUMENT', '%s cannot start at slice %r (starts %s)' % (profile['name'], start, list(profile['starts'])))
    if sum(1 for gi in instances if gi['profile'] == profile['name']) >= profile['max_count']:
        return ('NVML_ERROR_INSUFFICIENT_RESOURCES', 'the maximum of %d %s GPU instances is reached' % (profile['max_count'], profile['name']))
    if profile['media_extensions'] and any(gi['profile'].endswith('+me') for gi in instances):
        return ('NVML_ERROR_INSUFFICIENT_RESOURCES', 'only one +me GPU instance per GPU')
    occupied = 0
    for gi in instances:
        occupied |= _mask(gi['start'], _profile_by_name(model, gi['profile'])['memory_slices'])
    if occupied & _mask(start, profile['memory_slices']):
        return ('NVML_ERROR_INSUFFICIENT_RESOURCES', '%s at slice %d overlaps another GPU instance' % (profile['name'], start))
    return None


def _ci_problem(gi_profile, cis, slices, start):
    """None when a CI of ``slices`` fits at ``start`` beside ``cis`` in a GI of ``gi_profile``; else (error, reason)."""
    starts = gi_profile['compute_placements'][slices]
    name = compute_instance_name(gi_profile, slices)
    if start not in starts:
        return ('NVML_ERROR_INVALID_ARGUMENT', 'compute instance %s cannot start at %r (starts %s)' % (name, start, list(starts)))
    if sum(1 for ci in cis if ci['profile'] == name) >= len(starts):
        return ('NVML_ERROR_INSUFFICIENT_RESOURCES', 'the maximum of %d %s compute instances is reached' % (len(starts), name))
    occupied = 0
    for ci in cis:
        occupied |= _mask(ci['start'], _ci_slices_by_name(gi_profile, ci['profile']))
    if occupied & _mask(start, slices):
        return ('NVML_ERROR_INSUFFICIENT_RESOURCES', 'compute instance %s at %d overlaps another compute instance' % (name, start))
    return None


def _auto_gi_start(model, instances, profile):
    """The placement the driver picks for nvmlDeviceCreateGpuInstance (see AUTO_PLACEMENT_* in _gpu_models)."""
    preferred = [s for s in model['auto_placement_order'].get(profile['memory_slices'], ()) if s in profile['starts']]
    for start in preferred + [s for s in profile['starts'] if s not in preferred]:
        if _gi_problem(model, instances, profile, start) is None:
            return start
    return None


def _auto_ci_start(gi_profile, cis, slices):
    for start in gi_profile['compute_placements'][slices]:
        if _ci_problem(gi_profile, cis, slices, start) is None:
            return start
    return None


def _gi_remaining(model, instances, profile):
    """How many more GIs of ``profile`` fit: greedy over its (equal-size, aligned) placements is optimal."""
    probe = list(instances)
    for start in profile['starts']:
        if _gi_problem(model, probe, profile, start) is None:
            probe.append({'profile': profile['name'], 'start': start})
    return len(probe) - len(instances)


def _ci_remaining(gi_profile, cis, slices):
    probe = list(cis)
    name = compute_instance_name(gi_profile, slices)
    for start in gi_profile['compute_placements'][slices]:
        if _ci_problem(gi_profile, probe, slices, start) is None:
            probe.append({'profile': name, 'start': start})
    return len(probe) - len(cis)


def _gpu_pids(gpu):
    """Every process on a GPU: its own (non-MIG) ones and those of every compute instance."""
    pids = set(gpu['pids'])
    for gi in gpu['gpu_instances']:
        for ci in gi['compute_instances']:
            pids.update(ci['pids'])
    return sorted(pids)


def _mig_devices(gpu):
    """(gi, ci) per MIG device, in MIG device index order."""
    devices = []
    for gi in sorted(gpu['gpu_instances'], key=lambda g: g['start']):
        for ci in sorted(gi['compute_instances'], key=lambda c: c['start']):
            devices.append((gi, ci))
    return devices


def _find(entries, entry_id):
    for entry in entries:
        if entry['id'] == entry_id:
            return entry
    return None


def _take_fault(state, call, index):
    """Count this call against matching faults; (whether any matched, the error code of the one that fires or None)."""
    matched = False
    code = None
    for fault in state['faults']:
        if fault['fired'] or fault['call'] != call or fault.get('gpu') not in (None, index):
            continue
        matched = True
        fault['seen'] += 1
        if code is None and fault['seen'] >= fault['nth']:
            fault['fired'] = True
            code = ERRORS[fault['error']] if isinstance(fault['error'], str) else fault['error']
    return matched, code


def _has_pending_fault(state, call, index):
    return any(not f['fired'] and f['call'] == call and f.get('gpu') in (None, index) for f in state['faults'])


# ---- host events (not NVML calls) ------------------------------------------------------

def simulate_gpu_reset(path, index):
    """What ``nvidia-smi --gpu-reset -i <index>`` does: refuse while processes use the GPU, else apply the
    pending MIG mode and drop every GPU and compute instance. Raises SimulatorError when refused."""
    with _file_lock(path):
        state = load_state(path)
        if not isinstance(index, int) or not 0 <= index < len(state['gpus']):
            raise SimulatorError('simulated reset: no GPU %r (the host has %d)' % (index, len(state['gpus'])))
        matched, code = _take_fault(state, 'simulate_gpu_reset', index)
        if code is not None:
            save_state(path, state)
            _log(path, 'simulate_gpu_reset', index, code, {})
            raise SimulatorError('simulated reset of GPU %d failed: %s (injected fault)' % (index, ERROR_NAMES.get(code, code)))
        gpu = state['gpus'][index]
        pids = _gpu_pids(gpu)
        if pids:
            if matched:
                save_state(path, state)
            _log(path, 'simulate_gpu_reset', index, ERRORS['NVML_ERROR_IN_USE'], {'pids': pids})
            raise SimulatorError('GPU %d is in use by processes %s; a reset needs an idle GPU' % (index, pids))
        gpu['mig']['current'] = gpu['mig']['pending']
        gpu['gpu_instances'] = []
        save_state(path, state)
        _log(path, 'simulate_gpu_reset', index, SUCCESS, {})


def simulate_reboot(path):
    """A host reboot: every instance and process gone; Ampere applies its pending mode (and keeps it),
    Hopper and later come back with MIG disabled."""
    with _file_lock(path):
        state = load_state(path)
        for gpu in state['gpus']:
            gpu['gpu_instances'] = []
            gpu['pids'] = []
            if mode_applies_immediately(get_model(gpu['model'])):
                gpu['mig'] = {'current': 'disabled', 'pending': 'disabled'}
            else:
                gpu['mig']['current'] = gpu['mig']['pending']
        save_state(path, state)
        _log(path, 'simulate_reboot', None, SUCCESS, {})


def set_pids(path, index, gi_id, ci_id, pids):
    """Test helper: the processes now running on compute instance ``ci_id`` of GPU instance ``gi_id``
    (or, with ``gi_id`` None, on the GPU itself outside MIG). Not an NVML call: not logged."""
    with _file_lock(path):
        state = load_state(path)
        if not isinstance(index, int) or not 0 <= index < len(state['gpus']):
            raise SimulatorError('set_pids: no GPU %r' % (index,))
        gpu = state['gpus'][index]
        if gi_id is None:
            target = gpu
        else:
            gi = _find(gpu['gpu_instances'], gi_id)
            target = _find(gi['compute_instances'], ci_id) if gi else None
            if target is None:
                raise SimulatorError('set_pids: GPU %d has no compute instance %r in GPU instance %r' % (index, ci_id, gi_id))
        _check_pids('set_pids', list(pids))
        target['pids'] = list(pids)
        save_state(path, state)


# ---- the simulated library ---------------------------------------------------------------

class _Context(object):
    """What a handle resolved to in the current state."""

    __slots__ = ('tag', 'index', 'gpu', 'model', 'gi', 'gi_profile', 'ci', 'ci_slices')

    def __init__(self, tag, index, gpu, model):
        self.tag = tag
        self.index = index
        self.gpu = gpu
        self.model = model
        self.gi = self.gi_profile = self.ci = self.ci_slices = None


class _Symbol(object):
    """One simulated C entry point. An object, not a bound method, because pynvml sets ``restype`` on some."""

    def __init__(self, lib, name, implementation):
        self.__name__ = name
        self._lib = lib
        self._implementation = implementation

    def __call__(self, *args):
        lib = self._lib
        lib.call_counts[self.__name__] = lib.call_counts.get(self.__name__, 0) + 1
        if not lib.initialized and self.__name__ not in _WITHOUT_INIT:
            return ERRORS['NVML_ERROR_UNINITIALIZED']
        try:
            result = self._implementation(lib, *args)
        except NvmlFailure as failure:
            return failure.code
        return SUCCESS if result is None else result


_SYSTEM = object()   # stands for "no handle" in system-level calls (a None handle is a NULL one)
_WITHOUT_INIT = ('nvmlInitWithFlags', 'nvmlInit_v2', 'nvmlErrorString')


class SimulatedNvml(object):
    """The object put into ``pynvml.nvmlLib``. C symbols are the ``sym_*`` methods, exposed without the prefix.

    ``call_counts`` counts every symbol call made through this object (this process only),
    e.g. for benchmarks; the call log on disk records mutations only.
    """

    def __init__(self, path):
        self.path = path
        self.state = None
        self.init_count = 0
        self.call_counts = {}
        for name in SYMBOLS:
            setattr(self, name, _Symbol(self, name, getattr(SimulatedNvml, 'sym_' + name)))

    @property
    def initialized(self):
        return self.init_count > 0

    # ---- plumbing --------------------------------------------------------------------

    def _resolve(self, state, handle, kinds):
        tag, index, gi_id, ci_id = _decode(handle)
        if tag not in kinds or not 0 <= index < len(state['gpus']):
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        gpu = state['gpus'][index]
        ctx = _Context(tag, index, gpu, get_model(gpu['model']))
        if tag != _TAG_DEVICE:
            ctx.gi = _find(gpu['gpu_instances'], gi_id)
            if ctx.gi is None:      # a stale handle: the GPU instance was destroyed
                raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
            ctx.gi_profile = _profile_by_name(ctx.model, ctx.gi['profile'])
        if tag in (_TAG_CI, _TAG_MIG):
            ctx.ci = _find(ctx.gi['compute_instances'], ci_id)
            if ctx.ci is None:
                raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
            ctx.ci_slices = _ci_slices_by_name(ctx.gi_profile, ctx.ci['profile'])
        return ctx

    def _fault(self, call, index):
        """Count a read-only call against the faults; the state file is only touched when a fault could match."""
        if not _has_pending_fault(self.state, call, index):
            return
        with _file_lock(self.path):
            state = load_state(self.path)
            matched, code = _take_fault(state, call, index)
            if matched:
                save_state(self.path, state)
            self.state = state
        if code is not None:
            raise NvmlFailure(code)

    def _read(self, call, handle=_SYSTEM, kinds=_PARENT):
        """Start a read-only call: check faults, then resolve the handle (none for system calls)."""
        if handle is _SYSTEM:
            self._fault(call, None)
            return None
        index = _decode(handle)[1]
        self._fault(call, index)
        return self._resolve(self.state, handle, kinds)

    def _mutate(self, call, handle, kinds, arguments, change):
        """Re-read the file, check faults, ``change(state, ctx)``, write back and log, all under the lock.

        ``change`` checks everything before it modifies the state, so a failure mutates nothing;
        it may return a dict describing what it created (logged as ``created``).
        """
        index = _decode(handle)[1]
        created = None
        with _file_lock(self.path):
            state = load_state(self.path)
            matched, code = _take_fault(state, call, index)
            if code is None:
                try:
                    created = change(state, self._resolve(state, handle, kinds))
                    code = SUCCESS
                except NvmlFailure as failure:
                    code = failure.code
            if matched or code == SUCCESS:
                save_state(self.path, state)
            self.state = state
            _log(self.path, call, index, code, arguments, created)
        if code != SUCCESS:
            raise NvmlFailure(code)
        return created

    @staticmethod
    def _require_mig_capable(ctx):
        if not ctx.model['mig_capable']:
            raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')

    @staticmethod
    def _require_mig_enabled(ctx):
        if not ctx.model['mig_capable'] or ctx.gpu['mig']['current'] != 'enabled':
            raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')

    @staticmethod
    def _fill_placements(starts, size, array, count):
        """Possible placements, NVML style: a NULL array asks for the count; otherwise count is the array size."""
        elements = _elements(array)
        if elements is None:
            _set_uint(count, len(starts))
            return
        capacity = _capacity(elements)
        if _uint(count) < len(starts) or (capacity is not None and capacity < len(starts)):
            _set_uint(count, len(starts))
            raise NvmlFailure('NVML_ERROR_INSUFFICIENT_SIZE')
        for position, start in enumerate(starts):
            elements[position].start = start
            elements[position].size = size
        _set_uint(count, len(starts))

    @staticmethod
    def _fill_handles(values, array, count):
        """Instance lists: the caller sizes the array (from the profile's max count); count is output only."""
        elements = _elements(array)
        if elements is None:
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        capacity = _capacity(elements)
        if capacity is not None and capacity < len(values):
            _set_uint(count, len(values))
            raise NvmlFailure('NVML_ERROR_INSUFFICIENT_SIZE')
        base = ctypes.addressof(elements) if isinstance(elements, ctypes.Array) else ctypes.cast(elements, ctypes.c_void_p).value
        for position, value in enumerate(values):
            ctypes.c_void_p.from_address(base + position * ctypes.sizeof(ctypes.c_void_p)).value = value
        _set_uint(count, len(values))

    def _mig_uuid(self, ctx):
        return 'MIG-' + _derived_uuid(ctx.gpu['uuid'], ctx.gi['id'], ctx.ci['id'])

    # ---- system --------------------------------------------------------------------------

    def sym_nvmlInitWithFlags(self, flags):
        state = load_state(self.path)      # a broken state file is a SimulatorError, not an NVML code
        matched, code = _take_fault(state, 'nvmlInitWithFlags', None)
        if matched:
            with _file_lock(self.path):
                state = load_state(self.path)
                matched, code = _take_fault(state, 'nvmlInitWithFlags', None)
                save_state(self.path, state)
        if code is not None:
            raise NvmlFailure(code)
        self.state = state
        self.init_count += 1

    def sym_nvmlInit_v2(self):
        return self.sym_nvmlInitWithFlags(0)

    def sym_nvmlShutdown(self):
        self.init_count -= 1

    def sym_nvmlErrorString(self, code):
        return _ERROR_STRINGS.get(_uint(code), b'Unknown Error')

    def sym_nvmlSystemGetDriverVersion(self, buffer, length):
        self._read('nvmlSystemGetDriverVersion')
        _write_text(buffer, length, self.state['driver_version'])

    def sym_nvmlSystemGetNVMLVersion(self, buffer, length):
        self._read('nvmlSystemGetNVMLVersion')
        driver = self.state['driver_version']
        # NVML's version is "<CUDA major>.<driver>": CUDA 13 came with R580.
        major = 13 if driver.split('.')[0].isdigit() and int(driver.split('.')[0]) >= 580 else 12
        _write_text(buffer, length, self.state.get('nvml_version') or '%d.%s' % (major, driver))

    def sym_nvmlDeviceGetCount_v2(self, count):
        self._read('nvmlDeviceGetCount_v2')
        _set_uint(count, len(self.state['gpus']))

    def sym_nvmlDeviceGetHandleByIndex_v2(self, index, handle_out):
        index = _uint(index)
        self._fault('nvmlDeviceGetHandleByIndex_v2', index)     # a fault's gpu is the index asked for
        if not 0 <= index < len(self.state['gpus']):
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        _store_handle(handle_out, _encode(_TAG_DEVICE, index))

    def sym_nvmlDeviceGetHandleByUUID(self, uuid, handle_out):
        """A GPU UUID gives the GPU, a ``MIG-`` UUID the MIG device (as NVML does since R470)."""
        self._read('nvmlDeviceGetHandleByUUID')
        wanted = _text(uuid)
        for index, gpu in enumerate(self.state['gpus']):
            if gpu['uuid'] == wanted:
                return _store_handle(handle_out, _encode(_TAG_DEVICE, index))
            for gi, ci in _mig_devices(gpu):
                if wanted == 'MIG-' + _derived_uuid(gpu['uuid'], gi['id'], ci['id']):
                    return _store_handle(handle_out, _encode(_TAG_MIG, index, gi['id'], ci['id']))
        raise NvmlFailure('NVML_ERROR_NOT_FOUND')

    def sym_nvmlDeviceGetHandleByPciBusId_v2(self, bus_id, handle_out):
        self._read('nvmlDeviceGetHandleByPciBusId_v2')
        wanted = _text(bus_id).upper()
        for index, gpu in enumerate(self.state['gpus']):
            if wanted in (gpu['pci_bus_id'].upper(), gpu['pci_bus_id'][4:].upper()):
                return _store_handle(handle_out, _encode(_TAG_DEVICE, index))
        raise NvmlFailure('NVML_ERROR_NOT_FOUND')

    # ---- device identity ------------------------------------------------------------------

    def sym_nvmlDeviceGetIndex(self, handle, index_out):
        _set_uint(index_out, self._read('nvmlDeviceGetIndex', handle).index)

    def sym_nvmlDeviceGetName(self, handle, buffer, length):
        ctx = self._read('nvmlDeviceGetName', handle, _ANY_DEVICE)
        name = ctx.model['nvml_name']
        if ctx.tag == _TAG_MIG:     # e.g. "NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb"
            name += ' MIG ' + compute_instance_name(ctx.gi_profile, ctx.ci_slices)
        _write_text(buffer, length, name)

    def sym_nvmlDeviceGetUUID(self, handle, buffer, length):
        ctx = self._read('nvmlDeviceGetUUID', handle, _ANY_DEVICE)
        _write_text(buffer, length, self._mig_uuid(ctx) if ctx.tag == _TAG_MIG else ctx.gpu['uuid'])

    def sym_nvmlDeviceGetPciInfo_v3(self, handle, info_out):
        ctx = self._read('nvmlDeviceGetPciInfo_v3', handle, _ANY_DEVICE)
        info = _target(info_out)
        bus_id = ctx.gpu['pci_bus_id']
        domain, bus, device = bus_id.split(':')[0], bus_id.split(':')[1], bus_id.split(':')[2].split('.')[0]
        info.busId = bus_id.encode()
        info.busIdLegacy = ('%04X:%s' % (int(domain, 16), bus_id.split(':', 1)[1])).encode()
        info.domain = int(domain, 16)
        info.bus = int(bus, 16)
        info.device = int(device, 16)
        info.pciDeviceId = ctx.model['pci_device_id']
        info.pciSubSystemId = 0

    def _memory_total(self, ctx):
        return (ctx.gi_profile['memory_mib'] if ctx.tag == _TAG_MIG else ctx.model['memory_total_mib']) * _MIB

    def sym_nvmlDeviceGetMemoryInfo(self, handle, info_out):
        ctx = self._read('nvmlDeviceGetMemoryInfo', handle, _ANY_DEVICE)
        info = _target(info_out)
        info.total = info.free = self._memory_total(ctx)
        info.used = 0

    def sym_nvmlDeviceGetMemoryInfo_v2(self, handle, info_out):
        ctx = self._read('nvmlDeviceGetMemoryInfo_v2', handle, _ANY_DEVICE)
        info = _target(info_out)
        if getattr(info, 'version', None) != MEMORY_INFO_V2:
            raise NvmlFailure('NVML_ERROR_ARGUMENT_VERSION_MISMATCH')
        info.total = info.free = self._memory_total(ctx)
        info.reserved = info.used = 0

    def sym_nvmlDeviceGetArchitecture(self, handle, arch_out):
        _set_uint(arch_out, self._read('nvmlDeviceGetArchitecture', handle, _ANY_DEVICE).model['architecture'])

    # ---- MIG mode --------------------------------------------------------------------------

    def sym_nvmlDeviceGetMigMode(self, handle, current_out, pending_out):
        ctx = self._read('nvmlDeviceGetMigMode', handle)
        self._require_mig_capable(ctx)
        _set_uint(current_out, 1 if ctx.gpu['mig']['current'] == 'enabled' else 0)
        _set_uint(pending_out, 1 if ctx.gpu['mig']['pending'] == 'enabled' else 0)

    def sym_nvmlDeviceSetMigMode(self, handle, mode, status_out):
        mode = _uint(mode)

        def change(state, ctx):
            self._require_mig_capable(ctx)
            if mode not in (0, 1):
                raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
            wanted = 'enabled' if mode else 'disabled'
            mig = ctx.gpu['mig']
            immediate = mode_applies_immediately(ctx.model)
            if mig['pending'] == wanted and (mig['current'] == wanted or not immediate):
                return None     # already so: success, nothing to do
            if _gpu_pids(ctx.gpu):
                raise NvmlFailure('NVML_ERROR_IN_USE')
            if wanted == 'disabled' and ctx.gpu['gpu_instances']:
                raise NvmlFailure('NVML_ERROR_IN_USE')
            mig['pending'] = wanted
            if immediate:
                mig['current'] = wanted
            return None
        self._mutate('nvmlDeviceSetMigMode', handle, _PARENT, {'mode': mode}, change)
        _set_uint(status_out, SUCCESS)

    # ---- GPU instance profiles -----------------------------------------------------------------

    def _gi_profile_info(self, call, handle, enum, info_out, versioned):
        ctx = self._read(call, handle)
        info = _target(info_out)
        if versioned and getattr(info, 'version', None) != GI_PROFILE_INFO_V2:
            raise NvmlFailure('NVML_ERROR_ARGUMENT_VERSION_MISMATCH')
        self._require_mig_capable(ctx)
        enum = _uint(enum)
        if not 0 <= enum < GI_PROFILE_COUNT:
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        profiles = [p for p in ctx.model['profiles'] if p['enum'] == enum]
        if not profiles:
            raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')
        self._write_gi_profile(info, profiles[0], versioned)

    @staticmethod
    def _write_gi_profile(info, profile, versioned):
        info.id = profile['id']
        info.isP2pSupported = 0
        info.sliceCount = profile['compute_slices']
        info.instanceCount = profile['max_count']
        info.multiprocessorCount = profile['multiprocessors']
        info.copyEngineCount = profile['copy_engines']
        info.decoderCount = profile['decoders']
        info.encoderCount = profile['encoders']
        info.jpegCount = profile['jpegs']
        info.ofaCount = profile['ofas']
        info.memorySizeMB = profile['memory_mib']
        if versioned:
            info.name = ('MIG ' + profile['name']).encode()

    def sym_nvmlDeviceGetGpuInstanceProfileInfoV(self, handle, enum, info_out):
        self._gi_profile_info('nvmlDeviceGetGpuInstanceProfileInfoV', handle, enum, info_out, True)

    def sym_nvmlDeviceGetGpuInstanceProfileInfo(self, handle, enum, info_out):
        self._gi_profile_info('nvmlDeviceGetGpuInstanceProfileInfo', handle, enum, info_out, False)

    def sym_nvmlDeviceGetGpuInstanceProfileInfoByIdV(self, handle, profile_id, info_out):
        ctx = self._read('nvmlDeviceGetGpuInstanceProfileInfoByIdV', handle)
        info = _target(info_out)
        if getattr(info, 'version', None) != GI_PROFILE_INFO_V2:
            raise NvmlFailure('NVML_ERROR_ARGUMENT_VERSION_MISMATCH')
        self._require_mig_capable(ctx)
        self._write_gi_profile(info, _profile_by_id(ctx.model, _uint(profile_id)), True)

    def sym_nvmlDeviceGetGpuInstancePossiblePlacements_v2(self, handle, profile_id, placements, count):
        ctx = self._read('nvmlDeviceGetGpuInstancePossiblePlacements_v2', handle)
        self._require_mig_capable(ctx)
        profile = _profile_by_id(ctx.model, _uint(profile_id))
        self._fill_placements(profile['starts'], profile['memory_slices'], placements, count)

    def sym_nvmlDeviceGetGpuInstanceRemainingCapacity(self, handle, profile_id, count):
        ctx = self._read('nvmlDeviceGetGpuInstanceRemainingCapacity', handle)
        self._require_mig_enabled(ctx)
        profile = _profile_by_id(ctx.model, _uint(profile_id))
        _set_uint(count, _gi_remaining(ctx.model, ctx.gpu['gpu_instances'], profile))

    # ---- GPU instances ------------------------------------------------------------------------

    def _create_gi(self, call, handle, profile_id, start, handle_out):
        def change(state, ctx):
            self._require_mig_enabled(ctx)
            profile = _profile_by_id(ctx.model, profile_id)
            instances = ctx.gpu['gpu_instances']
            chosen = start
            if chosen is None:
                chosen = _auto_gi_start(ctx.model, instances, profile)
                problem = ('NVML_ERROR_INSUFFICIENT_RESOURCES', '') if chosen is None else None
            else:
                problem = _gi_problem(ctx.model, instances, profile, chosen)
            if problem:
                raise NvmlFailure(problem[0])
            gi_id = _lowest_free(1, instances)
            instances.append({'id': gi_id, 'profile': profile['name'], 'start': chosen, 'compute_instances': []})
            return {'gpu_instance_id': gi_id, 'start': chosen}
        arguments = {'profile_id': profile_id}
        if start is not None:
            arguments['start'] = start
        created = self._mutate(call, handle, _PARENT, arguments, change)
        _store_handle(handle_out, _encode(_TAG_GI, _decode(handle)[1], created['gpu_instance_id']))

    def sym_nvmlDeviceCreateGpuInstance(self, handle, profile_id, handle_out):
        self._create_gi('nvmlDeviceCreateGpuInstance', handle, _uint(profile_id), None, handle_out)

    def sym_nvmlDeviceCreateGpuInstanceWithPlacement(self, handle, profile_id, placement, handle_out):
        # The placement's size is not checked: callers pass the size from the possible placements, or 0.
        self._create_gi('nvmlDeviceCreateGpuInstanceWithPlacement', handle, _uint(profile_id), _target(placement).start, handle_out)

    def sym_nvmlDeviceGetGpuInstances(self, handle, profile_id, instances_out, count):
        ctx = self._read('nvmlDeviceGetGpuInstances', handle)
        self._require_mig_enabled(ctx)
        profile = _profile_by_id(ctx.model, _uint(profile_id))
        found = sorted((gi for gi in ctx.gpu['gpu_instances'] if gi['profile'] == profile['name']), key=lambda g: g['start'])
        self._fill_handles([_encode(_TAG_GI, ctx.index, gi['id']) for gi in found], instances_out, count)

    def sym_nvmlDeviceGetGpuInstanceById(self, handle, gi_id, handle_out):
        ctx = self._read('nvmlDeviceGetGpuInstanceById', handle)
        self._require_mig_enabled(ctx)
        gi_id = _uint(gi_id)
        if _find(ctx.gpu['gpu_instances'], gi_id) is None:
            raise NvmlFailure('NVML_ERROR_NOT_FOUND')
        _store_handle(handle_out, _encode(_TAG_GI, ctx.index, gi_id))

    def sym_nvmlGpuInstanceGetInfo(self, handle, info_out):
        ctx = self._read('nvmlGpuInstanceGetInfo', handle, (_TAG_GI,))
        info = _target(info_out)
        info.device = _as_pointer(_encode(_TAG_DEVICE, ctx.index), type(info.device))
        info.id = ctx.gi['id']
        info.profileId = ctx.gi_profile['id']
        info.placement.start = ctx.gi['start']
        info.placement.size = ctx.gi_profile['memory_slices']

    def sym_nvmlGpuInstanceDestroy(self, handle):
        gi_id = _decode(handle)[2]

        def change(state, ctx):
            if ctx.gi['compute_instances']:
                raise NvmlFailure('NVML_ERROR_IN_USE')
            ctx.gpu['gpu_instances'].remove(ctx.gi)
        self._mutate('nvmlGpuInstanceDestroy', handle, (_TAG_GI,), {'gpu_instance_id': gi_id}, change)

    # ---- compute instance profiles ---------------------------------------------------------------

    def _ci_profile_info(self, call, handle, enum, engine, info_out, versioned):
        ctx = self._read(call, handle, (_TAG_GI,))
        info = _target(info_out)
        if versioned and getattr(info, 'version', None) != CI_PROFILE_INFO_V2:
            raise NvmlFailure('NVML_ERROR_ARGUMENT_VERSION_MISMATCH')
        enum = _uint(enum)
        if not 0 <= enum < CI_PROFILE_COUNT or not 0 <= _uint(engine) < CI_ENGINE_PROFILE_COUNT:
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        gi_profile = ctx.gi_profile
        slices = [s for s in gi_profile['compute_placements'] if CI_ENUM_BY_SLICES[s] == enum]
        if not slices:
            raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')
        slices = slices[0]
        info.id = enum
        info.sliceCount = slices
        info.instanceCount = len(gi_profile['compute_placements'][slices])
        info.multiprocessorCount = gi_profile['multiprocessors'] * slices // gi_profile['compute_slices']
        info.sharedCopyEngineCount = gi_profile['copy_engines']
        info.sharedDecoderCount = gi_profile['decoders']
        info.sharedEncoderCount = gi_profile['encoders']
        info.sharedJpegCount = gi_profile['jpegs']
        info.sharedOfaCount = gi_profile['ofas']
        if versioned:
            info.name = ('MIG ' + compute_instance_name(gi_profile, slices)).encode()

    def sym_nvmlGpuInstanceGetComputeInstanceProfileInfoV(self, handle, enum, engine, info_out):
        self._ci_profile_info('nvmlGpuInstanceGetComputeInstanceProfileInfoV', handle, enum, engine, info_out, True)

    def sym_nvmlGpuInstanceGetComputeInstanceProfileInfo(self, handle, enum, engine, info_out):
        self._ci_profile_info('nvmlGpuInstanceGetComputeInstanceProfileInfo', handle, enum, engine, info_out, False)

    def sym_nvmlGpuInstanceGetComputeInstancePossiblePlacements(self, handle, profile_id, placements, count):
        ctx = self._read('nvmlGpuInstanceGetComputeInstancePossiblePlacements', handle, (_TAG_GI,))
        slices = _ci_slices_by_id(ctx.gi_profile, _uint(profile_id))
        self._fill_placements(ctx.gi_profile['compute_placements'][slices], slices, placements, count)

    def sym_nvmlGpuInstanceGetComputeInstanceRemainingCapacity(self, handle, profile_id, count):
        ctx = self._read('nvmlGpuInstanceGetComputeInstanceRemainingCapacity', handle, (_TAG_GI,))
        slices = _ci_slices_by_id(ctx.gi_profile, _uint(profile_id))
        _set_uint(count, _ci_remaining(ctx.gi_profile, ctx.gi['compute_instances'], slices))

    # ---- compute instances ------------------------------------------------------------------------

    def _create_ci(self, call, handle, profile_id, start, handle_out):
        gi_id = _decode(handle)[2]

        def change(state, ctx):
            slices = _ci_slices_by_id(ctx.gi_profile, profile_id)
            cis = ctx.gi['compute_instances']
            chosen = start
            if chosen is None:
                chosen = _auto_ci_start(ctx.gi_profile, cis, slices)
                problem = ('NVML_ERROR_INSUFFICIENT_RESOURCES', '') if chosen is None else None
            else:
                problem = _ci_problem(ctx.gi_profile, cis, slices, chosen)
            if problem:
                raise NvmlFailure(problem[0])
            ci_id = _lowest_free(0, cis)
            cis.append({'id': ci_id, 'profile': compute_instance_name(ctx.gi_profile, slices), 'start': chosen, 'pids': []})
            return {'compute_instance_id': ci_id, 'start': chosen}
        arguments = {'gpu_instance_id': gi_id, 'profile_id': profile_id}
        if start is not None:
            arguments['start'] = start
        created = self._mutate(call, handle, (_TAG_GI,), arguments, change)
        _store_handle(handle_out, _encode(_TAG_CI, _decode(handle)[1], gi_id, created['compute_instance_id']))

    def sym_nvmlGpuInstanceCreateComputeInstance(self, handle, profile_id, handle_out):
        self._create_ci('nvmlGpuInstanceCreateComputeInstance', handle, _uint(profile_id), None, handle_out)

    def sym_nvmlGpuInstanceCreateComputeInstanceWithPlacement(self, handle, profile_id, placement, handle_out):
        self._create_ci('nvmlGpuInstanceCreateComputeInstanceWithPlacement', handle, _uint(profile_id), _target(placement).start,
                        handle_out)

    def sym_nvmlGpuInstanceGetComputeInstances(self, handle, profile_id, instances_out, count):
        ctx = self._read('nvmlGpuInstanceGetComputeInstances', handle, (_TAG_GI,))
        name = compute_instance_name(ctx.gi_profile, _ci_slices_by_id(ctx.gi_profile, _uint(profile_id)))
        found = sorted((ci for ci in ctx.gi['compute_instances'] if ci['profile'] == name), key=lambda c: c['start'])
        self._fill_handles([_encode(_TAG_CI, ctx.index, ctx.gi['id'], ci['id']) for ci in found], instances_out, count)

    def sym_nvmlGpuInstanceGetComputeInstanceById(self, handle, ci_id, handle_out):
        ctx = self._read('nvmlGpuInstanceGetComputeInstanceById', handle, (_TAG_GI,))
        ci_id = _uint(ci_id)
        if _find(ctx.gi['compute_instances'], ci_id) is None:
            raise NvmlFailure('NVML_ERROR_NOT_FOUND')
        _store_handle(handle_out, _encode(_TAG_CI, ctx.index, ctx.gi['id'], ci_id))

    def sym_nvmlComputeInstanceGetInfo_v2(self, handle, info_out):
        ctx = self._read('nvmlComputeInstanceGetInfo_v2', handle, (_TAG_CI,))
        info = _target(info_out)
        info.device = _as_pointer(_encode(_TAG_DEVICE, ctx.index), type(info.device))
        info.gpuInstance = _as_pointer(_encode(_TAG_GI, ctx.index, ctx.gi['id']), type(info.gpuInstance))
        info.id = ctx.ci['id']
        info.profileId = CI_ENUM_BY_SLICES[ctx.ci_slices]
        info.placement.start = ctx.ci['start']
        info.placement.size = ctx.ci_slices

    def sym_nvmlComputeInstanceDestroy(self, handle):
        dummy_tag, dummy_index, gi_id, ci_id = _decode(handle)

        def change(state, ctx):
            if ctx.ci['pids']:
                raise NvmlFailure('NVML_ERROR_IN_USE')
            ctx.gi['compute_instances'].remove(ctx.ci)
        self._mutate('nvmlComputeInstanceDestroy', handle, (_TAG_CI,), {'gpu_instance_id': gi_id, 'compute_instance_id': ci_id}, change)

    # ---- MIG devices --------------------------------------------------------------------------------

    def sym_nvmlDeviceIsMigDeviceHandle(self, handle, result_out):
        ctx = self._read('nvmlDeviceIsMigDeviceHandle', handle, _ANY_DEVICE)
        _set_uint(result_out, 1 if ctx.tag == _TAG_MIG else 0)

    def sym_nvmlDeviceGetMaxMigDeviceCount(self, handle, count_out):
        ctx = self._read('nvmlDeviceGetMaxMigDeviceCount', handle)
        self._require_mig_capable(ctx)
        # one MIG device per compute slice at most: the 1g profile's max count (7, or 4 on A30)
        _set_uint(count_out, max(p['max_count'] for p in ctx.model['profiles'] if p['memory_slices'] == 1))

    def sym_nvmlDeviceGetMigDeviceHandleByIndex(self, handle, position, handle_out):
        ctx = self._read('nvmlDeviceGetMigDeviceHandleByIndex', handle)
        self._require_mig_enabled(ctx)
        devices = _mig_devices(ctx.gpu)
        position = _uint(position)
        if position >= len(devices):
            raise NvmlFailure('NVML_ERROR_NOT_FOUND')
        gi, ci = devices[position]
        _store_handle(handle_out, _encode(_TAG_MIG, ctx.index, gi['id'], ci['id']))

    def sym_nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle, handle_out):
        ctx = self._read('nvmlDeviceGetDeviceHandleFromMigDeviceHandle', handle, (_TAG_MIG,))
        _store_handle(handle_out, _encode(_TAG_DEVICE, ctx.index))

    def _mig_device(self, call, handle):
        """A MIG device handle's context; NOT_SUPPORTED for a parent GPU handle."""
        if _decode(handle)[0] == _TAG_DEVICE:
            self._read(call, handle)
            raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')
        return self._read(call, handle, (_TAG_MIG,))

    def sym_nvmlDeviceGetGpuInstanceId(self, handle, id_out):
        _set_uint(id_out, self._mig_device('nvmlDeviceGetGpuInstanceId', handle).gi['id'])

    def sym_nvmlDeviceGetComputeInstanceId(self, handle, id_out):
        _set_uint(id_out, self._mig_device('nvmlDeviceGetComputeInstanceId', handle).ci['id'])

    # ---- processes ------------------------------------------------------------------------------------

    def _running_processes(self, call, handle, count, infos):
        """On a MIG device: its processes. On a GPU: every process, MIG ones with their instance ids.

        The two-call protocol pynvml uses: a NULL array (or a short one) gets the count and
        INSUFFICIENT_SIZE when there are processes, SUCCESS when there are none.
        """
        ctx = self._read(call, handle, _ANY_DEVICE)
        if ctx.tag == _TAG_MIG:
            processes = [(pid, ctx.gi['id'], ctx.ci['id']) for pid in ctx.ci['pids']]
        else:
            processes = [(pid, _NOT_AVAILABLE_UINT, _NOT_AVAILABLE_UINT) for pid in ctx.gpu['pids']]
            for gi, ci in _mig_devices(ctx.gpu):
                processes.extend((pid, gi['id'], ci['id']) for pid in ci['pids'])
        elements = _elements(infos)
        if elements is None or _uint(count) < len(processes):
            _set_uint(count, len(processes))
            if processes:
                raise NvmlFailure('NVML_ERROR_INSUFFICIENT_SIZE')
            return
        for position, (pid, gi_id, ci_id) in enumerate(processes):
            elements[position].pid = pid
            elements[position].usedGpuMemory = _PROCESS_MEMORY
            elements[position].gpuInstanceId = gi_id
            elements[position].computeInstanceId = ci_id
        _set_uint(count, len(processes))

    def sym_nvmlDeviceGetComputeRunningProcesses_v3(self, handle, count, infos):
        self._running_processes('nvmlDeviceGetComputeRunningProcesses_v3', handle, count, infos)

    def sym_nvmlDeviceGetComputeRunningProcesses_v2(self, handle, count, infos):
        self._running_processes('nvmlDeviceGetComputeRunningProcesses_v2', handle, count, infos)


# The simulated C symbols, e.g. 'nvmlDeviceGetMigMode' (also the call names faults may name).
SYMBOLS = tuple(sorted(name[len('sym_'):] for name in dir(SimulatedNvml) if name.startswith('sym_')))


def install(pynvml_module, state_path):
    """Put a fresh simulated library into ``pynvml`` in place of libnvidia-ml.so.1; returns it.

    Always replaces what was there and clears pynvml's symbol cache, so calling it again (a
    new module run, a test) starts clean; the state itself lives in the file.
    """
    lib = SimulatedNvml(state_path)
    pynvml_module.nvmlLib = lib
    pynvml_module._nvmlGetFunctionPointer_cache.clear()
    return lib


def uninstall(pynvml_module):
    """Forget the simulated library: the next ``nvmlInit`` would load the real one (test teardown)."""
    pynvml_module.nvmlLib = None
    pynvml_module._nvmlGetFunctionPointer_cache.clear()
