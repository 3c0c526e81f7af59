# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The filter gpufleet.mig.mig_slice_gate: the role's one call, its refusals as one-line filter errors."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.mig.plugins.filter.mig_slice_gate import mig_slice_gate

V1 = 'admissionregistration.k8s.io/v1'
V1BETA1 = 'admissionregistration.k8s.io/v1beta1'


def test_the_served_version_the_renamed_resources_and_both_objects():
    out = mig_slice_gate({V1: False, V1BETA1: True}, time_slicing=[{'name': 'nvidia.com/mig-1g.10gb', 'rename': 'small-gpu'}],
                         namespaces=['team-a'], labels={'gpufleet.mig/role': 'gpu_tenancy'})
    assert out['api_version'] == V1BETA1 and out['resources'] == ['nvidia.com/small-gpu']
    assert [o['kind'] for o in out['objects']] == ['MutatingAdmissionPolicy', 'MutatingAdmissionPolicyBinding']


@pytest.mark.parametrize('found, kwargs, words', [
    ({V1: False, V1BETA1: False}, {}, 'serves no MutatingAdmissionPolicy API'),
    ([V1], {}, 'takes a mapping'),
    ({V1: True}, {'namespaces': 'team-a'}, 'namespaces must be a list'),
    ({V1: True}, {'namespace_selector': ['a']}, 'namespace_selector must be a mapping'),
    ({V1: True}, {'extra_resources': ['gpu']}, 'not a resource name'),
])
def test_refusals_are_one_line(found, kwargs, words):
    with pytest.raises(AnsibleFilterError) as info:
        mig_slice_gate(found, **kwargs)
    assert words in str(info.value) and '\n' not in str(info.value)
