# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The hardware check: the first thing to run on a machine with real NVIDIA GPUs (docs/hardware.md).

Read-only by construction: in its own process and in every Python process its ansible-playbook run starts, pynvml
lets only read calls reach the driver (tests/hw/read_only/nvml_read_only.py); the modules run in check mode. So: no
MIG mode change, no instance created or destroyed, no reset. It

1. reads every GPU through NVML (nvidia-ml-py) with read calls only: identity, memory, MIG mode, every GPU
   instance profile (ids, names, memory, slices, SMs, counts, placements), the placements NVML answers
   with MIG off and what the profile calls answer then, the GPU and compute instances that exist and
   their compute instance profiles;
2. runs the collection's modules on localhost: nvidia_mig_facts, then nvidia_mig_mode and nvidia_mig_instance
   in check mode on every GPU, and nvidia_mig_layout (the shipped catalog's all-balanced) in check mode on the
   host, which checks the GPUs whose MIG is off against what NVML tells before any change;
3. compares every value NVML answered, MIG on or off, with the NVML simulator's table of that model
   (simulator/gpufleet_nvml_sim, found by PCI device id) as the driver that answered reports it (the table's
   driver-branch variant, where there is one), and prints every difference as a table.

Everything it read is saved under build/hw-check/ (nvml.json, modules.json, differences.json). ``--answers
nvml.json`` compares the answers a run saved (tests/hw/recorded/ keeps those of real hosts) without NVML.

Exit status: 0 when NVML and the simulator's tables agree and every module ran; 1 when they differ or a
module failed; 2 when it cannot run (no NVIDIA library: one line says so).

    python tests/hw/hw_check.py [--out DIR] [--nvml-library PATH] [--skip-modules] [--simulated] [--answers NVML_JSON]

``--simulated`` lets GPUFLEET_MIG_SIMULATOR stand in for the library (the tests check the script that
way); without it a set GPUFLEET_MIG_SIMULATOR is refused, so that real hardware is never compared with
the simulator itself.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import ctypes
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for _path in (os.path.join(REPO, 'build', 'collections'), REPO):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from tests.support.simulator import SIMULATOR_ENV, simulated_environment, simulator_on_path  # noqa: E402  (after the path)

simulator_on_path()
from gpufleet_nvml_sim import rules  # noqa: E402  (the simulator's own answer rules: one definition)
from gpufleet_nvml_sim.errors import NvmlFailure, error_name  # noqa: E402
from gpufleet_nvml_sim.models import MODELS, as_driver_reports  # noqa: E402
from tests.hw.read_only import nvml_read_only  # noqa: E402

MAX_PROFILE_ID = 96         # as the NVML backend asks with MIG off (_nvml_backend._PROFILE_IDS_WITHOUT_MIG)
MAX_ITEMS = 32
CATALOG = os.path.join(REPO, 'roles', 'mig_layout', 'files', 'catalog.yml')
# First on PYTHONPATH of every process the check starts: its sitecustomize.py guards pynvml (nvml_read_only).
READ_ONLY_DIR = os.path.dirname(os.path.abspath(nvml_read_only.__file__))
GUARD_TASK = 'read-only guard'
# What nvidia_mig_instance answers on a GPU whose MIG is off (the check runs it there all the same).
INSTANCE_REFUSAL_WITHOUT_MIG = 'MIG mode is disabled'
# The layout the layout module plans (check mode) on every GPU: the shipped catalog's balanced one.
LAYOUT = 'all-balanced'


class CannotRun(Exception):
    """The check cannot run here; the message is the one line it prints."""


# ---- 1. NVML, read calls only ------------------------------------------------------------------

def _error_name(pynvml, exc):
    value = getattr(exc, 'value', None)
    for name in dir(pynvml):
        if name.startswith('NVML_ERROR_') and getattr(pynvml, name) == value:
            return name
    return 'NVML error %s' % value


def _text(value):
    return value.decode('utf-8', 'replace') if isinstance(value, bytes) else value


def _answer(pynvml, function, *args):
    """{'value': ...} or {'error': 'NVML_ERROR_...'}: a refused read is an answer too."""
    try:
        return {'value': function(*args)}
    except pynvml.NVMLError as exc:
        return {'error': _error_name(pynvml, exc)}


def _placements(pynvml, function, struct, handle, profile_id):
    array = (struct * MAX_ITEMS)()
    count = ctypes.c_uint(MAX_ITEMS)
    try:
        function(handle, profile_id, array, ctypes.byref(count))
    except pynvml.NVMLError as exc:
        return {'error': _error_name(pynvml, exc)}
    return {'value': [[array[i].start, array[i].size] for i in range(count.value)]}


def _gi_profile(info):
    return {'id': info.id, 'name': _text(info.name), 'compute_slices': info.sliceCount, 'memory_mib': info.memorySizeMB,
            'multiprocessors': info.multiprocessorCount, 'max_count': info.instanceCount,
            'copy_engines': info.copyEngineCount, 'decoders': info.decoderCount, 'encoders': info.encoderCount,
            'jpegs': info.jpegCount, 'ofas': info.ofaCount}


def read_gpu(pynvml, index):
    """Every answer of one GPU, as plain data (the raw answers the comparison reads)."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    gpu = {
        'index': index,
        'name': _text(pynvml.nvmlDeviceGetName(handle)),
        'uuid': _text(pynvml.nvmlDeviceGetUUID(handle)),
        'pci_device_id': pci.pciDeviceId,
        'pci_subsystem_id': pci.pciSubSystemId,
        'architecture': _answer(pynvml, pynvml.nvmlDeviceGetArchitecture, handle),
        'memory_total_mib': pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024),
        'mig_mode': _answer(pynvml, pynvml.nvmlDeviceGetMigMode, handle),
        'max_mig_device_count': _answer(pynvml, pynvml.nvmlDeviceGetMaxMigDeviceCount, handle),
    }
    if 'error' in gpu['mig_mode']:
        return gpu
    profiles = {}
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        answer = _answer(pynvml, pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, enum)
        profiles[str(enum)] = _gi_profile(answer['value']) if 'value' in answer else answer
    gpu['profile_info_by_enum'] = profiles
    placements = {}
    for profile_id in range(MAX_PROFILE_ID):
        answer = _placements(pynvml, pynvml.nvmlDeviceGetGpuInstancePossiblePlacements, pynvml.c_nvmlGpuInstancePlacement_t,
                             handle, profile_id)
        if 'value' in answer:
            placements[str(profile_id)] = answer['value']
    gpu['placements_by_id'] = placements
    gpu['gpu_instances'] = _gpu_instances(pynvml, handle, profiles)
    return gpu


def _gpu_instances(pynvml, handle, profiles):
    found = []
    for profile in profiles.values():
        if 'id' not in profile:
            continue
        array = (pynvml.c_nvmlGpuInstance_t * MAX_ITEMS)()
        count = ctypes.c_uint(0)
        try:
            pynvml.nvmlDeviceGetGpuInstances(handle, profile['id'], array, ctypes.byref(count))
        except pynvml.NVMLError:
            continue
        for position in range(count.value):
            info = pynvml.nvmlGpuInstanceGetInfo(array[position])
            compute = {}
            for enum in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
                answer = _answer(pynvml, pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo, array[position], enum,
                                 pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
                if 'value' not in answer:
                    compute[str(enum)] = answer
                    continue
                ci = answer['value']
                compute[str(enum)] = {
                    'id': ci.id, 'name': _text(ci.name), 'compute_slices': ci.sliceCount, 'max_count': ci.instanceCount,
                    'placements': _placements(pynvml, pynvml.nvmlGpuInstanceGetComputeInstancePossiblePlacements,
                                              pynvml.c_nvmlComputeInstancePlacement_t, array[position], ci.id)}
            found.append({'id': info.id, 'profile_id': info.profileId, 'profile': profile['name'],
                          'placement': [info.placement.start, info.placement.size], 'compute_profiles': compute})
    return sorted(found, key=lambda gi: gi['placement'])


def open_nvml(library, simulated):
    """pynvml, initialised. CannotRun (one line) where NVIDIA's library or nvidia-ml-py is missing."""
    if os.environ.get(SIMULATOR_ENV) and not simulated:
        raise CannotRun('%s is set: unset it to check the real GPUs (--simulated checks the simulator, for the tests)'
                        % SIMULATOR_ENV)
    try:
        import pynvml
    except ImportError:
        raise CannotRun('nvidia-ml-py is not installed for %s: pip install nvidia-ml-py' % sys.executable)
    nvml_read_only.install(pynvml)      # before the library is loaded: no call but a read reaches it
    if simulated:
        from ansible_collections.gpufleet.mig.plugins.module_utils.host._nvml_backend import load_simulator
        load_simulator(os.environ[SIMULATOR_ENV]).install(pynvml, os.environ[SIMULATOR_ENV])
    elif library:
        try:
            pynvml.nvmlLib = ctypes.CDLL(library)
        except OSError as exc:
            raise CannotRun("NVIDIA's library %s cannot be loaded (%s): this machine has no NVIDIA driver" % (library, exc))
        pynvml._nvmlGetFunctionPointer_cache.clear()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise CannotRun("NVIDIA's library libnvidia-ml.so.1 cannot be used: %s (%s): this machine has no NVIDIA driver "
                        'loaded' % (_error_name(pynvml, exc), exc))
    return pynvml


def recorded_answers(path):
    """The answers an earlier run saved (nvml.json); CannotRun (one line) where the file cannot be read as such."""
    try:
        with open(path) as handle:
            nvml = json.load(handle)
        if not isinstance(nvml.get('gpus'), list) or 'driver_version' not in nvml:
            raise ValueError('no driver_version and gpus')
    except (IOError, OSError, ValueError, AttributeError) as exc:
        raise CannotRun('cannot read the recorded answers %s: %s' % (path, exc))
    nvml.setdefault('nvml_version', '?')
    return nvml


def read_nvml(pynvml):
    return {
        'driver_version': _text(pynvml.nvmlSystemGetDriverVersion()),
        'nvml_version': _text(pynvml.nvmlSystemGetNVMLVersion()),
        'gpus': [read_gpu(pynvml, index) for index in range(pynvml.nvmlDeviceGetCount())],
    }


# ---- 3. the comparison with the simulator's tables (pure) -----------------------------------------

def find_model(models, gpu):
    """(key, table) of the simulated model with this PCI device id (the name decides between several); (None, None)."""
    keys = sorted(key for key, model in models.items() if gpu['pci_device_id'] in model.get('pci_device_ids', ()))
    named = [key for key in keys if models[key].get('nvml_name') == gpu['name']]
    key = (named or keys or [None])[0]
    return key, models.get(key)


def _starts(placements):
    return sorted(start for start, dummy in placements)


def _sizes(placements):
    return sorted(set(size for dummy, size in placements))


def _status(answer):
    """'SUCCESS' for a profile NVML described, else its error name."""
    return answer['error'] if 'error' in answer else 'SUCCESS'


def _by_status(answers):
    """{status: [enums]} of profile info answers {enum: answer}."""
    grouped = {}
    for enum, answer in sorted(answers.items()):
        grouped.setdefault(_status(answer), []).append(enum)
    return grouped


def expected_profile_info(model, enum, mig_on):
    """The table's profile for an enum, or {'error': name}: what the simulator answers with this table (MIG on or off,
    and what the driver variant answers with MIG off)."""
    try:
        return rules.profile_info(model, enum, mig_on)
    except NvmlFailure as failure:
        return {'error': error_name(failure.code)}


def compare_gpu(gpu, key, model):
    """Every difference between NVML's answers for one GPU and the simulator's table: [(item, nvml, simulator)].

    Every value NVML answered is compared, MIG on or off: the status of each profile enum and, where NVML described a
    profile, its id, name, compute slices, memory, SMs, max count and engines; the profile ids whose placements
    answer, with their starts and sizes, and those answering with none; the existing instances' compute profiles.
    """
    if model is None:
        return [('model', '%s (0x%08X)' % (gpu['name'], gpu['pci_device_id']), 'no simulated model has this PCI device id')]
    rows = []

    def differ(item, real, table):
        if real != table:
            rows.append((item, real, table))

    differ('name', gpu['name'], model['nvml_name'])
    differ('memory_total_mib', gpu['memory_total_mib'], model['memory_total_mib'])
    differ('architecture', gpu['architecture'].get('value', gpu['architecture'].get('error')), model['architecture'])
    if not model.get('mig_capable', True) or 'error' in gpu['mig_mode']:
        differ('MIG capable', 'error' not in gpu['mig_mode'], bool(model.get('mig_capable', True)))
        return rows
    table = dict((profile['id'], profile) for profile in model['profiles'])
    placements = dict((int(profile_id), value) for profile_id, value in gpu['placements_by_id'].items())
    differ('profile ids with placements', sorted(i for i, found in placements.items() if found), sorted(table))
    differ('profile ids answering no placement', sorted(i for i, found in placements.items() if not found),
           sorted(model['empty_placement_ids']))
    for profile_id in sorted(set(placements) & set(table)):
        differ('profile %d placements: starts' % profile_id, _starts(placements[profile_id]), sorted(table[profile_id]['starts']))
        differ('profile %d placements: size' % profile_id, _sizes(placements[profile_id]), [table[profile_id]['memory_slices']])
    mig_on = gpu['mig_mode']['value'][0] == 1
    by_enum = dict((int(enum), answer) for enum, answer in gpu['profile_info_by_enum'].items())
    # The enums NVML was asked for (pynvml's NVML_GPU_INSTANCE_PROFILE_COUNT on that machine), answered as the table would.
    expected = dict((enum, expected_profile_info(model, enum, mig_on)) for enum in by_enum)
    differ('profile info answers%s' % ('' if mig_on else ' with MIG off'), _by_status(by_enum), _by_status(expected))
    # Whatever NVML described is compared with the table's profile of that enum, even where the table expects no
    # description (MIG off on a driver the simulator models by nvml.h): the status row above says that part.
    described = dict((enum, expected_profile_info(model, enum, True)) for enum in sorted(by_enum) if 'id' in by_enum[enum])
    described = dict((enum, profile) for enum, profile in described.items() if 'id' in profile)
    for enum, simulated in sorted(described.items()):
        real = by_enum[enum]
        name = simulated['name']
        differ('%s: id' % name, real['id'], simulated['id'])
        differ('%s: name' % name, real['name'], 'MIG ' + simulated['name'])
        for field in ('compute_slices', 'memory_mib', 'multiprocessors', 'max_count', 'copy_engines', 'decoders', 'encoders',
                      'jpegs', 'ofas'):
            if field in simulated:
                differ('%s: %s' % (name, field), real.get(field), simulated[field])
    enum_of_id = dict((by_enum[enum]['id'], enum) for enum in described)
    for gi in gpu.get('gpu_instances') or []:
        # The table's profile of the same enum (its id may be one of the differences).
        simulated = described.get(enum_of_id.get(gi['profile_id']))
        if simulated is None:
            continue
        real_ci = dict((answer['compute_slices'], answer) for answer in gi['compute_profiles'].values() if 'id' in answer)
        table_ci = simulated.get('compute_placements') or {}
        differ('%s: compute instance sizes' % simulated['name'], sorted(real_ci), sorted(table_ci))
        for slices in sorted(set(real_ci) & set(table_ci)):
            real_starts = sorted(start for start, dummy in real_ci[slices]['placements'].get('value', []))
            differ('%s: %dc starts' % (simulated['name'], slices), real_starts, sorted(table_ci[slices]))
    return rows


def compare(nvml, models):
    """[{gpu, model, item, nvml, simulator}] over every GPU, each against its model's table as the driver that answered
    reports it (the simulator's driver-branch variants: names, memory and the answers that differ from nvml.h)."""
    found = []
    for gpu in nvml['gpus']:
        key, model = find_model(models, gpu)
        if model is not None:
            model = as_driver_reports(model, nvml['driver_version'])
        for item, real, simulated in compare_gpu(gpu, key, model):
            found.append({'gpu': gpu['index'], 'model': key, 'item': item, 'nvml': real, 'simulator': simulated})
    return found


def table(rows, columns):
    """Rows of dicts as an aligned text table."""
    cells = [[str(column) for column in columns]] + [[_cell(row[column]) for column in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ['  '.join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in cells]
    lines.insert(1, '  '.join('-' * width for width in widths))
    return '\n'.join(lines)


def _cell(value):
    return value if isinstance(value, str) else json.dumps(value)


# ---- 2. the modules, on localhost ------------------------------------------------------------------

def module_playbook(nvml, host_dir):
    """Facts, then mode, instance and layout in check mode on every GPU."""
    import yaml
    with open(CATALOG) as handle:
        catalog = yaml.safe_load(handle)
    # First: the processes Ansible starts for the modules have the read-only guard, or nothing else runs.
    guard = {'argv': [sys.executable, '-c', 'import nvml_read_only; nvml_read_only.require_installed()']}
    tasks = [{'name': GUARD_TASK, 'changed_when': False, 'ansible.builtin.command': guard},
             {'name': 'facts', 'gpufleet.mig.nvidia_mig_facts': {'pod_resources': 'off'}}]
    layout_paths = {'config_dir': os.path.join(host_dir, 'etc'), 'lib_dir': os.path.join(host_dir, 'lib'),
                    'bin_dir': os.path.join(host_dir, 'bin'), 'systemd_dir': os.path.join(host_dir, 'systemd'), 'systemd': False}
    for gpu in nvml['gpus']:
        if 'error' in gpu['mig_mode']:
            continue
        index = str(gpu['index'])
        instances = {}
        for gi in gpu.get('gpu_instances') or []:
            name = gi['profile'].replace('MIG ', '')
            instances[name] = instances.get(name, 0) + 1
        tasks.extend([
            {'name': 'mode GPU %s' % index, 'check_mode': True, 'ignore_errors': True,
             'gpufleet.mig.nvidia_mig_mode': {'gpus': [index], 'state': 'enabled', 'pod_resources': 'off'}},
            {'name': 'instance GPU %s' % index, 'check_mode': True, 'ignore_errors': True,
             'gpufleet.mig.nvidia_mig_instance': {'gpus': [index], 'instances': instances, 'pod_resources': 'off'}},
        ])
    # The layout module plans every GPU of the host in one call.
    tasks.append({'name': 'layout', 'check_mode': True, 'ignore_errors': True,
                  'gpufleet.mig.nvidia_mig_layout': dict(layout_paths, name=LAYOUT, config=catalog, pod_resources='off')})
    return [{'name': 'gpufleet.mig hardware check (read-only)', 'hosts': 'localhost', 'connection': 'local', 'gather_facts': False,
             'vars': {'ansible_python_interpreter': sys.executable}, 'tasks': tasks}]


def read_only_environment(envvars):
    """``envvars`` with READ_ONLY_DIR first on PYTHONPATH: every Python process of the run guards pynvml."""
    rest = envvars.get('PYTHONPATH', os.environ.get('PYTHONPATH', ''))
    return dict(envvars, PYTHONPATH=os.pathsep.join([READ_ONLY_DIR] + [part for part in rest.split(os.pathsep) if part]))


def run_modules(nvml, out, simulated):
    from tests.support.playbook import ansible_settings, run_playbook
    import yaml
    path = os.path.join(out, 'modules.yml')
    with open(path, 'w') as handle:
        yaml.safe_dump(module_playbook(nvml, os.path.join(out, 'host')), handle, default_flow_style=False, sort_keys=False)
    envvars = ansible_settings()
    if simulated:
        envvars.update(simulated_environment(os.environ[SIMULATOR_ENV]))
    run = run_playbook(path, inventory='localhost,', envvars=read_only_environment(envvars), project_dir=REPO, timeout=240)
    results = {}
    rows = []
    tasks = [GUARD_TASK, 'facts'] + ['%s GPU %d' % (kind, gpu['index']) for gpu in nvml['gpus'] if 'error' not in gpu['mig_mode']
                                     for kind in ('mode', 'instance')] + ['layout']
    # nvidia_mig_instance refuses a GPU whose MIG is off, saying so: that refusal is the answer expected there.
    refusals = dict(('instance GPU %d' % gpu['index'], INSTANCE_REFUSAL_WITHOUT_MIG) for gpu in nvml['gpus']
                    if gpu.get('mig_mode', {}).get('value', [1])[0] == 0)
    # A failed task's result need not say 'failed' (ansible-core 2.19 leaves it out): its event's status does.
    statuses = dict((result['task'], result['status']) for result in run.results if result['host'] == 'localhost')
    for task in tasks:
        result = run.task_results(task).get('localhost', {'failed': True, 'msg': 'did not run: %s' % run.describe()})
        failed = bool(result.get('failed') or statuses.get(task) in ('failed', 'unreachable'))
        expected = task in refusals
        outcome = 'refused as expected' if failed and expected and refusals[task] in (result.get('msg') or '') else \
            'failed' if failed or expected else 'ok'
        results[task] = dict(result, failed=failed, outcome=outcome)
        rows.append({'module run': task, 'result': outcome,
                     'changed (check mode)': bool(result.get('changed')), 'message': (result.get('msg') or '')[:160]})
    return results, rows


# ---- main ------------------------------------------------------------------------------------------

def main(argv=None, models=None):
    parser = argparse.ArgumentParser(description='Read-only hardware check of gpufleet.mig against real NVML (docs/hardware.md).')
    parser.add_argument('--out', default=os.path.join(REPO, 'build', 'hw-check'), help='folder for the raw answers')
    parser.add_argument('--nvml-library', default='', help="path of NVIDIA's library (default: libnvidia-ml.so.1 as pynvml finds it)")
    parser.add_argument('--skip-modules', action='store_true', help='NVML and the comparison only')
    parser.add_argument('--simulated', action='store_true', help='let GPUFLEET_MIG_SIMULATOR stand in for the library (tests)')
    parser.add_argument('--answers', metavar='NVML_JSON', help="compare the answers an earlier run recorded (its nvml.json) "
                        "with the simulator's tables, without NVML and modules (after correcting a table)")
    args = parser.parse_args(argv)
    started = time.time()
    try:
        nvml = recorded_answers(args.answers) if args.answers else None
        if nvml is None:
            pynvml = open_nvml(args.nvml_library, args.simulated)
            try:
                nvml = read_nvml(pynvml)
            finally:
                pynvml.nvmlShutdown()
    except CannotRun as exc:
        print('hw-check: %s' % exc)
        return 2
    models = MODELS if models is None else models
    if not os.path.isdir(args.out):
        os.makedirs(args.out)
    if not args.answers:
        with open(os.path.join(args.out, 'nvml.json'), 'w') as handle:
            json.dump(nvml, handle, indent=1, sort_keys=True)
    print('hw-check: driver %s, NVML %s, %d GPU(s)%s; %s' % (
        nvml['driver_version'], nvml['nvml_version'], len(nvml['gpus']), ' (simulated)' if args.simulated else '',
        'answers recorded in %s' % args.answers if args.answers else 'raw answers in %s' % args.out))
    failed_modules = []
    if not args.skip_modules and not args.answers:
        results, rows = run_modules(nvml, args.out, args.simulated)
        with open(os.path.join(args.out, 'modules.json'), 'w') as handle:
            json.dump(results, handle, indent=1, sort_keys=True)
        print(table(rows, ['module run', 'result', 'changed (check mode)', 'message']))
        failed_modules = [row['module run'] for row in rows if row['result'] == 'failed']
    differences = compare(nvml, models)
    with open(os.path.join(args.out, 'differences.json'), 'w') as handle:
        json.dump(differences, handle, indent=1, sort_keys=True)
    if differences:
        print('hw-check: %d difference(s) between NVML and the simulator\'s tables:' % len(differences))
        print(table(differences, ['gpu', 'model', 'item', 'nvml', 'simulator']))
    else:
        print('hw-check: NVML and the simulator\'s tables agree')
    print('hw-check: %.1f s' % (time.time() - started))
    return 1 if differences or failed_modules else 0


if __name__ == '__main__':
    sys.exit(main())
