# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""The one definition of "a GPU resource": the extended resources NVIDIA's device plugin advertises.

- ``nvidia.com/gpu``: a whole GPU (any MIG strategy), or every MIG device with the ``single`` strategy;
- ``nvidia.com/mig-<profile>``: one MIG profile with the ``mixed`` strategy, ``<profile>`` being the
  profile's name with ``+`` written ``.`` (``1g.10gb``, ``1g.10gb.me``, ``1g.24gb.me.all``,
  ``1g.24gb-me``, ``1g.24gb.gfx``); the plugin advertises full-size compute instances only;
- either with ``.shared`` appended: time-slicing or MPS with ``renameByDefault: true``
  (``nvidia.com/gpu.shared``, ``nvidia.com/mig-1g.10gb.shared``).

Source: NVIDIA/k8s-device-plugin, ``api/config/v1/consts.go`` (``ResourceNamePrefix`` nvidia.com,
``DefaultSharedResourceNameSuffix`` ``.shared``, which ``renameByDefault`` appends through
``ResourceName.DefaultSharedRename`` in ``resources.go``) and its README (mixed strategy names).
Other ``nvidia.com/`` resources (the Network Operator's ``nvidia.com/hostdev``,
``nvidia.com/rdma_shared_device_a``, ...) are not GPUs. A resource renamed to an arbitrary name
through the sharing config's ``rename`` field is not recognised here, which is why which pod holds a GPU
is never decided by these names but by device id (k8s/_pod_allocations.py states that invariant).

Pure Python, no Ansible imports. Used by the host code (pods that hold devices) and, as filters,
by the roles (pods that request GPUs, the node's allocatable).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import MigProfile, ProfileError

# NVIDIA's DRA driver for GPUs and MIG devices (NVIDIA/k8s-dra-driver-gpu, DriverName); its other driver,
# compute-domain.nvidia.com, hands out IMEX channels, no GPU.
DRA_GPU_DRIVER = 'gpu.nvidia.com'

WHOLE_GPU = 'nvidia.com/gpu'
MIG_PREFIX = 'nvidia.com/mig-'
SHARED_SUFFIX = '.shared'

# The resource form of a profile's suffix -> gpufleet's (NVML's) form.
_SUFFIXES = (('.me.all', '+me.all'), ('.me', '+me'), ('-me', '-me'), ('.gfx', '+gfx'))
_MIG_RESOURCE = re.compile(r'^' + re.escape(MIG_PREFIX) + r'(?P<base>[0-9]+g\.[0-9]+gb)'
                           r'(?P<suffix>\.me\.all|\.me|-me|\.gfx)?(?P<shared>' + re.escape(SHARED_SUFFIX) + r')?\Z')


def _parts(name):
    """(profile or None, shared) of a GPU resource name, or None when ``name`` is not one."""
    if not isinstance(name, str):
        return None
    for whole in (WHOLE_GPU, WHOLE_GPU + SHARED_SUFFIX):
        if name == whole:
            return None, name != WHOLE_GPU
    match = _MIG_RESOURCE.match(name)
    if not match:
        return None
    profile = match.group('base') + dict(_SUFFIXES).get(match.group('suffix') or '', '')
    try:
        parsed = MigProfile.parse(profile)
    except ProfileError:
        return None
    if parsed.name != profile:
        # Only the names the plugin writes: no leading zeros (01g.10gb), no 0g.
        return None
    return profile, bool(match.group('shared'))


# NVIDIA's device plugin advertises each replica of a shared (time-sliced or MPS) device as '<device id>::<replica>'.
_REPLICA_SUFFIX = re.compile(r'::[0-9]+\Z')


# deviceIDStrategy index: '<gpu index>:<MIG device index>', a position in the GPU's list of MIG devices.
INDEX_DEVICE_ID = re.compile(r'^[0-9]+:[0-9]+$')
# The ids NVIDIA's device plugin gives a GPU or MIG device (api/config/v1 deviceIDStrategy uuid and index):
# 'GPU-<uuid>', 'MIG-<uuid>' (or the older 'MIG-GPU-<uuid>/<gi>/<ci>'), '<gpu>:<mig device>', '<gpu>'.
UUID_DEVICE_ID = re.compile(r'^(GPU|MIG)-')


def renamed_gpu_id(device_id):
    """Whether an id under a resource name that is no GPU resource's (a renamed one) surely names a GPU or MIG
    device: a ``GPU-``/``MIG-`` UUID or a ``<gpu>:<mig device>`` index id (replica suffix ignored). A plain number
    may be any vendor's device, so it is not taken for a GPU index."""
    bare = strip_replica(device_id)
    return bool(UUID_DEVICE_ID.match(bare) or INDEX_DEVICE_ID.match(bare))


def strip_replica(device_id):
    """The device id a shared replica's id names (``MIG-...::3`` -> ``MIG-...``); other ids unchanged."""
    return _REPLICA_SUFFIX.sub('', device_id)


def is_gpu_resource(name):
    """True for ``nvidia.com/gpu``, ``nvidia.com/mig-<profile>`` and either with ``.shared``."""
    return _parts(name) is not None


def profile_of_resource(name):
    """The MIG profile of a ``nvidia.com/mig-<profile>[.shared]`` resource in gpufleet's grammar
    (``nvidia.com/mig-1g.10gb.me`` -> ``1g.10gb+me``); None for whole GPUs and non-GPU resources."""
    parts = _parts(name)
    return parts[0] if parts else None


def is_shared_resource(name):
    """True for a GPU resource that time-slicing or MPS renamed (``.shared``)."""
    parts = _parts(name)
    return bool(parts and parts[1])


def resource_of_profile(profile, shared=False):
    """The device plugin's resource for a MIG profile (``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me``);
    ``profile`` None is a whole GPU (``nvidia.com/gpu``). ``shared``: the ``.shared`` name.

    Raises ProfileError for a name that is not a GPU instance profile (the plugin advertises only
    full-size compute instances, named after their GPU instance).
    """
    if profile is None:
        base = WHOLE_GPU
    else:
        parsed = MigProfile.parse(profile)
        if parsed.is_compute_instance_profile:
            raise ProfileError('%r is a compute instance profile smaller than its GPU instance: NVIDIA\'s device '
                               'plugin advertises only full-size compute instances, as %s' % (profile, parsed.gpu_instance_name))
        base = MIG_PREFIX + parsed.name.replace('+', '.')
    return base + SHARED_SUFFIX if shared else base
