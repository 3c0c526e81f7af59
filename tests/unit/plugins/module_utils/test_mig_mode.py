# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The disable-MIG sequence, the one copy nvidia_mig_mode and the layout's converge share."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import Gpu, GpuHolders, MigMode
from ansible_collections.gpufleet.mig.plugins.module_utils.host._mig_mode import ModeDecision, clearing_plan, disable_mig
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import model_gpu

ENABLED = {'current': 'enabled', 'pending': 'enabled'}


def _gpu(instances, mode=None):
    return Gpu.from_dict(dict(model_gpu('H100-SXM5-80GB').as_dict(), mig_mode=dict(mode or ENABLED), gpu_instances=instances))


def _gi(gi_id, profile, start, size, pids=()):
    return {'id': gi_id, 'profile': profile, 'placement': {'start': start, 'size': size},
            'compute_instances': [{'id': 0, 'profile': profile, 'placement': {'start': 0, 'size': size}, 'uuid': 'MIG-%d' % gi_id,
                                   'processes': [{'pid': pid, 'used_memory_mib': 1} for pid in pids]}]}


class RecordingBackend(object):
    """Records the mode calls; the mode applies at once (an idle GPU)."""

    def __init__(self, calls):
        self.calls = calls
        self.mode = dict(ENABLED)

    def set_mig_mode(self, index, enabled):
        self.calls.append(('set_mig_mode', index, enabled))
        self.mode = {'current': 'enabled' if enabled else 'disabled', 'pending': 'enabled' if enabled else 'disabled'}
        return None

    def read_mode(self, index):
        return MigMode.from_dict(self.mode)


def test_clearing_plan_destroys_every_instance_and_is_none_without_any():
    gpu = _gpu([_gi(1, '3g.40gb', 4, 4), _gi(2, '1g.10gb', 0, 1)])
    plan = clearing_plan(gpu)
    assert plan.after == []
    assert sorted(a['gpu_instance_id'] for a in plan.actions if a['action'] == 'destroy_gpu_instance') == [1, 2]
    assert clearing_plan(_gpu([])) is None


def test_clearing_plan_refuses_a_busy_or_held_instance_unless_its_pods_are_evictable():
    with pytest.raises(PlanningError, match='running processes'):
        clearing_plan(_gpu([_gi(1, '3g.40gb', 4, 4, pids=[77])]))
    held = _gpu([_gi(1, '3g.40gb', 4, 4)])
    with pytest.raises(PlanningError, match='team/p'):
        clearing_plan(held, GpuHolders(instances={1: ('team/p',)}))
    assert clearing_plan(held, GpuHolders(instances={1: ('team/p',)}), evict=True).after == []


def test_disable_mig_destroys_the_instances_before_the_mode_changes():
    calls = []
    gpu = _gpu([_gi(1, '3g.40gb', 4, 4)])
    decision = ModeDecision(gpu, False, allow_reset=False)
    plan = clearing_plan(gpu)
    outcome = disable_mig(RecordingBackend(calls), decision, plan, lambda p: calls.append(('clear', p)))
    assert calls == [('clear', plan), ('set_mig_mode', 0, False)]
    assert outcome['after'] == {'current': 'disabled', 'pending': 'disabled'} and not outcome['reset_required']


def test_disable_mig_clears_instances_left_under_a_mode_already_off_and_sets_no_mode():
    calls = []
    off = {'current': 'disabled', 'pending': 'disabled'}
    gpu = _gpu([_gi(1, '3g.40gb', 4, 4)], mode=off)
    decision = ModeDecision(gpu, False, allow_reset=False)
    assert not decision.changed
    plan = clearing_plan(gpu)
    assert disable_mig(RecordingBackend(calls), decision, plan, lambda p: calls.append(('clear', p))) is None
    assert calls == [('clear', plan)]
    # Nothing to clear: the mode alone.
    calls = []
    decision = ModeDecision(_gpu([]), False, allow_reset=False)
    disable_mig(RecordingBackend(calls), decision, None, lambda p: calls.append(('clear', p)))
    assert calls == [('set_mig_mode', 0, False)]


@pytest.mark.parametrize('mode, wanted_enabled', [({'current': 'enabled', 'pending': 'disabled'}, True),
                                                  ({'current': 'disabled', 'pending': 'enabled'}, False)])
def test_a_mode_that_a_reset_would_undo_is_not_in_effect(mode, wanted_enabled):
    # The mode is as wanted now but the next GPU reset or reboot applies the other one: the set is asked again.
    decision = ModeDecision(_gpu([], mode=mode), wanted_enabled, allow_reset=False)
    assert not decision.in_effect and decision.needs_set and decision.changed
