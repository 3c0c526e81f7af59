# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Test double of gpufleet.mig: never shipped to a GPU host.

"""The state file of a simulated host: load and validate it, save it atomically under ``flock``,
append to its call log, and keep the books of its faults.

The file is the host (schema in docs/simulator.md). Loading validates it and fills what it
leaves out (uuids, bus ids, modes, placements, instance ids); those values are written back
with the next save and kept from then on.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile

from gpufleet_nvml_sim import rules
from gpufleet_nvml_sim.abi import MAX_INSTANCE_ID
from gpufleet_nvml_sim.errors import ERRORS, SimulatorError, error_name
from gpufleet_nvml_sim.models import UnknownModel, compute_instance_name, for_driver

DEFAULT_DRIVER_VERSION = '580.95.05'
_PCI_BUS_ID = re.compile(r'^[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$')
_MODES = ('enabled', 'disabled')

# ---- files --------------------------------------------------------------------------------------


def call_log_path(path):
    return path + '.calls.jsonl'


@contextlib.contextmanager
def file_lock(path):
    """The host's lock: every read-modify-write of the state file holds ``flock`` on ``<state>.lock``."""
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
    validate_state(path, state)
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
    validate_state(path, state)
    with file_lock(path):
        save_state(path, state)
    return state


def read_call_log(path):
    """The call log as a list of dicts (empty when nothing was logged)."""
    try:
        with open(call_log_path(path)) as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except (IOError, OSError):
        return []


def append_log(path, call, gpu, code, arguments, outcome=None):
    """One call-log line: the call, its GPU, its arguments, its result, the calling process, and what the
    call reports besides its result (``outcome``: e.g. ``created`` ids, an ``activation_status``)."""
    entry = {'call': call, 'gpu': gpu, 'args': arguments, 'result': error_name(code), 'pid': os.getpid()}
    entry.update(outcome or {})
    with open(call_log_path(path), 'a') as handle:
        handle.write(json.dumps(entry, sort_keys=True) + '\n')


# ---- navigation -----------------------------------------------------------------------------------


def find(entries, entry_id):
    """The GPU or compute instance with this id, or None."""
    for entry in entries:
        if entry['id'] == entry_id:
            return entry
    return None


def gpu_at(state, index, who):
    """``state['gpus'][index]``; a SimulatorError naming ``who`` for an index the host does not have."""
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(state['gpus']):
        raise SimulatorError('%s: no GPU %r (the host has %d)' % (who, index, len(state['gpus'])))
    return state['gpus'][index]


def derived_uuid(*parts):
    """A stable UUID-shaped string from ``parts`` (GPU and MIG device UUIDs the file leaves out)."""
    digest = hashlib.sha1('-'.join(str(p) for p in parts).encode()).hexdigest()
    return '%s-%s-%s-%s-%s' % (digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32])


# ---- faults ---------------------------------------------------------------------------------------


def take_fault(state, call, index):
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


def has_pending_fault(state, call, index):
    return any(not f['fired'] and f['call'] == call and f.get('gpu') in (None, index) for f in state['faults'])


def _fault_calls():
    """(calls a fault may name, those of them that concern no GPU)."""
    # Imported here: the library and the host events import this module.
    from gpufleet_nvml_sim.library import NEVER_FAILING_CALLS, SYMBOLS, SYSTEM_CALLS
    return tuple(call for call in SYMBOLS if call not in NEVER_FAILING_CALLS) + ('simulate_gpu_reset',), SYSTEM_CALLS


# ---- validation -------------------------------------------------------------------------------------


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def check_pids(where, pids):
    if not isinstance(pids, list) or not all(_is_int(p) and p > 0 for p in pids):
        raise SimulatorError('%s: pids must be a list of positive integers, got %r' % (where, pids))


def check_clients(where, clients):
    if not isinstance(clients, list) or not all(isinstance(c, str) and c.strip() for c in clients):
        raise SimulatorError('%s: clients must be a list of names such as "nvidia-persistenced", got %r' % (where, clients))


def _check_ids(where, entries, what):
    ids = [entry['id'] for entry in entries if 'id' in entry]
    for value in ids:
        if not _is_int(value) or not 0 <= value <= MAX_INSTANCE_ID:
            raise SimulatorError('%s: %s id %r must be an integer from 0 to %d' % (where, what, value, MAX_INSTANCE_ID))
    if len(ids) != len(set(ids)):
        raise SimulatorError('%s: duplicate %s ids %s' % (where, what, sorted(ids)))


def _strip_prefix(name):
    return name[4:] if isinstance(name, str) and name.startswith('MIG ') else name


def validate_state(path, state):
    """Check a whole state (SimulatorError naming the bad entry) and fill its defaults in place."""
    where = 'simulator state %s' % path
    if not isinstance(state, dict) or not isinstance(state.get('gpus'), list):
        raise SimulatorError('%s: needs a "gpus" list' % where)
    state.setdefault('driver_version', DEFAULT_DRIVER_VERSION)
    if not isinstance(state['driver_version'], str):
        raise SimulatorError('%s: driver_version must be a string' % where)
    if not isinstance(state.get('nvml_version', ''), str):
        raise SimulatorError('%s: nvml_version must be a string' % where)
    for index, gpu in enumerate(state['gpus']):
        _validate_gpu('%s: gpus[%d]' % (where, index), index, gpu, state['driver_version'])
    faults = state.setdefault('faults', [])
    if not isinstance(faults, list):
        raise SimulatorError('%s: faults must be a list' % where)
    for position, fault in enumerate(faults):
        _validate_fault('%s: faults[%d]' % (where, position), fault, len(state['gpus']))


def _validate_identity(where, index, gpu, model):
    gpu.setdefault('uuid', 'GPU-' + derived_uuid(index, gpu['model']))
    gpu.setdefault('pci_bus_id', '%08X:%02X:00.0' % (index // 16, 0x07 + 0x10 * (index % 16)))
    if not isinstance(gpu['pci_bus_id'], str) or not _PCI_BUS_ID.match(gpu['pci_bus_id']):
        raise SimulatorError('%s: pci_bus_id %r must look like 00000000:07:00.0' % (where, gpu['pci_bus_id']))
    if not isinstance(gpu['uuid'], str) or not gpu['uuid'].startswith('GPU-'):
        raise SimulatorError('%s: uuid %r must start with GPU-' % (where, gpu['uuid']))
    if 'minor_number' in gpu and (not _is_int(gpu['minor_number']) or gpu['minor_number'] < 0):
        raise SimulatorError('%s: minor_number %r must be a non-negative integer' % (where, gpu['minor_number']))
    if 'pci_device_id' in gpu:
        value = gpu['pci_device_id']
        try:
            value = int(value, 16) if isinstance(value, str) else value
        except ValueError:
            value = None
        if not _is_int(value) or value not in model['pci_device_ids']:
            raise SimulatorError('%s: pci_device_id %r is not one of the %s ids %s' % (
                where, gpu['pci_device_id'], gpu['model'], ', '.join('0x%08X' % i for i in model['pci_device_ids'])))
        gpu['pci_device_id'] = value
    if 'pci_subsystem_id' in gpu:
        value = gpu['pci_subsystem_id']
        try:
            value = int(value, 16) if isinstance(value, str) else value
        except ValueError:
            value = None
        if not _is_int(value) or not 0 <= value <= 0xFFFFFFFF:
            raise SimulatorError('%s: pci_subsystem_id %r must be a 32-bit id such as "0x147F10DE"' % (where, gpu['pci_subsystem_id']))
        gpu['pci_subsystem_id'] = value
    # Which id of its range a new GPU instance gets rotates from this seed (rules.new_gpu_instance_id).
    gpu.setdefault('gi_id_seed', int(derived_uuid('gi-id-seed', gpu['uuid'])[:4], 16))
    gpu.setdefault('gi_created', 0)
    if not _is_int(gpu['gi_id_seed']) or not _is_int(gpu['gi_created']) or gpu['gi_created'] < 0:
        raise SimulatorError('%s: gi_id_seed and gi_created must be integers' % where)


def next_gpu_instance_id(model, gpu, profile):
    """The id the driver gives the next GPU instance of ``profile`` on ``gpu`` (counts the creation)."""
    gi_id = rules.new_gpu_instance_id(model, gpu['gpu_instances'], profile, gpu['gi_id_seed'] + gpu['gi_created'])
    gpu['gi_created'] += 1
    return gi_id


def _validate_gpu(where, index, gpu, driver_version):
    if not isinstance(gpu, dict):
        raise SimulatorError('%s: must be an object' % where)
    try:
        model = for_driver(gpu.get('model'), driver_version)
    except UnknownModel as exc:
        raise SimulatorError('%s: %s' % (where, exc.args[0]))
    _validate_identity(where, index, gpu, model)
    mig = gpu.setdefault('mig', {})
    if not isinstance(mig, dict):
        raise SimulatorError('%s: mig must be an object with current and pending' % where)
    mig.setdefault('current', 'disabled')
    mig.setdefault('pending', mig['current'])
    for key in ('current', 'pending'):
        if mig[key] not in _MODES:
            raise SimulatorError('%s: mig.%s must be enabled or disabled, got %r' % (where, key, mig[key]))
    if not model['mig_capable'] and 'enabled' in (mig['current'], mig['pending']):
        raise SimulatorError('%s: %s is not MIG-capable' % (where, gpu['model']))
    check_pids(where, gpu.setdefault('pids', []))
    check_clients(where, gpu.setdefault('clients', []))
    # GPU clients that hold MIG devices open (DCGM, dcgm-exporter): no process, yet destroys fail with IN_USE.
    check_clients(where, gpu.setdefault('mig_clients', []))
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
        profile = rules.profile_by_name(model, gi['profile'])
        if profile is None:
            raise SimulatorError('%s: unknown GPU instance profile %r for %s (profiles: %s)'
                                 % (gi_where, gi['profile'], gpu['model'], ', '.join(p['name'] for p in model['profiles'])))
        if 'start' not in gi:
            gi['start'] = rules.auto_gi_start(model, placed, profile)
            if gi['start'] is None:
                raise SimulatorError('%s: no free placement for %s' % (gi_where, profile['name']))
        problem = rules.gi_problem(model, placed, profile, gi['start'])
        if problem:
            raise SimulatorError('%s: %s' % (gi_where, problem[1]))
        placed.append(gi)
        if 'id' not in gi:     # ids a file carries are kept, whatever numbering wrote them
            gi['id'] = next_gpu_instance_id(model, gpu, profile)
        _validate_compute_instances(gi_where, model, profile, gi, driver_version)


def _validate_compute_instances(where, model, gi_profile, gi, driver_version):
    cis = gi.setdefault('compute_instances', [])
    if not isinstance(cis, list) or not all(isinstance(ci, dict) for ci in cis):
        raise SimulatorError('%s: compute_instances must be a list of objects' % where)
    _check_ids(where, cis, 'compute instance')
    placed = []
    for position, ci in enumerate(cis):
        ci_where = '%s.compute_instances[%d]' % (where, position)
        ci['profile'] = _strip_prefix(ci.get('profile'))
        slices = rules.ci_slices_by_name(gi_profile, ci['profile'])
        if slices is None:
            raise SimulatorError('%s: compute instance profile %r is not valid in %s (valid: %s)'
                                 % (ci_where, ci['profile'], gi_profile['name'],
                                    ', '.join(compute_instance_name(gi_profile, s) for s in sorted(gi_profile['compute_placements']))))
        if 'start' not in ci:
            ci['start'] = rules.auto_ci_start(gi_profile, placed, slices)
            if ci['start'] is None:
                raise SimulatorError('%s: no free placement for %s' % (ci_where, ci['profile']))
        problem = rules.ci_problem(gi_profile, placed, slices, ci['start'])
        if problem:
            raise SimulatorError('%s: %s' % (ci_where, problem[1]))
        placed.append(ci)
        # The profile id it was created with: the plain one unless the file names the variant (CI_ENUM_* in models.py).
        ci.setdefault('profile_id', rules.ci_profile_id(slices))
        if rules.ci_profiles(model, gi_profile, driver_version).get(ci['profile_id']) != slices:
            raise SimulatorError('%s: compute instance profile id %r is not one of %s in %s' % (
                ci_where, ci['profile_id'], ci['profile'], gi_profile['name']))
        check_pids(ci_where, ci.setdefault('pids', []))
        if 'id' not in ci:
            ci['id'] = rules.lowest_free(0, set(c['id'] for c in cis if 'id' in c))


def _validate_fault(where, fault, gpu_count):
    calls, system_calls = _fault_calls()
    if not isinstance(fault, dict):
        raise SimulatorError('%s: must be an object' % where)
    if fault.get('call') not in calls:
        raise SimulatorError('%s: unknown call %r (a simulated NVML symbol that can fail, or simulate_gpu_reset)'
                             % (where, fault.get('call')))
    gpu = fault.get('gpu')
    if gpu is not None and (not _is_int(gpu) or not 0 <= gpu < gpu_count):
        raise SimulatorError('%s: gpu must be the index of one of the %d GPU(s), or absent (any GPU)' % (where, gpu_count))
    if gpu is not None and fault['call'] in system_calls:
        raise SimulatorError('%s: %s concerns no GPU, so a fault on it cannot name one: drop gpu' % (where, fault['call']))
    nth = fault.setdefault('nth', 1)
    if not _is_int(nth) or nth < 1:
        raise SimulatorError('%s: nth must be an integer >= 1' % where)
    error = fault.setdefault('error', 'NVML_ERROR_UNKNOWN')
    if isinstance(error, str) and not error.startswith('NVML_ERROR_'):
        error = fault['error'] = 'NVML_ERROR_' + error
    if not (error in ERRORS or (_is_int(error) and error > 0)):
        raise SimulatorError('%s: unknown error %r (an NVML_ERROR_* name or a nonzero code)' % (where, error))
    fault.setdefault('seen', 0)
    fault.setdefault('fired', False)
