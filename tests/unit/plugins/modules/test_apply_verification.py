# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The apply's read-back: a driver that does something other than what it was asked fails the run.

NVML answers a create with the instance it made; the verification compares the whole layout read back
(profiles, placements and compute instances: _plan_executor.layout_signature), so a driver that places an
instance elsewhere, or makes another compute instance, is caught even where the profiles alone match.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.host._nvml_backend import NvmlBackend
from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_layout
from ansible_collections.gpufleet.mig.tests.unit.plugins.modules.test_nvidia_mig_layout import ENABLED, layout_args

ONE_SMALL = {'one-small': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 1}}]}
NIGHT = {'nighttime': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'3g.40gb': 2}}]}
CI_1_SLICE = 0   # NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE


def started(state):
    return sorted((gi['profile'], gi['start'], tuple(sorted((ci['profile'], ci['start']) for ci in gi['compute_instances'])))
                  for gi in state['gpus'][0]['gpu_instances'])


def test_the_driver_asked_for_one_start_but_placing_at_another_fails_the_verification(
        simulated_host, run_module, host_paths, monkeypatch):
    host = simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED), 'gpu_instances': []}])
    asked = []
    create = NvmlBackend.create_gpu_instance

    def misplace(self, index, profile_id, start):
        asked.append(start)
        return create(self, index, profile_id, start + 1)
    monkeypatch.setattr(NvmlBackend, 'create_gpu_instance', misplace)
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, ONE_SMALL))
    assert failed and 'does not match the plan' in result['msg'], result
    # Same profile, same count: only the placement tells them apart.
    assert [(gi[0], gi[1]) for gi in started(host.read())] == [('1g.10gb', asked[0] + 1)]


def test_a_compute_instance_other_than_planned_fails_the_verification(simulated_host, run_module, host_paths, monkeypatch):
    host = simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED), 'gpu_instances': []}])
    create = NvmlBackend.create_compute_instance

    def smaller(self, index, gi_id, profile_id, start):
        return create(self, index, gi_id, CI_1_SLICE, 0)
    monkeypatch.setattr(NvmlBackend, 'create_compute_instance', smaller)
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, NIGHT))
    assert failed and 'does not match the plan' in result['msg'], result
    # The GPU instances are the planned ones: only their compute instances differ.
    assert [(gi[0], gi[1]) for gi in started(host.read())] == [('3g.40gb', 0), ('3g.40gb', 4)]


@pytest.mark.parametrize('config', [ONE_SMALL, NIGHT])
def test_a_driver_that_does_what_it_is_asked_passes_the_verification(simulated_host, run_module, host_paths, config):
    simulated_host([{'model': 'H100-SXM5-80GB', 'mig': dict(ENABLED), 'gpu_instances': []}])
    result, failed = run_module(nvidia_mig_layout.main, layout_args(host_paths, config))
    assert not failed and result['in_layout'], result
