# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The mig_layout filters turn config problems into AnsibleFilterError with the reason."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.filter.mig_layout import FilterModule

FILTERS = FilterModule().filters()
CONFIGS = {'day': [{'devices': 'all', 'device-filter': ['0x20B710DE'], 'mig-enabled': True, 'mig-devices': {'1g.6gb': 4}}]}


def test_filters_are_registered():
    assert sorted(FILTERS) == ['mig_layout_gpu_pods', 'mig_layout_resolve', 'mig_layout_validate']


def test_validate_accepts_and_normalises():
    assert FILTERS['mig_layout_validate'](CONFIGS, 'day')['day'][0]['mig-devices'] == {'1g.6gb': 4}
    doc = {'version': 'v1', 'mig-configs': CONFIGS}
    assert FILTERS['mig_layout_validate'](doc, 'day', True)['day'][0]['device-filter'] == ['0x20B710DE']


@pytest.mark.parametrize('args, reason', [
    ((CONFIGS, 'night'), "layout 'night' is not defined (defined: day)"),
    (({'version': 'v0', 'mig-configs': CONFIGS}, 'day', True), 'unsupported mig-parted config version'),
    (({'day': [{'devices': 'all', 'mig-enabled': True, 'bogus': 1}]},), 'unknown key(s) bogus'),
])
def test_validate_fails_with_reason(args, reason):
    with pytest.raises(AnsibleFilterError) as exc:
        FILTERS['mig_layout_validate'](*args)
    assert 'invalid MIG layout configuration' in str(exc.value) and reason in str(exc.value)


def test_resolve_fails_for_unmatched_gpu():
    gpus = [{'index': 0, 'uuid': 'GPU-x', 'name': 'NVIDIA A100-SXM4-80GB', 'pci_device_id': '0x20B210DE', 'mig_capable': True,
             'mig_mode': {'current': 'disabled', 'pending': 'disabled'}, 'profiles': [], 'gpu_instances': []}]
    with pytest.raises(AnsibleFilterError, match='matched by no entry'):
        FILTERS['mig_layout_resolve'](CONFIGS, 'day', gpus)
