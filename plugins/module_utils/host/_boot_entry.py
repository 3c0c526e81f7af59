# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Host-side entry point: re-apply the declared MIG layout at boot, and refresh the metrics.

No Ansible imports and no controller: nvidia_mig_layout installs this code on the host with the
declared layout (``layout.json``). At boot the systemd unit runs ``apply``: the same
:func:`_layout_converge.converge` as the module, under the same host lock. ``metrics`` (the timer,
every minute) only reads: a shared lock with a short wait, so it never blocks an apply.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import argparse
import os
import subprocess
import sys

from ansible_collections.gpufleet.mig.plugins.module_utils.host import _nvml_backend
from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_lock import HostLock, LockTimeout
from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_record import DeclaredLayoutError, load_layout, record_apply, write_metrics
from ansible_collections.gpufleet.mig.plugins.module_utils.host._layout_converge import converge


def _run_command(argv):
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    out, err = process.communicate()
    return process.returncode, out, err


def main(argv=None):
    parser = argparse.ArgumentParser(description='Re-apply the declared gpufleet.mig layout, or refresh its metrics.')
    parser.add_argument('action', choices=['apply', 'metrics'])
    parser.add_argument('--layout', required=True, help='the declared layout JSON nvidia_mig_layout wrote')
    parser.add_argument('--metrics-dir', default='', help='Prometheus textfile-collector folder (empty: no metrics)')
    parser.add_argument('--lock-timeout', type=int, default=300)
    args = parser.parse_args(argv)
    try:
        layout, request = load_layout(args.layout)
    except DeclaredLayoutError as exc:
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
