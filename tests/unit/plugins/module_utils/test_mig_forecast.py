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


# ---- issue 30: a driver that describes the profiles with MIG off is checked against them, not a forecast -------------

DRIVER_DESCRIBES = '580.159.04'     # the H200's driver in docs/hardware.md, "Seen on real hardware"
OWN_PROFILES = 'the profiles the driver describes for this GPU with MIG off'


@pytest.mark.parametrize('driver, described', [(DRIVER_DESCRIBES, True), ('580.95.05', False)])
def test_the_backend_reads_the_profiles_a_driver_describes_with_mig_off(simulated_host, driver, described):
    simulated_host([{'model': 'H200'}, {'model': 'H200', 'mig': dict(ENABLED)}], driver_version=driver)
    off, on = read_host().gpus
    assert on.profiles_without_mig is None
    if not described:
        assert off.profiles_without_mig is None and 'profiles_without_mig' not in off.as_dict()
        return
    own = dict((p['name'], p) for p in off.profiles_without_mig)
    assert sorted(own) == sorted(p['name'] for p in on.profiles)
    assert (own['2g.35gb']['memory_mib'], own['7g.141gb']['memory_mib'], own['1g.18gb+me']['max_count']) == (33280, 143360, 1)
    assert own['1g.35gb']['placements'] == [{'start': s, 'size': 2} for s in (0, 2, 4, 6)]
    assert own['3g.71gb']['compute_profiles_source'] == 'derived'
    assert not off.profiles_known and off.profiles == []        # the GPU's profiles stay those of MIG on
    assert Gpu.from_dict(off.as_dict()) == off


@pytest.mark.parametrize('driver', [DRIVER_DESCRIBES, '580.95.05'])
def test_a_mig_off_gpu_is_checked_against_the_drivers_own_profiles_where_it_describes_them(simulated_host, driver):
    host = simulated_host([{'model': 'H200'}], driver_version=driver)
    gpu = decide(read_host(), request({'1g.18gb+me': 1, '2g.35gb': 1, '3g.71gb': 1})).gpus[0]
    assert gpu.deferred
    if driver == DRIVER_DESCRIBES:
        assert gpu.checked_with == OWN_PROFILES
    else:
        assert gpu.checked_with.startswith('a forecast, as MIG is off')
    assert mutating_calls(host) == []


@pytest.mark.parametrize('mig_devices, refusal', [
    ({'1g.18gb+me': 2}, PlanningError),         # one +me per GPU: the forecast checks it as the plain 1g
    ({'2g.34gb': 1}, LayoutConfigError),        # within 1 GB of the forecast's 2g.35gb, but not a profile the driver has
])
def test_what_the_forecast_lets_pass_the_drivers_own_profiles_refuse(simulated_host, mig_devices, refusal):
    host = simulated_host([{'model': 'H200'}], driver_version='580.95.05')
    assert decide(read_host(), request(mig_devices)).gpus[0].deferred
    host = simulated_host([{'model': 'H200'}], driver_version=DRIVER_DESCRIBES)
    with pytest.raises(refusal) as error:
        decide(read_host(), request(mig_devices))
    assert str(error.value).endswith('(checked before any change against %s)' % OWN_PROFILES), str(error.value)
    assert mutating_calls(host) == []


def test_a_driver_that_fails_the_profile_call_with_mig_off_falls_back_to_the_forecast(simulated_host):
    host = simulated_host([{'model': 'H200'}], driver_version=DRIVER_DESCRIBES,
                          faults=[{'call': 'nvmlDeviceGetGpuInstanceProfileInfoV', 'gpu': 0, 'error': 'NVML_ERROR_UNKNOWN'}])
    gpu = read_host().gpus[0]
    assert gpu.profiles_without_mig is None and gpu.placements_without_mig
    assert check_without_mig(gpu, {'mig_enabled': True, 'mig_devices': {'2g.35gb': 1}, 'pending': False, 'candidates': [],
                                   'entries': [0], 'index': 0}).startswith('a forecast')
    assert mutating_calls(host) == []


def test_the_drivers_own_profiles_come_before_another_gpu_of_the_same_model():
    own = forecast_profiles(8, 143771)
    sibling = Gpu.from_dict({'index': 1, 'pci_device_id': '0x233510DE', 'mig_mode': ENABLED, 'profiles': own})
    gpu = Gpu.from_dict({'index': 0, 'pci_device_id': '0x233510DE', 'memory_total_mib': 143771, 'profiles_without_mig': own,
                         'placements_without_mig': [{'profile_id': 0, 'placements': [{'start': 0, 'size': 8}]}]})
    match = {'mig_enabled': True, 'mig_devices': {'7g.141gb': 1}, 'pending': False, 'candidates': [], 'entries': [0], 'index': 0}
    assert check_without_mig(gpu, match, host_gpus=[gpu, sibling]) == OWN_PROFILES
    assert 'GPU 1, the same model' in check_without_mig(replace(gpu, profiles_without_mig=None), match, host_gpus=[gpu, sibling])
