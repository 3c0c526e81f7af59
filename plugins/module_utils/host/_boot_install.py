# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""What nvidia_mig_layout installs on the host for the boot-time apply and the metrics.

The declared layout (``layout.json``), the collection's host code (taken from the module's own payload, so
the controller packs and copies nothing), the ``gpufleet-mig-apply`` command and the systemd units, as
(path, content, mode); _host_files writes each only when its content differs. No Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

# The host code the boot unit and the metrics timer run: _boot_entry and everything it imports.
# Importing them here is what puts them into nvidia_mig_layout's payload (AnsiballZ bundles the
# module_utils a module imports); boot_code() reads them back from there.
from ansible_collections.gpufleet.mig.plugins.module_utils import _errors
from ansible_collections.gpufleet.mig.plugins.module_utils.host import (
    _boot_entry,
    _host_files,
    _host_lock,
    _host_record,
    _layout_converge,
    _layout_metrics,
    _mig_mode,
    _nvml_backend,
    _plan_executor,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s import _pod_allocations, _pod_cgroups, _pod_resources, _pod_resources_wire
from ansible_collections.gpufleet.mig.plugins.module_utils.planning import (
    _gpu_resources,
    _host_model,
    _layout_catalog,
    _layout_keys,
    _layout_matching,
    _mig_forecast,
    _mig_geometry,
    _mig_planner,
    _mig_profile,
)

PACKAGE = 'ansible_collections.gpufleet.mig.plugins.module_utils'
_BOOT_MODULES = (_errors,
                 _boot_entry, _host_files, _host_lock, _host_record, _layout_converge, _layout_metrics, _mig_mode, _nvml_backend,
                 _plan_executor,
                 _pod_allocations, _pod_cgroups, _pod_resources, _pod_resources_wire,
                 _gpu_resources, _host_model, _layout_catalog, _layout_keys, _layout_matching, _mig_forecast, _mig_geometry,
                 _mig_planner, _mig_profile)


def _relative_name(module):
    """'host/_boot_entry' for ansible_collections.gpufleet.mig.plugins.module_utils.host._boot_entry: the
    file's path below module_utils, rooms (subfolders) included."""
    return module.__name__[len(PACKAGE) + 1:].replace('.', '/')


BOOT_CODE = tuple(_relative_name(module) for module in _BOOT_MODULES)
LAYOUT_UNIT = 'gpufleet-mig-layout.service'
METRICS_SERVICE = 'gpufleet-mig-metrics.service'
METRICS_TIMER = 'gpufleet-mig-metrics.timer'
_MANAGED = 'Managed by gpufleet.mig (nvidia_mig_layout); local changes are overwritten.'


def boot_code():
    """{file name: source} of the host code, read from wherever this module was loaded (the payload)."""
    sources = {}
    for module in _BOOT_MODULES:
        source = module.__loader__.get_source(module.__name__)
        if source is None:
            raise IOError('the source of %s is not available in this payload' % module.__name__)
        sources[_relative_name(module) + '.py'] = source if isinstance(source, str) else source.decode('utf-8')
    return sources


def declared_layout(request, pod_resources_socket=None):
    """layout.json: what the boot unit converges to (the same request the module applied).

    Only the request, nothing read from the GPUs: the file changes when the declared layout does,
    never because a GPU's state did (a run after the one that enabled MIG rewrites nothing).
    """
    return json.dumps({
        'name': request.name,
        'pod_resources_socket': pod_resources_socket,
        'entries': request.entries,
        'unmatched': request.unmatched,
        'allow_reset': request.allow_reset,
    }, indent=2, sort_keys=True) + '\n'


def _environment_lines(environment):
    return ''.join('Environment=%s\n' % json.dumps('%s=%s' % (key, environment[key])) for key in sorted(environment))


def boot_files(paths, request, boot_unit, metrics_timer):
    """(path, content, mode) of every file the host keeps, given the layout being declared."""
    lib = os.path.join(paths.lib_dir, *PACKAGE.split('.'))
    files = [(paths.layout_file, declared_layout(request, paths.pod_resources_socket), 0o644)]
    files.extend((os.path.join(lib, name), source, 0o644) for name, source in sorted(boot_code().items()))
    files.append((paths.script, (
        '# %s\n'
        '# Run as "<python> <this file>" by the gpufleet.mig systemd units, so it needs no shebang.\n'
        'import sys\n\n'
        'sys.path.insert(0, %s)\n\n'
        'from ansible_collections.gpufleet.mig.plugins.module_utils.host._boot_entry import main  # noqa: E402\n\n'
        'sys.exit(main())\n') % (_MANAGED, json.dumps(paths.lib_dir)), 0o755))
    command = '%s %s' % (paths.python, paths.script)
    metrics = ' --metrics-dir %s' % paths.metrics_dir if paths.metrics_dir else ''
    if boot_unit:
        files.append((os.path.join(paths.systemd_dir, LAYOUT_UNIT), (
            '# %s\n'
            '[Unit]\n'
            'Description=gpufleet.mig: re-apply the declared MIG layout (%s)\n'
            '# MIG instances vanish at reboot (Hopper and later also lose the MIG mode): recreate them\n'
            '# before anything hands GPUs to workloads.\n'
            'After=systemd-modules-load.service nvidia-persistenced.service\n'
            'Before=kubelet.service containerd.service docker.service crio.service nvidia-dcgm.service dcgm-exporter.service\n'
            'ConditionPathExists=%s\n\n'
            '[Service]\n'
            'Type=oneshot\n'
            'RemainAfterExit=yes\n'
            '%s'
            'ExecStart=%s apply --layout %s%s\n'
            'TimeoutStartSec=600\n\n'
            '[Install]\n'
            'WantedBy=multi-user.target\n') % (_MANAGED, request.name, paths.layout_file, _environment_lines(paths.environment),
                                               command, paths.layout_file, metrics), 0o644))
    if metrics_timer and paths.metrics_dir:
        files.append((os.path.join(paths.systemd_dir, METRICS_SERVICE), (
            '# %s\n'
            '[Unit]\n'
            'Description=gpufleet.mig: refresh the MIG metrics (read-only)\n'
            'ConditionPathExists=%s\n\n'
            '[Service]\n'
            'Type=oneshot\n'
            '%s'
            '# A short lock wait: a layout change holds the lock, and the next tick comes in a minute.\n'
            'ExecStart=%s metrics --layout %s%s --lock-timeout 5\n') % (
                _MANAGED, paths.layout_file, _environment_lines(paths.environment), command, paths.layout_file, metrics), 0o644))
        files.append((os.path.join(paths.systemd_dir, METRICS_TIMER), (
            '# %s\n'
            '[Unit]\n'
            'Description=gpufleet.mig: refresh the MIG metrics every minute\n\n'
            '[Timer]\n'
            'OnBootSec=1min\n'
            'OnUnitActiveSec=1min\n'
            'AccuracySec=5s\n\n'
            '[Install]\n'
            'WantedBy=timers.target\n') % _MANAGED, 0o644))
    return files
