# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Shared helpers of the simulator tests: NVML's two-call protocols through the real pynvml wrappers,
model groupings, and a separate Python process with the simulator installed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import json
import os
import subprocess
import sys
import textwrap

import pynvml
import pytest

import gpufleet_nvml_sim as sim_api
from gpufleet_nvml_sim.models import MODELS, mode_applies_immediately

ENABLED = {'current': 'enabled', 'pending': 'enabled'}
ALL_MODELS = sorted(MODELS)
MIG_MODELS = sorted(name for name, model in MODELS.items() if model['mig_capable'])


def _table_signature(model):
    return (model['memory_total_mib'], model['sm_count'], model['architecture'], model['ci_7_slice_nvl_since_driver'],
            tuple(tuple(sorted((k, v) for k, v in p.items() if k != 'compute_placements')) for p in model['profiles']))


def _one_per_table():
    """One model per distinct profile table (models that share a table behave alike beyond their identity)."""
    seen = {}
    for name in sorted(MIG_MODELS, key=lambda n: ('SXM' not in n, n)):     # the SXM board stands for its PCIe twins
        seen.setdefault(_table_signature(MODELS[name]), name)
    return sorted(seen.values())


DISTINCT_TABLES = _one_per_table()
AMPERE = [name for name in DISTINCT_TABLES if not mode_applies_immediately(MODELS[name])]
HOPPER_AND_LATER = [name for name in DISTINCT_TABLES if mode_applies_immediately(MODELS[name])]


def error_of(function, *args, **kwargs):
    """The NVML error code ``function`` raises (the test fails when it returns)."""
    with pytest.raises(pynvml.NVMLError) as failure:
        function(*args, **kwargs)
    return failure.value.value


def raw(name):
    """The simulated C symbol itself, for calls no pynvml wrapper makes (bad versions, NULL arrays)."""
    return pynvml._nvmlGetFunctionPointer(name)


def address(handle):
    return ctypes.cast(handle, ctypes.c_void_p).value


def reinit():
    """A fresh nvmlInit: read-only calls then see changes made by another process or a host event."""
    pynvml.nvmlInit()


def gi_placements(handle, profile_id):
    """Possible placements with NVML's two calls: count with a NULL array, then fill."""
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
    return [(array[i].start, array[i].size) for i in range(count.value)]


def ci_placements(gi, profile_id):
    array = (pynvml.c_nvmlComputeInstancePlacement_t * 8)()
    count = ctypes.c_uint(8)
    pynvml.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, profile_id, array, ctypes.byref(count))
    return [(array[i].start, array[i].size) for i in range(count.value)]


def create_gi(handle, profile_id, start, size=None):
    """A GPU instance at ``start``; the placement's size is the profile's (from its possible placements) unless given."""
    placement = pynvml.c_nvmlGpuInstancePlacement_t()
    placement.start = start
    if size is None:
        sizes = set(s for dummy, s in gi_placements(handle, profile_id))
        size = sizes.pop() if len(sizes) == 1 else 0
    placement.size = size
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile_id, ctypes.byref(placement))


def create_ci(gi, profile_id, start):
    placement = pynvml.c_nvmlComputeInstancePlacement_t()
    placement.start = start
    return pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, profile_id, ctypes.byref(placement))


def gi_info(gi):
    """(id, profile id, start, size) of a GPU instance handle."""
    info = pynvml.nvmlGpuInstanceGetInfo(gi)
    return info.id, info.profileId, info.placement.start, info.placement.size


def gi_instances(handle, profile_id):
    array = (pynvml.c_nvmlGpuInstance_t * 8)()
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstances(handle, profile_id, array, ctypes.byref(count))
    return [array[i] for i in range(count.value)]


def ci_profile_infos(gi):
    """{CI profile enum: (id, slices, max count, name)} of every CI profile a GPU instance offers."""
    found = {}
    for enum in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, enum, 0)
        except pynvml.NVMLError as exc:
            assert exc.value == pynvml.NVML_ERROR_NOT_SUPPORTED, enum
            continue
        found[enum] = (info.id, info.sliceCount, info.instanceCount, info.name)
    return found


def profile_row(model, name):
    return [p for p in MODELS[model]['profiles'] if p['name'] == name][0]


def mutations(path):
    return [entry['call'] for entry in sim_api.read_call_log(path)]


def run_python(path, code):
    """Run ``code`` in a separate Python process with the simulator installed on ``path``; returns its JSON output."""
    script = textwrap.dedent('''
        import ctypes, json, sys
        import pynvml
        import gpufleet_nvml_sim
        gpufleet_nvml_sim.install(pynvml, sys.argv[1])
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    ''') + textwrap.dedent(code)
    output = subprocess.check_output([sys.executable, '-c', script, path], env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    return json.loads(output.decode())
