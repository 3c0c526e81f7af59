# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's state as the backend reads it: the rules every reader shares (the processes on a GPU)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import (
    NOBODY,
    GpuHolders,
    HostHolders,
    gpu_pids,
    gpu_processes,
    host_pids,
    instance_pids,
)


def _ci(ci_id, start, pids):
    return {'id': ci_id, 'profile': '1c.2g.20gb', 'placement': {'start': start, 'size': 1},
            'processes': [{'pid': pid, 'used_memory_mib': 10} for pid in pids]}


def _gi(gi_id, start, cis):
    return {'id': gi_id, 'profile': '2g.20gb', 'placement': {'start': start, 'size': 2}, 'compute_instances': cis}


# MIG on: two GPU instances, one with a process on each of its compute instances (pid 7 on both), one idle.
MIG_ON = {'index': 0, 'uuid': 'GPU-a', 'processes': [],
          'gpu_instances': [_gi(3, 0, [_ci(0, 0, [7, 5]), _ci(1, 1, [7])]), _gi(4, 2, [_ci(0, 0, [])]), _gi(5, 4, [])]}
# MIG off: NVML lists the processes on the GPU itself.
MIG_OFF = {'index': 1, 'uuid': 'GPU-b', 'processes': [{'pid': 9, 'used_memory_mib': 1}, {'pid': 2, 'used_memory_mib': 1}],
           'gpu_instances': []}


def test_instance_pids_are_those_of_its_compute_instances_each_once():
    assert instance_pids(MIG_ON['gpu_instances'][0]) == [5, 7]
    assert instance_pids(MIG_ON['gpu_instances'][1]) == []
    assert instance_pids(MIG_ON['gpu_instances'][2]) == []


def test_gpu_processes_name_the_instance_each_runs_on_and_the_gpu_itself_with_mig_off():
    assert gpu_processes(MIG_ON) == [(3, 7), (3, 5), (3, 7)]
    assert gpu_processes(MIG_OFF) == [(None, 9), (None, 2)]
    # Both at once (a GPU whose processes NVML lists on the GPU and on MIG devices): the GPU's own first.
    both = dict(MIG_ON, processes=[{'pid': 1, 'used_memory_mib': 1}])
    assert gpu_processes(both) == [(None, 1), (3, 7), (3, 5), (3, 7)]


def test_gpu_and_host_pids_are_sorted_and_each_once():
    assert gpu_pids(MIG_ON) == [5, 7]
    assert gpu_pids(MIG_OFF) == [2, 9]
    assert host_pids({'gpus': [MIG_ON, MIG_OFF]}) == [2, 5, 7, 9]
    assert host_pids({'gpus': []}) == []


def test_facts_data_without_processes_reads_as_idle():
    """The demand planner reads nvidia_mig_facts' output, whose entries may leave the lists out."""
    assert instance_pids({'id': 1, 'profile': '1g.10gb', 'placement': {'start': 0, 'size': 1}}) == []
    assert gpu_processes({'index': 0, 'gpu_instances': [{'id': 1, 'compute_instances': [{'id': 0}]}]}) == []


def test_gpu_holders_name_the_pods_of_the_whole_gpu_and_of_each_instance():
    holders = GpuHolders(gpu=('ml/whole',), instances={3: ('ml/b', 'ml/a'), 4: ('ml/a',)}, index_pods=('ml/b',))
    assert holders.of_instance(3) == ('ml/b', 'ml/a') and holders.of_instance(5) == ()
    assert holders.pods() == ['ml/a', 'ml/b', 'ml/whole']
    assert holders.as_dict() == {'gpu': ['ml/whole'], 'instances': {3: ['ml/b', 'ml/a'], 4: ['ml/a']}, 'index_pods': ['ml/b']}


def test_a_gpu_no_pod_holds_reads_as_nobody():
    host = HostHolders({'GPU-a': GpuHolders(instances={3: ('ml/a',)})})
    assert host.of('GPU-a').of_instance(3) == ('ml/a',)
    assert host.of('GPU-b') is NOBODY and NOBODY.pods() == [] and NOBODY.of_instance(3) == () and NOBODY.index_pods == ()
    assert host.as_dict() == {'GPU-a': {'gpu': [], 'instances': {3: ['ml/a']}, 'index_pods': []}}
    assert HostHolders().of('GPU-a') is NOBODY
