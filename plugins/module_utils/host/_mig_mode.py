# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private module utils of gpufleet.mig: the interface may change at any time.

"""MIG mode of one GPU: the decision (pure) and the change (through the backend).

The one copy of the mode logic: nvidia_mig_mode, nvidia_mig_layout and the boot-time apply all
use it. How the driver behaves (mig-geometry reference, "Corrections"): ``nvmlDeviceSetMigMode``
applies at once on an idle GPU (on Ampere the driver resets the GPU itself); when another client
holds the GPU (a process, nvidia-persistenced, DCGM, nvidia_drm) the call still succeeds, the mode
stays pending and the activation status is NVML_ERROR_IN_USE. A GPU reset then applies it, once
the GPU is idle. Disabling MIG needs every GPU instance gone first (the caller destroys them).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import DISABLED, ENABLED, NOBODY, MigMode
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import plan_gpu
from ansible_collections.gpufleet.mig.plugins.module_utils.host._nvml_backend import BackendError

# MIG mode is driver state on these (reset-less MIG, MIG User Guide): a pending change on a GPU that is idle now
# takes effect on another nvmlDeviceSetMigMode, no GPU reset needed. Ampere applies a pending mode at a GPU reset.
RESETLESS_ARCHITECTURES = ('hopper', 'blackwell', 'rubin')

# Why a mode can stay pending, for messages (activation status -> explanation).
_PENDING_REASONS = {
    'NVML_ERROR_IN_USE': 'another client holds the GPU (a process, nvidia-persistenced, DCGM or nvidia_drm)',
    'NVML_ERROR_RESET_REQUIRED': 'the driver asks for a GPU reset (e.g. under GPU passthrough)',
}


def mode_name(enabled):
    return ENABLED if enabled else DISABLED


def pending_reason(activation_status):
    if not activation_status:
        return None
    return '%s (%s)' % (_PENDING_REASONS.get(activation_status, 'the driver did not apply it'), activation_status)


class ModeDecision(object):
    """What one GPU needs to end with MIG ``wanted``: pure, from its current state.

    ``after`` is the predicted mode; the change itself reports what NVML says. Processes on the
    GPU block any change (the driver would refuse or leave it pending; a reset needs an idle GPU),
    and so do ``pods``: the pods that hold the GPU or one of its instances ('namespace/name'), with
    or without a running process (a mode change takes their devices away).
    """

    def __init__(self, gpu, wanted_enabled, allow_reset, pods=()):
        self.gpu = gpu
        self.wanted = mode_name(wanted_enabled)
        self.allow_reset = allow_reset
        mode = gpu.mig_mode
        # Idle: the set applies at once. Already pending: on Hopper and later the set is asked again (it applies
        # once the GPU is idle; change_mode resets only if it still does not); on Ampere only a reset applies it.
        resetless = gpu.architecture in RESETLESS_ARCHITECTURES
        self.needs_set = mode.pending != self.wanted or (resetless and mode.current != self.wanted)
        self.needs_reset = allow_reset and not self.needs_set and mode.current != self.wanted
        current_after = self.wanted if (self.needs_set or self.needs_reset) else mode.current
        self.after = MigMode(current_after, self.wanted)
        self.pids = gpu.pids()
        self.pods = sorted(set(pods))

    @property
    def changed(self):
        return self.needs_set or self.needs_reset

    @property
    def in_effect(self):
        """Mode already as wanted, current and pending."""
        return self.gpu.mig_mode.is_steady(self.wanted)

    def problem(self):
        """Why this GPU's mode cannot be changed now, or None."""
        if not self.changed:
            return None
        users = []
        if self.pids:
            users.append('processes %s use the GPU' % self.pids)
        if self.pods:
            users.append('pod(s) %s hold the GPU or its instances' % ', '.join(self.pods))
        if not users:
            return None
        return 'GPU %d (%s): %s; stop them before changing MIG mode' % (self.gpu.index, self.gpu.uuid, ' and '.join(users))


def change_mode(backend, decision, report_refused_reset=False):
    """Set the mode (and reset the idle GPU when allowed and still pending); returns what happened.

    A reset the host refuses (a client holds the GPU) raises, unless ``report_refused_reset``:
    then the mode is left pending and the refusal is the ``pending_reason`` (reset_required).
    Returns {before, after, activation_status, reset_performed, reset_required, pending_reason}.
    """
    index = decision.gpu.index
    before = decision.gpu.mig_mode
    status = None
    if decision.needs_set:
        status = backend.set_mig_mode(index, decision.wanted == 'enabled')
    after = backend.read_mode(index)
    reset_performed = False
    refusal = None
    if after.current != decision.wanted and decision.allow_reset:
        try:
            backend.reset_gpu(index)
            reset_performed = True
        except BackendError as exc:
            if not report_refused_reset:
                raise
            refusal = 'the GPU reset was refused: %s' % exc
        after = backend.read_mode(index)
    reset_required = after.current != after.pending
    reason = None
    if reset_required:
        causes = [cause for cause in (pending_reason(status), refusal) if cause]
        reason = '; '.join(causes) or ('a GPU reset is not allowed' if not decision.allow_reset else 'the reset did not apply it')
    return {
        'before': before.as_dict(),
        'after': after.as_dict(),
        'activation_status': status,
        'reset_performed': reset_performed,
        'reset_required': reset_required,
        'pending_reason': reason,
    }


def clearing_plan(gpu, holders=NOBODY, evict=False):
    """MIG goes off only once every GPU instance is gone: the plan that destroys them all, or None on a GPU without
    any. Busy instances, and those pods hold (``holders`` and ``evict`` as for _mig_planner.plan_gpu), refuse there."""
    if not gpu.gpu_instances:
        return None
    return plan_gpu(gpu, {}, holders=holders, evict=evict)


def disable_mig(backend, decision, plan, apply_clear, report_refused_reset=False):
    """The disable sequence of one GPU: its instances first (``plan``, from :func:`clearing_plan`, run by
    ``apply_clear(plan)``), then the mode (:func:`change_mode`). Returns change_mode's outcome, or None where the
    mode already is as wanted (only the instances went)."""
    if plan is not None and plan.changed:
        apply_clear(plan)
    if not decision.changed:
        return None
    return change_mode(backend, decision, report_refused_reset=report_refused_reset)
