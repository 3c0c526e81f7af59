# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Check a layout on a GPU whose MIG is still off, before any GPU of the host changes.

NVML lists a GPU's profiles only while MIG is enabled (GetGpuInstanceProfileInfo answers
NOT_SUPPORTED before, nvml.h), so an entry naming a profile the GPU does not offer would only be
found after the mode step, with the host half-changed. What can be known before:

- the profiles the driver describes all the same (the NVML backend's ``profiles_without_mig``: driver
  580.159.04 did on an H200, docs/hardware.md): the GPU's own, exactly;
- another GPU of the same model on the host with MIG enabled: its profiles, exactly;
- otherwise the GPU's own possible placements, which NVML answers with MIG off (the NVML backend's
  ``placements_without_mig``): they give its memory slices; with the GPU's total memory and the
  MIG geometry of GPUs with that many memory slices (NVIDIA's MIG User Guide, supported profiles),
  NVIDIA's profile naming rule (go-nvlib) forecasts the plain profiles it will offer.

A forecast is checked with the same resolution and planner as the real profiles; its limits are
said in what :func:`check_without_mig` returns. Pure Python: no NVML, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
from dataclasses import replace

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import MAX_COUNT, LayoutConfigError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import ENABLED, MigMode
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_keys import concrete_instances
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import choose_entry
# The one rule for compute instance profiles NVML cannot list yet (no GPU instance of the profile exists).
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import derived_compute_profiles
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError, plan_gpu
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import MigProfile, MigShape, ProfileError, parse_key

# The plain GPU instance profiles of a GPU by its memory slices: (compute slices, memory slices, starts).
# 8 and 4: NVIDIA's MIG User Guide (supported profiles: A100/H100/H200/B200..., A30/RTX PRO 6000).
# 2 (RTX PRO 5000 Blackwell): 1g and 2g; the starts are a guess until a GPU has been read.
GEOMETRY = {
    8: ((1, 1, (0, 1, 2, 3, 4, 5, 6)), (1, 2, (0, 2, 4, 6)), (2, 2, (0, 2, 4)), (3, 4, (0, 4)), (4, 4, (0,)), (7, 8, (0,))),
    4: ((1, 1, (0, 1, 2, 3)), (2, 2, (0, 2)), (4, 4, (0,))),
    2: ((1, 1, (0, 1)), (2, 2, (0,))),
}
# A driver may name a profile 1 GB off the rule (A100-80GB 3g.39gb on R535, GB200 1g.23gb/1g.24gb):
# a name within this many GB of the forecast is taken as that profile.
NAME_TOLERANCE_GB = 1


def memory_slices_without_mig(gpu):
    """The GPU's memory slices from the placements NVML answered with MIG off; None when none answered."""
    ends = [p['start'] + p['size'] for entry in gpu.placements_without_mig or [] for p in entry['placements']]
    return max(ends) if ends else None


def profile_gb(memory_slices, total_slices, total_mib):
    """NVIDIA's profile naming rule (go-nvlib): the profile's share of the memory in eighths, rounded up,
    times the GPU's memory in GiB rounded up, rounded half up."""
    eighths = int(math.ceil(memory_slices * 8.0 / total_slices))
    return int(math.floor(eighths / 8.0 * int(math.ceil(total_mib / 1024.0)) + 0.5))


def forecast_profiles(total_slices, total_mib):
    """The plain GPU instance profiles a GPU with ``total_slices`` memory slices and ``total_mib`` of memory
    offers, in the backend's form; None for a slice count whose geometry is not known."""
    if total_slices not in GEOMETRY or not total_mib:
        return None
    profiles = []
    for position, (compute_slices, memory_slices, starts) in enumerate(GEOMETRY[total_slices]):
        name = '%dg.%dgb' % (compute_slices, profile_gb(memory_slices, total_slices, total_mib))
        profiles.append({
            'name': name,
            'id': position,
            'compute_slices': compute_slices,
            'memory_slices': memory_slices,
            'memory_mib': total_mib * memory_slices // total_slices,
            'max_count': len(starts),
            'placements': [{'start': start, 'size': memory_slices} for start in starts],
            'compute_profiles': derived_compute_profiles(name, compute_slices),
        })
    return profiles


def _plain_keys(mig_devices, profiles, label):
    """The entry's keys in the forecast's names: memory-sized names within NAME_TOLERANCE_GB of a forecast
    profile of the same size, suffixes (+me, +gfx, ...) checked as their plain profile."""
    result = {}
    for key in sorted(mig_devices):
        try:
            parsed = parse_key(key)
        except ProfileError as exc:
            raise LayoutConfigError('%s: mig-devices key %s: %s' % (label, key, exc))
        if isinstance(parsed, MigShape):
            plain = MigShape(parsed.compute_slices, parsed.gpu_slices, parsed.memory_slices).name
        else:
            near = [MigProfile.parse(p['name']) for p in profiles
                    if MigProfile.parse(p['name']).gpu_slices == parsed.gpu_slices
                    and abs(MigProfile.parse(p['name']).memory_gb - parsed.memory_gb) <= NAME_TOLERANCE_GB]
            if not near:
                raise LayoutConfigError('%s: %s is not offered: a GPU of this kind offers %s' % (
                    label, key, ', '.join(p['name'] for p in profiles)))
            nearest = min(near, key=lambda profile: abs(profile.memory_gb - parsed.memory_gb))
            plain = MigProfile(parsed.compute_slices, parsed.gpu_slices, nearest.memory_gb).name
        count = mig_devices[key]
        if plain not in result:
            result[plain] = count
        elif MAX_COUNT in (count, result[plain]):
            result[plain] = MAX_COUNT
        else:
            result[plain] += count
    return result


def _same_model_with_profiles(gpu, host_gpus):
    for other in host_gpus or []:
        if other.pci_device_id == gpu.pci_device_id and other.profiles_known and other.profiles and other.mig_mode.enabled:
            return other
    return None


def check_without_mig(gpu, match, unmatched='ignore', layout=None, host_gpus=None):
    """Check the entry of a GPU whose profiles NVML does not list yet (MIG off) as far as it can be known.

    ``match``: the GPU's record of match_gpus (possibly pending on its memory slices); ``host_gpus``:
    the host's GPUs, for one of the same model with MIG enabled. Raises LayoutConfigError or
    PlanningError, naming the GPU and what it was checked against, when the entry cannot hold on it.
    Returns what it was checked against, in words.
    """
    label = 'GPU %s (%s, %s)' % (gpu.index, gpu.name, gpu.pci_device_id)
    if not match['mig_enabled']:
        return None
    sibling = _same_model_with_profiles(gpu, host_gpus)
    translate = False
    if gpu.profiles_without_mig:
        profiles = gpu.profiles_without_mig
        basis = 'the profiles the driver describes for this GPU with MIG off'
    elif sibling is not None:
        profiles = sibling.profiles
        basis = 'the profiles NVML lists for GPU %s, the same model with MIG enabled' % sibling.index
    else:
        slices = memory_slices_without_mig(gpu)
        profiles = forecast_profiles(slices, gpu.memory_total_mib) if slices else None
        if profiles is None:
            return ('nothing yet: MIG is off and NVML answered no possible placement%s, so the profiles are checked '
                    'once MIG is enabled' % (' of a known geometry (%d memory slices)' % slices if slices else ''))
        basis = ('a forecast, as MIG is off: the possible placements NVML answers give %d memory slices, NVIDIA\'s naming '
                 'rule with %d MiB the profile names' % (slices, gpu.memory_total_mib))
        translate = True
    # The GPU as it will be once MIG is enabled: no instance yet (MIG off), the profiles above.
    future = replace(gpu, profiles=profiles, profiles_known=True, gpu_instances=(), mig_mode=MigMode(ENABLED, ENABLED))
    checked = 'checked before any change against %s' % basis
    try:
        chosen = choose_entry(match, future, unmatched, layout)
        if chosen['mig_devices'] is None:
            return basis    # no entry fits its memory slices: the GPU will be left as it is
        mig_devices = _plain_keys(chosen['mig_devices'], profiles, label) if translate else chosen['mig_devices']
        plan_gpu(future, concrete_instances(mig_devices, future))
    except LayoutConfigError as exc:
        raise LayoutConfigError('%s (%s)' % (exc, checked))
    except PlanningError as exc:
        raise PlanningError('%s (%s)' % (exc, checked))
    notes = ' (memory-sized names within %d GB of the forecast and media-engine suffixes pass as the plain profile; the ' \
            'driver\'s own list is read once MIG is enabled)' % NAME_TOLERANCE_GB if translate else ''
    return basis + notes
