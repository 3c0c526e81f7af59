# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Named MIG layouts in the mig-parted v1 format: validation, selection, per-GPU resolution.

Pure Python: no NVML, no Ansible imports. The role validates on the controller (filter
plugin), and the boot-time apply reads the per-GPU result the role wrote on the host.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.mig.plugins.module_utils._mig_planner import PlanningError, plan_gpu
from ansible_collections.gpufleet.mig.plugins.module_utils._mig_profile import MigProfile, ProfileError

ENTRY_KEYS = ('devices', 'device-filter', 'mig-enabled', 'mig-devices')
DOCUMENT_KEYS = ('version', 'mig-configs')
DECLARED_KEYS = ('index', 'uuid', 'pci_device_id', 'mig_enabled', 'instances')
_PCI_ID_RE = re.compile(r'^0x[0-9a-fA-F]{8}$')
_NAME_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]*$')


class LayoutConfigError(ValueError):
    """A mig-parted config that cannot be used; the message says where and why."""


def validate_document(document):
    """A whole mig-parted file (``version: v1`` + ``mig-configs``) -> the validated configs."""
    if not isinstance(document, dict):
        raise LayoutConfigError('a mig-parted config file must be a mapping with version and mig-configs, got %s'
                                % type(document).__name__)
    unknown = sorted(set(document) - set(DOCUMENT_KEYS))
    if unknown:
        raise LayoutConfigError('unknown top-level key(s) %s in the mig-parted config (allowed: %s)'
                                % (', '.join(map(str, unknown)), ', '.join(DOCUMENT_KEYS)))
    if document.get('version') != 'v1':
        raise LayoutConfigError('unsupported mig-parted config version %r: only v1 is supported' % (document.get('version'),))
    if 'mig-configs' not in document:
        raise LayoutConfigError('the mig-parted config has no mig-configs mapping')
    return validate_configs(document['mig-configs'])


def validate_configs(configs):
    """The ``mig-configs`` mapping -> a normalised copy; raises LayoutConfigError on the first problem."""
    if not isinstance(configs, dict) or not configs:
        raise LayoutConfigError('mig-configs must be a non-empty mapping of layout name to a list of entries')
    result = {}
    for name in sorted(configs, key=str):
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise LayoutConfigError('layout name %r is not valid (letters, digits, ".", "_", "-")' % (name,))
        entries = configs[name]
        if not isinstance(entries, list) or not entries:
            raise LayoutConfigError('layout %s: must be a non-empty list of entries' % name)
        result[name] = [_validate_entry('layout %s entry %d' % (name, position), entry)
                        for position, entry in enumerate(entries)]
    return result


def _validate_entry(where, entry):
    if not isinstance(entry, dict):
        raise LayoutConfigError('%s: must be a mapping, got %s' % (where, type(entry).__name__))
    unknown = sorted(set(map(str, entry)) - set(ENTRY_KEYS))
    if unknown:
        raise LayoutConfigError('%s: unknown key(s) %s (allowed: %s)' % (where, ', '.join(unknown), ', '.join(ENTRY_KEYS)))
    for key in ('devices', 'mig-enabled'):
        if key not in entry:
            raise LayoutConfigError('%s: %s is required' % (where, key))
    devices = entry['devices']
    if devices != 'all':
        if not isinstance(devices, list) or not devices or any(
                isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in devices):
            raise LayoutConfigError('%s: devices must be "all" or a non-empty list of GPU indices, got %r' % (where, devices))
        devices = sorted(set(devices))
    filters = entry.get('device-filter')
    if filters is None:
        filters = []
    elif isinstance(filters, (str, int)):
        filters = [filters]
    if isinstance(filters, list):
        # an unquoted 0x20B210DE reads as an integer in YAML 1.1
        filters = ['0x%08X' % f if isinstance(f, int) and not isinstance(f, bool) else f for f in filters]
    if not isinstance(filters, list) or any(not isinstance(f, str) or not _PCI_ID_RE.match(f) for f in filters):
        raise LayoutConfigError('%s: device-filter must be a PCI device id such as 0x20B210DE or a list of them, got %r'
                                % (where, entry.get('device-filter')))
    enabled = entry['mig-enabled']
    if not isinstance(enabled, bool):
        raise LayoutConfigError('%s: mig-enabled must be true or false, got %r' % (where, enabled))
    devices_map = entry.get('mig-devices') or {}
    if not isinstance(devices_map, dict):
        raise LayoutConfigError('%s: mig-devices must be a mapping of MIG profile to count' % where)
    instances = {}
    for profile, count in devices_map.items():
        try:
            MigProfile.parse(str(profile))
        except ProfileError as exc:
            raise LayoutConfigError('%s: %s' % (where, exc))
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise LayoutConfigError('%s: count for %s must be a non-negative integer, got %r' % (where, profile, count))
        if count:
            instances[str(profile)] = count
    if instances and not enabled:
        raise LayoutConfigError('%s: mig-devices %s need mig-enabled: true' % (where, sorted(instances)))
    return {'devices': devices, 'device-filter': [f.upper().replace('0X', '0x') for f in filters],
            'mig-enabled': enabled, 'mig-devices': instances}


def select(configs, name):
    """The entries of layout ``name``; an unknown name lists the defined ones."""
    if name not in configs:
        raise LayoutConfigError('layout %r is not defined (defined: %s)' % (name, ', '.join(sorted(configs))))
    return configs[name]


def _matches(entry, gpu):
    if entry['devices'] != 'all' and gpu['index'] not in entry['devices']:
        return False
    if entry['device-filter'] and gpu['pci_device_id'].lower() not in [f.lower() for f in entry['device-filter']]:
        return False
    return True


def resolve(configs, name, gpus):
    """Per MIG-capable GPU of one host: the wanted mode and instances, whether it is in layout, and its plan.

    ``gpus`` are the ``nvidia_mig_facts`` GPU entries. A MIG-capable GPU matched by no entry, or by
    more than one, is an error (an ambiguous match is refused rather than guessed). GPUs without MIG
    are reported in ``skipped``. Every GPU is planned with the modules' planner, so a layout that
    does not fit a model (or the busy instances on it) is found here, before anything changes.
    """
    entries = select(configs, name)
    wanted = []
    skipped = []
    for gpu in gpus:
        if not gpu.get('mig_capable'):
            skipped.append({'index': gpu['index'], 'name': gpu.get('name'), 'reason': 'not MIG-capable'})
            continue
        matched = [position for position, entry in enumerate(entries) if _matches(entry, gpu)]
        label = 'GPU %d (%s, %s)' % (gpu['index'], gpu.get('name'), gpu['pci_device_id'])
        if not matched:
            raise LayoutConfigError('layout %s: %s is matched by no entry; add an entry whose devices and device-filter cover it'
                                    % (name, label))
        if len(matched) > 1:
            raise LayoutConfigError('layout %s: %s is matched by entries %s; each GPU must be matched by exactly one'
                                    % (name, label, ', '.join(map(str, matched))))
        entry = entries[matched[0]]
        wanted.append(_resolve_gpu(name, gpu, entry, label))
    declared = {'name': name, 'gpus': [dict((key, g[key]) for key in DECLARED_KEYS) for g in wanted]}
    return {'name': name, 'gpus': wanted, 'skipped': skipped, 'in_layout': all(g['in_layout'] for g in wanted),
            'declared': declared}


def _resolve_gpu(name, gpu, entry, label):
    enabled = entry['mig-enabled']
    target = 'enabled' if enabled else 'disabled'
    mode = gpu['mig_mode']
    mode_ok = mode['current'] == target and mode['pending'] == target
    instances = dict(entry['mig-devices'])
    busy = [gi for gi in gpu.get('gpu_instances') or [] if gi.get('busy')]
    if enabled:
        planning_gpu = gpu if mode['current'] == 'enabled' else dict(gpu, gpu_instances=[])
        try:
            plan = plan_gpu(planning_gpu, instances)
        except PlanningError as exc:
            raise LayoutConfigError('layout %s: %s' % (name, exc))
        instances_ok = mode['current'] == 'enabled' and not plan.changed
    else:
        instances_ok = not gpu.get('gpu_instances')
        if busy:
            raise LayoutConfigError('layout %s: %s must have MIG disabled but GPU instances %s have running processes'
                                    % (name, label, ', '.join(str(gi['id']) for gi in busy)))
    return {
        'index': gpu['index'],
        'uuid': gpu['uuid'],
        'pci_device_id': gpu['pci_device_id'],
        'name': gpu.get('name'),
        'mig_enabled': enabled,
        'instances': instances,
        'mode_in_layout': mode_ok,
        'in_layout': mode_ok and instances_ok,
    }


def module_groups(resolved):
    """GPUs grouped by identical wanted state, so the role calls each module once per group."""
    groups = {}
    for gpu in resolved['gpus']:
        key = (gpu['mig_enabled'], tuple(sorted(gpu['instances'].items())))
        groups.setdefault(key, []).append(gpu['uuid'])
    return [{'mig_enabled': key[0], 'instances': dict(key[1]), 'gpus': uuids}
            for key, uuids in sorted(groups.items(), key=lambda item: (not item[0][0], item[0][1]))]


def gpu_pods(pods):
    """Pods (Kubernetes objects) that request nvidia.com/gpu or nvidia.com/mig-* and still run.

    DaemonSet pods are left out: the GPU DaemonSets are paused through their node labels instead.
    """
    found = []
    for pod in pods or []:
        metadata = pod.get('metadata') or {}
        spec = pod.get('spec') or {}
        if (pod.get('status') or {}).get('phase') in ('Succeeded', 'Failed'):
            continue
        if any(owner.get('kind') == 'DaemonSet' for owner in metadata.get('ownerReferences') or []):
            continue
        containers = list(spec.get('containers') or []) + list(spec.get('initContainers') or [])
        names = set()
        for container in containers:
            resources = container.get('resources') or {}
            for section in ('requests', 'limits'):
                names.update(resources.get(section) or {})
        if any(n == 'nvidia.com/gpu' or n.startswith('nvidia.com/mig-') for n in names):
            found.append({'namespace': metadata.get('namespace', 'default'), 'name': metadata.get('name')})
    return sorted(found, key=lambda p: (p['namespace'], p['name']))
