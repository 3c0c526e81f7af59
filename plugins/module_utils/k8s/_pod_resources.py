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
  device ids each resource has on the node;
- ``/proc/<pid>/cgroup``: the kubepods cgroup of a process names its pod's UID and its container.

The device ids are whatever the device plugin advertised; the client passes them on as they are,
and only :func:`allocations_of` maps them to the host's GPUs.
NVIDIA's k8s-device-plugin gives MIG devices as ``MIG-<uuid>`` (``deviceIDStrategy: uuid``, the
default) or as ``<gpu index>:<mig device index>`` (``deviceIDStrategy: index``), and whole GPUs as
``GPU-<uuid>`` or ``<gpu index>``; a shared device (time-slicing, MPS) once per replica, as
``<id>::<replica>``.

gRPC comes from ``grpcio`` when it is importable. The messages are encoded and decoded here, with
a minimal protobuf wire codec (varints and length-delimited fields, the field numbers of the
kubelet's ``podresources/v1/api.proto``): no generated code and no ``protobuf`` package needed.
Nothing here imports Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re
import stat

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import (
    DRA_GPU_DRIVER,
    WHOLE_GPU,
    is_gpu_resource,
    resource_of_profile,
    strip_replica,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import GpuHolders, HostHolders, gpu_processes

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

# Protobuf wire types.
WIRE_VARINT = 0
WIRE_FIXED64 = 1
WIRE_LENGTH_DELIMITED = 2
WIRE_FIXED32 = 5

_UINT64_MASK = (1 << 64) - 1


class PodResourcesUnavailable(Exception):
    """The kubelet's pod-resources API cannot be read; the message says what is missing and what to do."""


class ProtobufError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


# ---- protobuf wire format -------------------------------------------------------------------

def encode_varint(value):
    """Base-128 varint of an int; a negative one is its 64-bit two's complement (int64 semantics)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError('varint value must be an int, got %r' % (value,))
    if value < 0:
        value &= _UINT64_MASK
    if value > _UINT64_MASK:
        raise ValueError('varint value %d does not fit in 64 bits' % value)
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(data, pos=0):
    """(value, position after it) of the varint at ``pos``; the value is unsigned (uint64)."""
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError('truncated varint at byte %d' % pos)
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if result > _UINT64_MASK:
                raise ProtobufError('varint ending at byte %d is longer than 64 bits' % pos)
            return result, pos
        shift += 7
        if shift >= 70:
            raise ProtobufError('varint at byte %d is longer than 10 bytes' % pos)


def as_int64(value):
    """A decoded uint64 varint read as a signed int64 field."""
    return value - (1 << 64) if value >= (1 << 63) else value


def encode_message(fields):
    """Serialize ``fields``, an iterable of ``(field number, value)`` pairs, in that order.

    A value is an int or bool (varint), a str (UTF-8, length-delimited), bytes (length-delimited:
    pass a nested message as the bytes of its own ``encode_message``) or a list or tuple of those
    (a repeated field, one entry per element). Every pair is written, zero values included; a
    proto3 reader takes them as it takes absent ones.
    """
    out = bytearray()
    for number, value in fields:
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= (1 << 29) - 1:
            raise ValueError('invalid protobuf field number %r' % (number,))
        values = value if isinstance(value, (list, tuple)) else [value]
        for item in values:
            if isinstance(item, bool):
                item = int(item)
            if isinstance(item, int):
                out += encode_varint(number << 3 | WIRE_VARINT)
                out += encode_varint(item)
                continue
            if isinstance(item, str):
                item = item.encode('utf-8')
            if not isinstance(item, (bytes, bytearray)):
                raise TypeError('field %d: cannot encode %r' % (number, item))
            out += encode_varint(number << 3 | WIRE_LENGTH_DELIMITED)
            out += encode_varint(len(item))
            out += item
    return bytes(out)


def decode_message(data):
    """Parse one message into ``{field number: [values in wire order]}``.

    Varints come back as unsigned ints, length-delimited fields as bytes (a string, a nested
    message or a packed repeated field: the schema decides, the caller knows it), fixed32 and
    fixed64 fields as their raw 4 or 8 bytes. Groups (wire types 3, 4) are rejected.
    """
    data = bytes(data)
    fields = {}
    pos = 0
    while pos < len(data):
        key, pos = decode_varint(data, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise ProtobufError('field number 0 at byte %d' % pos)
        if wire_type == WIRE_VARINT:
            value, pos = decode_varint(data, pos)
        elif wire_type == WIRE_LENGTH_DELIMITED:
            length, pos = decode_varint(data, pos)
            if pos + length > len(data):
                raise ProtobufError('field %d: %d bytes announced, %d left' % (number, length, len(data) - pos))
            value, pos = data[pos:pos + length], pos + length
        elif wire_type in (WIRE_FIXED64, WIRE_FIXED32):
            size = 8 if wire_type == WIRE_FIXED64 else 4
            if pos + size > len(data):
                raise ProtobufError('field %d: truncated fixed%d value' % (number, size * 8))
            value, pos = data[pos:pos + size], pos + size
        else:
            raise ProtobufError('field %d: unsupported wire type %d' % (number, wire_type))
        fields.setdefault(number, []).append(value)
    return fields


def field_strings(fields, number):
    """Every value of a (repeated) string field, decoded."""
    try:
        return [bytes(value).decode('utf-8') for value in fields.get(number, [])]
    except (TypeError, UnicodeDecodeError) as exc:
        raise ProtobufError('field %d is not a UTF-8 string: %s' % (number, exc))


def field_string(fields, number):
    """A singular string field; proto3's last-one-wins, '' when absent."""
    values = field_strings(fields, number)
    return values[-1] if values else ''


def field_messages(fields, number):
    """Every value of a (repeated) message field, each parsed with decode_message."""
    values = fields.get(number, [])
    if any(not isinstance(value, bytes) for value in values):
        raise ProtobufError('field %d is not a message' % number)
    return [decode_message(value) for value in values]


def field_int(fields, number):
    """A singular varint field (the last one wins, 0 when absent)."""
    values = fields.get(number, [])
    if any(not isinstance(value, int) for value in values):
        raise ProtobufError('field %d is not a varint' % number)
    return values[-1] if values else 0


def field_bool(fields, number):
    """A singular bool field."""
    return bool(field_int(fields, number))


# ---- pod-resources v1 messages ----------------------------------------------------------------
# Field numbers from kubernetes staging/src/k8s.io/kubelet/pkg/apis/podresources/v1/api.proto:
# ListPodResourcesResponse   {repeated PodResources pod_resources = 1}
# PodResources               {string name = 1; string namespace = 2; repeated ContainerResources containers = 3}
# ContainerResources         {string name = 1; repeated ContainerDevices devices = 2; cpu_ids = 3; memory = 4;
#                             repeated DynamicResource dynamic_resources = 5}
# ContainerDevices           {string resource_name = 1; repeated string device_ids = 2; TopologyInfo topology = 3}
# DynamicResource            {(1: class_name, removed in 1.31) string claim_name = 2; string claim_namespace = 3;
#                             repeated ClaimResource claim_resources = 4}
# ClaimResource              {repeated CDIDevice cdi_devices = 1; string driver_name = 2; string pool_name = 3;
#                             string device_name = 4}   (driver, pool and device name identify the device)
# CDIDevice                  {string name = 1}          (fully qualified: vendor.com/class=name)
# AllocatableResourcesResponse {repeated ContainerDevices devices = 1; cpu_ids = 2; memory = 3}

def _merge(groups, key, device_ids):
    known = groups.setdefault(key, [])
    known.extend(device_id for device_id in device_ids if device_id not in known)


def is_claim(allocation):
    """True for an entry of list_pod_devices that is a DRA claim's device, False for a device plugin's devices."""
    return 'driver' in allocation


def parse_list_response(data):
    """Device allocations of a ListPodResourcesResponse.

    Device plugins' devices: one entry per container and resource, ``{'namespace', 'pod',
    'container', 'resource', 'device_ids'}``; the kubelet sends one ContainerDevices per device
    (each with its own NUMA topology), entries of the same container and resource are merged, in
    the kubelet's order. Then DRA (dynamic_resources): one entry per container and claimed device,
    ``{'namespace', 'pod', 'container', 'claim': 'namespace/name', 'driver', 'pool', 'device',
    'cdi_devices': [...]}`` (see :func:`is_claim`).
    """
    groups = {}
    claims = []
    for pod in field_messages(decode_message(data), 1):
        namespace, name = field_string(pod, 2), field_string(pod, 1)
        for container in field_messages(pod, 3):
            container_name = field_string(container, 1)
            for devices in field_messages(container, 2):
                key = (namespace, name, container_name, field_string(devices, 1))
                _merge(groups, key, field_strings(devices, 2))
            for claim in field_messages(container, 5):
                claim_name = '%s/%s' % (field_string(claim, 3), field_string(claim, 2))
                for resource in field_messages(claim, 4):
                    claims.append({'namespace': namespace, 'pod': name, 'container': container_name, 'claim': claim_name,
                                   'driver': field_string(resource, 2), 'pool': field_string(resource, 3),
                                   'device': field_string(resource, 4),
                                   'cdi_devices': [field_string(cdi, 1) for cdi in field_messages(resource, 1)]})
    devices = [{'namespace': key[0], 'pod': key[1], 'container': key[2], 'resource': key[3], 'device_ids': ids}
               for key, ids in groups.items()]
    return devices + claims


def parse_allocatable_response(data):
    """``{resource: [device ids]}`` of an AllocatableResourcesResponse (cpu and memory left out)."""
    groups = {}
    for devices in field_messages(decode_message(data), 1):
        _merge(groups, field_string(devices, 1), field_strings(devices, 2))
    return groups


def encode_container_devices(resource, device_ids):
    """A ContainerDevices message (for servers and tests speaking the same API)."""
    return encode_message([(1, resource), (2, list(device_ids))])


def encode_dynamic_resource(claim, devices):
    """A DynamicResource message: ``claim`` 'namespace/name', ``devices`` [{'driver', 'pool', 'device',
    'cdi_devices'}] (for servers and tests speaking the same API)."""
    namespace, name = claim.split('/', 1)
    resources = [encode_message([(1, [encode_message([(1, cdi)]) for cdi in device.get('cdi_devices', [])]),
                                 (2, device['driver']), (3, device.get('pool', '')), (4, device.get('device', ''))])
                 for device in devices]
    return encode_message([(2, name), (3, namespace), (4, resources)])


def encode_list_response(allocations):
    """A ListPodResourcesResponse from ``[{'namespace', 'pod', 'containers': [{'name', 'devices':
    {resource: [device ids]}, 'claims': {'namespace/claim': [{'driver', 'pool', 'device', 'cdi_devices'}]}}]}]``:
    the inverse of parse_list_response, for test servers."""
    pods = []
    for pod in allocations:
        containers = []
        for container in pod.get('containers', []):
            devices = [encode_container_devices(resource, ids)
                       for resource, ids in sorted(container.get('devices', {}).items())]
            claims = [encode_dynamic_resource(claim, claimed) for claim, claimed in sorted(container.get('claims', {}).items())]
            containers.append(encode_message([(1, container['name']), (2, devices), (5, claims)]))
        pods.append(encode_message([(1, pod['pod']), (2, pod['namespace']), (3, containers)]))
    return encode_message([(1, pods)])


def encode_allocatable_response(devices):
    """An AllocatableResourcesResponse from ``{resource: [device ids]}``."""
    return encode_message([(1, [encode_container_devices(resource, ids) for resource, ids in sorted(devices.items())])])


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


# ---- processes to pods -------------------------------------------------------------------------

# cgroupfs driver: .../kubepods[/burstable|/besteffort]/pod<uid>/<container id>
_CGROUPFS_POD = re.compile(r'^pod([0-9a-f][0-9a-f-]*)$')
# systemd driver: .../kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid, _ for ->.slice/<runtime>-<id>.scope
_SYSTEMD_QOS = re.compile(r'^kubepods-(?:burstable|besteffort)\.slice$')
_SYSTEMD_POD = re.compile(r'^kubepods(?:-(burstable|besteffort))?-pod([0-9a-f][0-9a-f_]*)\.slice$')
# A container's cgroup: the bare id (containerd or docker with cgroupfs) or the runtime's scope.
_CONTAINER = re.compile(r'^(?:(?:cri-containerd|crio|docker|containerd)-)?([0-9a-f]{12,64})(?:\.scope)?$')
_QOS_CLASSES = ('burstable', 'besteffort')


def _pod(uid, qos, below):
    container = None
    if below:
        match = _CONTAINER.match(below[0])
        container = match.group(1) if match else None
    return {'pod_uid': uid, 'container_id': container, 'qos': qos}


def _cgroupfs_pod(below_kubepods):
    rest, qos = below_kubepods, 'guaranteed'
    if rest and rest[0] in _QOS_CLASSES:
        rest, qos = rest[1:], rest[0]
    match = _CGROUPFS_POD.match(rest[0]) if rest else None
    return _pod(match.group(1), qos, rest[1:]) if match else None


def _systemd_pod(below_kubepods):
    rest = below_kubepods
    if rest and _SYSTEMD_QOS.match(rest[0]):
        rest = rest[1:]
    match = _SYSTEMD_POD.match(rest[0]) if rest else None
    if not match:
        return None
    return _pod(match.group(2).replace('_', '-'), match.group(1) or 'guaranteed', rest[1:])


def pod_of_cgroup_path(path):
    """``{'pod_uid', 'container_id', 'qos'}`` for a cgroup path inside kubepods, else None.

    ``container_id`` is None for a process of the pod's own cgroup (or a runtime helper such as
    CRI-O's conmon); ``qos`` is 'guaranteed', 'burstable' or 'besteffort'. The kubepods cgroup may
    sit below other cgroups (a kubelet with --cgroup-root, a node inside a container).
    """
    segments = [segment for segment in path.split('/') if segment]
    for index, segment in enumerate(segments):
        parse = {'kubepods': _cgroupfs_pod, 'kubepods.slice': _systemd_pod}.get(segment)
        pod = parse(segments[index + 1:]) if parse else None
        if pod is not None:
            return pod
    return None


def _read_cgroup_file(path):
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError) as exc:
        # The process ended (or never was): not in a pod, as far as anyone can tell now.
        if exc.errno in (errno.ENOENT, errno.ESRCH):
            return None
        raise


def pods_of_pids(pids, proc_root='/proc'):
    """``{pid: {'pod_uid', 'container_id', 'qos'}}`` for the processes among ``pids`` that run in a pod.

    Reads ``<proc_root>/<pid>/cgroup`` (cgroup v1: one line per hierarchy, the first inside
    kubepods wins, one naming a container preferred; v2: the single ``0::`` line). Processes that
    are not in a kubepods cgroup, and processes that no longer exist, are left out. A pid that is
    not a positive int is a ValueError; an unreadable cgroup file (other than vanished) an
    OSError.
    """
    if not os.path.isdir(proc_root):
        raise PodResourcesUnavailable('no proc filesystem at %s' % proc_root)
    found = {}
    for pid in pids:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise ValueError('pid must be a positive int, got %r' % (pid,))
        text = _read_cgroup_file(os.path.join(proc_root, str(pid), 'cgroup'))
        if text is None:
            continue
        best = None
        for line in text.splitlines():
            parts = line.split(':', 2)
            if len(parts) != 3:
                continue
            pod = pod_of_cgroup_path(parts[2])
            if pod is not None and (best is None or (best['container_id'] is None and pod['container_id'])):
                best = pod
        if best is not None:
            found[pid] = best
    return found


# ---- what the allocations mean for the host's GPUs ----------------------------------------------

class UnknownDeviceIds(Exception):
    """The kubelet names devices that match nothing on this host: which instances pods hold is unknown."""


# deviceIDStrategy index: '<gpu index>:<MIG device index>', a position in the GPU's list of MIG devices.
_INDEX_ID = re.compile(r'^[0-9]+:[0-9]+$')

# NVIDIA's DRA driver (NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin) names its devices after the GPU's
# minor number (/dev/nvidia<minor>, not the NVML index): a whole GPU 'gpu-<minor>' (GpuInfo.CanonicalName), a
# MIG device 'gpu-<minor>-mig-<GI profile id>-<placement start>-<placement size>' (MigDeviceInfo.CanonicalName in
# deviceinfo.go of earlier releases) or 'gpu-<minor>-mig-<profile name without dots>-<GI profile id>-<placement
# start>' (MigSpecTuple.ToCanonicalName of later ones), e.g. 'gpu-2-mig-1g24gb-19-0'. Its CDI devices are
# 'k8s.gpu.nvidia.com/device=<that name>' and 'k8s.gpu.nvidia.com/claim=<claim uid>-<that name>' (cdi.go).
_DRA_WHOLE_GPU = re.compile(r'^gpu-(?P<minor>[0-9]+)\Z')
_DRA_MIG_OLD = re.compile(r'^gpu-(?P<minor>[0-9]+)-mig-(?P<profile_id>[0-9]+)-(?P<start>[0-9]+)-[0-9]+\Z')
_DRA_MIG = re.compile(r'^gpu-(?P<minor>[0-9]+)-mig-[a-z0-9-]*[a-z][a-z0-9-]*-(?P<profile_id>[0-9]+)-(?P<start>[0-9]+)\Z')
_DRA_STANDARD_CDI = re.compile(r'^k8s\.gpu\.nvidia\.com/device=(?P<name>.+)\Z')


def _pod_name(allocation):
    return '%s/%s' % (allocation['namespace'], allocation['pod'])


def gpu_allocations(pod_devices):
    """The entries of ``pod_devices`` (list_pod_devices) that hold GPUs: device plugins' GPU resources
    (_gpu_resources) and the devices of DRA claims of NVIDIA's GPU driver."""
    return [d for d in pod_devices
            if (d['driver'] == DRA_GPU_DRIVER if is_claim(d) else is_gpu_resource(d['resource']))]


def _dra_device_name(claim):
    """The DRA driver's device name of a claimed device; from its standard CDI device where the kubelet
    gives no device name."""
    if claim['device']:
        return claim['device']
    for cdi in claim['cdi_devices']:
        match = _DRA_STANDARD_CDI.match(cdi)
        if match:
            return match.group('name')
    return ''


def _dra_key(name):
    """('gpu', minor) or ('mig', minor, GI profile id, placement start) of a DRA device name, or None."""
    match = _DRA_WHOLE_GPU.match(name)
    if match:
        return ('gpu', int(match.group('minor')))
    match = _DRA_MIG_OLD.match(name) or _DRA_MIG.match(name)
    if match:
        return ('mig', int(match.group('minor')), int(match.group('profile_id')), int(match.group('start')))
    return None


def _places(host):
    """Where each device id (device plugin) and each DRA device key points: (GPU uuid, GPU instance id or None)."""
    by_id = {}
    by_dra = {}
    for gpu in host['gpus']:
        by_id[gpu['uuid']] = (gpu['uuid'], None)
        by_id[str(gpu['index'])] = (gpu['uuid'], None)
        minor = gpu.get('minor_number')
        if minor is not None:
            by_dra[('gpu', minor)] = (gpu['uuid'], None)
        for gi in gpu['gpu_instances']:
            if minor is not None and gi.get('profile_id') is not None:
                by_dra[('mig', minor, gi['profile_id'], gi['placement']['start'])] = (gpu['uuid'], gi['id'])
            for ci in gi['compute_instances']:
                if ci.get('uuid'):
                    by_id[ci['uuid']] = (gpu['uuid'], gi['id'])
                if ci.get('mig_index') is not None:
                    by_id['%d:%d' % (gpu['index'], ci['mig_index'])] = (gpu['uuid'], gi['id'])
    return by_id, by_dra


def _hold(result, place, name, index_id=False):
    gpu_uuid, gi_id = place
    entry = result.setdefault(gpu_uuid, {'instances': {}, 'gpu': [], 'index_pods': []})
    pods = entry['gpu'] if gi_id is None else entry['instances'].setdefault(gi_id, [])
    if name not in pods:
        pods.append(name)
    if index_id and name not in entry['index_pods']:
        entry['index_pods'].append(name)


def allocations_of(host, pod_devices, pid_pods=None):
    """Which pod holds what, from the kubelet's pod-resources allocations (_pod_resources).

    Returns a _host_model.HostHolders (by GPU uuid: the pods on the whole GPU, on each GPU instance, and those
    holding an index id). NVIDIA's device plugin names a device by its UUID
    (deviceIDStrategy uuid: 'MIG-...' for a MIG device, 'GPU-...' for a whole GPU) or by index
    ('<gpu>:<mig device>' or '<gpu>'), with '::<replica>' appended when the device is shared;
    ``index_pods`` are the pods holding a '<gpu>:<mig device>' id of that GPU, which names a
    position in the GPU's list of MIG devices and shifts when its instances change. A DRA claim's
    device of NVIDIA's GPU driver (gpu.nvidia.com) is held like a device plugin's, whether or not
    a process uses it. ``pid_pods`` ({pid: {'pod_uid', ...}}) adds the pods of running processes as
    'uid:<pod uid>' (the cgroup names no namespace or pod name): what is known where pod-resources
    cannot be read.

    Raises UnknownDeviceIds when a device id of a GPU resource (_gpu_resources), or a device of a
    GPU DRA claim, matches none of these: dropping it would plan an instance a pod holds as free.
    """
    by_id, by_dra = _places(host)
    result = {}
    unknown = []
    for allocation in pod_devices:
        if is_claim(allocation):
            # Only NVIDIA's GPU driver: its ComputeDomain driver (compute-domain.nvidia.com) and other
            # vendors' drivers hand out no GPU.
            if allocation['driver'] != DRA_GPU_DRIVER:
                continue
            name = _dra_device_name(allocation)
            key = _dra_key(name)
            place = by_dra.get(key) if key else None
            if place is None:
                unknown.append('%s (DRA claim %s of pod %s, driver %s, pool %s)' % (
                    name or '(no device name)', allocation['claim'], _pod_name(allocation), allocation['driver'],
                    allocation['pool'] or '-'))
                continue
            _hold(result, place, _pod_name(allocation))
            continue
        # The GPU device plugin's resources only: NVIDIA's Network Operator also names nvidia.com/
        # resources (rdma_shared_device_a, hostdev, ...), whose ids are no GPU's.
        if not is_gpu_resource(allocation['resource']):
            continue
        for device_id in allocation['device_ids']:
            bare = strip_replica(device_id)
            place = by_id.get(device_id) or by_id.get(bare)
            if place is None:
                unknown.append('%s (%s of pod %s)' % (device_id, allocation['resource'], _pod_name(allocation)))
                continue
            _hold(result, place, _pod_name(allocation), index_id=bool(_INDEX_ID.match(bare)))
    if unknown:
        minors = '' if all(g.get('minor_number') is not None for g in host['gpus']) else (
            '; NVML reported no minor number for some GPUs, which DRA device names need')
        raise UnknownDeviceIds(
            'the kubelet lists device(s) %s that match no GPU UUID, MIG device UUID, GPU index, <gpu>:<mig device> '
            'index or GPU DRA device (gpu-<minor>, gpu-<minor>-mig-...) on this host (an id scheme this collection does '
            'not understand, or a device that is gone%s): %s, so nothing is planned'
            % (', '.join(unknown), minors, PODS_UNKNOWN))
    for gpu in host['gpus'] if pid_pods else []:
        for gi_id, pid in gpu_processes(gpu):
            if pid in pid_pods:
                _hold(result, (gpu['uuid'], gi_id), 'uid:%s' % pid_pods[pid]['pod_uid'])
    return HostHolders(dict(
        (uuid, GpuHolders(tuple(entry['gpu']), dict((gi_id, tuple(pods)) for gi_id, pods in entry['instances'].items()),
                          tuple(entry['index_pods'])))
        for uuid, entry in result.items()))


def index_id_refusal(gpu_index, pods, change):
    """Why ``change`` (what changes GPU ``gpu_index``'s MIG devices, in words) must not happen while ``pods``
    hold the GPU's MIG devices by index id; None when no pod does.

    A '<gpu>:<mig device>' id is a position in NVML's list of the GPU's MIG devices. Any instance created or
    destroyed on the GPU may move the others in that list (the NVML reference of nvmlDeviceGetMigDeviceHandleByIndex
    documents no order, only that handles may be reused and their properties change), so the kubelet,
    which keeps counting the old id as given to its pod, would hand the instance now at that position to a
    second pod.
    """
    if not pods:
        return None
    return ('GPU %d: pod(s) %s hold MIG devices by index id (<gpu>:<mig device>, the device plugin\'s deviceIDStrategy '
            'index), a position in the GPU\'s list of MIG devices; %s shifts those positions, so an id would name another '
            'instance. Nothing was changed: evict those pods first (the mig_layout role does), or run the device plugin '
            'with deviceIDStrategy uuid' % (gpu_index, ', '.join(pods), change))


def _advertised(host):
    """(resource, UUID id, index id) of each device NVIDIA's device plugin (mixed MIG strategy) advertises for
    ``host``: one nvidia.com/mig-<profile> per GPU instance with one full-size compute instance (the plugin
    advertises no other), one nvidia.com/gpu per GPU without MIG."""
    for gpu in host['gpus']:
        if gpu.get('mig_capable') and gpu['mig_mode']['current'] == 'enabled':
            for gi in gpu['gpu_instances']:
                if [ci['profile'] for ci in gi['compute_instances']] == [gi['profile']]:
                    ci = gi['compute_instances'][0]
                    index = '%d:%d' % (gpu['index'], ci['mig_index']) if ci.get('mig_index') is not None else None
                    yield resource_of_profile(gi['profile']), ci.get('uuid'), index
        else:
            yield WHOLE_GPU, gpu['uuid'], str(gpu['index'])


def expected_device_ids(host):
    """The device ids NVIDIA's device plugin (no sharing) advertises for ``host``, per resource and
    deviceIDStrategy: ``{resource: {'uuid': [sorted ids], 'index': [sorted ids]}}``; ``MIG-<uuid>`` and
    ``<gpu index>:<mig device index>`` for a MIG device, ``GPU-<uuid>`` and ``<gpu index>`` for a whole GPU.
    With time-slicing or MPS the plugin advertises each id once per replica (``<id>::<n>``;
    _gpu_resources.strip_replica gives the id back), under the ``.shared`` name with ``renameByDefault``.
    """
    expected = {}
    for resource, uuid, index in _advertised(host):
        ids = expected.setdefault(resource, {'uuid': [], 'index': []})
        if uuid:
            ids['uuid'].append(uuid)
        if index is not None:
            ids['index'].append(index)
    for ids in expected.values():
        ids['uuid'].sort()
        ids['index'].sort()
    return expected


def node_resources(host):
    """``{resource: count}`` of the devices NVIDIA's device plugin (mixed MIG strategy) advertises for ``host``."""
    counts = {}
    for resource, dummy, dummy_index in _advertised(host):
        counts[resource] = counts.get(resource, 0) + 1
    return counts


def allocatable_gpu_device_ids(socket_path=DEFAULT_SOCKET, timeout=5.0):
    """``{GPU resource: sorted device ids}`` the kubelet's ``GetAllocatableResources`` lists (every id the device
    plugins advertise now, replicas included); resources that are no GPU's left out. Raises PodResourcesUnavailable."""
    return dict((resource, sorted(ids)) for resource, ids in allocatable_devices(socket_path, timeout).items()
                if is_gpu_resource(resource))
