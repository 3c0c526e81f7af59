# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Test double of gpufleet.mig: never shipped to a GPU host.

"""The C side of the simulated library: what the pynvml wrappers pass in and expect back.

The wrappers pass ``byref(x)`` objects (the target is ``._obj``), ints or ``c_uint``s,
handle pointers, caller-allocated ctypes arrays, or None, and read an ``nvmlReturn_t``
back. Handles are opaque pointers: the simulator writes an integer into the caller's
pointer and never dereferences one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes

from gpufleet_nvml_sim.errors import NvmlFailure

# Struct versions the versioned ("...V", "_v2") symbols check (nvml.h: NVML_STRUCT_VERSION(name, n)).
GI_PROFILE_INFO_V2 = 0x02000098     # nvmlGpuInstanceProfileInfo_v2
CI_PROFILE_INFO_V2 = 0x02000088     # nvmlComputeInstanceProfileInfo_v2
MEMORY_INFO_V2 = 0x02000028         # nvmlMemory_v2
NOT_AVAILABLE_UINT = 0xFFFFFFFF     # gpuInstanceId/computeInstanceId of a process outside MIG

# Handle encoding: (tag << 40) | ((gpu + 1) << 24) | ((gi_id + 1) << 12) | (ci_id + 1). Always nonzero and
# distinct per kind; GI and CI ids up to 4094 fit.
TAG_DEVICE, TAG_GI, TAG_CI, TAG_MIG = 1, 2, 3, 4
MAX_INSTANCE_ID = 0xFFE

_CArgObject = type(ctypes.byref(ctypes.c_uint()))


def encode(tag, gpu, gi_id=0, ci_id=0):
    return (tag << 40) | ((gpu + 1) << 24) | ((gi_id + 1) << 12) | (ci_id + 1)


def decode(handle):
    """(tag, gpu index, gi id, ci id) of a handle the simulator gave out; INVALID_ARGUMENT otherwise."""
    if isinstance(handle, int):
        value = handle
    else:
        try:
            value = ctypes.cast(handle, ctypes.c_void_p).value
        except (TypeError, ctypes.ArgumentError):
            value = None
    if not value or not TAG_DEVICE <= value >> 40 <= TAG_MIG or not (value >> 24) & 0xFFFF:
        raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
    return value >> 40, ((value >> 24) & 0xFFFF) - 1, ((value >> 12) & 0xFFF) - 1, (value & 0xFFF) - 1


def target(argument):
    """The ctypes object an out-argument refers to: ``byref(x)`` -> x, a pointer -> what it points at."""
    if argument is None:
        raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
    if isinstance(argument, _CArgObject):
        return argument._obj
    if hasattr(argument, 'contents'):
        if not argument:
            raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
        return argument.contents
    return argument


def elements(argument):
    """An indexable caller-allocated array (or None): a ctypes array, ``byref(array)`` or a pointer."""
    if isinstance(argument, _CArgObject):
        return argument._obj
    return argument


def capacity(array):
    """How many elements a caller-allocated array holds; None for a bare pointer (unknown)."""
    return len(array) if isinstance(array, ctypes.Array) else None


def uint(value):
    """An input integer as pynvml passes it: int, c_uint, or byref(c_uint) for in/out counts."""
    if isinstance(value, _CArgObject):
        value = value._obj
    return int(value.value if hasattr(value, 'value') else value)


def set_uint(argument, value):
    target(argument).value = value


def store_handle(argument, value):
    """Write a handle into the pointer that ``byref(handle)`` refers to."""
    ctypes.c_void_p.from_address(ctypes.addressof(target(argument))).value = value


def store_handles(array, values):
    """Write handles into a caller-allocated array of handle pointers."""
    base = ctypes.addressof(array) if isinstance(array, ctypes.Array) else ctypes.cast(array, ctypes.c_void_p).value
    for position, value in enumerate(values):
        ctypes.c_void_p.from_address(base + position * ctypes.sizeof(ctypes.c_void_p)).value = value


def as_pointer(value, field_type):
    """A handle value as the pointer type of a struct field (``info.device`` and the like)."""
    return ctypes.cast(ctypes.c_void_p(value), field_type)


def text(value):
    """An input C string (bytes, c_char_p or str) as str."""
    raw = value.value if hasattr(value, 'value') else value
    return raw.decode('utf-8', 'replace') if isinstance(raw, bytes) else raw


def write_text(buffer, length, value):
    """Copy ``value`` into a caller buffer of ``length`` bytes; INSUFFICIENT_SIZE when it (and its NUL) do not fit."""
    data = value.encode()
    if uint(length) < len(data) + 1:
        raise NvmlFailure('NVML_ERROR_INSUFFICIENT_SIZE')
    target(buffer).value = data
