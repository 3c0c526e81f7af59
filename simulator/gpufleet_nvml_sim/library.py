# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Test double of gpufleet.mig: never shipped to a GPU host.

"""A simulated ``libnvidia-ml`` for the real ``pynvml`` bindings, backed by a JSON state file.

``install(pynvml, path)`` puts a :class:`SimulatedNvml` into ``pynvml.nvmlLib``. Its
attributes are Python callables named like the C symbols; they receive what the pynvml
wrappers pass and return an NVML status, so the wrappers' struct versions, marshalling and
error mapping run unchanged. A symbol the simulator lacks is a missing attribute, which
pynvml turns into ``NVML_ERROR_FUNCTION_NOT_FOUND``.

The state file is the host: it is read at ``nvmlInit``, and every mutation re-reads it,
applies the change and writes it back atomically under ``flock`` on ``<state>.lock``.
Mutations are appended to ``<state>.calls.jsonl``. See docs/simulator.md.

pynvml is passed in, never imported.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from gpufleet_nvml_sim import abi, rules
from gpufleet_nvml_sim.abi import TAG_CI, TAG_DEVICE, TAG_GI, TAG_MIG
from gpufleet_nvml_sim.errors import ERROR_STRINGS, ERRORS, SUCCESS, NvmlFailure
from gpufleet_nvml_sim.models import CI_PROFILE_COUNT, compute_instance_name, for_driver
from gpufleet_nvml_sim.state import (
    append_log,
    derived_uuid,
    file_lock,
    find,
    has_pending_fault,
    load_state,
    next_gpu_instance_id,
    save_state,
    take_fault,
)

MUTATING_CALLS = ('nvmlDeviceSetMigMode', 'nvmlDeviceCreateGpuInstance', 'nvmlDeviceCreateGpuInstanceWithPlacement',
                  'nvmlGpuInstanceDestroy', 'nvmlGpuInstanceCreateComputeInstance',
                  'nvmlGpuInstanceCreateComputeInstanceWithPlacement', 'nvmlComputeInstanceDestroy')

# Calls that concern no GPU: a fault on them cannot name one.
SYSTEM_CALLS = ('nvmlInitWithFlags', 'nvmlSystemGetDriverVersion', 'nvmlSystemGetNVMLVersion', 'nvmlDeviceGetCount_v2',
                'nvmlDeviceGetHandleByUUID')
# Calls that never fail here (nvmlInit_v2 is nvmlInitWithFlags(0): fault that one instead).
NEVER_FAILING_CALLS = ('nvmlInit_v2', 'nvmlShutdown', 'nvmlErrorString')

CI_ENGINE_PROFILE_COUNT = 1         # only NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
_MIB = 1024 * 1024
_PROCESS_MEMORY = 512 * _MIB        # usedGpuMemory reported for every simulated process
_PARENT = (TAG_DEVICE,)
_ANY_DEVICE = (TAG_DEVICE, TAG_MIG)
_SYSTEM = object()                  # stands for "no handle" in system-level calls (a None handle is a NULL one)
_WITHOUT_INIT = ('nvmlInitWithFlags', 'nvmlInit_v2', 'nvmlErrorString')


class _Context(object):
    """What a handle resolved to in the current state."""

    __slots__ = ('tag', 'index', 'gpu', 'model', 'driver_version', 'gi', 'gi_profile', 'ci', 'ci_slices')

    def __init__(self, tag, index, gpu, model, driver_version):
        self.tag = tag
        self.index = index
        self.gpu = gpu
        self.model = model
        self.driver_version = driver_version
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
        tag, index, gi_id, ci_id = abi.decode(handle)
        if tag not in kinds or not 0 <= index < len(state['gpus']):
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        gpu = state['gpus'][index]
        ctx = _Context(tag, index, gpu, for_driver(gpu['model'], state['driver_version']), state['driver_version'])
        if tag != TAG_DEVICE:
            ctx.gi = find(gpu['gpu_instances'], gi_id)
            if ctx.gi is None:      # a stale handle: the GPU instance was destroyed
                raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
            ctx.gi_profile = rules.profile_by_name(ctx.model, ctx.gi['profile'])
        if tag in (TAG_CI, TAG_MIG):
            ctx.ci = find(ctx.gi['compute_instances'], ci_id)
            if ctx.ci is None:
                raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
            ctx.ci_slices = rules.ci_slices_by_name(ctx.gi_profile, ctx.ci['profile'])
        return ctx

    def _fault(self, call, index):
        """Count a read-only call against the faults; the state file is only touched when a fault could match."""
        if not has_pending_fault(self.state, call, index):
            return
        with file_lock(self.path):
            state = load_state(self.path)
            matched, code = take_fault(state, call, index)
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
        index = abi.decode(handle)[1]
        self._fault(call, index)
        return self._resolve(self.state, handle, kinds)

    def _mutate(self, call, handle, kinds, arguments, change):
        """Re-read the file, check faults, ``change(state, ctx)``, write back and log, all under the lock.

        ``change`` checks everything before it modifies the state, so a failure mutates nothing;
        it may return a dict of what the call reports besides its status (logged with it).
        """
        index = abi.decode(handle)[1]
        outcome = None
        with file_lock(self.path):
            state = load_state(self.path)
            matched, code = take_fault(state, call, index)
            if code is None:
                try:
                    outcome = change(state, self._resolve(state, handle, kinds))
                    code = SUCCESS
                except NvmlFailure as failure:
                    code = failure.code
            if matched or code == SUCCESS:
                save_state(self.path, state)
            self.state = state
            append_log(self.path, call, index, code, arguments, outcome)
        if code != SUCCESS:
            raise NvmlFailure(code)
        return outcome or {}

    @staticmethod
    def _require_mig_capable(ctx):
        if not ctx.model['mig_capable']:
            raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')

    @staticmethod
    def _require_mig_enabled(ctx):
        """GPU instance calls and profile information need MIG mode currently enabled (nvml.h)."""
        if not ctx.model['mig_capable'] or ctx.gpu['mig']['current'] != 'enabled':
            raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')

    @staticmethod
    def _fill_placements(starts, size, array, count):
        """Possible placements, NVML style: a NULL array asks for the count. ``count`` is an output only (nvml.h:
        "Returns number of valid placements"; the array "must be large enough to accommodate the placements
        supported by the profile"): what the caller put in it is never read."""
        elements = abi.elements(array)
        if elements is None:
            abi.set_uint(count, len(starts))
            return
        capacity = abi.capacity(elements)
        if capacity is not None and capacity < len(starts):
            abi.set_uint(count, len(starts))
            raise NvmlFailure('NVML_ERROR_INSUFFICIENT_SIZE')
        for position, start in enumerate(starts):
            elements[position].start = start
            elements[position].size = size
        abi.set_uint(count, len(starts))

    @staticmethod
    def _fill_handles(values, array, count):
        """Instance lists: the caller sizes the array (from the profile's max count); count is output only."""
        elements = abi.elements(array)
        if elements is None:
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        capacity = abi.capacity(elements)
        if capacity is not None and capacity < len(values):
            abi.set_uint(count, len(values))
            raise NvmlFailure('NVML_ERROR_INSUFFICIENT_SIZE')
        abi.store_handles(elements, values)
        abi.set_uint(count, len(values))

    @staticmethod
    def _mig_uuid(gpu, gi, ci):
        return 'MIG-' + derived_uuid(gpu['uuid'], gi['id'], ci['id'])

    # ---- system --------------------------------------------------------------------------

    def sym_nvmlInitWithFlags(self, flags):
        state = load_state(self.path)      # a broken state file is a SimulatorError, not an NVML code
        matched, code = take_fault(state, 'nvmlInitWithFlags', None)
        if matched:
            with file_lock(self.path):
                state = load_state(self.path)
                matched, code = take_fault(state, 'nvmlInitWithFlags', None)
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
        return ERROR_STRINGS.get(abi.uint(code), b'Unknown Error')

    def sym_nvmlSystemGetDriverVersion(self, buffer, length):
        self._read('nvmlSystemGetDriverVersion')
        abi.write_text(buffer, length, self.state['driver_version'])

    def sym_nvmlSystemGetNVMLVersion(self, buffer, length):
        self._read('nvmlSystemGetNVMLVersion')
        # NVML's version is "<CUDA major>.<driver>": CUDA 13 came with R580.
        major = 13 if rules.driver_branch(self.state['driver_version']) >= 580 else 12
        abi.write_text(buffer, length, self.state.get('nvml_version') or '%d.%s' % (major, self.state['driver_version']))

    def sym_nvmlDeviceGetCount_v2(self, count):
        self._read('nvmlDeviceGetCount_v2')
        abi.set_uint(count, len(self.state['gpus']))

    def sym_nvmlDeviceGetHandleByIndex_v2(self, index, handle_out):
        index = abi.uint(index)
        self._fault('nvmlDeviceGetHandleByIndex_v2', index)     # a fault's gpu is the index asked for
        if not 0 <= index < len(self.state['gpus']):
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        abi.store_handle(handle_out, abi.encode(TAG_DEVICE, index))

    def sym_nvmlDeviceGetHandleByUUID(self, uuid, handle_out):
        """A GPU UUID gives the GPU, a ``MIG-`` UUID the MIG device (as NVML does since R470)."""
        self._read('nvmlDeviceGetHandleByUUID')
        wanted = abi.text(uuid)
        for index, gpu in enumerate(self.state['gpus']):
            if gpu['uuid'] == wanted:
                return abi.store_handle(handle_out, abi.encode(TAG_DEVICE, index))
            for gi, ci in rules.mig_devices(gpu):
                if wanted == self._mig_uuid(gpu, gi, ci):
                    return abi.store_handle(handle_out, abi.encode(TAG_MIG, index, gi['id'], ci['id']))
        raise NvmlFailure('NVML_ERROR_NOT_FOUND')

    def sym_nvmlDeviceGetHandleByPciBusId_v2(self, bus_id, handle_out):
        self._read('nvmlDeviceGetHandleByPciBusId_v2')
        wanted = abi.text(bus_id).upper()
        for index, gpu in enumerate(self.state['gpus']):
            if wanted in (gpu['pci_bus_id'].upper(), gpu['pci_bus_id'][4:].upper()):
                return abi.store_handle(handle_out, abi.encode(TAG_DEVICE, index))
        raise NvmlFailure('NVML_ERROR_NOT_FOUND')

    # ---- device identity ------------------------------------------------------------------

    def sym_nvmlDeviceGetIndex(self, handle, index_out):
        abi.set_uint(index_out, self._read('nvmlDeviceGetIndex', handle).index)

    def sym_nvmlDeviceGetMinorNumber(self, handle, minor_out):
        # /dev/nvidia<minor>, which NVIDIA's DRA driver names its devices by; a state without one answers as a
        # driver that cannot tell (the collection then knows no DRA device of the GPU).
        ctx = self._read('nvmlDeviceGetMinorNumber', handle)
        if 'minor_number' not in ctx.gpu:
            raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')
        abi.set_uint(minor_out, ctx.gpu['minor_number'])

    def sym_nvmlDeviceGetName(self, handle, buffer, length):
        ctx = self._read('nvmlDeviceGetName', handle, _ANY_DEVICE)
        name = ctx.model['nvml_name']
        if ctx.tag == TAG_MIG:     # e.g. "NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb"
            name += ' MIG ' + compute_instance_name(ctx.gi_profile, ctx.ci_slices)
        abi.write_text(buffer, length, name)

    def sym_nvmlDeviceGetUUID(self, handle, buffer, length):
        ctx = self._read('nvmlDeviceGetUUID', handle, _ANY_DEVICE)
        abi.write_text(buffer, length, self._mig_uuid(ctx.gpu, ctx.gi, ctx.ci) if ctx.tag == TAG_MIG else ctx.gpu['uuid'])

    def sym_nvmlDeviceGetPciInfo_v3(self, handle, info_out):
        ctx = self._read('nvmlDeviceGetPciInfo_v3', handle, _ANY_DEVICE)
        info = abi.target(info_out)
        bus_id = ctx.gpu['pci_bus_id']
        domain, bus, device = bus_id.split(':')[0], bus_id.split(':')[1], bus_id.split(':')[2].split('.')[0]
        info.busId = bus_id.encode()
        info.busIdLegacy = ('%04X:%s' % (int(domain, 16), bus_id.split(':', 1)[1])).encode()
        info.domain = int(domain, 16)
        info.bus = int(bus, 16)
        info.device = int(device, 16)
        info.pciDeviceId = ctx.gpu.get('pci_device_id', ctx.model['pci_device_id'])
        info.pciSubSystemId = ctx.gpu.get('pci_subsystem_id', ctx.model['pci_subsystem_id'])

    def _memory_total(self, ctx):
        return (ctx.gi_profile['memory_mib'] if ctx.tag == TAG_MIG else ctx.model['memory_total_mib']) * _MIB

    def sym_nvmlDeviceGetMemoryInfo(self, handle, info_out):
        ctx = self._read('nvmlDeviceGetMemoryInfo', handle, _ANY_DEVICE)
        info = abi.target(info_out)
        info.total = info.free = self._memory_total(ctx)
        info.used = 0

    def sym_nvmlDeviceGetMemoryInfo_v2(self, handle, info_out):
        ctx = self._read('nvmlDeviceGetMemoryInfo_v2', handle, _ANY_DEVICE)
        info = abi.target(info_out)
        if getattr(info, 'version', None) != abi.MEMORY_INFO_V2:
            raise NvmlFailure('NVML_ERROR_ARGUMENT_VERSION_MISMATCH')
        info.total = info.free = self._memory_total(ctx)
        info.reserved = info.used = 0

    def sym_nvmlDeviceGetArchitecture(self, handle, arch_out):
        abi.set_uint(arch_out, self._read('nvmlDeviceGetArchitecture', handle, _ANY_DEVICE).model['architecture'])

    # ---- MIG mode --------------------------------------------------------------------------

    def sym_nvmlDeviceGetMigMode(self, handle, current_out, pending_out):
        ctx = self._read('nvmlDeviceGetMigMode', handle)
        self._require_mig_capable(ctx)
        abi.set_uint(current_out, 1 if ctx.gpu['mig']['current'] == 'enabled' else 0)
        abi.set_uint(pending_out, 1 if ctx.gpu['mig']['pending'] == 'enabled' else 0)

    def sym_nvmlDeviceSetMigMode(self, handle, mode, status_out):
        """Ask for a MIG mode; the driver then tries to apply it (resetting an Ampere GPU itself).

        - Idle GPU: current == pending at once, activation status SUCCESS (every architecture).
        - Held by processes or clients: the call still succeeds, the mode stays pending and the
          activation status is IN_USE ("In use by another client"); a later reset or reboot (Ampere),
          or a repeated call on an idle GPU, applies it.
        - Disabling while GPU instances exist: the GPU is not idle, so the same: the call succeeds, the
          change stays pending and the activation status says IN_USE (nml.h: activationStatus returns
          "the appropriate error code upon unsuccessful activation", e.g. IN_USE when the device is not
          idle; "the caller ... is expected to idle the device and retry setting the mode again").
        Per architecture: Hopper and later are reset-less, a repeated call on an idle GPU applies the
        change (the MIG User Guide's "reset-less" MIG mode); on Ampere the driver resets the GPU itself
        on the call, so a repeated call on an idle GPU applying a pending change is modelled alike but
        NOT VERIFIED on hardware.
        """
        mode = abi.uint(mode)

        def change(state, ctx):
            self._require_mig_capable(ctx)
            if mode not in (0, 1):
                raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
            wanted = 'enabled' if mode else 'disabled'
            mig = ctx.gpu['mig']
            mig['pending'] = wanted
            pids, clients = rules.holders(ctx.gpu)
            if mig['current'] != wanted and (pids or clients or ctx.gpu['gpu_instances']):
                return {'activation_status': 'NVML_ERROR_IN_USE'}
            mig['current'] = wanted
            return {'activation_status': 'NVML_SUCCESS'}
        outcome = self._mutate('nvmlDeviceSetMigMode', handle, _PARENT, {'mode': mode}, change)
        abi.set_uint(status_out, ERRORS.get(outcome['activation_status'], SUCCESS))

    # ---- GPU instance profiles -----------------------------------------------------------------

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

    def _gi_profile_info(self, call, handle, enum, info_out, versioned):
        ctx = self._read(call, handle)
        info = abi.target(info_out)
        if versioned and getattr(info, 'version', None) != abi.GI_PROFILE_INFO_V2:
            raise NvmlFailure('NVML_ERROR_ARGUMENT_VERSION_MISMATCH')
        profile = rules.profile_info(ctx.model, abi.uint(enum), ctx.gpu['mig']['current'] == 'enabled')
        self._write_gi_profile(info, profile, versioned)

    def sym_nvmlDeviceGetGpuInstanceProfileInfoV(self, handle, enum, info_out):
        self._gi_profile_info('nvmlDeviceGetGpuInstanceProfileInfoV', handle, enum, info_out, True)

    def sym_nvmlDeviceGetGpuInstanceProfileInfo(self, handle, enum, info_out):
        self._gi_profile_info('nvmlDeviceGetGpuInstanceProfileInfo', handle, enum, info_out, False)

    def sym_nvmlDeviceGetGpuInstanceProfileInfoByIdV(self, handle, profile_id, info_out):
        ctx = self._read('nvmlDeviceGetGpuInstanceProfileInfoByIdV', handle)
        info = abi.target(info_out)
        if getattr(info, 'version', None) != abi.GI_PROFILE_INFO_V2:
            raise NvmlFailure('NVML_ERROR_ARGUMENT_VERSION_MISMATCH')
        self._require_mig_enabled(ctx)
        self._write_gi_profile(info, rules.profile_by_id(ctx.model, abi.uint(profile_id)), True)

    def sym_nvmlDeviceGetGpuInstancePossiblePlacements_v2(self, handle, profile_id, placements, count):
        """Answered whether MIG is enabled or not (nvml.h): the only profile data a disabled GPU gives on most drivers."""
        ctx = self._read('nvmlDeviceGetGpuInstancePossiblePlacements_v2', handle)
        starts, size = rules.possible_placements(ctx.model, abi.uint(profile_id))
        self._fill_placements(starts, size, placements, count)

    def sym_nvmlDeviceGetGpuInstanceRemainingCapacity(self, handle, profile_id, count):
        ctx = self._read('nvmlDeviceGetGpuInstanceRemainingCapacity', handle)
        self._require_mig_enabled(ctx)
        profile = rules.profile_by_id(ctx.model, abi.uint(profile_id))
        abi.set_uint(count, rules.gi_remaining(ctx.model, ctx.gpu['gpu_instances'], profile))

    # ---- GPU instances ------------------------------------------------------------------------

    def _create_gi(self, call, handle, profile_id, start, handle_out, size=None):
        def change(state, ctx):
            self._require_mig_enabled(ctx)
            profile = rules.profile_by_id(ctx.model, profile_id)
            if size is not None and size != profile['memory_slices']:
                raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')     # a placement is (start, the profile's size)
            instances = ctx.gpu['gpu_instances']
            chosen = start
            if chosen is None:
                chosen = rules.auto_gi_start(ctx.model, instances, profile)
                problem = ('NVML_ERROR_INSUFFICIENT_RESOURCES', '') if chosen is None else None
            else:
                problem = rules.gi_problem(ctx.model, instances, profile, chosen)
            if problem:
                raise NvmlFailure(problem[0])
            gi_id = next_gpu_instance_id(ctx.model, ctx.gpu, profile)
            instances.append({'id': gi_id, 'profile': profile['name'], 'start': chosen, 'compute_instances': []})
            return {'created': {'gpu_instance_id': gi_id, 'start': chosen}}
        arguments = {'profile_id': profile_id}
        if start is not None:
            arguments['start'] = start
        if size is not None:
            arguments['size'] = size
        created = self._mutate(call, handle, _PARENT, arguments, change)['created']
        abi.store_handle(handle_out, abi.encode(TAG_GI, abi.decode(handle)[1], created['gpu_instance_id']))

    def sym_nvmlDeviceCreateGpuInstance(self, handle, profile_id, handle_out):
        self._create_gi('nvmlDeviceCreateGpuInstance', handle, abi.uint(profile_id), None, handle_out)

    def sym_nvmlDeviceCreateGpuInstanceWithPlacement(self, handle, profile_id, placement, handle_out):
        """A placement whose size is not the profile's is refused (INVALID_ARGUMENT), as any placement that is not
        one of the possible placements: callers pass one of those, size included."""
        placement = abi.target(placement)
        self._create_gi('nvmlDeviceCreateGpuInstanceWithPlacement', handle, abi.uint(profile_id), placement.start, handle_out,
                        size=placement.size)

    def sym_nvmlDeviceGetGpuInstances(self, handle, profile_id, instances_out, count):
        ctx = self._read('nvmlDeviceGetGpuInstances', handle)
        self._require_mig_enabled(ctx)
        profile = rules.profile_by_id(ctx.model, abi.uint(profile_id))
        found = sorted((gi for gi in ctx.gpu['gpu_instances'] if gi['profile'] == profile['name']), key=lambda g: g['start'])
        self._fill_handles([abi.encode(TAG_GI, ctx.index, gi['id']) for gi in found], instances_out, count)

    def sym_nvmlDeviceGetGpuInstanceById(self, handle, gi_id, handle_out):
        ctx = self._read('nvmlDeviceGetGpuInstanceById', handle)
        self._require_mig_enabled(ctx)
        gi_id = abi.uint(gi_id)
        if find(ctx.gpu['gpu_instances'], gi_id) is None:
            raise NvmlFailure('NVML_ERROR_NOT_FOUND')
        abi.store_handle(handle_out, abi.encode(TAG_GI, ctx.index, gi_id))

    def sym_nvmlGpuInstanceGetInfo(self, handle, info_out):
        ctx = self._read('nvmlGpuInstanceGetInfo', handle, (TAG_GI,))
        info = abi.target(info_out)
        info.device = abi.as_pointer(abi.encode(TAG_DEVICE, ctx.index), type(info.device))
        info.id = ctx.gi['id']
        info.profileId = ctx.gi_profile['id']
        info.placement.start = ctx.gi['start']
        info.placement.size = ctx.gi_profile['memory_slices']

    def sym_nvmlGpuInstanceDestroy(self, handle):
        gi_id = abi.decode(handle)[2]

        def change(state, ctx):
            if ctx.gi['compute_instances'] or ctx.gpu['mig_clients']:
                raise NvmlFailure('NVML_ERROR_IN_USE')
            ctx.gpu['gpu_instances'].remove(ctx.gi)
        self._mutate('nvmlGpuInstanceDestroy', handle, (TAG_GI,), {'gpu_instance_id': gi_id}, change)

    # ---- compute instance profiles ---------------------------------------------------------------

    def _ci_profile_info(self, call, handle, enum, engine, info_out, versioned):
        ctx = self._read(call, handle, (TAG_GI,))
        info = abi.target(info_out)
        if versioned and getattr(info, 'version', None) != abi.CI_PROFILE_INFO_V2:
            raise NvmlFailure('NVML_ERROR_ARGUMENT_VERSION_MISMATCH')
        enum = abi.uint(enum)
        if not 0 <= enum < CI_PROFILE_COUNT or not 0 <= abi.uint(engine) < CI_ENGINE_PROFILE_COUNT:
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        gi_profile = ctx.gi_profile
        slices = rules.ci_slices_by_id(ctx.model, gi_profile, enum, ctx.driver_version)
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

    def _ci_slices(self, ctx, profile_id):
        return rules.ci_slices_by_id(ctx.model, ctx.gi_profile, profile_id, ctx.driver_version)

    def sym_nvmlGpuInstanceGetComputeInstancePossiblePlacements(self, handle, profile_id, placements, count):
        ctx = self._read('nvmlGpuInstanceGetComputeInstancePossiblePlacements', handle, (TAG_GI,))
        slices = self._ci_slices(ctx, abi.uint(profile_id))
        self._fill_placements(ctx.gi_profile['compute_placements'][slices], slices, placements, count)

    def sym_nvmlGpuInstanceGetComputeInstanceRemainingCapacity(self, handle, profile_id, count):
        ctx = self._read('nvmlGpuInstanceGetComputeInstanceRemainingCapacity', handle, (TAG_GI,))
        slices = self._ci_slices(ctx, abi.uint(profile_id))
        abi.set_uint(count, rules.ci_remaining(ctx.gi_profile, ctx.gi['compute_instances'], slices))

    # ---- compute instances ------------------------------------------------------------------------

    def _create_ci(self, call, handle, profile_id, start, handle_out):
        gi_id = abi.decode(handle)[2]

        def change(state, ctx):
            slices = self._ci_slices(ctx, profile_id)
            cis = ctx.gi['compute_instances']
            chosen = start
            if chosen is None:
                chosen = rules.auto_ci_start(ctx.gi_profile, cis, slices)
                problem = ('NVML_ERROR_INSUFFICIENT_RESOURCES', '') if chosen is None else None
            else:
                problem = rules.ci_problem(ctx.gi_profile, cis, slices, chosen)
            if problem:
                raise NvmlFailure(problem[0])
            ci_id = rules.lowest_free(0, set(ci['id'] for ci in cis))
            cis.append({'id': ci_id, 'profile': compute_instance_name(ctx.gi_profile, slices), 'profile_id': profile_id,
                        'start': chosen, 'pids': []})
            return {'created': {'compute_instance_id': ci_id, 'start': chosen}}
        arguments = {'gpu_instance_id': gi_id, 'profile_id': profile_id}
        if start is not None:
            arguments['start'] = start
        created = self._mutate(call, handle, (TAG_GI,), arguments, change)['created']
        abi.store_handle(handle_out, abi.encode(TAG_CI, abi.decode(handle)[1], gi_id, created['compute_instance_id']))

    def sym_nvmlGpuInstanceCreateComputeInstance(self, handle, profile_id, handle_out):
        self._create_ci('nvmlGpuInstanceCreateComputeInstance', handle, abi.uint(profile_id), None, handle_out)

    def sym_nvmlGpuInstanceCreateComputeInstanceWithPlacement(self, handle, profile_id, placement, handle_out):
        self._create_ci('nvmlGpuInstanceCreateComputeInstanceWithPlacement', handle, abi.uint(profile_id),
                        abi.target(placement).start, handle_out)

    def sym_nvmlGpuInstanceGetComputeInstances(self, handle, profile_id, instances_out, count):
        ctx = self._read('nvmlGpuInstanceGetComputeInstances', handle, (TAG_GI,))
        profile_id = abi.uint(profile_id)
        self._ci_slices(ctx, profile_id)       # NOT_SUPPORTED for a profile this GI does not offer
        # Listed under the profile id it was created with (a variant id lists only those created with it).
        found = sorted((ci for ci in ctx.gi['compute_instances'] if ci['profile_id'] == profile_id), key=lambda c: c['start'])
        self._fill_handles([abi.encode(TAG_CI, ctx.index, ctx.gi['id'], ci['id']) for ci in found], instances_out, count)

    def sym_nvmlGpuInstanceGetComputeInstanceById(self, handle, ci_id, handle_out):
        ctx = self._read('nvmlGpuInstanceGetComputeInstanceById', handle, (TAG_GI,))
        ci_id = abi.uint(ci_id)
        if find(ctx.gi['compute_instances'], ci_id) is None:
            raise NvmlFailure('NVML_ERROR_NOT_FOUND')
        abi.store_handle(handle_out, abi.encode(TAG_CI, ctx.index, ctx.gi['id'], ci_id))

    def sym_nvmlComputeInstanceGetInfo_v2(self, handle, info_out):
        ctx = self._read('nvmlComputeInstanceGetInfo_v2', handle, (TAG_CI,))
        info = abi.target(info_out)
        info.device = abi.as_pointer(abi.encode(TAG_DEVICE, ctx.index), type(info.device))
        info.gpuInstance = abi.as_pointer(abi.encode(TAG_GI, ctx.index, ctx.gi['id']), type(info.gpuInstance))
        info.id = ctx.ci['id']
        info.profileId = ctx.ci['profile_id']
        info.placement.start = ctx.ci['start']
        info.placement.size = ctx.ci_slices

    def sym_nvmlComputeInstanceDestroy(self, handle):
        dummy_tag, dummy_index, gi_id, ci_id = abi.decode(handle)

        def change(state, ctx):
            # A GPU client holding the MIG devices (DCGM, dcgm-exporter) refuses the destroy with no process
            # listed (DCGM issues 95 and 276): the caller sees IN_USE and an empty process list.
            if ctx.ci['pids'] or ctx.gpu['mig_clients']:
                raise NvmlFailure('NVML_ERROR_IN_USE')
            ctx.gi['compute_instances'].remove(ctx.ci)
        self._mutate('nvmlComputeInstanceDestroy', handle, (TAG_CI,), {'gpu_instance_id': gi_id, 'compute_instance_id': ci_id}, change)

    # ---- MIG devices --------------------------------------------------------------------------------

    def sym_nvmlDeviceIsMigDeviceHandle(self, handle, result_out):
        ctx = self._read('nvmlDeviceIsMigDeviceHandle', handle, _ANY_DEVICE)
        abi.set_uint(result_out, 1 if ctx.tag == TAG_MIG else 0)

    def sym_nvmlDeviceGetMaxMigDeviceCount(self, handle, count_out):
        """SUCCESS with 0 where MIG is unsupported or currently off (nvml.h: "count: Returns the count of MIG devices";
        drivers answer 0 rather than an error there)."""
        ctx = self._read('nvmlDeviceGetMaxMigDeviceCount', handle)
        if not ctx.model['mig_capable'] or ctx.gpu['mig']['current'] != 'enabled':
            abi.set_uint(count_out, 0)
            return
        # one MIG device per compute slice at most: the largest 1-slice max count (7, or 4 on 4-slice GPUs)
        abi.set_uint(count_out, max(p['max_count'] for p in ctx.model['profiles'] if p['memory_slices'] == 1))

    def sym_nvmlDeviceGetMigDeviceHandleByIndex(self, handle, position, handle_out):
        ctx = self._read('nvmlDeviceGetMigDeviceHandleByIndex', handle)
        self._require_mig_enabled(ctx)
        devices = rules.mig_devices(ctx.gpu)
        position = abi.uint(position)
        if position >= len(devices):
            raise NvmlFailure('NVML_ERROR_NOT_FOUND')
        gi, ci = devices[position]
        abi.store_handle(handle_out, abi.encode(TAG_MIG, ctx.index, gi['id'], ci['id']))

    def sym_nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle, handle_out):
        ctx = self._read('nvmlDeviceGetDeviceHandleFromMigDeviceHandle', handle, (TAG_MIG,))
        abi.store_handle(handle_out, abi.encode(TAG_DEVICE, ctx.index))

    def _mig_device(self, call, handle):
        """A MIG device handle's context; NOT_SUPPORTED for a parent GPU handle."""
        if abi.decode(handle)[0] == TAG_DEVICE:
            self._read(call, handle)
            raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')
        return self._read(call, handle, (TAG_MIG,))

    def sym_nvmlDeviceGetGpuInstanceId(self, handle, id_out):
        abi.set_uint(id_out, self._mig_device('nvmlDeviceGetGpuInstanceId', handle).gi['id'])

    def sym_nvmlDeviceGetComputeInstanceId(self, handle, id_out):
        abi.set_uint(id_out, self._mig_device('nvmlDeviceGetComputeInstanceId', handle).ci['id'])

    # ---- processes ------------------------------------------------------------------------------------

    def _running_processes(self, call, handle, count, infos):
        """On a MIG device: its processes. On a GPU: every process, MIG ones with their instance ids.

        The two-call protocol pynvml uses: a NULL array (or a short one) gets the count and
        INSUFFICIENT_SIZE when there are processes, SUCCESS when there are none. Clients such as
        nvidia-persistenced are not compute processes: never listed.
        """
        ctx = self._read(call, handle, _ANY_DEVICE)
        if ctx.tag == TAG_MIG:
            processes = [(pid, ctx.gi['id'], ctx.ci['id']) for pid in ctx.ci['pids']]
        else:
            processes = [(pid, abi.NOT_AVAILABLE_UINT, abi.NOT_AVAILABLE_UINT) for pid in ctx.gpu['pids']]
            for gi, ci in rules.mig_devices(ctx.gpu):
                processes.extend((pid, gi['id'], ci['id']) for pid in ci['pids'])
        elements = abi.elements(infos)
        if elements is None or abi.uint(count) < len(processes):
            abi.set_uint(count, len(processes))
            if processes:
                raise NvmlFailure('NVML_ERROR_INSUFFICIENT_SIZE')
            return
        for position, (pid, gi_id, ci_id) in enumerate(processes):
            elements[position].pid = pid
            elements[position].usedGpuMemory = _PROCESS_MEMORY
            elements[position].gpuInstanceId = gi_id
            elements[position].computeInstanceId = ci_id
        abi.set_uint(count, len(processes))

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
