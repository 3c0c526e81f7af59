# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Host-side entry point: re-apply the declared MIG layout at boot, and refresh the metrics.

No Ansible imports and no controller: nvidia_mig_layout installs this code on the host with the
declared layout (``layout.json``). At boot the systemd unit runs ``apply``: the same
:func:`_host_apply.converge` as the module, under the same host lock. ``metrics`` (the timer,
every minute) only reads: a shared lock with a short wait, so it never blocks an apply.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import json
import os
import subprocess
import sys
import time

from ansible_collections.gpufleet.mig.plugins.module_utils import _nvml_backend
from ansible_collections.gpufleet.mig.plugins.module_utils._host_apply import LayoutRequest, converge, in_layout_by_uuid
from ansible_collections.gpufleet.mig.plugins.module_utils._host_lock import HostLock, LockTimeout
from ansible_collections.gpufleet.mig.plugins.module_utils._layout_catalog import LayoutConfigError, check_layout, validate_configs
from ansible_collections.gpufleet.mig.plugins.module_utils._layout_metrics import (
    METRICS_FILE,
    accumulate_stranded,
    render,
    stranded_figures,
    write_atomically,
)
from ansible_collections.gpufleet.mig.plugins.module_utils._pod_resources import (
    PodResourcesUnavailable,
    UnknownDeviceIds,
    allocations_of,
    gpu_allocations,
    list_pod_devices,
)

LAST_APPLY_FILE = 'last_apply.json'
STRANDED_FILE = 'stranded_slice_seconds.json'


class BootApplyError(Exception):
    """The declared layout cannot be read; the message says which file and why."""


def _run_command(argv):
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    out, err = process.communicate()
    return process.returncode, out, err


def load_layout(path):
    """layout.json as nvidia_mig_layout wrote it -> (layout document, LayoutRequest)."""
    try:
        with open(path) as handle:
            layout = json.load(handle)
    except (IOError, OSError, ValueError) as exc:
        raise BootApplyError('cannot read the declared layout %s: %s' % (path, exc))
    if not isinstance(layout, dict) or not isinstance(layout.get('entries'), list) or not layout.get('name'):
        raise BootApplyError('declared layout %s: needs "name" and an "entries" list (written by gpufleet.mig.nvidia_mig_layout)' % path)
    try:
        entries = check_layout(validate_configs({layout['name']: layout['entries']}), layout['name'])
    except LayoutConfigError as exc:
        raise BootApplyError('declared layout %s: %s' % (path, exc))
    request = LayoutRequest(layout['name'], entries, unmatched=layout.get('unmatched', 'ignore'),
                            allow_reset=layout.get('allow_reset', True))
    return layout, request


def _last_apply_path(config_dir):
    return os.path.join(config_dir, LAST_APPLY_FILE)


def record_apply(config_dir, layout_name, result, source, message=''):
    record = {'layout': layout_name, 'result': result, 'source': source, 'timestamp': int(time.time()), 'message': message}
    write_atomically(_last_apply_path(config_dir), json.dumps(record, sort_keys=True) + '\n')
    return record


def read_last_apply(config_dir):
    try:
        with open(_last_apply_path(config_dir)) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def metrics_content(host, request, config_dir, pod_devices=None):
    """The metrics textfile for ``host`` against the declared ``request``; also adds the stranded
    slice-seconds since the last refresh to the totals kept beside the declared layout."""
    in_layout = in_layout_by_uuid(host, request)
    totals = accumulate_stranded(os.path.join(config_dir, STRANDED_FILE), stranded_figures(host), time.time())
    try:
        holders = allocations_of(host, pod_devices or [])
    except UnknownDeviceIds:
        # Pods only label the metrics: without them the GPUs are still described (a plan would refuse instead).
        holders = None
    return render(host, request.name, in_layout, read_last_apply(config_dir), holders, totals)


def _pod_devices(socket_path):
    """What the kubelet says pods hold; nothing where it cannot be asked (no kubelet, no grpcio)."""
    if not socket_path or not os.path.exists(socket_path):
        return []
    try:
        return gpu_allocations(list_pod_devices(socket_path))
    except PodResourcesUnavailable:
        return []


def write_metrics(backend, metrics_dir, request, config_dir, pod_resources_socket=None):
    """Rewrite the textfile; returns the content."""
    content = metrics_content(backend.read_host(), request, config_dir, _pod_devices(pod_resources_socket))
    write_atomically(os.path.join(metrics_dir, METRICS_FILE), content)
    return content


def main(argv=None):
    parser = argparse.ArgumentParser(description='Re-apply the declared gpufleet.mig layout, or refresh its metrics.')
    parser.add_argument('action', choices=['apply', 'metrics'])
    parser.add_argument('--layout', required=True, help='the declared layout JSON nvidia_mig_layout wrote')
    parser.add_argument('--metrics-dir', default='', help='Prometheus textfile-collector folder (empty: no metrics)')
    parser.add_argument('--lock-timeout', type=int, default=300)
    args = parser.parse_args(argv)
    try:
        layout, request = load_layout(args.layout)
    except BootApplyError as exc:
        sys.stderr.write('gpufleet-mig: %s\n' % exc)
        return 2
    config_dir = os.path.dirname(os.path.abspath(args.layout))
    if args.action == 'metrics' and not args.metrics_dir:
        sys.stderr.write('gpufleet-mig: metrics needs --metrics-dir\n')
        return 2
    status = 0
    try:
        with HostLock(_nvml_backend.host_lock_path(), args.lock_timeout, exclusive=args.action == 'apply'):
            backend = _nvml_backend.NvmlBackend(run_command=_run_command)
            try:
                if args.action == 'apply':
                    try:
                        dummy, dummy2, done, dummy3 = converge(backend, request, apply=True)
                        for action in done:
                            sys.stdout.write('gpufleet-mig: GPU %s: %s\n' % (action['gpu'], _describe(action)))
                        record_apply(config_dir, request.name, 'success', 'boot')
                        sys.stdout.write('gpufleet-mig: layout %s applied\n' % request.name)
                    except Exception as exc:  # every failure is recorded for the metrics, then reported
                        record_apply(config_dir, request.name, 'failed', 'boot', str(exc))
                        sys.stderr.write('gpufleet-mig: layout %s not applied: %s\n' % (request.name, exc))
                        status = 1
                if args.metrics_dir:
                    write_metrics(backend, args.metrics_dir, request, config_dir, layout.get('pod_resources_socket'))
            finally:
                backend.close()
    except LockTimeout as exc:
        # The metrics timer skips a tick while a layout change holds the lock.
        sys.stderr.write('gpufleet-mig: %s\n' % exc)
        return 0 if args.action == 'metrics' else 1
    return status


def _describe(action):
    if action['action'] == 'set_mig_mode':
        if action['reset_required']:
            return 'MIG mode %s is pending: %s' % (action['after']['pending'], action['pending_reason'])
        return 'MIG mode set to %s' % action['after']['current']
    return '%s %s at slice %s' % (action['action'].replace('_', ' '), action.get('profile'), action.get('placement', {}).get('start'))
