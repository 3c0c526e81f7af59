# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Thin NVML backend: reads MIG state into the host model (_host_model.Host) and performs single mutations.

Everything goes through the official ``pynvml`` bindings (package ``nvidia-ml-py``).
When ``GPUFLEET_MIG_SIMULATOR`` names a state file, the simulator package (a test double that
lives outside the collection's plugins and is never shipped to a GPU host) is imported from the
``PYTHONPATH`` the simulated inventories give, and its library object is loaded into ``pynvml``
in place of ``libnvidia-ml.so.1``; every other line runs as on real GPUs. No Ansible imports:
modules pass ``run_command`` in for the GPU reset.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import importlib
import os
import traceback
from dataclasses import replace

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import (
    DISABLED,
    ENABLED,
    ComputeInstance,
    Gpu,
    GpuInstance,
    Host,
    MigMode,
    Placement,
    Process,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import derived_compute_profiles
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import MigProfile, ProfileError, compute_instance_name

try:
    import pynvml
except ImportError:
    pynvml = None
    PYNVML_IMPORT_ERROR = traceback.format_exc()
else:
    PYNVML_IMPORT_ERROR = None

SIMULATOR_ENV = 'GPUFLEET_MIG_SIMULATOR'
SIMULATOR_PACKAGE = 'gpufleet_nvml_sim'
# In a root-only folder (see _host_lock): /run/lock is writable by everyone.
HOST_LOCK_PATH = '/run/gpufleet-mig/host.lock'

_ARCHITECTURES = {2: 'kepler', 3: 'maxwell', 4: 'pascal', 5: 'volta', 6: 'turing', 7: 'ampere', 8: 'ada',
                  9: 'hopper', 10: 'blackwell', 13: 'rubin'}
_MAX_PLACEMENTS = 32
# GPU instance profile ids asked for while MIG is off (NVML lists no profile then, only placements by id).
# The highest id NVIDIA has published is 67 (RTX PRO 6000 Blackwell 1g.24gb-me, nvidia-smi mig -lgip).
_PROFILE_IDS_WITHOUT_MIG = 96
_MAX_INSTANCES = 32


class BackendError(GpufleetError):
    """An NVML call failed; the message names the GPU, the operation and the NVML error (``nvml_error``: its name,
    e.g. 'NVML_ERROR_IN_USE', None when the failure is not an NVML answer)."""

    def __init__(self, message, nvml_error=None):
        super(BackendError, self).__init__(message)
        self.nvml_error = nvml_error


def simulator_state_path():
    path = os.environ.get(SIMULATOR_ENV)
    return path or None


def load_simulator(state_path):
    """The simulator package, asked for by GPUFLEET_MIG_SIMULATOR; a clear error where it is not installed."""
    try:
        return importlib.import_module(SIMULATOR_PACKAGE)
    except ImportError as exc:
        raise BackendError('%s=%s asks for the NVML simulator, but its package %s cannot be imported (%s): put the '
                           "gpufleet.mig repository's simulator/ folder on PYTHONPATH. A real GPU host must not set %s."
                           % (SIMULATOR_ENV, state_path, SIMULATOR_PACKAGE, exc, SIMULATOR_ENV))


def host_lock_path():
    """One lock per host; a simulated host is its state file."""
    state = simulator_state_path()
    return state + '.host.lock' if state else HOST_LOCK_PATH


def nvml_error_name(code):
    """'NVML_ERROR_IN_USE' for 19; the number for a code pynvml does not name."""
    for name in dir(pynvml):
        if name.startswith('NVML_ERROR_') and getattr(pynvml, name) == code:
            return name
    return 'NVML error %s' % code


def _nvml_error_name(exc):
    return nvml_error_name(getattr(exc, 'value', '?'))


def _mig_mode(current, pending):
    return MigMode(ENABLED if current else DISABLED, ENABLED if pending else DISABLED)


def _text(value):
    return value.decode('utf-8', 'replace') if isinstance(value, bytes) else value


def _short_profile_name(nvml_name):
    """'MIG 1g.10gb+me' -> '1g.10gb+me'; None for profiles outside the mig-parted grammar."""
    try:
        return MigProfile.parse(_text(nvml_name)).name
    except ProfileError:
        return None


class NvmlBackend(object):
    """One NVML session on this host."""

    def __init__(self, run_command=None):
        if pynvml is None:
            raise ImportError('nvidia-ml-py')
        self._run_command = run_command
        self.state_path = simulator_state_path()
        self.simulated = self.state_path is not None
        if self.simulated:
            self._simulator = load_simulator(self.state_path)
            self._simulator.install(pynvml, self.state_path)
        self._call(None, 'initialise NVML', pynvml.nvmlInit)

    def close(self):
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass

    def _call(self, gpu, what, function, *args):
        try:
            return function(*args)
        except pynvml.NVMLError as exc:
            where = 'GPU %s: ' % gpu if gpu is not None else ''
            raise BackendError('%s%s failed: %s (%s)' % (where, what, _nvml_error_name(exc), exc), _nvml_error_name(exc))

    # ---- reading -------------------------------------------------------------------

    def read_host(self, with_profiles=True):
        count = self._call(None, 'count GPUs', pynvml.nvmlDeviceGetCount)
        return Host(gpus=tuple(self.read_gpu(index, with_profiles) for index in range(count)),
                    driver_version=_text(self._call(None, 'read driver version', pynvml.nvmlSystemGetDriverVersion)),
                    nvml_version=_text(self._call(None, 'read NVML version', pynvml.nvmlSystemGetNVMLVersion)),
                    simulated=self.simulated)

    def _handle(self, index):
        return self._call(index, 'get handle', pynvml.nvmlDeviceGetHandleByIndex, index)

    def read_gpu(self, index, with_profiles=True):
        """One GPU (_host_model.Gpu). NVML hides profiles while MIG is disabled: they are read (and
        ``profiles_known`` is true) only while MIG is currently enabled."""
        handle = self._handle(index)
        pci = self._call(index, 'read PCI info', pynvml.nvmlDeviceGetPciInfo, handle)
        identity = dict(
            index=index,
            uuid=_text(self._call(index, 'read UUID', pynvml.nvmlDeviceGetUUID, handle)),
            name=_text(self._call(index, 'read name', pynvml.nvmlDeviceGetName, handle)),
            pci_device_id='0x%08X' % pci.pciDeviceId,
            pci_subsystem_id='0x%08X' % pci.pciSubSystemId,
            pci_bus_id=_text(pci.busId),
            architecture=_ARCHITECTURES.get(self._call(index, 'read architecture', pynvml.nvmlDeviceGetArchitecture, handle), 'unknown'),
            memory_total_mib=self._call(index, 'read memory', pynvml.nvmlDeviceGetMemoryInfo, handle).total // (1024 * 1024),
            minor_number=self._minor_number(index, handle),
        )
        mig_capable = True
        try:
            current, pending = pynvml.nvmlDeviceGetMigMode(handle)
        except pynvml.NVMLError as exc:
            if exc.value != pynvml.NVML_ERROR_NOT_SUPPORTED:
                raise BackendError('GPU %d: read MIG mode failed: %s (%s)' % (index, _nvml_error_name(exc), exc))
            mig_capable = False
            current = pending = pynvml.NVML_DEVICE_MIG_DISABLE
        gpu = Gpu(mig_capable=mig_capable, mig_mode=_mig_mode(current, pending), reset_required=current != pending, **identity)
        if not current:
            gpu = replace(gpu, processes=self._processes(index, handle),
                          placements_without_mig=self._placements_without_mig(index, handle) if mig_capable else None)
            if mig_capable and with_profiles:
                gpu = replace(gpu, profiles_without_mig=self._profiles_without_mig(index, handle))
            return gpu
        gi_profiles = self._gi_profile_infos(index, handle)
        gpu = replace(gpu, gpu_instances=self._gpu_instances(index, handle, gi_profiles))
        if with_profiles:
            profiles, unsupported = self._profiles(index, handle, gi_profiles, gpu.gpu_instances)
            gpu = replace(gpu, profiles=profiles, unsupported_profiles=unsupported, profiles_known=True)
        return gpu

    def _minor_number(self, index, handle):
        """The GPU's /dev/nvidia<minor>: NVIDIA's DRA driver names devices by it (gpu-<minor>...), and it
        need not equal the NVML index. None where NVML cannot tell (then DRA devices cannot be mapped)."""
        try:
            return pynvml.nvmlDeviceGetMinorNumber(handle)
        except pynvml.NVMLError as exc:
            if exc.value in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                return None
            raise BackendError('GPU %d: read minor number failed: %s' % (index, _nvml_error_name(exc)))

    def _placements_without_mig(self, index, handle):
        """[{profile_id, placements}] of every GPU instance profile id that answers while MIG is off.

        With MIG off NVML describes no profile (NOT_SUPPORTED), but its possible placements answer
        (nvml.h, nvmlDeviceGetGpuInstancePossiblePlacements_v2): they give the GPU's memory slices
        before any change. An id the GPU does not offer answers NOT_SUPPORTED (or INVALID_ARGUMENT).
        """
        found = []
        for profile_id in range(_PROFILE_IDS_WITHOUT_MIG):
            array = (pynvml.c_nvmlGpuInstancePlacement_t * _MAX_PLACEMENTS)()
            count = ctypes.c_uint(_MAX_PLACEMENTS)
            try:
                pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
            except pynvml.NVMLError as exc:
                if exc.value in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                    continue
                raise BackendError('GPU %d: read placements of profile %d with MIG off failed: %s (%s)'
                                   % (index, profile_id, _nvml_error_name(exc), exc))
            found.append({'profile_id': profile_id,
                          'placements': [{'start': array[i].start, 'size': array[i].size} for i in range(count.value)]})
        return found

    def _profiles_without_mig(self, index, handle):
        """The GPU instance profiles the driver describes while MIG is off, in the form of ``profiles``; None where it
        describes none. nvml.h says such a call answers NOT_SUPPORTED until MIG is enabled, and most drivers do; driver
        580.159.04 described the offered profiles of an H200 with MIG off (docs/hardware.md, "Seen on real
        hardware"). Any other answer than a description or "not this enum" counts as none: the layout check then
        forecasts, as before."""
        infos = self._gi_profile_infos(index, handle, strict=False)
        if not infos:
            return None
        profiles, dummy = self._profiles(index, handle, infos, ())
        return profiles or None

    def _gi_profile_infos(self, index, handle, strict=True):
        """(enum, v2 profile info) of every GPU instance profile the GPU offers (MIG enabled, or a driver that describes
        them with MIG off). An answer other than NOT_SUPPORTED or INVALID_ARGUMENT (not this enum) raises, or, not
        ``strict``, gives None."""
        infos = []
        for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                infos.append((enum, pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)))
            except pynvml.NVMLError as exc:
                if exc.value in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                    continue
                if not strict:
                    return None
                raise BackendError('GPU %d: read GPU instance profile %d failed: %s' % (index, enum, _nvml_error_name(exc)))
        return infos

    def _processes(self, index, handle):
        procs = self._call(index, 'list processes', pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
        return tuple(Process(p.pid, (p.usedGpuMemory or 0) // (1024 * 1024)) for p in procs)

    def _profiles(self, index, handle, gi_profiles, gpu_instances):
        profiles = []
        unsupported = []
        ci_by_gi_profile = {}
        for gi in gpu_instances:
            if gi.profile_id not in ci_by_gi_profile:
                ci_by_gi_profile[gi.profile_id] = self._compute_profiles(index, handle, gi.id, gi.profile)
        for enum, info in gi_profiles:
            name = _short_profile_name(info.name)
            if name is None:
                unsupported.append(_text(info.name))
                continue
            placements = self._gi_placements(index, handle, info.id)
            size = placements[0]['size'] if placements else 0
            compute_profiles = ci_by_gi_profile.get(info.id)
            source = 'nvml'
            if compute_profiles is None:
                compute_profiles = derived_compute_profiles(name, info.sliceCount)
                source = 'derived'
            profiles.append({
                'name': name,
                'id': info.id,
                'enum': enum,
                'compute_slices': info.sliceCount,
                'memory_slices': size,
                'memory_mib': info.memorySizeMB,
                'multiprocessors': info.multiprocessorCount,
                'max_count': info.instanceCount,
                'placements': placements,
                'compute_profiles': compute_profiles,
                'compute_profiles_source': source,
            })
        return profiles, unsupported

    def _gi_placements(self, index, handle, profile_id):
        return self._placements(index, pynvml.nvmlDeviceGetGpuInstancePossiblePlacements, pynvml.c_nvmlGpuInstancePlacement_t,
                                handle, profile_id)

    def _ci_placements(self, index, gi_handle, profile_id):
        return self._placements(index, pynvml.nvmlGpuInstanceGetComputeInstancePossiblePlacements,
                                pynvml.c_nvmlComputeInstancePlacement_t, gi_handle, profile_id)

    def _placements(self, index, function, struct, handle, profile_id):
        array = (struct * _MAX_PLACEMENTS)()
        count = ctypes.c_uint(_MAX_PLACEMENTS)
        self._call(index, 'read placements of profile %d' % profile_id, function, handle, profile_id, array, ctypes.byref(count))
        return [{'start': array[i].start, 'size': array[i].size} for i in range(count.value)]

    @staticmethod
    def _placement(struct, placements, start):
        """The placement struct for ``start``, sized as NVML reports it (size 0 if NVML lists no such start)."""
        placement = struct()
        placement.start = start
        placement.size = next((p['size'] for p in placements if p['start'] == start), 0)
        return placement

    def _gi_handle(self, index, handle, gi_id):
        return self._call(index, 'get GPU instance %d' % gi_id, pynvml.nvmlDeviceGetGpuInstanceById, handle, gi_id)

    def _compute_profiles(self, index, handle, gi_id, gi_name):
        """The compute instance profiles of a GPU instance, one per name: the one gpufleet.mig creates with.

        Drivers offer some full-size CI profiles in pairs under one name: an A100 7g both 7_SLICE (4) and
        7_SLICE_NVL (8) (dra-driver-nvidia-gpu issue 1480; creating with 8 has been seen to break workloads), a
        Hopper double-memory 1g both 1_SLICE (0) and 1_SLICE_REV1 (7). The plain profile is the one of the
        lowest enum (each variant's enum is past the plain ones in nvml.h): that one is kept.
        """
        gi_handle = self._gi_handle(index, handle, gi_id)
        profiles = []
        for info in sorted(self._ci_profile_infos(index, gi_handle, gi_id), key=lambda i: i.id):
            name = _short_profile_name(info.name) or compute_instance_name(info.sliceCount, gi_name)
            if any(p['name'] == name for p in profiles):
                continue
            profiles.append({
                'name': name,
                'id': info.id,
                'compute_slices': info.sliceCount,
                'max_count': info.instanceCount,
                'placements': self._ci_placements(index, gi_handle, info.id),
            })
        return profiles

    def _gpu_instances(self, index, handle, gi_profiles):
        mig_devices = self._mig_devices(index, handle)
        ci_profiles = {}    # GPU instance profile id -> its compute instance profile infos (the same for each GI)
        instances = []
        for dummy, info in gi_profiles:
            array = (pynvml.c_nvmlGpuInstance_t * _MAX_INSTANCES)()
            count = ctypes.c_uint(0)
            self._call(index, 'list GPU instances', pynvml.nvmlDeviceGetGpuInstances, handle, info.id, array, ctypes.byref(count))
            for position in range(count.value):
                gi_info = self._call(index, 'read GPU instance', pynvml.nvmlGpuInstanceGetInfo, array[position])
                gi_name = _short_profile_name(info.name) or _text(info.name)
                instances.append(GpuInstance(
                    id=gi_info.id, profile=gi_name, profile_id=gi_info.profileId,
                    placement=Placement(gi_info.placement.start, gi_info.placement.size),
                    compute_instances=self._compute_instances(index, array[position], gi_info.id, gi_name, mig_devices,
                                                              ci_profiles.setdefault(info.id, []))))
        return tuple(sorted(instances, key=lambda gi: gi.start))

    def _ci_profile_infos(self, index, gi_handle, gi_id):
        """The compute instance profiles a GPU instance offers. Only the answers that mean "not offered here" are
        skipped: any other error raises, or the instance would read as having no compute instance (idle)."""
        infos = []
        for enum in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            try:
                infos.append(pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi_handle, enum, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED))
            except pynvml.NVMLError as exc:
                if exc.value in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                    continue
                raise BackendError('GPU %d: read compute profile %d of GPU instance %d failed: %s'
                                   % (index, enum, gi_id, _nvml_error_name(exc)))
        return infos

    def _compute_instances(self, index, gi_handle, gi_id, gi_name, mig_devices, ci_infos):
        """``ci_infos``: the GI profile's compute instance profiles, filled on first use (a list shared per profile)."""
        if not ci_infos:
            ci_infos.extend(self._ci_profile_infos(index, gi_handle, gi_id))
        result = []
        for info in ci_infos:
            array = (pynvml.c_nvmlComputeInstance_t * _MAX_INSTANCES)()
            count = ctypes.c_uint(0)
            self._call(index, 'list compute instances', pynvml.nvmlGpuInstanceGetComputeInstances, gi_handle, info.id, array,
                       ctypes.byref(count))
            for position in range(count.value):
                ci_info = self._call(index, 'read compute instance', pynvml.nvmlComputeInstanceGetInfo, array[position])
                device = mig_devices.get((gi_id, ci_info.id), {})
                result.append(ComputeInstance(
                    id=ci_info.id, profile=_short_profile_name(info.name) or compute_instance_name(info.sliceCount, gi_name),
                    profile_id=ci_info.profileId, placement=Placement(ci_info.placement.start, ci_info.placement.size),
                    uuid=device.get('uuid'), mig_index=device.get('mig_index'), processes=device.get('processes', ())))
        return tuple(sorted(result, key=lambda ci: ci.placement.start))

    def _mig_devices(self, index, handle):
        """(gpu instance id, compute instance id) -> {uuid, processes} of each MIG device (what workloads see)."""
        found = {}
        slots = self._call(index, 'count MIG devices', pynvml.nvmlDeviceGetMaxMigDeviceCount, handle)
        for slot in range(slots):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except pynvml.NVMLError as exc:
                if exc.value == pynvml.NVML_ERROR_NOT_FOUND:
                    continue
                raise BackendError('GPU %d: open MIG device %d failed: %s' % (index, slot, _nvml_error_name(exc)))
            key = (self._call(index, 'read MIG device', pynvml.nvmlDeviceGetGpuInstanceId, mig),
                   self._call(index, 'read MIG device', pynvml.nvmlDeviceGetComputeInstanceId, mig))
            found[key] = {'uuid': _text(self._call(index, 'read MIG device UUID', pynvml.nvmlDeviceGetUUID, mig)),
                          'mig_index': slot,
                          'processes': self._processes(index, mig)}
        return found

    # ---- mutations: one NVML change each -----------------------------------------

    def set_mig_mode(self, index, enabled):
        """Ask for a MIG mode; returns the activation status as an NVML error name, or None when it took effect.

        The call succeeds even when the change cannot take effect now: the mode then stays pending and
        the activation status says why (NVML_ERROR_IN_USE: another client holds the GPU).
        """
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        status = self._call(index, '%s MIG mode' % ('enable' if enabled else 'disable'), pynvml.nvmlDeviceSetMigMode,
                            self._handle(index), mode)
        if not status:
            return None
        return nvml_error_name(status)

    def read_mode(self, index):
        """The MIG mode alone (_host_model.MigMode): what a mode change is checked with."""
        current, pending = self._call(index, 'read MIG mode', pynvml.nvmlDeviceGetMigMode, self._handle(index))
        return _mig_mode(current, pending)

    def reset_gpu(self, index):
        """GPU reset applies a pending MIG mode; it drops every GPU instance."""
        self.close()
        try:
            if self.simulated:
                try:
                    self._simulator.simulate_gpu_reset(self.state_path, index)
                except Exception as exc:  # the simulator's refusal mirrors nvidia-smi's
                    raise BackendError('GPU %d: reset failed: %s' % (index, exc))
            else:
                if self._run_command is None:
                    raise BackendError('GPU %d: reset needs a command runner' % index)
                rc, out, err = self._run_command(['nvidia-smi', '--gpu-reset', '-i', str(index)])
                if rc != 0:
                    raise BackendError('GPU %d: nvidia-smi --gpu-reset failed (rc=%d): %s' % (index, rc, (err or out).strip()))
        finally:
            if self.simulated:
                self._simulator.install(pynvml, self.state_path)
            self._call(None, 'initialise NVML', pynvml.nvmlInit)

    def create_gpu_instance(self, index, profile_id, start):
        handle = self._handle(index)
        placement = self._placement(pynvml.c_nvmlGpuInstancePlacement_t, self._gi_placements(index, handle, profile_id), start)
        gi = self._call(index, 'create GPU instance (profile id %d at slice %d)' % (profile_id, start),
                        pynvml.nvmlDeviceCreateGpuInstanceWithPlacement, handle, profile_id, ctypes.byref(placement))
        return self._call(index, 'read GPU instance', pynvml.nvmlGpuInstanceGetInfo, gi).id

    def create_compute_instance(self, index, gi_id, profile_id, start):
        gi_handle = self._gi_handle(index, self._handle(index), gi_id)
        placement = self._placement(pynvml.c_nvmlComputeInstancePlacement_t, self._ci_placements(index, gi_handle, profile_id), start)
        ci = self._call(index, 'create compute instance (profile id %d at slice %d in GPU instance %d)' % (profile_id, start, gi_id),
                        pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement, gi_handle, profile_id, ctypes.byref(placement))
        return self._call(index, 'read compute instance', pynvml.nvmlComputeInstanceGetInfo, ci).id

    def compute_profiles_of(self, index, gi_id, gi_name):
        """Compute instance profiles of an existing GPU instance, as NVML reports them."""
        return self._compute_profiles(index, self._handle(index), gi_id, gi_name)

    def destroy_compute_instance(self, index, gi_id, ci_id):
        gi_handle = self._gi_handle(index, self._handle(index), gi_id)
        ci = self._call(index, 'get compute instance %d' % ci_id, pynvml.nvmlGpuInstanceGetComputeInstanceById, gi_handle, ci_id)
        self._call(index, 'destroy compute instance %d of GPU instance %d' % (ci_id, gi_id), pynvml.nvmlComputeInstanceDestroy, ci)

    def destroy_gpu_instance(self, index, gi_id):
        gi_handle = self._gi_handle(index, self._handle(index), gi_id)
        self._call(index, 'destroy GPU instance %d' % gi_id, pynvml.nvmlGpuInstanceDestroy, gi_handle)
