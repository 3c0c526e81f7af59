# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one definition of a GPU resource: NVIDIA's device plugin names, shared and renamed ones included."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._gpu_resources import (
    is_gpu_resource,
    is_shared_resource,
    profile_of_resource,
    resource_of_profile,
    strip_replica,
)
from ansible_collections.gpufleet.mig.plugins.module_utils.planning._mig_profile import ProfileError

# (resource, profile in gpufleet's grammar or None for a whole GPU, shared)
GPU_RESOURCES = [
    ('nvidia.com/gpu', None, False),
    ('nvidia.com/gpu.shared', None, True),
    ('nvidia.com/mig-1g.10gb', '1g.10gb', False),
    ('nvidia.com/mig-3g.40gb', '3g.40gb', False),
    ('nvidia.com/mig-7g.141gb', '7g.141gb', False),
    ('nvidia.com/mig-1g.10gb.me', '1g.10gb+me', False),
    ('nvidia.com/mig-1g.24gb.me.all', '1g.24gb+me.all', False),
    ('nvidia.com/mig-1g.24gb-me', '1g.24gb-me', False),
    ('nvidia.com/mig-1g.24gb.gfx', '1g.24gb+gfx', False),
    ('nvidia.com/mig-1g.10gb.shared', '1g.10gb', True),
    ('nvidia.com/mig-1g.10gb.me.shared', '1g.10gb+me', True),
    ('nvidia.com/mig-1g.24gb.me.all.shared', '1g.24gb+me.all', True),
    ('nvidia.com/mig-1g.24gb-me.shared', '1g.24gb-me', True),
    ('nvidia.com/mig-2g.48gb.gfx.shared', '2g.48gb+gfx', True),
]

NOT_GPU_RESOURCES = [
    'cpu', 'memory', 'pods', 'ephemeral-storage', 'hugepages-2Mi',
    'nvidia.com/hostdev', 'nvidia.com/rdma_shared_device_a', 'nvidia.com/sriov_net',
    'nvidia.com/gpu.deploy.device-plugin', 'nvidia.com/gpu.product', 'nvidia.com/gpu.shared.shared',
    'nvidia.com/gpux', 'nvidia.com/gpu-shared', 'example.com/gpu', 'amd.com/gpu', 'NVIDIA.COM/GPU',
    'nvidia.com/mig-', 'nvidia.com/mig-1g', 'nvidia.com/mig-1g.10gb+me', 'nvidia.com/mig-1g.10gb.me.',
    'nvidia.com/mig-1g.10gb.foo', 'nvidia.com/mig-1g.10gb.shared.me', 'nvidia.com/mig-0g.10gb',
    'nvidia.com/mig-01g.10gb', 'nvidia.com/mig-1g.010gb', 'nvidia.com/mig-1c.3g.40gb', 'nvidia.com/mig.config',
    'nvidia.com/mig-1g.10gb ', ' nvidia.com/gpu', 'nvidia.com/gpu\n', '', None, 1, ['nvidia.com/gpu'],
]


@pytest.mark.parametrize('resource, profile, shared', GPU_RESOURCES)
def test_gpu_resources_and_their_profiles(resource, profile, shared):
    assert is_gpu_resource(resource) is True
    assert profile_of_resource(resource) == profile
    assert is_shared_resource(resource) is shared
    # The two directions agree: the profile names the resource back.
    assert resource_of_profile(profile, shared=shared) == resource


@pytest.mark.parametrize('name', NOT_GPU_RESOURCES)
def test_everything_else_is_no_gpu_resource(name):
    assert is_gpu_resource(name) is False
    assert profile_of_resource(name) is None
    assert is_shared_resource(name) is False


@pytest.mark.parametrize('profile, resource', [
    ('1g.10gb', 'nvidia.com/mig-1g.10gb'),
    ('MIG 1g.10gb+me', 'nvidia.com/mig-1g.10gb.me'),   # NVML's name of the profile
    ('1c.1g.10gb', 'nvidia.com/mig-1g.10gb'),          # a full-size compute instance
    (None, 'nvidia.com/gpu'),
])
def test_resource_of_profile_takes_nvml_and_mig_parted_spellings(profile, resource):
    assert resource_of_profile(profile) == resource
    assert resource_of_profile(profile, shared=True) == resource + '.shared'


@pytest.mark.parametrize('profile, message', [
    ('1c.3g.40gb', 'advertises only full-size compute instances'),
    ('1g', 'invalid MIG profile'),
    ('3g.40gb+foo', 'invalid MIG profile'),
    (7, 'must be a string'),
])
def test_resource_of_profile_refuses_what_the_plugin_never_advertises(profile, message):
    with pytest.raises(ProfileError, match=message):
        resource_of_profile(profile)


@pytest.mark.parametrize('device_id, bare', [
    ('MIG-4f8a6c2e-0b1d-5e7f-9a3c-1d2e3f4a5b6c::3', 'MIG-4f8a6c2e-0b1d-5e7f-9a3c-1d2e3f4a5b6c'),
    ('0:4::12', '0:4'), ('GPU-1::0', 'GPU-1'), ('1', '1'), ('0:4', '0:4'), ('x::y', 'x::y'), ('a::1::2', 'a::1'),
])
def test_strip_replica_gives_the_shared_device_back(device_id, bare):
    assert strip_replica(device_id) == bare
