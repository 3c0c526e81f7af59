# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/support/expected_layouts.yml is geometry each GPU can hold: checked against the simulator's model
tables (names, placements, sizes), never against the layout catalog it must stay independent of."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import gpufleet_nvml_sim
import pytest

from .layouts import EXPECTED_LAYOUTS_FILE, expected_instances, expected_layouts, layout_errors, nvml_name, simulated_gpus

TABLE = expected_layouts()
BY_NVML_NAME = dict((gpufleet_nvml_sim.get_model(key)['nvml_name'], gpufleet_nvml_sim.get_model(key)) for key in TABLE['models'])


def test_model_keys_name_simulated_models_with_their_nvml_names():
    for key, name in TABLE['models'].items():
        assert gpufleet_nvml_sim.get_model(key)['nvml_name'] == name, key


def test_without_mig_lists_exactly_the_models_that_have_no_mig():
    assert sorted(TABLE['without_mig']) == sorted(name for name, model in BY_NVML_NAME.items() if not model['mig_capable'])


@pytest.mark.parametrize('layout', sorted(TABLE['layouts']))
def test_every_mig_model_has_an_expectation_that_fits_its_gpu(layout):
    entries = TABLE['layouts'][layout]
    assert sorted(entries) == sorted(name for name, model in BY_NVML_NAME.items() if model['mig_capable'])
    for name, entry in entries.items():
        profiles = dict((profile['name'], profile) for profile in BY_NVML_NAME[name]['profiles'])
        assert entry['profile'] in profiles, (layout, name, entry['profile'], sorted(profiles))
        profile = profiles[entry['profile']]
        starts = entry['starts']
        assert starts == sorted(set(starts)), (layout, name, starts)
        assert set(starts) <= set(profile['starts']), (layout, name, starts, profile['starts'])
        assert len(starts) <= profile['max_count'], (layout, name)
        size = profile['memory_slices']
        assert all(later >= earlier + size for earlier, later in zip(starts, starts[1:])), (layout, name, 'overlap')


def test_expected_instances_and_layout_errors():
    assert expected_instances('nighttime', 'NVIDIA A30') == [('2g.12gb', 0), ('2g.12gb', 2)]
    assert expected_instances('daytime', 'NVIDIA L40S') == []
    assert nvml_name('H100-SXM5-80GB') == 'NVIDIA H100 80GB HBM3'
    night_a30 = ('NVIDIA A30', 'enabled', [('2g.12gb', 2, ('2g.12gb',)), ('2g.12gb', 0, ('2g.12gb',))])
    assert layout_errors('nighttime', [night_a30, ('NVIDIA L40S', 'disabled', [])]) == []
    assert layout_errors('daytime', [night_a30]) == [
        "GPU 0 (NVIDIA A30): MIG enabled, [('2g.12gb', 0, ('2g.12gb',)), ('2g.12gb', 2, ('2g.12gb',))]; expected MIG "
        "enabled, [('1g.6gb', 0, ('1g.6gb',)), ('1g.6gb', 1, ('1g.6gb',)), ('1g.6gb', 2, ('1g.6gb',)), ('1g.6gb', 3, ('1g.6gb',))]"]
    assert len(layout_errors('nighttime', [('NVIDIA A30', 'disabled', [])])) == 1
    # A GPU instance without its compute instance, or one of another size, is not the layout.
    assert len(layout_errors('nighttime', [('NVIDIA A30', 'enabled', [('2g.12gb', 0, ()), ('2g.12gb', 2, ('2g.12gb',))])])) == 1
    assert len(layout_errors('nighttime', [('NVIDIA A30', 'enabled', [('2g.12gb', 0, ('1c.2g.12gb',)),
                                                                      ('2g.12gb', 2, ('2g.12gb',))])])) == 1
    # Nor is a mode change still pending.
    assert len(layout_errors('nighttime', [('NVIDIA A30', 'enabled (disabled pending)',
                                            [('2g.12gb', 0, ('2g.12gb',)), ('2g.12gb', 2, ('2g.12gb',))])])) == 1


def test_simulated_gpus_reads_mode_pending_and_compute_instances(tmp_path):
    state = {'gpus': [
        {'model': 'A30', 'mig': {'current': 'enabled', 'pending': 'enabled'},
         'gpu_instances': [{'id': 5, 'profile': '2g.12gb', 'start': 2,
                            'compute_instances': [{'id': 0, 'profile': '2g.12gb', 'start': 0, 'pids': []}]},
                           {'id': 3, 'profile': '2g.12gb', 'start': 0, 'compute_instances': []}]},
        {'model': 'A30', 'mig': {'current': 'enabled', 'pending': 'disabled'}, 'gpu_instances': []},
        {'model': 'L40S'}]}
    path = tmp_path / 'gpus.json'
    path.write_text(json.dumps(state))
    assert simulated_gpus(str(path)) == [
        ('NVIDIA A30', 'enabled', [('2g.12gb', 2, ('2g.12gb',)), ('2g.12gb', 0, ())]),
        ('NVIDIA A30', 'enabled (disabled pending)', []),
        ('NVIDIA L40S', 'disabled', [])]
    with pytest.raises(KeyError, match='no expectation for NVIDIA GB300 in layout daytime'):
        expected_instances('daytime', 'NVIDIA GB300')
    with pytest.raises(KeyError, match='layout evening is not in %s' % EXPECTED_LAYOUTS_FILE):
        expected_instances('evening', 'NVIDIA A30')
    with pytest.raises(KeyError, match='GB300 names no model'):
        nvml_name('GB300')
