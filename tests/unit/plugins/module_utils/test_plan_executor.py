# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The per-GPU plan executor: a plan it cannot carry out is a planning problem, never reported as NVML's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.host._nvml_backend import BackendError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import Gpu
from ansible_collections.gpufleet.mig.plugins.module_utils.host._plan_executor import ApplyError, apply_plan
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError

# A100-SXM4-40GB's 3g.20gb, as NVML describes it; its compute profiles not read yet (no instance of it exists).
PROFILE = {'name': '3g.20gb', 'id': 2, 'compute_slices': 3, 'memory_slices': 4, 'max_count': 2,
           'placements': [{'start': 0, 'size': 4}, {'start': 4, 'size': 4}], 'compute_profiles_source': 'derived'}


class Plan(object):
    def __init__(self, actions):
        self.actions = actions
        self.after = []


class Backend(object):
    """Creates what it is asked; NVML describes no compute profile for the new GPU instance; the read-back fails."""

    def __init__(self):
        self.calls = []

    def create_gpu_instance(self, index, profile_id, start):
        self.calls.append(('create_gpu_instance', index, profile_id, start))
        return 7

    def compute_profiles_of(self, index, gi_id, name):
        return []

    def read_gpu(self, index, with_profiles=True):
        raise BackendError('GPU %d: read failed: NVML_ERROR_UNKNOWN' % index)


def refused(actions):
    with pytest.raises(ApplyError) as failure:
        apply_plan(Backend(), Gpu(index=0, profiles=[PROFILE]), Plan(actions))
    return failure.value


def test_compute_instances_the_real_profiles_do_not_hold_are_a_planning_problem():
    failure = refused([
        {'action': 'create_gpu_instance', 'ref': 'g1', 'profile': '3g.20gb', 'profile_id': 2, 'placement': {'start': 0, 'size': 4}},
        {'action': 'create_compute_instance', 'gpu_instance_ref': 'g1', 'profile': '3g.20gb', 'profile_id': 2,
         'placement': {'start': 0, 'size': 3}},
    ])
    assert isinstance(failure.cause, PlanningError) and not isinstance(failure.cause, BackendError)
    assert str(failure) == ("GPU 0: compute instances ['3g.20gb'] do not fit GPU instance 7 as NVML describes it; "
                            "0 of 2 planned actions were done before it stopped, re-run to converge")
    assert (failure.done, failure.layout_now, failure.refused_in_use) == ([], None, False)


def test_an_action_the_executor_does_not_know_is_a_planning_problem():
    failure = refused([{'action': 'resize_gpu_instance'}])
    assert isinstance(failure.cause, PlanningError) and not isinstance(failure.cause, BackendError)
    assert str(failure).startswith("GPU 0: unknown plan action 'resize_gpu_instance'; 0 of 1 planned actions")
