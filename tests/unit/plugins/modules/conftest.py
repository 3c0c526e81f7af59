# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pods for the module tests: a real gRPC pod-resources server, and the MIG devices pods hold."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import shutil
import tempfile

import pytest


@pytest.fixture
def host_paths(tmp_path):
    """The folders nvidia_mig_layout writes to, under tmp_path (no systemd)."""
    root = tmp_path / 'root'
    return {
        'config_dir': str(root / 'etc' / 'gpufleet-mig'),
        'lib_dir': str(root / 'usr' / 'local' / 'lib' / 'gpufleet-mig'),
        'bin_dir': str(root / 'usr' / 'local' / 'sbin'),
        'systemd_dir': str(root / 'etc' / 'systemd' / 'system'),
        'metrics_dir': str(root / 'metrics'),
        'systemd': False,
    }


@pytest.fixture
def kubelet_with():
    """A real gRPC pod-resources server answering ``List`` with the given allocations; returns its socket path."""
    from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._pod_resources_wire import encode_list_response
    from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.test_pod_resources import FakeKubelet
    servers = []
    # Short: a unix socket path must fit in 108 bytes, which pytest's tmp_path may not.
    directory = tempfile.mkdtemp(prefix='podres-')

    def start(allocations):
        own = tempfile.mkdtemp(dir=directory)
        server = FakeKubelet(own, list_answer=encode_list_response(allocations))
        servers.append(server)
        return server.path
    yield start
    for server in servers:
        server.stop()
    shutil.rmtree(directory)


def mig_uuids(run_module, gpu=0):
    """{start: MIG device UUID of the GPU instance's first compute instance} of one GPU, read through the facts."""
    from ansible_collections.gpufleet.mig.plugins.modules import nvidia_mig_facts
    facts, failed = run_module(nvidia_mig_facts.main, {'pod_resources': 'off'})
    assert not failed, facts
    return dict((gi['placement']['start'], gi['compute_instances'][0]['uuid'])
                for gi in facts['ansible_facts']['nvidia_mig']['gpus'][gpu]['gpu_instances'])


def pods_on(uuids, starts, resource='nvidia.com/mig-1g.10gb'):
    """Pods team/p<start>, each holding the instance at that start (encode_list_response's form)."""
    return [{'namespace': 'team', 'pod': 'p%d' % start,
             'containers': [{'name': 'c', 'devices': {resource: [uuids[start]]}}]} for start in starts]
