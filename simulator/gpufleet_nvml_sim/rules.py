# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Test double of gpufleet.mig: never shipped to a GPU host.

"""MIG rules of one simulated GPU, on the plain data of its state and its model table.

GPU instances: placements, memory-slice overlaps, max counts, media-engine exclusivity,
the driver's choice of placement, and the GPU instance id of a placement. Compute
instances: the CI profiles a GPU instance offers (and their ids), placements, overlaps.
A ``*_problem`` function answers None when something fits, else ``(NVML error name, reason)``:
the library returns the error, the state validation reports the reason.

Pure Python: no ctypes, no files.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from gpufleet_nvml_sim.errors import NvmlFailure
from gpufleet_nvml_sim.models import (
    ARCH_HOPPER,
    CI_ENUM_1_SLICE_REV1,
    CI_ENUM_7_SLICE_NVL,
    CI_ENUM_BY_SLICES,
    compute_instance_name,
    driver_branch,
)

# ---- GPU instance profiles ---------------------------------------------------------------------


def profile_by_name(model, name):
    for profile in model['profiles']:
        if profile['name'] == name:
            return profile
    return None


def profile_by_id(model, profile_id):
    """The profile with this NVML profile id; NOT_SUPPORTED for an id the GPU does not offer (nvml.h)."""
    for profile in model['profiles']:
        if profile['id'] == profile_id:
            return profile
    raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')


def profile_by_enum(model, enum):
    """The profile of an ``NVML_GPU_INSTANCE_PROFILE_*`` enum: INVALID_ARGUMENT past the enums the driver knows
    (``gi_profile_enum_count``), NOT_SUPPORTED for an enum this GPU does not offer."""
    if not 0 <= enum < model['gi_profile_enum_count']:
        raise NvmlFailure('NVML_ERROR_INVALID_ARGUMENT')
    for profile in model['profiles']:
        if profile['enum'] == enum:
            return profile
    raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')


def profile_info(model, enum, mig_enabled):
    """What GetGpuInstanceProfileInfo[V] answers for an enum: the profile, else NvmlFailure. nvml.h: NOT_SUPPORTED
    while MIG is disabled; a driver that describes the profiles with MIG off too (``profile_info_without_mig``,
    driver 580.159.04 on an H200) answers as with MIG on."""
    if not model['mig_capable'] or not (mig_enabled or model['profile_info_without_mig']):
        raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')
    return profile_by_enum(model, enum)


def possible_placements(model, profile_id):
    """(starts, size in memory slices) that GetGpuInstancePossiblePlacements answers for a profile id, MIG on or off
    (nvml.h): NOT_SUPPORTED for an id the GPU does not offer, except the ids a driver answers with no placement
    (``empty_placement_ids``)."""
    if not model['mig_capable']:
        raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')
    if profile_id in model['empty_placement_ids']:
        return (), 0
    profile = profile_by_id(model, profile_id)
    return profile['starts'], profile['memory_slices']


# ---- GPU instance ids ---------------------------------------------------------------------------
# Only the id range of a size holds on real drivers, not the id of a placement: the same placements
# gave ids 9/10/3/2 on one GPU and 13/14/5/1 on the next (DCGM issue 138). The ranges follow a binary
# tree over the memory slices: 0 is the whole GPU, 1-2 its halves, 3-6 its quarters, 7-14 its eighths
# (A100: 7g 0, 3g/4g 1-2, 2g and the double-memory 1g 3-6, 1g 7-14; A30: 4g 0, 2g 1-2, 1g 3-6). Which
# id of its range a new GPU instance gets is not documented; the simulator rotates through the free
# ones from a per-GPU seed (``gi_id_seed`` in the state, else derived from the GPU's uuid), so that
# no caller can come to rely on an id. gpufleet.mig never does: it reads ids back from NVML.


def id_range(model, profile):
    """The ids a GPU instance of ``profile`` can get (see above)."""
    level = (model['memory_slices'] // profile['memory_slices']).bit_length() - 1
    return list(range((1 << level) - 1, (1 << (level + 1)) - 1))


def slot_count(model):
    """How many ids the tree of a model's memory slices has (15 for 8 slices, 7 for 4)."""
    return 2 * model['memory_slices'] - 1


def new_gpu_instance_id(model, instances, profile, turn):
    """The id a new GPU instance gets: a free id of its size's range, the ``turn``-th in rotation; past
    the tree's ids when a state file written with another numbering holds them all."""
    taken = set(gi['id'] for gi in instances if 'id' in gi)
    free = [candidate for candidate in id_range(model, profile) if candidate not in taken]
    if free:
        return free[turn % len(free)]
    return lowest_free(slot_count(model), taken)


def lowest_free(first, taken):
    candidate = first
    while candidate in taken:
        candidate += 1
    return candidate


# ---- GPU instance placement rules ---------------------------------------------------------------


def _mask(start, size):
    return ((1 << size) - 1) << start


def media_problem(model, instances, profile):
    """Why a GI of ``profile`` cannot share the GPU's media engines with ``instances`` (None when it can).

    - A +me.all GI holds every decoder, encoder, JPEG and OFA engine: beside it only -me GIs fit,
      in either creation order (nvml.h: ALL_ME "prevents allocation of all but _NO_ME profiles").
    - One +me GI per GPU (MIG User Guide: "a single 1g profile can include media extensions";
      A30's 1g+me and 2g+me exclude each other).
    """
    others = [profile_by_name(model, gi['profile']) for gi in instances]
    if profile['all_media_engines']:
        holding = [p['name'] for p in others if not p['no_media_engines']]
        if holding:
            return ('NVML_ERROR_INSUFFICIENT_RESOURCES', '%s takes every media engine, but %s holds some (only -me GPU '
                    'instances fit beside it)' % (profile['name'], holding[0]))
    elif not profile['no_media_engines']:
        taking_all = [p['name'] for p in others if p['all_media_engines']]
        if taking_all:
            return ('NVML_ERROR_INSUFFICIENT_RESOURCES', '%s holds every media engine: only -me GPU instances fit beside it, '
                    'not %s' % (taking_all[0], profile['name']))
    if profile['media_extensions'] and any(p['media_extensions'] for p in others):
        return ('NVML_ERROR_INSUFFICIENT_RESOURCES', 'only one +me GPU instance per GPU')
    return None


def gi_problem(model, instances, profile, start):
    """None when a GI of ``profile`` fits at ``start`` beside ``instances``; else (NVML error name, reason)."""
    if start not in profile['starts']:
        return ('NVML_ERROR_INVALID_ARGUMENT', '%s cannot start at slice %r (starts %s)' % (profile['name'], start, list(profile['starts'])))
    if sum(1 for gi in instances if gi['profile'] == profile['name']) >= profile['max_count']:
        return ('NVML_ERROR_INSUFFICIENT_RESOURCES', 'the maximum of %d %s GPU instances is reached' % (profile['max_count'], profile['name']))
    problem = media_problem(model, instances, profile)
    if problem:
        return problem
    occupied = 0
    for gi in instances:
        occupied |= _mask(gi['start'], profile_by_name(model, gi['profile'])['memory_slices'])
    if occupied & _mask(start, profile['memory_slices']):
        return ('NVML_ERROR_INSUFFICIENT_RESOURCES', '%s at slice %d overlaps another GPU instance' % (profile['name'], start))
    return None


def auto_gi_start(model, instances, profile):
    """The placement the driver picks for nvmlDeviceCreateGpuInstance (AUTO_PLACEMENT_* in models.py), or None."""
    preferred = [s for s in model['auto_placement_order'].get(profile['memory_slices'], ()) if s in profile['starts']]
    for start in preferred + [s for s in profile['starts'] if s not in preferred]:
        if gi_problem(model, instances, profile, start) is None:
            return start
    return None


def gi_remaining(model, instances, profile):
    """How many more GIs of ``profile`` fit: greedy over its (equal-size, aligned) placements is optimal."""
    probe = list(instances)
    for start in profile['starts']:
        if gi_problem(model, probe, profile, start) is None:
            probe.append({'profile': profile['name'], 'start': start})
    return len(probe) - len(instances)


# ---- compute instances --------------------------------------------------------------------------


def ci_variant_id(model, gi_profile, ci_slices, driver_version):
    """The second profile id a full-size CI is offered under, or None (see CI_ENUM_* in models.py).

    A double-memory 1g GI on Hopper and later also offers 1_SLICE_REV1 (7); an A100 7g GI also offers
    7_SLICE_NVL (8) from the driver branch the model names (the reference says "recent drivers").
    """
    if ci_slices != gi_profile['compute_slices']:
        return None
    if gi_profile['double_memory'] and model['architecture'] >= ARCH_HOPPER:
        return CI_ENUM_1_SLICE_REV1
    since = model['ci_7_slice_nvl_since_driver']
    if ci_slices == 7 and since is not None and driver_branch(driver_version) >= since:
        return CI_ENUM_7_SLICE_NVL
    return None


def ci_profile_id(ci_slices):
    """The plain NVML compute instance profile id (== its enum) of a CI of ``ci_slices``."""
    return CI_ENUM_BY_SLICES[ci_slices]


def ci_profiles(model, gi_profile, driver_version):
    """{CI profile id: CI compute slices} a GI of ``gi_profile`` offers: the plain id of every size, and the
    variant id of the full-size CI where drivers offer one."""
    offered = {}
    for slices in gi_profile['compute_placements']:
        offered[ci_profile_id(slices)] = slices
        variant = ci_variant_id(model, gi_profile, slices, driver_version)
        if variant is not None:
            offered[variant] = slices
    return offered


def ci_slices_by_id(model, gi_profile, profile_id, driver_version):
    """The slice count of a CI profile id; NOT_SUPPORTED for one this GI does not offer (nvml.h)."""
    offered = ci_profiles(model, gi_profile, driver_version)
    if profile_id not in offered:
        raise NvmlFailure('NVML_ERROR_NOT_SUPPORTED')
    return offered[profile_id]


def ci_slices_by_name(gi_profile, name):
    for slices in gi_profile['compute_placements']:
        if compute_instance_name(gi_profile, slices) == name:
            return slices
    return None


def ci_problem(gi_profile, cis, slices, start):
    """None when a CI of ``slices`` fits at ``start`` beside ``cis`` in a GI of ``gi_profile``; else (error, reason)."""
    starts = gi_profile['compute_placements'][slices]
    name = compute_instance_name(gi_profile, slices)
    if start not in starts:
        return ('NVML_ERROR_INVALID_ARGUMENT', 'compute instance %s cannot start at %r (starts %s)' % (name, start, list(starts)))
    if sum(1 for ci in cis if ci['profile'] == name) >= len(starts):
        return ('NVML_ERROR_INSUFFICIENT_RESOURCES', 'the maximum of %d %s compute instances is reached' % (len(starts), name))
    occupied = 0
    for ci in cis:
        occupied |= _mask(ci['start'], ci_slices_by_name(gi_profile, ci['profile']))
    if occupied & _mask(start, slices):
        return ('NVML_ERROR_INSUFFICIENT_RESOURCES', 'compute instance %s at %d overlaps another compute instance' % (name, start))
    return None


def auto_ci_start(gi_profile, cis, slices):
    """nvmlGpuInstanceCreateComputeInstance's choice: the lowest free start."""
    for start in gi_profile['compute_placements'][slices]:
        if ci_problem(gi_profile, cis, slices, start) is None:
            return start
    return None


def ci_remaining(gi_profile, cis, slices):
    probe = list(cis)
    name = compute_instance_name(gi_profile, slices)
    for start in gi_profile['compute_placements'][slices]:
        if ci_problem(gi_profile, probe, slices, start) is None:
            probe.append({'profile': name, 'start': start})
    return len(probe) - len(cis)


# ---- what holds a GPU ------------------------------------------------------------------------------


def gpu_pids(gpu):
    """Every process on a GPU: its own (non-MIG) ones and those of every compute instance."""
    pids = set(gpu['pids'])
    for gi in gpu['gpu_instances']:
        for ci in gi['compute_instances']:
            pids.update(ci['pids'])
    return sorted(pids)


def holders(gpu):
    """What keeps a GPU from being reset: (its processes, its clients such as nvidia-persistenced, and those that
    hold its MIG devices such as DCGM)."""
    return gpu_pids(gpu), list(gpu['clients']) + [c for c in gpu.get('mig_clients', []) if c not in gpu['clients']]


def mig_devices(gpu):
    """(gi, ci) per MIG device, in MIG device index order (GI placement, then CI placement)."""
    devices = []
    for gi in sorted(gpu['gpu_instances'], key=lambda g: g['start']):
        for ci in sorted(gi['compute_instances'], key=lambda c: c['start']):
            devices.append((gi, ci))
    return devices
