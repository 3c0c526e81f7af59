# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The C side: initialisation, missing symbols, error strings, caller buffers and struct versions."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes

import pynvml
import pytest

import gpufleet_nvml_sim as sim_api
from gpufleet_nvml_sim import abi
from gpufleet_nvml_sim.errors import NvmlFailure

from ansible_collections.gpufleet.mig.tests.unit.simulator.helpers import error_of, raw

E = pynvml


def test_missing_symbols_error_strings_and_initialisation(tmp_path):
    path = str(tmp_path / 'host.json')
    sim_api.write_state(path, {'gpus': [{'model': 'A30'}]})
    lib = sim_api.install(pynvml, path)
    try:
        assert error_of(pynvml.nvmlDeviceGetCount) == E.NVML_ERROR_UNINITIALIZED
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        assert error_of(pynvml.nvmlDeviceGetTemperature, handle, 0) == E.NVML_ERROR_FUNCTION_NOT_FOUND
        assert error_of(pynvml.nvmlDeviceGetMigMode, None) == E.NVML_ERROR_INVALID_ARGUMENT
        assert pynvml.nvmlErrorString(E.NVML_ERROR_INSUFFICIENT_RESOURCES) == 'Insufficient resources'
        assert str(pynvml.NVMLError(E.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)) == 'Argument version mismatch'
        assert lib.call_counts['nvmlDeviceGetHandleByIndex_v2'] == 1 and lib.call_counts['nvmlInitWithFlags'] == 1
        pynvml.nvmlShutdown()
        assert error_of(pynvml.nvmlDeviceGetCount) == E.NVML_ERROR_UNINITIALIZED
        assert error_of(pynvml.nvmlShutdown) == E.NVML_ERROR_UNINITIALIZED
        assert sim_api.read_call_log(path) == []
    finally:
        sim_api.uninstall(pynvml)
    assert pynvml.nvmlLib is None


def test_caller_buffers_and_struct_versions(sim):
    sim([{'model': 'RTX-PRO-6000-SERVER'}])
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    name = 'NVIDIA RTX PRO 6000 Blackwell Server Edition'
    short = ctypes.create_string_buffer(len(name))          # no room for the NUL
    assert raw('nvmlDeviceGetName')(handle, short, ctypes.c_uint(len(name))) == E.NVML_ERROR_INSUFFICIENT_SIZE
    fits = ctypes.create_string_buffer(len(name) + 1)
    assert raw('nvmlDeviceGetName')(handle, fits, ctypes.c_uint(len(name) + 1)) == E.NVML_SUCCESS and fits.value == name.encode()
    memory = pynvml.c_nvmlMemory_v2_t()
    memory.version = 1
    assert raw('nvmlDeviceGetMemoryInfo_v2')(handle, ctypes.byref(memory)) == E.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    assert pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).total == 97887 * 1024 * 1024


def test_handles_round_trip_and_foreign_values_are_invalid():
    for tag, gpu, gi_id, ci_id in ((abi.TAG_DEVICE, 0, 0, 0), (abi.TAG_GI, 3, 14, 0), (abi.TAG_CI, 15, 4094, 4094), (abi.TAG_MIG, 1, 7, 2)):
        value = abi.encode(tag, gpu, gi_id, ci_id)
        assert abi.decode(value) == (tag, gpu, gi_id, ci_id)
        assert abi.decode(ctypes.cast(ctypes.c_void_p(value), pynvml.c_nvmlDevice_t)) == (tag, gpu, gi_id, ci_id)
    for foreign in (0, 0x1234, 5 << 40 | 1 << 24, None):
        with pytest.raises(NvmlFailure) as failure:
            abi.decode(foreign)
        assert failure.value.code == E.NVML_ERROR_INVALID_ARGUMENT
