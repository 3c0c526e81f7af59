# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""GPU model tables for the NVML simulator: one block per model, easy to correct.

Source: the collection's MIG reference (NVIDIA MIG User Guide, nvml.h, ``nvidia-smi mig
-lgip/-lgipp`` transcripts, mig-parted's default config); confidence is noted per block.
Where real hardware disagrees, the hardware is right: edit that model's block (and run
``tests/unit/plugins/module_utils/test_nvml_simulator.py``, which checks each table for
internal consistency). Nothing outside the simulator reads these tables: on real GPUs
every profile, id and placement comes from NVML.

Pure Python: no NVML, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# NVML_GPU_INSTANCE_PROFILE_* enum indices (what nvmlDeviceGetGpuInstanceProfileInfo takes)
ENUM_1_SLICE = 0
ENUM_2_SLICE = 1
ENUM_3_SLICE = 2
ENUM_4_SLICE = 3
ENUM_7_SLICE = 4
ENUM_8_SLICE = 5
ENUM_6_SLICE = 6
ENUM_1_SLICE_REV1 = 7   # 1g+me
ENUM_2_SLICE_REV1 = 8   # 2g+me
ENUM_1_SLICE_REV2 = 9   # 1g with double memory
GI_PROFILE_COUNT = 0x12

# NVML_COMPUTE_INSTANCE_PROFILE_*: the CI profile id equals the enum index.
CI_ENUM_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
CI_PROFILE_COUNT = 0x9

# nvmlDeviceArchitecture_t
ARCH_AMPERE = 7
ARCH_ADA = 8
ARCH_HOPPER = 9
ARCH_BLACKWELL = 10

# How nvmlDeviceSetMigMode takes effect.
PENDING_UNTIL_RESET = 'pending_until_reset'     # Ampere: pending until GPU reset/reboot; persists across reboots
IMMEDIATE_WHEN_IDLE = 'immediate_when_idle'     # Hopper and later: applies at once when idle; lost on reboot

# Compute instances per GPU instance size (compute slices of the GI):
# {GI compute slices: {CI compute slices: placement starts}}; a CI profile's max count is
# its number of starts, its placement size its slice count. (counts high confidence;
# placements medium)
COMPUTE_PLACEMENTS = {
    1: {1: (0,)},
    2: {1: (0, 1), 2: (0,)},
    3: {1: (0, 1, 2), 2: (0,), 3: (0,)},
    4: {1: (0, 1, 2, 3), 2: (0, 2), 4: (0,)},
    7: {1: (0, 1, 2, 3, 4, 5, 6), 2: (0, 2, 4), 3: (0, 4), 4: (0,), 7: (0,)},
}

# Where nvmlDeviceCreateGpuInstance (no placement) puts a GI: {placement size in memory
# slices: preferred starts}, filtered to the profile's starts. Observed on recent drivers
# for 8-slice GPUs (1g: 6,4,5,0,1,2,3; first 2g and 3g at 4); not documented, and the
# A30 order is a guess. gpufleet.mig never relies on it.
AUTO_PLACEMENT_8 = {1: (6, 4, 5, 0, 1, 2, 3), 2: (6, 4, 2, 0), 4: (4, 0), 8: (0,)}
AUTO_PLACEMENT_4 = {1: (2, 3, 0, 1), 2: (2, 0), 4: (0,)}

# GPU instance profile rows:
#  enum, profile id, name, compute slices, memory slices (placement size), memorySizeMB, SMs, max count, starts,
#  engines (copy, decoder, encoder, jpeg, ofa) -- engine counts approximate; +me profiles carry the media engines.
_1_TO_6 = (0, 1, 2, 3, 4, 5, 6)

A100_SXM4_40GB = {
    # Confidence: high (names, ids, memory, SMs); engines from the MIG User Guide table.
    'nvml_name': 'NVIDIA A100-SXM4-40GB', 'pci_device_id': 0x20B010DE, 'architecture': ARCH_AMPERE,
    'memory_total_mib': 40960, 'sm_count': 108, 'mig_mode_change': PENDING_UNTIL_RESET,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.5gb', 1, 1, 4864, 14, 7, _1_TO_6, (1, 0, 0, 0, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.5gb+me', 1, 1, 4864, 14, 1, _1_TO_6, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.10gb', 1, 2, 9856, 14, 4, (0, 2, 4, 6), (1, 1, 0, 0, 0)),
        (ENUM_2_SLICE, 14, '2g.10gb', 2, 2, 9856, 28, 3, (0, 2, 4), (2, 1, 0, 0, 0)),
        (ENUM_3_SLICE, 9, '3g.20gb', 3, 4, 19968, 42, 2, (0, 4), (3, 2, 0, 0, 0)),
        (ENUM_4_SLICE, 5, '4g.20gb', 4, 4, 19968, 56, 1, (0,), (4, 2, 0, 0, 0)),
        (ENUM_7_SLICE, 0, '7g.40gb', 7, 8, 40192, 98, 1, (0,), (7, 5, 0, 1, 1)),
    ),
}

A100_SXM4_80GB = {
    # Confidence: medium (memory sizes); ids, placements, SMs high.
    'nvml_name': 'NVIDIA A100-SXM4-80GB', 'pci_device_id': 0x20B210DE, 'architecture': ARCH_AMPERE,
    'memory_total_mib': 81920, 'sm_count': 108, 'mig_mode_change': PENDING_UNTIL_RESET,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.10gb', 1, 1, 9728, 14, 7, _1_TO_6, (1, 0, 0, 0, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.10gb+me', 1, 1, 9728, 14, 1, _1_TO_6, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.20gb', 1, 2, 19968, 14, 4, (0, 2, 4, 6), (1, 1, 0, 0, 0)),
        (ENUM_2_SLICE, 14, '2g.20gb', 2, 2, 19968, 28, 3, (0, 2, 4), (2, 1, 0, 0, 0)),
        (ENUM_3_SLICE, 9, '3g.40gb', 3, 4, 40192, 42, 2, (0, 4), (3, 2, 0, 0, 0)),
        (ENUM_4_SLICE, 5, '4g.40gb', 4, 4, 40192, 56, 1, (0,), (4, 2, 0, 0, 0)),
        (ENUM_7_SLICE, 0, '7g.80gb', 7, 8, 80896, 98, 1, (0,), (7, 5, 0, 1, 1)),
    ),
}

A30 = {
    # Confidence: high. 4 memory slices, 4 compute slices; engines from the MIG User Guide table.
    'nvml_name': 'NVIDIA A30', 'pci_device_id': 0x20B710DE, 'architecture': ARCH_AMPERE,
    'memory_total_mib': 24576, 'sm_count': 56, 'mig_mode_change': PENDING_UNTIL_RESET,
    'memory_slices': 4, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_4,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 14, '1g.6gb', 1, 1, 5952, 14, 4, (0, 1, 2, 3), (1, 0, 0, 0, 0)),
        (ENUM_1_SLICE_REV1, 21, '1g.6gb+me', 1, 1, 5952, 14, 1, (0, 1, 2, 3), (1, 1, 0, 1, 1)),
        (ENUM_2_SLICE, 5, '2g.12gb', 2, 2, 11968, 28, 2, (0, 2), (2, 2, 0, 0, 0)),
        (ENUM_2_SLICE_REV1, 6, '2g.12gb+me', 2, 2, 11968, 28, 1, (0, 2), (2, 2, 0, 1, 1)),
        (ENUM_4_SLICE, 0, '4g.24gb', 4, 4, 24000, 56, 1, (0,), (4, 4, 0, 1, 1)),
    ),
}

H100_SXM5_80GB = {
    # Confidence: high (names, ids, memory, SMs, engines as `nvidia-smi mig -lgip` prints them).
    'nvml_name': 'NVIDIA H100 80GB HBM3', 'pci_device_id': 0x233010DE, 'architecture': ARCH_HOPPER,
    'memory_total_mib': 81559, 'sm_count': 132, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.10gb', 1, 1, 9984, 16, 7, _1_TO_6, (1, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.10gb+me', 1, 1, 9984, 16, 1, _1_TO_6, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.20gb', 1, 2, 20096, 26, 4, (0, 2, 4, 6), (1, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.20gb', 2, 2, 20096, 32, 3, (0, 2, 4), (2, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.40gb', 3, 4, 40448, 60, 2, (0, 4), (3, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.40gb', 4, 4, 40448, 64, 1, (0,), (4, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.80gb', 7, 8, 81152, 132, 1, (0,), (8, 7, 0, 7, 1)),
    ),
}

H100_NVL = {
    # Confidence: medium (names, memory; 1g memory approximate). SMs and engines as H100 SXM5.
    'nvml_name': 'NVIDIA H100 NVL', 'pci_device_id': 0x232110DE, 'architecture': ARCH_HOPPER,
    'memory_total_mib': 95830, 'sm_count': 132, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.12gb', 1, 1, 10880, 16, 7, _1_TO_6, (1, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.12gb+me', 1, 1, 10880, 16, 1, _1_TO_6, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.24gb', 1, 2, 22016, 26, 4, (0, 2, 4, 6), (1, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.24gb', 2, 2, 22016, 32, 3, (0, 2, 4), (2, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.47gb', 3, 4, 47232, 60, 2, (0, 4), (3, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.47gb', 4, 4, 47232, 64, 1, (0,), (4, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.94gb', 7, 8, 95360, 132, 1, (0,), (8, 7, 0, 7, 1)),
    ),
}

H200 = {
    # Confidence: names high; memory low. 1g (16384), 2g (33280), 7g (143360) observed;
    # GUESS: 3g/4g memory 71424 (consistent with the name rule: ceil(71424*8/143771)=4 -> 70.5 -> 71).
    # Profile ids, SMs and engines assumed equal to H100.
    'nvml_name': 'NVIDIA H200', 'pci_device_id': 0x233510DE, 'architecture': ARCH_HOPPER,
    'memory_total_mib': 143771, 'sm_count': 132, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.18gb', 1, 1, 16384, 16, 7, _1_TO_6, (1, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.18gb+me', 1, 1, 16384, 16, 1, _1_TO_6, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.35gb', 1, 2, 33280, 26, 4, (0, 2, 4, 6), (1, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.35gb', 2, 2, 33280, 32, 3, (0, 2, 4), (2, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.71gb', 3, 4, 71424, 60, 2, (0, 4), (3, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.71gb', 4, 4, 71424, 64, 1, (0,), (4, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.141gb', 7, 8, 143360, 132, 1, (0,), (8, 7, 0, 7, 1)),
    ),
}

GH200_96GB = {
    # Confidence: high (names, memory); SMs and engines as H100. NVML names the 96 GB HBM3 part "GH200 480GB"
    # (HBM plus LPDDR): medium.
    'nvml_name': 'NVIDIA GH200 480GB', 'pci_device_id': 0x234210DE, 'architecture': ARCH_HOPPER,
    'memory_total_mib': 97871, 'sm_count': 132, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.12gb', 1, 1, 11264, 16, 7, _1_TO_6, (1, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.12gb+me', 1, 1, 11264, 16, 1, _1_TO_6, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.24gb', 1, 2, 23552, 26, 4, (0, 2, 4, 6), (1, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.24gb', 2, 2, 23552, 32, 3, (0, 2, 4), (2, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.48gb', 3, 4, 47616, 60, 2, (0, 4), (3, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.48gb', 4, 4, 47616, 64, 1, (0,), (4, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.96gb', 7, 8, 95232, 132, 1, (0,), (8, 7, 0, 7, 1)),
    ),
}

B200 = {
    # Confidence: names high, 1g = 18 SMs known. GUESSES: total memory (183359 MiB), every memorySizeMB
    # (picked to satisfy the name rule), SMs other than 1g, engines (as H100), profile ids (as H100).
    'nvml_name': 'NVIDIA B200', 'pci_device_id': 0x290110DE, 'architecture': ARCH_BLACKWELL,
    'memory_total_mib': 183359, 'sm_count': 148, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.23gb', 1, 1, 22784, 18, 7, _1_TO_6, (1, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.23gb+me', 1, 1, 22784, 18, 1, _1_TO_6, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.45gb', 1, 2, 45312, 18, 4, (0, 2, 4, 6), (1, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.45gb', 2, 2, 45312, 36, 3, (0, 2, 4), (2, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.90gb', 3, 4, 90880, 54, 2, (0, 4), (3, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.90gb', 4, 4, 90880, 72, 1, (0,), (4, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.180gb', 7, 8, 181248, 144, 1, (0,), (8, 7, 0, 7, 1)),
    ),
}

L40S = {
    # Not MIG-capable: GetMigMode and every MIG call answer NOT_SUPPORTED. Confidence: high.
    'nvml_name': 'NVIDIA L40S', 'pci_device_id': 0x26B510DE, 'architecture': ARCH_ADA,
    'memory_total_mib': 46068, 'sm_count': 142, 'mig_mode_change': None,
    'memory_slices': 0, 'compute_placements': {}, 'auto_placement_order': {},
    'gpu_instance_profiles': (),
}

_TABLES = {
    'A100-SXM4-40GB': A100_SXM4_40GB,
    'A100-SXM4-80GB': A100_SXM4_80GB,
    'A30': A30,
    'H100-SXM5-80GB': H100_SXM5_80GB,
    'H100-NVL': H100_NVL,
    'H200': H200,
    'GH200-96GB': GH200_96GB,
    'B200': B200,
    'L40S': L40S,
}

_GI_COLUMNS = ('enum', 'id', 'name', 'compute_slices', 'memory_slices', 'memory_mib', 'multiprocessors', 'max_count', 'starts')
_ENGINE_COLUMNS = ('copy_engines', 'decoders', 'encoders', 'jpegs', 'ofas')


class UnknownModel(KeyError):
    """A model name the simulator has no table for."""


def _build(key, table):
    """A model as the simulator reads it: the table plus one dict per GPU instance profile."""
    model = dict(table)
    model['key'] = key
    model['mig_capable'] = bool(table['gpu_instance_profiles'])
    profiles = []
    for row in table['gpu_instance_profiles']:
        profile = dict(zip(_GI_COLUMNS, row[:len(_GI_COLUMNS)]))
        profile.update(zip(_ENGINE_COLUMNS, row[len(_GI_COLUMNS)]))
        profile['starts'] = tuple(profile['starts'])
        profile['media_extensions'] = profile['name'].endswith('+me')
        # {CI compute slices: starts} valid inside a GI of this size
        profile['compute_placements'] = table['compute_placements'].get(profile['compute_slices'], {})
        profiles.append(profile)
    model['profiles'] = profiles
    return model


MODELS = dict((key, _build(key, table)) for key, table in _TABLES.items())


def get_model(name):
    """The table of one model; an unknown name lists the valid ones."""
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise UnknownModel('unknown GPU model %r; simulated models: %s' % (name, ', '.join(sorted(MODELS))))


def mode_applies_immediately(model):
    """Hopper and later switch MIG mode without a reset when idle; Ampere waits for one."""
    return model['mig_mode_change'] == IMMEDIATE_WHEN_IDLE


def compute_instance_name(gi_profile, ci_slices):
    """``3g.40gb`` for a full-size compute instance, ``1c.3g.40gb`` for a smaller one (mig-parted grammar)."""
    if ci_slices == gi_profile['compute_slices']:
        return gi_profile['name']
    return '%dc.%s' % (ci_slices, gi_profile['name'])


def name_rule_gb(memory_mib, total_mib):
    """The GB in a profile name, by go-nvlib's rule, from memorySizeMB and the GPU's total memory.

    GB = round(ceil(mem / total * 8) / 8 * ceil(total / GiB)), rounding halves away from zero
    (Go's math.Round). Integer arithmetic: no float edge cases.
    """
    eighths = -(-memory_mib * 8 // total_mib)
    total_gib = -(-total_mib // 1024)
    return (eighths * total_gib * 2 + 8) // 16


def model_problems(key):
    """Inconsistencies in one model's table (empty when it is sound); the unit tests run this on every model."""
    model = get_model(key)
    problems = []
    seen_ids = set()
    seen_enums = set()
    for profile in model['profiles']:
        where = '%s %s' % (key, profile['name'])
        if profile['id'] in seen_ids or profile['enum'] in seen_enums:
            problems.append('%s: duplicate profile id or enum' % where)
        seen_ids.add(profile['id'])
        seen_enums.add(profile['enum'])
        if not 0 <= profile['enum'] < GI_PROFILE_COUNT:
            problems.append('%s: enum %d out of range' % (where, profile['enum']))
        gb = int(profile['name'].split('.')[1].split('gb')[0])
        if name_rule_gb(profile['memory_mib'], model['memory_total_mib']) != gb:
            problems.append('%s: memorySizeMB %d gives %dgb by the name rule'
                            % (where, profile['memory_mib'], name_rule_gb(profile['memory_mib'], model['memory_total_mib'])))
        if not profile['name'].startswith('%dg.' % profile['compute_slices']):
            problems.append('%s: name does not match %d compute slices' % (where, profile['compute_slices']))
        for start in profile['starts']:
            if start % profile['memory_slices'] or start + profile['memory_slices'] > model['memory_slices']:
                problems.append('%s: placement %d:%d does not fit' % (where, start, profile['memory_slices']))
        if profile['max_count'] > len(profile['starts']):
            problems.append('%s: max count above its placements' % where)
        if not profile['compute_placements']:
            problems.append('%s: no compute instance profiles for %d slices' % (where, profile['compute_slices']))
        if profile['multiprocessors'] > model['sm_count'] or profile['memory_mib'] > model['memory_total_mib']:
            problems.append('%s: more SMs or memory than the GPU' % where)
    return problems
