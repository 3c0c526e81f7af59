# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Which pod holds which device, read on the Kubernetes node itself.

Two sources, both local to the GPU host and neither needing the API server:

- the kubelet's pod-resources API v1 (gRPC over the unix socket
  ``/var/lib/kubelet/pod-resources/kubelet.sock``): ``List`` tells which container of which pod
  was given which device ids of which extended resource, ``GetAllocatableResources`` which
  device ids each resource has on the node; this file is its client, _pod_resources_wire its messages;
- ``/proc/<pid>/cgroup``: the kubepods cgroup of a process names its pod's UID and its container
  (_pod_cgroups).

What the allocations mean for the host's GPUs is _pod_allocations. gRPC comes from ``grpcio`` when it is
importable. Nothing here imports Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import stat

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_resources_wire import ProtobufError, parse_allocatable_response, parse_list_response
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import is_gpu_resource, renamed_gpu_id

DEFAULT_SOCKET = '/var/lib/kubelet/pod-resources/kubelet.sock'

# Words of the failures a caller may act on (the mig_layout role installs grpcio, or drains instead:
# _node_handover.decision_retry); each is written here once and read from here.
GRPC_MISSING = 'needs the Python package grpcio'
PODS_UNREADABLE = 'which pods hold which GPU cannot be read'
PODS_UNKNOWN = 'which instances pods hold is unknown'

# Full method names: package "v1", service "PodResourcesLister".
LIST_METHOD = '/v1.PodResourcesLister/List'
ALLOCATABLE_METHOD = '/v1.PodResourcesLister/GetAllocatableResources'

# The kubelet's own clients allow 16 MiB answers; gRPC's default of 4 MiB is too small for a
# List on a node with many pods.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


class PodResourcesUnavailable(Exception):
    """The kubelet's pod-resources API cannot be read; the message says what is missing and what to do."""


# ---- the gRPC client ---------------------------------------------------------------------------

def _import_grpc():
    try:
        import grpc
    except ImportError as exc:
        raise PodResourcesUnavailable(
            'reading the kubelet pod-resources API %s, which cannot be imported (%s): install it for the Python '
            'interpreter that runs this (pip install grpcio, or the distribution package python3-grpcio)' % (GRPC_MISSING, exc))
    return grpc


def _check_socket(socket_path):
    """A clear error for the usual reasons a connect would fail, before gRPC turns them into UNAVAILABLE."""
    try:
        mode = os.stat(socket_path).st_mode
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise PodResourcesUnavailable(
                'no kubelet pod-resources socket at %s: is the kubelet running on this host, and is this the '
                "socket under its --root-dir (default /var/lib/kubelet)? The pod-resources API is on by default "
                'since Kubernetes 1.20' % socket_path)
        if exc.errno == errno.EACCES:
            raise PodResourcesUnavailable(
                'permission denied reaching the kubelet pod-resources socket %s: run as root (the kubelet makes '
                'its folder readable by root only)' % socket_path)
        raise PodResourcesUnavailable('cannot read the kubelet pod-resources socket %s: %s' % (socket_path, exc))
    if not stat.S_ISSOCK(mode):
        raise PodResourcesUnavailable('%s is not a unix socket; expected the kubelet pod-resources socket'
                                      % socket_path)
    if not os.access(socket_path, os.R_OK | os.W_OK):
        raise PodResourcesUnavailable(
            'permission denied on the kubelet pod-resources socket %s: run as root or as a user who may '
            'read and write it' % socket_path)


def _call(socket_path, method, timeout):
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise ValueError('timeout must be a positive number of seconds, got %r' % (timeout,))
    grpc = _import_grpc()
    _check_socket(socket_path)
    target = 'unix://' + os.path.abspath(socket_path)
    channel = grpc.insecure_channel(target, options=[
        ('grpc.max_receive_message_length', MAX_MESSAGE_BYTES),
        # Never a proxy for a local socket, whatever the environment says.
        ('grpc.enable_http_proxy', 0),
    ])
    try:
        # No serializers: the request and the answer travel as the bytes of this module's codec.
        rpc = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        try:
            return rpc(b'', timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, 'code') else None
            details = exc.details() if hasattr(exc, 'details') else str(exc)
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise PodResourcesUnavailable('the kubelet did not answer %s on %s within %ss'
                                              % (method, socket_path, timeout))
            if code == grpc.StatusCode.UNIMPLEMENTED:
                raise PodResourcesUnavailable(
                    'the kubelet on %s does not implement %s (%s): GetAllocatableResources needs Kubernetes '
                    '1.23 or later (before 1.28 behind the KubeletPodResourcesGetAllocatable feature gate)'
                    % (socket_path, method, details))
            if code == grpc.StatusCode.UNAVAILABLE:
                raise PodResourcesUnavailable(
                    'nothing answers on the kubelet pod-resources socket %s (%s): is the kubelet running?'
                    % (socket_path, details))
            raise PodResourcesUnavailable('%s on %s failed: %s %s'
                                          % (method, socket_path, getattr(code, 'name', code), details))
    finally:
        channel.close()


def _parse(what, parser, data, socket_path):
    try:
        return parser(data)
    except ProtobufError as exc:
        raise PodResourcesUnavailable('the answer to %s on %s is not a valid pod-resources message: %s'
                                      % (what, socket_path, exc))


def list_pod_devices(socket_path=DEFAULT_SOCKET, timeout=5.0):
    """Every device allocation of the node's running containers, from the kubelet's ``List``.

    Returns ``[{'namespace': str, 'pod': str, 'container': str, 'resource': str, 'device_ids':
    [str, ...]}]``, one entry per container and extended resource that has devices (cpu and memory
    assignments are left out), then one entry per container and DRA-claimed device (see
    :func:`parse_list_response`; the kubelet reports them from Kubernetes 1.34 by default). Pods
    without devices do not appear. Raises PodResourcesUnavailable.
    """
    return _parse('List', parse_list_response, _call(socket_path, LIST_METHOD, timeout), socket_path)


def allocatable_devices(socket_path=DEFAULT_SOCKET, timeout=5.0):
    """``{resource: [device ids]}`` of every device the node's device plugins advertise (healthy or
    not), from the kubelet's ``GetAllocatableResources``. Raises PodResourcesUnavailable."""
    return _parse('GetAllocatableResources', parse_allocatable_response,
                  _call(socket_path, ALLOCATABLE_METHOD, timeout), socket_path)


def allocatable_gpu_device_ids(socket_path=DEFAULT_SOCKET, timeout=5.0):
    """``{GPU resource: sorted device ids}`` the kubelet's ``GetAllocatableResources`` lists (every id the device
    plugins advertise now, replicas included); a renamed resource (the device_plugin role's ``rename``) is one whose
    ids name GPU or MIG devices; other resources are left out. Raises PodResourcesUnavailable."""
    return dict((resource, sorted(ids)) for resource, ids in allocatable_devices(socket_path, timeout).items()
                if is_gpu_resource(resource) or any(renamed_gpu_id(device_id) for device_id in ids))
