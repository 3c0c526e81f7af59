# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""What the kubelet's allocations mean for the host's GPUs: which pod holds which GPU and instance.

THE INVARIANT (the one rule every path obeys: in place, drain, the drain fallback, the apply, the single-GPU
modules): a GPU instance is destroyed only when no pod holds any of its devices -- by device id, under any
resource name, through a device plugin or a DRA claim, with or without a process -- or every such pod has
been evicted and is gone. Holding is decided here, once, by device id (:func:`allocations_of`), never by
recognising a resource name: the device_plugin role's ``rename`` (``nvidia.com/small-gpu``) holds a MIG
UUID as surely as ``nvidia.com/mig-1g.10gb`` does. Where the kubelet's pod-resources cannot be read, or name
a GPU-shaped id this host does not have, nothing is planned (UnknownDeviceIds, PODS_UNREADABLE): the run
refuses rather than guess.

The device ids are whatever the device plugin advertised (_pod_resources passes them on as they are); only
:func:`allocations_of` maps them to the host's GPUs. NVIDIA's k8s-device-plugin gives MIG devices as
``MIG-<uuid>`` (``deviceIDStrategy: uuid``, the default) or as ``<gpu index>:<mig device index>``
(``deviceIDStrategy: index``), and whole GPUs as ``GPU-<uuid>`` or ``<gpu index>``; a shared device
(time-slicing, MPS) once per replica, as ``<id>::<replica>``; NVIDIA's DRA driver names its devices after
the GPU's minor number. :func:`expected_device_ids` and :func:`node_resources` say what the device plugin
should advertise for the host. Nothing here imports Ansible.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_cgroups import pods_of_pids
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_resources import PODS_UNKNOWN
from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_resources_wire import is_claim
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import (
    DRA_GPU_DRIVER,
    WHOLE_GPU,
    INDEX_DEVICE_ID as _INDEX_ID,
    UUID_DEVICE_ID as _UUID_ID,
    is_gpu_resource,
    renamed_gpu_id,
    resource_of_profile,
    strip_replica,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import GpuHolders, HostHolders


# ---- what the allocations mean for the host's GPUs ----------------------------------------------

class UnknownDeviceIds(Exception):
    """The kubelet names devices that match nothing on this host: which instances pods hold is unknown."""


_GPU_INDEX_ID = re.compile(r'^[0-9]+$')


def _gpu_shaped(device_id):
    """Whether a device id has the form of a GPU's or MIG device's id (replica suffix ignored), whatever its resource."""
    bare = strip_replica(device_id)
    return bool(_UUID_ID.match(bare) or _INDEX_ID.match(bare) or _GPU_INDEX_ID.match(bare))


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
    """The entries of ``pod_devices`` (list_pod_devices) that may hold GPUs: device plugins' GPU resources
    (_gpu_resources), any other resource with a GPU-shaped device id (a renamed resource: which GPU, if any,
    is :func:`allocations_of`'s to say, by id), and the devices of DRA claims of NVIDIA's GPU driver."""
    return [d for d in pod_devices
            if (d['driver'] == DRA_GPU_DRIVER if is_claim(d)
                else is_gpu_resource(d['resource']) or any(_gpu_shaped(i) for i in d['device_ids']))]


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
    for gpu in host.gpus:
        by_id[gpu.uuid] = (gpu.uuid, None)
        by_id[str(gpu.index)] = (gpu.uuid, None)
        minor = gpu.minor_number
        if minor is not None:
            by_dra[('gpu', minor)] = (gpu.uuid, None)
        for gi in gpu.gpu_instances:
            if minor is not None and gi.profile_id is not None:
                by_dra[('mig', minor, gi.profile_id, gi.start)] = (gpu.uuid, gi.id)
            for ci in gi.compute_instances:
                if ci.uuid:
                    by_id[ci.uuid] = (gpu.uuid, gi.id)
                if ci.mig_index is not None:
                    by_id['%d:%d' % (gpu.index, ci.mig_index)] = (gpu.uuid, gi.id)
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

    Holding is by device id under any resource name (the module's invariant): a device id that names a GPU or MIG
    device of this host holds it whatever the resource is called.

    Raises UnknownDeviceIds when a device id of a GPU resource (_gpu_resources), a GPU-shaped id
    ('GPU-...', 'MIG-...', '<gpu>:<mig device>') under any name, or a device of a GPU DRA claim, matches
    none of these: dropping it would plan an instance a pod holds as free.
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
        # Held by id under any resource name (the invariant above): a renamed GPU resource holds its device as the
        # plain name does. A name that is no GPU resource (NVIDIA's Network Operator's nvidia.com/hostdev, another
        # vendor's) passes only ids that are not GPU-shaped ('0000:3b:00.2', 'eth9') or a plain number no GPU has.
        named_gpu = is_gpu_resource(allocation['resource'])
        for device_id in allocation['device_ids']:
            bare = strip_replica(device_id)
            place = by_id.get(device_id) or by_id.get(bare)
            if place is None:
                if named_gpu or renamed_gpu_id(bare):
                    unknown.append('%s (%s of pod %s)' % (device_id, allocation['resource'], _pod_name(allocation)))
                continue
            _hold(result, place, _pod_name(allocation), index_id=bool(_INDEX_ID.match(bare)))
    if unknown:
        minors = '' if all(g.minor_number is not None for g in host.gpus) else (
            '; NVML reported no minor number for some GPUs, which DRA device names need')
        raise UnknownDeviceIds(
            'the kubelet lists device(s) %s that match no GPU UUID, MIG device UUID, GPU index, <gpu>:<mig device> '
            'index or GPU DRA device (gpu-<minor>, gpu-<minor>-mig-...) on this host (an id scheme this collection does '
            'not understand, or a device that is gone%s): %s, so nothing is planned'
            % (', '.join(unknown), minors, PODS_UNKNOWN))
    for gpu in host.gpus if pid_pods else []:
        for gi_id, pid in gpu.process_places():
            if pid in pid_pods:
                _hold(result, (gpu.uuid, gi_id), 'uid:%s' % pid_pods[pid]['pod_uid'])
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
    for gpu in host.gpus:
        if gpu.mig_capable and gpu.mig_mode.enabled:
            for gi in gpu.gpu_instances:
                if gi.compute_profiles() == (gi.profile,):
                    ci = gi.compute_instances[0]
                    index = '%d:%d' % (gpu.index, ci.mig_index) if ci.mig_index is not None else None
                    yield resource_of_profile(gi.profile), ci.uuid, index
        else:
            yield WHOLE_GPU, gpu.uuid, str(gpu.index)


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


def unread_pid_pods(host, pod_devices):
    """Where pod-resources were not read (``pod_devices`` None), the pods of the running GPU processes,
    from their cgroups (_pod_cgroups.pods_of_pids); otherwise None."""
    return pods_of_pids(host.pids()) if pod_devices is None else None


def host_allocations(host, pod_devices):
    """_pod_allocations.allocations_of for ``host``: from the kubelet's answer or, where it was not
    read, from the cgroups of the running GPU processes."""
    return allocations_of(host, pod_devices or [], unread_pid_pods(host, pod_devices))
