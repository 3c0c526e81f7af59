# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""A simulated ``libnvidia-ml`` for the real ``pynvml`` bindings, backed by a JSON state file.

``install(pynvml, path)`` puts a library object into ``pynvml.nvmlLib`` whose attributes are
Python callables named like the C symbols. They receive what the pynvml wrappers pass
(``byref`` objects, ints, handle pointers, caller-allocated arrays) and return an NVML
status, so the wrappers' marshalling and error mapping run unchanged.

Mutations are written back to the state file (atomically, under ``<state>.lock``) and
logged to ``<state>.calls.jsonl``. See docs/simulator.md for the schema.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import ctypes
import fcntl
import hashlib
import json
import os
import tempfile

from ansible_collections.gpufleet.mig.plugins.module_utils._gpu_models import (
    CI_ENUM_BY_SLICES,
    COMPUTE_PLACEMENTS,
    get_model,
    mode_applies_immediately,
)

SUCCESS = 0
ERRORS = {
    'NVML_ERROR_UNINITIALIZED': 1, 'NVML_ERROR_INVALID_ARGUMENT': 2, 'NVML_ERROR_NOT_SUPPORTED': 3,
    'NVML_ERROR_NO_PERMISSION': 4, 'NVML_ERROR_NOT_FOUND': 6, 'NVML_ERROR_INSUFFICIENT_SIZE': 7,
    'NVML_ERROR_FUNCTION_NOT_FOUND': 13, 'NVML_ERROR_RESET_REQUIRED': 16, 'NVML_ERROR_IN_USE': 19,
    'NVML_ERROR_INSUFFICIENT_RESOURCES': 23, 'NVML_ERROR_ARGUMENT_VERSION_MISMATCH': 25, 'NVML_ERROR_UNKNOWN': 999,
}
ERROR_NAMES = dict((code, name) for name, code in ERRORS.items())
_ERROR_STRINGS = {1: b'Uninitialized', 2: b'Invalid Argument', 3: b'Not Supported', 4: b'Insufficient Permissions',
                  6: b'Not Found', 7: b'Insufficient Size', 13: b'Function Not Found', 16: b'GPU requires restart',
                  19: b'In use by another client', 23: b'Insufficient resources', 25: b'Argument version mismatch',
                  999: b'Unknown Error'}

GI_PROFILE_INFO_V2 = 0x02000098
CI_PROFILE_INFO_V2 = 0x02000088
GI_PROFILE_COUNT = 0x12
CI_PROFILE_COUNT = 0x9
_MIB = 1024 * 1024

# Handle tags: a handle is a nonzero integer address that encodes what it points to.
_TAG_DEVICE, _TAG_GI, _TAG_CI, _TAG_MIG = 1, 2, 3, 4

MUTATING_CALLS = ('nvmlDeviceSetMigMode', 'nvmlDeviceCreateGpuInstance', 'nvmlDeviceCreateGpuInstanceWithPlacement',
                  'nvmlGpuInstanceDestroy', 'nvmlGpuInstanceCreateComputeInstance',
                  'nvmlGpuInstanceCreateComputeInstanceWithPlacement', 'nvmlComputeInstanceDestroy')


class SimulatorError(Exception):
    """A state file that cannot describe a host, or a refused simulated reset."""


class NvmlFailure(Exception):
    """Internal: end a simulated call with an NVML error code."""

    def __init__(self, name):
        super(NvmlFailure, self).__init__(name)
        self.code = ERRORS[name]


def _handle(tag, gpu, gi_id=0, ci_id=0):
    return (tag << 40) | ((gpu + 1) << 24) | ((gi_id + 1) << 12) | (ci_id + 1)


def _decode(handle):
    value = ctypes.cast(handle, ctypes.c_void_p).value if not isinstance(handle, int) else handle
    if not value:
        raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
    return value >> 40, ((value >> 24) & 0xFFFF) - 1, ((value >> 12) & 0xFFF) - 1, (value & 0xFFF) - 1


def _store_handle(reference, value):
    """Write a handle value into the pointer that ``byref(handle)`` refers to."""
    target = reference._obj
    ctypes.memmove(ctypes.addressof(target), ctypes.byref(ctypes.c_void_p(value)), ctypes.sizeof(ctypes.c_void_p))


def _int(value):
    return value.value if hasattr(value, 'value') else int(value)


def _text(value):
    raw = value.value if hasattr(value, 'value') else value
    return raw.decode() if isinstance(raw, bytes) else raw


# ---- state file ------------------------------------------------------------------

@contextlib.contextmanager
def _file_lock(path):
    with open(path + '.lock', 'a') as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _profile_by_name(model, name):
    for profile in model['profiles']:
        if profile['name'] == name:
            return profile
    return None


def _ci_name(gi_profile, ci_slices):
    if ci_slices == gi_profile['compute_slices']:
        return gi_profile['name']
    return '%dc.%s' % (ci_slices, gi_profile['name'])


def _ci_slices_by_name(gi_profile, name):
    for slices in COMPUTE_PLACEMENTS[gi_profile['compute_slices']]:
        if _ci_name(gi_profile, slices) == name:
            return slices
    return None


def load_state(path):
    """Read and validate a state file; fills defaults and ids (stable once written)."""
    try:
        with open(path) as handle:
            state = json.load(handle)
    except (IOError, OSError, ValueError) as exc:
        raise SimulatorError('cannot read simulator state %s: %s' % (path, exc))
    if not isinstance(state, dict) or not isinstance(state.get('gpus'), list):
        raise SimulatorError('simulator state %s: needs a "gpus" list' % path)
    state.setdefault('driver_version', '580.95.05')
    state.setdefault('faults', [])
    for index, gpu in enumerate(state['gpus']):
        _validate_gpu(path, index, gpu)
    return state


def _validate_gpu(path, index, gpu):
    where = 'simulator state %s: gpus[%d]' % (path, index)
    try:
        model = get_model(gpu.get('model'))
    except KeyError as exc:
        raise SimulatorError('%s: %s' % (where, exc.args[0]))
    digest = hashlib.sha1(('%d-%s' % (index, gpu['model'])).encode()).hexdigest()
    gpu.setdefault('uuid', 'GPU-%s-%s-%s-%s-%s' % (digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32]))
    gpu.setdefault('pci_bus_id', '00000000:%02X:00.0' % (0x07 + 0x10 * index))
    mig = gpu.setdefault('mig', {})
    mig.setdefault('current', 'disabled')
    mig.setdefault('pending', mig['current'])
    for key in ('current', 'pending'):
        if mig[key] not in ('enabled', 'disabled'):
            raise SimulatorError('%s: mig.%s must be enabled or disabled' % (where, key))
    if not model['mig_capable'] and 'enabled' in (mig['current'], mig['pending']):
        raise SimulatorError('%s: %s is not MIG-capable' % (where, gpu['model']))
    gpu.setdefault('pids', [])
    instances = gpu.setdefault('gpu_instances', [])
    if instances and mig['current'] != 'enabled':
        raise SimulatorError('%s: GPU instances need mig.current enabled' % where)
    used = 0
    media = 0
    taken_ids = set(gi['id'] for gi in instances if 'id' in gi)
    for gi in instances:
        profile = _profile_by_name(model, gi.get('profile'))
        if profile is None:
            raise SimulatorError('%s: unknown GPU instance profile %r for %s' % (where, gi.get('profile'), gpu['model']))
        if gi.get('start') not in profile['starts']:
            raise SimulatorError('%s: %s cannot start at slice %r (starts %s)' % (where, profile['name'], gi.get('start'), list(profile['starts'])))
        bits = ((1 << profile['memory_slices']) - 1) << gi['start']
        if used & bits:
            raise SimulatorError('%s: %s at slice %d overlaps another GPU instance' % (where, profile['name'], gi['start']))
        used |= bits
        media += profile['name'].endswith('+me')
        if 'id' not in gi:
            gi['id'] = min(set(range(1, 64)) - taken_ids)
            taken_ids.add(gi['id'])
        _validate_compute_instances(where, profile, gi)
    if media > 1:
        raise SimulatorError('%s: only one +me GPU instance per GPU' % where)


def _validate_compute_instances(where, profile, gi):
    cis = gi.setdefault('compute_instances', [])
    used = 0
    taken_ids = set(ci['id'] for ci in cis if 'id' in ci)
    for ci in cis:
        slices = _ci_slices_by_name(profile, ci.get('profile'))
        if slices is None:
            raise SimulatorError('%s: compute instance %r is not valid in %s' % (where, ci.get('profile'), profile['name']))
        if ci.get('start') not in COMPUTE_PLACEMENTS[profile['compute_slices']][slices]:
            raise SimulatorError('%s: compute instance %s cannot start at %r' % (where, ci['profile'], ci.get('start')))
        bits = ((1 << slices) - 1) << ci['start']
        if used & bits:
            raise SimulatorError('%s: compute instances overlap in GPU instance %s' % (where, gi.get('id')))
        used |= bits
        ci.setdefault('pids', [])
        if 'id' not in ci:
            ci['id'] = min(set(range(0, 64)) - taken_ids)
            taken_ids.add(ci['id'])


def save_state(path, state):
    directory = os.path.dirname(os.path.abspath(path))
    descriptor, temporary = tempfile.mkstemp(prefix='.sim-', dir=directory)
    with os.fdopen(descriptor, 'w') as handle:
        json.dump(state, handle, indent=1, sort_keys=True)
    os.rename(temporary, path)


def _log(path, call, gpu, result, **arguments):
    entry = {'call': call, 'gpu': gpu, 'result': result, 'args': arguments}
    with open(path + '.calls.jsonl', 'a') as handle:
        handle.write(json.dumps(entry, sort_keys=True) + '\n')


def _gpu_pids(gpu):
    pids = set(gpu.get('pids') or [])
    for gi in gpu['gpu_instances']:
        for ci in gi['compute_instances']:
            pids.update(ci.get('pids') or [])
    return sorted(pids)


def simulate_gpu_reset(path, index):
    """What ``nvidia-smi --gpu-reset -i <index>`` does: apply the pending mode, drop instances."""
    with _file_lock(path):
        state = load_state(path)
        if not 0 <= index < len(state['gpus']):
            raise SimulatorError('no GPU %d to reset' % index)
        gpu = state['gpus'][index]
        pids = _gpu_pids(gpu)
        if pids:
            _log(path, 'gpu_reset', index, 'refused', pids=pids)
            raise SimulatorError('GPU %d is in use by processes %s; a reset needs an idle GPU' % (index, pids))
        gpu['mig']['current'] = gpu['mig']['pending']
        gpu['gpu_instances'] = []
        save_state(path, state)
        _log(path, 'gpu_reset', index, 'NVML_SUCCESS')


def simulate_reboot(path):
    """A host reboot: instances and processes gone; Ampere applies its pending mode, Hopper+ loses MIG mode."""
    with _file_lock(path):
        state = load_state(path)
        for gpu in state['gpus']:
            model = get_model(gpu['model'])
            gpu['gpu_instances'] = []
            gpu['pids'] = []
            if mode_applies_immediately(model):
                gpu['mig'] = {'current': 'disabled', 'pending': 'disabled'}
            else:
                gpu['mig']['current'] = gpu['mig']['pending']
        save_state(path, state)
        _log(path, 'reboot', None, 'NVML_SUCCESS')


def set_pids(path, index, gi_id, ci_id, pids):
    """Test helper: processes now running on one compute instance."""
    with _file_lock(path):
        state = load_state(path)
        gi = [g for g in state['gpus'][index]['gpu_instances'] if g['id'] == gi_id][0]
        ci = [c for c in gi['compute_instances'] if c['id'] == ci_id][0]
        ci['pids'] = list(pids)
        save_state(path, state)


# ---- the simulated library ---------------------------------------------------------

class SimulatedNvml(object):
    """The object put into ``pynvml.nvmlLib``; its symbols are attached by :func:`install`."""

    def __init__(self, path):
        self.path = path
        self.state = None
        self.call_counts = {}

    # helpers used by the symbols ---------------------------------------------------
    def reload(self):
        self.state = load_state(self.path)

    def gpu(self, index):
        if self.state is None:
            raise NvmlFailure('NVML_ERROR_UNINITIALIZED')
        if not 0 <= index < len(self.state['gpus']):
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        return self.state['gpus'][index]

    def device(self, handle, tags=(_TAG_DEVICE,)):
        tag, index, gi_id, ci_id = _decode(handle)
        if tag not in tags:
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        return index, self.gpu(index), gi_id, ci_id

    def model(self, gpu):
        return get_model(gpu['model'])

    def require_capable(self, gpu):
        if not self.model(gpu)['mig_capable']:
            raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')

    def require_enabled(self, gpu):
        self.require_capable(gpu)
        if gpu['mig']['current'] != 'enabled':
            raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')

    def gi_profile_by_id(self, gpu, profile_id):
        for profile in self.model(gpu)['profiles']:
            if profile['id'] == profile_id:
                return profile
        raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')

    def gpu_instance(self, handle):
        index, gpu, gi_id, dummy = self.device(handle, (_TAG_GI,))
        for gi in gpu['gpu_instances']:
            if gi['id'] == gi_id:
                return index, gpu, gi, _profile_by_name(self.model(gpu), gi['profile'])
        raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')

    def compute_instance(self, handle, tags=(_TAG_CI,)):
        index, gpu, gi_id, ci_id = self.device(handle, tags)
        for gi in gpu['gpu_instances']:
            if gi['id'] == gi_id:
                for ci in gi['compute_instances']:
                    if ci['id'] == ci_id:
                        return index, gpu, gi, ci
        raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')

    def mutate(self, call, index, change, **arguments):
        """Re-read the file, check faults, apply ``change(gpu)``, write back and log; under the file lock."""
        with _file_lock(self.path):
            self.reload()
            gpu = self.gpu(index)
            try:
                self.fire_fault(call, index)
                result = change(gpu)
            except NvmlFailure as failure:
                _log(self.path, call, index, ERROR_NAMES[failure.code], **arguments)
                raise
            save_state(self.path, self.state)
            _log(self.path, call, index, 'NVML_SUCCESS', **arguments)
            return result

    def fire_fault(self, call, index):
        for fault in self.state['faults']:
            if fault.get('call') == call and fault.get('gpu', 0) == index and not fault.get('fired'):
                fault['seen'] = fault.get('seen', 0) + 1
                if fault['seen'] >= fault.get('nth', 1):
                    fault['fired'] = True
                    save_state(self.path, self.state)
                    raise NvmlFailure(fault.get('error', 'NVML_ERROR_UNKNOWN'))
                save_state(self.path, self.state)


def _occupied(model, gpu):
    mask = 0
    for gi in gpu['gpu_instances']:
        profile = _profile_by_name(model, gi['profile'])
        mask |= ((1 << profile['memory_slices']) - 1) << gi['start']
    return mask


def _gi_fits(model, gpu, profile, start):
    if start not in profile['starts']:
        raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
    same = [gi for gi in gpu['gpu_instances'] if gi['profile'] == profile['name']]
    if len(same) >= profile['max_count']:
        return False
    if profile['name'].endswith('+me') and any(gi['profile'].endswith('+me') for gi in gpu['gpu_instances']):
        return False
    return not _occupied(model, gpu) & (((1 << profile['memory_slices']) - 1) << start)


def _ci_fits(gi_profile, gi, slices, start):
    starts = COMPUTE_PLACEMENTS[gi_profile['compute_slices']][slices]
    if start not in starts:
        raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
    mask = 0
    count = 0
    for ci in gi['compute_instances']:
        ci_slices = _ci_slices_by_name(gi_profile, ci['profile'])
        mask |= ((1 << ci_slices) - 1) << ci['start']
        count += ci_slices == slices
    if count >= len(starts):
        return False
    return not mask & (((1 << slices) - 1) << start)


def _ci_slices_by_id(gi_profile, profile_id):
    for slices in COMPUTE_PLACEMENTS[gi_profile['compute_slices']]:
        if CI_ENUM_BY_SLICES[slices] == profile_id:
            return slices
    raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')


def _mig_devices(gpu):
    devices = []
    for gi in sorted(gpu['gpu_instances'], key=lambda g: g['start']):
        for ci in sorted(gi['compute_instances'], key=lambda c: c['start']):
            devices.append((gi, ci))
    return devices


def _symbols(lib):
    """The C symbols, as closures (pynvml sets attributes such as ``restype`` on them)."""
    symbols = {}

    def symbol(function):
        name = function.__name__

        def call(*args):
            lib.call_counts[name] = lib.call_counts.get(name, 0) + 1
            try:
                result = function(*args)
            except NvmlFailure as failure:
                return failure.code
            return SUCCESS if result is None else result
        call.__name__ = name
        symbols[name] = call
        return call

    def fill_placements(starts, size, array, count_ref):
        needed = len(starts)
        if array is None:
            count_ref._obj.value = needed
            return
        if count_ref._obj.value < needed:
            count_ref._obj.value = needed
            raise NvmlFailure('NVML_ERROR_INSUFFICIENT_SIZE')
        for position, start in enumerate(starts):
            array[position].start = start
            array[position].size = size
        count_ref._obj.value = needed

    @symbol
    def nvmlInitWithFlags(flags):
        lib.reload()

    @symbol
    def nvmlInit_v2():
        lib.reload()

    @symbol
    def nvmlShutdown():
        pass

    def nvmlErrorString(code):
        return _ERROR_STRINGS.get(_int(code), b'Unknown Error')
    symbols['nvmlErrorString'] = nvmlErrorString

    @symbol
    def nvmlSystemGetDriverVersion(buffer, length):
        buffer.value = lib.state['driver_version'].encode()

    @symbol
    def nvmlSystemGetNVMLVersion(buffer, length):
        buffer.value = ('13.' + lib.state['driver_version']).encode()

    @symbol
    def nvmlDeviceGetCount_v2(count_ref):
        if lib.state is None:
            raise NvmlFailure('NVML_ERROR_UNINITIALIZED')
        count_ref._obj.value = len(lib.state['gpus'])

    @symbol
    def nvmlDeviceGetHandleByIndex_v2(index, handle_ref):
        lib.gpu(_int(index))
        _store_handle(handle_ref, _handle(_TAG_DEVICE, _int(index)))

    @symbol
    def nvmlDeviceGetHandleByUUID(uuid, handle_ref):
        for index, gpu in enumerate(lib.state['gpus']):
            if gpu['uuid'] == _text(uuid):
                _store_handle(handle_ref, _handle(_TAG_DEVICE, index))
                return
        raise NvmlFailure('NVML_ERROR_NOT_FOUND')

    @symbol
    def nvmlDeviceGetIndex(handle, index_ref):
        index_ref._obj.value = lib.device(handle)[0]

    @symbol
    def nvmlDeviceGetName(handle, buffer, length):
        dummy, gpu, dummy_gi, dummy_ci = lib.device(handle, (_TAG_DEVICE, _TAG_MIG))
        buffer.value = lib.model(gpu)['nvml_name'].encode()

    @symbol
    def nvmlDeviceGetUUID(handle, buffer, length):
        tag, index, gi_id, ci_id = _decode(handle)
        gpu = lib.gpu(index)
        if tag == _TAG_MIG:
            buffer.value = ('MIG-%s-%d-%d' % (gpu['uuid'][4:], gi_id, ci_id)).encode()
        else:
            buffer.value = gpu['uuid'].encode()

    @symbol
    def nvmlDeviceGetPciInfo_v3(handle, info_ref):
        index, gpu, dummy, dummy_ci = lib.device(handle)
        info = info_ref._obj
        info.busId = gpu['pci_bus_id'].encode()
        info.busIdLegacy = gpu['pci_bus_id'][4:].encode()
        info.domain = 0
        info.bus = int(gpu['pci_bus_id'].split(':')[1], 16)
        info.device = 0
        info.pciDeviceId = lib.model(gpu)['pci_device_id']

    @symbol
    def nvmlDeviceGetMemoryInfo(handle, info_ref):
        dummy, gpu, dummy_gi, dummy_ci = lib.device(handle)
        total = lib.model(gpu)['memory_total_mib'] * _MIB
        info_ref._obj.total = total
        info_ref._obj.used = 0
        info_ref._obj.free = total

    @symbol
    def nvmlDeviceGetArchitecture(handle, arch_ref):
        arch_ref._obj.value = lib.model(lib.device(handle)[1])['architecture']

    @symbol
    def nvmlDeviceGetMigMode(handle, current_ref, pending_ref):
        dummy, gpu, dummy_gi, dummy_ci = lib.device(handle)
        lib.require_capable(gpu)
        current_ref._obj.value = 1 if gpu['mig']['current'] == 'enabled' else 0
        pending_ref._obj.value = 1 if gpu['mig']['pending'] == 'enabled' else 0

    @symbol
    def nvmlDeviceSetMigMode(handle, mode, status_ref):
        index = lib.device(handle)[0]
        wanted = 'enabled' if _int(mode) else 'disabled'

        def change(gpu):
            lib.require_capable(gpu)
            if _gpu_pids(gpu):
                raise NvmlFailure('NVML_ERROR_IN_USE')
            if wanted == 'disabled' and gpu['gpu_instances']:
                raise NvmlFailure('NVML_ERROR_IN_USE')
            gpu['mig']['pending'] = wanted
            if mode_applies_immediately(lib.model(gpu)):
                gpu['mig']['current'] = wanted
        lib.mutate('nvmlDeviceSetMigMode', index, change, mode=wanted)
        status_ref._obj.value = 0

    def gi_profile_info(handle, enum, info_ref, versioned):
        dummy, gpu, dummy_gi, dummy_ci = lib.device(handle)
        info = info_ref._obj
        if versioned and info.version != GI_PROFILE_INFO_V2:
            raise NvmlFailure('NVML_ERROR_ARGUMENT_VERSION_MISMATCH')
        lib.require_capable(gpu)
        enum = _int(enum)
        if not 0 <= enum < GI_PROFILE_COUNT:
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        profile = [p for p in lib.model(gpu)['profiles'] if p['enum'] == enum]
        if not profile:
            raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')
        profile = profile[0]
        info.id = profile['id']
        info.isP2pSupported = 0
        info.sliceCount = profile['compute_slices']
        info.instanceCount = profile['max_count']
        info.multiprocessorCount = profile['multiprocessors']
        info.copyEngineCount = profile['copy_engines']
        info.decoderCount = profile['decoders']
        info.encoderCount = 0
        info.jpegCount = profile['jpegs']
        info.ofaCount = profile['ofas']
        info.memorySizeMB = profile['memory_mib']
        if versioned:
            info.name = ('MIG ' + profile['name']).encode()

    @symbol
    def nvmlDeviceGetGpuInstanceProfileInfoV(handle, enum, info_ref):
        gi_profile_info(handle, enum, info_ref, True)

    @symbol
    def nvmlDeviceGetGpuInstanceProfileInfo(handle, enum, info_ref):
        gi_profile_info(handle, enum, info_ref, False)

    @symbol
    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(handle, profile_id, array, count_ref):
        dummy, gpu, dummy_gi, dummy_ci = lib.device(handle)
        lib.require_capable(gpu)
        profile = lib.gi_profile_by_id(gpu, _int(profile_id))
        fill_placements(profile['starts'], profile['memory_slices'], array, count_ref)

    @symbol
    def nvmlDeviceGetGpuInstanceRemainingCapacity(handle, profile_id, count_ref):
        dummy, gpu, dummy_gi, dummy_ci = lib.device(handle)
        lib.require_enabled(gpu)
        model = lib.model(gpu)
        profile = lib.gi_profile_by_id(gpu, _int(profile_id))
        probe = {'gpu_instances': list(gpu['gpu_instances'])}
        count = 0
        for start in profile['starts']:
            if _gi_fits(model, probe, profile, start):
                probe['gpu_instances'].append({'profile': profile['name'], 'start': start})
                count += 1
        count_ref._obj.value = count

    def create_gi(handle, profile_id, start, handle_ref, call):
        index = lib.device(handle)[0]

        def change(gpu):
            lib.require_enabled(gpu)
            model = lib.model(gpu)
            profile = lib.gi_profile_by_id(gpu, profile_id)
            chosen = start
            if chosen is None:
                # the driver's own choice; never relied on by gpufleet.mig
                order = (6, 4, 5, 0, 1, 2, 3) if profile['memory_slices'] == 1 else tuple(reversed(profile['starts']))
                chosen = next((s for s in order if s in profile['starts'] and _gi_fits(model, gpu, profile, s)), None)
                if chosen is None:
                    raise NvmlFailure('NVML_ERROR_INSUFFICIENT_RESOURCES')
            elif not _gi_fits(model, gpu, profile, chosen):
                raise NvmlFailure('NVML_ERROR_INSUFFICIENT_RESOURCES')
            gi_id = min(set(range(1, 64)) - set(gi['id'] for gi in gpu['gpu_instances']))
            gpu['gpu_instances'].append({'id': gi_id, 'profile': profile['name'], 'start': chosen, 'compute_instances': []})
            return gi_id
        gi_id = lib.mutate(call, index, change, profile_id=profile_id, start=start)
        _store_handle(handle_ref, _handle(_TAG_GI, index, gi_id))

    @symbol
    def nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, placement_ref, handle_ref):
        create_gi(handle, _int(profile_id), placement_ref._obj.start, handle_ref, 'nvmlDeviceCreateGpuInstanceWithPlacement')

    @symbol
    def nvmlDeviceCreateGpuInstance(handle, profile_id, handle_ref):
        create_gi(handle, _int(profile_id), None, handle_ref, 'nvmlDeviceCreateGpuInstance')

    @symbol
    def nvmlDeviceGetGpuInstances(handle, profile_id, array, count_ref):
        index, gpu, dummy_gi, dummy_ci = lib.device(handle)
        lib.require_enabled(gpu)
        profile = lib.gi_profile_by_id(gpu, _int(profile_id))
        found = [gi for gi in sorted(gpu['gpu_instances'], key=lambda g: g['start']) if gi['profile'] == profile['name']]
        for position, gi in enumerate(found):
            array[position] = ctypes.cast(ctypes.c_void_p(_handle(_TAG_GI, index, gi['id'])), array._type_)
        count_ref._obj.value = len(found)

    @symbol
    def nvmlDeviceGetGpuInstanceById(handle, gi_id, handle_ref):
        index, gpu, dummy_gi, dummy_ci = lib.device(handle)
        lib.require_enabled(gpu)
        if not [gi for gi in gpu['gpu_instances'] if gi['id'] == _int(gi_id)]:
            raise NvmlFailure('NVML_ERROR_NOT_FOUND')
        _store_handle(handle_ref, _handle(_TAG_GI, index, _int(gi_id)))

    @symbol
    def nvmlGpuInstanceGetInfo(handle, info_ref):
        index, gpu, gi, profile = lib.gpu_instance(handle)
        info = info_ref._obj
        info.device = ctypes.cast(ctypes.c_void_p(_handle(_TAG_DEVICE, index)), type(info.device))
        info.id = gi['id']
        info.profileId = profile['id']
        info.placement.start = gi['start']
        info.placement.size = profile['memory_slices']

    @symbol
    def nvmlGpuInstanceDestroy(handle):
        index, dummy_gpu, gi, dummy_profile = lib.gpu_instance(handle)
        gi_id = gi['id']

        def change(gpu):
            target = [g for g in gpu['gpu_instances'] if g['id'] == gi_id]
            if not target:
                raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
            if target[0]['compute_instances']:
                raise NvmlFailure('NVML_ERROR_IN_USE')
            gpu['gpu_instances'].remove(target[0])
        lib.mutate('nvmlGpuInstanceDestroy', index, change, gpu_instance_id=gi_id)

    def ci_profile_info(handle, enum, engine, info_ref, versioned):
        dummy, dummy_gpu, dummy_gi, profile = lib.gpu_instance(handle)
        info = info_ref._obj
        if versioned and info.version != CI_PROFILE_INFO_V2:
            raise NvmlFailure('NVML_ERROR_ARGUMENT_VERSION_MISMATCH')
        enum = _int(enum)
        if not 0 <= enum < CI_PROFILE_COUNT or _int(engine) != 0:
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        slices = [s for s in COMPUTE_PLACEMENTS[profile['compute_slices']] if CI_ENUM_BY_SLICES[s] == enum]
        if not slices:
            raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')
        slices = slices[0]
        info.id = enum
        info.sliceCount = slices
        info.instanceCount = len(COMPUTE_PLACEMENTS[profile['compute_slices']][slices])
        info.multiprocessorCount = profile['multiprocessors'] * slices // profile['compute_slices']
        info.sharedCopyEngineCount = profile['copy_engines']
        info.sharedDecoderCount = profile['decoders']
        info.sharedEncoderCount = 0
        info.sharedJpegCount = profile['jpegs']
        info.sharedOfaCount = profile['ofas']
        if versioned:
            info.name = ('MIG ' + _ci_name(profile, slices)).encode()

    @symbol
    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(handle, enum, engine, info_ref):
        ci_profile_info(handle, enum, engine, info_ref, True)

    @symbol
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(handle, enum, engine, info_ref):
        ci_profile_info(handle, enum, engine, info_ref, False)

    @symbol
    def nvmlGpuInstanceGetComputeInstancePossiblePlacements(handle, profile_id, array, count_ref):
        dummy, dummy_gpu, dummy_gi, profile = lib.gpu_instance(handle)
        slices = _ci_slices_by_id(profile, _int(profile_id))
        fill_placements(COMPUTE_PLACEMENTS[profile['compute_slices']][slices], slices, array, count_ref)

    @symbol
    def nvmlGpuInstanceGetComputeInstanceRemainingCapacity(handle, profile_id, count_ref):
        dummy, dummy_gpu, gi, profile = lib.gpu_instance(handle)
        slices = _ci_slices_by_id(profile, _int(profile_id))
        probe = {'compute_instances': list(gi['compute_instances'])}
        count = 0
        for start in COMPUTE_PLACEMENTS[profile['compute_slices']][slices]:
            if _ci_fits(profile, probe, slices, start):
                probe['compute_instances'].append({'profile': _ci_name(profile, slices), 'start': start})
                count += 1
        count_ref._obj.value = count

    def create_ci(handle, profile_id, start, handle_ref, call):
        index, dummy_gpu, gi, profile = lib.gpu_instance(handle)
        gi_id = gi['id']
        slices = _ci_slices_by_id(profile, profile_id)

        def change(gpu):
            target = [g for g in gpu['gpu_instances'] if g['id'] == gi_id][0]
            chosen = start
            if chosen is None:
                chosen = next((s for s in COMPUTE_PLACEMENTS[profile['compute_slices']][slices]
                               if _ci_fits(profile, target, slices, s)), None)
                if chosen is None:
                    raise NvmlFailure('NVML_ERROR_INSUFFICIENT_RESOURCES')
            elif not _ci_fits(profile, target, slices, chosen):
                raise NvmlFailure('NVML_ERROR_INSUFFICIENT_RESOURCES')
            ci_id = min(set(range(0, 64)) - set(ci['id'] for ci in target['compute_instances']))
            target['compute_instances'].append({'id': ci_id, 'profile': _ci_name(profile, slices), 'start': chosen, 'pids': []})
            return ci_id
        ci_id = lib.mutate(call, index, change, gpu_instance_id=gi_id, profile_id=profile_id, start=start)
        _store_handle(handle_ref, _handle(_TAG_CI, index, gi_id, ci_id))

    @symbol
    def nvmlGpuInstanceCreateComputeInstanceWithPlacement(handle, profile_id, placement_ref, handle_ref):
        create_ci(handle, _int(profile_id), placement_ref._obj.start, handle_ref, 'nvmlGpuInstanceCreateComputeInstanceWithPlacement')

    @symbol
    def nvmlGpuInstanceCreateComputeInstance(handle, profile_id, handle_ref):
        create_ci(handle, _int(profile_id), None, handle_ref, 'nvmlGpuInstanceCreateComputeInstance')

    @symbol
    def nvmlGpuInstanceGetComputeInstances(handle, profile_id, array, count_ref):
        index, dummy_gpu, gi, profile = lib.gpu_instance(handle)
        slices = _ci_slices_by_id(profile, _int(profile_id))
        found = [ci for ci in sorted(gi['compute_instances'], key=lambda c: c['start']) if ci['profile'] == _ci_name(profile, slices)]
        for position, ci in enumerate(found):
            array[position] = ctypes.cast(ctypes.c_void_p(_handle(_TAG_CI, index, gi['id'], ci['id'])), array._type_)
        count_ref._obj.value = len(found)

    @symbol
    def nvmlGpuInstanceGetComputeInstanceById(handle, ci_id, handle_ref):
        index, dummy_gpu, gi, dummy_profile = lib.gpu_instance(handle)
        if not [ci for ci in gi['compute_instances'] if ci['id'] == _int(ci_id)]:
            raise NvmlFailure('NVML_ERROR_NOT_FOUND')
        _store_handle(handle_ref, _handle(_TAG_CI, index, gi['id'], _int(ci_id)))

    @symbol
    def nvmlComputeInstanceGetInfo_v2(handle, info_ref):
        index, gpu, gi, ci = lib.compute_instance(handle)
        profile = _profile_by_name(lib.model(gpu), gi['profile'])
        slices = _ci_slices_by_name(profile, ci['profile'])
        info = info_ref._obj
        info.device = ctypes.cast(ctypes.c_void_p(_handle(_TAG_DEVICE, index)), type(info.device))
        info.gpuInstance = ctypes.cast(ctypes.c_void_p(_handle(_TAG_GI, index, gi['id'])), type(info.gpuInstance))
        info.id = ci['id']
        info.profileId = CI_ENUM_BY_SLICES[slices]
        info.placement.start = ci['start']
        info.placement.size = slices

    @symbol
    def nvmlComputeInstanceDestroy(handle):
        index, dummy_gpu, gi, ci = lib.compute_instance(handle)
        gi_id, ci_id = gi['id'], ci['id']

        def change(gpu):
            target = [g for g in gpu['gpu_instances'] if g['id'] == gi_id][0]
            victim = [c for c in target['compute_instances'] if c['id'] == ci_id]
            if not victim:
                raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
            if victim[0].get('pids'):
                raise NvmlFailure('NVML_ERROR_IN_USE')
            target['compute_instances'].remove(victim[0])
        lib.mutate('nvmlComputeInstanceDestroy', index, change, gpu_instance_id=gi_id, compute_instance_id=ci_id)

    @symbol
    def nvmlDeviceIsMigDeviceHandle(handle, result_ref):
        result_ref._obj.value = 1 if _decode(handle)[0] == _TAG_MIG else 0

    @symbol
    def nvmlDeviceGetMaxMigDeviceCount(handle, count_ref):
        dummy, gpu, dummy_gi, dummy_ci = lib.device(handle)
        lib.require_capable(gpu)
        count_ref._obj.value = max(p['max_count'] for p in lib.model(gpu)['profiles'] if p['memory_slices'] == 1)

    @symbol
    def nvmlDeviceGetMigDeviceHandleByIndex(handle, position, handle_ref):
        index, gpu, dummy_gi, dummy_ci = lib.device(handle)
        lib.require_enabled(gpu)
        devices = _mig_devices(gpu)
        position = _int(position)
        if position >= len(devices):
            raise NvmlFailure('NVML_ERROR_NOT_FOUND')
        gi, ci = devices[position]
        _store_handle(handle_ref, _handle(_TAG_MIG, index, gi['id'], ci['id']))

    @symbol
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle, handle_ref):
        index = lib.device(handle, (_TAG_MIG,))[0]
        _store_handle(handle_ref, _handle(_TAG_DEVICE, index))

    @symbol
    def nvmlDeviceGetGpuInstanceId(handle, id_ref):
        id_ref._obj.value = lib.compute_instance(handle, (_TAG_MIG,))[2]['id']

    @symbol
    def nvmlDeviceGetComputeInstanceId(handle, id_ref):
        id_ref._obj.value = lib.compute_instance(handle, (_TAG_MIG,))[3]['id']

    @symbol
    def nvmlDeviceGetComputeRunningProcesses_v3(handle, count_ref, array):
        tag = _decode(handle)[0]
        if tag == _TAG_MIG:
            dummy, dummy_gpu, gi, ci = lib.compute_instance(handle, (_TAG_MIG,))
            processes = [(pid, gi['id'], ci['id']) for pid in ci.get('pids') or []]
        else:
            dummy, gpu, dummy_gi, dummy_ci = lib.device(handle)
            processes = [(pid, 0xFFFFFFFF, 0xFFFFFFFF) for pid in gpu.get('pids') or []]
            for gi, ci in _mig_devices(gpu):
                processes.extend((pid, gi['id'], ci['id']) for pid in ci.get('pids') or [])
        if array is None or count_ref._obj.value < len(processes):
            count_ref._obj.value = len(processes)
            if processes:
                raise NvmlFailure('NVML_ERROR_INSUFFICIENT_SIZE')
            return
        for position, (pid, gi_id, ci_id) in enumerate(processes):
            array[position].pid = pid
            array[position].usedGpuMemory = 512 * _MIB
            array[position].gpuInstanceId = gi_id
            array[position].computeInstanceId = ci_id
        count_ref._obj.value = len(processes)

    return symbols


def install(pynvml_module, state_path):
    """Load the simulated library into ``pynvml`` in place of libnvidia-ml.so.1."""
    lib = SimulatedNvml(state_path)
    for name, function in _symbols(lib).items():
        setattr(lib, name, function)
    pynvml_module.nvmlLib = lib
    pynvml_module._nvmlGetFunctionPointer_cache.clear()
    return lib
