# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""Apply a plan through the backend, then verify the GPU matches it.

No Ansible imports: the nvidia_mig_instance module and the boot-time re-apply both use
this one code path.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils._mig_geometry import GpuInstanceProfile, pack_compute_instances
from ansible_collections.gpufleet.mig.plugins.module_utils._mig_planner import layout_of
from ansible_collections.gpufleet.mig.plugins.module_utils._nvml_backend import BackendError


class ApplyError(Exception):
    """An apply that stopped part-way or did not verify; carries what was done and the state now."""

    def __init__(self, message, done, layout_now):
        super(ApplyError, self).__init__(message)
        self.done = done
        self.layout_now = layout_now


def layout_signature(layout):
    """What must match after an apply: profiles, placements and compute instances."""
    return sorted(
        (entry['profile'], entry['placement']['start'],
         tuple(sorted((ci['profile'], ci['placement']['start']) for ci in entry['compute_instances'])))
        for entry in layout)


def _real_compute_placements(backend, index, gi_id, profile_data, ci_names):
    """Re-place compute instances with the profiles NVML reports for the new GPU instance."""
    data = dict(profile_data)
    data['compute_profiles'] = backend.compute_profiles_of(index, gi_id, profile_data['name'])
    profile = GpuInstanceProfile.from_data(data)
    packed = pack_compute_instances(profile, ci_names)
    if packed is None:
        raise BackendError('GPU %d: compute instances %s do not fit GPU instance %d as NVML describes it' % (index, ci_names, gi_id))
    return [(name, profile.compute_profiles[name].id, start, profile.compute_profiles[name].size) for name, start in packed]


def apply_plan(backend, gpu, plan):
    """Run ``plan.actions`` in order on ``gpu`` (the data it was planned from); return the actions done."""
    index = gpu['index']
    profiles = dict((p['name'], p) for p in gpu['profiles'])
    actions = [dict(a) for a in plan.actions]
    refs = {}
    done = []
    try:
        for position, action in enumerate(actions):
            kind = action['action']
            if kind == 'destroy_compute_instance':
                backend.destroy_compute_instance(index, action['gpu_instance_id'], action['compute_instance_id'])
            elif kind == 'destroy_gpu_instance':
                backend.destroy_gpu_instance(index, action['gpu_instance_id'])
            elif kind == 'create_gpu_instance':
                gi_id = backend.create_gpu_instance(index, action['profile_id'], action['placement']['start'])
                refs[action['ref']] = gi_id
                action['gpu_instance_id'] = gi_id
                if profiles[action['profile']].get('compute_profiles_source') == 'derived':
                    _replace_derived_placements(backend, index, gi_id, profiles[action['profile']], actions, position, action['ref'])
            elif kind == 'create_compute_instance':
                gi_id = refs[action['gpu_instance_ref']]
                action['gpu_instance_id'] = gi_id
                action['compute_instance_id'] = backend.create_compute_instance(
                    index, gi_id, action['profile_id'], action['placement']['start'])
            else:
                raise BackendError('GPU %d: unknown plan action %r' % (index, kind))
            done.append(action)
    except BackendError as exc:
        raise ApplyError('%s; %d of %d planned actions were done before it stopped, re-run to converge'
                         % (exc, len(done), len(actions)), done, _layout_now(backend, index))
    now = _layout_now(backend, index)
    if layout_signature(now) != layout_signature(plan.after):
        raise ApplyError('GPU %d: after applying, the GPU does not match the plan: expected %s, found %s'
                         % (index, layout_signature(plan.after), layout_signature(now)), done, now)
    return done, now


def _replace_derived_placements(backend, index, gi_id, profile_data, actions, position, ref):
    pending = [a for a in actions[position + 1:] if a['action'] == 'create_compute_instance' and a['gpu_instance_ref'] == ref]
    real = _real_compute_placements(backend, index, gi_id, profile_data, [a['profile'] for a in pending])
    for action, (name, profile_id, start, size) in zip(pending, real):
        action.update(profile=name, profile_id=profile_id, placement={'start': start, 'size': size})


def _layout_now(backend, index):
    try:
        return layout_of(backend.read_gpu(index, with_profiles=False))
    except BackendError:
        return None
