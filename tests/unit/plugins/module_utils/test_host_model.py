# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host's state as the backend reads it: the rules every reader shares (the processes on a GPU)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpufleet.mig.plugins.module_utils.planning._host_model import (
    NOBODY,
    Gpu,
    GpuHolders,
    Host,
    HostHolders,
)
from ansible_collections.gpufleet.mig.tests.unit.plugins.module_utils.catalogs import MIG_MODELS, model_gpu, read_simulated_host


def _ci(ci_id, start, pids):
    return {'id': ci_id, 'profile': '1c.2g.20gb', 'placement': {'start': start, 'size': 1},
            'processes': [{'pid': pid, 'used_memory_mib': 10} for pid in pids]}


def _gi(gi_id, start, cis):
    return {'id': gi_id, 'profile': '2g.20gb', 'placement': {'start': start, 'size': 2}, 'compute_instances': cis}


# MIG on: two GPU instances, one with a process on each of its compute instances (pid 7 on both), one idle.
MIG_ON = Gpu.from_dict({'index': 0, 'uuid': 'GPU-a', 'processes': [],
                        'gpu_instances': [_gi(3, 0, [_ci(0, 0, [7, 5]), _ci(1, 1, [7])]), _gi(4, 2, [_ci(0, 0, [])]), _gi(5, 4, [])]})
# MIG off: NVML lists the processes on the GPU itself.
MIG_OFF = Gpu.from_dict({'index': 1, 'uuid': 'GPU-b', 'processes': [{'pid': 9, 'used_memory_mib': 1}, {'pid': 2, 'used_memory_mib': 1}],
                         'gpu_instances': []})


def test_instance_pids_are_those_of_its_compute_instances_each_once():
    assert [gi.pids() for gi in MIG_ON.gpu_instances] == [[5, 7], [], []]
    assert [gi.busy for gi in MIG_ON.gpu_instances] == [True, False, False]


def test_gpu_processes_name_the_instance_each_runs_on_and_the_gpu_itself_with_mig_off():
    assert MIG_ON.process_places() == [(3, 7), (3, 5), (3, 7)]
    assert MIG_OFF.process_places() == [(None, 9), (None, 2)]
    # Both at once (a GPU whose processes NVML lists on the GPU and on MIG devices): the GPU's own first.
    both = Gpu.from_dict(dict(MIG_ON.as_dict(), processes=[{'pid': 1, 'used_memory_mib': 1}]))
    assert both.process_places() == [(None, 1), (3, 7), (3, 5), (3, 7)]


def test_gpu_and_host_pids_are_sorted_and_each_once():
    assert MIG_ON.pids() == [5, 7] and MIG_ON.busy
    assert MIG_OFF.pids() == [2, 9] and MIG_OFF.busy
    assert Host(gpus=(MIG_ON, MIG_OFF)).pids() == [2, 5, 7, 9]
    assert Host().pids() == []
    assert not Gpu.from_dict({'index': 2, 'gpu_instances': [_gi(1, 0, [_ci(0, 0, [])])]}).busy


def test_facts_data_without_processes_reads_as_idle():
    """The demand planner reads nvidia_mig_facts' output, whose entries may leave the lists out."""
    gpu = Gpu.from_dict({'index': 0, 'gpu_instances': [{'id': 1, 'profile': '1g.10gb', 'placement': {'start': 0, 'size': 1},
                                                        'compute_instances': [{'id': 0, 'profile': '1g.10gb',
                                                                               'placement': {'start': 0, 'size': 1}}]}]})
    assert gpu.pids() == [] and gpu.process_places() == [] and not gpu.busy


@pytest.mark.parametrize('mig', ['enabled', 'disabled'])
@pytest.mark.parametrize('model', MIG_MODELS)
def test_the_plain_data_reads_back_as_the_same_model(model, mig):
    """Facts are the model's plain data; the controller reads them back (demand planner): nothing may be lost."""
    smallest = model_gpu(model).profiles[0]
    seeded = [{'profile': smallest['name'], 'start': smallest['placements'][-1]['start'],
               'compute_instances': [{'profile': smallest['name'], 'start': 0, 'pids': [77]}]}] if mig == 'enabled' else []
    host = read_simulated_host([{'model': model, 'mig': {'current': mig, 'pending': mig}, 'gpu_instances': seeded}])
    assert Host.from_dict(host.as_dict()) == host
    gpu = host.gpus[0].as_dict()
    assert ('placements_without_mig' in gpu) is (mig == 'disabled')
    assert [gi['busy'] for gi in gpu['gpu_instances']] == [True] * len(seeded)
    for gi in gpu['gpu_instances']:
        assert sorted(gi) == ['busy', 'compute_instances', 'id', 'placement', 'profile', 'profile_id']
        assert all(sorted(ci) == ['id', 'mig_index', 'placement', 'processes', 'profile', 'profile_id', 'uuid']
                   for ci in gi['compute_instances'])


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


def test_the_plain_data_is_a_copy_and_the_model_keys_a_dict():
    gpu = model_gpu('A30')
    facts = gpu.as_dict()
    facts['profiles'][0]['placements'].clear()
    assert model_gpu('A30').profiles[0]['placements'], 'changing the facts changed the shared model'
    assert {gpu: 'a30'}[Gpu.from_dict(gpu.as_dict())] == 'a30'
