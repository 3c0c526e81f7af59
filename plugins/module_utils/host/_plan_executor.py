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

from ansible_collections.gpufleet.mig.plugins.module_utils._errors import GpufleetError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_geometry import GpuInstanceProfile, pack_compute_instances
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError, layout_of
from ansible_collections.gpufleet.mig.plugins.module_utils.host._nvml_backend import BackendError


class ApplyError(GpufleetError):
    """An apply that stopped part-way or did not verify; carries what was done and the state now.

    ``cause``: the BackendError (NVML refused) or PlanningError (the plan cannot be carried out) that stopped
    it, if one did. ``gpus``: for a host, what each GPU went
    through (see :func:`apply_gpus`).
    """

    def __init__(self, message, done, layout_now, cause=None, gpus=None):
        super(ApplyError, self).__init__(message)
        self.done = done
        self.layout_now = layout_now
        self.cause = cause
        self.gpus = gpus

    @property
    def refused_in_use(self):
        """NVML refused a destroy with NVML_ERROR_IN_USE (a process, or a GPU client such as DCGM, holds it)."""
        return getattr(self.cause, 'nvml_error', None) == 'NVML_ERROR_IN_USE' and 'destroy' in str(self.cause)


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
        # A plan made from the derived compute profiles that the real ones do not hold: the plan's problem, not NVML's.
        raise PlanningError('GPU %d: compute instances %s do not fit GPU instance %d as NVML describes it' % (index, ci_names, gi_id))
    return [(name, profile.compute_profiles[name].id, start, profile.compute_profiles[name].size) for name, start in packed]


def apply_plan(backend, gpu, plan):
    """Run ``plan.actions`` in order on ``gpu`` (the _host_model.Gpu it was planned from); return the actions done."""
    index = gpu.index
    profiles = dict((p['name'], p) for p in gpu.profiles)
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
                raise PlanningError('GPU %d: unknown plan action %r' % (index, kind))
            done.append(action)
    except (BackendError, PlanningError) as exc:
        raise ApplyError('%s; %d of %d planned actions were done before it stopped, re-run to converge'
                         % (exc, len(done), len(actions)), done, _layout_now(backend, index), cause=exc)
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


def apply_gpus(backend, decisions, apply_one):
    """``apply_one(decision, done)`` for each GPU decision not in its layout yet, in order; returns every action done.

    ``apply_one`` appends each action to ``done`` as it is done. When one GPU fails, the others are not started
    and the ApplyError's ``gpus`` says for every GPU where it stands: ``status`` (``in layout``, ``applied``,
    ``failed``, ``not started``), the actions ``done`` on it, the planned actions ``left`` and, for the one that
    failed, its instances as NVML reports them now (``layout_now``). Its message says the same in words.
    """
    done = []
    states = []
    failure = None
    for decision in decisions:
        index = decision.index
        planned = decision.actions()
        state = {'index': index, 'uuid': decision.gpu.uuid, 'status': 'not started', 'done': [], 'left': planned}
        states.append(state)
        if decision.in_layout:
            state.update(status='in layout', left=[])
            continue
        if failure is not None:
            continue
        gpu_done = []
        try:
            apply_one(decision, gpu_done)
        except (ApplyError, BackendError, PlanningError) as exc:
            gpu_done.extend(dict(a, gpu=index) for a in getattr(exc, 'done', None) or [] if dict(a, gpu=index) not in gpu_done)
            failure = exc
            state.update(status='failed', done=gpu_done, left=_left(planned, gpu_done), reason=str(exc),
                         layout_now=getattr(exc, 'layout_now', None) or _layout_now(backend, index))
        else:
            state.update(status='applied', done=gpu_done, left=[])
        done.extend(gpu_done)
    if failure is not None:
        raise ApplyError('%s. Where each GPU stands: %s' % (failure, '; '.join(_state_words(s) for s in states)), done, None,
                         cause=getattr(failure, 'cause', None), gpus=states)
    return done


def _action_key(action):
    """What identifies a planned action once done (a create learns its instance id only then)."""
    key = (action.get('action'), action.get('profile'), repr(action.get('placement')), action.get('gpu_instance_ref'))
    if str(action.get('action')).startswith('destroy'):
        key += (action.get('gpu_instance_id'), action.get('compute_instance_id'))
    return key


def _left(planned, done):
    """The planned actions not done yet."""
    counted = [_action_key(a) for a in done]
    left = []
    for action in planned:
        if _action_key(action) in counted:
            counted.remove(_action_key(action))
        else:
            left.append(action)
    return left


def _state_words(state):
    words = 'GPU %d %s' % (state['index'], state['status'])
    if state['status'] == 'failed':
        words += ' after %d action(s) (%s), %d left (%s), its instances now: %s' % (
            len(state['done']), ', '.join(a['action'] for a in state['done']) or 'none', len(state['left']),
            ', '.join(a['action'] for a in state['left']) or 'none',
            ', '.join('%s at %d' % (e['profile'], e['placement']['start']) for e in state['layout_now'] or []) or 'none')
    elif state['status'] == 'not started':
        words += ' (%d action(s) planned)' % len(state['left'])
    elif state['status'] == 'applied':
        words += ' (%d action(s))' % len(state['done'])
    return words
