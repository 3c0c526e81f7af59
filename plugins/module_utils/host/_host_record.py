# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""What the host keeps about its layout between runs, read and written by the modules and the boot entry point.

The declared layout (``layout.json``, which nvidia_mig_layout writes) read back, the record of the last
apply (``last_apply.json``: which layout, success or failure, from Ansible or from the boot unit), the
stranded slice-seconds so far and the metrics textfile made of them. No Ansible imports: the boot
entry point (_boot_entry) runs this code on the host without a controller.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time

from ansible_collections.gpufleet.mig.plugins.module_utils.host._layout_converge import LayoutRequest, in_layout_by_uuid
from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_files import METRICS_FILE, write_atomically
from ansible_collections.gpufleet.mig.plugins.module_utils.host._layout_metrics import (
    accumulate_stranded,
    render,
    stranded_figures,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_allocations import UnknownDeviceIds, allocations_of, gpu_allocations
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_resources import PodResourcesUnavailable, list_pod_devices
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import LayoutConfigError, check_layout, validate_configs

LAST_APPLY_FILE = 'last_apply.json'
# The boot persistence (the boot unit enabled through systemctl) apart from the GPUs: an apply whose GPUs reached the
# layout succeeded even where systemctl then failed, and last_apply.json says so; this record says the rest.
PERSISTENCE_FILE = 'boot_persistence.json'
STRANDED_FILE = 'stranded_slice_seconds.json'


class DeclaredLayoutError(Exception):
    """The declared layout cannot be read; the message says which file and why."""


def load_layout(path):
    """layout.json as nvidia_mig_layout wrote it -> (layout document, LayoutRequest)."""
    try:
        with open(path) as handle:
            layout = json.load(handle)
    except (IOError, OSError, ValueError) as exc:
        raise DeclaredLayoutError('cannot read the declared layout %s: %s' % (path, exc))
    if not isinstance(layout, dict) or not isinstance(layout.get('entries'), list) or not layout.get('name'):
        raise DeclaredLayoutError('declared layout %s: needs "name" and an "entries" list (written by gpufleet.mig.nvidia_mig_layout)' % path)
    try:
        entries = check_layout(validate_configs({layout['name']: layout['entries']}), layout['name'])
    except LayoutConfigError as exc:
        raise DeclaredLayoutError('declared layout %s: %s' % (path, exc))
    request = LayoutRequest(layout['name'], entries, unmatched=layout.get('unmatched', 'ignore'),
                            allow_reset=layout.get('allow_reset', True))
    return layout, request


def _last_apply_path(config_dir):
    return os.path.join(config_dir, LAST_APPLY_FILE)


def record_apply(config_dir, layout_name, result, source, message=''):
    record = {'layout': layout_name, 'result': result, 'source': source, 'timestamp': int(time.time()), 'message': message}
    write_atomically(_last_apply_path(config_dir), json.dumps(record, sort_keys=True) + '\n')
    return record


def resolve_failure(config_dir, layout_name, source):
    """A run that found the host in ``layout_name`` (a no-op): the record says success from then on, so the failure
    alert an earlier refused or failed change raised resolves (docs/metrics.md). Written only when the record says
    otherwise (a failure, another layout, none), so that a no-op run after a success writes nothing."""
    last = read_last_apply(config_dir)
    if last and last.get('result') == 'success' and last.get('layout') == layout_name:
        return None
    return record_apply(config_dir, layout_name, 'success', source)


def record_persistence(config_dir, layout_name, error, source):
    """The boot persistence of an apply that called systemctl: success, or failed with ``error`` (one line). Written
    only when it says something new (a failure, or a success after a failure or of another layout)."""
    path = os.path.join(config_dir, PERSISTENCE_FILE)
    last = read_persistence(config_dir)
    if not error and last and last.get('result') == 'success' and last.get('layout') == layout_name:
        return None
    record = {'layout': layout_name, 'result': 'failed' if error else 'success', 'source': source,
              'timestamp': int(time.time()), 'message': error or ''}
    write_atomically(path, json.dumps(record, sort_keys=True) + '\n')
    return record


def read_persistence(config_dir):
    try:
        with open(os.path.join(config_dir, PERSISTENCE_FILE)) as handle:
            return json.load(handle)
    except (IOError, OSError, ValueError):
        return None


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
    return render(host, request.name, in_layout, read_last_apply(config_dir), holders, totals, read_persistence(config_dir))


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
