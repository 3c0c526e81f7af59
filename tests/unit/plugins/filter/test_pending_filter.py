# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter mig_pending_requests: the module_utils rule over k8s_info's pods, one line for bad input."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.filter.mig_pending import FilterModule, mig_pending_requests
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.pods import pod


def test_registered_and_keeps_only_the_waiting_pods():
    assert FilterModule().filters()['mig_pending_requests'] is mig_pending_requests
    pods = [pod('a', {'nvidia.com/mig-3g.40gb': '1'}), pod('b', phase='Running', node_name='n')]
    assert mig_pending_requests(pods) == [{'pod': 'team-a/a', 'priority': 0, 'priority_class': '',
                                          'requests': {'3g.40gb': 1}, 'created': '2026-12-03T22:00:00Z'}]


@pytest.mark.parametrize('bad', [None, {'items': []}, ['pod']])
def test_anything_but_a_list_of_pods_is_one_line(bad):
    with pytest.raises(AnsibleFilterError, match='takes a list of Pod objects'):
        mig_pending_requests(bad)


def test_told_requests_keep_only_the_pods_that_still_wait():
    told = [{'pod': 'team-a/a', 'requests': {'3g.40gb': 1}}, {'pod': 'team-a/b', 'requests': {'1g.10gb': 1}}]
    pods = [pod('a', {'nvidia.com/mig-3g.40gb': '2'}), pod('b', phase='Running', node_name='n')]
    assert [r['pod'] for r in mig_pending_requests(pods, told)] == ['team-a/a']
    with pytest.raises(AnsibleFilterError, match='told must be a list of requests'):
        mig_pending_requests(pods, {'pod': 'team-a/a'})
