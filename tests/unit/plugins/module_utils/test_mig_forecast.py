# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A layout checked on GPUs whose MIG is off, before any GPU changes: through the real pynvml wrappers."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from dataclasses import replace

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.host._layout_converge import LayoutRequest, converge, decide
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import Gpu
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._layout_catalog import LayoutConfigError, check_layout, validate_configs
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_forecast import (
    check_without_mig,
    forecast_profiles,
    memory_slices_without_mig,
    profile_gb,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_planner import PlanningError
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import MigProfile
from ansible_collections.gpufleet.mig.plugins.module_utils.host._nvml_backend import NvmlBackend
from ansible_collections.gpufleet.mig.tests.unit.conftest import mutating_calls
import gpufleet_nvml_sim as simulator

ENABLED = {'current': 'enabled', 'pending': 'enabled'}
MIG_MODELS = sorted(key for key, model in simulator.MODELS.items() if model['mig_capable'])


def request(mig_devices, memory_slices=None, name='x'):
    entry = {'devices': 'all', 'mig-enabled': True, 'mig-devices': mig_devices}
    if memory_slices:
        entry['gpufleet-memory-slices'] = memory_slices
    return LayoutRequest(name, check_layout(validate_configs({name: [entry]}), name))


def read_host():
    backend = NvmlBackend()
    try:
        return backend.read_host()
    finally:
        backend.close()


def test_memory_slices_and_the_naming_rule():
    assert memory_slices_without_mig(Gpu.from_dict({'placements_without_mig': [
        {'profile_id': 0, 'placements': [{'start': 0, 'size': 4}]},
        {'profile_id': 14, 'placements': [{'start': 3, 'size': 1}]}]})) == 4
    assert memory_slices_without_mig(Gpu.from_dict({'placements_without_mig': []})) is None
    assert memory_slices_without_mig(Gpu.from_dict({})) is None
    # go-nvlib: eighths of the memory times the GiB rounded up, rounded half up (B200: 180 GiB / 8 = 22.5 -> 23).
    assert profile_gb(1, 8, 183359) == 23 and profile_gb(4, 8, 81920) == 40 and profile_gb(1, 4, 24576) == 6
    assert profile_gb(2, 8, 40960) == 10 and profile_gb(8, 8, 95830) == 94
    assert [p['name'] for p in forecast_profiles(8, 40960)] == ['1g.5gb', '1g.10gb', '2g.10gb', '3g.20gb', '4g.20gb', '7g.40gb']
    assert [p['name'] for p in forecast_profiles(4, 24576)] == ['1g.6gb', '2g.12gb', '4g.24gb']
    assert forecast_profiles(3, 24576) is None and forecast_profiles(8, 0) is None


@pytest.mark.parametrize('model', MIG_MODELS)
def test_the_forecast_names_every_plain_profile_the_simulated_driver_offers(simulated_host, model):
    """With MIG off the placements give the memory slices; the forecast matches the names read once MIG is on."""
    host = simulated_host([{'model': model}, {'model': model, 'mig': dict(ENABLED)}])
    off, on = read_host().gpus
    slices = memory_slices_without_mig(off)
    assert slices == simulator.MODELS[model]['memory_slices']
    forecast = dict((MigProfile.parse(p['name']).gpu_slices, []) for p in forecast_profiles(slices, off.memory_total_mib))
    for profile in forecast_profiles(slices, off.memory_total_mib):
        forecast[MigProfile.parse(profile['name']).gpu_slices].append((profile['memory_slices'], MigProfile.parse(profile['name']).memory_gb))
    real = sorted((MigProfile.parse(p['name']).gpu_slices, p['memory_slices'], MigProfile.parse(p['name']).memory_gb)
                  for p in on.profiles if MigProfile.parse(p['name']).suffix == '')
    assert sorted((g, s) for g, pairs in forecast.items() for s, dummy in pairs) == sorted((g, s) for g, s, dummy in real)
    for g, memory_slices, gb in real:
        predicted = [f_gb for f_slices, f_gb in forecast[g] if f_slices == memory_slices][0]
        assert abs(predicted - gb) <= 1, (g, memory_slices, gb, predicted)
    assert mutating_calls(host) == []


def test_a_profile_one_gpu_lacks_fails_before_the_first_gpu_changes(simulated_host):
    host = simulated_host([{'model': 'H100-SXM5-80GB'}, {'model': 'A100-SXM4-40GB'}])
    with pytest.raises(LayoutConfigError) as error:
        converge(NvmlBackend(), request({'3g.40gb': 2}))
    message = str(error.value)
    assert message.startswith('GPU 1 (NVIDIA A100-SXM4-40GB, 0x20B010DE): 3g.40gb is not offered')
    assert '3g.20gb' in message and 'before any change' in message and '8 memory slices' in message
    assert mutating_calls(host) == []


def test_counts_that_cannot_fit_fail_before_any_change(simulated_host):
    host = simulated_host([{'model': 'H100-SXM5-80GB'}])
    with pytest.raises(PlanningError) as error:
        converge(NvmlBackend(), request({'1g.20gb': 3, '4g.40gb': 1}))     # 7 compute slices, but 10 memory slices
    assert 'before any change' in str(error.value)
    with pytest.raises(LayoutConfigError):
        converge(NvmlBackend(), request({'5g': 1}))
    assert mutating_calls(host) == []


def test_an_entry_chosen_by_memory_slices_is_checked_with_mig_off(simulated_host):
    host = simulated_host([{'model': 'A30'}])
    with pytest.raises(LayoutConfigError) as error:
        converge(NvmlBackend(), request({'3g': 1}, memory_slices=[4]))
    assert '3g' in str(error.value) and 'before any change' in str(error.value)
    # An entry for other GPUs leaves this one unmatched: no refusal.
    decision = decide(read_host(), request({'3g': 1}, memory_slices=[8]))
    assert decision.gpus[0].deferred
    assert mutating_calls(host) == []


def test_a_gpu_of_the_same_model_with_mig_on_is_checked_exactly(simulated_host):
    host = simulated_host([{'model': 'A30'}, {'model': 'A30', 'mig': dict(ENABLED)}])
    # 1g.6gb+me exists on an A30 though the forecast has only plain profiles: the other GPU's list says so.
    decision = decide(read_host(), request({'1g.6gb+me': 1, '2g.12gb': 1}))
    assert decision.gpus[0].deferred and 'GPU 1, the same model with MIG enabled' in decision.gpus[0].checked_with
    assert 'forecast' not in decision.gpus[0].checked_with
    with pytest.raises(LayoutConfigError) as error:
        decide(read_host(), request({'2g.12gb+gfx': 1}))
    assert str(error.value).startswith('GPU 0 (') and 'GPU 1, the same model' in str(error.value)
    assert mutating_calls(host) == []


def test_the_forecast_says_what_it_cannot_know(simulated_host):
    simulated_host([{'model': 'A100-SXM4-80GB'}])
    # A driver that names the profile 1 GB off the rule (3g.39gb on R535) is not refused on a forecast.
    decision = decide(read_host(), request({'3g.39gb': 1, '1g.10gb+me': 1}))
    gpu = decision.gpus[0]
    assert gpu.deferred and 'forecast' in gpu.checked_with and 'suffixes pass as the plain profile' in gpu.checked_with
    assert gpu.as_dict()['checked_with'] == gpu.checked_with
    # No placement answered: nothing can be checked, and it says so.
    off = replace(read_host().gpus[0], placements_without_mig=[])
    match = {'mig_enabled': True, 'mig_devices': {'9g.1gb': 1}, 'pending': False, 'candidates': [], 'entries': [0], 'index': 0}
    assert check_without_mig(off, match).startswith('nothing yet: MIG is off')
    # MIG stays off: nothing to check.
    assert check_without_mig(off, dict(match, mig_enabled=False)) is None


def test_keys_of_one_plain_profile_add_up_on_the_forecast(simulated_host):
    host = simulated_host([{'model': 'H100-SXM5-80GB'}])
    # 1g.19gb is taken as the 1g.20gb (a driver's renaming): together five of them, one more than fits.
    with pytest.raises(PlanningError):
        decide(read_host(), request({'1g.20gb': 3, '1g.19gb': 2}))
    assert decide(read_host(), request({'1g.20gb': 2, '1g.19gb': 2})).gpus[0].deferred
    assert decide(read_host(), request({'1g.20gb': 'max', '1g.19gb': 1})).gpus[0].deferred
    assert mutating_calls(host) == []
