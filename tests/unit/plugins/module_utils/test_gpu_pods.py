# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which pods of a node use its GPUs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils.k8s._gpu_pods import gpu_pods


def test_gpu_pods_selects_gpu_and_mig_requests_only():
    def pod(name, resources, owner=None, phase='Running', init=False):
        container = {'name': 'c', 'resources': resources}
        spec = {'initContainers': [container], 'containers': []} if init else {'containers': [container]}
        meta = {'name': name, 'namespace': 'team', 'uid': 'uid-' + name}
        if owner:
            meta['ownerReferences'] = [{'kind': owner}]
        return {'metadata': meta, 'spec': spec, 'status': {'phase': phase}}
    pods = [
        pod('train', {'limits': {'nvidia.com/gpu': 1}}),
        pod('infer', {'requests': {'nvidia.com/mig-1g.10gb': 1}}, owner='ReplicaSet'),
        pod('init', {'requests': {'nvidia.com/mig-3g.40gb': 1}}, init=True),
        pod('cpu', {'requests': {'cpu': 1}}),
        pod('plugin', {'limits': {'nvidia.com/gpu': 1}}, owner='DaemonSet'),
        pod('done', {'limits': {'nvidia.com/gpu': 1}}, phase='Succeeded'),
        # Time-slicing's renameByDefault names are GPU resources; the Network Operator's are not.
        pod('shared', {'limits': {'nvidia.com/mig-1g.10gb.me.shared': 1}}),
        pod('sliced', {'requests': {'nvidia.com/gpu.shared': 1}}),
        pod('nic', {'limits': {'nvidia.com/hostdev': 1, 'nvidia.com/rdma_shared_device_a': 1}}),
    ]
    assert [p['name'] for p in gpu_pods(pods)] == ['infer', 'init', 'shared', 'sliced', 'train']
    # Only the named ones (by namespace/name, or by pod uid when only a process's cgroup named it), whatever
    # they request (the host saw them on an instance that goes); still no DaemonSet pod, nor one that is done.
    assert [p['name'] for p in gpu_pods(pods, ['team/infer', 'uid:uid-train', 'team/plugin', 'other/init', 'team/done'])] == [
        'infer', 'train']
    assert [p['name'] for p in gpu_pods(pods, ['uid:uid-cpu'])] == ['cpu']
    assert gpu_pods(pods, []) == []
