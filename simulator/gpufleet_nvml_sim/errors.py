# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Test double of gpufleet.mig: never shipped to a GPU host.

"""NVML return codes (``nvmlReturn_t``, nvml.h API 13) and the simulator's two exceptions.

Kept here so that faults, the call log and the host events need no pynvml.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

SUCCESS = 0
ERRORS = {
    'NVML_ERROR_UNINITIALIZED': 1, 'NVML_ERROR_INVALID_ARGUMENT': 2, 'NVML_ERROR_NOT_SUPPORTED': 3,
    'NVML_ERROR_NO_PERMISSION': 4, 'NVML_ERROR_ALREADY_INITIALIZED': 5, 'NVML_ERROR_NOT_FOUND': 6,
    'NVML_ERROR_INSUFFICIENT_SIZE': 7, 'NVML_ERROR_INSUFFICIENT_POWER': 8, 'NVML_ERROR_DRIVER_NOT_LOADED': 9,
    'NVML_ERROR_TIMEOUT': 10, 'NVML_ERROR_IRQ_ISSUE': 11, 'NVML_ERROR_LIBRARY_NOT_FOUND': 12,
    'NVML_ERROR_FUNCTION_NOT_FOUND': 13, 'NVML_ERROR_CORRUPTED_INFOROM': 14, 'NVML_ERROR_GPU_IS_LOST': 15,
    'NVML_ERROR_RESET_REQUIRED': 16, 'NVML_ERROR_OPERATING_SYSTEM': 17, 'NVML_ERROR_LIB_RM_VERSION_MISMATCH': 18,
    'NVML_ERROR_IN_USE': 19, 'NVML_ERROR_MEMORY': 20, 'NVML_ERROR_NO_DATA': 21, 'NVML_ERROR_VGPU_ECC_NOT_SUPPORTED': 22,
    'NVML_ERROR_INSUFFICIENT_RESOURCES': 23, 'NVML_ERROR_FREQ_NOT_SUPPORTED': 24, 'NVML_ERROR_ARGUMENT_VERSION_MISMATCH': 25,
    'NVML_ERROR_DEPRECATED': 26, 'NVML_ERROR_NOT_READY': 27, 'NVML_ERROR_GPU_NOT_FOUND': 28, 'NVML_ERROR_INVALID_STATE': 29,
    'NVML_ERROR_RESET_TYPE_NOT_SUPPORTED': 30, 'NVML_ERROR_UNKNOWN': 999,
}
ERROR_NAMES = dict((code, name) for name, code in ERRORS.items())
ERROR_NAMES[SUCCESS] = 'NVML_SUCCESS'
# What nvmlErrorString answers (pynvml asks it for codes missing from its own table).
ERROR_STRINGS = {
    0: b'Success', 1: b'Uninitialized', 2: b'Invalid Argument', 3: b'Not Supported', 4: b'Insufficient Permissions',
    5: b'Already Initialized', 6: b'Not Found', 7: b'Insufficient Size', 8: b'Insufficient External Power',
    9: b'Driver Not Loaded', 10: b'Timeout', 11: b'Interrupt Request Issue', 12: b'NVML Shared Library Not Found',
    13: b'Function Not Found', 14: b'Corrupted infoROM', 15: b'GPU is lost', 16: b'GPU requires restart',
    17: b'The operating system has blocked the request.', 18: b'RM has detected an NVML/RM version mismatch.',
    19: b'In use by another client', 20: b'Insufficient Memory', 21: b'No data', 22: b'ECC is not supported by the vGPU',
    23: b'Insufficient resources', 24: b'Frequency not supported', 25: b'Argument version mismatch',
    26: b'Deprecated', 27: b'Not ready', 28: b'GPU not found', 29: b'Invalid state', 30: b'Reset type not supported',
    999: b'Unknown Error',
}


def error_name(code):
    """'NVML_ERROR_IN_USE' for 19; the number as text for a code nvml.h does not name."""
    return ERROR_NAMES.get(code, str(code))


class SimulatorError(Exception):
    """A state file that cannot describe a host, a bad helper call, or a refused simulated reset."""


class NvmlFailure(Exception):
    """Internal: ends a simulated call with an NVML status (a code or an ``NVML_ERROR_*`` name)."""

    def __init__(self, error):
        self.code = ERRORS[error] if isinstance(error, str) else int(error)
        super(NvmlFailure, self).__init__(error_name(self.code))
