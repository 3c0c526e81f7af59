# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The mig_layout filters turn config problems into AnsibleFilterError with the reason."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.filter.mig_layout import FilterModule

FILTERS = FilterModule().filters()
CONFIGS = {
    'day': [{'devices': 'all', 'device-filter': ['0x20B710DE'], 'mig-enabled': True, 'mig-devices': {'1g.6gb': 4}}],
    'shapes': [{'devices': 'all', 'gpufleet-memory-slices': 4, 'mig-enabled': True, 'mig-devices': {'1g': 'max'}}],
    'broken': [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'0g.0gb': 1}}],
}


def test_filters_are_registered():
    assert sorted(FILTERS) == ['mig_layout_catalog', 'mig_layout_fleet_plan', 'mig_layout_gpu_pods', 'mig_layout_gpus_unknown',
                               'mig_layout_host_gpus', 'mig_layout_host_gpus_changed',
                               'mig_layout_instances', 'mig_layout_known_gpus',
                               'mig_layout_preflight',
                               'mig_layout_problems', 'mig_layout_rollout_progress', 'mig_layout_rollout_serial',
                               'mig_layout_rollout_settings', 'mig_layout_rollout_unfinished', 'mig_layout_to_change', 'mig_layout_validate']


def test_validate_accepts_and_normalises():
    """A broken layout nobody applies does not stop another one."""
    validated = FILTERS['mig_layout_validate'](CONFIGS, 'day')
    assert validated['day'][0]['mig-devices'] == {'1g.6gb': 4}
    assert validated['shapes'][0]['gpufleet-memory-slices'] == [4]
    doc = {'version': 'v1', 'mig-configs': {'day': [{'devices': 'all', 'device-filter': '0x20B710DE', 'mig-enabled': False}]}}
    assert FILTERS['mig_layout_validate'](doc, 'day', True)['day'][0]['device-filter'] == ['0x20B710DE']
    assert FILTERS['mig_layout_validate'](None, document=True) == {}


@pytest.mark.parametrize('args, reason', [
    ((CONFIGS, 'night'), "layout 'night' is not defined (defined: broken, day, shapes)"),
    ((CONFIGS, 'broken'), 'layout broken entry 0: mig-devices key 0g.0gb is not a MIG profile: invalid MIG profile'),
    (({'version': 'v0', 'mig-configs': CONFIGS}, 'day', True), 'unsupported mig-parted config version'),
    (({'day': [{'devices': 'all', 'mig-enabled': True, 'bogus': 1}]},), 'unknown key(s) bogus'),
    (({'day': [{'devices': 'all', 'device-filter': 0x20B710DE, 'mig-enabled': False}]},), 'quote each id'),
])
def test_validate_fails_with_reason(args, reason):
    with pytest.raises(AnsibleFilterError) as exc:
        FILTERS['mig_layout_validate'](*args)
    assert reason in str(exc.value)


def test_problems_of_the_other_layouts():
    problems = FILTERS['mig_layout_problems'](CONFIGS, 'day')
    assert list(problems) == ['broken'] and 'mig-devices key 0g.0gb' in problems['broken'][0]
    assert FILTERS['mig_layout_problems'](CONFIGS, 'broken') == {}
    assert FILTERS['mig_layout_problems']({'version': 'v1', 'mig-configs': CONFIGS}, None, True) == problems
    with pytest.raises(AnsibleFilterError, match='unsupported mig-parted config version'):
        FILTERS['mig_layout_problems']({'version': 'v2'}, None, True)
