# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Glue shared by the modules: open the backend under the host lock, report errors once."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import errno
import os
import traceback

from ansible.module_utils.basic import missing_required_lib

from ansible_collections.gpufleet.mig.plugins.module_utils.host import _nvml_backend
from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.mig.plugins.module_utils.host._host_lock import HostLock
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_allocations import UnknownDeviceIds, gpu_allocations
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_resources import PODS_UNREADABLE, PodResourcesUnavailable, list_pod_devices


# What pod_resources=off costs, for the messages that point to it.
_OFF_HINT = ('pod_resources=off skips the kubelet (pods are then known only through the cgroups of running GPU processes, '
             'so an instance a pod holds without a running process looks idle)')

COMMON_ARGUMENT_SPEC = dict(
    lock_timeout=dict(type='int', default=120),
)

# Modules that report or respect which pods hold the GPUs (doc fragment gpufleet.mig.nvml.pod_resources).
POD_RESOURCES_ARGUMENT_SPEC = dict(
    pod_resources=dict(type='str', default='auto', choices=['auto', 'required', 'off']),
    pod_resources_socket=dict(type='path', default='/var/lib/kubelet/pod-resources/kubelet.sock'),
)


@contextlib.contextmanager
def nvml_session(module, exclusive=True):
    """The backend, opened while holding the host lock; closed on the way out."""
    if _nvml_backend.pynvml is None:
        module.fail_json(msg=missing_required_lib('nvidia-ml-py'), exception=_nvml_backend.PYNVML_IMPORT_ERROR)
    if module.params['lock_timeout'] < 0:
        module.fail_json(msg='lock_timeout must be 0 or more seconds, got %d' % module.params['lock_timeout'])
    with HostLock(_nvml_backend.host_lock_path(), module.params['lock_timeout'], exclusive=exclusive):
        backend = _nvml_backend.NvmlBackend(run_command=module.run_command)
        try:
            yield backend
        finally:
            backend.close()


def run_module(module, body):
    """Run ``body(module)``; expected errors become one clear ``fail_json``."""
    try:
        body(module)
    except UnknownDeviceIds as exc:
        module.fail_json(msg='%s. %s' % (exc, _OFF_HINT))
    except GpufleetError as exc:  # its message is the whole story: no traceback for the user
        module.fail_json(msg=str(exc))
    except Exception as exc:  # an unexpected failure still ends in fail_json, with its traceback
        module.fail_json(msg='unexpected error: %s' % exc, exception=traceback.format_exc())


def _socket_absent(path):
    """Nothing at ``path``; a permission error is not absence (os.path.exists would say False)."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno in (errno.ENOENT, errno.ENOTDIR)
    return False


def read_pod_resources(module):
    """(allocations of GPU devices, status) from the kubelet; None allocations where not read.

    With auto, only a missing socket (not a Kubernetes node) goes on without the kubelet. A socket
    that exists but cannot be read fails: an instance a pod holds would look idle.
    """
    mode = module.params['pod_resources']
    if mode == 'off':
        return None, {'read': False, 'reason': 'pod_resources=off'}
    socket = module.params['pod_resources_socket']
    if mode == 'auto' and _socket_absent(socket):
        return None, {'read': False, 'reason': 'no kubelet pod-resources socket at %s (not a Kubernetes node?)' % socket}
    try:
        devices = gpu_allocations(list_pod_devices(socket))
    except PodResourcesUnavailable as exc:
        why = 'pod_resources=required' if mode == 'required' else 'the socket exists, so this is a Kubernetes node'
        module.fail_json(msg='%s (%s): %s. Nothing was changed. %s' % (PODS_UNREADABLE, why, exc, _OFF_HINT))
    return devices, {'read': True}
