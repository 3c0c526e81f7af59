# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Host-side entry point: re-apply the declared MIG layout at boot, and refresh the metrics.

No Ansible imports and no controller: the role installs the collection's module_utils on the
host and writes the per-GPU layout it resolved (``layout.json``). At boot the systemd unit runs
``apply``: the same backend, planner and apply code as the modules (``set_mig_mode``,
``reset_gpu``, ``plan_gpu``, ``apply_plan``), under the same host lock. ``metrics`` only
rewrites the textfile; the role runs it on every run.
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
from ansible_collections.gpufleet.mig.plugins.module_utils._host_lock import HostLock
from ansible_collections.gpufleet.mig.plugins.module_utils._layout_metrics import METRICS_FILE, render, write_atomically
from ansible_collections.gpufleet.mig.plugins.module_utils._mig_apply import apply_plan
from ansible_collections.gpufleet.mig.plugins.module_utils._mig_planner import plan_gpu

LAST_APPLY_FILE = 'last_apply.json'


class BootApplyError(Exception):
    """The declared layout could not be applied; the message says which GPU and why."""


def _run_command(argv):
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    out, err = process.communicate()
    return process.returncode, out, err


def load_layout(path):
    try:
        with open(path) as handle:
            layout = json.load(handle)
    except (IOError, OSError, ValueError) as exc:
        raise BootApplyError('cannot read the declared layout %s: %s' % (path, exc))
    if not isinstance(layout, dict) or not isinstance(layout.get('gpus'), list) or 'name' not in layout:
        raise BootApplyError('declared layout %s: needs "name" and a "gpus" list' % path)
    return layout


def _find(host, declared):
    for gpu in host['gpus']:
        if gpu['uuid'] == declared['uuid']:
            return gpu
    raise BootApplyError('GPU %s (declared at index %s) is not on this host any more' % (declared['uuid'], declared['index']))


def apply_layout(backend, layout, allow_reset=True):
    """Bring every declared GPU to its mode and instances; returns a list of what was done."""
    done = []
    host = backend.read_host(with_profiles=False)
    for declared in layout['gpus']:
        gpu = _find(host, declared)
        index = gpu['index']
        target = 'enabled' if declared['mig_enabled'] else 'disabled'
        if gpu['mig_mode']['pending'] != target:
            if not declared['mig_enabled'] and gpu['gpu_instances']:
                plan = plan_gpu(backend.read_gpu(index), {})
                apply_plan(backend, backend.read_gpu(index), plan)
            backend.set_mig_mode(index, declared['mig_enabled'])
            done.append('GPU %d: MIG mode set to %s' % (index, target))
        if backend.read_gpu(index, with_profiles=False)['mig_mode']['current'] != target:
            if not allow_reset:
                raise BootApplyError('GPU %d: MIG mode %s is pending and resets are not allowed' % (index, target))
            backend.reset_gpu(index)
            done.append('GPU %d: reset to apply MIG mode %s' % (index, target))
        if declared['mig_enabled']:
            gpu_now = backend.read_gpu(index)
            plan = plan_gpu(gpu_now, declared['instances'])
            if plan.changed:
                actions, dummy = apply_plan(backend, gpu_now, plan)
                done.append('GPU %d: %d MIG actions applied' % (index, len(actions)))
    return done


def _last_apply_path(layout_path):
    return os.path.join(os.path.dirname(os.path.abspath(layout_path)), LAST_APPLY_FILE)


def record_apply(layout_path, layout, result, source, message=''):
    record = {'layout': layout['name'], 'result': result, 'source': source, 'timestamp': int(time.time()),
              'message': message}
    write_atomically(_last_apply_path(layout_path), json.dumps(record, sort_keys=True) + '\n')
    return record


def read_last_apply(layout_path):
    try:
        with open(_last_apply_path(layout_path)) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


def write_metrics(backend, metrics_dir, layout, last_apply):
    content = render(backend.read_host(), layout, last_apply)
    write_atomically(os.path.join(metrics_dir, METRICS_FILE), content)
    return content


def main(argv=None):
    parser = argparse.ArgumentParser(description='Re-apply the declared gpufleet.mig layout, or refresh its metrics.')
    parser.add_argument('action', choices=['apply', 'metrics', 'record'])
    parser.add_argument('--layout', required=True, help='the declared layout JSON the role wrote')
    parser.add_argument('--metrics-dir', default='', help='Prometheus textfile-collector folder (empty: no metrics)')
    parser.add_argument('--no-reset', action='store_true', help='never reset a GPU to apply a pending MIG mode')
    parser.add_argument('--result', choices=['success', 'failed'], help='for record: the result of an Ansible apply')
    parser.add_argument('--message', default='', help='for record: why it failed')
    parser.add_argument('--lock-timeout', type=int, default=300)
    args = parser.parse_args(argv)
    try:
        layout = load_layout(args.layout)
    except BootApplyError as exc:
        sys.stderr.write('gpufleet-mig: %s\n' % exc)
        return 2
    status = 0
    if args.action == 'record':
        if not args.result:
            sys.stderr.write('gpufleet-mig: record needs --result\n')
            return 2
        record_apply(args.layout, layout, args.result, 'ansible', args.message)
        if not args.metrics_dir:
            return 0
    with HostLock(_nvml_backend.host_lock_path(), args.lock_timeout):
        backend = _nvml_backend.NvmlBackend(run_command=_run_command)
        try:
            if args.action == 'apply':
                try:
                    for line in apply_layout(backend, layout, allow_reset=not args.no_reset):
                        sys.stdout.write('gpufleet-mig: %s\n' % line)
                    record_apply(args.layout, layout, 'success', 'boot')
                    sys.stdout.write('gpufleet-mig: layout %s applied\n' % layout['name'])
                except Exception as exc:  # every failure is recorded for the metrics, then reported
                    record_apply(args.layout, layout, 'failed', 'boot', str(exc))
                    sys.stderr.write('gpufleet-mig: layout %s not applied: %s\n' % (layout['name'], exc))
                    status = 1
            if args.metrics_dir:
                write_metrics(backend, args.metrics_dir, layout, read_last_apply(args.layout))
        finally:
            backend.close()
    return status
