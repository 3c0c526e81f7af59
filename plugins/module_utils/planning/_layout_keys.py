# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""A winning entry's ``mig-devices`` as the profiles of one GPU (:func:`concrete_instances`).

Pure Python: no NVML, no Ansible imports. Memory-sized keys are taken as they are (a name the driver
renamed is found under its new name); model-agnostic keys (``1g``, ``1g.2mem``, ``1c.3g``, ``2g+gfx``, see
_mig_profile) are resolved against the profiles the GPU reports; the count ``max`` is what the planner can
still place beside the other keys.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import LayoutConfigError, MAX_COUNT
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_matching import _hex_id, _label
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import Catalog
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError, expand_layout
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import MigProfile, MigShape, ProfileError, compute_instance_name, parse_key


# ---- one GPU's instances -----------------------------------------------------------------------

def _profile_slices(profile):
    sizes = set(p['size'] for p in profile.get('placements') or [])
    return sizes.pop() if len(sizes) == 1 else profile.get('memory_slices')


def _gpu_instance_profiles(gpu):
    """[(MigProfile, profile data)] of the GPU instance profiles in the mig-parted grammar."""
    result = []
    for profile in gpu.profiles:
        try:
            parsed = MigProfile.parse(profile['name'])
        except ProfileError:
            continue
        if not parsed.is_compute_instance_profile:
            result.append((parsed, profile))
    return result


def shape_name(profile, gpu):
    """The model-agnostic name of one of ``gpu``'s GPU instance profiles (``1g.20gb`` -> ``1g.2mem``)."""
    parsed = MigProfile.parse(profile['name'])
    siblings = [_profile_slices(p) for q, p in _gpu_instance_profiles(gpu)
                if q.gpu_slices == parsed.gpu_slices and q.suffix == parsed.suffix]
    slices = _profile_slices(profile)
    memory = '' if not siblings or slices == min(siblings) else '.%dmem' % slices
    return '%dg%s%s' % (parsed.gpu_slices, memory, parsed.suffix)


def _offered(gpu):
    return ', '.join('%s (%s)' % (p['name'], shape_name(p, gpu))
                     for dummy, p in sorted(_gpu_instance_profiles(gpu), key=lambda item: (
                         _profile_slices(item[1]) or 0, item[0].gpu_slices, item[1]['name'])))


def _compute_names(profile):
    return sorted(ci['name'] for ci in profile.get('compute_profiles') or [])


# GPU instance profiles that driver branches name differently (the same profile: its memory moved a little), by the
# PCI device ids of the boards concerned. Sources: A100 80GB 3g.39gb on R535 and R545, 3g.40gb before and after
# (mig-parted issue 31); GB200 1g.24gb on an early driver (gpu-operator PR 1303), 1g.23gb later (mig-parted issue 227).
# The B200 (1g 22.00 then 20.50 GiB) and the RTX PRO 6000 (1g 23.12 then 23.62 GiB) kept their names.
DRIVER_RENAMES = (
    (('0x20B210DE', '0x20B510DE', '0x20F310DE', '0x20F510DE'), ('3g.39gb', '3g.40gb')),
    (('0x294110DE',), ('1g.24gb', '1g.23gb')),
    (('0x294110DE',), ('1g.24gb+me', '1g.23gb+me')),
)


def renamed_by_driver(name, gpu, gi_profiles):
    """The GPU's own profile data for a GPU instance profile ``name`` it does not offer, when its driver calls
    that profile by another name (DRIVER_RENAMES); else None. A layout written with either name then works on
    either driver: the name is matched to the one the driver lists, as model-agnostic keys are."""
    device = _hex_id(gpu.pci_device_id)
    for devices, names in DRIVER_RENAMES:
        if name in names and device in [int(d, 16) for d in devices]:
            offered = [p for q, p in gi_profiles if p['name'] in names]
            if len(offered) == 1:
                return offered[0]
    return None


def _resolve_key(key, gpu, label):
    """One mig-devices key -> the profile name NVML reports on this GPU (or its compute-instance key)."""
    try:
        parsed = parse_key(key)
    except ProfileError as exc:
        raise LayoutConfigError('%s: mig-devices key %s: %s' % (label, key, exc))
    gi_profiles = _gpu_instance_profiles(gpu)
    if isinstance(parsed, MigShape):
        same = [(q, p) for q, p in gi_profiles if q.gpu_slices == parsed.gpu_slices and q.suffix == parsed.suffix]
        if parsed.memory_slices is not None:
            same = [(q, p) for q, p in same if _profile_slices(p) == parsed.memory_slices]
        elif same:
            fewest = min(_profile_slices(p) for q, p in same)
            same = [(q, p) for q, p in same if _profile_slices(p) == fewest]
        if len(same) != 1:
            raise LayoutConfigError('%s: %s %s: the GPU offers %s' % (
                label, key, 'matches no profile' if not same else 'matches %s' % ', '.join(p['name'] for q, p in same),
                _offered(gpu)))
        gi_name = same[0][1]['name']
        profile = same[0][1]
    else:
        matches = [p for q, p in gi_profiles if q.name == parsed.gpu_instance_name]
        if not matches:
            renamed = renamed_by_driver(parsed.gpu_instance_name, gpu, gi_profiles)
            if renamed is None:
                raise LayoutConfigError('%s: %s is not offered: the GPU offers %s' % (label, key, _offered(gpu)))
            matches = [renamed]
        profile = matches[0]
        gi_name = profile['name']
    if not parsed.is_compute_instance_profile:
        return gi_name
    name = compute_instance_name(parsed.compute_slices, gi_name)
    if name not in _compute_names(profile):
        raise LayoutConfigError('%s: %s (%s) is not a compute instance of %s, which offers %s' % (
            label, key, name, gi_name, ', '.join(_compute_names(profile)) or 'none'))
    return name


def _fill_count(gpu, instances, name, label):
    """How many more of ``name`` fit with ``instances`` on the empty GPU (count ``max``)."""
    catalog = Catalog.from_data(gpu.profiles)
    gi = catalog.get(MigProfile.parse(name).gpu_instance_name)
    upper = gi.max_count
    if name != gi.name:
        upper *= gi.compute_profiles[name].max_count
    for count in range(upper, 0, -1):
        trial = dict(instances)
        trial[name] = trial.get(name, 0) + count
        try:
            expand_layout(catalog, trial, label)
        except PlanningError:
            continue
        return count
    return 0


def concrete_instances(mig_devices, gpu):
    """A winning entry's ``mig-devices`` -> {profile name as NVML reports it: count} for this GPU.

    Memory-sized keys are kept as their canonical name (``1c.1g.10gb`` is ``1g.10gb``), model-agnostic
    ones are resolved against the GPU's profiles, counts of keys naming the same profile add up,
    and a count ``max`` becomes the most that fit on the empty GPU with the rest of the entry.
    Compute-instance keys come out as ``1c.3g.40gb``: exactly what _mig_planner.expand_layout takes.
    Raises LayoutConfigError naming the GPU, the key and the profiles it offers.
    """
    label = _label(gpu)
    if mig_devices == {}:
        return {}
    if mig_devices is None:
        raise LayoutConfigError('%s: no entry chosen yet (pending: call choose_entry once MIG is enabled)' % label)
    if not gpu.profiles:
        raise LayoutConfigError('%s: its MIG profiles are unknown: NVML reports them only while MIG is enabled' % label)
    instances = {}
    fill = None
    for key in sorted(mig_devices):
        count = mig_devices[key]
        name = _resolve_key(key, gpu, label)
        if count == MAX_COUNT:
            fill = name
        elif count:
            instances[name] = instances.get(name, 0) + count
    if fill is not None:
        extra = _fill_count(gpu, instances, fill, label)
        if extra:
            instances[fill] = instances.get(fill, 0) + extra
    return instances
