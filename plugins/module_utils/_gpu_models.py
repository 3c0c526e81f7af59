# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""GPU model tables for the NVML simulator: one block per model, easy to correct.

Sources and confidence: docs of the collection (docs/simulator.md) and the MIG reference
the tables were built from. Where real hardware disagrees, the hardware is right: edit
the model's block. Profiles on real GPUs always come from NVML, never from here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# NVML_GPU_INSTANCE_PROFILE_* enum indices
ENUM_1_SLICE = 0
ENUM_2_SLICE = 1
ENUM_3_SLICE = 2
ENUM_4_SLICE = 3
ENUM_7_SLICE = 4
ENUM_1_SLICE_REV1 = 7   # 1g+me
ENUM_2_SLICE_REV1 = 8   # 2g+me
ENUM_1_SLICE_REV2 = 9   # 1g with double memory

ARCH_AMPERE = 7
ARCH_ADA = 8
ARCH_HOPPER = 9
ARCH_BLACKWELL = 10

# Compute instances per GPU instance size: {gi compute slices: {ci slices: starts}}.
# CI profile id == CI enum index. (counts high confidence; placements medium)
COMPUTE_PLACEMENTS = {
    1: {1: (0,)},
    2: {1: (0, 1), 2: (0,)},
    3: {1: (0, 1, 2), 2: (0,), 3: (0,)},
    4: {1: (0, 1, 2, 3), 2: (0, 2), 4: (0,)},
    7: {1: (0, 1, 2, 3, 4, 5, 6), 2: (0, 2, 4), 3: (0, 4), 4: (0,), 7: (0,)},
}
CI_ENUM_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}


class UnknownModel(KeyError):
    """A model name the simulator has no table for."""


def _gi(enum, profile_id, name, compute_slices, memory_slices, memory_mib, multiprocessors, max_count, starts, media=False):
    return {
        'enum': enum, 'id': profile_id, 'name': name, 'compute_slices': compute_slices, 'memory_slices': memory_slices,
        'memory_mib': memory_mib, 'multiprocessors': multiprocessors, 'max_count': max_count, 'starts': tuple(starts),
        'copy_engines': compute_slices, 'decoders': (1 if media else compute_slices // 2), 'jpegs': 1 if media else 0,
        'ofas': 1 if media else 0,
    }


def _eight_slice(names, memory, multiprocessors):
    """The 8-memory-slice geometry shared by A100, H100, H100 NVL, GH200, H200 and B200.

    ``names``/``memory``/``multiprocessors``: 1g, 1g+me, 1g double memory, 2g, 3g, 4g, 7g.
    Profile ids are the real ones on these GPUs: 19, 20, 15, 14, 9, 5, 0.
    """
    return [
        _gi(ENUM_1_SLICE, 19, names[0], 1, 1, memory[0], multiprocessors[0], 7, range(7)),
        _gi(ENUM_1_SLICE_REV1, 20, names[1], 1, 1, memory[1], multiprocessors[1], 1, range(7), media=True),
        _gi(ENUM_1_SLICE_REV2, 15, names[2], 1, 2, memory[2], multiprocessors[2], 4, (0, 2, 4, 6)),
        _gi(ENUM_2_SLICE, 14, names[3], 2, 2, memory[3], multiprocessors[3], 3, (0, 2, 4)),
        _gi(ENUM_3_SLICE, 9, names[4], 3, 4, memory[4], multiprocessors[4], 2, (0, 4)),
        _gi(ENUM_4_SLICE, 5, names[5], 4, 4, memory[5], multiprocessors[5], 1, (0,)),
        _gi(ENUM_7_SLICE, 0, names[6], 7, 8, memory[6], multiprocessors[6], 1, (0,)),
    ]


_A100_SMS = (14, 14, 14, 28, 42, 56, 98)
_HOPPER_SMS = (16, 16, 26, 32, 60, 64, 132)

MODELS = {
    # high confidence
    'A100-SXM4-40GB': {
        'nvml_name': 'NVIDIA A100-SXM4-40GB', 'pci_device_id': 0x20B010DE, 'architecture': ARCH_AMPERE,
        'memory_total_mib': 40960, 'mig_capable': True,
        'profiles': _eight_slice(('1g.5gb', '1g.5gb+me', '1g.10gb', '2g.10gb', '3g.20gb', '4g.20gb', '7g.40gb'),
                                 (4864, 4864, 9856, 9856, 19968, 19968, 40192), _A100_SMS),
    },
    # medium confidence (memory sizes)
    'A100-SXM4-80GB': {
        'nvml_name': 'NVIDIA A100-SXM4-80GB', 'pci_device_id': 0x20B210DE, 'architecture': ARCH_AMPERE,
        'memory_total_mib': 81920, 'mig_capable': True,
        'profiles': _eight_slice(('1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb', '3g.40gb', '4g.40gb', '7g.80gb'),
                                 (9728, 9728, 19968, 19968, 40192, 40192, 80896), _A100_SMS),
    },
    # high confidence; 4 memory slices
    'A30': {
        'nvml_name': 'NVIDIA A30', 'pci_device_id': 0x20B710DE, 'architecture': ARCH_AMPERE,
        'memory_total_mib': 24576, 'mig_capable': True,
        'profiles': [
            _gi(ENUM_1_SLICE, 14, '1g.6gb', 1, 1, 5952, 14, 4, range(4)),
            _gi(ENUM_1_SLICE_REV1, 21, '1g.6gb+me', 1, 1, 5952, 14, 1, range(4), media=True),
            _gi(ENUM_2_SLICE, 5, '2g.12gb', 2, 2, 11968, 28, 2, (0, 2)),
            _gi(ENUM_2_SLICE_REV1, 6, '2g.12gb+me', 2, 2, 11968, 28, 1, (0, 2), media=True),
            _gi(ENUM_4_SLICE, 0, '4g.24gb', 4, 4, 24000, 56, 1, (0,)),
        ],
    },
    # high confidence
    'H100-SXM5-80GB': {
        'nvml_name': 'NVIDIA H100 80GB HBM3', 'pci_device_id': 0x233010DE, 'architecture': ARCH_HOPPER,
        'memory_total_mib': 81559, 'mig_capable': True,
        'profiles': _eight_slice(('1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb', '3g.40gb', '4g.40gb', '7g.80gb'),
                                 (9984, 9984, 20096, 20096, 40448, 40448, 81152), _HOPPER_SMS),
    },
    # medium confidence
    'H100-NVL': {
        'nvml_name': 'NVIDIA H100 NVL', 'pci_device_id': 0x232110DE, 'architecture': ARCH_HOPPER,
        'memory_total_mib': 95830, 'mig_capable': True,
        'profiles': _eight_slice(('1g.12gb', '1g.12gb+me', '1g.24gb', '2g.24gb', '3g.47gb', '4g.47gb', '7g.94gb'),
                                 (10880, 10880, 22016, 22016, 47232, 47232, 95360), _HOPPER_SMS),
    },
    # names high; memory low: 1g, 2g and 7g from observed values, the others interpolated
    'H200': {
        'nvml_name': 'NVIDIA H200', 'pci_device_id': 0x233510DE, 'architecture': ARCH_HOPPER,
        'memory_total_mib': 143771, 'mig_capable': True,
        'profiles': _eight_slice(('1g.18gb', '1g.18gb+me', '1g.35gb', '2g.35gb', '3g.71gb', '4g.71gb', '7g.141gb'),
                                 (16384, 16384, 33280, 33280, 71424, 71424, 143360), _HOPPER_SMS),
    },
    # high confidence
    'GH200-96GB': {
        'nvml_name': 'NVIDIA GH200 480GB', 'pci_device_id': 0x234210DE, 'architecture': ARCH_HOPPER,
        'memory_total_mib': 97871, 'mig_capable': True,
        'profiles': _eight_slice(('1g.12gb', '1g.12gb+me', '1g.24gb', '2g.24gb', '3g.48gb', '4g.48gb', '7g.96gb'),
                                 (11264, 11264, 23552, 23552, 47616, 47616, 95232), _HOPPER_SMS),
    },
    # names high; memory and SMs guessed from the name rule (1g = 18 SMs is known)
    'B200': {
        'nvml_name': 'NVIDIA B200', 'pci_device_id': 0x290110DE, 'architecture': ARCH_BLACKWELL,
        'memory_total_mib': 183359, 'mig_capable': True,
        'profiles': _eight_slice(('1g.23gb', '1g.23gb+me', '1g.45gb', '2g.45gb', '3g.90gb', '4g.90gb', '7g.180gb'),
                                 (22784, 22784, 45312, 45312, 90880, 90880, 181248), (18, 18, 18, 36, 54, 72, 144)),
    },
    # not MIG-capable
    'L40S': {
        'nvml_name': 'NVIDIA L40S', 'pci_device_id': 0x26B510DE, 'architecture': ARCH_ADA,
        'memory_total_mib': 46068, 'mig_capable': False, 'profiles': [],
    },
}


def get_model(name):
    """The table of one model; an unknown name lists the valid ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise UnknownModel('unknown GPU model %r; simulated models: %s' % (name, ', '.join(sorted(MODELS))))


def mode_applies_immediately(model):
    """Hopper and later switch MIG mode without a reset when idle; Ampere waits for one."""
    return model['architecture'] >= ARCH_HOPPER
