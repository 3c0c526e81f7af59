# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Test double of gpufleet.mig: never shipped to a GPU host.

"""What happens to a simulated host outside NVML: a GPU reset as ``nvidia-smi -r`` does it, a
reboot, and test helpers that start or stop processes and clients on a GPU.

Resets and reboots are logged like mutations, and a reset can take faults; the helpers are
not logged (they stand for the world around the host, not for a call gpufleet.mig makes).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from gpufleet_nvml_sim import rules
from gpufleet_nvml_sim.errors import ERRORS, SUCCESS, SimulatorError, error_name
from gpufleet_nvml_sim.models import get_model, mode_applies_immediately
from gpufleet_nvml_sim.state import (
    append_log,
    check_clients,
    check_pids,
    file_lock,
    find,
    gpu_at,
    load_state,
    save_state,
    take_fault,
)

# Host events that are not NVML calls; logged like mutations (simulate_gpu_reset takes faults too).
HOST_EVENTS = ('simulate_gpu_reset', 'simulate_reboot')


def simulate_gpu_reset(path, index):
    """What ``nvidia-smi -r -i <index>`` does: refused (SimulatorError) while processes or clients such as
    nvidia-persistenced, DCGM or nvidia_drm hold the GPU; else the pending MIG mode becomes current and
    every GPU and compute instance is gone.

    Per architecture: on Ampere a reset is how a pending MIG mode takes effect (MIG User Guide). On Hopper
    and later MIG mode is driver state and a repeated nvmlDeviceSetMigMode on the idle GPU applies it; that
    a reset applies a pending mode there too, as modelled here, is NOT VERIFIED on hardware.
    """
    with file_lock(path):
        state = load_state(path)
        gpu = gpu_at(state, index, 'simulated reset')
        matched, code = take_fault(state, 'simulate_gpu_reset', index)
        if code is not None:
            save_state(path, state)
            append_log(path, 'simulate_gpu_reset', index, code, {})
            raise SimulatorError('simulated reset of GPU %d failed: %s (injected fault)' % (index, error_name(code)))
        pids, clients = rules.holders(gpu)
        if pids or clients:
            if matched:
                save_state(path, state)
            append_log(path, 'simulate_gpu_reset', index, ERRORS['NVML_ERROR_IN_USE'], {'pids': pids, 'clients': clients})
            held_by = ', '.join((['processes %s' % pids] if pids else []) + (['clients %s' % clients] if clients else []))
            raise SimulatorError('GPU %d is in use by %s; a reset needs an idle GPU' % (index, held_by))
        gpu['mig']['current'] = gpu['mig']['pending']
        gpu['gpu_instances'] = []
        save_state(path, state)
        append_log(path, 'simulate_gpu_reset', index, SUCCESS, {})


def simulate_reboot(path):
    """A host reboot: every instance and process is gone; Ampere applies its pending mode (and keeps it),
    Hopper and later come back with MIG disabled. Clients are services that start again at boot: kept."""
    with file_lock(path):
        state = load_state(path)
        for gpu in state['gpus']:
            gpu['gpu_instances'] = []
            gpu['pids'] = []
            if mode_applies_immediately(get_model(gpu['model'])):
                gpu['mig'] = {'current': 'disabled', 'pending': 'disabled'}
            else:
                gpu['mig']['current'] = gpu['mig']['pending']
        save_state(path, state)
        append_log(path, 'simulate_reboot', None, SUCCESS, {})


def set_pids(path, index, gi_id, ci_id, pids):
    """The processes now running on compute instance ``ci_id`` of GPU instance ``gi_id`` of GPU ``index``
    (with ``gi_id`` None: on the GPU itself, outside MIG). Not an NVML call: not logged."""
    pids = list(pids) if isinstance(pids, (list, tuple)) else pids
    check_pids('set_pids', pids)
    with file_lock(path):
        state = load_state(path)
        gpu = gpu_at(state, index, 'set_pids')
        if gi_id is None:
            holder = gpu
        else:
            gi = find(gpu['gpu_instances'], gi_id)
            holder = find(gi['compute_instances'], ci_id) if gi else None
            if holder is None:
                raise SimulatorError('set_pids: GPU %d has no compute instance %r in GPU instance %r' % (index, ci_id, gi_id))
        holder['pids'] = pids
        save_state(path, state)


def set_clients(path, index, clients):
    """The clients that now hold GPU ``index`` open besides processes, e.g. ``['nvidia-persistenced']``,
    ``['dcgm']``, ``['nvidia_drm']`` (an empty list: none). They keep a MIG mode change pending and refuse a
    GPU reset. Not an NVML call: not logged."""
    clients = list(clients) if isinstance(clients, (list, tuple)) else clients
    check_clients('set_clients', clients)
    with file_lock(path):
        state = load_state(path)
        gpu_at(state, index, 'set_clients')['clients'] = clients
        save_state(path, state)


def set_mig_clients(path, index, clients):
    """The GPU clients that now hold GPU ``index``'s MIG devices open, e.g. ``['dcgm']`` or
    ``['dcgm-exporter']`` (an empty list: none). Like DCGM on real drivers they list no process, yet every
    compute or GPU instance destroy on the GPU answers NVML_ERROR_IN_USE (DCGM issues 95 and 276), a MIG mode
    change stays pending and a reset is refused. Not an NVML call: not logged."""
    clients = list(clients) if isinstance(clients, (list, tuple)) else clients
    check_clients('set_mig_clients', clients)
    with file_lock(path):
        state = load_state(path)
        gpu_at(state, index, 'set_mig_clients')['mig_clients'] = clients
        save_state(path, state)
