# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The kubelet's pod-resources v1 messages, encoded and decoded with a minimal protobuf wire codec.

Varints and length-delimited fields, the field numbers of the kubelet's ``podresources/v1/api.proto``: no
generated code and no ``protobuf`` package needed. The client (_pod_resources) sends and reads these bytes;
the encoders also serve the test device plugin and kubelet of the tests. Nothing here imports Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Protobuf wire types.
WIRE_VARINT = 0
WIRE_FIXED64 = 1
WIRE_LENGTH_DELIMITED = 2
WIRE_FIXED32 = 5

_UINT64_MASK = (1 << 64) - 1


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
