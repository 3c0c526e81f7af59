# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Test double of gpufleet.mig: never shipped to a GPU host.

"""GPU model tables for the NVML simulator: one block per model, easy to correct.

Nothing outside the simulator reads these tables: on a real GPU every profile, id,
placement and size comes from NVML. Where real hardware disagrees, the hardware is right:
edit that model's block and run tests/unit/simulator (``model_problems`` checks every
table for internal consistency).

Sources, cited per figure in the comments (anything not sourced says GUESS):
  [UG]     NVIDIA MIG User Guide, "Supported MIG Profiles" (profiles, engines, instance counts)
  [H]      nvml.h, API 13 (enums, return codes)
  [README] NVIDIA Linux driver README, supported-GPU list (NVML names, PCI device ids)
  [REF]    `nvidia-smi mig -lgip` transcripts posted in NVIDIA's own repositories, read
           against nvml.h: mig-parted issue 120 (H200), mig-parted PRs 166
           and 187 (B200), gpu-operator PR 903 (H100 NVL), gpu-operator PR 1303 and mig-parted
           issue 227 (GB200), mig-parted PR 139 (GH200 144G)
  [LGIP]   other public `nvidia-smi mig -lgip` transcripts: bigstack-oss/cubecos issue 312 and
           GoogleCloudPlatform/container-engine-accelerators PR 564 (RTX PRO 6000)
  [SMI]    total memory as `nvidia-smi` prints it in public logs
  [HW]     `make hw-check` on real hardware, as docs/hardware.md records it ("Seen on real hardware")
MiB figures from transcripts are nvidia-smi's GiB x 1024.

Pure Python: no NVML, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# NVML_GPU_INSTANCE_PROFILE_* enum indices [H] (what nvmlDeviceGetGpuInstanceProfileInfo takes)
ENUM_1_SLICE = 0
ENUM_2_SLICE = 1
ENUM_3_SLICE = 2
ENUM_4_SLICE = 3
ENUM_7_SLICE = 4
ENUM_8_SLICE = 5
ENUM_6_SLICE = 6
ENUM_1_SLICE_REV1 = 7       # 1g with media extensions (+me)
ENUM_2_SLICE_REV1 = 8       # 2g with media extensions (+me)
ENUM_1_SLICE_REV2 = 9       # 1g with twice the memory
ENUM_1_SLICE_GFX = 0xA      # +gfx: graphics capable
ENUM_2_SLICE_GFX = 0xB
ENUM_4_SLICE_GFX = 0xC
ENUM_1_SLICE_NO_ME = 0xD    # -me: no decoder, encoder, JPEG or OFA
ENUM_2_SLICE_NO_ME = 0xE
ENUM_1_SLICE_ALL_ME = 0xF   # +me.all: every media engine of the GPU
ENUM_2_SLICE_ALL_ME = 0x10
ENUM_3_SLICE_GFX = 0x11
GI_PROFILE_COUNT = 0x12

# NVML_COMPUTE_INSTANCE_PROFILE_* [H]: the CI profile id equals the enum index.
CI_ENUM_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
# Real drivers offer some full-size CI profiles in pairs, the plain enum and a variant, both naming the same
# CI: an A100 7g GI offers 4 (7_SLICE) and 8 (7_SLICE_NVL) on recent drivers (dra-driver-nvidia-gpu issue 1480;
# the mig-geometry reference saw "A100 7g reports CI profile 8"), a double-memory 1g GI on Hopper and later
# offers 0 (1_SLICE) and 7 (1_SLICE_REV1) ("MIG 1g.20gb (ID 7)" in `nvidia-smi mig -lcip`). gpufleet.mig
# creates with the plain one; the simulator answers to both.
CI_ENUM_1_SLICE_REV1 = 7    # second full-size CI profile of a double-memory 1g GI on Hopper and later
CI_ENUM_7_SLICE_NVL = 8     # second full-size CI profile of an A100 7g GI on recent drivers
CI_PROFILE_COUNT = 0x9

# nvmlDeviceArchitecture_t [H]
ARCH_AMPERE = 7
ARCH_ADA = 8
ARCH_HOPPER = 9
ARCH_BLACKWELL = 10

# How nvmlDeviceSetMigMode takes effect on an idle GPU (a held GPU keeps the change pending on every
# architecture; see library.py).
PENDING_UNTIL_RESET = 'persistent'      # Ampere: the driver resets the GPU itself; the mode survives reboots [REF]
IMMEDIATE_WHEN_IDLE = 'volatile'        # Hopper and later: reset-less; the mode is lost on reboot [REF]

# Compute instances per GPU instance size [REF; counts high confidence, placements medium]:
# {GI compute slices: {CI compute slices: placement starts}}; a CI profile's max count is its
# number of starts, its placement size its slice count.
COMPUTE_PLACEMENTS = {
    1: {1: (0,)},
    2: {1: (0, 1), 2: (0,)},
    3: {1: (0, 1, 2), 2: (0,), 3: (0,)},
    4: {1: (0, 1, 2, 3), 2: (0, 2), 4: (0,)},
    7: {1: (0, 1, 2, 3, 4, 5, 6), 2: (0, 2, 4), 3: (0, 4), 4: (0,), 7: (0,)},
}

# Where nvmlDeviceCreateGpuInstance (no placement) puts a GI: {placement size in memory slices:
# preferred starts}, filtered to the profile's starts. 8 slices: observed on recent drivers
# (1g: 6,4,5,0,1,2,3; first 2g and 3g at 4) [REF]. 4 slices: the first 1g at slice 0 (an A30 gets
# GPU instance id 3 for it [REF]); the rest GUESS. gpufleet.mig never relies on it.
AUTO_PLACEMENT_8 = {1: (6, 4, 5, 0, 1, 2, 3), 2: (6, 4, 2, 0), 4: (4, 0), 8: (0,)}
AUTO_PLACEMENT_4 = {1: (0, 1, 2, 3), 2: (0, 2), 4: (0,)}

# The name of a GPU instance profile [REF grammar, extended with the suffixes go-nvlib accepts].
PROFILE_NAME = re.compile(r'^(?P<g>[1-9])g\.(?P<gb>[0-9]+)gb(?P<suffix>\+me\.all|\+me|-me|\+gfx)?$')
# Which enums a suffix may use, and which plain enums exist [H].
_SUFFIX_ENUMS = {
    '': (ENUM_1_SLICE, ENUM_2_SLICE, ENUM_3_SLICE, ENUM_4_SLICE, ENUM_7_SLICE, ENUM_8_SLICE, ENUM_6_SLICE, ENUM_1_SLICE_REV2),
    '+me': (ENUM_1_SLICE_REV1, ENUM_2_SLICE_REV1),
    '+me.all': (ENUM_1_SLICE_ALL_ME, ENUM_2_SLICE_ALL_ME),
    '-me': (ENUM_1_SLICE_NO_ME, ENUM_2_SLICE_NO_ME),
    '+gfx': (ENUM_1_SLICE_GFX, ENUM_2_SLICE_GFX, ENUM_4_SLICE_GFX, ENUM_3_SLICE_GFX),
}

# GPU instance profile rows:
#  enum, profile id, name, compute slices, memory slices (placement size), memorySizeMB, SMs, max count, starts,
#  engines (copy, decoder, encoder, JPEG, OFA)
_1G_8 = (0, 1, 2, 3, 4, 5, 6)
_1G_4 = (0, 1, 2, 3)

# ---- Ampere ---------------------------------------------------------------------------------

A100_SXM4_40GB = {
    # [README] name and PCI id; [UG] names, engines, counts; [REF] ids, memory, SMs (high).
    'nvml_name': 'NVIDIA A100-SXM4-40GB', 'pci_device_ids': (0x20B010DE,), 'architecture': ARCH_AMPERE,
    'memory_total_mib': 40960, 'sm_count': 108, 'mig_mode_change': PENDING_UNTIL_RESET,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    # A 7g GI also offers NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL on recent drivers [REF]; from which driver on
    # is a GUESS (R580, the branch of the default driver_version).
    'ci_7_slice_nvl_since_driver': 580,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.5gb', 1, 1, 4864, 14, 7, _1G_8, (1, 0, 0, 0, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.5gb+me', 1, 1, 4864, 14, 1, _1G_8, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.10gb', 1, 2, 9856, 14, 4, (0, 2, 4, 6), (1, 1, 0, 0, 0)),
        (ENUM_2_SLICE, 14, '2g.10gb', 2, 2, 9856, 28, 3, (0, 2, 4), (2, 1, 0, 0, 0)),
        (ENUM_3_SLICE, 9, '3g.20gb', 3, 4, 19968, 42, 2, (0, 4), (3, 2, 0, 0, 0)),
        (ENUM_4_SLICE, 5, '4g.20gb', 4, 4, 19968, 56, 1, (0,), (4, 2, 0, 0, 0)),
        (ENUM_7_SLICE, 0, '7g.40gb', 7, 8, 40192, 98, 1, (0,), (7, 5, 0, 1, 1)),
    ),
}

A100_SXM4_80GB = {
    # [README] name and PCI id; [UG] names, engines, counts; [REF] ids, SMs (high), memory (medium; 7g.80gb
    # corrected to 80640 from a transcript).
    'nvml_name': 'NVIDIA A100-SXM4-80GB', 'pci_device_ids': (0x20B210DE,), 'architecture': ARCH_AMPERE,
    'memory_total_mib': 81920, 'sm_count': 108, 'mig_mode_change': PENDING_UNTIL_RESET,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'ci_7_slice_nvl_since_driver': 580,     # see A100_SXM4_40GB (threshold GUESS)
    # R535 and R545 named the 3g profile 3g.39gb (mig-parted issue 31); its memory then: as now, GUESS.
    'driver_variants': ((535, 545, {'3g.40gb': ('3g.39gb', None)}),),
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.10gb', 1, 1, 9728, 14, 7, _1G_8, (1, 0, 0, 0, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.10gb+me', 1, 1, 9728, 14, 1, _1G_8, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.20gb', 1, 2, 19968, 14, 4, (0, 2, 4, 6), (1, 1, 0, 0, 0)),
        (ENUM_2_SLICE, 14, '2g.20gb', 2, 2, 19968, 28, 3, (0, 2, 4), (2, 1, 0, 0, 0)),
        (ENUM_3_SLICE, 9, '3g.40gb', 3, 4, 40192, 42, 2, (0, 4), (3, 2, 0, 0, 0)),
        (ENUM_4_SLICE, 5, '4g.40gb', 4, 4, 40192, 56, 1, (0,), (4, 2, 0, 0, 0)),
        (ENUM_7_SLICE, 0, '7g.80gb', 7, 8, 80640, 98, 1, (0,), (7, 5, 0, 1, 1)),
    ),
}

A30 = {
    # [README] name and PCI id; [UG] names, counts, engines (1g.6gb: no decoder, as the MIG User Guide's A30 table
    # lists it: only 1g.6gb+me gets one); [REF] ids, memory, SMs (high). 4 memory slices, 4 compute slices.
    'nvml_name': 'NVIDIA A30', 'pci_device_ids': (0x20B710DE,), 'architecture': ARCH_AMPERE,
    'memory_total_mib': 24576, 'sm_count': 56, 'mig_mode_change': PENDING_UNTIL_RESET,
    'memory_slices': 4, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_4,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 14, '1g.6gb', 1, 1, 5952, 14, 4, _1G_4, (1, 0, 0, 0, 0)),
        (ENUM_1_SLICE_REV1, 21, '1g.6gb+me', 1, 1, 5952, 14, 1, _1G_4, (1, 1, 0, 1, 1)),
        (ENUM_2_SLICE, 5, '2g.12gb', 2, 2, 11968, 28, 2, (0, 2), (2, 2, 0, 0, 0)),
        (ENUM_2_SLICE_REV1, 6, '2g.12gb+me', 2, 2, 11968, 28, 1, (0, 2), (2, 2, 0, 1, 1)),
        (ENUM_4_SLICE, 0, '4g.24gb', 4, 4, 24000, 56, 1, (0,), (4, 4, 0, 1, 1)),
    ),
}

# ---- Hopper ---------------------------------------------------------------------------------

H100_SXM5_80GB = {
    # [README] name and PCI id; [REF] ids, memory, SMs, engines as `nvidia-smi mig -lgip` prints them (high).
    'nvml_name': 'NVIDIA H100 80GB HBM3', 'pci_device_ids': (0x233010DE,), 'architecture': ARCH_HOPPER,
    'memory_total_mib': 81559, 'sm_count': 132, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.10gb', 1, 1, 9984, 16, 7, _1G_8, (1, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.10gb+me', 1, 1, 9984, 16, 1, _1G_8, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.20gb', 1, 2, 20096, 26, 4, (0, 2, 4, 6), (1, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.20gb', 2, 2, 20096, 32, 3, (0, 2, 4), (2, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.40gb', 3, 4, 40448, 60, 2, (0, 4), (3, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.40gb', 4, 4, 40448, 64, 1, (0,), (4, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.80gb', 7, 8, 81152, 132, 1, (0,), (8, 7, 0, 7, 1)),
    ),
}

H100_PCIE_80GB = dict(
    # [README] name and PCI id; [REF] "H100-80GB profiles" (names, ids, memory; [UG] lists one table for PCIe and
    # SXM5). The PCIe board has 114 SMs: per-profile SMs are H100 SXM5's scaled by 114/132 and rounded down to
    # whole TPCs: GUESS. Total memory as SXM5: GUESS.
    H100_SXM5_80GB, nvml_name='NVIDIA H100 PCIe', pci_device_ids=(0x233110DE,), sm_count=114,
    gpu_instance_profiles=(
        (ENUM_1_SLICE, 19, '1g.10gb', 1, 1, 9984, 14, 7, _1G_8, (1, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.10gb+me', 1, 1, 9984, 14, 1, _1G_8, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.20gb', 1, 2, 20096, 22, 4, (0, 2, 4, 6), (1, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.20gb', 2, 2, 20096, 28, 3, (0, 2, 4), (2, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.40gb', 3, 4, 40448, 52, 2, (0, 4), (3, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.40gb', 4, 4, 40448, 56, 1, (0,), (4, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.80gb', 7, 8, 81152, 114, 1, (0,), (8, 7, 0, 7, 1)),
    ),
)

H100_NVL = {
    # [README] name and PCI id; [REF] names, ids, current-driver memory (1g.12gb 11008, 1g.24gb/2g.24gb 22144,
    # 3g/4g 47488, 7g.94gb 95360: medium, "~" in the transcript), total 95830; SMs and engines as H100 SXM5 [UG].
    'nvml_name': 'NVIDIA H100 NVL', 'pci_device_ids': (0x232110DE,), 'architecture': ARCH_HOPPER,
    'memory_total_mib': 95830, 'sm_count': 132, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.12gb', 1, 1, 11008, 16, 7, _1G_8, (1, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.12gb+me', 1, 1, 11008, 16, 1, _1G_8, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.24gb', 1, 2, 22144, 26, 4, (0, 2, 4, 6), (1, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.24gb', 2, 2, 22144, 32, 3, (0, 2, 4), (2, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.47gb', 3, 4, 47488, 60, 2, (0, 4), (3, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.47gb', 4, 4, 47488, 64, 1, (0,), (4, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.94gb', 7, 8, 95360, 132, 1, (0,), (8, 7, 0, 7, 1)),
    ),
}

H100_SXM5_94GB = dict(
    # PCI id 0x2339 "H100 SXM5 94GB": public PCI id lists (pci.ids style); NVML name: GUESS. Profiles as the H100 NVL
    # (the PCIe 94GB board, listed as "H100 PCIe 94GB (H100 NVL)" in NVIDIA's vGPU tables) with its 132 SMs: GUESS.
    H100_NVL, nvml_name='NVIDIA H100 SXM5 94GB', pci_device_ids=(0x233910DE,),
)

# How driver 580.159.04 answered on a real H200 [HW] where nvml.h and older drivers answer otherwise (a driver
# variant's answers; what a model leaves out is nvml.h's rule, DRIVER_ANSWERS):
H200_580_ANSWERS = {
    # nvmlDeviceGetGpuInstanceProfileInfo[V] describes the offered profiles with MIG off too (nvml.h: NOT_SUPPORTED
    # while MIG is disabled); the other enums answer NOT_SUPPORTED.
    'profile_info_without_mig': True,
    # The enums that driver knows end with 2_SLICE_ALL_ME (0x10): 3_SLICE_GFX (0x11) came with NVML v595 (NVML API
    # change log, "Changes between NVML v590 and v595"), and asking for it answered INVALID_ARGUMENT.
    'gi_profile_enum_count': ENUM_3_SLICE_GFX,
    # Profile ids of other boards (RTX PRO 6000 +gfx, +me.all and -me among them) whose possible placements answer
    # SUCCESS with none, MIG off (with MIG on: GUESS, alike); every other id the GPU lacks answers NOT_SUPPORTED.
    'empty_placement_ids': (32, 35, 38, 47, 48, 64, 65, 66, 67, 72, 73),
}

H200 = {
    # [README] name and PCI id; [REF] from mig-parted issue 120: names, ids, memory (1g.18gb 16384 confirmed;
    # 1g.35gb/2g.35gb 33024, 3g/4g.71gb 71168, 7g.141gb 143104), SMs, engines, total 143771 (high).
    'nvml_name': 'NVIDIA H200', 'pci_device_ids': (0x233510DE,), 'architecture': ARCH_HOPPER,
    'memory_total_mib': 143771, 'sm_count': 132, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    # [HW] driver 580.159.04 on a real H200 (docs/hardware.md, "Seen on real hardware"): more memory for the 2-, 4- and
    # 8-memory-slice profiles (1g.18gb unchanged, names, SMs and engines as above), and the MIG-off answers of
    # H200_580_ANSWERS. From which 580 release on, and whether later branches answer alike: GUESS (580.159 to the end
    # of the 580 branch; earlier 580 releases, the simulator's default 580.95.05 among them, keep the table above).
    'driver_variants': (((580, 159), 580, {
        '1g.35gb': ('1g.35gb', 33280), '2g.35gb': ('2g.35gb', 33280), '3g.71gb': ('3g.71gb', 71424),
        '4g.71gb': ('4g.71gb', 71424), '7g.141gb': ('7g.141gb', 143360)}, H200_580_ANSWERS),),
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.18gb', 1, 1, 16384, 16, 7, _1G_8, (1, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.18gb+me', 1, 1, 16384, 16, 1, _1G_8, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.35gb', 1, 2, 33024, 26, 4, (0, 2, 4, 6), (1, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.35gb', 2, 2, 33024, 32, 3, (0, 2, 4), (2, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.71gb', 3, 4, 71168, 60, 2, (0, 4), (3, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.71gb', 4, 4, 71168, 64, 1, (0,), (4, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.141gb', 7, 8, 143104, 132, 1, (0,), (8, 7, 0, 7, 1)),
    ),
}

GH200_96GB = {
    # [UG] names, engines ("H100 96GB (H100 on GH200)" table); [REF] ids, memory (high); SMs as H100 SXM5.
    # [README] names the 0x2342 part "NVIDIA GH200 480GB" (HBM plus LPDDR; 120GB boards share the id).
    'nvml_name': 'NVIDIA GH200 480GB', 'pci_device_ids': (0x234210DE,), 'architecture': ARCH_HOPPER,
    'memory_total_mib': 97871, 'sm_count': 132, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.12gb', 1, 1, 11264, 16, 7, _1G_8, (1, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.12gb+me', 1, 1, 11264, 16, 1, _1G_8, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.24gb', 1, 2, 23552, 26, 4, (0, 2, 4, 6), (1, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.24gb', 2, 2, 23552, 32, 3, (0, 2, 4), (2, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.48gb', 3, 4, 47616, 60, 2, (0, 4), (3, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.48gb', 4, 4, 47616, 64, 1, (0,), (4, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.96gb', 7, 8, 95232, 132, 1, (0,), (8, 7, 0, 7, 1)),
    ),
}

GH200_144GB = {
    # [README] name and PCI id; [SMI] total 146831; [REF] from mig-parted PR 139: ids, 1g.18gb 17920 (16 SMs),
    # 1g.36gb/2g.36gb 36096 (26/32 SMs), engines. 3g.72gb/4g.72gb 72448 and 7g.144gb 145920: GUESS (H200's
    # ratios, consistent with the name rule); their SMs and engines as H200.
    'nvml_name': 'NVIDIA GH200 144G HBM3e', 'pci_device_ids': (0x234810DE,), 'architecture': ARCH_HOPPER,
    'memory_total_mib': 146831, 'sm_count': 132, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.18gb', 1, 1, 17920, 16, 7, _1G_8, (1, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.18gb+me', 1, 1, 17920, 16, 1, _1G_8, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.36gb', 1, 2, 36096, 26, 4, (0, 2, 4, 6), (1, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.36gb', 2, 2, 36096, 32, 3, (0, 2, 4), (2, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.72gb', 3, 4, 72448, 60, 2, (0, 4), (3, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.72gb', 4, 4, 72448, 64, 1, (0,), (4, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.144gb', 7, 8, 145920, 132, 1, (0,), (8, 7, 0, 7, 1)),
    ),
}

H100_96GB = dict(
    # PCI id 0x233D: mig-parted's config-default.yaml and the GPU operator's config map ("H100-96GB", all-balanced:
    # 1g.12gb, 2g.24gb, 3g.48gb; all-7g.96gb) [REF]. Profiles, memory and SMs as GH200 96GB (the same names): GUESS.
    # NVML name: GUESS.
    GH200_96GB, nvml_name='NVIDIA H100 96GB HBM3', pci_device_ids=(0x233D10DE,),
)

PG506_96GB = {
    # PCI id 0x20B6 (GA100, Ampere): mig-parted's config-default.yaml ("PG506-96GB", the 96 GB profile names of
    # GH200 96GB: 1g.12gb, 2g.24gb, 3g.48gb, 4g.48gb, 7g.96gb) [REF]. Memory as GH200 96GB, SMs, engines, ids and the
    # Ampere mode change as the A100: GUESS. NVML name: GUESS.
    'nvml_name': 'NVIDIA PG506-96GB', 'pci_device_ids': (0x20B610DE,), 'architecture': ARCH_AMPERE,
    'memory_total_mib': 97871, 'sm_count': 108, 'mig_mode_change': PENDING_UNTIL_RESET,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'ci_7_slice_nvl_since_driver': 580,     # see A100_SXM4_40GB (threshold GUESS)
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.12gb', 1, 1, 11264, 14, 7, _1G_8, (1, 0, 0, 0, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.12gb+me', 1, 1, 11264, 14, 1, _1G_8, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.24gb', 1, 2, 23552, 14, 4, (0, 2, 4, 6), (1, 1, 0, 0, 0)),
        (ENUM_2_SLICE, 14, '2g.24gb', 2, 2, 23552, 28, 3, (0, 2, 4), (2, 1, 0, 0, 0)),
        (ENUM_3_SLICE, 9, '3g.48gb', 3, 4, 47616, 42, 2, (0, 4), (3, 2, 0, 0, 0)),
        (ENUM_4_SLICE, 5, '4g.48gb', 4, 4, 47616, 56, 1, (0,), (4, 2, 0, 0, 0)),
        (ENUM_7_SLICE, 0, '7g.96gb', 7, 8, 95232, 98, 1, (0,), (7, 5, 0, 1, 1)),
    ),
}

H20 = {
    # [README] name and PCI id; [REF] "96 GB profiles (1g.12gb .. 7g.96gb), total 97871". Memory per profile as
    # GH200 96GB (same total): GUESS. The H20 has 78 SMs: per-profile SMs are H100's scaled by 78/132 and rounded
    # down to whole TPCs: GUESS. Ids and engines as H100: GUESS.
    'nvml_name': 'NVIDIA H20', 'pci_device_ids': (0x232910DE,), 'architecture': ARCH_HOPPER,
    'memory_total_mib': 97871, 'sm_count': 78, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.12gb', 1, 1, 11264, 8, 7, _1G_8, (1, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.12gb+me', 1, 1, 11264, 8, 1, _1G_8, (1, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.24gb', 1, 2, 23552, 14, 4, (0, 2, 4, 6), (1, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.24gb', 2, 2, 23552, 18, 3, (0, 2, 4), (2, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.48gb', 3, 4, 47616, 34, 2, (0, 4), (3, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.48gb', 4, 4, 47616, 36, 1, (0,), (4, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.96gb', 7, 8, 95232, 78, 1, (0,), (8, 7, 0, 7, 1)),
    ),
}

# ---- Blackwell --------------------------------------------------------------------------------

B200 = {
    # [README] name and PCI id. Newer driver generation (mig-parted PR 187, March 2025) [REF]: 1g.23gb 20992
    # (20.50 GiB; the older driver of PR 166 reported 22528), 1g.45gb/2g.45gb 45312, SMs 18/18/30/36, copy
    # engines 1g 2 / 2g 4 (high). 3g/4g 91136, 7g 182784, SMs 3g 70 / 4g 72 / 7g 148: medium-low [REF]. Copy
    # engines 3g 6 / 4g 8 / 7g 16 [UG]; other engines follow H100's per-slice pattern: GUESS. Total 183359 [REF].
    'nvml_name': 'NVIDIA B200', 'pci_device_ids': (0x290110DE,), 'architecture': ARCH_BLACKWELL,
    'memory_total_mib': 183359, 'sm_count': 148, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    # The older driver of mig-parted PR 166 (January 2025) gave 1g 22.00 GiB [REF]; which branches: GUESS (before R570).
    'driver_variants': ((0, 569, {'1g.23gb': ('1g.23gb', 22528), '1g.23gb+me': ('1g.23gb+me', 22528)}),),
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.23gb', 1, 1, 20992, 18, 7, _1G_8, (2, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.23gb+me', 1, 1, 20992, 18, 1, _1G_8, (2, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.45gb', 1, 2, 45312, 30, 4, (0, 2, 4, 6), (2, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.45gb', 2, 2, 45312, 36, 3, (0, 2, 4), (4, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.90gb', 3, 4, 91136, 70, 2, (0, 4), (6, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.90gb', 4, 4, 91136, 72, 1, (0,), (8, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.180gb', 7, 8, 182784, 148, 1, (0,), (16, 7, 0, 7, 1)),
    ),
}

GB200 = {
    # [README] name and PCI id; [SMI] total 189471. Later driver generation (mig-parted issue 227, August 2025)
    # [REF]: 1g.23gb 22528 (an early driver, gpu-operator PR 1303, named it 1g.24gb at 20480), 18 SMs, 2 copy
    # engines; 1g.47gb/2g.47gb 46592 with 32/38 SMs, 2g 4 copy engines (high). 3g.93gb/4g.93gb 94208, 7g.186gb
    # 188672: GUESS (B200's ratios, consistent with the name rule); SMs 3g 72 / 4g 76 / 7g 152 and the total SM
    # count: GUESS; engines as B200: GUESS.
    'nvml_name': 'NVIDIA GB200', 'pci_device_ids': (0x294110DE,), 'architecture': ARCH_BLACKWELL,
    'memory_total_mib': 189471, 'sm_count': 152, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    # The early driver of gpu-operator PR 1303 (March 2025) named the 1g profile 1g.24gb at 20.00 GiB [REF]; which
    # branches: GUESS (before R580).
    'driver_variants': ((0, 579, {'1g.23gb': ('1g.24gb', 20480), '1g.23gb+me': ('1g.24gb+me', 20480)}),),
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.23gb', 1, 1, 22528, 18, 7, _1G_8, (2, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.23gb+me', 1, 1, 22528, 18, 1, _1G_8, (2, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.47gb', 1, 2, 46592, 32, 4, (0, 2, 4, 6), (2, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.47gb', 2, 2, 46592, 38, 3, (0, 2, 4), (4, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.93gb', 3, 4, 94208, 72, 2, (0, 4), (6, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.93gb', 4, 4, 94208, 76, 1, (0,), (8, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.186gb', 7, 8, 188672, 152, 1, (0,), (16, 7, 0, 7, 1)),
    ),
}

B300 = {
    # [README] name "NVIDIA B300 SXM6 AC" and PCI id; [REF] names and max counts (1g.34gb x7, +me, 1g.67gb x4,
    # 2g.67gb x3, 3g.135gb x2, 4g.135gb, 7g.269gb). Profile ids as B200: GUESS. Total 275040 and every memory
    # size: GUESS (B200's ratios, consistent with the name rule). SMs and engines as B200: GUESS.
    'nvml_name': 'NVIDIA B300 SXM6 AC', 'pci_device_ids': (0x318210DE,), 'architecture': ARCH_BLACKWELL,
    'memory_total_mib': 275040, 'sm_count': 148, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.34gb', 1, 1, 31488, 18, 7, _1G_8, (2, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.34gb+me', 1, 1, 31488, 18, 1, _1G_8, (2, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.67gb', 1, 2, 67840, 30, 4, (0, 2, 4, 6), (2, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.67gb', 2, 2, 67840, 36, 3, (0, 2, 4), (4, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.135gb', 3, 4, 136448, 70, 2, (0, 4), (6, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.135gb', 4, 4, 136448, 72, 1, (0,), (8, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.269gb', 7, 8, 273920, 148, 1, (0,), (16, 7, 0, 7, 1)),
    ),
}

GB300 = {
    # [README] name and PCI ids (0x31C2, 0x31C3); [REF] names and ids 19/20/15/14/9/5/0. Total 284160 and every
    # memory size: GUESS (B200's ratios, consistent with the name rule); SMs and engines as GB200: GUESS.
    'nvml_name': 'NVIDIA GB300', 'pci_device_ids': (0x31C210DE, 0x31C310DE), 'architecture': ARCH_BLACKWELL,
    'memory_total_mib': 284160, 'sm_count': 152, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 8, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_8,
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 19, '1g.35gb', 1, 1, 32512, 18, 7, _1G_8, (2, 1, 0, 1, 0)),
        (ENUM_1_SLICE_REV1, 20, '1g.35gb+me', 1, 1, 32512, 18, 1, _1G_8, (2, 1, 0, 1, 1)),
        (ENUM_1_SLICE_REV2, 15, '1g.70gb', 1, 2, 70144, 32, 4, (0, 2, 4, 6), (2, 1, 0, 1, 0)),
        (ENUM_2_SLICE, 14, '2g.70gb', 2, 2, 70144, 38, 3, (0, 2, 4), (4, 2, 0, 2, 0)),
        (ENUM_3_SLICE, 9, '3g.139gb', 3, 4, 141056, 72, 2, (0, 4), (6, 3, 0, 3, 0)),
        (ENUM_4_SLICE, 5, '4g.139gb', 4, 4, 141056, 76, 1, (0,), (8, 4, 0, 4, 0)),
        (ENUM_7_SLICE, 0, '7g.278gb', 7, 8, 283136, 152, 1, (0,), (16, 7, 0, 7, 1)),
    ),
}

RTX_PRO_6000_SERVER = {
    # [README] name and PCI id; [SMI] total 97887; [UG] the profile table (engines, max counts) and the suffix
    # meanings; [LGIP] ids, memory (23.62/47.38/95.00 GiB), SMs 46/94/188; enums [H]. 4 memory slices, 4 compute
    # slices. Placements (A30's pattern) and the mode change behaviour (as other Blackwell GPUs): GUESS.
    # Media engines (4 NVDEC, 4 NVENC, 4 JPEG, 1 OFA): +me.all takes all of them, so beside it only -me GPU
    # instances fit ([H]: "prevents allocation of all but _NO_ME profiles"); +me and +me.all hold the one OFA.
    'nvml_name': 'NVIDIA RTX PRO 6000 Blackwell Server Edition', 'pci_device_ids': (0x2BB510DE,),
    'architecture': ARCH_BLACKWELL, 'memory_total_mib': 97887, 'sm_count': 188, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 4, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': AUTO_PLACEMENT_4,
    # [LGIP] bigstack-oss/cubecos issue 312 shows every 1g profile at 23.12 GiB (the names unchanged), the later
    # transcripts 23.62 GiB; which branches gave 23.12: GUESS (before R580).
    'driver_variants': ((0, 579, dict((name, (name, 23675)) for name in (
        '1g.24gb', '1g.24gb+me', '1g.24gb+gfx', '1g.24gb+me.all', '1g.24gb-me'))),),
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 14, '1g.24gb', 1, 1, 24187, 46, 4, _1G_4, (1, 1, 1, 1, 0)),
        (ENUM_1_SLICE_REV1, 21, '1g.24gb+me', 1, 1, 24187, 46, 1, _1G_4, (1, 1, 1, 1, 1)),
        (ENUM_1_SLICE_GFX, 47, '1g.24gb+gfx', 1, 1, 24187, 46, 4, _1G_4, (1, 1, 1, 1, 0)),
        (ENUM_1_SLICE_ALL_ME, 65, '1g.24gb+me.all', 1, 1, 24187, 46, 1, _1G_4, (1, 4, 4, 4, 1)),
        (ENUM_1_SLICE_NO_ME, 67, '1g.24gb-me', 1, 1, 24187, 46, 4, _1G_4, (1, 0, 0, 0, 0)),
        (ENUM_2_SLICE, 5, '2g.48gb', 2, 2, 48517, 94, 2, (0, 2), (2, 2, 2, 2, 0)),
        (ENUM_2_SLICE_GFX, 35, '2g.48gb+gfx', 2, 2, 48517, 94, 2, (0, 2), (2, 2, 2, 2, 0)),
        (ENUM_2_SLICE_ALL_ME, 64, '2g.48gb+me.all', 2, 2, 48517, 94, 1, (0, 2), (2, 4, 4, 4, 1)),
        (ENUM_2_SLICE_NO_ME, 66, '2g.48gb-me', 2, 2, 48517, 94, 2, (0, 2), (2, 0, 0, 0, 0)),
        (ENUM_4_SLICE, 0, '4g.96gb', 4, 4, 97280, 188, 1, (0,), (4, 4, 4, 4, 1)),
        (ENUM_4_SLICE_GFX, 32, '4g.96gb+gfx', 4, 4, 97280, 188, 1, (0,), (4, 4, 4, 4, 1)),
    ),
}

RTX_PRO_5000 = {
    # A 2-memory-slice GPU. The 48 GB board, 110 SMs: public spec sheets. Name and PCI id 0x2BB3: GUESS (the driver
    # README's Blackwell RTX PRO ids run 0x2BB1 Workstation, 0x2BB4 Max-Q, 0x2BB5 Server; not checked here). The MIG
    # profiles (two 1g.24gb or one 2g.48gb, as the MIG User Guide's RTX PRO 5000 row announces): ids as the RTX PRO
    # 6000's, memory, SMs, engines and total memory: GUESS, consistent with the name rule. No media-extension
    # variants: GUESS (none published).
    'nvml_name': 'NVIDIA RTX PRO 5000 Blackwell', 'pci_device_ids': (0x2BB310DE,), 'architecture': ARCH_BLACKWELL,
    'memory_total_mib': 48935, 'sm_count': 110, 'mig_mode_change': IMMEDIATE_WHEN_IDLE,
    'memory_slices': 2, 'compute_placements': COMPUTE_PLACEMENTS, 'auto_placement_order': {1: (0, 1), 2: (0,)},
    'gpu_instance_profiles': (
        (ENUM_1_SLICE, 14, '1g.24gb', 1, 1, 24187, 54, 2, (0, 1), (1, 1, 1, 1, 0)),
        (ENUM_2_SLICE, 0, '2g.48gb', 2, 2, 48517, 110, 1, (0,), (2, 2, 2, 2, 1)),
    ),
}

# ---- not MIG-capable --------------------------------------------------------------------------

L40S = {
    # Not MIG-capable: GetMigMode and every MIG call answer NOT_SUPPORTED. [README] name and PCI id 0x26B9
    # (0x26B5 is the L40).
    'nvml_name': 'NVIDIA L40S', 'pci_device_ids': (0x26B910DE,), 'architecture': ARCH_ADA,
    'memory_total_mib': 46068, 'sm_count': 142, 'mig_mode_change': None,
    'memory_slices': 0, 'compute_placements': {}, 'auto_placement_order': {},
    'gpu_instance_profiles': (),
}


def _same_table(base, nvml_name, pci_device_ids, **changes):
    """A model that shares ``base``'s profiles, with its own NVML name and PCI device ids."""
    table = dict(base, nvml_name=nvml_name, pci_device_ids=tuple(pci_device_ids))
    table.update(changes)
    return table


_TABLES = {
    'A100-SXM4-40GB': A100_SXM4_40GB,
    # [README] 0x20F1 "NVIDIA A100-PCIE-40GB"; [REF] also lists 0x20B1 (mig-parted's device filter). Total 40960
    # [SMI]. Profiles of the A100 SXM4 40GB [REF].
    'A100-PCIE-40GB': _same_table(A100_SXM4_40GB, 'NVIDIA A100-PCIE-40GB', (0x20F110DE, 0x20B110DE)),
    # [README] 0x20F6 "NVIDIA A800 40GB Active" ([REF] groups it with the A100 PCIe 40GB); profiles as A100 40GB.
    'A800-40GB-ACTIVE': _same_table(A100_SXM4_40GB, 'NVIDIA A800 40GB Active', (0x20F610DE,)),
    'A100-SXM4-80GB': A100_SXM4_80GB,
    # [README] 0x20B5 "NVIDIA A100 80GB PCIe"; profiles of the A100 SXM4 80GB [REF].
    'A100-PCIE-80GB': _same_table(A100_SXM4_80GB, 'NVIDIA A100 80GB PCIe', (0x20B510DE,)),
    # [README] 0x20F3 "NVIDIA A800-SXM4-80GB" ([REF] lists 0x20F3 with the 80GB PCIe boards); A100 80GB profiles.
    'A800-SXM4-80GB': _same_table(A100_SXM4_80GB, 'NVIDIA A800-SXM4-80GB', (0x20F310DE,)),
    # [README] 0x20F5 "NVIDIA A800 80GB PCIe"; A100 80GB profiles [REF].
    'A800-80GB-PCIE': _same_table(A100_SXM4_80GB, 'NVIDIA A800 80GB PCIe', (0x20F510DE,)),
    'A30': A30,
    'H100-SXM5-80GB': H100_SXM5_80GB,
    'H100-PCIE-80GB': H100_PCIE_80GB,
    # [README] 0x2324 "NVIDIA H800" (SXM), 0x2322 "NVIDIA H800 PCIe"; H100-80GB profiles [REF].
    'H800-SXM5-80GB': _same_table(H100_SXM5_80GB, 'NVIDIA H800', (0x232410DE,)),
    'H800-PCIE-80GB': _same_table(H100_PCIE_80GB, 'NVIDIA H800 PCIe', (0x232210DE,)),
    'H100-NVL': H100_NVL,
    'H100-SXM5-94GB': H100_SXM5_94GB,
    'H100-96GB': H100_96GB,
    'PG506-96GB': PG506_96GB,
    # [README] 0x233A "NVIDIA H800 NVL"; H100 NVL profiles [REF].
    'H800-NVL': _same_table(H100_NVL, 'NVIDIA H800 NVL', (0x233A10DE,)),
    'H20': H20,
    'H200': H200,
    # [README] 0x233B "NVIDIA H200 NVL"; H200 profiles [REF]; total memory as H200: GUESS.
    'H200-NVL': _same_table(H200, 'NVIDIA H200 NVL', (0x233B10DE,)),
    'GH200-96GB': GH200_96GB,
    'GH200-144GB': GH200_144GB,
    'B200': B200,
    'GB200': GB200,
    'B300': B300,
    'GB300': GB300,
    'RTX-PRO-6000-SERVER': RTX_PRO_6000_SERVER,
    # Workstation boards: 0x2BB1 and 0x2BB4 with these NVML names and 97887 MiB appear in public nvidia-smi logs
    # [SMI]; their MIG profiles as the Server Edition's ([UG] has one RTX PRO 6000 Blackwell table): GUESS.
    'RTX-PRO-6000-WORKSTATION': _same_table(RTX_PRO_6000_SERVER, 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition', (0x2BB110DE,)),
    'RTX-PRO-6000-MAX-Q': _same_table(RTX_PRO_6000_SERVER, 'NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition',
                                      (0x2BB410DE,)),
    'RTX-PRO-5000': RTX_PRO_5000,
    'L40S': L40S,
}

# PCI subsystem ids (nvmlPciInfo_t.pciSubSystemId: the board's subsystem device id above NVIDIA's vendor id 0x10DE),
# what mig-parted device filters such as "0x233010DE:0x16C110DE" compare. Every figure: GUESS, shaped like real
# ones; a GPU's state may name its own (``pci_subsystem_id``). The first is what a GPU reports by default.
SUBSYSTEM_IDS = {
    'A100-SXM4-40GB': 0x134F10DE, 'A100-PCIE-40GB': 0x145F10DE, 'A800-40GB-ACTIVE': 0x17A810DE,
    'A100-SXM4-80GB': 0x147F10DE, 'A100-PCIE-80GB': 0x153310DE, 'A800-SXM4-80GB': 0x160B10DE, 'A800-80GB-PCIE': 0x163F10DE,
    'A30': 0x153210DE, 'PG506-96GB': 0x14FE10DE,
    'H100-SXM5-80GB': 0x16C110DE, 'H100-PCIE-80GB': 0x162610DE, 'H800-SXM5-80GB': 0x17A610DE, 'H800-PCIE-80GB': 0x17A410DE,
    'H100-NVL': 0x180810DE, 'H800-NVL': 0x18A210DE, 'H100-SXM5-94GB': 0x180E10DE, 'H100-96GB': 0x187610DE,
    'H20': 0x18B610DE, 'H200': 0x18BE10DE, 'H200-NVL': 0x19A010DE, 'GH200-96GB': 0x16CB10DE, 'GH200-144GB': 0x193510DE,
    'B200': 0x199910DE, 'GB200': 0x19C610DE, 'B300': 0x1A5010DE, 'GB300': 0x1A6A10DE,
    'RTX-PRO-6000-SERVER': 0x204E10DE, 'RTX-PRO-6000-WORKSTATION': 0x204B10DE, 'RTX-PRO-6000-MAX-Q': 0x204C10DE,
    'RTX-PRO-5000': 0x204D10DE, 'L40S': 0x185110DE,
}

# How NVML answers where drivers differ, as nvml.h says (a driver variant may answer otherwise, H200_580_ANSWERS):
DRIVER_ANSWERS = {
    'profile_info_without_mig': False,          # GetGpuInstanceProfileInfo[V] with MIG off: NOT_SUPPORTED
    'gi_profile_enum_count': GI_PROFILE_COUNT,  # enums from here on: INVALID_ARGUMENT
    'empty_placement_ids': (),                  # ids the GPU lacks whose possible placements answer SUCCESS with none
}

_GI_COLUMNS = ('enum', 'id', 'name', 'compute_slices', 'memory_slices', 'memory_mib', 'multiprocessors', 'max_count', 'starts')
_ENGINE_COLUMNS = ('copy_engines', 'decoders', 'encoders', 'jpegs', 'ofas')
MEDIA_ENGINE_COLUMNS = ('decoders', 'encoders', 'jpegs', 'ofas')


class UnknownModel(KeyError):
    """A model name the simulator has no table for."""


def _build_profile(table, row):
    profile = dict(zip(_GI_COLUMNS, row[:len(_GI_COLUMNS)]))
    profile.update(zip(_ENGINE_COLUMNS, row[len(_GI_COLUMNS)]))
    profile['starts'] = tuple(profile['starts'])
    parsed = PROFILE_NAME.match(profile['name'])
    profile['suffix'] = (parsed.group('suffix') or '') if parsed else ''
    profile['media_extensions'] = profile['suffix'] == '+me'          # one media-extended GI per GPU
    profile['all_media_engines'] = profile['suffix'] == '+me.all'     # only -me GIs beside it
    profile['no_media_engines'] = profile['suffix'] == '-me'
    profile['graphics'] = profile['suffix'] == '+gfx'
    profile['double_memory'] = profile['enum'] == ENUM_1_SLICE_REV2
    # {CI compute slices: starts} valid inside a GI of this size
    profile['compute_placements'] = table['compute_placements'].get(profile['compute_slices'], {})
    return profile


def _build(key, table):
    """A model as the simulator reads it: the table plus one dict per GPU instance profile."""
    model = dict(table)
    model['key'] = key
    model['pci_device_ids'] = tuple(table['pci_device_ids'])
    model['pci_device_id'] = model['pci_device_ids'][0]      # what a GPU reports unless its state says otherwise
    model['mig_capable'] = bool(table['gpu_instance_profiles'])
    model['pci_subsystem_id'] = SUBSYSTEM_IDS.get(key, 0)
    model.setdefault('ci_7_slice_nvl_since_driver', None)
    model['driver_variants'] = tuple(table.get('driver_variants', ()))
    model['profiles'] = [_build_profile(table, row) for row in table['gpu_instance_profiles']]
    for answer, default in DRIVER_ANSWERS.items():
        model.setdefault(answer, default)
    return model


MODELS = dict((key, _build(key, table)) for key, table in _TABLES.items())


_BY_DRIVER = {}


def driver_branch(driver_version):
    """580 for '580.95.05'; 0 when the version does not start with a number."""
    head = str(driver_version).split('.', 1)[0]
    return int(head) if head.isdigit() else 0


def driver_version_key(driver_version):
    """(580, 159, 4) for '580.159.04': the numbers up to the first part that is not one (() for none)."""
    numbers = []
    for part in str(driver_version).split('.'):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)


def _bound(bound):
    """A variant's bound: a branch (580) or a release ((580, 159)), as a version key."""
    return tuple(bound) if isinstance(bound, (tuple, list)) else (bound,)


def variant_applies(variant, driver_version):
    """A driver variant (first, last, ...) covers releases from ``first`` to the end of ``last`` (None: no end);
    each bound is a branch (580: every 580.x) or a release ((580, 159): 580.159 and later)."""
    version, first, last = driver_version_key(driver_version), _bound(variant[0]), variant[1]
    return version >= first and (last is None or version[:len(_bound(last))] <= _bound(last))


def _bound_text(bound):
    return '.'.join(str(number) for number in _bound(bound))


def as_driver_reports(model, driver_version):
    """``model`` (a table as MODELS holds it) as a driver of ``driver_version`` reports it. ``driver_variants``: (first,
    last, {profile name: (name then, memorySizeMB then or None)}[, answers]): names and memory change with the driver,
    and ``answers`` set what the driver answers otherwise than nvml.h says (keys of DRIVER_ANSWERS, e.g.
    H200_580_ANSWERS). The model itself where no variant covers that driver."""
    changes = {}
    answers = {}
    for variant in model['driver_variants']:
        if variant_applies(variant, driver_version):
            changes.update(variant[2])
            answers.update(variant[3] if len(variant) > 3 else {})
    if not changes and not answers:
        return model
    reported = dict(model, **answers)
    reported['profiles'] = []
    for profile in model['profiles']:
        profile = dict(profile)
        if profile['name'] in changes:
            new_name, memory = changes[profile['name']]
            profile['name'] = new_name
            profile['memory_mib'] = memory or profile['memory_mib']
        reported['profiles'].append(profile)
    return reported


def for_driver(name, driver_version):
    """The model named ``name`` as a driver of ``driver_version`` reports it (as_driver_reports), built once."""
    model = get_model(name)
    key = (name, driver_version_key(driver_version))
    if key not in _BY_DRIVER:
        _BY_DRIVER[key] = as_driver_reports(model, driver_version)
    return _BY_DRIVER[key]


def get_model(name):
    """The table of one model; an unknown name lists the valid ones."""
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise UnknownModel('unknown GPU model %r; simulated models: %s' % (name, ', '.join(sorted(MODELS))))


def mode_applies_immediately(model):
    """Hopper and later switch MIG mode without a reset and lose it on reboot; Ampere keeps it."""
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


def gpu_media_engines(model):
    """(decoders, encoders, JPEG, OFA) of the whole GPU: those of its largest plain profile (the full GPU)."""
    plain = [p for p in model['profiles'] if not p['suffix']]
    if not plain:
        return (0, 0, 0, 0)
    whole = max(plain, key=lambda p: (p['memory_slices'], p['compute_slices']))
    return tuple(whole[column] for column in MEDIA_ENGINE_COLUMNS)


def _profile_row_problems(model, profile):
    where = '%s %s' % (model['key'], profile['name'])
    problems = []
    parsed = PROFILE_NAME.match(profile['name'])
    if not parsed:
        return ['%s: name does not read <G>g.<GB>gb[+me|+me.all|-me|+gfx]' % where]
    if profile['enum'] not in _SUFFIX_ENUMS[profile['suffix']]:
        problems.append('%s: enum %d does not fit the suffix %r' % (where, profile['enum'], profile['suffix']))
    if int(parsed.group('g')) != profile['compute_slices']:
        problems.append('%s: name does not match %d compute slices' % (where, profile['compute_slices']))
    gb = name_rule_gb(profile['memory_mib'], model['memory_total_mib'])
    if gb != int(parsed.group('gb')):
        problems.append('%s: memorySizeMB %d gives %dgb by the name rule' % (where, profile['memory_mib'], gb))
    for start in profile['starts']:
        if start % profile['memory_slices'] or start + profile['memory_slices'] > model['memory_slices']:
            problems.append('%s: placement %d:%d does not fit' % (where, start, profile['memory_slices']))
    if profile['memory_slices'] & (profile['memory_slices'] - 1):
        problems.append('%s: placement size %d is not a power of two (GPU instance ids need one)' % (where, profile['memory_slices']))
    if not 1 <= profile['max_count'] <= len(profile['starts']):
        problems.append('%s: max count outside 1..%d placements' % (where, len(profile['starts'])))
    if profile['double_memory'] and (profile['compute_slices'], profile['memory_slices']) != (1, 2):
        problems.append('%s: a double-memory profile is 1 compute slice on 2 memory slices' % where)
    if not profile['compute_placements']:
        problems.append('%s: no compute instance profiles for %d slices' % (where, profile['compute_slices']))
    if profile['multiprocessors'] > model['sm_count'] or profile['memory_mib'] > model['memory_total_mib']:
        problems.append('%s: more SMs or memory than the GPU' % where)
    media = tuple(profile[column] for column in MEDIA_ENGINE_COLUMNS)
    if profile['no_media_engines'] and any(media):
        problems.append('%s: a -me profile has media engines %s' % (where, media))
    if profile['all_media_engines'] and media != gpu_media_engines(model):
        problems.append('%s: a +me.all profile has %s, not the GPU\'s media engines %s' % (where, media, gpu_media_engines(model)))
    if (profile['media_extensions'] or profile['all_media_engines']) and profile['max_count'] != 1:
        problems.append('%s: a media-extended profile has a max count of 1' % where)
    return problems


def model_problems(key):
    """Inconsistencies in one model's table (empty when it is sound); the unit tests run this on every model."""
    model = get_model(key)
    problems = []
    if not model['pci_device_ids'] or len(set(model['pci_device_ids'])) != len(model['pci_device_ids']):
        problems.append('%s: needs distinct PCI device ids' % key)
    for pci_id in model['pci_device_ids']:
        if pci_id & 0xFFFF != 0x10DE:
            problems.append('%s: PCI device id 0x%08X is not NVIDIA\'s (0x....10DE)' % (key, pci_id))
    ids = [p['id'] for p in model['profiles']]
    enums = [p['enum'] for p in model['profiles']]
    names = [p['name'] for p in model['profiles']]
    for values, what in ((ids, 'profile ids'), (enums, 'enums'), (names, 'names')):
        if len(set(values)) != len(values):
            problems.append('%s: duplicate %s %s' % (key, what, sorted(values)))
    for profile in model['profiles']:
        if not 0 <= profile['enum'] < GI_PROFILE_COUNT:
            problems.append('%s %s: enum %d out of range' % (key, profile['name'], profile['enum']))
            continue
        problems.extend(_profile_row_problems(model, profile))
    by_shape = {}
    for profile in model['profiles']:
        by_shape.setdefault((profile['compute_slices'], profile['memory_slices']), []).append(profile)
    for shape, variants in sorted(by_shape.items()):
        sizes = set((p['memory_mib'], p['multiprocessors']) for p in variants)
        if len(sizes) != 1:
            problems.append('%s: profiles %s of one shape differ in memory or SMs' % (key, [p['name'] for p in variants]))
    if model['mig_capable']:
        whole = [p for p in model['profiles'] if p['memory_slices'] == model['memory_slices'] and not p['suffix']]
        if len(whole) != 1:
            problems.append('%s: needs exactly one plain profile spanning the whole GPU' % key)
    problems.extend(_variant_problems(model))
    return problems


def _variant_problems(model):
    """A driver variant renames a profile within its shape (same slices and suffix) and keeps one size per shape (a
    driver may name a profile off NVIDIA's rule: A100 3g.39gb); its answers are keys of DRIVER_ANSWERS."""
    problems = []
    by_name = dict((p['name'], p) for p in model['profiles'])
    for variant in model['driver_variants']:
        first, last, renamed = variant[:3]
        span = 'R%s-R%s' % (_bound_text(first), 'now' if last is None else _bound_text(last))
        for name, (new_name, dummy) in sorted(renamed.items()):
            parsed, then = PROFILE_NAME.match(name), PROFILE_NAME.match(new_name)
            if name not in by_name or not then or then.group('g') != parsed.group('g') or \
                    (then.group('suffix') or '') != (parsed.group('suffix') or ''):
                problems.append('%s: driver variant %s -> %s (%s) is not a rename within one shape' % (
                    model['key'], name, new_name, span))
        unknown = sorted(set(variant[3] if len(variant) > 3 else {}) - set(DRIVER_ANSWERS))
        if unknown:
            problems.append('%s: driver variant %s sets unknown answers %s' % (model['key'], span, unknown))
        reported = for_driver(model['key'], _bound_text(first))
        offered = set(p['id'] for p in reported['profiles']) & set(reported['empty_placement_ids'])
        if offered:
            problems.append('%s: driver variant %s answers no placement for the offered ids %s' % (model['key'], span, sorted(offered)))
        if any(p['enum'] >= reported['gi_profile_enum_count'] for p in reported['profiles']):
            problems.append('%s: driver variant %s does not know an enum the GPU offers' % (model['key'], span))
        sizes = {}
        for profile in reported['profiles']:
            sizes.setdefault((profile['compute_slices'], profile['memory_slices']), set()).add(profile['memory_mib'])
        if any(len(found) != 1 for found in sizes.values()):
            problems.append('%s: driver variant %s leaves profiles of one shape with different memory' % (model['key'], span))
    return problems
